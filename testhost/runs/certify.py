"""`crashproof certify`: the controller. Worlds live in worker processes (one per job); the controller
plans the matrix from a fault-free census, hands out cases, survives worker crashes, and writes the report."""

from __future__ import annotations

import atexit
import dataclasses
import hashlib
import json
import multiprocessing
import os
import platform
import random
import re
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import resource_tracker
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from functools import partial
from pathlib import Path
from typing import Callable

from barriers import CATALOG, required_of
from reports import counted, diagnosis, report as reports
from reports.render import remove_outputs, render as render_all
from scenarios.matrix import CasePlan, barrier_sequence, expand, matches, patterns, select
from scenarios.instances import format_offset
from scenarios.model import Scenario, load_catalog

from testhost.case.runner import REFERENCE_COMMAND, REFERENCE_ROOT, CaseOutcome, run_case
from testhost.errors import TestHostError
from testhost.faults.catalog import FAULTS
from testhost.impl import implementation
from testhost.impl import provenance
from testhost.impl.forkserver import module_command
from testhost.impl.implementation import LAUNCHERS, set_launcher

from . import shard

SUITE = "crashproof-barrier-suite-1"
SCHEMA_STAGE_ID = "schema-stage"  # the id of the schema stage's case (testhost/runs/schema_stage.py CASE_ID)
# The schema-version stage's case (testhost/runs/schema_version.py CASE_ID): run beside the fault-free cases whenever
# the --scenario filter matches its id (every run without one), as the pseudo-scenario it is named after.
from .schema_version import CASE_ID as SCHEMA_VERSION_ID  # noqa: E402


def schema_version_plans(scenario_filter, cases: list[str] = ()) -> list[CasePlan]:
    """The schema-version stage's plan when the --scenario filter selects it (and, with --case, one names it)."""
    named = not cases or any(case_id.strip() == SCHEMA_VERSION_ID for case_id in cases)
    return [CasePlan(SCHEMA_VERSION_ID)] if named and matches(SCHEMA_VERSION_ID, scenario_filter) else []


def _stage_plans(options: "Options") -> list[CasePlan]:
    """The schema-version stage's plan when this run selects it (a team's own catalog alone is its cases, no stage)."""
    builtin = not options.catalog or options.with_builtin
    return schema_version_plans(options.scenario, options.cases) if builtin else []


def schema_stage_plans(scenario_filter) -> list[CasePlan]:
    """The schema stage as a case of `crashproof mutants` (a mutant's own migrations, or the normative schema for
    the control) when the --scenario filter selects its id; certify runs it before the cases instead."""
    return [CasePlan(SCHEMA_STAGE_ID)] if matches(SCHEMA_STAGE_ID, scenario_filter) else []


# -- worker side ----------------------------------------------------------------------------------------------

_world = None
_scenarios: dict[str, Scenario] = {}


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _worker_abort(signum: int, _frame) -> None:
    """A stop signal (from the controller, or from a terminal to the whole group): kill every implementation
    process group and the world's servers, remove the world's folder, and exit without finishing the case."""
    for number in STOP_SIGNALS:
        signal.signal(number, signal.SIG_IGN)
    try:
        implementation.kill_all()
        if _world is not None:
            _world.kill()
    finally:
        os._exit(128 + signum)


def _worker_init(mode: dict) -> None:
    global _world, _scenarios
    for number in STOP_SIGNALS:
        signal.signal(number, _worker_abort)
    from testhost.world.docker_world import docker_world
    from testhost.world.worlds import ExternalWorld, World
    set_launcher(mode.get("launcher", "fork-server"))
    if mode.get("dsn"):
        _world = ExternalWorld(mode["dsn"], network_optional=True)
    elif mode.get("docker"):
        _world = docker_world(network_optional=True)
    else:
        _world = World("certify", network_optional=True)
    _world.up()
    atexit.register(_world.down)
    _scenarios = {s.name: s for s in load_catalog(mode.get("catalog", []), mode.get("with_builtin", False))}


def _worker_run(plan: CasePlan, command: str, log_dir: str, baseline: dict | None,
                migrations: str | None = None, clock_offset_s: int | None = None,
                instance_commands: bool = True, impl_cwd: str | None = None) -> dict:
    if plan.scenario == SCHEMA_VERSION_ID:
        from .schema_version import run_with_hello
        case, hello = run_with_hello(_world, command, Path(log_dir))
        return {"case": case, "baseline": None, "implementation": hello.get("implementation", "")}
    if plan.scenario == SCHEMA_STAGE_ID:
        return {"case": _worker_schema_stage(migrations), "baseline": None, "implementation": ""}
    outcome = run_case(_world, _scenarios[plan.scenario], plan, command, Path(log_dir), baseline,
                       Path(migrations) if migrations else None,
                       timedelta(seconds=clock_offset_s) if clock_offset_s is not None else None, instance_commands,
                       impl_cwd)
    return {"case": outcome.to_json(), "baseline": outcome.baseline, "implementation": outcome.implementation}


def _worker_build_stage(command: str, log_dir: str, cwd: str | None, migrations: str | None) -> dict:
    from testhost.impl.build_stage import run_build_stage
    return run_build_stage(_world, command, Path(log_dir), cwd, Path(migrations) if migrations else None)


def _worker_schema_stage(migrations: str | None) -> dict:
    from .schema_stage import run_schema_stage
    return run_schema_stage(_world, Path(migrations) if migrations else None)


def _case_worker(options: "Options"):
    """The worker running one case, on the implementation's own schema when it ships one, with the OS clock skew
    of --impl-clock-offset; the reference's census beside another --impl runs no instance's own command, and starts
    the reference beside the harness's own package."""
    if (options.migrations is None and options.impl_clock_offset is None and options.instance_commands
            and options.impl_cwd is None):
        return _worker_run
    offset = options.impl_clock_offset
    return partial(_worker_run, migrations=str(options.migrations) if options.migrations else None,
                   clock_offset_s=int(offset.total_seconds()) if offset is not None else None,
                   instance_commands=options.instance_commands, impl_cwd=options.impl_cwd)


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
    scenario: str | list[str] | None = None  # globs; several values and comma-separated lists are allowed
    barrier: str | list[str] | None = None
    fault: str | list[str] | None = None
    cases: list[str] = field(default_factory=list)  # case ids, as a report names them
    fail_fast: bool = False
    catalog: list[Path] = field(default_factory=list)  # scenario folders instead of the built-in catalog
    with_builtin: bool = False  # ... or besides it
    repeat: int = 1
    seed: int = 0
    dsn: str | None = None
    docker: bool = False
    launcher: str = "fork-server"
    migrations: Path | None = None  # the implementation's own schema; None: the reference's
    shard: tuple[int, int] | None = None  # (I, N): run only the I-th of N slices (testhost/runs/shard.py)
    impl_clock_offset: timedelta | None = None  # every implementation process's OS clock skewed by this much
    instance_commands: bool = True  # a scenario's [instances.X] command replaces `command` for that instance
    impl_cwd: str | None = None  # where the implementation starts (None: this process's working directory)
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
        line = (f"{self.label} [{bar:<{width}}] {self.done}/{counted(self.total, 'case')}, {self.failed} failed, "
                f"~{int(left)}s left")
        tenth = int(10 * self.done / max(self.total, 1))
        if self.tty:
            print("\r" + line, end="" if self.done < self.total else "\n", file=sys.stderr, flush=True)
        elif tenth != self._last_tenth or self.done == self.total:
            self._last_tenth = tenth
            self.emit(line)


def _error_case(plan: CasePlan, reason: str) -> dict:
    return CaseOutcome(plan, "error", reason).to_json()


def _not_run_case(plan: CasePlan, reason: str) -> dict:
    return CaseOutcome(plan, "not-run", reason).to_json()


class RunStopped(Exception):
    """The run stops before its end: a stop signal (signum) or --fail-fast (signum None)."""

    def __init__(self, signum: int | None = None, why: str = "", harness: bool = False):
        super().__init__(why or (signal.Signals(signum).name if signum else "stopped"))
        self.signum = signum
        self.why = why
        self.harness = harness  # the harness failed (exit 3), not the implementation
        self.unfinished: list[tuple[CasePlan, str]] = []  # plans not finished, with why


def _harness_result(future, what: str):
    """A controller step's result; a worker that died or an unexpected exception stops the run as the harness's
    failure (a one-line error and a partial report, not a traceback). A one-line error of its own passes."""
    try:
        return future.result()
    except TestHostError:
        raise
    except BrokenProcessPool:
        raise RunStopped(why=f"the harness failed: the worker process died during {what}", harness=True) from None
    except Exception as exc:  # noqa: BLE001 - reported in one line, the run stops
        raise RunStopped(why=f"the harness failed during {what}: {type(exc).__name__}: {exc}", harness=True) from None


class Pool:
    """The worker pool of a run, kept across its phases; renewed only when a worker dies."""

    def __init__(self, factory):
        self.factory = factory
        self.executor = factory()

    def renew(self) -> None:
        self._let_go(self.executor)
        self.executor = self.factory()

    def close(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)

    def _workers(self) -> list:
        return list((getattr(self.executor, "_processes", None) or {}).values())

    def terminate(self) -> None:
        """SIGTERM every worker: each kills its implementations and its world, then exits."""
        for worker in self._workers():
            try:
                os.kill(worker.pid, signal.SIGTERM)
            except (ProcessLookupError, TypeError):
                pass

    def abort(self, timeout: float = 60.0) -> None:
        """Stop every worker now and wait for each to have torn its world down."""
        workers = self._workers()
        self.terminate()
        deadline = time.monotonic() + timeout
        for worker in workers:
            worker.join(max(0.0, deadline - time.monotonic()))
            if worker.is_alive():
                worker.kill()  # its servers die with it (parent-death signal); nothing else is left to ask
                worker.join(5)
        self._let_go(self.executor)

    @staticmethod
    def _let_go(executor, timeout: float = 10.0) -> None:
        """Shut an executor down without waiting for its work, but for its manager thread: that thread closes the
        executor's wake-up pipe as it ends, and one still ending when the interpreter exits races the exit hook's
        write to that pipe (CPython 3.11: a `Bad file descriptor` traceback after a run stopped cleanly)."""
        manager = getattr(executor, "_executor_manager_thread", None)  # shutdown() forgets it
        executor.shutdown(wait=False, cancel_futures=True)
        if manager is not None:
            manager.join(timeout)


class StopSignals:
    """While armed, a stop signal (SIGTERM, SIGINT, SIGHUP) raises RunStopped in the main thread; a second one
    forces the exit at once. Installed only in the main thread; the previous handlers come back on exit."""

    def __init__(self):
        self.signum: int | None = None
        self.armed = False
        self.pool: Pool | None = None  # told to stop its workers when a second signal forces the exit
        self._previous: dict = {}

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            # multiprocessing's resource tracker ignores SIGINT and SIGTERM but dies of a SIGHUP sent to the
            # group, and one started again knows nothing of the first's resources: start it with SIGHUP ignored.
            hangup = signal.signal(signal.SIGHUP, signal.SIG_IGN)
            try:
                resource_tracker.ensure_running()
            finally:
                signal.signal(signal.SIGHUP, hangup)
            for number in STOP_SIGNALS:
                self._previous[number] = signal.signal(number, self._handle)
        return self

    def __exit__(self, *exc_info) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)

    def _handle(self, signum: int, _frame) -> None:
        if self.signum is not None:
            print(f"crashproof: second signal ({signal.Signals(signum).name}): exiting now, without clean-up",
                  file=sys.stderr, flush=True)
            if self.pool is not None:
                self.pool.terminate()  # each worker still kills its own world and implementations
            os._exit(128 + signum)
        self.signum = signum
        if self.armed:
            raise RunStopped(signum)

    def check(self) -> None:
        """Raise RunStopped when a signal came while the handler could not raise."""
        if self.signum is not None:
            raise RunStopped(self.signum)


_NO_SIGNALS = StopSignals()


def run_cases(pool: Pool, plans: list[tuple[CasePlan, dict | None]], command: str, log_dir: str,
              progress: Progress, worker=None, results: list[dict] | None = None, fail_fast: bool = False,
              signals: StopSignals = _NO_SIGNALS) -> list[dict]:
    """Run every plan; a worker that dies takes only its case with it (verdict error), the pool is renewed.

    Finished cases go to `results` as they finish. A stop (a signal, or the first failed case with fail_fast)
    raises RunStopped naming the plans not finished; the caller aborts the pool."""
    worker = worker or _worker_run
    results = [] if results is None else results
    queue = list(plans)
    in_flight: dict = {}
    # When a worker dies every case in flight sees the pool break, and which one killed it cannot be told:
    # each gets one more run, alone, on a fresh pool; only a case that breaks the pool again gets `error`.
    broke_once: set[str] = set()
    try:
        while queue or in_flight:
            signals.check()
            while queue and len(in_flight) < pool.executor._max_workers * 2:
                plan, baseline = queue[0]
                suspect_running = any(p.id in broke_once for p, _ in in_flight.values())
                if suspect_running or (plan.id in broke_once and in_flight):
                    break  # a case under suspicion runs alone, so a second break names it
                queue.pop(0)
                in_flight[pool.executor.submit(worker, plan, command, log_dir, baseline)] = (plan, baseline)
            done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
            signals.check()  # a worker ended by a stop signal is no crash to retry
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
                    result = {"case": _error_case(plan, "the worker process running this case died"),
                              "baseline": None}
                except Exception as exc:  # noqa: BLE001 - a harness failure is this case's error
                    result = {"case": _error_case(plan, f"{type(exc).__name__}: {exc}"), "baseline": None}
                results.append({**result, "plan": plan})
                progress.update(result["case"]["verdict"])
                if fail_fast and result["case"]["verdict"] in ("fail", "error"):
                    raise RunStopped(why=f"--fail-fast: {plan.id} ended {result['case']['verdict']}")
            if broken:
                queue[:0] = list(in_flight.values())  # not finished when the pool broke: run them again
                in_flight.clear()
                pool.renew()
    except RunStopped as stop:
        stop.unfinished += [(p, "abandoned: the run stopped while this case ran") for p, _ in in_flight.values()]
        stop.unfinished += [(p, "not run: the run stopped before this case") for p, _ in queue]
        raise
    return results


def suite_version(scenarios: list[Scenario]) -> str:
    """The barrier catalog and the scenarios that ran (names and sources), hashed: whatever catalog it was."""
    digest = hashlib.sha256()
    for barrier in CATALOG:
        digest.update(barrier.name.encode())
    for scenario in scenarios:
        digest.update(scenario.source.encode())
    return f"{SUITE}+{digest.hexdigest()[:12]}"


_CASE_ID = re.compile(r"^(?P<scenario>[^/#]+)(?:/(?P<barrier>[^/#]+)/(?P<fault>[^/#]+)/(?P<hit>[0-9]+))?"
                      r"(?:#(?P<repeat>[0-9]+))?$")


def parse_case_id(case_id: str) -> CasePlan:
    """A case id as a report names it: SCENARIO, or SCENARIO/BARRIER/FAULT/HIT, optionally #REPEAT."""
    match = _CASE_ID.match(case_id.strip())
    if not match:
        raise ValueError(f"--case {case_id!r} is not a case id; ids look like at-single or "
                         "at-single/schedule-link-after-commit/kill/1 (as report.json names them)")
    parts = match.groupdict()
    if parts["hit"] is not None and int(parts["hit"]) < 1:
        raise ValueError(f"--case {case_id!r}: the hit counts from 1")
    repeat = int(parts["repeat"] or 1)
    if repeat < 1:
        raise ValueError(f"--case {case_id!r}: the repeat counts from 1")
    return CasePlan(parts["scenario"], parts["barrier"], parts["fault"],
                    int(parts["hit"]) if parts["hit"] else None, repeat)


def failed_case_ids(report_path: Path) -> list[str]:
    """The ids of the cases that did not pass in a report (report.json, or the folder that holds it)."""
    path = report_path / "report.json" if report_path.is_dir() else report_path
    try:
        report = json.loads(path.read_text())
        failed = [case["id"] for case in report["cases"] if case["verdict"] != "pass"]
    except OSError as exc:
        raise ValueError(f"--rerun-failed: cannot read {path} ({exc.strerror or exc})") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"--rerun-failed: {path} is not a crashproof report ({type(exc).__name__}: {exc})") from None
    # The schema stage is no case to select: it runs before the cases of every --migrations run.
    if failed == [SCHEMA_STAGE_ID]:
        raise ValueError(f"--rerun-failed: only the schema stage did not pass in {path}; it runs before the cases of "
                         "every run with --migrations: run `crashproof certify --migrations DIR` again")
    return [case_id for case_id in failed if case_id != SCHEMA_STAGE_ID]


def load_scenarios(options: Options) -> list[Scenario]:
    """The catalog this run uses (a malformed scenario file is a one-line error naming it)."""
    return load_catalog(options.catalog, options.with_builtin)


def _validate(options: Options) -> tuple[list[Scenario], list[CasePlan]]:
    """The scenarios to run and the requested cases (from --case); a bad selection is a one-line error."""
    catalog = load_scenarios(options)
    scenarios = select(catalog, options.scenario)
    if not scenarios and not schema_version_plans(options.scenario):
        raise ValueError(f"no scenario matches {','.join(patterns(options.scenario))!r}")
    barrier_names, fault_names = [b.name for b in CATALOG], list(FAULTS)
    for glob in patterns(options.barrier) or []:
        if not any(matches(name, glob) for name in barrier_names):
            raise ValueError(f"no barrier named {glob!r}; see `crashproof barriers`")
    for glob in patterns(options.fault) or []:
        if not any(matches(name, glob) for name in fault_names):
            raise ValueError(f"no fault named {glob!r}; choose from {', '.join(FAULTS)}")
    if options.jobs < 1 or options.repeat < 1:
        raise ValueError("--jobs and --repeat must be at least 1")
    if options.launcher not in LAUNCHERS:
        raise ValueError(f"no launcher named {options.launcher!r}; choose from {', '.join(LAUNCHERS)}")
    stage_named = any(case_id.strip() == SCHEMA_VERSION_ID for case_id in options.cases)
    ids = [case_id for case_id in options.cases if case_id.strip() not in (SCHEMA_STAGE_ID, SCHEMA_VERSION_ID)]
    if options.cases and not ids and not stage_named:
        raise ValueError(f"--case {SCHEMA_STAGE_ID}: the schema stage is no case to select; it runs before the cases "
                         "of every run with --migrations")
    wanted = [parse_case_id(case_id) for case_id in ids]
    known = {s.name for s in catalog}
    for plan in wanted:
        if plan.scenario not in known:
            raise ValueError(f"--case {plan.id}: no scenario named {plan.scenario!r} in the catalog")
        if plan.barrier is not None and plan.barrier not in barrier_names:
            raise ValueError(f"--case {plan.id}: no barrier named {plan.barrier!r}; see `crashproof barriers`")
        if plan.fault is not None and plan.fault not in FAULTS:
            raise ValueError(f"--case {plan.id}: no fault named {plan.fault!r}; choose from {', '.join(FAULTS)}")
    if options.repeat > 1 and options.cases and all(plan.fault is None for plan in wanted):
        raise ValueError(f"--repeat {options.repeat} repeats faulted cases, and every --case here is a fault-free run "
                         "(which runs once, as the baseline of its faulted cases); name a faulted case "
                         "(SCENARIO/BARRIER/FAULT/HIT) or drop --repeat")
    if options.cases:
        named = {plan.scenario for plan in wanted}
        scenarios = [s for s in scenarios if s.name in named]
        if not scenarios and not stage_named:
            raise ValueError("no --case is in the scenarios the filters select")
    return scenarios, wanted


def preflight(options: Options, scenarios: list[Scenario] = ()) -> None:
    """What would fail a run late, checked before any world starts: one line each (TestHostError)."""
    folder = options.report_dir
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".crashproof-probe-{os.getpid()}"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise TestHostError(f"--report-dir {folder} cannot be written ({exc.strerror or exc}); "
                            "choose a folder you can write") from None
    try:
        argv = shlex.split(options.command)
    except ValueError as exc:
        raise TestHostError(f"--impl {options.command!r} cannot be split into words ({exc})") from None
    if not argv:
        raise TestHostError("--impl is empty; give the command line that starts your adapter")
    program = argv[0]
    if "/" in program:
        if not os.path.isfile(program):
            raise TestHostError(f"--impl program {program} does not exist")
        if not os.access(program, os.X_OK):
            raise TestHostError(f"--impl program {program} is not executable (chmod +x it, or start it through "
                                "its interpreter)")
    elif shutil.which(program) is None:
        raise TestHostError(f"--impl program {program!r} is not on PATH")
    check_instances(options, scenarios)


def check_instances(options: Options, scenarios: list[Scenario]) -> None:
    """Each scenario instance's own command can start, and libfaketime exists where a clock is skewed."""
    skewed = options.impl_clock_offset is not None
    for scenario in scenarios:
        for instance in scenario.instances.values():
            skewed = skewed or instance.clock_offset is not None
            if instance.command is None:
                continue
            program = shlex.split(instance.command)[0]
            where = f"{scenario.origin or scenario.name}: instances.{instance.label}.command"
            if "/" in program and not (os.path.isfile(program) and os.access(program, os.X_OK)):
                raise TestHostError(f"{where}: program {program} does not exist or is not executable")
            if "/" not in program and shutil.which(program) is None:
                raise TestHostError(f"{where}: program {program!r} is not on PATH")
    if skewed:
        from testhost.world.components import find_libfaketime
        from testhost.errors import ComponentMissing
        try:
            find_libfaketime()
        except ComponentMissing as exc:
            raise TestHostError(f"a skewed implementation clock needs libfaketime: {exc}") from None


def _pool_factory(options: Options):
    mode = {"dsn": options.dsn, "docker": options.docker, "launcher": options.launcher,
            "catalog": [str(folder) for folder in options.catalog], "with_builtin": options.with_builtin}
    context = multiprocessing.get_context("spawn")
    return lambda: ProcessPoolExecutor(max_workers=options.jobs, mp_context=context, initializer=_worker_init,
                                       initargs=(mode,))


def _census(options: Options, scenarios: list[Scenario], pool: Pool, log_dir: Path, results: list | None = None,
            signals: StopSignals = _NO_SIGNALS, stage: bool = True):
    """The fault-free run of every scenario: its verdict, the barriers it reaches, its baseline (and the
    schema-version stage when selected and `stage`)."""
    extra = _stage_plans(options) if stage else []
    progress = Progress(len(scenarios) + len(extra), options.progress, "fault-free")
    results = run_cases(pool, [(CasePlan(s.name), None) for s in scenarios] + [(p, None) for p in extra],
                        options.command,
                        str(log_dir), progress, _case_worker(options), results=results, fail_fast=options.fail_fast,
                        signals=signals)
    census = {r["plan"].scenario: r["case"]["barrier_hits"] for r in results}
    # Only a fault-free run that passed (its barrier facts included) says which barriers leave the same state; a
    # case asked for by its id runs as asked, even where its twin stands for it in the whole matrix.
    sequences = {r["plan"].scenario: barrier_sequence(r["case"].get("timeline") or []) for r in results
                 if r["case"]["verdict"] == "pass" and r["plan"].fault is None} if not options.cases else None
    plans, skipped = expand(scenarios, census, FAULTS, barrier=options.barrier, fault=options.fault,
                            repeat=options.repeat, offered=declared_operations(results), sequences=sequences)
    return results, census, plans, skipped


def declared_operations(results: list[dict]) -> set[str] | None:
    """The operations the implementation's hello declared (None: no case got as far as its hello)."""
    for result in results:
        if result["case"].get("operations"):
            return set(result["case"]["operations"])
    return None


def reference_census(command: str, code: dict, env: dict[str, str] | None = None) -> dict:
    """Whether the reference's own census runs beside this --impl's, for `barrier-coverage`: always, unless the
    --impl is the reference's command AND runs the very code the harness's own reference is (the same executable,
    module origin and digests, under the same environment), resolved and not compared as strings: the same
    command line started from another folder or with another PYTHONPATH may run a copy. The reference's census
    starts the reference in REFERENCE_ROOT, beside the harness's own package."""
    reference = provenance.resolve(REFERENCE_COMMAND, cwd=REFERENCE_ROOT, env=env)
    if command == REFERENCE_COMMAND and provenance.same_code(code, reference):
        return {"separate": False, "why": "the implementation runs the harness's own reference (the same executable, "
                                          "module origin and digests): its census is the reference's"}
    if command == REFERENCE_COMMAND:
        differs = provenance.differences(reference, code, "the reference's")
        why = ("the reference's command, running other code than the harness's reference: " + "; ".join(differs)
               if differs else "the reference's command, whose code could not be resolved and digested")
    else:
        why = "another command than the reference's"
    return {"separate": True, "why": why, "code": reference}


def _require_reference_barriers(case: dict, reference_hits: dict[str, int]) -> None:
    """A barrier the reference reaches in a scenario must be reached by the implementation too, when it sits in
    an operation the implementation offers: a planned barrier that never fires would leave its faults untested.
    The barriers of an operation it does not offer are the fallback's, not required of it."""
    required = required_of(case.get("operations") or ["process-due"])
    missing = sorted((set(reference_hits) & required) - set(case["barrier_hits"]))
    check = {"name": "barrier-coverage", "rule": "harness: a planned barrier that never fired makes the run fail",
             "ok": not missing, "rows": len(set(reference_hits) & required),
             "evidence": [{"not_reached": missing, "reference_reaches": sorted(reference_hits),
                           "fallback_runs": sorted(set(reference_hits) - required)}] if missing else []}
    case["checks"].append(check)
    if missing and case["verdict"] == "pass":
        case["verdict"], case["reason"] = "fail", "barrier-coverage"


def _check_world_options(options: Options) -> None:
    """--migrations and --dsn, checked before any worker starts: a one-line error each."""
    if options.migrations is not None:
        from .schema_stage import check_directory
        check_directory(options.migrations)
    if options.dsn:
        from testhost.world.worlds import ExternalWorld
        ExternalWorld(options.dsn, network_optional=True).up().down()


def census(options: Options, failed: list[dict] | None = None):
    """The planned matrix and its skipped combinations (for `crashproof scenarios --matrix`), after the same
    checks as certify's; each fault-free case that did not pass goes to `failed`."""
    scenarios, _ = _validate(options)
    with tempfile.TemporaryDirectory(prefix="crashproof-census-logs-") as log_dir:
        preflight(dataclasses.replace(options, report_dir=Path(log_dir)), scenarios)  # its logs go there
        _check_world_options(options)
        pool = Pool(_pool_factory(options))
        try:
            _build_stage(options, pool, Path(log_dir))
            results, _, plans, skipped = _census(options, scenarios, pool, Path(log_dir))
        finally:
            pool.close()
    if failed is not None:
        failed += [r["case"] for r in results if r["case"]["verdict"] != "pass"]
    return plans, skipped


def _schema_stage(options: Options, pool: Pool, log_dir: Path) -> list[dict]:
    """The schema stage's case when the implementation ships its own migrations (run in one worker's world,
    before any case). A directory the server refuses ends the run with nothing left behind."""
    if options.migrations is None:
        return []
    from testhost.world.store import MigrationFailed
    try:
        stage = _harness_result(pool.executor.submit(_worker_schema_stage, str(options.migrations)), "the schema stage")
    except MigrationFailed:
        shutil.rmtree(log_dir, ignore_errors=True)
        raise
    options.progress(f"schema stage: {stage['verdict']}" + (f" ({stage['reason']})" if stage["reason"] else ""))
    return [stage]


def _build_stage(options: Options, pool: Pool, log_dir: Path) -> dict | None:
    """A spawned command's first start, before any case, under the build timeout (testhost/impl/build_stage.py); a
    start that ends or says nothing ends the run with one line naming the stage."""
    from testhost.impl import build_stage
    if not build_stage.needed(options.command, options.launcher):
        return None
    options.progress(f"build stage: starting {options.command} once before the cases (up to "
                     f"{implementation.TIMEOUT['build']:g} s for its first line)")
    result = _harness_result(pool.executor.submit(_worker_build_stage, options.command, str(log_dir),
                                                  options.impl_cwd,
                                                  str(options.migrations) if options.migrations else None),
                             "the build stage")
    build_stage.require_built(result, options.command)
    options.progress(f"build stage: it spoke after {result['seconds']:g} s")
    return {"seconds": result["seconds"], "log": os.path.relpath(result["log"], log_dir.parent)}


def _requested(plans: list[CasePlan], wanted: list[CasePlan], census_hits: dict,
               repeat: int = 1) -> tuple[list[CasePlan], list[dict]]:
    """With --case: the planned faulted cases named (one named without `#N` runs --repeat times: `ID`, `ID#2`, ...),
    and a not-run case for each named one not in the matrix."""
    if not wanted:
        return plans, []
    by_id = {plan.id: plan for plan in plans}
    chosen, missing = [], []
    for plan in wanted:
        if plan.fault is None:
            continue  # a fault-free case: the census runs it
        base = dataclasses.replace(plan, repeat=1).id  # a --repeat N report's `…/1#3` is `…/1` run a third time
        if base not in by_id:
            reached = census_hits.get(plan.scenario, {}).get(plan.barrier, 0)
            missing.append(_not_run_case(plan, f"not in this run's matrix: the fault-free run reaches {plan.barrier} "
                                               f"{counted(reached, 'time')}, and the filters and --repeat apply"))
            continue
        runs = [plan.repeat] if plan.repeat > 1 else range(1, repeat + 1)
        chosen += [dataclasses.replace(by_id[base], repeat=r) for r in runs]
    unique = {plan.id: plan for plan in chosen}  # `ID` with --repeat 3 and `ID#3` (--rerun-failed) run #3 once
    return list(unique.values()), missing


def exit_code(cases: list[dict], run_problems: list[str], empty_slice: bool = False) -> int:
    """0 every case passed (or a shard's slice was empty by construction); 1 the implementation failed (a check,
    the protocol, a case not run); 3 only the harness failed (errors caused by the harness, every other case
    passed)."""
    if (cases or empty_slice) and not run_problems and all(c["verdict"] == "pass" for c in cases):
        return 0
    by_implementation = [c for c in cases if c["verdict"] in ("fail", "not-run") or
                         (c["verdict"] == "error" and c.get("cause") == "implementation")]
    if by_implementation or run_problems or not (cases or empty_slice):
        return 1
    return 3


def certify(options: Options) -> tuple[int, dict]:
    started = time.monotonic()
    started_at = datetime.now(timezone.utc).isoformat()
    scenarios, wanted = _validate(options)
    preflight(options, scenarios)
    remove_outputs(options.report_dir)  # an earlier run's report (and CERTIFIED certificate) must not outlive this one
    _check_world_options(options)
    migrations_sha256 = None
    if options.migrations is not None:
        from .schema_stage import migrations_digest
        migrations_sha256 = migrations_digest(options.migrations)
    code = provenance.resolve(options.command)  # which code runs: once per run, where the workers start it
    census_of_reference = reference_census(options.command, code)
    if census_of_reference["separate"] and options.command == REFERENCE_COMMAND:
        options.progress(f"--impl is {census_of_reference['why']}; the reference's own census runs beside it")
    replays = provenance.replay_notes(scenarios, options.command, code)  # finds explore made with other code
    for note in replays:
        options.progress(f"note: {note['scenario']} was found by explore with this --impl running other code: "
                         f"{'; '.join(note['differences'])}")
    report_dir = options.report_dir.absolute()
    log_dir = report_dir / "logs"
    shutil.rmtree(log_dir, ignore_errors=True)  # the logs of an earlier run in this folder: its report goes too
    log_dir.mkdir(parents=True)
    finished: list[dict] = []
    census_results: list[dict] = []
    census_hits: dict = {}
    plans: list[CasePlan] = []
    skipped: list = []
    extra_cases: list[dict] = []
    stage: list[dict] = []
    built: dict | None = None
    environment: dict = {"platform": platform.platform(), "jobs": options.jobs, "cpus": os.cpu_count()}
    stopped: RunStopped | None = None
    planned_faulted = False
    planned: dict = {}  # the whole plan's count and digest, before this shard's slice
    empty_slice = False
    with StopSignals() as signals:
        signals.armed = True
        pool = None
        try:
            signals.check()
            pool = signals.pool = Pool(_pool_factory(options))
            environment.update(_harness_result(pool.executor.submit(_worker_environment), "the worlds' start"))
            stage = _schema_stage(options, pool, log_dir)
            if options.fail_fast and stage and stage[0]["verdict"] != "pass":
                raise RunStopped(why=f"--fail-fast: {stage[0]['id']} ended {stage[0]['verdict']}")
            built = _build_stage(options, pool, log_dir)
            census_results, census_hits, plans, skipped = _census(options, scenarios, pool, log_dir,
                                                                  results=census_results, signals=signals)
            if census_of_reference["separate"]:
                reference = Options(**{**options.__dict__, "command": REFERENCE_COMMAND, "fail_fast": False,
                                       "migrations": None, "instance_commands": False, "impl_cwd": REFERENCE_ROOT})
                _, reference_hits, _, _ = _census(reference, scenarios, pool, log_dir / "reference", signals=signals,
                                             stage=False)
                for result in census_results:
                    _require_reference_barriers(result["case"], reference_hits.get(result["plan"].scenario, {}))
                    if options.fail_fast and result["case"]["verdict"] == "fail":
                        raise RunStopped(why=f"--fail-fast: {result['plan'].id} ended fail")
            plans, extra_cases = _requested(plans, wanted, census_hits, options.repeat)
            # Every case the whole run reports: the stages' (the schema stage with --migrations, schema-version),
            # the fault-free runs, the faulted cases and the requested ids not in the matrix.
            planned = shard.plan_digest([c["id"] for c in stage] + [p.id for p in _stage_plans(options)] +
                                        [s.name for s in scenarios] + [p.id for p in plans] +
                                        [c["id"] for c in extra_cases])
            plans = shard.select(plans, census_hits, options.shard)
            empty_slice = options.shard is not None and not plans
            planned_faulted = True
            baselines = {r["plan"].scenario: r["baseline"] for r in census_results}
            random.Random(options.seed).shuffle(plans)
            faulted_progress = Progress(len(plans), options.progress, "faulted")
            run_cases(pool, [(p, baselines.get(p.scenario)) for p in plans], options.command, str(log_dir),
                      faulted_progress, _case_worker(options), results=finished, fail_fast=options.fail_fast,
                      signals=signals)
            signals.armed = False
        except RunStopped as stop:
            signals.armed = False
            stopped = stop
            if pool is not None:
                pool.abort()
        finally:
            signals.armed = False
            if pool is not None and stopped is None:
                pool.close()

    done_ids = {r["plan"].id for r in census_results + finished}
    unfinished = [] if stopped is None else [(p, why) for p, why in stopped.unfinished if p.id not in done_ids]
    if stopped is not None:
        unfinished_ids = {p.id for p, _ in unfinished}
        if not census_results or len(census_results) < len(scenarios):
            unfinished += [(CasePlan(s.name), "not run: the run stopped before this case") for s in scenarios
                           if s.name not in done_ids and s.name not in unfinished_ids]
        elif planned_faulted:
            unfinished += [(p, "not run: the run stopped before this case") for p in plans
                           if p.id not in done_ids and p.id not in unfinished_ids]
    # A sharded run's fault-free cases (done or not), its schema stage and its requested cases not in the matrix
    # are reported by shard 1 alone, so the merged shards equal the unsharded run case for case.
    first_shard = options.shard is None or options.shard[0] == 1
    not_run = [_not_run_case(p, why) for p, why in unfinished if first_shard or p.fault is not None]
    extra_cases = extra_cases if first_shard else []
    reported_census = [r["case"] for r in census_results] if first_shard else []
    cases = ((stage if first_shard else []) + reported_census +
             sorted([r["case"] for r in finished] + extra_cases + not_run, key=lambda c: c["id"]))
    for case in cases:
        case["logs"] = {label: os.path.relpath(path, report_dir) for label, path in case.get("logs", {}).items()}
    offered = declared_operations(census_results)
    run_problems = []
    builtin_ran = not options.catalog or options.with_builtin  # a team's own catalog need not reach every barrier
    if options.scenario is None and options.barrier is None and not options.cases and stopped is None and builtin_ran:
        reached = {name for hits in census_hits.values() for name in hits}
        for barrier in CATALOG:
            if offered is not None and barrier.operation not in offered:
                continue  # the fallback's barrier: listed under fallback_barriers, not required
            if barrier.name not in reached:
                run_problems.append(f"barrier {barrier.name} is never reached by any scenario")
    identity = next((r["implementation"] for r in census_results if r.get("implementation")), "")
    fallback_barriers = sorted(b.name for b in CATALOG if offered is not None and b.name not in required_of(offered))
    # What actually started the implementation (a fork server that failed falls back to spawning).
    launched = ", ".join(sorted({e["launcher"] for c in cases for e in c["timeline"]
                                 if e["event"] == "start" and e.get("launcher")})) or (
        "spawn" if options.launcher == "spawn" or not module_command(shlex.split(options.command)) else "fork-server")
    run = {"started_at": started_at, "duration_s": round(time.monotonic() - started, 2), "seed": options.seed,
           "selection": {"scenario": patterns(options.scenario), "barrier": patterns(options.barrier),
                         "fault": patterns(options.fault), "cases": list(options.cases), "repeat": options.repeat,
                         "shard": f"{options.shard[0]}/{options.shard[1]}" if options.shard else None,
                         **planned,
                         "fail_fast": options.fail_fast,
                         "catalog": [str(f) for f in options.catalog] + (["built-in"] if options.with_builtin else [])
                         or ["built-in"]},
           **({"empty_slice": True} if empty_slice else {}),
           **({"build_stage": built} if built else {}),
           "skipped": [s.to_json() for s in skipped], "problems": run_problems, "logs": os.path.relpath(log_dir,
                                                                                                         report_dir),
           "reference_census": census_of_reference, **({"replayed_with_other_code": replays} if replays else {})}
    if stopped is not None:
        run["stopped_by"] = signal.Signals(stopped.signum).name if stopped.signum else stopped.why
        if not planned_faulted:
            run["not_planned"] = ("the run stopped during the fault-free census, before the faulted cases were "
                                  "planned: they are not listed")
    report = reports.build(
        suite_version=suite_version(scenarios),
        implementation={"command": options.command, "migrations": str(options.migrations or "") or None,
                        "migrations_sha256": migrations_sha256,
                        "identity": identity, "code": code, "launcher": launched,
                        "clock_offset": format_offset(options.impl_clock_offset) if options.impl_clock_offset else None,
                        "clock_skew": reports.clock_skew(cases),
                        "operations": sorted(offered or []), **reports.fallbacks(cases, fallback_barriers)},
        environment=environment, run=run, cases=cases)
    report["partial"] = stopped is not None
    report["interrupted"] = stopped is not None and stopped.signum is not None
    options.progress(f"writing the report in {report_dir}")
    path = reports.write(report, report_dir)
    render_all(report_dir)
    summary = report["summary"]
    done = summary["cases"] - len(not_run)
    if stopped is not None and stopped.signum is not None:
        print(f"interrupted after {done} of {counted(summary['cases'], 'case')}; partial report: {path}", flush=True)
    elif stopped is not None and stopped.harness:
        print(f"crashproof: error: {stopped.why}", file=sys.stderr, flush=True)
        print(f"stopped after {done} of {counted(summary['cases'], 'case')}; partial report: {path}", flush=True)
    elif stopped is not None:
        print(f"stopped at the first failed case ({stopped.why.removeprefix('--fail-fast: ')}) after {done} of "
              f"{counted(summary['cases'], 'case')}; partial report: {path}", flush=True)
    print(f"{counted(summary['cases'], 'case')}: {summary['passed']} passed, {summary['failed']} failed, "
          f"{summary['error']} error, {summary['not_run']} not-run in {report['run']['duration_s']:.0f}s; report: {path}")
    print(reports.outcome(report)[1])  # certified, a selection whose cases all passed, or not certified
    print("\n".join(reports.which_code_text(report["implementation"])))
    for problem in run_problems:
        print(f"run problem: {problem}")
    skew = report["implementation"]["clock_skew"]
    if skew["not_in_effect_cases"]:
        print(f"clock skew not in effect in {len(skew['not_in_effect_cases'])} of {counted(skew['cases'], 'skewed case')} (the "
              f"implementation's clock ignored libfaketime; the certificate says so), e.g. "
              f"{skew['not_in_effect_cases'][0]}")
    for case in cases:
        if case["verdict"] not in ("pass", "not-run") or (case["verdict"] == "not-run" and stopped is None):
            print(f"  {case['verdict']:7} {case['id']}: {case['reason']}")
            for check in case["checks"]:
                if not check["ok"]:
                    print(f"    {check['name']} (rule: {check['rule']})")
                    if check.get("changed"):
                        print(f"      {check['changed']}")
                    for row in check["evidence"][:5]:
                        print(f"      {json.dumps(row, default=str)[:400]}")
    for line in diagnosis.text(report):  # last, where a terminal leaves it in view
        print(line)
    if stopped is not None and stopped.signum is not None:
        return 128 + stopped.signum, report
    if stopped is not None and stopped.harness:
        return 3, report
    return exit_code(cases, run_problems, empty_slice), report
