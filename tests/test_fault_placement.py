"""A faulted run whose timeline never reached its planned hit is run again before `planned-fault-fired` fails it
(docs/protocol-notes.md 38f): how often a pass claims can depend on when its decisions cut off."""

from __future__ import annotations

import pytest

from scenarios.matrix import CasePlan
from scenarios.scenario import load_catalog
from testhost.case import runner
from testhost.case.runner import PLACEMENT_RUNS, REFERENCE_COMMAND, CaseOutcome, planned_hit_not_reached, run_case
from testhost.judge.rules import CheckResult

PLAN = CasePlan("at-single", "schedule-claim-after-commit", "kill", 1)


def _outcome(plan: CasePlan, verdict: str, failed: tuple[str, ...]) -> CaseOutcome:
    checks = [CheckResult(name, "r", False, [{"x": 1}], 1) for name in failed]
    return CaseOutcome(plan, verdict, ", ".join(failed), checks + [CheckResult("other", "r", True, [], 1)])


def test_only_a_faulted_run_that_failed_nothing_but_its_placement_is_run_again():
    assert planned_hit_not_reached(_outcome(PLAN, "fail", ("planned-fault-fired",)))
    # Another check failed too: a finding, judged as it ran.
    assert not planned_hit_not_reached(_outcome(PLAN, "fail", ("planned-fault-fired", "model-agreement")))
    assert not planned_hit_not_reached(_outcome(PLAN, "fail", ("model-agreement",)))
    assert not planned_hit_not_reached(_outcome(PLAN, "error", ("planned-fault-fired",)))
    # A fault-free run has no placement: its missing barrier is `barrier-coverage`'s to judge.
    assert not planned_hit_not_reached(_outcome(CasePlan("at-single"), "fail", ("planned-fault-fired",)))


@pytest.fixture
def at_single():
    return next(s for s in load_catalog() if s.name == "at-single")


@pytest.mark.world
def test_a_hit_no_run_reaches_fails_after_every_run(world, tmp_path, at_single):
    never = CasePlan("at-single", "schedule-claim-after-commit", "kill", 99)
    outcome = run_case(world, at_single, never, REFERENCE_COMMAND, tmp_path)
    assert outcome.verdict == "fail" and outcome.reason == "planned-fault-fired"
    assert len(outcome.placements_missed) == PLACEMENT_RUNS - 1
    assert all(m["barrier_hits"]["schedule-claim-after-commit"] < 99 for m in outcome.placements_missed)
    assert outcome.to_json()["placements_missed"] == outcome.placements_missed


@pytest.mark.world
def test_a_run_that_missed_its_hit_once_is_judged_by_the_run_that_reached_it(world, tmp_path, at_single,
                                                                              monkeypatch):
    # The first run's timeline stops short of the hit (as a pass that claimed once instead of twice would): it is
    # planned at a hit that never comes; the second run is the case as planned.
    runs = []
    real_init = runner.CaseRun.__init__

    def first_run_misses(self, world_, scenario, plan, *args, **kwargs):
        runs.append(plan)
        missed = CasePlan(plan.scenario, plan.barrier, plan.fault, 99) if len(runs) == 1 else plan
        real_init(self, world_, scenario, missed, *args, **kwargs)

    monkeypatch.setattr(runner.CaseRun, "__init__", first_run_misses)
    outcome = run_case(world, at_single, PLAN, REFERENCE_COMMAND, tmp_path)
    assert len(runs) == 2
    assert outcome.verdict == "pass", outcome.reason
    assert outcome.plan == PLAN and len(outcome.placements_missed) == 1
    assert outcome.to_json()["placements_missed"][0]["barrier_hits"]["schedule-claim-after-commit"] >= 1
