"""The answer checks against real implementations behind a non-exec shell wrapper (not forked from the fork
server, the implementation a child of the shell): a lost COMMIT reply is held until the implementation's own
deadline closes its connection, an honest answer passes, and a wrong `fail` or a missing deadline fails the case
under the rule it breaks."""

import shlex
import sys

from scenarios.matrix import CasePlan
from scenarios.scenario import load_catalog
from testhost.case.runner import run_case

PLAN = CasePlan("at-single", "schedule-decision-before-commit", "lost-commit-reply", 1)


def _wrapped(module_args: str) -> str:
    """`sh -c 'python -m ...; exit $?'`: the shell stays the parent, as a launcher script would."""
    return f"sh -c {shlex.quote(f'{shlex.quote(sys.executable)} -m {module_args}; exit $?')}"


def _case(world, tmp_path, command):
    scenario = next(s for s in load_catalog() if s.name == PLAN.scenario)
    baseline = run_case(world, scenario, CasePlan(PLAN.scenario), command, tmp_path)
    assert baseline.verdict == "pass", baseline.reason
    outcome = run_case(world, scenario, PLAN, command, tmp_path, baseline.baseline)
    return outcome, {c.name: c for c in outcome.checks}


def test_the_reference_abandons_a_lost_commit_reply_within_its_deadline_and_answers_honestly(world, tmp_path):
    outcome, checks = _case(world, tmp_path, _wrapped("reference.adapter"))
    assert outcome.verdict == "pass", outcome.reason
    details = next(e for e in outcome.timeline if e["event"] == "fault-injected")["details"]
    assert details["server_fate_before_heal"] == "committed"
    assert 2.0 <= details["connection_abandoned_after_s"] < 2.0 + details["deadline_margin_s"]
    assert checks["client-deadline"].ok and checks["outcome-honesty"].ok and checks["outcome-honesty"].rows >= 3


def test_a_fail_after_a_lost_commit_reply_fails_outcome_honesty(world, tmp_path):
    outcome, checks = _case(world, tmp_path, _wrapped("mutants fail-after-lost-commit"))
    assert outcome.verdict == "fail" and not checks["outcome-honesty"].ok
    [evidence] = checks["outcome-honesty"].evidence
    assert evidence["request"] == "process-due" and evidence["committed_during_the_request"] == [
        "schedule-claim-after-commit",
        "schedule-decision-before-commit (the server committed the transaction open there)"]


def test_an_implementation_without_a_deadline_fails_the_client_deadline(world, tmp_path):
    outcome, checks = _case(world, tmp_path, _wrapped("mutants no-client-deadline"))
    assert outcome.verdict == "fail" and "client-deadline" in outcome.reason
    [evidence] = checks["client-deadline"].evidence
    assert evidence["reply_lost_for_s"] >= evidence["deadline_s"] + evidence["margin_s"]
    assert checks["outcome-honesty"].ok  # it answered once the heal closed the connection, and not with `fail`


def test_the_scenarios_that_hold_a_lost_reply_reach_every_kind_of_commit():
    from testhost.faults.catalog import DEADLINE_COVER
    held = [s for s in load_catalog() if DEADLINE_COVER in s.covers]
    assert {s.name for s in held} == {"at-single", "every-anchored"}
    ops = {(step.op, step.args.get("state")) for s in held for step in s.steps}
    # a pass (claim, decision, bridge) and a Work turning terminal (the Work-terminal commit)
    assert ("process", None) in ops and ("complete-work", "succeeded") in ops
