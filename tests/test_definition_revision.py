"""`definition-revision`: the definition row's revision records every change of its lifecycle, generation and
fences, seen after every step and in the final state; against synthetic observations and real runs."""

from __future__ import annotations

import shlex
import sys
import uuid
from datetime import datetime, timedelta, timezone

from mutants.catalog import DEFINITION_ROW
from scenarios.matrix import CasePlan
from scenarios.scenario import load_catalog
from testhost.judge.registry import CHECKS
from testhost.judge.observations import definition_revision
from scenarios.matrix import CasePlan
from testhost.case.runner import run_case
from testhost.judge.state import StoreState

T = datetime(2031, 3, 3, tzinfo=timezone.utc)
S = "00000000-0000-4000-8000-000000000001"


def _row(revision: int, lifecycle="active", reason=None, generation=1, epoch=1, scope_generation=1, cursor=T):
    return {"schedule_id": S, "cursor_utc": cursor, "active_generation": generation, "revision": revision,
            "lifecycle_state": lifecycle, "suspension_reason": reason, "runtime_epoch": epoch,
            "scope_generation": scope_generation}


def _seen(*rows, restored_at=None):
    return [(i, {"cursors": {S: row}, "restored": i == restored_at}) for i, row in enumerate(rows)]


def test_the_rule_is_the_spec_sentence_and_is_registered_for_the_protocol_page():
    assert CHECKS["definition-revision"].startswith(DEFINITION_ROW)


def test_a_cursor_that_moves_under_one_revision_and_a_change_under_a_new_one_pass():
    result = definition_revision(_seen(_row(1), _row(1, cursor=T + timedelta(minutes=1)),
                                       _row(2, "suspended", "clock-anomaly", cursor=T + timedelta(minutes=1)),
                                       _row(3, generation=2, cursor=T + timedelta(minutes=1))))
    assert result.ok and result.rows == 3


def test_a_suspension_under_the_old_revision_fails_naming_what_changed():
    result = definition_revision(_seen(_row(1), _row(1, "suspended", "runtime-epoch")))
    assert not result.ok and result.rule == CHECKS["definition-revision"]
    [evidence] = result.evidence
    assert evidence["revision"] == [1, 1] and evidence["after_step"] == 1 and evidence["at_step"] == 2
    assert evidence["changed"] == {"lifecycle_state": ["active", "suspended"],
                                   "suspension_reason": [None, "runtime-epoch"]}


def test_a_rebound_fence_under_the_old_revision_and_a_revision_that_moves_back_fail():
    rebound = definition_revision(_seen(_row(2, "suspended", "runtime-epoch"), _row(2, epoch=2, scope_generation=3)))
    assert not rebound.ok and set(rebound.evidence[0]["changed"]) == {"lifecycle_state", "suspension_reason",
                                                                      "runtime_epoch", "scope_generation"}
    back = definition_revision(_seen(_row(3), _row(2)))
    assert not back.ok and back.evidence[0]["revision"] == [3, 2] and back.evidence[0]["changed"] == {}


def test_a_restore_is_no_move_of_the_timeline_and_the_final_state_is_judged_too():
    assert definition_revision(_seen(_row(3), _row(1), restored_at=1)).ok
    final = StoreState(now=T, definitions=[{**_row(1, "suspended", "clock-anomaly"), "schedule_id": uuid.UUID(S)}],
                       generations=[], occurrences=[], work=[], dispatch=[], history=[])
    result = definition_revision(_seen(_row(1)), final)
    assert not result.ok and result.evidence[0]["at_step"] == "final"


def _run(world, tmp_path, plan: CasePlan, module_args: str):
    scenario = next(s for s in load_catalog() if s.name == plan.scenario)
    outcome = run_case(world, scenario, plan, f"{shlex.quote(sys.executable)} -m {module_args}", tmp_path)
    return outcome, {c.name: c for c in outcome.checks}


def test_the_reference_moves_the_revision_with_each_suspension_release_and_update(world, tmp_path):
    for scenario in ("anomaly-suspends", "epoch-release"):
        outcome, checks = _run(world, tmp_path / scenario, CasePlan(scenario), "reference.adapter")
        assert outcome.verdict == "pass", outcome.reason
        assert checks["definition-revision"].ok and checks["definition-revision"].rows >= 3


def test_a_suspension_that_keeps_the_revision_is_caught(world, tmp_path):
    outcome, checks = _run(world, tmp_path, CasePlan("anomaly-suspends"), "mutants suspension-keeps-the-revision")
    assert outcome.verdict == "fail" and outcome.reason == "definition-revision"
    evidence = checks["definition-revision"].evidence
    assert evidence[0]["revision"] == [1, 1] and evidence[0]["changed"]["suspension_reason"] == [None, "clock-anomaly"]
