"""`crashproof mutants`: run the matrix against every mutant and report which cases caught it, under which rule.

A mutant counts as killed only when a case fails with a check that names the spec sentence the mutant
breaks. The search goes from cheap to exhaustive and stops per mutant once that happens: first the cases
the mutant's catalog entry points at (its slice), then every scenario's fault-free run, then the rest of
the matrix. A control run puts the reference through the same slices: a slice the reference fails too
proves nothing, so the run fails.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from mutants import MUTANTS, Mutant, migrations_dir
from scenarios.matrix import CasePlan, expand, select
from scenarios.scenario import load_catalog

from testhost.impl.reference_command import REFERENCE_COMMAND
from testhost.faults.catalog import FAULTS
from testhost.world.workspace import DEFAULT_ROOT

from .options import Options, schema_stage_plans, schema_version_plans
from .pool import Progress, RunStopped, StopSignals, new_pool, run_cases
from .stages import declared_operations
from .workers import run_plan
from .patch_mutants import PatchMutant, load as load_patch_mutants

CONTROL = "control"  # the label of the unmutated implementation's jobs (a mutant may not take it)


@dataclass
class Verdict:
    """What the matrix made of one mutant."""

    mutant: Mutant | PatchMutant
    cases_run: int = 0
    failed: list[dict] = field(default_factory=list)  # {"id", "checks": [(name, rule)]}
    errors: list[str] = field(default_factory=list)

    @property
    def caught(self) -> bool:
        return bool(self.failed)

    @property
    def naming(self) -> list[dict]:
        """The failed cases whose diagnosis names the broken rule (its sentence, or the check's name)."""
        return [c for c in self.failed if any(self._names(name, rule) for name, rule in c["checks"])]

    def _names(self, name: str, rule: str) -> bool:
        return self.mutant.rule in rule or self.mutant.rule == name

    @property
    def also_named(self) -> list[str]:
        """The other sentences the mutant is declared to break that some failed case's check names."""
        return [also for also in getattr(self.mutant, "also", ()) if any(
            also in rule for c in self.failed for _, rule in c["checks"])]

    @property
    def killed(self) -> bool:
        return bool(self.naming)

    @property
    def settled(self) -> bool:
        """Killed, and every sentence of its `also` named: a further case could only be one more that catches it."""
        return self.killed and len(self.also_named) == len(getattr(self.mutant, "also", ()))

    def to_json(self) -> dict:
        # Once killed, report only the cases and checks that name the broken rule; else every failure seen.
        cases = self.naming or self.failed
        checks = {name for c in cases for name, rule in c["checks"] if not self.killed or self._names(name, rule)}
        return {"mutant": self.mutant.name, "rule": self.mutant.rule, "description": self.mutant.description,
                "caught": self.caught, "rule_named": self.killed, "cases_run": self.cases_run,
                "caught_by": [c["id"] for c in cases], "checks_named": sorted(checks),
                "also": list(getattr(self.mutant, "also", ())), "also_named": self.also_named,
                "errors": self.errors[:5]}


def _matches(plan: CasePlan, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatch(plan.id, p) for p in patterns)


def select_mutants(names: str | None) -> list[Mutant]:
    chosen = [m for m in MUTANTS if names is None or any(fnmatch.fnmatch(m.name, n) for n in names.split(","))]
    if not chosen:
        raise ValueError(f"no mutant matches {names!r}; `python -m mutants --list` shows the catalog")
    return chosen


def plan_slices(mutants: list, census: dict[str, dict[str, int]], offered: set[str] | None = None,
                scenario: str | None = None):
    """Every case of the matrix (of the scenarios matching `scenario`), and per mutant the cases its slice names
    (fault-free runs by scenario name)."""
    scenarios = select(load_catalog(), scenario)
    faulted, _ = expand(scenarios, census, FAULTS, offered=offered)
    fault_free = [CasePlan(s.name) for s in scenarios] + schema_version_plans(scenario) + schema_stage_plans(scenario)
    matrix = fault_free + faulted
    return matrix, {m.name: [p for p in matrix if _matches(p, m.slice)] for m in mutants}


def _with_baselines(plans: list[CasePlan]) -> list[CasePlan]:
    """A faulted case is compared with its scenario's fault-free run: that runs first, in the same batch."""
    wanted = {p.scenario for p in plans if p.fault is not None} - {p.scenario for p in plans if p.fault is None}
    return [CasePlan(name) for name in sorted(wanted)] + plans


@dataclass(frozen=True)
class Job(CasePlan):
    """A case for one implementation: the mutant's command and schema travel with the plan."""

    command: str = ""
    migrations: str | None = None
    label: str = "control"  # the mutant's name, or control: names the folder of its logs


    @property
    def case(self) -> CasePlan:
        return CasePlan(self.scenario, self.barrier, self.fault, self.hit, self.repeat)


def log_folder(log_dir: str, label: str) -> Path:
    """One folder of logs per job label: the control and each mutant run the same case ids, in parallel, and
    their commands may share a file name (every patched copy of examples/go/run.sh is a run.sh)."""
    return Path(log_dir) / (re.sub(r"[^A-Za-z0-9_.-]+", "-", label).strip("-.") or "unnamed")


def _job_worker(job: Job, _command: str, log_dir: str, baseline: dict | None) -> dict:
    return run_plan(job.case, job.command, str(log_folder(log_dir, job.label)), baseline, job.migrations)


class MutantRun:
    """Runs batches of jobs through one worker pool, fault-free cases first so faulted ones have baselines."""

    def __init__(self, options: Options, log_dir: Path, signals: StopSignals):
        self.options, self.log_dir, self.signals = options, log_dir, signals
        self.pool = signals.pool = new_pool(options)
        self.baselines: dict[tuple[str, str], dict] = {}  # (job label, scenario) -> its fault-free run's baseline

    def close(self) -> None:
        self.pool.close()

    def run(self, jobs: list[tuple[str, str, str | None, CasePlan]], label: str,
            settled: Callable[[str], bool] = lambda label: False,
            on_case: Callable[[str, dict], None] = lambda label, case: None) -> list[tuple[str, dict]]:
        """jobs: (job label, command, migrations, plan). Returns (job label, case) for every plan that ran, each
        also handed to `on_case` as it finishes. A faulted job whose label is `settled` when its turn comes does
        not run; every fault-free one does (few, and each the baseline of its scenario's faulted cases)."""
        results: list[tuple[str, dict]] = []
        for phase in (lambda p: p.fault is None, lambda p: p.fault is not None):
            batch = [Job(p.scenario, p.barrier, p.fault, p.hit, p.repeat, command, migrations, name)
                     for name, command, migrations, p in jobs if phase(p)]
            if not batch:
                continue
            ran: list[dict] = []
            run_cases(self.pool, [(j, self.baselines.get((j.label, j.scenario))) for j in batch], "",
                      str(self.log_dir), Progress(len(batch), self.options.progress, label),
                      worker=_job_worker, results=ran, signals=self.signals,
                      skip=lambda job: job.fault is not None and settled(job.label),
                      finished=lambda r: on_case(r["plan"].label, r["case"]))
            results += [(r["plan"].label, r["case"]) for r in ran]
            for r in ran:
                job = r["plan"]
                if job.fault is None and r.get("baseline") is not None:
                    self.baselines[(job.label, job.scenario)] = r["baseline"]
        return results


def _record(verdict: Verdict, cases: list[dict]) -> None:
    for case in cases:
        verdict.cases_run += 1
        if case["verdict"] == "fail":
            verdict.failed.append({"id": case["id"], "checks": [(c["name"], c["rule"]) for c in case["checks"]
                                                                 if not c["ok"]]})
        elif case["verdict"] == "error":
            verdict.errors.append(f"{case['id']}: {case['reason']}")


def _load(names: str | None, impl: str | None, mutants_dir: Path | None, root: Path | None,
          copies: Path | None) -> list:
    """The mutants to run: the catalog's, or the patches of `impl` in `mutants_dir` (applied to copies)."""
    mutants = load_patch_mutants(impl, mutants_dir, root, names, copies) if mutants_dir else select_mutants(names)
    if any(m.name == CONTROL for m in mutants):
        raise ValueError(f"a mutant may not be named {CONTROL!r}: the unmutated implementation's logs go "
                         "there; rename its patch")
    return mutants


def _census_and_control(runner: MutantRun, options: Options, mutants: list, control_command: str,
                        control: list[dict]) -> tuple[list[CasePlan], dict[str, list[CasePlan]]]:
    """The unmutated implementation's census plans the matrix and each mutant's slice; then it runs every slice (the
    control), its cases going to `control` as they come. The matrix and the slices."""
    census_cases = runner.run([(CONTROL, control_command, None, CasePlan(s.name))
                               for s in select(load_catalog(), options.scenario)] +
                              [(CONTROL, control_command, None, p)
                               for p in schema_version_plans(options.scenario)],
                              "census (unmutated implementation)")
    census = {c["scenario"]: c["barrier_hits"] for _, c in census_cases}
    matrix, slices = plan_slices(mutants, census, declared_operations([{"case": c} for _, c in census_cases]),
                                 options.scenario)
    control_plans = sorted({p for plans in slices.values() for p in plans}, key=lambda p: p.id)
    control_ids = {p.id for p in control_plans}
    control += [c for _, c in census_cases if c["id"] in control_ids]
    census_ids = {c["id"] for _, c in census_cases}
    control += [c for _, c in runner.run([(CONTROL, control_command, None, p) for p in control_plans
                                          if p.id not in census_ids],
                                         "control (unmutated implementation on every slice)")]
    return matrix, slices


def _hunt(runner: MutantRun, verdicts: dict[str, Verdict], matrix: list[CasePlan], slices: dict[str, list[CasePlan]],
          exhaustive: bool, all_cases: bool) -> None:
    """Each mutant through the phases (its slice; then, exhaustive, the fault-free runs and the rest of the matrix)
    until a case names its broken rule (or, all_cases, through every case); each case run no more than once. Within
    a phase a mutant's faulted cases stop once it is settled (killed, and every sentence of its `also` named): a
    further one could only be one more case that catches it (`--all-cases` runs them all)."""
    schema = {name: _schema_of(verdict.mutant) for name, verdict in verdicts.items()}
    done: set[tuple[str, str]] = set()
    phases = [("slice", lambda m: _with_baselines(slices[m.name])),
              ("fault-free", lambda m: [p for p in matrix if p.fault is None]),
              ("matrix", lambda m: [p for p in matrix if p.fault is not None])][:None if exhaustive else 1]
    for label, plans_of in phases:
        jobs = []
        for verdict in verdicts.values():
            if (verdict.killed and not all_cases) or (verdict.errors and
                                                      len(verdict.errors) == verdict.cases_run):
                continue  # done, or broken in a way no further case will diagnose
            m = verdict.mutant
            for plan in plans_of(m):
                if (m.name, plan.id) not in done:
                    done.add((m.name, plan.id))
                    jobs.append((m.name, m.command, schema[m.name], plan))
        runner.run(jobs, f"mutants: {label}", settled=lambda name: not all_cases and verdicts[name].settled,
                   on_case=lambda name, case: _record(verdicts[name], [case]))


def run_mutants(options: Options, names: str | None = None, *, exhaustive: bool = True, impl: str | None = None,
                mutants_dir: Path | None = None, root: Path | None = None, all_cases: bool = False) -> tuple[int, dict]:
    """Without exhaustive only the slices run (and the control): what `make test` does. With `impl` and
    `mutants_dir`, the mutants are that implementation's patches and the unpatched implementation is the control
    and the census. With all_cases every case of the matrix runs for every mutant, not only until it is killed."""
    started = time.monotonic()
    if (impl is None) != (mutants_dir is None):
        raise ValueError("--impl and --mutants go together: the implementation's command and its folder of patches")
    control_command = impl or REFERENCE_COMMAND
    report_dir = options.report_dir.absolute()
    log_dir = report_dir / "logs"  # with mutants.json, never in /tmp
    control: list[dict] = []
    verdicts: dict[str, Verdict] = {}
    stopped: RunStopped | None = None
    runner = None
    with StopSignals() as signals:
        signals.armed = True
        copies = None
        try:
            copies = _copies_dir() if mutants_dir else None
            mutants = _load(names, impl, mutants_dir, root, copies)
            shutil.rmtree(log_dir, ignore_errors=True)
            verdicts = {m.name: Verdict(m) for m in mutants}
            runner = MutantRun(options, log_dir, signals)
            matrix, slices = _census_and_control(runner, options, mutants, control_command, control)
            _hunt(runner, verdicts, matrix, slices, exhaustive, all_cases)
            signals.armed = False
        except RunStopped as stop:
            signals.armed = False
            stopped = stop  # the cases it finished before the stop are recorded already, as they finished
            if runner is not None:
                runner.pool.abort()
        finally:
            signals.armed = False
            if runner is not None and stopped is None:
                runner.close()
            if copies is not None:
                shutil.rmtree(copies, ignore_errors=True)
    return _report(options, verdicts, control, control_command, stopped, exhaustive, all_cases,
                   time.monotonic() - started, report_dir, log_dir)


def _report(options: Options, verdicts: dict[str, Verdict], control: list[dict], control_command: str,
            stopped: RunStopped | None, exhaustive: bool, all_cases: bool, elapsed: float, report_dir: Path,
            log_dir: Path) -> tuple[int, dict]:
    """mutants.json and the table; exit 0 when every mutant was killed and the control passed every slice."""
    control_failed = [c["id"] for c in control if c["verdict"] != "pass"]
    killed = sum(v.killed for v in verdicts.values())
    report = {"schema_version": 1, "duration_s": round(elapsed, 1), "jobs": options.jobs, "exhaustive": exhaustive,
              "all_cases": all_cases, "control": {"implementation": control_command, "cases": len(control), "failed": control_failed},
              "mutants": [v.to_json() for v in verdicts.values()],
              "score": {"killed": killed, "total": len(verdicts)}, "logs": os.path.relpath(log_dir, report_dir),
              "interrupted": stopped is not None}
    report_dir.mkdir(parents=True, exist_ok=True)
    path = report_dir / "mutants.json"
    path.write_text(json.dumps(report, indent=2, default=str) + "\n")
    _print_table(verdicts.values(), control, control_failed, elapsed, path)
    print(f"mutation score: {killed}/{len(verdicts)}")
    if stopped is not None:
        print(f"interrupted ({signal.Signals(stopped.signum).name}): every world torn down, the patched copies "
              f"removed; partial report: {path}", flush=True)
        return 128 + stopped.signum, report
    ok = killed == len(verdicts) and not control_failed
    return (0 if ok else 1), report


def _copies_dir() -> Path:
    """Where this run's patched copies of the implementation live: under CRASHPROOF_HOME, removed when it ends."""
    home = Path(os.environ.get("CRASHPROOF_HOME") or DEFAULT_ROOT) / "patch-mutants"
    home.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="run-", dir=home))


def _schema_of(mutant) -> str | None:
    """Where the harness builds this mutant's stores from (None: the normative schema)."""
    if isinstance(mutant, PatchMutant):
        return mutant.migrations
    return str(migrations_dir(mutant)) if mutant.changes_schema else None


def _print_table(verdicts, control: list[dict], control_failed: list[str], elapsed: float, path: Path) -> None:
    rows = [("mutant", "caught?", "by which cases", "rule the diagnosis named")]
    for v in verdicts:
        data = v.to_json()
        cases = data["caught_by"]
        shown = ", ".join(cases[:2]) + (f" (+{len(cases) - 2})" if len(cases) > 2 else "")
        if v.killed:
            named = f"{', '.join(data['checks_named'])}: {v.mutant.rule}"
        elif v.caught:
            named = f"NOT the broken rule (named {', '.join(data['checks_named'])}); broken: {v.mutant.rule}"
        else:
            named = f"-- (broken: {v.mutant.rule})"
        rows.append((v.mutant.name, "yes" if v.caught else "NO", shown or "--", named))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for r in rows:
        print(f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}")
    print(f"control: the unmutated implementation on the same slices: {len(control) - len(control_failed)}/{len(control)} passed"
          + (f"; failed: {', '.join(control_failed)}" if control_failed else ""))
    print(f"time: {elapsed:.0f}s; report: {path}")
