"""The `cancel` fault and `cancel-retried`: the judgment on written-out answers, where the matrix plans it, and
real cases (the reference and the Go example retry; a mutant that takes 57014 as definite fails naming the
sentence; an implementation with no transaction after the barrier leaves the cancel nothing to cancel)."""

import shlex
import sys
from pathlib import Path

import pytest

from scenarios.matrix import CasePlan, expand
from scenarios.scenario import load_catalog, parse
from testhost.judge.fault_checks import cancel_retried
from testhost.judge.registry import CHECKS
from testhost.faults.catalog import FAULTS
from testhost.case.runner import run_case

SENTENCE = ("Database timeouts, disconnects, and SQLSTATE failures abort the transaction and require a bounded "
            "retry only after rollback.")
FIRED = {"cancel": {"next": "the decision", "cancelled_backend": 4242}}
ROOT = Path(__file__).resolve().parent.parent
GO = ROOT / "examples" / "go" / "run.sh"
CLAIM, DECISION = (CasePlan("at-single", b, "cancel", 1)
                   for b in ("schedule-claim-after-commit", "schedule-decision-after-commit"))


def _answer(outcome, retriable=None, faulted="schedule-claim-after-commit"):
    error = None if retriable is None else {"kind": "x", "message": "canceling statement", "retriable": retriable}
    return {"instance": "A", "op": "process-due", "outcome": outcome, "error": error, "faulted": faulted}


def test_the_check_names_the_sentence_and_another_fault_is_not_judged():
    assert CHECKS["cancel-retried"].startswith(SENTENCE)
    assert cancel_retried({"stall": {}}, [_answer("fail", False)]) is None


@pytest.mark.parametrize("answer,ok", [
    (_answer("ok"), True), (_answer("fail", True), True), (_answer("unknown", True), True),
    (_answer("fail", False), False), (_answer("fail"), False), (_answer("unknown", False), False),
    (_answer("fail", False, faulted=None), True),  # a request the cancel did not hit is not judged here
])
def test_the_request_the_cancel_hit_must_retry_or_say_a_retry_may_follow(answer, ok):
    result = cancel_retried(FIRED, [answer])
    assert result.ok is ok and SENTENCE in result.rule


def test_a_cancel_that_found_nothing_waiting_fails():
    result = cancel_retried({"cancel": {"cancelled_backend": None, "why_not": "nothing waited"}}, [_answer("ok")])
    assert not result.ok and result.evidence == [{"nothing_cancelled": "nothing waited"}]


def test_the_matrix_plans_it_at_two_barriers_of_at_single_first_hits_only():
    catalog = load_catalog()
    census = {s.name: {"schedule-claim-after-commit": 3, "schedule-decision-after-commit": 3,
                       "schedule-bridge-before-commit": 1} for s in catalog}
    plans, skipped = expand(catalog, census, {"cancel": FAULTS["cancel"]})
    assert sorted(p.id for p in plans) == sorted([CLAIM.id, DECISION.id])
    reasons = " ".join(s.reason for s in skipped)
    assert "first hits only" in reasons and "at-single only" in reasons and "idle in its transaction" in reasons


def test_a_team_scenario_or_an_explore_program_gets_it_at_both_barriers():
    """Only the built-in catalog holds it to at-single: elsewhere no other scenario stands for the retry."""
    own = parse("explore-own", '[[steps]]\nop = "create"\nschedule = "s1"\n'
                'spec = { kind = "at", at = "+30s", target = { command = "s1" } }\n')
    census = {"explore-own": {"schedule-claim-after-commit": 2, "schedule-decision-after-commit": 1}}
    plans, _ = expand([own], census, {"cancel": FAULTS["cancel"]})
    assert sorted(p.id for p in plans) == ["explore-own/schedule-claim-after-commit/cancel/1",
                                           "explore-own/schedule-decision-after-commit/cancel/1"]


def _run(world, tmp_path, plan, command):
    scenario = next(s for s in load_catalog() if s.name == plan.scenario)
    outcome = run_case(world, scenario, plan, command, tmp_path)
    return outcome, {c.name: c for c in outcome.checks}


def _cancelled(outcome) -> list[dict]:
    return [e for e in outcome.timeline if e["event"] == "statement-cancelled"]


@pytest.mark.parametrize("plan", [CLAIM, DECISION], ids=lambda p: p.barrier)
def test_the_reference_retries_the_cancelled_transaction(world, tmp_path, plan):
    outcome, checks = _run(world, tmp_path, plan, f"{shlex.quote(sys.executable)} -m reference.adapter")
    assert outcome.verdict == "pass", outcome.reason
    [event] = _cancelled(outcome)
    assert event["cancelled_backend"] is not None and checks["cancel-retried"].ok


def test_a_cancel_taken_as_definite_fails_naming_the_sentence(world, tmp_path):
    outcome, checks = _run(world, tmp_path, DECISION,
                           f"{shlex.quote(sys.executable)} -m mutants cancel-not-retriable")
    assert outcome.verdict == "fail" and not checks["cancel-retried"].ok
    [evidence] = checks["cancel-retried"].evidence
    # A definite failure after the committed claim: the reference answers `unknown` (protocol note 33d), not retriable.
    assert evidence["outcome"] == "unknown" and evidence["error"]["retriable"] is False


def test_the_go_example_retries_the_cancelled_transaction(world, tmp_path):
    outcome, checks = _run(world, tmp_path, CLAIM, str(GO))
    assert outcome.verdict == "pass", outcome.reason
    assert _cancelled(outcome)[0]["cancelled_backend"] is not None and checks["cancel-retried"].ok


def test_a_cancel_with_no_statement_waiting_fails_the_case(world, tmp_path):
    outcome, checks = _run(world, tmp_path, CLAIM,
                           f"{shlex.quote(sys.executable)} {ROOT / 'tests' / 'adapters' / 'claim_after_commit_only.py'}")
    assert not checks["cancel-retried"].ok
    assert checks["cancel-retried"].evidence[0]["nothing_cancelled"].startswith("no statement of the decision")
