"""The stages of a certify run before its faulted cases: the schema stage, the build stage, the fault-free census
(the implementation's, and the reference's beside another --impl) and the matrix it plans, and the cases --case asks
for."""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from pathlib import Path

from barriers import required_of
from reports import counted
from scenarios.matrix import CasePlan, barrier_sequence, expand
from scenarios.scenario import Scenario

from testhost.case.outcome import CaseOutcome
from testhost.faults.catalog import FAULTS
from testhost.impl import implementation, provenance
from testhost.impl.reference_command import REFERENCE_COMMAND, REFERENCE_ROOT

from . import workers
from .options import Options, check_world_options, preflight, stage_plans, validate
from .pool import NO_SIGNALS, Pool, Progress, StopSignals, harness_result, new_pool, run_cases


def not_run_case(plan: CasePlan, reason: str) -> dict:
    return CaseOutcome(plan, "not-run", reason).to_json()


def schema_stage(options: Options, pool: Pool, log_dir: Path) -> list[dict]:
    """The schema stage's case when the implementation ships its own migrations (run in one worker's world,
    before any case). A directory the server refuses ends the run with nothing left behind."""
    if options.migrations is None:
        return []
    from testhost.world.store import MigrationFailed
    try:
        stage = harness_result(pool.submit(workers.schema_stage, str(options.migrations)), "the schema stage")
    except MigrationFailed:
        shutil.rmtree(log_dir, ignore_errors=True)
        raise
    options.progress(f"schema stage: {stage['verdict']}" + (f" ({stage['reason']})" if stage["reason"] else ""))
    return [stage]


def build_stage(options: Options, pool: Pool, log_dir: Path) -> dict | None:
    """A spawned command's first start, before any case, under the build timeout (testhost/impl/build_stage.py); a
    start that ends or says nothing ends the run with one line naming the stage."""
    from testhost.impl import build_stage as stage
    if not stage.needed(options.command, options.launcher):
        return None
    options.progress(f"build stage: starting {options.command} once before the cases (up to "
                     f"{implementation.TIMEOUT['build']:g} s for its first line)")
    result = harness_result(pool.submit(workers.build_stage, options.command, str(log_dir),
                                                 options.impl_cwd,
                                                 str(options.migrations) if options.migrations else None),
                            "the build stage")
    stage.require_built(result, options.command)
    options.progress(f"build stage: it spoke after {result['seconds']:g} s")
    return {"seconds": result["seconds"], "log": os.path.relpath(result["log"], log_dir.parent)}


def run_census(options: Options, scenarios: list[Scenario], pool: Pool, log_dir: Path, results: list | None = None,
               signals: StopSignals = NO_SIGNALS, stage: bool = True):
    """The fault-free run of every scenario: its verdict, the barriers it reaches, its baseline (and the
    schema-version stage when selected and `stage`)."""
    extra = stage_plans(options) if stage else []
    progress = Progress(len(scenarios) + len(extra), options.progress, "fault-free")
    results = run_cases(pool, [(CasePlan(s.name), None) for s in scenarios] + [(p, None) for p in extra],
                        options.command,
                        str(log_dir), progress, workers.case_worker(options), results=results,
                        fail_fast=options.fail_fast, signals=signals)
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


def require_reference_barriers(case: dict, reference_hits: dict[str, int]) -> None:
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


def requested(plans: list[CasePlan], wanted: list[CasePlan], census_hits: dict,
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
            missing.append(not_run_case(plan, f"not in this run's matrix: the fault-free run reaches {plan.barrier} "
                                              f"{counted(reached, 'time')}, and the filters and --repeat apply"))
            continue
        runs = [plan.repeat] if plan.repeat > 1 else range(1, repeat + 1)
        chosen += [dataclasses.replace(by_id[base], repeat=r) for r in runs]
    unique = {plan.id: plan for plan in chosen}  # `ID` with --repeat 3 and `ID#3` (--rerun-failed) run #3 once
    return list(unique.values()), missing


def census(options: Options, failed: list[dict] | None = None):
    """The planned matrix and its skipped combinations (for `crashproof scenarios --matrix`), after the same
    checks as certify's; each fault-free case that did not pass goes to `failed`."""
    scenarios, _ = validate(options)
    with tempfile.TemporaryDirectory(prefix="crashproof-census-logs-") as log_dir:
        preflight(dataclasses.replace(options, report_dir=Path(log_dir)), scenarios)  # its logs go there
        check_world_options(options)
        pool = new_pool(options)
        try:
            build_stage(options, pool, Path(log_dir))
            results, _, plans, skipped = run_census(options, scenarios, pool, Path(log_dir))
        finally:
            pool.close()
    if failed is not None:
        failed += [r["case"] for r in results if r["case"]["verdict"] != "pass"]
    return plans, skipped
