"""The checks on hand-written states: each invariant passes a correct state and fails a broken one, and
names the spec rule it guards. No database: the states are written out here."""

import uuid
from datetime import datetime, timedelta, timezone

import pytest

from testhost.checks import INVARIANTS, equivalence, expectations, normalize, universal
from testhost.identity import expected_work
from testhost.state import StoreState

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
    assert {r.name for r in results if r.rows == 0} <= {"suspension-keeps-the-cursor", "fence-before-cursor"}


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
}


def test_every_invariant_has_a_breakage_here():
    assert set(BREAKAGES) == {name for name, _, _ in INVARIANTS}


@pytest.mark.parametrize("name", sorted(BREAKAGES))
def test_each_invariant_fails_its_broken_state_with_evidence(name):
    result = _check(name)(_break(BREAKAGES[name]))
    assert not result.ok and result.evidence, name
    others = [r.name for r in universal(_break(BREAKAGES[name])) if not r.ok]
    assert name in others


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
    from testhost.checks import model_agreement
    from testhost.model import Generation, Model
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
    from scenarios.model import Step
    from testhost.checks import client_outcomes
    from testhost.implementation import Response
    refused = Response("fail", problem={"type": "urn:appsurface-durable:problem:schedule-deleted", "status": 409})
    step = Step("update", {"schedule": "s", "spec": {}, "expect": "fail", "problem": "schedule-deleted"}, 4)
    assert all(r.ok for r in client_outcomes([(step, refused, {})]))
    wrong_problem = Response("fail", problem={"type": "urn:appsurface-durable:problem:revision-conflict"})
    assert not client_outcomes([(step, wrong_problem, {})])[0].ok
    accepted = Response("ok", value={})
    [result] = client_outcomes([(step, accepted, {}), (Step("create", {"schedule": "s", "spec": {}}, 0), refused, {})])
    assert not result.ok and [e["step"] for e in result.evidence] == [5, 1]


def test_a_step_citing_a_rule_is_judged_under_it_and_a_refusal_must_change_nothing():
    from scenarios.model import Step
    from testhost.checks import CLIENT_RULE, client_outcomes
    from testhost.implementation import Response
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
    from testhost.checks import coalesced_forward
    grown = [(1, _seen((180, 180, "pending"))), (2, _seen((180, 240, "pending"))), (3, _seen((180, 240, "materialized")))]
    assert coalesced_forward(grown).ok and coalesced_forward(grown).rows == 2
    moved = [(1, _seen((180, 180, "pending"))), (2, _seen((240, 240, "pending")))]
    result = coalesced_forward(moved)
    assert not result.ok and result.evidence[0]["gone"] and "last nominal instant forward" in result.rule
    back = [(1, _seen((180, 240, "pending"))), (2, _seen((180, 200, "pending")))]
    assert not coalesced_forward(back).ok


def test_a_resumed_processor_that_writes_after_losing_its_lease_fails_the_fence_check():
    from testhost.checks import late_writes
    before = {"dispatch": [{"dispatch_revision": 4}], "occurrences": []}
    assert late_writes(before, dict(before), {"schedule_id": "s"}).ok
    result = late_writes(before, {**before, "dispatch": [{"dispatch_revision": 5}]}, {"schedule_id": "s"})
    assert not result.ok and "dispatch" in result.evidence[0]["changed"] and "under a lease" in result.rule


def test_two_pending_coalesced_seen_after_any_step_fail_even_when_the_final_state_has_one():
    from testhost.checks import one_pending_coalesced_seen
    one = [(1, _seen((180, 180, "pending"))), (2, _seen((180, 240, "pending"), (120, 120, "materialized")))]
    assert one_pending_coalesced_seen(one).ok
    two = [(1, _seen((180, 180, "pending"), (240, 240, "pending"))), (2, _seen((180, 180, "materialized")))]
    result = one_pending_coalesced_seen(two)
    assert not result.ok and result.evidence[0]["after_step"] == 2 and "at most one pending coalesced" in result.rule


def test_a_check_over_zero_rows_where_the_scenario_promised_some_fails_the_run():
    from testhost.checks import promised, vacuity
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
