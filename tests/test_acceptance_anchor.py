"""`acceptance-anchor`: an Every generation whose command gave no anchor is anchored on its own accepted_at_utc,
an update's as much as a create's; against synthetic states and real runs of `update-unanchored`."""

from __future__ import annotations

import shlex
import sys
import uuid
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

from mutants.catalog import ACCEPTANCE_ANCHOR
from scenarios.matrix import CasePlan
from scenarios.scenario import load_catalog
from testhost.judge.clock_samples import acceptance_anchor
from testhost.judge.registry import CHECKS
from testhost.judge.gate_model import Generation
from testhost.case.runner import run_case
from testhost.judge.state import StoreState

T = datetime(2031, 3, 3, 9, 0, 0, 123456, tzinfo=timezone.utc)
S = uuid.UUID("00000000-0000-4000-8000-000000000001")
EVERY = timedelta(seconds=40)


def _state(*anchors):
    """A schedule's generations 1..n, accepted a second apart, with the anchors stored."""
    rows = [{"schedule_id": S, "generation": n, "schedule_kind": "every", "accepted_at_utc": T + timedelta(seconds=n),
             "anchor_utc": anchor} for n, anchor in enumerate(anchors, 1)]
    return StoreState(now=T, definitions=[], generations=rows, occurrences=[], work=[], dispatch=[], history=[])


def _model(*explicit):
    """The model's generations: anchored on their acceptance, or on the explicit anchor given."""
    generations = [Generation(n, "every", T + timedelta(seconds=n), every=EVERY,
                              anchor=anchor if anchor is not None else T + timedelta(seconds=n))
                   for n, anchor in enumerate(explicit, 1)]
    return SimpleNamespace(schedules={"poll": SimpleNamespace(generations=generations)})


def test_the_rule_is_the_spec_sentence_and_is_registered_for_the_protocol_page():
    assert CHECKS["acceptance-anchor"].startswith(ACCEPTANCE_ANCHOR)


def test_each_unanchored_generation_on_its_own_acceptance_passes_and_explicit_anchors_are_not_judged():
    result = acceptance_anchor(_state(T + timedelta(seconds=1), T - timedelta(days=1)), {"poll": S},
                               _model(None, T - timedelta(days=1)))
    assert result.ok and result.rows == 1


def test_an_update_anchored_on_the_first_acceptance_or_the_whole_second_fails_naming_the_generation():
    first = acceptance_anchor(_state(T + timedelta(seconds=1), T + timedelta(seconds=1)), {"poll": S},
                              _model(None, None))
    assert not first.ok and first.rows == 2 and first.rule == CHECKS["acceptance-anchor"]
    assert [e["generation"] for e in first.evidence] == [2]
    cut = acceptance_anchor(_state(T + timedelta(seconds=1), (T + timedelta(seconds=2)).replace(microsecond=0)),
                            {"poll": S}, _model(None, None))
    [evidence] = cut.evidence
    assert evidence["anchor_utc"] == "2031-03-03T09:00:02.000000Z"
    assert evidence["accepted_at_utc"] == "2031-03-03T09:00:02.123456Z"


def test_a_missing_anchor_fails_and_a_generation_the_database_lacks_is_left_to_the_model():
    assert not acceptance_anchor(_state(None), {"poll": S}, _model(None)).ok
    lacking = acceptance_anchor(_state(T + timedelta(seconds=1)), {"poll": S}, _model(None, None))
    assert lacking.ok and lacking.rows == 1


def _run(world, tmp_path, plan: CasePlan, module_args: str):
    scenario = next(s for s in load_catalog() if s.name == plan.scenario)
    outcome = run_case(world, scenario, plan, f"{shlex.quote(sys.executable)} -m {module_args}", tmp_path)
    return outcome, {c.name: c for c in outcome.checks}


def test_the_reference_anchors_create_and_update_on_their_acceptance(world, tmp_path):
    outcome, checks = _run(world, tmp_path, CasePlan("update-unanchored"), "reference.adapter")
    assert outcome.verdict == "pass", outcome.reason
    assert checks["acceptance-anchor"].ok and checks["acceptance-anchor"].rows == 2


def test_an_update_anchored_on_the_whole_second_is_caught_in_a_faulted_case_too(world, tmp_path):
    plan = CasePlan("update-unanchored", "schedule-decision-after-commit", "kill", 1)
    outcome, checks = _run(world, tmp_path, plan, "mutants update-anchored-on-the-second")
    assert outcome.verdict == "fail" and "acceptance-anchor" in outcome.reason
    [evidence] = checks["acceptance-anchor"].evidence
    assert evidence["generation"] == 2 and evidence["anchor_utc"].endswith(".000000Z")
