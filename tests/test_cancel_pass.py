"""A pass cancelled in flight (barrier-reply `cancel-pass`, step field `cancel_at`): the pure judgement of
`cancel-keeps-committed` and of `pass-bounded` after a cancel, the step's validation, the fault-free-only scenario,
and real cases where the reference and the Go example pass, each mutant fails naming its sentence, a cancel that never
reached the implementation fails, and a fault before or at the cancel's barrier is judged as it ran."""

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from mutants.catalog import BY_NAME
from scenarios.errors import ScenarioError
from scenarios.matrix import CasePlan, expand
from scenarios.scenario import load_catalog, parse
from testhost.faults.cancel_pass import CANCEL_PASS, CancelPlan
from testhost.judge.cancelled_pass import keeps_committed, lost
from testhost.judge.pass_windows import pass_bounded
from testhost.judge.registry import CHECKS
from scenarios.matrix import CasePlan
from testhost.case.runner import run_case

GO = Path(__file__).resolve().parent.parent / "examples" / "go" / "run.sh"
SENTENCE = "Cancellation does not roll back a committed Schedule fact."
FACTS = ("claimed", "occurrences", "materialized", "suspended", "recovery_skipped")


def _facts(state="pending", cursor="2031-03-03T00:00:05+00:00", work_id=None, history=(), work=()):
    return {"definition": {"xmin": "7", "cursor_utc": cursor, "revision": 1, "lifecycle_state": "active",
                           "active_generation": 1},
            "dispatch": {"xmin": "7", "lease_state": "leased", "lease_generation": 1, "dispatch_revision": 1},
            "occurrences": [{"key": "1|nominal|2031-03-03 00:00:05+00", "xmin": "8", "state": state,
                             "last_nominal_utc": "2031-03-03T00:00:05+00:00", "work_id": work_id}],
            "history": [{"key": k, "xmin": "8"} for k in history], "work": [{"key": k, "xmin": "9"} for k in work]}


def _plan(delivered=True, answer="ok", at_answer=None, at_end=None, superseding=False, faulted=False):
    plan = CancelPlan(3, "A", "schedule-decision-after-commit", 1, superseding)
    if delivered:
        plan.delivered = {"context": {}, "schedule_id": "s", "facts": _facts()}
        plan.answered = {"answer": {"outcome": answer}, "faulted": faulted, "facts": at_answer or _facts()}
        plan.final = {"facts": at_end or _facts("materialized", work_id="w1", work=("w1",))}
    return plan


def test_the_check_is_registered_with_its_sentence_and_on_the_protocol_page():
    from testhost.runs.protocol_page import render
    page = render()
    assert CHECKS["cancel-keeps-committed"].startswith(SENTENCE)
    assert f"| `cancel-keeps-committed` | pinned-reading" in page and f" | {CHECKS['cancel-keeps-committed']} |" in page
    assert f"`{CANCEL_PASS}`" in page and "cancel_at" in page


def test_what_committed_before_the_cancel_may_only_go_forward():
    before = _facts(history=("suspended|t|{}",), work=("w0",))
    assert lost(before, _facts("materialized", work_id="w1", history=("suspended|t|{}",), work=("w0", "w1")),
                False) == []
    superseded = lost(before, _facts("superseded", history=("suspended|t|{}",), work=("w0",)), False)
    assert superseded and superseded[0]["now"]["state"] == "superseded"
    assert lost(before, _facts("superseded", history=("suspended|t|{}",), work=("w0",)), True) == []
    gone = {**_facts(history=("suspended|t|{}",), work=("w0",)), "occurrences": []}
    assert lost(before, gone, False)[0]["now"] is None
    back = lost(before, _facts(cursor="2031-03-03T00:00:01+00:00", history=("suspended|t|{}",), work=("w0",)), False)
    assert back == [{"cursor_utc": {"was": "2031-03-03T00:00:05+00:00", "now": "2031-03-03T00:00:01+00:00"}}]
    assert lost(before, _facts(work=("w0",)), False) == [{"history": "suspended|t|{}", "now": None}]
    relinked = lost(_facts("materialized", work_id="w1"), _facts("materialized", work_id="w2"), False)
    assert relinked and relinked[0]["now"]["work_id"] == "w2"


def test_the_check_fails_a_rollback_a_cancel_never_delivered_and_an_answer_other_than_ok():
    assert keeps_committed([], faulted=False) is None  # no step cancels: no result
    kept = keeps_committed([_plan()], faulted=False)
    assert kept.ok and kept.rows == 2 and SENTENCE in kept.rule
    undone = keeps_committed([_plan(at_answer=_facts("superseded"))], faulted=False)
    assert not undone.ok and undone.evidence[0]["seen_at"] == "answer"
    assert undone.evidence[0]["rolled_back"][0]["now"]["state"] == "superseded"
    # a later update or delete may supersede it by the end, never the cancelled pass itself
    assert keeps_committed([_plan(at_end=_facts("superseded"), superseding=True)], faulted=False).ok
    assert not keeps_committed([_plan(at_end=_facts("superseded"))], faulted=False).ok
    unknown = keeps_committed([_plan(answer="unknown")], faulted=False)
    assert not unknown.ok and unknown.evidence[0]["answer"] == {"outcome": "unknown"}
    assert keeps_committed([_plan(answer="unknown", faulted=True)], faulted=True).ok  # a fault may cut the answer
    anonymous = _plan()
    anonymous.delivered = {"context": {}, "schedule_id": "", "facts": None}
    assert not keeps_committed([anonymous], faulted=False).ok  # no schedule_id in the barrier's context
    never = keeps_committed([_plan(delivered=False)], faulted=False)
    assert not never.ok and never.evidence[0]["delivered"] is False
    stopped = _plan(delivered=False)
    stopped.fault_first = True
    assert keeps_committed([stopped], faulted=True).ok  # a fault stopped the pass before its barrier
    assert not keeps_committed([_plan(delivered=False)], faulted=True).ok  # faulted later: the cancel was due
    both = keeps_committed([_plan(), _plan(delivered=False)], faulted=False)  # every cancelled step is judged
    assert not both.ok and len(both.evidence) == 1 and both.rows == 3


def _window(claimed, **extra):
    before = {n: 0 for n in FACTS}
    return {"before": before, "after": {**before, "claimed": claimed}, "requests": [{"maximum_schedules": 2}],
            "answers": [{"instance": "A", "outcome": "ok", "value": {}}], "faults": [], "during": "step 4 (process)",
            "clean": True, **extra}


def test_a_pass_cancelled_in_flight_may_claim_only_the_leases_it_had_taken():
    assert pass_bounded([_window(2)]).ok
    assert pass_bounded([_window(1, cancelled_after_claims=1)]).ok
    over = pass_bounded([_window(2, cancelled_after_claims=1)])
    assert not over.ok and over.evidence[0]["allowed"] == 1
    assert "`cancel-pass`" in over.rule


def _scenario(process: str, extra: str = "") -> str:
    return (extra + '[[steps]]\nop = "create"\nschedule = "a"\nspec = { kind = "at", at = "+5s", target = { command = "a" } }\n'
            '[[steps]]\nop = "advance"\nseconds = 6\n[[steps]]\nop = "process"\n' + process)


def test_the_step_field_is_checked_before_anything_runs():
    ok = parse("t", _scenario('maximum_schedules = 2\ncancel_at = { barrier = "schedule-claim-after-commit", hit = 2 }\n'))
    assert ok.steps[-1].args["cancel_at"]["hit"] == 2
    from scenarios.steps import STEPS
    assert STEPS["process"].claims(ok.steps[-1]) == 2
    assert STEPS["process"].claims(parse("t", _scenario('maximum_schedules = 3\ncancel_at = { barrier = '
                                                        '"schedule-decision-after-commit" }\n')).steps[-1]) == 1
    for body, message in (
            ('cancel_at = { barrier = "schedule-decision-before-commit" }\n', "cancel_at.barrier must be one of"),
            ('cancel_at = { barrier = "schedule-claim-after-commit", hit = 2 }\n', "beyond the pass's maximum"),
            ('cancel_at = { barrier = "schedule-claim-after-commit", hit = 0 }\n', "cancel_at.hit must be"),
            ('cancel_at = { barrier = "schedule-claim-after-commit", at = 1 }\n', "cancel_at takes no at"),
            ('expect = "ok"\ncancel_at = { barrier = "schedule-claim-after-commit" }\n', "does not go with expect")):
        with pytest.raises(ScenarioError, match=message):
            parse("t", _scenario(body))
    with pytest.raises(ScenarioError, match="race takes no cancel_at"):
        parse("t", _scenario("").replace('op = "process"\n', 'op = "race"\ncancel_at = { barrier = '
                                                             '"schedule-claim-after-commit" }\n'))


def test_a_cancel_may_come_at_every_barrier_after_a_commit_of_a_pass_and_each_has_its_case_and_mutant():
    from barriers.catalog import CANCEL_BARRIERS, CATALOG
    from mutants.catalog import MUTANTS
    from scenarios.steps import LEASE_CANCEL_BARRIERS
    after_commit = [b.name for b in CATALOG if b.operation == "process-due" and b.position == "after-commit"]
    assert list(CANCEL_BARRIERS) == after_commit and "schedule-link-after-commit" in after_commit
    # explore draws a lease's own barriers: its programs do not promise that a lease bridges
    assert LEASE_CANCEL_BARRIERS == ("schedule-claim-after-commit", "schedule-decision-after-commit")
    [scenario] = [s for s in load_catalog() if s.name == "cancel-at-each-barrier"]
    assert scenario.fault_free
    cancelled = [s.args["cancel_at"]["barrier"] for s in scenario.steps if "cancel_at" in s.args]
    assert cancelled == list(CANCEL_BARRIERS)
    ignoring = {m.name: m for m in MUTANTS if m.name.startswith("cancel-pass-ignored-at-")}
    assert len(ignoring) == len(CANCEL_BARRIERS)
    for barrier in CANCEL_BARRIERS:
        [mutant] = [m for m in ignoring.values() if f"!= {barrier!r}" in m.edits[0].new]
        assert mutant.slice == ("cancel-at-each-barrier",)
    link = parse("t", _scenario('maximum_schedules = 2\ncancel_at = { barrier = "schedule-link-after-commit" }\n'))
    from scenarios.steps import STEPS
    assert STEPS["process"].claims(link.steps[-1]) == 1
    for before in (b.name for b in CATALOG if b.operation == "process-due" and b.position != "after-commit"):
        with pytest.raises(ScenarioError, match="cancel_at.barrier must be one of"):
            parse("t", _scenario(f'cancel_at = {{ barrier = "{before}" }}\n'))


def test_a_fault_free_scenario_plans_no_faulted_case_and_says_why():
    scenario = parse("ff", _scenario("", "fault_free = true\n"))
    assert scenario.fault_free
    census = {"ff": {"schedule-claim-before-commit": 1, "schedule-link-after-commit": 1}}
    from testhost.faults.catalog import FAULTS
    plans, skipped = expand([scenario], census, FAULTS)
    assert plans == []
    assert {s.barrier for s in skipped if "fault-free only" in s.reason} == set(census["ff"])
    faulted, _ = expand([parse("ff", _scenario(""))], census, FAULTS)
    assert faulted  # the same scenario without the field plans its faults


# -- real cases ------------------------------------------------------------------------------------------------

def _python(module_args: str) -> str:
    return f"{shlex.quote(sys.executable)} -m {module_args}"


def _run(world, tmp_path, plan: CasePlan, command: str, scenario=None):
    scenario = scenario or next(s for s in load_catalog() if s.name == plan.scenario)
    outcome = run_case(world, scenario, plan, command, tmp_path)
    return outcome, {c.name: c for c in outcome.checks}


@pytest.fixture(scope="module")
def go_built():
    built = subprocess.run([str(GO), "--build-only"], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    return str(GO)


@pytest.mark.parametrize("impl", ["reference", "go"])
def test_both_implementations_keep_the_decision_finish_the_lease_and_start_no_other(world, tmp_path, impl, request):
    command = _python("reference.adapter") if impl == "reference" else request.getfixturevalue("go_built")
    outcome, checks = _run(world, tmp_path, CasePlan("cancel-after-decision"), command)
    assert outcome.verdict == "pass", outcome.reason
    cancels = [e for e in outcome.timeline if e["event"] == "cancel-pass"]
    assert [(e["barrier"], e["claims_before"]) for e in cancels] == [("schedule-decision-after-commit", 1)]
    kept = checks["cancel-keeps-committed"]
    assert kept.ok and kept.rows >= 2 and not kept.skipped
    # the cancelled pass bridged its first schedule, claimed nothing more and answered ok; the final drain the second
    answers = [e for e in outcome.timeline if e["event"] == "response" and e["op"] == "process-due"]
    assert answers[0]["outcome"] == "ok" and answers[0]["value"]["claimed"] == 1
    assert answers[0]["value"]["materialized"] == 1
    assert checks["pass-bounded"].ok and checks["pass-leaves-no-lease"].ok


@pytest.mark.parametrize("impl", ["reference", "go"])
def test_a_pass_cancelled_at_each_barrier_after_a_commit_finishes_its_lease_and_starts_no_other(world, tmp_path, impl,
                                                                                             request):
    command = _python("reference.adapter") if impl == "reference" else request.getfixturevalue("go_built")
    outcome, checks = _run(world, tmp_path, CasePlan("cancel-at-each-barrier"), command)
    assert outcome.verdict == "pass", outcome.reason
    cancels = [(e["barrier"], e["claims_before"]) for e in outcome.timeline if e["event"] == "cancel-pass"]
    assert cancels == [("schedule-claim-after-commit", 1), ("schedule-decision-after-commit", 1),
                       ("schedule-link-after-commit", 1)]
    answers = [e for e in outcome.timeline if e["event"] == "response" and e["op"] == "process-due"]
    # the three cancelled passes, then the final drain's: one lease each, bridged and released
    assert [(a["outcome"], a["value"]["claimed"], a["value"]["materialized"]) for a in answers] == [("ok", 1, 1)] * 4
    assert checks["pass-bounded"].ok and checks["pass-leaves-no-lease"].ok and checks["cancel-keeps-committed"].ok


@pytest.mark.parametrize("barrier, step", [("claim", 6), ("decision", 7), ("link", 8)])
def test_a_cancel_ignored_at_one_barrier_is_caught_in_that_barriers_pass(world, tmp_path, barrier, step):
    mutant = f"cancel-pass-ignored-at-{barrier}"
    outcome, checks = _run(world, tmp_path, CasePlan("cancel-at-each-barrier"), _python(f"mutants {mutant}"))
    assert outcome.verdict == "fail" and "pass-bounded" in outcome.reason.split(", "), outcome.reason
    [over] = checks["pass-bounded"].evidence
    assert over["during"] == f"step {step} (process)" and (over["claims_committed"], over["allowed"]) == (2, 1)
    assert BY_NAME[mutant].rule in checks["pass-bounded"].rule


@pytest.mark.parametrize("mutant, check", [("cancel-compensates", "cancel-keeps-committed"),
                                           ("cancel-pass-ignored", "pass-bounded")])
def test_each_mutant_fails_naming_its_sentence(world, tmp_path, mutant, check):
    outcome, checks = _run(world, tmp_path, CasePlan("cancel-after-decision"), _python(f"mutants {mutant}"))
    assert outcome.verdict == "fail" and check in outcome.reason.split(", "), outcome.reason
    assert not checks[check].ok and checks[check].evidence
    assert BY_NAME[mutant].rule in checks[check].rule
    if mutant == "cancel-compensates":
        undone = checks[check].evidence
        assert [u["seen_at"] for u in undone] == ["answer", "end"]
        assert undone[0]["rolled_back"][0]["now"]["state"] == "superseded"
    else:
        assert checks[check].evidence[0]["claims_committed"] == 2 and checks[check].evidence[0]["allowed"] == 1


def test_a_cancel_whose_barrier_never_fires_fails_the_case(world, tmp_path):
    # One schedule due, the cancel planned at the second decision of the pass: no barrier carries it.
    scenario = parse("cancel-never", _scenario('maximum_schedules = 2\ncancel_at = { barrier = '
                                               '"schedule-decision-after-commit", hit = 2 }\n')
                     + '[expect.a]\nworks = 1\n')
    outcome, checks = _run(world, tmp_path, CasePlan("cancel-never"), _python("reference.adapter"), scenario)
    assert outcome.verdict == "fail" and outcome.reason == "cancel-keeps-committed", outcome.reason
    [never] = checks["cancel-keeps-committed"].evidence
    assert never["delivered"] is False and never["hits_seen"] == 1


def test_a_fault_that_stops_the_pass_before_its_cancel_is_no_finding(world, tmp_path):
    outcome, checks = _run(world, tmp_path, CasePlan("cancel-after-decision", "schedule-claim-before-commit", "kill", 1),
                           _python("reference.adapter"))
    assert outcome.verdict == "pass", outcome.reason
    assert not [e for e in outcome.timeline if e["event"] == "cancel-pass"]
    assert checks["cancel-keeps-committed"].ok and checks["planned-fault-fired"].ok


def test_a_cancel_after_a_pause_at_its_barrier_keeps_what_the_takeover_committed(fresh_world, tmp_path):
    outcome, checks = _run(fresh_world, tmp_path,
                           CasePlan("cancel-after-decision", "schedule-decision-after-commit", "pause", 1),
                           _python("reference.adapter"))
    assert outcome.verdict == "pass", outcome.reason
    events = [e["event"] for e in outcome.timeline]
    assert events.index("fault-injected") < events.index("cancel-pass")  # the reply after the fault carried it
    kept = checks["cancel-keeps-committed"]
    assert kept.ok and kept.rows >= 2
