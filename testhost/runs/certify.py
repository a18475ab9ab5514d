"""`crashproof certify`: the controller. Worlds live in worker processes (one per job, testhost/runs/workers.py); the
controller plans the matrix from a fault-free census (testhost/runs/stages.py), hands out cases (testhost/runs/pool.py),
survives worker crashes, and writes the report (testhost/runs/run_report.py)."""

from __future__ import annotations

import os
import platform
import random
import shutil
import time
from datetime import datetime, timezone
from pathlib import Path

from reports.render import remove_outputs
from scenarios.matrix import CasePlan
from scenarios.scenario import Scenario

from testhost.impl.reference_command import REFERENCE_COMMAND, REFERENCE_ROOT
from testhost.impl import provenance

from . import run_report, shard, workers
from .options import Options, check_world_options, preflight, stage_plans, validate
from .pool import Pool, Progress, RunStopped, StopSignals, harness_result, new_pool, run_cases
from .run_report import Run
from .stages import build_stage, reference_census, require_reference_barriers, requested, run_census, schema_stage


def _begin(options: Options, scenarios: list[Scenario], started: float, started_at: str) -> Run:
    """The run's record before any world starts: which code runs, whether the reference's own census runs beside
    it, and explore's finds made with other code (each one a note)."""
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
    return Run(started, started_at, code, census_of_reference, replays, migrations_sha256=migrations_sha256,
               environment={"platform": platform.platform(), "jobs": options.jobs, "cpus": os.cpu_count()})


def _fault_free(options: Options, scenarios: list[Scenario], pool: Pool, log_dir: Path, signals: StopSignals,
                run: Run) -> None:
    """The stages before the cases, the fault-free census, and the reference's census beside another --impl (every
    barrier the reference reaches must be reached by the implementation too)."""
    run.stage = schema_stage(options, pool, log_dir)
    if options.fail_fast and run.stage and run.stage[0]["verdict"] != "pass":
        raise RunStopped(why=f"--fail-fast: {run.stage[0]['id']} ended {run.stage[0]['verdict']}")
    run.built = build_stage(options, pool, log_dir)
    run.census_results, run.census_hits, run.plans, run.skipped = run_census(
        options, scenarios, pool, log_dir, results=run.census_results, signals=signals)
    if run.reference_census["separate"]:
        reference = Options(**{**options.__dict__, "command": REFERENCE_COMMAND, "fail_fast": False,
                               "migrations": None, "instance_commands": False, "impl_cwd": REFERENCE_ROOT})
        _, reference_hits, _, _ = run_census(reference, scenarios, pool, log_dir / "reference", signals=signals,
                                             stage=False)
        for result in run.census_results:
            require_reference_barriers(result["case"], reference_hits.get(result["plan"].scenario, {}))
            if options.fail_fast and result["case"]["verdict"] == "fail":
                raise RunStopped(why=f"--fail-fast: {result['plan'].id} ended fail")


def _faulted(options: Options, scenarios: list[Scenario], wanted: list[CasePlan], pool: Pool, log_dir: Path,
             signals: StopSignals, run: Run) -> None:
    """The faulted cases: those --case names (else the whole matrix), this shard's slice of them, in the seed's
    order, each against its scenario's fault-free baseline."""
    run.plans, run.extra_cases = requested(run.plans, wanted, run.census_hits, options.repeat)
    # Every case the whole run reports: the stages' (the schema stage with --migrations, schema-version),
    # the fault-free runs, the faulted cases and the requested ids not in the matrix.
    run.planned = shard.plan_digest([c["id"] for c in run.stage] + [p.id for p in stage_plans(options)] +
                                    [s.name for s in scenarios] + [p.id for p in run.plans] +
                                    [c["id"] for c in run.extra_cases])
    run.plans = shard.select(run.plans, run.census_hits, options.shard)
    run.empty_slice = options.shard is not None and not run.plans
    run.planned_faulted = True
    baselines = {r["plan"].scenario: r["baseline"] for r in run.census_results}
    random.Random(options.seed).shuffle(run.plans)
    faulted_progress = Progress(len(run.plans), options.progress, "faulted")
    run_cases(pool, [(p, baselines.get(p.scenario)) for p in run.plans], options.command, str(log_dir),
              faulted_progress, workers.case_worker(options), results=run.finished, fail_fast=options.fail_fast,
              signals=signals)


def _run(options: Options, scenarios: list[Scenario], wanted: list[CasePlan], log_dir: Path, run: Run) -> None:
    """The worlds started, the stages, the census and the faulted cases; a stop signal, --fail-fast or a harness
    failure ends them early (run.stopped), with every worker's world torn down."""
    with StopSignals() as signals:
        signals.armed = True
        pool = None
        try:
            signals.check()
            pool = signals.pool = new_pool(options)
            run.environment.update(harness_result(pool.submit(workers.environment), "the worlds' start"))
            _fault_free(options, scenarios, pool, log_dir, signals, run)
            _faulted(options, scenarios, wanted, pool, log_dir, signals, run)
            signals.armed = False
        except RunStopped as stop:
            signals.armed = False
            run.stopped = stop
            if pool is not None:
                pool.abort()
        finally:
            signals.armed = False
            if pool is not None and run.stopped is None:
                pool.close()


def certify(options: Options) -> tuple[int, dict]:
    """Run the selection, write the report, print its summary; the exit code and the report."""
    started = time.monotonic()
    started_at = datetime.now(timezone.utc).isoformat()
    scenarios, wanted = validate(options)
    preflight(options, scenarios)
    remove_outputs(options.report_dir)  # an earlier run's report (and CERTIFIED certificate) must not outlive this one
    check_world_options(options)
    run = _begin(options, scenarios, started, started_at)
    report_dir = options.report_dir.absolute()
    log_dir = report_dir / "logs"
    shutil.rmtree(log_dir, ignore_errors=True)  # the logs of an earlier run in this folder: its report goes too
    log_dir.mkdir(parents=True)
    _run(options, scenarios, wanted, log_dir, run)
    cases, not_run = run_report.reported_cases(options, run, scenarios, report_dir)
    problems = run_report.run_problems(options, run)
    report = run_report.build(options, run, scenarios, cases, problems, round(time.monotonic() - started, 2),
                              report_dir, log_dir)
    path = run_report.write(options, report, report_dir)
    run_report.print_summary(report, path, run.stopped, not_run, problems)
    return run_report.exit_status(report, run, problems), report
