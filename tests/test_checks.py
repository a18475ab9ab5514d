"""The checks on hand-written states: each invariant passes a correct state and fails a broken one, and
names the spec rule it guards. No database: the states are written out here."""

import uuid
from datetime import datetime, timedelta, timezone

import pytest

from testhost.judge.expectations import equivalence, expectations
from testhost.judge.invariants import INVARIANTS, universal
from testhost.judge.pictures import normalize
from testhost.judge.identity import expected_work, instant_text
from testhost.judge.state import StoreState

T = datetime(2031, 3, 3, tzinfo=timezone.utc)
S = uuid.UUID("00000000-0000-4000-8000-000000000001")
SCOPE = "tenant-a"


def _generation(n=1, accepted=T, kind="every"):
    return {"scope_id": SCOPE, "schedule_id": S, "generation": n, "schedule_kind": kind, "anchor_utc": T,
            "at_utc": None, "after_us": None, "every_us": 60_000_000, "safety_window_us": 3_600_000_000,
            "accepted_at_utc": accepted, "target_command": "report"}


def _occurrence(first_s, *, last_s=None, kind="nominal", state="materialized", generation=1, materialized_s=None):
    first = T + timedelta(seconds=first_s)
    last = T + timedelta(seconds=last_s if last_s is not None else first_s)
    occ = {"scope_id": SCOPE, "schedule_id": S, "generation": generation, "occurrence_kind": kind,
           "first_nominal_utc": first, "last_nominal_utc": last, "state": state, "work_id": None,
           "work_idempotency_key": None, "work_command": None, "work_activity": None,
           "decided_at_utc": last + timedelta(seconds=1),
           "materialized_at_utc": (T + timedelta(seconds=materialized_s if materialized_s is not None else first_s + 1))
           if state == "materialized" else None}
    if state == "materialized":
        w = expected_work(SCOPE, S, generation, kind, first, "report")
        occ.update(work_id=w["work_id"], work_idempotency_key=w["idempotency_key"], work_command=w["command"],
                   work_activity=w["activity"])
    return occ


def _work_for(occ, state="succeeded", terminal_s=None):
    return {"scope_id": SCOPE, "work_id": occ["work_id"], "idempotency_key": occ["work_idempotency_key"],
            "command": occ["work_command"], "activity": occ["work_activity"], "state": state,
            "terminal_at_utc": (T + timedelta(seconds=terminal_s)) if state in ("succeeded", "failed", "canceled")
            else None}


def good_state() -> StoreState:
    """Every 60 s: two nominal occurrences, the first Work done before the second began, then a pending
    coalesced one behind the running second Work; cursor at the last cutoff; nothing due."""
    o1, o2 = _occurrence(60), _occurrence(120, materialized_s=125)
    o3 = _occurrence(180, last_s=240, kind="coalesced", state="pending")
    return StoreState(
        now=T + timedelta(seconds=300),
        definitions=[{"schedule_id": S, "lifecycle_state": "active", "suspension_reason": None,
                      "active_generation": 1, "cursor_utc": T + timedelta(seconds=241), "revision": 1}],
        generations=[_generation()],
        occurrences=[o1, o2, o3],
        work=[_work_for(o1, terminal_s=100), _work_for(o2, state="running")],
        dispatch=[{"schedule_id": S, "lease_state": "ready", "claimable_at_utc": T + timedelta(seconds=360)}],
        history=[],
        drained_at=T + timedelta(seconds=290))


def _check(name):
    return next(run for n, _, run in INVARIANTS if n == name)


def test_a_correct_state_passes_every_invariant_and_each_examines_rows():
    results = universal(good_state())
    assert all(r.ok for r in results), [r.to_json() for r in results if not r.ok]
    assert all(r.rule for r in results)
    assert {r.name for r in results if r.rows == 0} <= {"suspension-keeps-the-cursor", "fence-before-cursor",
                                                         "anomaly-only-past-the-window"}


def _break(mutate):
    state = good_state()
    mutate(state)
    return state


BREAKAGES = {
    "one-occurrence-per-identity": lambda s: s.occurrences.append(dict(s.occurrences[0])),
    "one-work-per-materialized-occurrence": lambda s: s.work.append({**s.work[0], "work_id": uuid.uuid4()}),
    "deterministic-work-identity": lambda s: s.work.__setitem__(0, {**s.work[0], "activity": "something/else"}),
    "link-compare-or-return": lambda s: s.occurrences.__setitem__(
        0, {**s.occurrences[0], "work_command": "other"}),
    "instant-decided-once": lambda s: s.occurrences.append(_occurrence(180, state="pending")),
    "due-instants-decided": lambda s: setattr(s, "drained_at", T + timedelta(seconds=400)),
    "anomaly-suspends": lambda s: s.occurrences.__setitem__(
        0, {**s.occurrences[0], "decided_at_utc": T + timedelta(seconds=60 + 3601)}),
    "fence-before-cursor": lambda s: s.history.append(
        {"schedule_id": S, "event": "suspended", "recorded_at_utc": s.occurrences[2]["decided_at_utc"],
         "detail": {"reason": "runtime-epoch", "persisted": 1, "store": 2}}),
    "cursor-within-decisions-and-server-time": lambda s: s.definitions.__setitem__(
        0, {**s.definitions[0], "cursor_utc": T + timedelta(seconds=200)}),
    "at-most-one-pending-coalesced": lambda s: s.occurrences.append(
        _occurrence(250, kind="coalesced", state="pending")),
    "queue-one-slot": lambda s: s.work.__setitem__(0, {**s.work[0], "state": "running", "terminal_at_utc": None}),
    "nothing-materialized-for-superseded-or-suspended": lambda s: s.generations.append(
        _generation(2, accepted=T + timedelta(seconds=110))),
    "gate-a-writes-three-states": lambda s: s.occurrences.__setitem__(2, {**s.occurrences[2], "state": "claimed"}),
    "suspension-keeps-the-cursor": lambda s: (
        s.definitions.__setitem__(0, {**s.definitions[0], "lifecycle_state": "suspended",
                                      "suspension_reason": "clock-anomaly"}),
        s.history.append({"schedule_id": S, "event": "suspended", "recorded_at_utc": T + timedelta(seconds=299),
                          "detail": {"reason": "clock-anomaly", "cursor_utc": "2031-03-03T00:02:00.000000Z"}})),
    "recovered-nothing-due": lambda s: s.dispatch.__setitem__(0, {**s.dispatch[0], "lease_state": "leased"}),
    # suspended at +330 s with the cursor at +241 s: late by 30 s, well inside the 3,600 s window
    "anomaly-only-past-the-window": lambda s: s.history.append(
        {"schedule_id": S, "event": "suspended", "recorded_at_utc": T + timedelta(seconds=330), "generation": 1,
         "detail": {"reason": "clock-anomaly", "cursor_utc": "2031-03-03T00:04:01.000000Z"}}),
    # a clock anomaly written at +200 s, behind the +241 s cursor it records
    "behind-cursor-no-op": lambda s: s.history.append(
        {"schedule_id": S, "event": "suspended", "recorded_at_utc": T + timedelta(seconds=200),
         "detail": {"reason": "clock-anomaly", "cursor_utc": "2031-03-03T00:04:01.000000Z"}}),
    # the coalesced range starts at +121 s, at or before the cursor the +121 s decision left
    "range-opens-after-the-cursor": lambda s: s.occurrences.__setitem__(
        2, {**s.occurrences[2], "first_nominal_utc": T + timedelta(seconds=121)}),
    # the instant at +60 s was never decided, yet the cursor stands past it
    "no-instant-passed-over": lambda s: s.occurrences.pop(0),
}


def test_every_invariant_has_a_breakage_here():
    assert set(BREAKAGES) == {name for name, _, _ in INVARIANTS}


@pytest.mark.parametrize("name", sorted(BREAKAGES))
def test_each_invariant_fails_its_broken_state_with_evidence(name):
    result = _check(name)(_break(BREAKAGES[name]))
    assert not result.ok and result.evidence, name
    others = [r.name for r in universal(_break(BREAKAGES[name])) if not r.ok]
    assert name in others


def test_an_instant_at_a_generations_acceptance_is_not_its_first():
    """An Every without anchor is anchored on its acceptance, where its cursor starts: deciding the anchor itself
    (a range closed at the cursor) fails `range-opens-after-the-cursor`, and so does a skipped range that starts
    there; the instant one interval on does not."""
    check = _check("range-opens-after-the-cursor")
    accepted = T + timedelta(seconds=30)
    state = good_state()
    state.generations[0] = _generation(accepted=accepted)
    assert check(state).ok
    at_acceptance = _break(lambda s: (s.generations.__setitem__(0, _generation(accepted=accepted)),
                                      s.occurrences.insert(0, _occurrence(30))))
    result = check(at_acceptance)
    assert not result.ok and result.evidence[0]["accepted_at_utc"] == "2031-03-03T00:00:30.000000Z"
    skipped = _break(lambda s: (s.generations.__setitem__(0, _generation(accepted=accepted)), s.history.append(
        {"schedule_id": S, "event": "recovery-skipped", "recorded_at_utc": T + timedelta(seconds=50), "generation": 1,
         "detail": {"first_nominal_utc": "2031-03-03T00:00:20.000000Z", "last_nominal_utc": "2031-03-03T00:00:20.000000Z"}})))
    assert not check(skipped).ok


def _skipped(first_s, last_s, at_s, generation=1):
    return {"schedule_id": S, "event": "recovery-skipped", "recorded_at_utc": T + timedelta(seconds=at_s),
            "generation": generation, "detail": {"first_nominal_utc": instant_text(T + timedelta(seconds=first_s)),
                                                 "last_nominal_utc": instant_text(T + timedelta(seconds=last_s))}}


def test_no_instant_is_passed_over_before_a_future_anchor_nor_between_generations():
    """Every instant of a generation's grid from where its cursor started up to its last decision lies in a range
    it decided: before a future anchor too (n < 0); a skipped range covers its instants, with or without its
    generation named; a later generation starts at max(cursor, acceptance), and an older one ends at its last
    decision."""
    check = _check("no-instant-passed-over")
    future = _break(lambda s: s.generations.__setitem__(0, {**s.generations[0], "anchor_utc": T + timedelta(seconds=600)}))
    assert check(future).ok  # the grid is the same one: 600 s is ten intervals on
    from_anchor = _break(lambda s: (s.occurrences.insert(0, _occurrence(0)), s.generations.__setitem__(
        0, {**s.generations[0], "accepted_at_utc": T - timedelta(seconds=130)})))
    result = check(from_anchor)  # acceptance 130 s before: the instants at -120 s and -60 s were passed over
    assert not result.ok and result.evidence[0]["instants_passed_over"] == [
        "2031-03-02T23:58:00.000000Z", "2031-03-02T23:59:00.000000Z"]
    skipped = _break(lambda s: (s.occurrences.pop(0), s.history.append(_skipped(60, 60, 61))))
    assert check(skipped).ok
    unnamed = _break(lambda s: (s.occurrences.pop(0), s.history.append({**_skipped(60, 60, 61), "generation": None})))
    assert check(unnamed).ok
    # An update at +130 s: generation 1 decided up to +121 s; generation 2 (every 60 s from +150 s) starts at +130 s
    # and decides +150 s; generation 1's +180 s instant is not its own to decide.
    def update(s):
        s.occurrences[:] = [_occurrence(60), _occurrence(120)]
        s.generations.append({**_generation(2, accepted=T + timedelta(seconds=130)),
                              "anchor_utc": T + timedelta(seconds=150)})
        s.occurrences.append(_occurrence(150, generation=2, state="pending"))
        s.definitions[0] = {**s.definitions[0], "active_generation": 2, "cursor_utc": T + timedelta(seconds=151)}
    assert check(_break(update)).ok
    gap = _break(lambda s: (update(s), s.definitions.__setitem__(
        0, {**s.definitions[0], "cursor_utc": T + timedelta(seconds=211)})))
    assert [e["instants_passed_over"] for e in check(gap).evidence] == [["2031-03-03T00:03:30.000000Z"]]


def test_materialized_while_the_slot_was_held_is_caught_even_when_both_works_are_done():
    state = _break(lambda s: s.work.__setitem__(0, {**s.work[0], "terminal_at_utc": T + timedelta(seconds=130)}))
    result = _check("queue-one-slot")(state)
    assert not result.ok and "materialized_while_slot_held" in result.evidence[0]


def test_expectations_and_equivalence():
    state = good_state()
    ids = {"report": S}
    resolve = lambda value, generation: T + timedelta(seconds=float(value.lstrip("+").rstrip("s")))  # noqa: E731
    want = {"report": {"lifecycle": "active", "works": 2, "occurrences": [
        {"generation": 1, "kind": "nominal", "first": "+60s", "last": "+60s", "state": "materialized"},
        {"generation": 1, "kind": "nominal", "first": "+120s", "last": "+120s", "state": "materialized"},
        {"generation": 1, "kind": "coalesced", "first": "+180s", "last": "+240s", "state": "pending"}]}}
    assert expectations(state, want, ids, resolve).ok
    want["report"]["occurrences"][2]["last"] = "+180s"
    missed = expectations(state, want, ids, resolve)
    assert not missed.ok and missed.evidence[0]["schedule"] == "report"
    picture = normalize(state, ids)
    assert equivalence(picture, picture).ok
    other = normalize(_break(lambda s: s.occurrences.pop()), ids)
    assert not equivalence(other, picture).ok


def test_the_dropped_expectation_holds_the_history_to_the_due_instants_an_update_dropped():
    state = good_state()
    ids = {"report": S}
    resolve = lambda value, generation: T + timedelta(seconds=float(value.lstrip("+").rstrip("s")))  # noqa: E731
    want = {"report": {"dropped": [{"generation": 1, "first": "+60s", "last": "+120s", "instants": 2}]}}
    missing = expectations(state, want, ids, resolve)
    assert not missing.ok and missing.evidence == [{"schedule": "report", "dropped": [], "expected": [
        (1, T + timedelta(seconds=60), T + timedelta(seconds=120), 2)]}]
    state.history.append({"schedule_id": S, "event": "due-instants-superseded", "generation": 1,
                          "recorded_at_utc": T + timedelta(seconds=150),
                          "detail": {"first_nominal_utc": "2031-03-03T00:01:00.000000Z",
                                     "last_nominal_utc": "2031-03-03T00:02:00.000000Z", "instants": 2}})
    assert expectations(state, want, ids, resolve).ok
    state.history[0]["detail"]["instants"] = 3
    assert not expectations(state, want, ids, resolve).ok


def test_model_agreement_compares_the_database_with_the_independent_model():
    from testhost.judge.expectations import model_agreement
    from testhost.judge.gate_model import Generation, Model
    model = Model()
    model.create("report", Generation(1, "every", T, every=timedelta(seconds=60), anchor=T))
    model.pass_(T + timedelta(seconds=61))
    model.work("report", 1, "succeeded")
    model.pass_(T + timedelta(seconds=121))
    agreeing = {"report": {"lifecycle": "active", "suspension": None, "generation": 1, "cursor_instant": 120_000_000,
                           "occurrences": [
        (1, "nominal", 60_000_000, 60_000_000, "materialized", "succeeded"),
        (1, "nominal", 120_000_000, 120_000_000, "materialized", "pending")]}}
    assert model_agreement(agreeing, model).ok
    doubled = {"report": {**agreeing["report"], "occurrences": agreeing["report"]["occurrences"] + [
        (1, "nominal", 120_000_000, 120_000_000, "materialized", "pending")]}}
    result = model_agreement(doubled, model)
    assert not result.ok and result.evidence[0]["schedule"] == "report"
    behind = {"report": {**agreeing["report"], "cursor_instant": 60_000_000}}  # one instant left undecided
    assert not model_agreement(behind, model).ok


def test_client_outcomes_hold_each_step_to_what_the_scenario_expects():
    from scenarios.scenario import Step
    from testhost.judge.commands import client_outcomes
    from testhost.impl.implementation import Response
    refused = Response("fail", problem={"type": "urn:appsurface-durable:problem:schedule-deleted", "status": 409})
    step = Step("update", {"schedule": "s", "spec": {}, "expect": "fail", "problem": "schedule-deleted"}, 4)
    assert all(r.ok for r in client_outcomes([(step, refused, {})]))
    wrong_problem = Response("fail", problem={"type": "urn:appsurface-durable:problem:revision-conflict"})
    assert not client_outcomes([(step, wrong_problem, {})])[0].ok
    accepted = Response("ok", value={})
    [result] = client_outcomes([(step, accepted, {}), (Step("create", {"schedule": "s", "spec": {}}, 0), refused, {})])
    assert not result.ok and [e["step"] for e in result.evidence] == [5, 1]


def test_a_step_citing_a_rule_is_judged_under_it_and_a_refusal_must_change_nothing():
    from scenarios.scenario import Step
    from testhost.judge.commands import CLIENT_RULE, client_outcomes
    from testhost.impl.implementation import Response
    rule = "The function rejects blank or control-character lease owners"
    step = Step("process", {"lease_seconds": 1800, "expect": "fail", "rule": rule}, 2)
    [ok] = client_outcomes([(step, Response("fail", error={"kind": "DatabaseError"}), {})])
    assert ok.ok and ok.rule == rule and ok.name == "step-outcomes"
    [granted] = client_outcomes([(step, Response("ok", value={"claimed": 1}), {})])
    assert not granted.ok and granted.rule == rule
    [changed] = client_outcomes([(step, Response("fail"), {"before": [1], "after": [2]})])
    assert not changed.ok and "refused_but_changed" in changed.evidence[0]
    results = client_outcomes([(step, Response("fail"), {}), (Step("create", {"schedule": "s"}, 0), Response("ok"), {})])
    assert sorted(r.rule for r in results) == sorted([rule, CLIENT_RULE])


def _seen(*rows):
    keyed = {(str(S), 1, T + timedelta(seconds=first)): {"first_nominal_utc": T + timedelta(seconds=first),
                                                         "last_nominal_utc": T + timedelta(seconds=last),
                                                         "state": state} for first, last, state in rows}
    return {"all": keyed, "pending": {k: v for k, v in keyed.items() if v["state"] == "pending"}}


def test_a_pending_coalesced_range_only_moves_its_last_instant_forward():
    from testhost.judge.observations import coalesced_forward
    grown = [(1, _seen((180, 180, "pending"))), (2, _seen((180, 240, "pending"))), (3, _seen((180, 240, "materialized")))]
    assert coalesced_forward(grown).ok and coalesced_forward(grown).rows == 2
    moved = [(1, _seen((180, 180, "pending"))), (2, _seen((240, 240, "pending")))]
    result = coalesced_forward(moved)
    assert not result.ok and result.evidence[0]["gone"] and "last nominal instant forward" in result.rule
    back = [(1, _seen((180, 240, "pending"))), (2, _seen((180, 200, "pending")))]
    assert not coalesced_forward(back).ok


def test_a_resumed_processor_that_writes_after_losing_its_lease_fails_the_fence_check():
    from testhost.judge.fault_checks import late_writes
    before = {"dispatch": [{"dispatch_revision": 4}], "occurrences": []}
    held = late_writes(before, dict(before), {"schedule_id": "s"})
    assert held.ok and held.rows == 1  # the rows held still, not the tables
    result = late_writes(before, {**before, "dispatch": [{"dispatch_revision": 5}]}, {"schedule_id": "s"})
    assert not result.ok and "dispatch" in result.evidence[0]["changed"] and "under a lease" in result.rule


def test_two_pending_coalesced_seen_after_any_step_fail_even_when_the_final_state_has_one():
    from testhost.judge.observations import one_pending_coalesced_seen
    one = [(1, _seen((180, 180, "pending"))), (2, _seen((180, 240, "pending"), (120, 120, "materialized")))]
    assert one_pending_coalesced_seen(one).ok
    two = [(1, _seen((180, 180, "pending"), (240, 240, "pending"))), (2, _seen((180, 180, "materialized")))]
    result = one_pending_coalesced_seen(two)
    assert not result.ok and result.evidence[0]["after_step"] == 2 and "at most one pending coalesced" in result.rule


def test_a_check_over_zero_rows_where_the_scenario_promised_some_fails_the_run():
    from testhost.judge.invariants import promised, vacuity
    expect = {"report": {"occurrences": [{"generation": 1, "kind": "nominal", "first": "+60s", "last": "+60s",
                                          "state": "materialized"}], "works": 1}}
    assert promised(expect) == {"definitions", "occurrences", "materialized"}
    assert vacuity(universal(good_state()), expect).ok
    empty = good_state()
    empty.occurrences.clear()
    empty.work.clear()
    result = vacuity(universal(empty), expect)
    assert not result.ok and result.rule.startswith("harness:")
    assert {e["check"] for e in result.evidence} >= {"one-occurrence-per-identity", "deterministic-work-identity"}
    assert vacuity(universal(empty), {"report": {"lifecycle": "deleted"}}).ok  # nothing promised, nothing owed


def _answer(outcome, committed=(), faulted=None, op="process-due"):
    return {"instance": "A", "op": op, "outcome": outcome, "committed": list(committed), "faulted": faulted,
            "error": {"kind": "x"} if outcome != "ok" else None, "problem": None}


def test_a_fail_after_a_committed_transaction_of_the_request_is_a_wrong_fail():
    from testhost.judge.fault_checks import outcome_honesty
    honest = [_answer("ok", ["schedule-claim-after-commit"]), _answer("fail"),
              _answer("unknown", faulted="schedule-decision-before-commit"),
              _answer("fail", faulted="schedule-decision-before-commit")]
    assert outcome_honesty(honest, "aborted").ok  # a `fail` whose faulted transaction the server aborted is true
    # the server committed the transaction whose COMMIT reply was lost: that `fail` is a lie
    lost = outcome_honesty(honest, "committed")
    assert not lost.ok and lost.evidence[0]["committed_during_the_request"] == [
        "schedule-decision-before-commit (the server committed the transaction open there)"]
    assert "`fail` tells the host nothing was applied" in lost.rule
    # a pass whose claim committed (an after-commit barrier seen) and whose decision then failed applied something
    partial = outcome_honesty([_answer("fail", ["schedule-claim-after-commit"])], None)
    assert not partial.ok and partial.evidence[0]["committed_during_the_request"] == ["schedule-claim-after-commit"]
    assert outcome_honesty([_answer("unknown", ["schedule-claim-after-commit"])], "committed").ok
    assert outcome_honesty([], None).rows == 0


def test_a_connection_kept_open_past_the_deadline_and_its_margin_fails_the_client_deadline():
    from testhost.judge.fault_checks import client_deadline
    assert client_deadline({"server_fate_before_heal": "committed"}) is None  # the reply was not held
    held = {"deadline_s": 2.0, "deadline_margin_s": 3.0}
    assert client_deadline({**held, "connection_abandoned_after_s": 2.1}).ok
    missed = client_deadline({**held, "connection_kept_past_deadline_s": 5.01})
    assert not missed.ok and missed.evidence == [{"reply_lost_for_s": 5.01, "connection_still_open": True,
                                                  "deadline_s": 2.0, "margin_s": 3.0}]
    assert "A lost COMMIT reply must turn into an error within it, not a hang." in missed.rule


def _cursors_seen(cursor_s, occurrences=1, last_s=60, skipped=0, generation=1):
    return {"cursors": {str(S): {"schedule_id": str(S), "cursor_utc": T + timedelta(seconds=cursor_s),
                                 "active_generation": generation, "occurrences": occurrences,
                                 "last_decided": T + timedelta(seconds=last_s), "skipped": skipped}}}


def test_a_cursor_moved_while_nothing_was_decided_is_an_idle_pass_moving_it():
    from testhost.judge.observations import idle_cursor
    moved_with_a_decision = [(0, _cursors_seen(61)), (1, _cursors_seen(121, occurrences=2, last_s=120)), (2, _cursors_seen(121, 2, 120)),
                             (3, _cursors_seen(181, 2, 180)), (4, _cursors_seen(241, 2, 180, skipped=1)), (5, _cursors_seen(250, 2, 180, 1, 2))]
    assert idle_cursor(moved_with_a_decision).ok and idle_cursor(moved_with_a_decision).rows == 5
    idle = idle_cursor([(0, _cursors_seen(61)), (1, _cursors_seen(95))])
    assert not idle.ok and idle.evidence == [{"schedule_id": str(S), "after_step": 1, "at_step": 2,
                                              "cursor_before": "2031-03-03T00:01:01.000000Z",
                                              "cursor_after": "2031-03-03T00:01:35.000000Z",
                                              "decided_meanwhile": "nothing"}]
    assert idle.rule.startswith("reference: a pass with no instant due")
    from testhost.judge.contract_notes import settle
    settled = settle([idle], targeted=None)[0]  # a reference choice: reported, never failed
    assert settled.ok and settled.differs.startswith("differs from the reference") and settled.evidence
    assert idle_cursor([(0, {"cursors": {}}), (1, _cursors_seen(1))]).rows == 0  # created in between: nothing to compare


def _history(event, at_s, **detail):
    return {"schedule_id": S, "event": event, "recorded_at_utc": T + timedelta(seconds=at_s), "detail": detail,
            "generation": 1}


def test_the_processor_history_rows_must_be_the_ones_the_model_expects():
    from testhost.judge.expectations import history_agreement
    from testhost.judge.gate_model import Generation, Model
    model = Model()
    model.create("n", Generation(1, "every", T, every=timedelta(seconds=60), anchor=T, misfire="skip"))
    model.pass_(T + timedelta(seconds=181))  # three instants: a recovery range, skipped
    model.advance_epoch()
    model.pass_(T + timedelta(seconds=241))  # the epoch fence suspends
    assert model.schedules["n"].events == [("recovery-skipped", T + timedelta(seconds=60), T + timedelta(seconds=180)),
                                            ("suspended", "runtime-epoch")]
    written = [_history("created", 0), _history("recovery-skipped", 181, first_nominal_utc="2031-03-03T00:01:00Z",
                                                last_nominal_utc="2031-03-03T00:03:00.000000Z", instants=3),
               _history("recovery-declared", 181), _history("suspended", 241, reason="runtime-epoch")]
    state = StoreState(T, [], [], [], [], [], written)
    ok = history_agreement(state, {"n": S}, model)
    assert ok.ok and ok.rows == 2  # created and recovery-declared are free
    none = history_agreement(StoreState(T, [], [], [], [], [], []), {"n": S}, model)
    assert not none.ok and none.evidence[0]["history"] == [] and none.evidence[0]["model"] == [
        ("recovery-skipped", "2031-03-03T00:01:00.000000Z", "2031-03-03T00:03:00.000000Z"),
        ("suspended", "runtime-epoch")]
    wrong_reason = history_agreement(StoreState(T, [], [], [], [], [], written[:2] + [
        _history("suspended", 241, reason="clock-anomaly")]), {"n": S}, model)
    assert not wrong_reason.ok and "preserve their durable evidence" in wrong_reason.rule


def test_the_model_takes_every_integer_n_of_an_every_grid_before_a_future_anchor():
    from testhost.judge.gate_model import Generation
    g = Generation(1, "every", T, every=timedelta(seconds=60), anchor=T + timedelta(seconds=1000))
    assert g.instants_between(T, T + timedelta(seconds=101)) == [T + timedelta(seconds=40), T + timedelta(seconds=100)]
    assert g.last_at_or_before(T + timedelta(seconds=39)) == T - timedelta(seconds=20)


def test_model_agreement_and_equivalence_evidence_is_in_rfc_3339_instants():
    from testhost.judge.expectations import model_agreement
    from testhost.judge.gate_model import Generation, Model
    model = Model()
    model.create("r", Generation(1, "every", T, every=timedelta(seconds=60), anchor=T))
    model.pass_(T + timedelta(seconds=61))
    database = {"r": {"lifecycle": "active", "suspension": None, "generation": 1, "cursor_instant": 180_000_000,
                      "occurrences": [(1, "nominal", 60_000_000, 60_000_000, "pending", None)],
                      "references": {"1": "2031-03-03T00:00:00.000000Z"}}}  # as a JSON round trip leaves it
    result = model_agreement(database, model)
    assert not result.ok
    [evidence] = result.evidence
    assert evidence["differs_in"] == ["cursor_instant", "occurrences"]
    assert evidence["database"]["cursor_at_or_after"] == "2031-03-03T00:03:00.000000Z"
    assert evidence["model"]["cursor_at_or_after"] == "2031-03-03T00:01:00.000000Z"
    assert evidence["model"]["occurrences"] == [{"generation": 1, "kind": "nominal",
                                                 "first_nominal_utc": "2031-03-03T00:01:00.000000Z",
                                                 "last_nominal_utc": "2031-03-03T00:01:00.000000Z",
                                                 "state": "materialized", "work": "pending"}]
    assert "180000000" not in str(result.to_json()["evidence"])
    different_run = {"r": {**database["r"], "references": {"1": "2031-03-03T00:00:00.5Z"}}}
    assert equivalence(different_run, database).ok  # each run's own references are not compared
    moved = equivalence({"r": {**database["r"], "cursor_instant": 240_000_000}}, database)
    assert moved.evidence[0]["faulted"]["cursor_at_or_after"] == "2031-03-03T00:04:00.000000Z"
    assert moved.evidence[0]["fault_free"]["cursor_at_or_after"] == "2031-03-03T00:03:00.000000Z"


def test_a_schedule_held_fenced_that_decides_anything_after_a_step_acts_past_its_fence():
    from testhost.judge.observations import fence_seen
    fenced = {"fenced": {str(S): "runtime-epoch"}}
    suspended_in_place = [(0, _cursors_seen(0, occurrences=0)), (1, {**_cursors_seen(0, occurrences=0), **fenced})]
    assert fence_seen(suspended_in_place).ok and fence_seen(suspended_in_place).rows == 1
    decided = fence_seen([(0, _cursors_seen(0, occurrences=0, last_s=0)), (1, {**_cursors_seen(61), **fenced})])
    assert not decided.ok and decided.evidence[0]["fence"] == "runtime-epoch"
    assert set(decided.evidence[0]["changed"]) == {"cursor_utc", "occurrences", "last_decided"}
    assert "A mismatch suspends the Schedule before it moves the cursor or accepts Work." in decided.rule
    released = [(0, _cursors_seen(0, occurrences=0)), (1, _cursors_seen(61))]  # no fence held: not judged
    assert fence_seen(released).ok and fence_seen(released).rows == 0
