"""The processor: bounded passes, fences first, cutoff from PostgreSQL, recovery and anomaly, QueueOne +
RunOnce coalescing with the Work terminal callback, supersession, leases and compare-or-return."""

import uuid
from datetime import timedelta

import pytest

import barriers
from reference import (CancellationToken, IdempotencyConflict, ProcessRequest, ScheduleClient, ScheduleProcessor,
                       WorkRequest, WorkStore)
from reference.identity import OccurrenceIdentity, canonical_instant, work_identity
from protocol_helpers import after, at, definition, drain, every, occurrences, rows, server_now

LEASE = timedelta(seconds=30)


@pytest.fixture
def client(store):
    with ScheduleClient(store.runtime_dsn, "tenant-a") as c:
        yield c


@pytest.fixture
def processor(store):
    p = ScheduleProcessor(store.runtime_dsn, store.dispatcher_dsn)
    yield p
    p.close()


@pytest.fixture
def work(store):
    w = WorkStore(store.runtime_dsn, "tenant-a")
    yield w
    w.close()


@pytest.fixture
def barrier_sink():
    """Install an in-process barrier sink; tests give it actions per barrier name."""
    actions: dict[str, callable] = {}
    hits: list[str] = []

    def sink(name, context):
        hits.append(name)
        action = actions.pop(name, None)
        if action:
            action(context)
    barriers.enable(sink)
    yield actions, hits
    barriers.disable()


class Crash(Exception):
    """Stands for the process dying at a barrier (in-process: the exception unwinds the transaction)."""


def crash(_context):
    raise Crash


def works(store) -> list[dict]:
    return rows(store, "work_items", "true order by accepted_at_utc")


def test_empty_pass_returns_zero_counts(processor):
    counts = processor.process_due()
    assert counts.to_json() == {"claimed": 0, "noops": 0, "occurrences": 0, "coalesced": 0, "recovery_skipped": 0,
                                "materialized": 0, "suspended": 0, "fenced": 0, "aborted": 0, "errors": []}


def test_at_fires_once_with_the_deterministic_work_identity(store, client, processor, world):
    view = client.create(at(server_now(store) + timedelta(seconds=10)))
    assert processor.process_due().claimed == 0
    world.clock.shift(timedelta(seconds=11))
    counts = processor.process_due()
    assert (counts.occurrences, counts.materialized) == (1, 1)
    [occ] = occurrences(store, view.schedule_id)
    assert occ["occurrence_kind"] == "nominal" and occ["state"] == "materialized"
    assert occ["first_nominal_utc"] == view.definition.timing.at_utc
    expected = work_identity(OccurrenceIdentity("tenant-a", view.schedule_id, 1, "nominal", occ["first_nominal_utc"]),
                             "launch")
    [item] = works(store)
    assert (item["work_id"], item["idempotency_key"], item["command"], item["activity"]) == \
           (expected.work_id, expected.idempotency_key, expected.command, expected.activity)
    assert (occ["work_id"], occ["work_idempotency_key"], occ["work_command"], occ["work_activity"]) == \
           (expected.work_id, expected.idempotency_key, expected.command, expected.activity)
    world.clock.shift(timedelta(days=1))
    assert processor.process_due().claimed == 0  # an At schedule is never due again


def test_after_is_due_relative_to_acceptance(store, client, processor, world):
    view = client.create(after(20))
    world.clock.shift(timedelta(seconds=19))
    assert processor.process_due().claimed == 0
    world.clock.shift(timedelta(seconds=2))
    processor.process_due()
    [occ] = occurrences(store, view.schedule_id)
    assert occ["first_nominal_utc"] == view.definition.accepted_at_utc + timedelta(seconds=20)


def test_every_materializes_one_nominal_per_instant_and_moves_the_cursor_to_the_cutoff(store, client, processor, work,
                                                                                       world):
    view = client.create(every(60))
    for step in range(3):
        world.clock.shift(timedelta(seconds=60))
        counts = processor.process_due()
        assert counts.materialized == 1, counts
        work.transition(works(store)[-1]["work_id"], "succeeded")
        cursor = definition(store, view.schedule_id)["cursor_utc"]
        assert cursor <= server_now(store)
    occs = occurrences(store, view.schedule_id)
    anchor = view.definition.timing.anchor_utc
    assert [o["first_nominal_utc"] for o in occs] == [anchor + timedelta(seconds=60 * n) for n in (1, 2, 3)]
    assert {o["occurrence_kind"] for o in occs} == {"nominal"}


def test_maximum_schedules_bounds_a_pass(store, client, processor, world):
    for _ in range(3):
        client.create(every(10))
    world.clock.shift(timedelta(seconds=11))
    assert processor.process_due().claimed == 1
    assert processor.process_due(ProcessRequest(maximum_schedules=5)).claimed == 2
    with pytest.raises(ValueError):
        processor.process_due(ProcessRequest(maximum_schedules=0))


def test_cancellation_is_observed_before_the_next_lease_and_keeps_committed_facts(store, client, processor, world,
                                                                                  barrier_sink):
    actions, _ = barrier_sink
    for _ in range(3):
        client.create(every(10))
    world.clock.shift(timedelta(seconds=11))
    cancelled = CancellationToken()
    cancelled.cancel()
    assert processor.process_due(ProcessRequest(maximum_schedules=3), cancelled).claimed == 0
    token = CancellationToken()
    actions["schedule-link-after-commit"] = lambda _c: token.cancel()
    counts = processor.process_due(ProcessRequest(maximum_schedules=3), token)
    assert counts.claimed == 1 and counts.materialized == 1
    assert len(works(store)) == 1


def test_cutoff_behind_the_cursor_is_a_noop(store, client, processor, world):
    view = client.create(every(60))
    world.clock.shift(timedelta(seconds=61))
    processor.process_due()
    cursor = definition(store, view.schedule_id)["cursor_utc"]
    with store.owner() as conn:  # make it claimable again, then move the clock behind the cursor
        conn.execute("update appsurface_durable.schedule_dispatch_timing set claimable_at_utc = '-infinity'")
    world.clock.shift(timedelta(hours=-1))
    counts = processor.process_due()
    assert counts.claimed == 1 and counts.noops == 1 and counts.occurrences == 0
    assert definition(store, view.schedule_id)["cursor_utc"] == cursor
    assert len(occurrences(store, view.schedule_id)) == 1


def test_several_instants_in_one_pass_make_one_recovery_range(store, client, processor, world):
    view = client.create(every(60))
    world.clock.shift(timedelta(seconds=60 * 5 + 1))
    counts = processor.process_due()
    assert counts.occurrences == 1 and counts.materialized == 1
    [occ] = occurrences(store, view.schedule_id)
    anchor = view.definition.timing.anchor_utc
    assert occ["occurrence_kind"] == "recovery"
    assert (occ["first_nominal_utc"], occ["last_nominal_utc"]) == (anchor + timedelta(minutes=1),
                                                                    anchor + timedelta(minutes=5))
    declared = rows(store, "schedule_history", "event = 'recovery-declared'")
    assert declared[0]["detail"]["instants"] == 5


def test_skip_misfire_policy_declares_the_range_without_work(store, client, processor, world):
    view = client.create(every(60, misfire_policy="skip"))
    world.clock.shift(timedelta(seconds=60 * 3 + 1))
    counts = processor.process_due()
    assert counts.recovery_skipped == 1 and counts.materialized == 0
    assert occurrences(store, view.schedule_id) == [] and works(store) == []
    assert definition(store, view.schedule_id)["cursor_utc"] > view.cursor_utc
    assert rows(store, "schedule_history", "event = 'recovery-skipped'")[0]["detail"]["instants"] == 3


def test_skip_wins_over_a_held_slot_for_a_range_and_a_single_instant_coalesces(store, client, processor, work, world):
    """Protocol note 5a: under `skip` a recovery range is skipped also while the slot is held (no coalesced
    occurrence takes it); one instant is no range, and coalesces behind the held slot."""
    view = client.create(every(60, misfire_policy="skip"))
    world.clock.shift(timedelta(seconds=61))
    assert processor.process_due().materialized == 1  # +60 s: its Work holds the slot
    world.clock.shift(timedelta(seconds=180))  # +120, +180, +240 due: a range, the slot held
    counts = processor.process_due()
    assert (counts.recovery_skipped, counts.coalesced, counts.occurrences) == (1, 0, 0)
    assert [o["occurrence_kind"] for o in occurrences(store, view.schedule_id)] == ["nominal"]
    world.clock.shift(timedelta(seconds=60))  # +300 alone: coalesced behind the slot
    assert processor.process_due().coalesced == 1
    anchor = view.definition.timing.anchor_utc
    assert [(o["occurrence_kind"], o["first_nominal_utc"] - anchor, o["last_nominal_utc"] - anchor, o["state"])
            for o in occurrences(store, view.schedule_id)] == [
        ("nominal", timedelta(seconds=60), timedelta(seconds=60), "materialized"),
        ("coalesced", timedelta(seconds=300), timedelta(seconds=300), "pending")]
    [skipped] = rows(store, "schedule_history", "event = 'recovery-skipped'")
    assert skipped["detail"]["instants"] == 3


def test_anomalous_jump_suspends_without_moving_the_cursor_and_update_repairs(store, client, processor, world):
    view = client.create(every(60, safety_window=timedelta(minutes=10)))
    world.clock.shift(timedelta(days=2))
    store.ensure_partitions()
    counts = processor.process_due()
    assert counts.suspended == 1 and counts.materialized == 0
    d = definition(store, view.schedule_id)
    assert (d["lifecycle_state"], d["suspension_reason"], d["cursor_utc"]) == ("suspended", "clock-anomaly", view.cursor_utc)
    evidence = rows(store, "schedule_history", "event = 'suspended'")[0]["detail"]
    assert evidence["reason"] == "clock-anomaly" and evidence["safety_window_s"] == 600
    assert processor.process_due().claimed == 0  # a suspended schedule is not due
    refused = client.release_after_recovery(view.schedule_id, expected_revision=d["revision"])
    assert refused.type.endswith("release-refused")
    repaired = client.update(view.schedule_id, every(60), expected_revision=d["revision"])
    assert repaired.lifecycle_state == "active" and repaired.cursor_utc > view.cursor_utc
    world.clock.shift(timedelta(seconds=61))
    assert processor.process_due().materialized == 1


def test_runtime_epoch_fence_suspends_then_release_after_recovery(store, client, processor, world):
    view = client.create(every(60))
    with store.owner() as conn:
        conn.execute("select appsurface_durable.advance_runtime_epoch()")
    world.clock.shift(timedelta(seconds=61))
    counts = processor.process_due()
    assert counts.suspended == 1 and counts.occurrences == 0 and works(store) == []
    d = definition(store, view.schedule_id)
    assert d["suspension_reason"] == "runtime-epoch" and d["cursor_utc"] == view.cursor_utc
    released = client.release_after_recovery(view.schedule_id, expected_revision=d["revision"])
    assert released.lifecycle_state == "active" and released.cursor_utc == view.cursor_utc
    assert definition(store, view.schedule_id)["runtime_epoch"] == 2
    assert processor.process_due().materialized == 1


def test_scope_generation_fence_needs_an_update(store, client, processor, world):
    view = client.create(every(60))
    with store.owner() as conn:
        conn.execute("select appsurface_durable.advance_scope_generation('tenant-a')")
    world.clock.shift(timedelta(seconds=61))
    assert processor.process_due().suspended == 1
    d = definition(store, view.schedule_id)
    assert d["suspension_reason"] == "scope-generation"
    refused = client.release_after_recovery(view.schedule_id, expected_revision=d["revision"])
    assert refused.type.endswith("release-refused") and "scope-generation" in refused.detail
    repaired = client.update(view.schedule_id, every(60), expected_revision=d["revision"])
    assert definition(store, view.schedule_id)["scope_generation"] == 2 and repaired.active_generation == 2


def test_release_refused_for_an_active_schedule(store, client):
    view = client.create(every(60))
    refused = client.release_after_recovery(view.schedule_id, expected_revision=view.revision)
    assert refused.type.endswith("release-refused") and "not suspended" in refused.detail


def test_work_turning_terminal_while_a_decision_coalesces_still_requeues_the_schedule(store, client, processor, work,
                                                                                       world, barrier_sink):
    """The Work transaction looks for a pending coalesced occurrence. A decision writing one at that moment
    holds the schedule's dispatch row until it commits, so the Work transaction waits for it and then sees
    the occurrence; without the wait it looked before the commit, found none, and the occurrence sat until
    the next instant instead of the next pass."""
    import threading

    actions, _ = barrier_sink
    view = client.create(every(60))
    world.clock.shift(timedelta(seconds=61))
    processor.process_due()
    [first] = works(store)
    world.clock.shift(timedelta(seconds=60))
    completed = threading.Event()
    seen: dict = {}

    def complete_while_deciding(_context):
        seen["thread"] = threading.Thread(target=lambda: (work.transition(first["work_id"], "succeeded"),
                                                          completed.set()))
        seen["thread"].start()
        seen["waited"] = not completed.wait(0.5)

    actions["schedule-decision-before-commit"] = complete_while_deciding
    counts = processor.process_due()
    seen["thread"].join(10)
    assert completed.is_set() and counts.coalesced == 1
    assert seen["waited"], "the Work transaction did not wait for the decision holding the dispatch row"
    assert rows(store, "schedule_history", "event = 'requeued-after-work-terminal'")
    counts = processor.process_due()  # no clock move: the coalesced occurrence does not wait for an instant
    assert counts.materialized == 1
    assert [o["state"] for o in occurrences(store, view.schedule_id)
            if o["occurrence_kind"] == "coalesced"] == ["materialized"]


@pytest.mark.parametrize("held_state", ["running", "retrying", "suspended"])
def test_coalescing_and_only_terminal_work_releases_the_slot(store, client, processor, work, world, held_state):
    view = client.create(every(60))
    world.clock.shift(timedelta(seconds=61))
    processor.process_due()
    [first] = works(store)
    work.transition(first["work_id"], held_state)
    for _ in range(3):  # three more instants while the slot is held: one pending coalesced occurrence
        world.clock.shift(timedelta(seconds=60))
        counts = processor.process_due()
        assert counts.coalesced == 1 and counts.materialized == 0
    occs = occurrences(store, view.schedule_id)
    coalesced = [o for o in occs if o["occurrence_kind"] == "coalesced"]
    assert len(coalesced) == 1 and coalesced[0]["state"] == "pending"
    anchor = view.definition.timing.anchor_utc
    assert (coalesced[0]["first_nominal_utc"], coalesced[0]["last_nominal_utc"]) == (
        anchor + timedelta(minutes=2), anchor + timedelta(minutes=4))
    assert processor.process_due().claimed == 0  # nonterminal Work released nothing
    work.transition(first["work_id"], "succeeded")
    assert rows(store, "schedule_history", "event = 'requeued-after-work-terminal'")
    counts = processor.process_due()  # no clock move: materialized without waiting for another interval
    assert counts.materialized == 1
    assert [o["state"] for o in occurrences(store, view.schedule_id) if o["occurrence_kind"] == "coalesced"] == ["materialized"]
    assert len(works(store)) == 2


def test_generation_update_supersedes_unstarted_but_started_work_keeps_the_slot(store, client, processor, work, world):
    view = client.create(every(60))
    world.clock.shift(timedelta(seconds=61))
    processor.process_due()
    world.clock.shift(timedelta(seconds=60))
    processor.process_due()  # the slot is held: a pending coalesced occurrence in generation 1
    updated = client.update(view.schedule_id, every(30), expected_revision=view.revision)
    states = {(o["generation"], o["occurrence_kind"]): o["state"] for o in occurrences(store, view.schedule_id)}
    assert states == {(1, "nominal"): "materialized", (1, "coalesced"): "superseded"}
    world.clock.shift(timedelta(seconds=31))
    counts = processor.process_due()
    assert counts.coalesced == 1 and counts.materialized == 0  # generation 1's Work still holds the slot
    work.transition(works(store)[0]["work_id"], "failed")
    assert processor.process_due().materialized == 1
    gen2 = [o for o in occurrences(store, view.schedule_id) if o["generation"] == 2]
    assert [(o["occurrence_kind"], o["state"]) for o in gen2] == [("coalesced", "materialized")]
    assert updated.active_generation == 2


def test_delete_supersedes_pending_and_stops_processing(store, client, processor, world, barrier_sink):
    actions, _ = barrier_sink
    view = client.create(every(60))
    world.clock.shift(timedelta(seconds=61))
    actions["schedule-decision-after-commit"] = crash
    with pytest.raises(Crash):
        processor.process_due()
    [occ] = occurrences(store, view.schedule_id)
    assert occ["state"] == "pending"
    client.delete(view.schedule_id, expected_revision=view.revision)
    assert occurrences(store, view.schedule_id)[0]["state"] == "superseded"
    world.clock.shift(LEASE + timedelta(seconds=1))
    assert processor.process_due().claimed == 0 and works(store) == []


def test_crash_before_decision_commit_leaves_nothing_and_a_retry_decides_once(store, client, processor, world,
                                                                              barrier_sink):
    actions, _ = barrier_sink
    view = client.create(every(60))
    world.clock.shift(timedelta(seconds=61))
    actions["schedule-decision-before-commit"] = crash
    with pytest.raises(Crash):
        processor.process_due()
    assert occurrences(store, view.schedule_id) == []
    assert definition(store, view.schedule_id)["cursor_utc"] == view.cursor_utc
    world.clock.shift(LEASE + timedelta(seconds=1))
    drain(processor)
    assert len(occurrences(store, view.schedule_id)) == 1 and len(works(store)) == 1


def test_crash_before_bridge_commit_then_retry_returns_the_same_identity(store, client, processor, world, barrier_sink):
    actions, hits = barrier_sink
    view = client.create(every(60))
    world.clock.shift(timedelta(seconds=61))
    actions["schedule-bridge-before-commit"] = crash
    with pytest.raises(Crash):
        processor.process_due()
    assert "schedule-work-after-acceptance" in hits
    [occ] = occurrences(store, view.schedule_id)
    assert occ["state"] == "pending" and works(store) == []
    world.clock.shift(LEASE + timedelta(seconds=1))
    drain(processor)
    [occ] = occurrences(store, view.schedule_id)
    expected = work_identity(OccurrenceIdentity("tenant-a", view.schedule_id, 1, "nominal", occ["first_nominal_utc"]),
                             "send-report")
    assert occ["work_id"] == expected.work_id and [w["work_id"] for w in works(store)] == [expected.work_id]


def test_paused_processor_is_fenced_after_another_takes_over(store, client, world, barrier_sink):
    actions, _ = barrier_sink
    view = client.create(every(60))
    world.clock.shift(timedelta(seconds=61))
    first = ScheduleProcessor(store.runtime_dsn, store.dispatcher_dsn)
    second = ScheduleProcessor(store.runtime_dsn, store.dispatcher_dsn)

    def paused_past_the_lease(_context):
        world.clock.shift(LEASE + timedelta(seconds=1))
        assert second.process_due().materialized == 1
    actions["schedule-claim-after-commit"] = paused_past_the_lease
    counts = first.process_due()
    assert counts.fenced == 1 and counts.materialized == 0
    assert len(works(store)) == 1 and len(occurrences(store, view.schedule_id)) == 1
    first.close()
    second.close()


def test_a_foreign_work_under_the_occurrence_key_is_a_conflict_that_links_nothing_and_suspends(
        store, client, processor, work, world):
    view = client.create(every(60))
    world.clock.shift(timedelta(seconds=61))
    first = view.definition.timing.anchor_utc + timedelta(seconds=60)
    identity = work_identity(OccurrenceIdentity("tenant-a", view.schedule_id, 1, "nominal", first), "send-report")
    work.enqueue(WorkRequest(identity.work_id, identity.idempotency_key, "another-command", identity.activity, {}))
    counts = processor.process_due()
    assert counts.suspended == 1 and counts.materialized == 0
    [occ] = occurrences(store, view.schedule_id)
    assert occ["state"] == "pending" and occ["work_id"] is None
    [item] = works(store)
    assert item["command"] == "another-command"  # the other caller's Work is left as it was
    row = definition(store, view.schedule_id)
    assert (row["lifecycle_state"], row["suspension_reason"]) == ("suspended", "idempotency-conflict")
    [event] = rows(store, "schedule_history", "event = 'suspended'")
    assert event["detail"]["stored"]["command"] == "another-command"
    assert event["detail"]["derived"]["command"] == "send-report"
    with pytest.raises(IdempotencyConflict):  # a plain Work caller still gets the conflict from the writer
        work.enqueue(WorkRequest(identity.work_id, identity.idempotency_key, "send-report", identity.activity, {}))


def test_the_work_writer_returns_a_work_committed_under_its_key_while_it_waited(store):
    """The writer inserts with ON CONFLICT DO NOTHING and reads the key's Work in the same statement. When
    another transaction holds the key uncommitted, the insert waits; once that one commits, the statement's
    snapshot still does not show its row, so the writer reads it again with a statement of its own."""
    import threading

    from reference.db import Session
    from reference.roles import RUNTIME
    from reference.work import WorkTransactionWriter

    request = WorkRequest(uuid.uuid4(), "key-raced", "cmd", "activity", {"n": 1})
    holder, waiter = Session(store.runtime_dsn), Session(store.runtime_dsn)
    accepted: dict = {}
    try:
        with holder.scoped("tenant-a", RUNTIME) as h:
            assert WorkTransactionWriter().enqueue(h, request).created
            waiting = threading.Thread(target=lambda: accepted.update(
                work=_enqueue_in_scope(waiter, request)))
            waiting.start()
            waiting.join(0.5)
            assert waiting.is_alive(), "the second insert did not wait for the uncommitted key"
        waiting.join(10)
        work = accepted["work"]
        assert (work.work_id, work.created, work.state) == (request.work_id, False, "pending")
    finally:
        holder.close()
        waiter.close()


def _enqueue_in_scope(session, request):
    from reference.roles import RUNTIME
    from reference.work import WorkTransactionWriter

    with session.scoped("tenant-a", RUNTIME) as s:
        return WorkTransactionWriter().enqueue(s, request)


def test_work_samples_its_own_clock_and_the_processor_never_waits_for_it(store, client, processor, world):
    view = client.create(after(5))
    world.clock.shift(timedelta(seconds=30))
    counts = processor.process_due()
    assert counts.materialized == 1
    [item] = works(store)
    assert item["state"] == "pending"  # the pass returned without waiting for the Work
    [occ] = occurrences(store, view.schedule_id)
    # the occurrence comes from the generation's acceptance, not from the Work's own clock_timestamp()
    assert occ["first_nominal_utc"] == view.definition.accepted_at_utc + timedelta(seconds=5)
    assert item["accepted_at_utc"] > occ["first_nominal_utc"] + timedelta(seconds=20)


def test_the_schema_reserves_seven_states_and_gate_a_writes_three(store, client, processor, work, world):
    with store.owner() as conn:
        check = conn.execute(
            "select pg_get_constraintdef(oid) as def from pg_constraint "
            "where conrelid = 'appsurface_durable.schedule_occurrences'::regclass and contype = 'c' "
            "and pg_get_constraintdef(oid) like '%%state%%pending%%'").fetchone()["def"]
    for state in ("pending", "claimed", "materialized", "skipped", "superseded", "canceled", "suspended"):
        assert f"'{state}'" in check
    view = client.create(every(60))
    for _ in range(3):
        world.clock.shift(timedelta(seconds=61))
        processor.process_due()
    client.update(view.schedule_id, every(60), expected_revision=view.revision)
    world.clock.shift(timedelta(seconds=61))
    processor.process_due()
    work.transition(works(store)[0]["work_id"], "succeeded")
    drain(processor)
    written = {o["state"] for o in rows(store, "schedule_occurrences")}
    assert written <= {"pending", "materialized", "superseded"}
    assert {"superseded", "materialized"} <= written


def test_definition_row_records_lifecycle_revision_generation_fences_and_cursor(store, client):
    view = client.create(every(60))
    row = definition(store, view.schedule_id)
    assert {"lifecycle_state", "revision", "active_generation", "runtime_epoch", "scope_generation",
            "cursor_utc"} <= set(row)
    assert (row["lifecycle_state"], row["revision"], row["active_generation"], row["runtime_epoch"],
            row["scope_generation"]) == ("active", 1, 1, 1, 1)


def test_stored_link_is_returned_when_it_matches_and_a_different_one_is_a_conflict(store, client, processor, world):
    """Compare-or-return at the link itself: an existing link that matches is returned (no second Work); one
    that differs is an idempotency conflict and nothing commits."""
    from reference.db import Session
    from reference.errors import IdempotencyConflict as Conflict
    view = client.create(every(60))
    world.clock.shift(timedelta(seconds=61))
    processor.process_due()
    [occ] = occurrences(store, view.schedule_id)
    identity = OccurrenceIdentity("tenant-a", view.schedule_id, 1, "nominal", occ["first_nominal_utc"])
    derived = work_identity(identity, "send-report")
    session = Session(store.runtime_dsn)
    with session.scoped("tenant-a", "appsurface_durable_runtime") as s:
        processor._link(s, identity, derived)  # the stored tuple matches: returned, nothing written
    different = derived.__class__(derived.work_id, derived.idempotency_key, "other-command", derived.activity)
    with pytest.raises(Conflict):
        with session.scoped("tenant-a", "appsurface_durable_runtime") as s:
            processor._link(s, identity, different)
    session.close()
    assert len(works(store)) == 1
    [after_] = occurrences(store, view.schedule_id)
    assert after_["work_command"] == "send-report" and after_["work_id"] == derived.work_id


def test_release_after_recovery_rebinds_the_current_scope_generation(store, client, processor, world):
    view = client.create(every(60))
    with store.owner() as conn:
        conn.execute("select appsurface_durable.advance_runtime_epoch()")
        conn.execute("select appsurface_durable.advance_scope_generation('tenant-a')")
    world.clock.shift(timedelta(seconds=61))
    assert processor.process_due().suspended == 1
    d = definition(store, view.schedule_id)
    assert d["suspension_reason"] == "runtime-epoch"  # the epoch is checked first
    client.release_after_recovery(view.schedule_id, expected_revision=d["revision"])
    released = definition(store, view.schedule_id)
    assert (released["runtime_epoch"], released["scope_generation"]) == (2, 2)
    assert processor.process_due().materialized == 1


def test_work_terminal_callback_changes_only_dispatch_eligibility(store, client, processor, work, world):
    view = client.create(every(60))
    world.clock.shift(timedelta(seconds=61))
    processor.process_due()
    world.clock.shift(timedelta(seconds=60))
    processor.process_due()  # a pending coalesced occurrence waits behind the running Work
    before_def, before_occ = definition(store, view.schedule_id), occurrences(store, view.schedule_id)
    before_timing = rows(store, "schedule_dispatch_timing")[0]
    work.transition(works(store)[0]["work_id"], "succeeded")
    assert definition(store, view.schedule_id) == before_def
    assert occurrences(store, view.schedule_id) == before_occ
    assert len(works(store)) == 1
    after_timing = rows(store, "schedule_dispatch_timing")[0]
    assert after_timing["due_at_utc"] < before_timing["due_at_utc"]  # requeued: due now, not at the next instant


def test_pending_coalesced_range_cannot_move_backwards(store, client, processor, world):
    import psycopg as pg
    view = client.create(every(60))
    world.clock.shift(timedelta(seconds=61))
    processor.process_due()
    world.clock.shift(timedelta(seconds=120))
    processor.process_due()
    with store.owner() as conn, pytest.raises(pg.errors.CheckViolation, match="only grow forward"):
        conn.execute("update appsurface_durable.schedule_occurrences set last_nominal_utc = first_nominal_utc "
                     "where occurrence_kind = 'coalesced' and schedule_id = %s", (view.schedule_id,))


def test_delete_and_recreate_under_a_new_identity_repairs_and_keeps_the_evidence(store, client, processor, world):
    old = client.create(every(60, safety_window=timedelta(minutes=5)))
    world.clock.shift(timedelta(days=1))
    store.ensure_partitions()
    processor.process_due()
    suspended = definition(store, old.schedule_id)
    assert suspended["suspension_reason"] == "clock-anomaly"
    client.delete(old.schedule_id, expected_revision=suspended["revision"])
    new = client.create(every(60))
    assert new.schedule_id != old.schedule_id
    world.clock.shift(timedelta(seconds=61))
    assert processor.process_due().materialized == 1
    evidence = rows(store, "schedule_history", "schedule_id = %s and event = 'suspended'", (old.schedule_id,))
    assert evidence and evidence[0]["detail"]["reason"] == "clock-anomaly"


def test_nothing_is_materialized_until_a_caller_runs_a_pass(store, client, world):
    """No hosted scheduler: due schedules wait for the caller's own trigger."""
    import time as _time
    client.create(every(1))
    world.clock.shift(timedelta(seconds=30))
    _time.sleep(1.0)
    assert rows(store, "schedule_occurrences") == [] and works(store) == []


def test_the_slot_query_planned_on_empty_tables_still_looks_up_one_schedule(store):
    """A processor plans each statement once per session, often before any occurrence exists. The slot
    query's plan must then still find the schedule's own occurrences by key and each one's Work by key: a
    join planned on empty tables read every occurrence and Work of the scope on every call."""
    import psycopg
    from reference.db import GENERIC_PLANS, server_form
    from reference.sql import query

    store.create_scope("tenant-plan")
    text, names = server_form(query("schedule", "slot_busy"))
    with psycopg.connect(store.runtime_dsn, autocommit=True, options=GENERIC_PLANS) as conn:
        conn.execute("begin")
        conn.execute("select appsurface_durable.set_local_scope('tenant-plan')")
        conn.execute(f"prepare slot_busy as {text}")
        plan = "\n".join(r[0] for r in conn.execute(
            f"explain (costs off) execute slot_busy({', '.join(['null'] * len(names))})").fetchall())
        conn.execute("rollback")
    lines = plan.splitlines()
    at = next(i for i, line in enumerate(lines) if "on schedule_occurrences o" in line)
    assert "Index Scan" in lines[at] and "schedule_id = $1" in lines[at + 1], plan
    assert "Index Cond: ((scope_id = o.scope_id) AND (work_id = o.work_id))" in plan, plan


# -- counts report committed facts only --------------------------------------------------------------

FAULTS = {
    "disconnect": lambda world: world.proxy.cut(),
    "db-crash": lambda world: (world.cluster.crash(), world.cluster.restart()),
}


@pytest.mark.parametrize("barrier", ["schedule-decision-before-commit", "schedule-bridge-before-commit"])
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_counts_report_committed_facts_only_after_a_retried_transaction(fresh_world, barrier_sink, fault, barrier):
    """A real fault right before a COMMIT rolls that transaction back and the processor retries it: the pass
    reports one occurrence and one materialized Work, as the store holds, not one per attempt."""
    from testhost.world.store import new_store
    actions, hits = barrier_sink
    store = new_store(fresh_world)
    store.ensure_partitions()
    store.create_scope("tenant-a")
    with ScheduleClient(store.runtime_dsn, "tenant-a") as client:
        view = client.create(every(60))
    fresh_world.clock.shift(timedelta(seconds=61))
    processor = ScheduleProcessor(store.dsn("appsurface_durable_runtime", proxied=True),
                                  store.dsn("appsurface_durable_dispatcher", proxied=True), deadline=10.0)
    actions[barrier] = lambda _context: FAULTS[fault](fresh_world)
    try:
        counts = processor.process_due()
    finally:
        processor.close()
    assert hits.count(barrier) == 2, hits  # the fault struck, and the transaction ran again
    [occ] = occurrences(store, view.schedule_id)
    assert occ["state"] == "materialized" and [w["work_id"] for w in works(store)] == [occ["work_id"]]
    assert (counts.claimed, counts.occurrences, counts.materialized, counts.aborted) == (1, 1, 1, 0), counts


# -- an update or delete records the due instants it drops ---------------------------------------------

def dropped(store, schedule_id) -> list[dict]:
    return rows(store, "schedule_history", "schedule_id = %s and event = 'due-instants-superseded'", (schedule_id,))


def test_an_update_records_the_due_instants_it_drops_and_never_decides_them(store, client, processor, world):
    """Instants of generation 1 that fell due with no pass before the update are never decided: the update
    records them (first, last, count) in its own transaction, and generation 2 starts at its acceptance."""
    view = client.create(every(60))
    anchor = view.definition.timing.anchor_utc
    world.clock.shift(timedelta(seconds=150))  # +60s and +120s are due; no pass runs
    updated = client.update(view.schedule_id, every(30), expected_revision=view.revision)
    [entry] = dropped(store, view.schedule_id)
    assert entry["generation"] == 1 and entry["recorded_at_utc"] == updated.definition.accepted_at_utc
    assert entry["detail"]["instants"] == 2
    assert entry["detail"]["first_nominal_utc"] == canonical_instant(anchor + timedelta(seconds=60))
    assert entry["detail"]["last_nominal_utc"] == canonical_instant(anchor + timedelta(seconds=120))
    world.clock.shift(timedelta(seconds=31))
    drain(processor)
    occs = occurrences(store, view.schedule_id)
    assert occs and all(o["generation"] == 2 and o["first_nominal_utc"] > updated.definition.accepted_at_utc
                        for o in occs), occs


def test_an_update_with_nothing_due_records_nothing_dropped_and_a_delete_records_its_own(store, client, world):
    view = client.create(every(60))
    updated = client.update(view.schedule_id, every(60), expected_revision=view.revision)
    assert dropped(store, view.schedule_id) == []
    world.clock.shift(timedelta(seconds=61))
    client.delete(view.schedule_id, expected_revision=updated.revision)
    [entry] = dropped(store, view.schedule_id)
    assert (entry["generation"], entry["detail"]["instants"]) == (2, 1)
    assert entry["detail"]["first_nominal_utc"] == canonical_instant(
        updated.definition.timing.anchor_utc + timedelta(seconds=60))
