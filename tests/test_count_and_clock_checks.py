"""`process-counts` and `work-own-clock`: the pure checks on written-out windows and states (passing and failing),
the registry they share with PROTOCOL.md, and real cases where each fires on its mutant of the reference and
passes the reference itself."""

import shlex
import sys
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from barriers.protocol import COUNTS
from scenarios.matrix import CasePlan
from scenarios.scenario import ScenarioError, load_catalog, parse
from testhost.judge.clock_samples import work_own_clock
from testhost.judge.pass_windows import COUNT_FACTS, counts_not_compared, process_counts
from testhost.judge.registry import CHECKS
from testhost.judge.identity import expected_work
from testhost.case.runner import run_case
from testhost.judge.state import StoreState

T = datetime(2031, 3, 3, tzinfo=timezone.utc)
S = uuid.UUID("00000000-0000-4000-8000-000000000001")
SCOPE = "tenant-a"
ZERO = {name: 0 for name in COUNT_FACTS}


def _window(reported, seen, *, outcomes=("ok",), faults=(), before=ZERO):
    """A counting window: the answers' values (one per instance), and the facts moved by `seen`."""
    values = reported if isinstance(reported, list) else [reported]
    return {"before": dict(before), "after": {n: before[n] + seen.get(n, 0) for n in before},
            "answers": [{"instance": label, "outcome": outcome, "value": value}
                        for label, outcome, value in zip("AB", outcomes, values)],
            "faults": list(faults), "during": "step 3 (process)"}


def test_every_count_of_the_registry_is_seen_as_a_fact_and_named_on_the_protocol_page():
    from testhost.runs.protocol_page import render
    assert [c.name for c in COUNTS] == list(COUNT_FACTS)
    page = render()
    for count in COUNTS:
        assert f"| `{count.name}` | {count.meaning} |" in page
    assert "`process-counts`" in page and "`work-own-clock`" in page
    assert set(CHECKS) >= {"process-counts", "work-own-clock"}


def test_exact_counts_pass_and_a_count_off_by_one_fails_naming_the_count():
    seen = {"claimed": 1, "occurrences": 1, "materialized": 1}
    exact = {"claimed": 1, "occurrences": 1, "materialized": 1, "suspended": 0, "noops": 7, "errors": ["x"]}
    assert process_counts([_window(exact, seen)]).ok  # names outside the registry are not read
    assert process_counts([_window({"claimed": 1}, seen)]).ok  # every name is optional
    assert process_counts([_window({"noops": 1}, seen)]).rows == 0  # nothing of the registry reported: no row held
    twice = process_counts([_window({**exact, "occurrences": 2}, seen)])
    assert not twice.ok and twice.rows == 1
    assert twice.evidence[0]["counts"] == {"occurrences": {"reported": 2, "seen": 1}}
    assert "counts what its pass committed" in twice.rule
    # claimed schedules counted as materialized: nothing was linked
    wrong = process_counts([_window({"claimed": 1, "materialized": 1}, {"claimed": 1})])
    assert wrong.evidence[0]["counts"] == {"materialized": {"reported": 1, "seen": 0}}
    assert not process_counts([_window({"claimed": True}, {"claimed": 1})]).ok  # a boolean is not a count
    assert not process_counts([_window({"claimed": "1"}, {"claimed": 1})]).ok


def test_racing_processors_are_compared_by_their_sum():
    seen = {"claimed": 3, "materialized": 3}
    split = [{"claimed": 2, "materialized": 2}, {"claimed": 1, "materialized": 1}]
    assert process_counts([_window(split, seen, outcomes=("ok", "ok"))]).ok
    both_claimed_all = [{"claimed": 3, "materialized": 3}, {"claimed": 3, "materialized": 3}]
    result = process_counts([_window(both_claimed_all, seen, outcomes=("ok", "ok"))])
    assert not result.ok and result.evidence[0]["counts"]["claimed"] == {"reported": 6, "seen": 3}
    assert result.evidence[0]["instances"] == ["A", "B"]
    # a fault at one racer's barrier may cut the other's COMMIT, whose outcome that one cannot know
    cut = _window(split, {"claimed": 3, "materialized": 4}, outcomes=("ok", "ok"), faults=("disconnect",))
    assert counts_not_compared(cut) == "a disconnect fault fired while two processors ran"
    assert process_counts([cut]).ok and process_counts([cut]).rows == 0


def test_a_window_the_implementation_cannot_know_is_not_compared_and_says_why():
    off = {"occurrences": 0}
    seen = {"occurrences": 1}
    lost = _window(off, seen, faults=("lost-commit-reply",))
    paused = _window(off, seen, faults=("pause",))
    unknown = _window(off, seen, outcomes=("unknown",))
    assert "lost-commit-reply" in counts_not_compared(lost) and "pause" in counts_not_compared(paused)
    assert counts_not_compared(unknown) == "an answer was unknown, not ok"
    assert process_counts([lost, paused, unknown]).ok and process_counts([lost, paused, unknown]).rows == 0
    # a disconnect or a crash leaves the implementation knowing what committed: compared
    for fault in ("disconnect", "db-crash", "kill"):
        assert counts_not_compared(_window(off, seen, faults=(fault,))) is None
        assert not process_counts([_window(off, seen, faults=(fault,))]).ok


def _clock_state(accepted_after_bridge_s: float, *, planted=frozenset()):
    first = T + timedelta(seconds=90)
    bridge = T + timedelta(seconds=91)
    w = expected_work(SCOPE, S, 1, "nominal", first, "stamp")
    occurrence = {"scope_id": SCOPE, "schedule_id": S, "generation": 1, "occurrence_kind": "nominal",
                  "first_nominal_utc": first, "last_nominal_utc": first, "state": "materialized",
                  "work_id": w["work_id"], "work_idempotency_key": w["idempotency_key"],
                  "work_command": w["command"], "work_activity": w["activity"], "decided_at_utc": bridge,
                  "materialized_at_utc": bridge}
    work = {"scope_id": SCOPE, "work_id": w["work_id"], "idempotency_key": w["idempotency_key"],
            "command": w["command"], "activity": w["activity"], "state": "pending",
            "accepted_at_utc": bridge + timedelta(seconds=accepted_after_bridge_s), "terminal_at_utc": None}
    return StoreState(now=T + timedelta(seconds=700), definitions=[], generations=[], occurrences=[occurrence],
                      work=[work], dispatch=[], history=[], planted=planted)


def _move(shift_s=30.0):
    return {"schedule_id": str(S), "held_from": T + timedelta(seconds=90.9),
            "moved_at": T + timedelta(seconds=91.01), "shift_s": shift_s}


def test_a_work_stamped_with_the_bridge_transaction_time_fails_the_work_clock():
    assert work_own_clock(_clock_state(0.000_05), []).ok  # its own sample, microseconds later
    same = work_own_clock(_clock_state(0), [])
    assert not same.ok and same.rows == 1
    assert "the Work protocol owns a separate clock_timestamp() sample" in same.rule
    assert same.evidence[0]["work_accepted_at_utc"] == same.evidence[0]["bridge_transaction_time (materialized_at_utc)"]
    assert not work_own_clock(_clock_state(-1), []).ok
    # a Work a plain caller planted under the key is the link checks' to judge, not the clock's
    planted = _clock_state(-5)
    assert work_own_clock(_clock_state(-5, planted=frozenset({planted.work[0]["work_id"]})), []).rows == 0


def test_the_work_of_a_held_bridge_must_carry_a_sample_taken_after_the_clock_moved():
    # accepted 30.02 s after the bridge began: after the 30 s move at 91.01 s
    assert work_own_clock(_clock_state(30.02), [_move()], planned=True, promised=True).ok
    # sampled early in the transaction (before the move), though later than its transaction time
    early = work_own_clock(_clock_state(0.01), [_move()], planned=True, promised=True)
    assert not early.ok and early.evidence[0]["clock_moved_by_s"] == 30.0
    assert early.evidence[0]["expected_at_or_after"] == "2031-03-03T00:02:01.010000Z"
    # a bridge that began after the move is not the held one
    later = {**_move(), "moved_at": T + timedelta(seconds=90.95)}
    assert work_own_clock(_clock_state(0.01), [later], planned=True).ok


def _hold(outcome="the request ended with no transaction waiting for the row", meanwhile=(), after_fault=None):
    return {"at": "schedule-decision-after-commit", "instance": "A", "schedule_id": str(S), "after_fault": after_fault,
            "taken": True, "outcome": outcome, "barriers_meanwhile": list(meanwhile)}


def test_a_planned_clock_move_that_never_happened_fails_the_run():
    never = work_own_clock(_clock_state(0.01), [], planned=True, holds=[_hold(), _hold()])
    assert not never.ok and never.evidence[0]["happened"] is False and len(never.evidence[0]["holds"]) == 2
    assert "no bridge of the schedule ran meanwhile" in never.evidence[0]["why"]
    assert "the request ended with no transaction waiting" in never.evidence[0]["holds"][0]
    # a bridge that ran while the row was held, without waiting for it, is named as such
    unlocked = work_own_clock(_clock_state(0.01), [], planned=True, promised=True,
                              holds=[_hold(meanwhile=["schedule-work-after-acceptance"])])
    assert "accepted Work before it locked the schedule's dispatch row" in unlocked.evidence[0]["why"]
    # a fault-free run in which no decision was ever held says so, not that the bridge failed to wait
    none = work_own_clock(_clock_state(0.01), [], planned=True, promised=True)
    assert not none.ok and "never held the dispatch row" in none.evidence[0]["why"]
    # the fault-free run must also have linked the Work of the held bridge
    elsewhere = {**_move(), "schedule_id": str(uuid.uuid4())}
    assert not work_own_clock(_clock_state(30.02), [elsewhere], planned=True, promised=True).ok
    assert work_own_clock(_clock_state(30.02), [elsewhere], planned=True).ok  # a faulted run may lose that bridge


def test_a_faulted_run_that_left_no_hold_to_offer_is_not_compared_for_the_move():
    # a fault that left no committed decision of a live process before the bridge: not a failure of the bridge
    found = work_own_clock(_clock_state(0.01), [], planned=True,
                           holds=[{**_hold(), "taken": False, "outcome": "not taken: LockNotAvailable"}])
    assert found.ok and "could offer no hold" in found.skipped
    # ... while a Work stamped with the bridge's transaction time still fails there
    assert not work_own_clock(_clock_state(0), [], planned=True).ok
    # a hold offered after a disconnect that no bridge met is a failure, with its outcome
    missed = work_own_clock(_clock_state(0.01), [], planned=True, holds=[_hold(after_fault="disconnect")])
    assert not missed.ok and "after the disconnect fault there" in missed.evidence[0]["holds"][0]


def test_the_bridge_clock_switch_is_a_positive_number_of_seconds():
    text = '[[steps]]\nop = "drain"\n'
    assert parse("x", text).bridge_clock_shift_s is None
    assert parse("x", "bridge_clock_shift_s = 30\n" + text).bridge_clock_shift_s == 30.0
    for bad in ("0", "-1", "true", '"30"'):
        with pytest.raises(ScenarioError, match="bridge_clock_shift_s"):
            parse("x", f"bridge_clock_shift_s = {bad}\n" + text)
    assert [s.name for s in load_catalog() if s.bridge_clock_shift_s] == ["work-own-clock"]


# -- real cases: each check passes the reference and fires on its mutant ------------------------------------------

def _command(module_args: str) -> str:
    return f"{shlex.quote(sys.executable)} -m {module_args}"


def _run(world, tmp_path, plan: CasePlan, module_args: str):
    scenario = next(s for s in load_catalog() if s.name == plan.scenario)
    outcome = run_case(world, scenario, plan, _command(module_args), tmp_path)
    return outcome, {c.name: c for c in outcome.checks}


def test_the_reference_work_samples_its_clock_after_the_move_inside_the_bridge(world, tmp_path):
    outcome, checks = _run(world, tmp_path, CasePlan("work-own-clock"), "reference.adapter")
    assert outcome.verdict == "pass", outcome.reason
    released = [e for e in outcome.timeline if e["event"] == "bridge-clock-released"]
    assert released and released[0]["moved"] is True
    assert checks["work-own-clock"].ok and checks["work-own-clock"].rows == 1
    assert checks["process-counts"].ok and checks["process-counts"].rows >= 2


def test_a_work_store_stamping_the_transaction_time_is_caught_by_the_work_clock(world, tmp_path):
    outcome, checks = _run(world, tmp_path, CasePlan("work-own-clock"), "mutants work-accepted-at-transaction-time")
    assert outcome.verdict == "fail" and "work-own-clock" in outcome.reason
    evidence = checks["work-own-clock"].evidence
    assert evidence[0]["work_accepted_at_utc"] == evidence[0]["bridge_transaction_time (materialized_at_utc)"]
    assert evidence[1]["clock_moved_by_s"] == 30.0  # and the held bridge's Work predates the move


DISCONNECT = CasePlan("at-single", "schedule-decision-before-commit", "disconnect", 1)


def test_the_reference_counts_a_retried_decision_once(world, tmp_path):
    outcome, checks = _run(world, tmp_path, DISCONNECT, "reference.adapter")
    assert outcome.verdict == "pass", outcome.reason
    assert checks["process-counts"].ok and checks["process-counts"].rows >= 2
    assert not [e for e in outcome.timeline if e["event"] == "counts-not-compared"]  # the faulted pass was compared


def test_a_decision_counted_before_its_commit_is_caught_after_a_retry(world, tmp_path):
    outcome, checks = _run(world, tmp_path, DISCONNECT, "mutants decision-counted-before-commit")
    assert outcome.verdict == "fail" and outcome.reason == "process-counts"
    [evidence] = checks["process-counts"].evidence
    assert evidence["counts"] == {"occurrences": {"reported": 2, "seen": 1}}
    assert evidence["faults_during_it"] == ["disconnect"] and evidence["during"] == "step 3 (process)"
