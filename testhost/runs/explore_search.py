"""One exploring search in one world: Hypothesis draws scenario programs (scenarios/generate.py) and a fault from
each program's own matrix, runs them as cases (testhost/case/runner.py), and shrinks the first failure."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from hypothesis import HealthCheck, Phase, assume, given, seed as hypothesis_seed, settings
from hypothesis import strategies as st
from hypothesis.errors import UnsatisfiedAssumption
from hypothesis.reporting import with_reporter

from scenarios.generate import EDGE_MOTIFS, motif_programs, program_name, scenario_programs, scenario_toml
from scenarios.matrix import CasePlan, expand
from scenarios.scenario import parse

from testhost.case.runner import run_case
from testhost.faults.catalog import FAULTS

from .explore_profiles import Profile

DESCRIPTION = "A timeline crashproof explore generated."


@dataclass
class Stats:
    """What a search did so far; summed over the jobs for the progress line and the report."""

    examples: int = 0  # programs drawn (shrinking aside): the judged ones and the ones set aside
    judged: int = 0  # drawn programs that were run and judged: what --max-examples and a profile's budget count
    steps: int = 0
    cases: int = 0  # every case run, shrinking included (the report holds fewer: see cases_set_aside)
    faulted: int = 0
    fired: dict[str, int] = field(default_factory=dict)  # fault -> how many planned faults fired
    failures: int = 0
    shrinks: int = 0
    rejected: int = 0  # programs set aside: a step beside a barrier its pass never reached
    cases_set_aside: int = 0  # cases run and then left out of the report: they judged nothing
    edge_programs: int = 0  # the edge sweep's programs: each edge motif's ways onto its edge, run first
    hostile: int = 0  # hostile calls sent (testhost/runs/hostile_phase.py)
    hostile_failures: int = 0
    hostile_to: dict[str, int] = field(default_factory=dict)  # where they went: implementation, fallback, claim
    steps_to_failure: int | None = None  # steps run up to and including the first failing program
    examples_to_failure: int | None = None

    def to_json(self) -> dict:
        return dict(self.__dict__)


REPLAYS = 2  # fresh runs of a shrunk failure before it is written: how often it reproduces is written beside it


def diagnosis(case: dict) -> frozenset:
    """What a case failed: its failing checks, or its verdict when none failed (an `error`)."""
    failing = frozenset(c["name"] for c in case["checks"] if not c["ok"])
    return failing if failing or case["verdict"] == "pass" else frozenset({f"verdict {case['verdict']}"})


def _vacuous(case: dict) -> bool:
    """A fault-free run that asked for a moment its own timeline does not have: a `during` step's barrier or a
    `cancel_at` barrier its pass never reached, a denied pass with nothing due. Such a program judges nothing, and
    a file holding it would fail every implementation, so it is set aside whatever else failed."""
    for check in case["checks"]:
        if check["ok"]:
            continue
        if check["name"] == "beside-barrier-reached" or any(
                isinstance(e, dict) and (e.get("delivered") is False or "tested_nothing" in e)
                for e in check["evidence"]):
            return True
    return False


def _nothing_to_cancel(case: dict) -> bool:
    """A `cancel` fault whose next transaction never waited for the held row (a decision that suspended has no
    bridge after it): the matrix plans it only where one follows (at-single), a drawn program may not have one. The
    planned fault never happened, so the case judged nothing whatever else failed: a file holding it would fail
    `cancel-retried` on every implementation."""
    return any(c["name"] == "cancel-retried" and not c["ok"] and any(
        isinstance(e, dict) and "nothing_cancelled" in e for e in c["evidence"]) for c in case["checks"])


class Search:
    """Programs and their faults against one implementation in one world, until a budget is spent."""

    def __init__(self, world, command: str, profile: Profile, log_dir: Path,
                 report: Callable[[Stats], None] = lambda stats: None, migrations: Path | None = None,
                 deadline: float | None = None):
        self.world, self.command, self.profile, self.log_dir = world, command, profile, log_dir
        self.migrations, self.report, self.deadline = migrations, report, deadline
        self.stats = Stats()
        self.cache: dict[tuple[str, str], dict] = {}  # (program text, case id) -> its case; a replay is free
        self.cases: list[dict] = []
        self.failure: dict | None = None
        self.shrink_until: float | None = None
        self.blob: str | None = None
        self.diagnosis: frozenset = frozenset()  # what the first failure failed: its shrinks must fail it too
        self.rejected: set[str] = set()  # programs whose `during` step found no moment to run at
        self.identity = ""  # the implementation's identity, as its hello said
        # Faulted cases run per (barrier, fault), so the draw can favour what the search has run least; each
        # program's order is fixed the first time it runs, so a replay of it draws the same cases.
        self.covered: dict[tuple[str, str], int] = {}
        self.orders: dict[tuple, list] = {}

    def case(self, name: str, text: str, plan: CasePlan, baseline: dict | None) -> dict | None:
        """The case's result (None: the shrink budget is spent and it did not run)."""
        key = (text, plan.id)
        if key in self.cache:
            return self.cache[key]
        if self.shrink_until is not None and time.monotonic() > self.shrink_until:
            return None
        scenario = parse(name, text)
        outcome = run_case(self.world, scenario, plan, self.command, self.log_dir, baseline, self.migrations)
        self.identity = self.identity or outcome.implementation
        found = {"case": outcome.to_json(), "baseline": outcome.baseline, "steps": len(scenario.steps)}
        self.cache[key] = found
        self._count(found, plan)
        return found

    def _count(self, found: dict, plan: CasePlan) -> None:
        case = found["case"]
        self.stats.cases += 1
        if self.shrink_until is not None:
            self.stats.shrinks += 1
        else:
            self.stats.steps += found["steps"]
        if plan.fault is not None:
            self.stats.faulted += 1
            self.covered[(plan.barrier, plan.fault)] = self.covered.get((plan.barrier, plan.fault), 0) + 1
            if any(c["name"] == "planned-fault-fired" and c["ok"] for c in case["checks"]):
                self.stats.fired[plan.fault] = self.stats.fired.get(plan.fault, 0) + 1
        self.cases.append(case)
        self.report(self.stats)

    def _failed(self, steps: list[dict], header: dict, name: str, text: str, found: dict, plan: CasePlan) -> None:
        case = found["case"]
        failing = diagnosis(case)
        if self.failure is not None and not failing >= self.diagnosis:
            # Shrinking keeps the first failure's diagnosis: a smaller program failing other checks is another bug,
            # and a shrink that slides onto it would write a file that no longer shows the one found. (What
            # `assume(False)` raises, raised as itself: `_failed` is also called outside a search, by tests.)
            raise UnsatisfiedAssumption("another diagnosis")
        if self.failure is None:
            self.diagnosis = failing
            self.stats.failures += 1
            self.stats.steps_to_failure = self.stats.steps
            self.stats.examples_to_failure = self.stats.examples
            self.shrink_until = time.monotonic() + self.profile.shrink_s
            self.report(self.stats)
        self.failure = {"steps": steps, "header": header, "name": name, "text": text, "case": case, "plan": plan,
                        "checks": [{"name": c["name"], "rule": c["rule"]} for c in case["checks"] if not c["ok"]]}
        raise AssertionError(f"{case['id']}: {case['verdict']}: {case['reason']}")

    def body(self, data) -> None:
        steps, header = data.draw(scenario_programs(self.profile.max_steps), label="program")
        name = program_name(steps, header)
        text = scenario_toml(steps, DESCRIPTION, header=header)
        drawing = self.shrink_until is None  # a drawn program, not one of the shrinker's
        if drawing:
            self.stats.examples += 1
        free = self.case(name, text, CasePlan(name), None)
        if free is None:
            return
        failed = {c["name"] for c in free["case"]["checks"] if not c["ok"]}
        # A step drawn beside a barrier its pass never reached asked for a moment this timeline does not have:
        # no program to judge (the check stays in force for written scenarios).
        if failed == {"beside-barrier-reached"} or _vacuous(free["case"]):
            if name not in self.rejected:
                self.rejected.add(name)
                self.stats.rejected += 1
                self._set_aside(lambda c: c["scenario"] == name)  # judged nothing: not reported
            assume(False)
        if drawing:
            self.stats.judged += 1
        if free["case"]["verdict"] in ("fail", "error"):
            self._failed(steps, header, name, text, free, CasePlan(name))
        offered = set(free["case"]["operations"]) or None
        plans, _ = expand([parse(name, text)], {name: free["case"]["barrier_hits"]}, FAULTS, offered=offered)
        if not plans or data.draw(st.integers(0, 99), label="fault?") >= self.profile.fault_percent:
            return
        # Swarm testing for faults too: each program draws the faults it may use, so some are dense in one.
        chosen = {fault for fault in FAULTS if data.draw(st.booleans(), label=f"fault {fault}?")}
        if "client-deadline" in header.get("covers", ()):
            chosen = {"lost-commit-reply"}  # the cover's point: lost COMMIT replies held past the deadline
        plans = self._order(name, [plan for plan in plans if plan.fault in chosen] or plans)
        # A program's matrix has dozens of cases and its fault-free run is the cheap part: several faults each.
        for _ in range(data.draw(st.integers(1, self.profile.faults_per_program), label="faults")):
            # Mostly among the quarter of the program's cases whose barrier and fault the search ran least.
            few = max(1, len(plans) // 4)
            pool = plans[:few] if data.draw(st.integers(0, 3), label="least covered?") != 3 else plans
            plan = data.draw(st.sampled_from(pool), label="fault")
            faulted = self.case(name, text, plan, free["baseline"])
            if faulted is not None and _nothing_to_cancel(faulted["case"]):
                self._set_aside(lambda c: c["id"] == faulted["case"]["id"])  # judged nothing
                continue
            if faulted is not None and faulted["case"]["verdict"] in ("fail", "error"):
                self._failed(steps, header, name, text, faulted, plan)

    def _set_aside(self, judged_nothing: Callable[[dict], bool]) -> None:
        """Leave out of the report the cases that judged nothing, counting them (the report's counts add up)."""
        kept = [c for c in self.cases if not judged_nothing(c)]
        self.stats.cases_set_aside += len(self.cases) - len(kept)
        self.cases = kept

    def _order(self, name: str, plans: list) -> list:
        """The program's cases, least run (barrier, fault) first; fixed once per program, so replays agree."""
        key = (name, tuple(plan.id for plan in plans))
        if key not in self.orders:
            self.orders[key] = sorted(plans, key=lambda p: (self.covered.get((p.barrier, p.fault), 0), p.id))
        return self.orders[key]

    def _out_of_time(self) -> bool:
        return self.deadline is not None and time.monotonic() > self.deadline

    def edge_sweep(self) -> None:
        """Each edge motif's programs (scenarios/generate.py `EDGE_MOTIFS`: the edges the protocol notes declare),
        fault-free, before any drawn program: an edge is met on purpose, not by the odds of a draw. A failure is
        recorded as the search's (the program is as small as its motif writes it) and replayed like any other."""
        for motif in EDGE_MOTIFS:
            for steps, header in motif_programs(motif):
                if self.failure is not None or self._out_of_time():
                    return
                name = program_name(steps, header)
                text = scenario_toml(steps, DESCRIPTION, header=header)
                self.stats.edge_programs += 1
                found = self.case(name, text, CasePlan(name), None)
                if found is not None and found["case"]["verdict"] in ("fail", "error"):
                    try:
                        self._failed(steps, header, name, text, found, CasePlan(name))
                    except AssertionError:
                        pass  # recorded: the failure is the search's first

    def run(self, seed: int, max_examples: int, edges: bool = False) -> None:
        """The edge sweep (when `edges`: one job of a run does it), then rounds of Hypothesis until max_examples
        programs ran, the deadline passed, or a failure was shrunk; a failure is then replayed afresh."""
        if edges:
            self.edge_sweep()
        round_seed, left = seed, max_examples
        while left > 0 and self.failure is None and not self._out_of_time():
            chunk = min(left, 20) if self.deadline is not None else left
            self._round(round_seed, chunk)
            left -= chunk
            round_seed += 1_000_003  # the next round's programs are new ones
        if self.failure is not None:
            self.failure["replayed"] = self.replay(self.failure)

    def replay(self, failure: dict, runs: int = REPLAYS) -> dict:
        """The shrunk program run again from nothing, as `certify --case` will run its file: its fault-free case
        first (a faulted case's baseline), then the failing case. Inside the search every case ran once (replays
        came from the cache), so this is the first time a failure is shown to be more than one run's timing."""
        scenario = parse(failure["name"], failure["text"])
        plan = failure["plan"]
        seen = []
        for _ in range(runs):
            free = run_case(self.world, scenario, CasePlan(failure["name"]), self.command, self.log_dir, None,
                            self.migrations)
            outcome = free if plan.fault is None else run_case(
                self.world, scenario, plan, self.command, self.log_dir, free.baseline, self.migrations)
            seen.append(sorted(diagnosis(outcome.to_json())))
        reproduced = sum(1 for failing in seen if frozenset(failing) >= self.diagnosis)
        return {"runs": runs, "reproduced": reproduced, "diagnoses": seen}

    def _round(self, seed: int, examples: int) -> None:
        search = self

        @hypothesis_seed(seed)
        @settings(max_examples=examples, deadline=None, database=None, derandomize=False, print_blob=True,
                  report_multiple_bugs=False, suppress_health_check=list(HealthCheck),
                  phases=(Phase.generate, Phase.shrink))
        @given(st.data())
        def explore(data):
            if search._out_of_time() and search.failure is None:
                return  # the duration is spent: the rest of the round's examples run nothing
            search.body(data)

        lines: list[str] = []
        try:
            with with_reporter(lines.append):
                explore()
        except AssertionError:
            if self.failure is None:
                raise
        blob = [line for line in lines if "reproduce_failure" in line]
        if blob:
            self.blob = blob[-1].strip()
