"""Issue 18's escapes of the bounded pass, the safety window and the cutoff behind the cursor: the pure window
checks (passing and failing), and real cases where each new check passes the reference and the Go example and
fires on its mutant of the reference, naming its own rule."""

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from mutants.catalog import BY_NAME
from scenarios.matrix import CasePlan
from scenarios.scenario import load_catalog
from testhost.judge.pass_windows import empty_pass, pass_bounded, pass_leaves_no_lease
from testhost.judge.registry import CHECKS
from scenarios.matrix import CasePlan
from testhost.case.runner import run_case

GO = Path(__file__).resolve().parent.parent / "examples" / "go" / "run.sh"
FACTS = ("claimed", "occurrences", "materialized", "suspended", "recovery_skipped")


def _window(claimed, *, requests=({},), outcomes=("ok",), faults=(), clean=True, leases_before=None,
            leases_after=None):
    """A counting window whose claims moved by `claimed`, with the requests sent and the lease rows seen."""
    before = {n: 0 for n in FACTS}
    return {"before": before, "after": {**before, "claimed": claimed}, "requests": [dict(r) for r in requests],
            "answers": [{"instance": label, "outcome": o, "value": {}} for label, o in zip("AB", outcomes)],
            "faults": list(faults), "during": "step 5 (process)", "clean": clean,
            "leases_before": leases_before or {}, "leases_after": leases_after or {}}


def test_the_new_checks_are_registered_with_their_spec_sentences_and_on_the_protocol_page():
    from testhost.runs.protocol_page import render
    page = render()
    for name in ("pass-bounded", "empty-pass-ok", "pass-leaves-no-lease", "anomaly-only-past-the-window",
                 "behind-cursor-no-op"):
        assert f"| `{name}` | " in page and f" | {CHECKS[name]} |" in page
    assert "processes at most MaximumSchedules schedules (default 1)" in CHECKS["pass-bounded"]
    assert "returns zero counts for an empty pass" in CHECKS["empty-pass-ok"]
    assert "observes cancellation before starting the next lease" in CHECKS["pass-leaves-no-lease"]
    assert CHECKS["behind-cursor-no-op"].startswith("A cutoff at or behind the cursor is a no-op.")


def test_a_pass_that_claims_more_than_it_was_allowed_fails_and_racers_are_held_to_their_sum():
    assert pass_bounded([_window(1)]).ok
    over = pass_bounded([_window(2)])
    assert not over.ok and over.evidence[0]["claims_committed"] == 2 and over.evidence[0]["allowed"] == 1
    assert pass_bounded([_window(3, requests=({"maximum_schedules": 3},))]).ok
    cancelled = pass_bounded([_window(2, requests=({"maximum_schedules": 3, "cancel_after": 1},))])
    assert not cancelled.ok and cancelled.evidence[0]["allowed"] == 1
    assert pass_bounded([_window(2, requests=({}, {}), outcomes=("ok", "ok"))]).ok
    # a takeover processor claims inside a pause's window: not held to the paused request's bound
    paused = pass_bounded([_window(2, faults=("pause",))])
    assert paused.ok and paused.rows == 0


def test_an_empty_pass_must_answer_ok_before_any_fault_and_unless_a_refusal_is_expected():
    assert empty_pass([_window(0)]).ok and empty_pass([_window(0)]).rows == 1
    wrong = empty_pass([_window(0, outcomes=("fail",))])
    assert not wrong.ok and wrong.evidence[0]["answers"][0]["outcome"] == "fail"
    assert empty_pass([_window(1, outcomes=("fail",))]).rows == 0  # it claimed: `outcome-honesty` judges a fail
    # after a fault (or where the step expects a refusal) a failing empty pass is not judged here
    assert empty_pass([_window(0, outcomes=("fail",), clean=False)]).ok


def test_a_lease_a_pass_took_and_left_held_fails_and_one_taken_before_it_does_not():
    taken = {"d1": ("ready", 0), "d2": ("ready", 0)}
    released = pass_leaves_no_lease([_window(1, leases_before=taken,
                                             leases_after={"d1": ("ready", 1), "d2": ("ready", 0)})])
    assert released.ok and released.rows == 1
    left = pass_leaves_no_lease([_window(2, leases_before=taken,
                                         leases_after={"d1": ("ready", 1), "d2": ("leased", 1)})])
    assert not left.ok and left.evidence[0]["leases_left_held"] == ["d2"]
    older = pass_leaves_no_lease([_window(0, leases_before={"d1": ("leased", 4)}, leases_after={"d1": ("leased", 4)})])
    assert older.ok and older.rows == 0
    faulted = _window(1, clean=False, leases_before=taken, leases_after={"d1": ("leased", 1), "d2": ("ready", 0)})
    assert pass_leaves_no_lease([faulted]).ok


# -- real cases ------------------------------------------------------------------------------------------------

def _run(world, tmp_path, plan: CasePlan, command: str):
    scenario = next(s for s in load_catalog() if s.name == plan.scenario)
    outcome = run_case(world, scenario, plan, command, tmp_path)
    return outcome, {c.name: c for c in outcome.checks}


def _python(module_args: str) -> str:
    return f"{shlex.quote(sys.executable)} -m {module_args}"


@pytest.fixture(scope="module")
def go_built():
    built = subprocess.run([str(GO), "--build-only"], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    return str(GO)


@pytest.mark.parametrize("impl", ["reference", "go"])
def test_both_implementations_pass_the_window_sides_and_the_cursor_behind(world, tmp_path, impl, request):
    command = _python("reference.adapter") if impl == "reference" else request.getfixturevalue("go_built")
    sides, checks = _run(world, tmp_path, CasePlan("safety-window-sides"), command)
    assert sides.verdict == "pass", sides.reason
    assert checks["anomaly-only-past-the-window"].rows == 1  # the narrow schedule's suspension, judged
    assert checks["pass-bounded"].rows == 3 and checks["empty-pass-ok"].rows == 1
    assert sides.picture["wide"]["lifecycle"] == "active" and sides.picture["narrow"]["suspension"] == "clock-anomaly"
    behind, checks = _run(world, tmp_path, CasePlan("clock-behind-cursor"), command)
    assert behind.verdict == "pass", behind.reason
    assert checks["behind-cursor-no-op"].rows == 3 and checks["empty-pass-ok"].rows == 1
    # the requeued pass claimed while the clock stood an hour behind the cursor, and bridged the coalesced one
    kinds = [(o[1], o[4]) for o in behind.picture["pulse"]["occurrences"]]
    assert kinds == [("coalesced", "materialized"), ("coalesced", "pending"), ("nominal", "materialized")]
    cancel, checks = _run(world, tmp_path, CasePlan("cancel-between-leases"), command)
    assert cancel.verdict == "pass", cancel.reason
    assert checks["pass-leaves-no-lease"].rows == 4


@pytest.mark.parametrize("mutant, scenario, check", [
    ("safety-window-ignored", "safety-window-sides", "anomaly-only-past-the-window"),
    ("maximum-schedules-ignored", "safety-window-sides", "pass-bounded"),
    ("empty-pass-fails", "clock-behind-cursor", "empty-pass-ok"),
    ("cancel-after-claim", "cancel-between-leases", "pass-leaves-no-lease"),
    ("behind-cursor-suspends", "clock-behind-cursor", "behind-cursor-no-op"),
])
def test_each_mutant_fails_its_own_check_naming_its_sentence(world, tmp_path, mutant, scenario, check):
    outcome, checks = _run(world, tmp_path, CasePlan(scenario), _python(f"mutants {mutant}"))
    assert outcome.verdict == "fail" and check in outcome.reason.split(", "), outcome.reason
    assert not checks[check].ok and checks[check].evidence
    assert BY_NAME[mutant].rule in checks[check].rule


# -- the passive processor ------------------------------------------------------------------------------------

ADAPTERS = Path(__file__).resolve().parent / "adapters"


def _seen(asked, claims=0, occurrences=0):
    return {"passes_asked": asked, "processor": {"claims": claims, "suspended": 0},
            "cursors": {"s1": {"occurrences": occurrences, "last_decided": None, "skipped": 0, "linked": 0}}}


class _Impl:
    def __init__(self, unsolicited=()):
        self.label, self.unsolicited = "A", list(unsolicited)


def test_facts_that_changed_with_no_pass_asked_fail_and_a_pass_in_between_excuses_them():
    from testhost.judge.observations import passive_processor
    quiet = passive_processor([(0, _seen(1, 1, 1)), (1, _seen(1, 1, 1))], [_Impl()])
    assert quiet.ok and quiet.rows == 1
    on_its_own = passive_processor([(0, _seen(1, 1, 1)), (1, _seen(1, 2, 2))], [_Impl()])
    assert not on_its_own.ok
    assert on_its_own.evidence[0]["changed"] == {"claims": [1, 2], "s1": {"occurrences": [1, 2]}}
    asked = passive_processor([(0, _seen(1, 1, 1)), (1, _seen(2, 2, 2))], [_Impl()])
    assert asked.ok and asked.rows == 0
    restored = _seen(1, 0, 0)
    restored["restored"] = True  # a restore puts older rows back: no move of the timeline
    assert passive_processor([(0, _seen(1, 1, 1)), (1, restored)], [_Impl()]).ok
    barrier = passive_processor([], [_Impl([{"barrier": "schedule-claim-before-commit"}])])
    assert not barrier.ok
    assert barrier.evidence[0]["barrier_without_request"]["barrier"] == "schedule-claim-before-commit"


def test_quiet_s_is_checked_when_the_file_is_read():
    from scenarios.scenario import ScenarioError, parse
    base = 'description = "x"\n[[steps]]\nop = "advance"\nseconds = 1\n'
    assert parse("x", base + "quiet_s = 1.5\n").steps[0].args["quiet_s"] == 1.5
    for bad in ("0", "6", "true", '"1"'):
        with pytest.raises(ScenarioError):
            parse("x", base + f"quiet_s = {bad}\n")


def test_the_quiet_stretch_runs_in_the_fault_free_run_only(world, tmp_path):
    outcome, checks = _run(world, tmp_path, CasePlan("safety-window-sides"), _python("reference.adapter"))
    assert [e["seconds"] for e in outcome.timeline if e["event"] == "quiet"] == [1.5]
    assert checks["passive-processor"].ok and checks["passive-processor"].rows == 3  # the steps before the first pass
    faulted, _ = _run(world, tmp_path, CasePlan("safety-window-sides", "schedule-claim-after-commit", "kill", 1),
                      _python("reference.adapter"))
    assert faulted.verdict == "pass", faulted.reason
    assert not [e for e in faulted.timeline if e["event"] == "quiet"]


def test_a_processor_that_runs_on_its_own_is_caught_by_the_facts_that_moved_while_nothing_was_asked(world, tmp_path):
    outcome, checks = _run(world, tmp_path, CasePlan("safety-window-sides"), _python("mutants hosted-processor"))
    assert outcome.verdict == "fail" and "passive-processor" in outcome.reason.split(", "), outcome.reason
    [moved] = [e for e in checks["passive-processor"].evidence if "changed" in e]
    assert moved["at_step"] == 4 and moved["changed"]["claims"][1] > moved["changed"]["claims"][0]
    assert BY_NAME["hosted-processor"].rule in checks["passive-processor"].rule


def test_a_barrier_reported_with_no_request_in_flight_is_answered_and_fails_the_case(world, tmp_path):
    command = f"{shlex.quote(sys.executable)} {ADAPTERS / 'unsolicited_barrier.py'}"
    outcome, checks = _run(world, tmp_path, CasePlan("at-single"), command)
    assert outcome.verdict == "fail" and outcome.reason == "passive-processor", outcome.reason
    [hit] = checks["passive-processor"].evidence
    assert hit["barrier_without_request"]["barrier"] == "schedule-claim-before-commit"
    assert hit["barrier_without_request"]["context"] == {"schedule_id": "on-its-own"}


# -- the clock anomaly's durable evidence ----------------------------------------------------------------------

@pytest.mark.parametrize("mutant", ["anomaly-leaves-no-evidence", "anomaly-evidence-without-cursor"])
def test_a_clock_anomaly_without_its_evidence_fails_processor_history_not_the_harness(world, tmp_path, mutant):
    outcome, checks = _run(world, tmp_path, CasePlan("anomaly-suspends"), _python(f"mutants {mutant}"))
    assert outcome.verdict == "fail" and "processor-history" in outcome.reason.split(", "), outcome.reason
    assert BY_NAME[mutant].rule in checks["processor-history"].rule
    evidence = checks["processor-history"].evidence
    if mutant == "anomaly-leaves-no-evidence":
        assert evidence[0]["history"] == [] and evidence[0]["model"] == [("suspended", "clock-anomaly")]
    else:  # the row is there, its cursor is not: named, where the cursor check once raised KeyError
        assert "cutoff_utc" in evidence[0]["clock_anomaly_evidence_without_cursor_utc"]["detail"]
        assert checks["suspension-keeps-the-cursor"].ok


# -- the Work-terminal requeue beside a held pass ---------------------------------------------------------------

def _beside(outcome):
    return [e for e in outcome.timeline if e["event"] == "beside-barrier" and "instance" in e]


def test_a_work_finished_after_the_decision_is_requeued_and_the_release_keeps_it(world, tmp_path):
    outcome, checks = _run(world, tmp_path, CasePlan("coalesce-terminal-callback"), _python("reference.adapter"))
    assert outcome.verdict == "pass", outcome.reason
    assert [(e["barrier"], e["outcome"]) for e in _beside(outcome)] == [("schedule-decision-after-commit",
                                                                         "committed")]
    assert "complete-work (beside a held barrier)" in outcome.fallbacks
    assert checks["requeue-kept"].ok and checks["requeue-kept"].rows == 1  # after the held pass: claimable at once


def test_a_release_written_over_the_requeue_fails_requeue_kept(world, tmp_path):
    outcome, checks = _run(world, tmp_path, CasePlan("coalesce-terminal-callback"),
                           _python("mutants release-overwrites-requeue"))
    assert outcome.verdict == "fail" and "requeue-kept" in outcome.reason.split(", "), outcome.reason
    left = checks["requeue-kept"].evidence
    # from the held pass on: the next pass found nothing due, and the range waits for another interval
    assert [e["after_step"] for e in left] == [8, 9, 10]
    assert all(e["claimable_at_utc"] > e["server_now"] for e in left)
    assert BY_NAME["release-overwrites-requeue"].rule in checks["requeue-kept"].rule


BESIDE_WORK = '''
[[steps]]
op = "create"
schedule = "digest"
spec = { kind = "every", every_s = 60, anchor = "+0s", target = { command = "digest" } }

[[steps]]
op = "advance"
seconds = 61

[[steps]]
op = "process"

[[steps]]
op = "advance"
seconds = 60

[[steps]]
op = "process"
during = { barrier = "BARRIER", op = "complete-work", schedule = "digest", nth = 1, state = "STATE" }

[[steps]]
op = "process"
'''


def test_a_work_transition_beside_a_held_decision_waits_for_its_lock_and_runs_after_the_pass(world, tmp_path):
    from scenarios.scenario import parse
    scenario = parse("work-beside-decision", BESIDE_WORK.replace("BARRIER", "schedule-decision-before-commit")
                     .replace("STATE", "succeeded"))
    outcome = run_case(world, scenario, CasePlan(scenario.name), _python("reference.adapter"), tmp_path)
    assert outcome.verdict == "pass", outcome.reason
    assert [e["outcome"] for e in _beside(outcome)] == ["waited"]  # the decision holds the dispatch row
    kinds = sorted((o[1], o[4], o[5]) for o in outcome.picture["digest"]["occurrences"])
    assert kinds == [("coalesced", "materialized", "pending"), ("nominal", "materialized", "succeeded")]


def test_a_refused_work_transition_beside_a_held_pass_changes_nothing(world, tmp_path):
    from scenarios.scenario import parse
    scenario = parse("work-beside-refused", BESIDE_WORK.replace("BARRIER", "schedule-decision-after-commit")
                     .replace("STATE", "pending"))  # no Work may go back to pending: a problem
    outcome = run_case(world, scenario, CasePlan(scenario.name), _python("reference.adapter"), tmp_path)
    assert outcome.verdict == "pass", outcome.reason
    assert [e["outcome"] for e in _beside(outcome)] == ["refused"]
    refused = [e for e in outcome.timeline if e["event"] == "response" and e["op"].startswith("complete-work")]
    assert [e["outcome"] for e in refused] == ["fail"] and refused[0]["problem"]
    assert ("coalesced", "pending") in [(o[1], o[4]) for o in outcome.picture["digest"]["occurrences"]]


def test_requeue_kept_waits_for_a_clock_that_went_back_and_judges_it_again_once_it_is_ahead():
    from datetime import datetime, timedelta, timezone

    from testhost.judge.observations import requeue_kept
    t = datetime(2031, 3, 3, tzinfo=timezone.utc)

    def seen(now_s, claimable_s):
        now = t + timedelta(seconds=now_s)
        return {"processor": {"server_now": now}, "requeued": {"s1": {
            "claimable_at_utc": t + timedelta(seconds=claimable_s), "server_now": now}}}
    assert requeue_kept([(0, seen(200, 130))]).ok
    late = requeue_kept([(0, seen(200, 240))])
    assert not late.ok and late.evidence[0]["after_step"] == 1
    back = requeue_kept([(0, seen(200, 130)), (1, seen(100, 130)), (2, seen(150, 240))])
    assert back.ok and back.rows == 1  # the clock stands behind +200 s: not judged
    again = requeue_kept([(0, seen(200, 130)), (1, seen(100, 130)), (2, seen(260, 240)), (3, seen(270, 300))])
    assert not again.ok and [e["after_step"] for e in again.evidence] == [4]
