"""What a certify run is asked to do: its options, the cases they select and name, and the checks that refuse a bad
selection or an implementation that cannot start, before any world starts."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Callable

from barriers import CATALOG
from scenarios.matrix import CasePlan, matches, patterns, select
from scenarios.scenario import Scenario, load_catalog

from testhost.errors import TestHostError
from testhost.faults.catalog import FAULTS
from testhost.impl.implementation import LAUNCHERS
from testhost.impl.reference_command import REFERENCE_COMMAND

# The schema-version stage's case runs beside the fault-free cases whenever the --scenario filter matches its id
# (every run without one).
from .stage_ids import SCHEMA_STAGE_ID, SCHEMA_VERSION_ID


JOBS_VARIABLE = "CRASHPROOF_JOBS"


def default_jobs() -> int:
    """Worlds side by side when --jobs is not given: CRASHPROOF_JOBS, else one per core and one more. A case also
    waits (commits, a crashed server's restart, its implementation's start and exit), and the extra world fills
    those waits: on 2 cores the full matrix took 113 and 115 s with 3 jobs against 122 and 126 s with 2, run
    alternately. A runner that already runs several jobs side by side (make test's test processes) sets it lower."""
    value = os.environ.get(JOBS_VARIABLE, "").strip()
    if not value:
        return (os.cpu_count() or 1) + 1
    if not value.isdigit() or int(value) < 1:
        raise TestHostError(f"{JOBS_VARIABLE}={value!r}: the default number of jobs must be a whole number, at least 1")
    return int(value)


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


def schema_version_plans(scenario_filter, cases: list[str] = ()) -> list[CasePlan]:
    """The schema-version stage's plan when the --scenario filter selects it (and, with --case, one names it)."""
    named = not cases or any(case_id.strip() == SCHEMA_VERSION_ID for case_id in cases)
    return [CasePlan(SCHEMA_VERSION_ID)] if named and matches(SCHEMA_VERSION_ID, scenario_filter) else []


def stage_plans(options: Options) -> list[CasePlan]:
    """The schema-version stage's plan when this run selects it (a team's own catalog alone is its cases, no stage)."""
    builtin = not options.catalog or options.with_builtin
    return schema_version_plans(options.scenario, options.cases) if builtin else []


def schema_stage_plans(scenario_filter) -> list[CasePlan]:
    """The schema stage as a case of `crashproof mutants` (a mutant's own migrations, or the normative schema for
    the control) when the --scenario filter selects its id; certify runs it before the cases instead."""
    return [CasePlan(SCHEMA_STAGE_ID)] if matches(SCHEMA_STAGE_ID, scenario_filter) else []


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


def validate(options: Options) -> tuple[list[Scenario], list[CasePlan]]:
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


def check_world_options(options: Options) -> None:
    """--migrations and --dsn, checked before any worker starts: a one-line error each."""
    if options.migrations is not None:
        from .schema_stage import check_directory
        check_directory(options.migrations)
    if options.dsn:
        from testhost.world.worlds import ExternalWorld
        ExternalWorld(options.dsn, network_optional=True).up().down()
