"""The independent model of Gate A on hand-computed timelines (no database), boundaries included."""

from datetime import datetime, timedelta, timezone

from testhost.judge.gate_model import Generation, Model, picture

T = datetime(2031, 3, 3, tzinfo=timezone.utc)
MIN = timedelta(minutes=1)


def every(minutes=1, anchor=T, accepted=T, **kwargs) -> Generation:
    return Generation(1, "every", accepted, every=timedelta(minutes=minutes), anchor=anchor, **kwargs)


def occurrences(model, name="s"):
    return [(o.generation, o.kind, o.first, o.last, o.state, o.work) for o in model.schedules[name].occurrences]


def test_instant_exactly_at_the_cursor_is_not_due_and_exactly_at_the_cutoff_is():
    model = Model()
    model.create("s", every(anchor=T, accepted=T))  # the cursor starts at T, an instant of the grid
    model.pass_(T)
    assert occurrences(model) == []  # T is not in (T, T]
    model.pass_(T + MIN)
    assert occurrences(model) == [(1, "nominal", T + MIN, T + MIN, "materialized", "pending")]
    assert model.schedules["s"].cursor == T + MIN


def test_safety_window_edge_is_inside_and_one_microsecond_more_suspends():
    inside, beyond = Model(), Model()
    for model in (inside, beyond):
        model.create("s", every(minutes=60, window=timedelta(minutes=10)))
    inside.pass_(T + timedelta(minutes=70))
    beyond.pass_(T + timedelta(minutes=70, microseconds=1))
    assert occurrences(inside) == [(1, "nominal", T + timedelta(hours=1), T + timedelta(hours=1), "materialized",
                                    "pending")]
    assert (beyond.schedules["s"].lifecycle, beyond.schedules["s"].suspension) == ("suspended", "clock-anomaly")
    assert beyond.schedules["s"].cursor == T and occurrences(beyond) == []


def test_several_instants_make_one_recovery_range_or_are_skipped():
    run_once, skip = Model(), Model()
    run_once.create("s", every())
    skip.create("s", every(misfire="skip"))
    for model in (run_once, skip):
        model.pass_(T + 5 * MIN + timedelta(seconds=1))
    assert occurrences(run_once) == [(1, "recovery", T + MIN, T + 5 * MIN, "materialized", "pending")]
    assert occurrences(skip) == [] and skip.schedules["s"].cursor == T + 5 * MIN + timedelta(seconds=1)


def test_skip_wins_over_a_held_slot_for_a_range_and_a_single_instant_coalesces():
    """Protocol note 5a, as the model judges every implementation (model-agreement, processor-history)."""
    model = Model()
    model.create("s", every(misfire="skip"))
    model.pass_(T + MIN + timedelta(seconds=1))  # its Work holds the slot
    model.pass_(T + 4 * MIN + timedelta(seconds=1))  # three instants while the slot is held: skipped
    assert occurrences(model) == [(1, "nominal", T + MIN, T + MIN, "materialized", "pending")]
    assert model.schedules["s"].events == [("recovery-skipped", T + 2 * MIN, T + 4 * MIN)]
    model.pass_(T + 5 * MIN + timedelta(seconds=1))  # one instant: coalesced behind the slot
    assert occurrences(model)[1:] == [(1, "coalesced", T + 5 * MIN, T + 5 * MIN, "pending", None)]


def test_coalescing_requeue_and_supersession():
    model = Model()
    model.create("s", every())
    model.pass_(T + MIN + timedelta(seconds=1))
    model.pass_(T + 2 * MIN + timedelta(seconds=1))
    model.pass_(T + 3 * MIN + timedelta(seconds=1))
    assert occurrences(model)[1] == (1, "coalesced", T + 2 * MIN, T + 3 * MIN, "pending", None)
    model.work("s", 1, "retrying")
    model.pass_(T + 3 * MIN + timedelta(seconds=2))
    assert occurrences(model)[1][4] == "pending"  # a retry does not release the slot
    model.work("s", 1, "succeeded")
    model.pass_(T + 3 * MIN + timedelta(seconds=3))  # no new interval needed
    assert occurrences(model)[1][4] == "materialized"
    model.pass_(T + 4 * MIN + timedelta(seconds=1))  # slot held again: a new coalesced occurrence
    model.update("s", Generation(0, "every", T + 4 * MIN + timedelta(seconds=2), every=MIN, anchor=T))
    states = [(o[0], o[1], o[4]) for o in occurrences(model)]
    assert states == [(1, "nominal", "materialized"), (1, "coalesced", "materialized"), (1, "coalesced", "superseded")]


def test_fences_suspend_and_the_right_repair_releases():
    model = Model()
    model.create("a", every())
    model.create("b", every())
    model.advance_epoch()
    model.pass_(T + MIN + timedelta(seconds=1))
    assert {n: s.suspension for n, s in model.schedules.items()} == {"a": "runtime-epoch", "b": "runtime-epoch"}
    model.release("a")
    model.advance_scope_generation()
    model.release("b")
    model.pass_(T + MIN + timedelta(seconds=2))
    assert model.schedules["a"].suspension == "scope-generation"
    model.release("a")  # refused: a scope-generation suspension needs an update
    assert model.schedules["a"].lifecycle == "suspended"
    model.update("a", Generation(0, "every", T + MIN + timedelta(seconds=3), every=MIN, anchor=T))
    model.pass_(T + 2 * MIN + timedelta(seconds=1))
    assert occurrences(model, "a") == [(2, "nominal", T + 2 * MIN, T + 2 * MIN, "materialized", "pending")]


def test_clock_behind_the_cursor_decides_nothing_and_delete_is_terminal():
    model = Model()
    model.create("s", every())
    model.pass_(T + MIN + timedelta(seconds=1))
    model.pass_(T - timedelta(hours=1))
    assert model.schedules["s"].cursor == T + MIN + timedelta(seconds=1) and len(occurrences(model)) == 1
    model.delete("s")
    model.update("s", every())
    assert model.schedules["s"].lifecycle == "deleted"


def test_at_and_after_fire_once_and_the_picture_is_relative():
    model = Model()
    model.create("at", Generation(1, "at", T, at=T + timedelta(seconds=90)))
    model.create("after", Generation(1, "after", T + timedelta(seconds=1), after=timedelta(seconds=45)))
    model.drain(T + timedelta(hours=1))
    shown = picture(model)
    assert shown["at"]["occurrences"] == [(1, "nominal", 0, 0, "materialized", "pending")]
    assert shown["after"]["occurrences"] == [(1, "nominal", 45_000_000, 45_000_000, "materialized", "pending")]


def test_a_planted_idempotency_key_suspends_at_the_bridge_and_links_nothing():
    model = Model()
    model.create("bill", Generation(1, "at", T, at=T + timedelta(seconds=60)))
    model.plant("bill", 1, "nominal", T + timedelta(seconds=60))
    model.pass_(T + timedelta(seconds=61))
    state = picture(model)["bill"]
    assert (state["lifecycle"], state["suspension"]) == ("suspended", "idempotency-conflict")
    assert state["occurrences"] == [(1, "nominal", 0, 0, "pending", None)]


def test_the_picture_places_the_cursor_on_the_last_instant_at_or_before_it():
    model = Model()
    model.create("grid", Generation(1, "every", T, every=timedelta(seconds=60), anchor=T))
    assert picture(model)["grid"]["cursor_instant"] == 0  # created at the anchor itself
    model.pass_(T + timedelta(seconds=119, microseconds=999_999))
    assert picture(model)["grid"]["cursor_instant"] == 60_000_000
    model.pass_(T + timedelta(seconds=120))
    assert picture(model)["grid"]["cursor_instant"] == 120_000_000  # exactly at an instant counts
    model.create("once", Generation(1, "at", T, at=T + timedelta(seconds=60)))
    assert picture(model)["once"]["cursor_instant"] is None


def test_a_copied_model_is_equal_and_independent_of_its_original():
    import copy
    import dataclasses

    from testhost.judge.gate_model import Occurrence, Schedule

    model = Model()
    model.create("s", every())
    model.create("t", every(minutes=5, window=timedelta(minutes=1)))
    model.pass_(T + 2 * MIN)
    model.work("s", 1, "succeeded")
    model.plant("s", 1, "nominal", T + 3 * MIN)
    model.pass_(T + timedelta(hours=2))  # t suspends: an event to copy
    model.lease_left("s", T + timedelta(hours=2, seconds=2))
    clone = copy.deepcopy(model)
    # Every field is carried: a field added to Schedule, Occurrence or Model must be added to the copy too.
    assert vars(clone).keys() == vars(model).keys()
    for name, s in model.schedules.items():
        assert dataclasses.asdict(clone.schedules[name]) == dataclasses.asdict(s)
    assert {f.name for f in dataclasses.fields(Schedule)} == {"name", "generations", "cursor", "epoch",
                                                             "scope_generation", "lifecycle", "suspension",
                                                             "occurrences", "events", "claimable_at"}
    assert {f.name for f in dataclasses.fields(Occurrence)} == {"generation", "kind", "first", "last", "state",
                                                               "work"}
    assert clone.planted == model.planted and model.schedules["t"].events
    before = copy.deepcopy(model)
    clone.pass_(T + timedelta(hours=3))
    clone.work("s", 2, "failed")
    clone.advance_epoch()
    clone.plant("t", 1, "nominal", T)
    assert [dataclasses.asdict(s) for s in model.schedules.values()] == \
        [dataclasses.asdict(s) for s in before.schedules.values()]
    assert (model.epoch, model.planted) == (before.epoch, before.planted)


def test_a_lease_left_to_expire_is_claimable_at_its_expiry_and_ordered_by_it():
    """A refused pass's claim leaves the lease to expire (protocol-notes 33b), and the claim function orders by the
    claimable time, the expiry while leased (17): of two schedules due at the same instant, the one whose lease
    expired is claimed second by a pass bounded to one; until the expiry it is not claimable at all."""
    model = Model()
    model.create("s1", every(anchor=T, accepted=T))
    model.create("s2", Generation(1, "at", T, at=T + MIN))
    assert model.claimed(T + MIN, 1) == ["s1"]  # due at the same instant: in the order they were created
    model.lease_left("s1", T + MIN + timedelta(seconds=3))
    assert model.claimed(T + MIN + timedelta(seconds=1), 2) == ["s2"]  # still leased
    assert model.claimed(T + 2 * MIN, 1) == ["s2"]
    model.pass_(T + 2 * MIN, 1)
    assert occurrences(model, "s1") == [] and occurrences(model, "s2")
    model.pass_(T + 3 * MIN, 1)  # processed: the lease released, claimable by its due time again
    assert occurrences(model, "s1") == [(1, "recovery", T + MIN, T + 3 * MIN, "materialized", "pending")]
    assert model.schedules["s1"].claimable_at is None


def test_a_terminal_transition_requeues_claimable_at_its_own_time_so_a_clock_set_back_claims_nothing():
    model = Model()
    model.create("s", every())
    model.pass_(T + MIN)  # the first Work, accepted
    model.pass_(T + 2 * MIN)  # the next instant coalesces behind it
    model.work("s", 1, "succeeded", T + 2 * MIN + timedelta(seconds=10))  # the requeue, at the terminal time
    assert not model.due(model.schedules["s"], T + 2 * MIN)  # the clock set back before it: nothing to claim
    model.pass_(T + 2 * MIN)
    assert occurrences(model)[-1] == (1, "coalesced", T + 2 * MIN, T + 2 * MIN, "pending", None)
    model.pass_(T + 2 * MIN + timedelta(seconds=10))  # the clock back at the terminal time: the requeue's pass
    assert occurrences(model)[-1] == (1, "coalesced", T + 2 * MIN, T + 2 * MIN, "materialized", "pending")
    untimed = Model()
    untimed.create("s", every())
    untimed.pass_(T + MIN)
    untimed.pass_(T + 2 * MIN)
    untimed.work("s", 1, "succeeded")  # no time given: claimable at once, as before
    assert untimed.due(untimed.schedules["s"], T + 2 * MIN)


def _straddled(kind: str):
    """An Every of 30 s from T+7s: a pass or drain at T+66.4s, which answered at T+67.5s, past the instant T+67s."""
    from testhost.judge.timelines import Timelines
    timelines = Timelines()
    timelines.create("s1", Generation(1, "every", T, every=timedelta(seconds=30), anchor=T + timedelta(seconds=7)))
    start = T + timedelta(seconds=66.4)
    timelines.drain(start) if kind == "drain" else timelines.pass_(start, 3)
    return timelines, start


def _occurrences(model) -> list[tuple]:
    return [(o.kind, (o.first - T).total_seconds(), (o.last - T).total_seconds(), o.state)
            for o in model.schedules["s1"].occurrences]


def test_a_pass_that_ran_past_an_instant_may_have_decided_it_late_or_claimed_again():
    """Each decision cuts off at its own transaction's time: an instant that fell due while a pass or drain ran is
    decided by a later decision of it, or by a claim made again once it fell due (protocol note 38e)."""
    for kind in ("drain", "pass"):
        timelines, start = _straddled(kind)
        assert [_occurrences(m) for m in timelines.branches] == [[("recovery", 7, 37, "materialized")]]
        timelines.ran_until(start + timedelta(seconds=0.5))  # no instant between: nothing to branch
        assert len(timelines.branches) == 1
        timelines.ran_until(start + timedelta(seconds=1.1))
        assert [_occurrences(m) for m in timelines.branches] == [
            [("recovery", 7, 37, "materialized")],  # every decision before T+67s
            [("recovery", 7, 67, "materialized")],  # its one decision after it
            [("recovery", 7, 37, "materialized"), ("coalesced", 67, 67, "pending")],  # claimed again after it
        ], kind
        assert timelines.left == [frozenset()] * 3


def _every_90(timelines, name: str, accepted_s: float, anchor_s: float) -> None:
    timelines.create(name, Generation(1, "every", T + timedelta(seconds=accepted_s), every=timedelta(seconds=90),
                                      anchor=T + timedelta(seconds=anchor_s), misfire="skip"))


def _shape(model, name: str = "s1") -> tuple:
    s = model.schedules[name]
    return ([(o.kind, (o.first - T).total_seconds(), (o.last - T).total_seconds(), o.state, o.work)
             for o in s.occurrences],
            [(e[0], *((t - T).total_seconds() for t in e[1:])) for e in s.events])


def test_a_pass_held_for_a_step_beside_it_that_ran_past_an_instant_may_have_decided_it_late():
    """38e holds for a pass with a step beside its held barrier too (explore met it under load: the reference's
    decision, held at `schedule-decision-after-commit` while Work succeeded beside it, cut off past the next instant
    and skipped the two as one recovery range; the model had decided one instant at the pass's start). The late
    branch takes the step where the case put it: after the pass's decisions."""
    from testhost.judge.timelines import Timelines
    timelines = Timelines()
    _every_90(timelines, "s1", accepted_s=10, anchor_s=7)  # instants T+97s, T+187s, T+277s, ...
    timelines.pass_(T + timedelta(seconds=100), 1)  # T+97s: a nominal occurrence, its Work pending
    timelines.step_started()
    start = T + timedelta(seconds=276.5)
    timelines.pass_(start, 1)  # T+187s, the Work's slot held: coalesced; held at its committed decision while
    timelines.work("s1", 1, "succeeded", start + timedelta(seconds=0.4))  # the Work succeeds beside it
    timelines.ran_until(start + timedelta(seconds=1.1))  # it answered at T+277.6s, past the instant T+277s
    assert [_shape(m) for m in timelines.branches] == [
        ([("nominal", 97, 97, "materialized", "succeeded"), ("coalesced", 187, 187, "pending", None)], []),
        ([("nominal", 97, 97, "materialized", "succeeded")], [("recovery-skipped", 187, 277)]),  # decided late
    ]
    assert timelines.left == [frozenset()] * 2


def test_a_late_branch_keeps_the_claims_a_pass_made_before_a_step_beside_it():
    """A step committed while the pass was held before its decision: the model runs the pass again on top of it,
    with the schedules claimed before the step first (beside.py); its late branch keeps them first."""
    from testhost.judge.timelines import Timelines
    timelines = Timelines()
    _every_90(timelines, "s1", accepted_s=0, anchor_s=7)  # due from T+7s: claimed first by due time
    _every_90(timelines, "s2", accepted_s=0, anchor_s=37)  # due from T+37s
    start = T + timedelta(seconds=96.5)
    timelines.pass_(start, 1, first=["s2"])  # the one claim, s2's, made before the step
    timelines.ran_until(start + timedelta(seconds=1.1))  # past T+97s, s1's next instant
    # s1 was never claimed by this pass, at its start or its end: every branch leaves it undecided, its cursor
    # where it was (the late branch differs from the first only in s2's cursor, at the pass's end).
    assert len(timelines.branches) == 2
    assert [(_shape(m, "s1"), _shape(m, "s2")) for m in timelines.branches] == [
        (([], []), ([("nominal", 37, 37, "materialized", "pending")], []))] * 2
    assert {m.schedules["s1"].cursor for m in timelines.branches} == {T}
