"""The report of a certify run: what the run did (whole, or as far as a stop let it), the cases and run record it
reports, report.json and its renderings written, the summary printed, and the exit code."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

from barriers import CATALOG, required_of
from reports import counted, diagnosis, report as reports
from reports.render import render as render_all
from scenarios.instances import format_offset
from scenarios.matrix import CasePlan, patterns
from scenarios.scenario import Scenario

from testhost.impl.forkserver import module_command

from .options import Options
from .pool import RunStopped
from .stages import declared_operations, not_run_case

SUITE = "crashproof-barrier-suite-1"


@dataclass
class Run:
    """What a certify run did: filled in as it goes, so a stop still leaves what was done for the partial report."""

    started: float  # time.monotonic() at its start
    started_at: str
    code: dict  # which code the implementation runs (testhost/impl/provenance.py)
    reference_census: dict  # whether the reference's own census ran beside it, and why
    replays: list[dict]  # explore's finds made with other code than this --impl runs
    environment: dict
    migrations_sha256: str | None = None
    stage: list[dict] = field(default_factory=list)  # the schema stage's case, with --migrations
    built: dict | None = None  # the build stage, when a spawned command needed one
    census_results: list[dict] = field(default_factory=list)
    census_hits: dict = field(default_factory=dict)
    plans: list[CasePlan] = field(default_factory=list)
    skipped: list = field(default_factory=list)
    extra_cases: list[dict] = field(default_factory=list)  # requested ids not in the matrix, as not-run cases
    finished: list[dict] = field(default_factory=list)  # the faulted cases run
    planned: dict = field(default_factory=dict)  # the whole plan's count and digest, before this shard's slice
    planned_faulted: bool = False
    empty_slice: bool = False
    stopped: RunStopped | None = None


def suite_version(scenarios: list[Scenario]) -> str:
    """The barrier catalog and the scenarios that ran (names and sources), hashed: whatever catalog it was."""
    digest = hashlib.sha256()
    for barrier in CATALOG:
        digest.update(barrier.name.encode())
    for scenario in scenarios:
        digest.update(scenario.source.encode())
    return f"{SUITE}+{digest.hexdigest()[:12]}"


def _unfinished(run: Run, scenarios: list[Scenario]) -> list[tuple[CasePlan, str]]:
    """The plans a stop left unfinished, with why: those it cut short, and those it came before."""
    stopped = run.stopped
    done_ids = {r["plan"].id for r in run.census_results + run.finished}
    unfinished = [] if stopped is None else [(p, why) for p, why in stopped.unfinished if p.id not in done_ids]
    if stopped is not None:
        unfinished_ids = {p.id for p, _ in unfinished}
        if not run.census_results or len(run.census_results) < len(scenarios):
            unfinished += [(CasePlan(s.name), "not run: the run stopped before this case") for s in scenarios
                           if s.name not in done_ids and s.name not in unfinished_ids]
        elif run.planned_faulted:
            unfinished += [(p, "not run: the run stopped before this case") for p in run.plans
                           if p.id not in done_ids and p.id not in unfinished_ids]
    return unfinished


def reported_cases(options: Options, run: Run, scenarios: list[Scenario],
                   report_dir: Path) -> tuple[list[dict], list[dict]]:
    """Every case the report lists (their logs relative to the report's folder), and the not-run ones among them."""
    # A sharded run's fault-free cases (done or not), its schema stage and its requested cases not in the matrix
    # are reported by shard 1 alone, so the merged shards equal the unsharded run case for case.
    first_shard = options.shard is None or options.shard[0] == 1
    not_run = [not_run_case(p, why) for p, why in _unfinished(run, scenarios) if first_shard or p.fault is not None]
    extra_cases = run.extra_cases if first_shard else []
    reported_census = [r["case"] for r in run.census_results] if first_shard else []
    cases = ((run.stage if first_shard else []) + reported_census +
             sorted([r["case"] for r in run.finished] + extra_cases + not_run, key=lambda c: c["id"]))
    for case in cases:
        case["logs"] = {label: os.path.relpath(path, report_dir) for label, path in case.get("logs", {}).items()}
    return cases, not_run


def run_problems(options: Options, run: Run) -> list[str]:
    """A whole run of the built-in catalog must reach every barrier of the operations the implementation offers."""
    offered = declared_operations(run.census_results)
    problems = []
    builtin_ran = not options.catalog or options.with_builtin  # a team's own catalog need not reach every barrier
    if options.scenario is None and options.barrier is None and not options.cases and run.stopped is None and builtin_ran:
        reached = {name for hits in run.census_hits.values() for name in hits}
        for barrier in CATALOG:
            if offered is not None and barrier.operation not in offered:
                continue  # the fallback's barrier: listed under fallback_barriers, not required
            if barrier.name not in reached:
                problems.append(f"barrier {barrier.name} is never reached by any scenario")
    return problems


def _launched(options: Options, cases: list[dict]) -> str:
    """What actually started the implementation (a fork server that failed falls back to spawning)."""
    return ", ".join(sorted({e["launcher"] for c in cases for e in c["timeline"]
                             if e["event"] == "start" and e.get("launcher")})) or (
        "spawn" if options.launcher == "spawn" or not module_command(shlex.split(options.command)) else "fork-server")


def _run_record(options: Options, run: Run, duration_s: float, problems: list[str], report_dir: Path,
                log_dir: Path) -> dict:
    """The report's `run`: when, the selection, the stages, what was skipped and why it stopped."""
    record = {"started_at": run.started_at, "duration_s": duration_s, "seed": options.seed,
              "selection": {"scenario": patterns(options.scenario), "barrier": patterns(options.barrier),
                            "fault": patterns(options.fault), "cases": list(options.cases), "repeat": options.repeat,
                            "shard": f"{options.shard[0]}/{options.shard[1]}" if options.shard else None,
                            **run.planned,
                            "fail_fast": options.fail_fast,
                            "catalog": [str(f) for f in options.catalog] + (["built-in"] if options.with_builtin else [])
                            or ["built-in"]},
              **({"empty_slice": True} if run.empty_slice else {}),
              **({"build_stage": run.built} if run.built else {}),
              "skipped": [s.to_json() for s in run.skipped], "problems": problems,
              "logs": os.path.relpath(log_dir, report_dir),
              "reference_census": run.reference_census, **({"replayed_with_other_code": run.replays} if run.replays else {})}
    stopped = run.stopped
    if stopped is not None:
        record["stopped_by"] = signal.Signals(stopped.signum).name if stopped.signum else stopped.why
        if not run.planned_faulted:
            record["not_planned"] = ("the run stopped during the fault-free census, before the faulted cases were "
                                     "planned: they are not listed")
    return record


def build(options: Options, run: Run, scenarios: list[Scenario], cases: list[dict], problems: list[str],
          duration_s: float, report_dir: Path, log_dir: Path) -> dict:
    """The report of the run: the implementation, its environment, the run record and its cases."""
    offered = declared_operations(run.census_results)
    identity = next((r["implementation"] for r in run.census_results if r.get("implementation")), "")
    fallback_barriers = sorted(b.name for b in CATALOG if offered is not None and b.name not in required_of(offered))
    report = reports.build(
        suite_version=suite_version(scenarios),
        implementation={"command": options.command, "migrations": str(options.migrations or "") or None,
                        "migrations_sha256": run.migrations_sha256,
                        "identity": identity, "code": run.code, "launcher": _launched(options, cases),
                        "clock_offset": format_offset(options.impl_clock_offset) if options.impl_clock_offset else None,
                        "clock_skew": reports.clock_skew(cases),
                        "operations": sorted(offered or []), **reports.fallbacks(cases, fallback_barriers)},
        environment=run.environment, run=_run_record(options, run, duration_s, problems, report_dir, log_dir),
        cases=cases)
    report["partial"] = run.stopped is not None
    report["interrupted"] = run.stopped is not None and run.stopped.signum is not None
    return report


def print_summary(report: dict, path: Path, stopped: RunStopped | None, not_run: list[dict],
                  problems: list[str]) -> None:
    """How the run ended, its counts and outcome, which code ran, its problems, clock skew not in effect, each case
    that did not pass with its failed checks, and the diagnosis last."""
    summary = report["summary"]
    cases = report["cases"]
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
    for problem in problems:
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


def write(options: Options, report: dict, report_dir: Path) -> Path:
    """report.json and its renderings in the report's folder; report.json's path."""
    options.progress(f"writing the report in {report_dir}")
    path = reports.write(report, report_dir)
    render_all(report_dir)
    return path


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



def exit_status(report: dict, run: Run, problems: list[str]) -> int:
    """The process's exit: 128 + the signal that stopped it, 3 when the harness failed, else exit_code's."""
    stopped = run.stopped
    if stopped is not None and stopped.signum is not None:
        return 128 + stopped.signum
    if stopped is not None and stopped.harness:
        return 3
    return exit_code(report["cases"], problems, run.empty_slice)
