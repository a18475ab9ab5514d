"""`crashproof certify`: the controller. Worlds live in worker processes (one per job); the controller
plans the matrix from a fault-free census, hands out cases, survives worker crashes, and writes the report."""

from __future__ import annotations

import atexit
import hashlib
import json
import multiprocessing
import os
import platform
import random
import shlex
import sys
import tempfile
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from barriers import CATALOG
from reports import report as reports
from reports.render import render as render_all
from scenarios.matrix import expand, select
from scenarios.model import Scenario, load_catalog

from . import shard
from .faults import FAULTS
from .forkserver import module_command
from .implementation import LAUNCHERS, set_launcher
from .runner import REFERENCE_COMMAND, CaseOutcome, CasePlan, run_case

SUITE = "crashproof-barrier-suite-1"


# -- worker side ----------------------------------------------------------------------------------------------

_world = None
_scenarios: dict[str, Scenario] = {}


def _worker_init(mode: dict) -> None:
    global _world, _scenarios
    from .world import ExternalWorld, World, docker_world
    set_launcher(mode.get("launcher", "fork-server"))
    if mode.get("dsn"):
        _world = ExternalWorld(mode["dsn"], network_optional=True)
    elif mode.get("docker"):
        _world = docker_world(network_optional=True)
    else:
        _world = World("certify", network_optional=True)
    _world.up()
    atexit.register(_world.down)
    _scenarios = {s.name: s for s in load_catalog()}


def _worker_run(plan: CasePlan, command: str, log_dir: str, baseline: dict | None,
                migrations: str | None = None) -> dict:
    outcome = run_case(_world, _scenarios[plan.scenario], plan, command, Path(log_dir), baseline,
                       Path(migrations) if migrations else None)
    return {"case": outcome.to_json(), "picture": outcome.picture, "implementation": outcome.implementation}


def _worker_environment() -> dict:
    return {**_world.components(), "capabilities_missing": dict(_world.capabilities.missing)}


# -- controller side ------------------------------------------------------------------------------------------

def default_jobs() -> int:
    """Worlds side by side by default: one per core, and one more. A case also waits (commits, a crashed
    server's restart, its implementation's start and exit), and the extra world fills those waits: on 2
    cores the full matrix took 113 and 115 s with 3 jobs against 122 and 126 s with 2, run alternately."""
    return (os.cpu_count() or 1) + 1


@dataclass
class Options:
    command: str = REFERENCE_COMMAND
    report_dir: Path = Path("report")
    jobs: int = 1
    scenario: str | None = None
    barrier: str | None = None
    fault: str | None = None
    repeat: int = 1
    seed: int = 0
    dsn: str | None = None
    docker: bool = False
    launcher: str = "fork-server"
    shard: tuple[int, int] | None = None  # (I, N): run only the I-th of N slices (testhost/shard.py)
    progress: Callable[[str], None] = field(default=lambda line: print(line, file=sys.stderr, flush=True))


class Progress:
    """Cases done, failures so far and time left, on one refreshed line (or every tenth when not a terminal)."""

    def __init__(self, total: int, emit: Callable[[str], None], label: str):
        self.total, self.emit, self.label = total, emit, label
        self.done = self.failed = 0
        self.started = time.monotonic()
        self.tty = sys.stderr.isatty()
        self._last_tenth = -1

    def update(self, verdict: str) -> None:
        self.done += 1
        self.failed += verdict in ("fail", "error")
        elapsed = time.monotonic() - self.started
        left = elapsed / self.done * (self.total - self.done)
        width = 30
        bar = "=" * int(width * self.done / max(self.total, 1))
        line = (f"{self.label} [{bar:<{width}}] {self.done}/{self.total} cases, {self.failed} failed, "
                f"~{int(left)}s left")
        tenth = int(10 * self.done / max(self.total, 1))
        if self.tty:
            print("\r" + line, end="" if self.done < self.total else "\n", file=sys.stderr, flush=True)
        elif tenth != self._last_tenth or self.done == self.total:
            self._last_tenth = tenth
            self.emit(line)


def _error_case(plan: CasePlan, reason: str) -> dict:
    return CaseOutcome(plan, "error", reason).to_json()


class Pool:
    """The worker pool of a run, kept across its phases; renewed only when a worker dies."""

    def __init__(self, factory):
        self.factory = factory
        self.executor = factory()

    def renew(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.executor = self.factory()

    def close(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)


def run_cases(pool: Pool, plans: list[tuple[CasePlan, dict | None]], command: str, log_dir: str,
              progress: Progress, worker=None) -> list[dict]:
    """Run every plan; a worker that dies takes only its case with it (verdict error), the pool is renewed."""
    worker = worker or _worker_run
    results: list[dict] = []
    queue = list(plans)
    in_flight: dict = {}
    # When a worker dies every case in flight sees the pool break, and which one killed it cannot be told:
    # each gets one more run, alone, on a fresh pool; only a case that breaks the pool again gets `error`.
    broke_once: set[str] = set()
    while queue or in_flight:
        while queue and len(in_flight) < pool.executor._max_workers * 2:
            plan, baseline = queue[0]
            suspect_running = any(p.id in broke_once for p, _ in in_flight.values())
            if suspect_running or (plan.id in broke_once and in_flight):
                break  # a case under suspicion runs alone, so a second break names it
            queue.pop(0)
            in_flight[pool.executor.submit(worker, plan, command, log_dir, baseline)] = (plan, baseline)
        done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
        broken = False
        for future in done:
            plan, baseline = in_flight.pop(future)
            try:
                result = future.result()
            except BrokenProcessPool:
                broken = True
                if plan.id not in broke_once:
                    broke_once.add(plan.id)
                    queue.insert(0, (plan, baseline))
                    continue
                result = {"case": _error_case(plan, "the worker process running this case died"), "picture": None}
            except Exception as exc:  # noqa: BLE001 - a harness failure is this case's error
                result = {"case": _error_case(plan, f"{type(exc).__name__}: {exc}"), "picture": None}
            results.append({**result, "plan": plan})
            progress.update(result["case"]["verdict"])
        if broken:
            queue[:0] = list(in_flight.values())  # not finished when the pool broke: run them again
            in_flight.clear()
            pool.renew()
    return results


def suite_version(scenarios: list[Scenario]) -> str:
    digest = hashlib.sha256()
    for barrier in CATALOG:
        digest.update(barrier.name.encode())
    for scenario in scenarios:
        digest.update(scenario.source.encode())
    return f"{SUITE}+{digest.hexdigest()[:12]}"


def _validate(options: Options) -> list[Scenario]:
    scenarios = select(load_catalog(), options.scenario)
    if not scenarios:
        raise ValueError(f"no scenario matches {options.scenario!r}")
    if options.barrier and options.barrier not in {b.name for b in CATALOG}:
        raise ValueError(f"no barrier named {options.barrier!r}; see `crashproof barriers`")
    if options.fault and options.fault not in FAULTS:
        raise ValueError(f"no fault named {options.fault!r}; choose from {', '.join(FAULTS)}")
    if options.jobs < 1 or options.repeat < 1:
        raise ValueError("--jobs and --repeat must be at least 1")
    if options.launcher not in LAUNCHERS:
        raise ValueError(f"no launcher named {options.launcher!r}; choose from {', '.join(LAUNCHERS)}")
    return scenarios


def _pool_factory(options: Options):
    mode = {"dsn": options.dsn, "docker": options.docker, "launcher": options.launcher}
    context = multiprocessing.get_context("spawn")
    return lambda: ProcessPoolExecutor(max_workers=options.jobs, mp_context=context, initializer=_worker_init,
                                       initargs=(mode,))


def _census(options: Options, scenarios: list[Scenario], pool: Pool, log_dir: Path):
    """The fault-free run of every scenario: its verdict, the barriers it reaches, its final picture."""
    progress = Progress(len(scenarios), options.progress, "fault-free")
    results = run_cases(pool, [(CasePlan(s.name), None) for s in scenarios], options.command,
                        str(log_dir), progress)
    census = {r["plan"].scenario: r["case"]["barrier_hits"] for r in results}
    plans, skipped = expand(scenarios, census, FAULTS, barrier=options.barrier, fault=options.fault,
                            repeat=options.repeat)
    return results, census, plans, skipped


def _require_reference_barriers(case: dict, reference_hits: dict[str, int]) -> None:
    """A barrier the reference reaches in a scenario must be reached by the implementation too: a planned
    barrier that never fires would leave its faults untested."""
    missing = sorted(set(reference_hits) - set(case["barrier_hits"]))
    check = {"name": "barrier-coverage", "rule": "harness: a planned barrier that never fired makes the run fail",
             "ok": not missing, "rows": len(reference_hits),
             "evidence": [{"not_reached": missing, "reference_reaches": sorted(reference_hits)}] if missing else []}
    case["checks"].append(check)
    if missing and case["verdict"] == "pass":
        case["verdict"], case["reason"] = "fail", "barrier-coverage"


def census(options: Options):
    """The planned matrix and its skipped combinations (for `crashproof scenarios --matrix`)."""
    scenarios = _validate(options)
    log_dir = Path(tempfile.mkdtemp(prefix="crashproof-logs-"))
    pool = Pool(_pool_factory(options))
    try:
        _, _, plans, skipped = _census(options, scenarios, pool, log_dir)
    finally:
        pool.close()
    return plans, skipped


def certify(options: Options) -> tuple[int, dict]:
    started = time.monotonic()
    started_at = datetime.now(timezone.utc).isoformat()
    scenarios = _validate(options)
    if options.dsn:
        from .world import ExternalWorld
        ExternalWorld(options.dsn, network_optional=True).up().down()  # a one-line error before any worker starts
    log_dir = Path(tempfile.mkdtemp(prefix="crashproof-logs-"))
    pool = Pool(_pool_factory(options))
    try:
        environment = pool.executor.submit(_worker_environment).result()
        environment.update({"platform": platform.platform(), "jobs": options.jobs, "cpus": os.cpu_count()})
        census_results, census_hits, plans, skipped = _census(options, scenarios, pool, log_dir)
        plans = shard.select(plans, census_hits, options.shard)
        if options.command != REFERENCE_COMMAND:
            reference = Options(**{**options.__dict__, "command": REFERENCE_COMMAND})
            _, reference_hits, _, _ = _census(reference, scenarios, pool, log_dir)
            for result in census_results:
                _require_reference_barriers(result["case"], reference_hits.get(result["plan"].scenario, {}))
        pictures = {r["plan"].scenario: r["picture"] for r in census_results}
        random.Random(options.seed).shuffle(plans)
        faulted_progress = Progress(len(plans), options.progress, "faulted")
        faulted = run_cases(pool, [(p, pictures.get(p.scenario)) for p in plans], options.command,
                            str(log_dir), faulted_progress)
    finally:
        pool.close()

    reported_census = census_results if options.shard is None or options.shard[0] == 1 else []
    cases = [r["case"] for r in reported_census] + sorted((r["case"] for r in faulted), key=lambda c: c["id"])
    run_problems = []
    if options.scenario is None and options.barrier is None:
        reached = {name for hits in census_hits.values() for name in hits}
        for barrier in CATALOG:
            if barrier.name not in reached:
                run_problems.append(f"barrier {barrier.name} is never reached by any scenario")
    identity = next((r["implementation"] for r in census_results if r.get("implementation")), "")
    fallbacks = sorted({f for c in cases for f in c.get("fallbacks", [])})
    # What actually started the implementation (a fork server that failed falls back to spawning).
    launched = ", ".join(sorted({e["launcher"] for c in cases for e in c["timeline"] if e["event"] == "start"})) or (
        "spawn" if options.launcher == "spawn" or not module_command(shlex.split(options.command)) else "fork-server")
    report = reports.build(
        suite_version=suite_version(scenarios),
        implementation={"command": options.command, "identity": identity, "launcher": launched, "fallbacks": fallbacks,
                        "fallback_note": ("set-up steps the implementation does not offer ran through the reference "
                                          "client over the normative schema: " + ", ".join(fallbacks)) if fallbacks
                        else ""},
        environment=environment,
        run={"started_at": started_at, "duration_s": round(time.monotonic() - started, 2), "seed": options.seed,
             "selection": {"scenario": options.scenario, "barrier": options.barrier, "fault": options.fault,
                           "repeat": options.repeat,
                           "shard": f"{options.shard[0]}/{options.shard[1]}" if options.shard else None},
             "skipped": [s.to_json() for s in skipped], "problems": run_problems, "logs": str(log_dir)},
        cases=cases)
    path = reports.write(report, options.report_dir)
    render_all(options.report_dir)
    summary = report["summary"]
    ok = summary["passed"] == summary["cases"] and not run_problems and summary["cases"] > 0
    print(f"{summary['cases']} cases: {summary['passed']} passed, {summary['failed']} failed, {summary['error']} error, "
          f"{summary['not_run']} not-run in {report['run']['duration_s']:.0f}s; report: {path}")
    for problem in run_problems:
        print(f"run problem: {problem}")
    for case in cases:
        if case["verdict"] != "pass":
            print(f"  {case['verdict']:7} {case['id']}: {case['reason']}")
            for check in case["checks"]:
                if not check["ok"]:
                    print(f"    {check['name']} (rule: {check['rule']})")
                    for row in check["evidence"][:5]:
                        print(f"      {json.dumps(row, default=str)[:400]}")
    return (0 if ok else 1), report
