"""The schedule client: acceptance time, the three kinds, append-only generations, delete, revisions,
refusals as problem results that change nothing durable, and error classification."""

import uuid
from datetime import timedelta

import psycopg
import pytest

from reference import AccessDenied, Problem, RetriableError, ScheduleClient, ScheduleSpec, Target
from reference.db import Session
from protocol_helpers import after, at, definition, every, rows, server_now, snapshot


@pytest.fixture
def client(store):
    with ScheduleClient(store.runtime_dsn, "tenant-a") as c:
        yield c


def _accepted(store, schedule_id) -> tuple:
    gen = rows(store, "schedule_generations", "schedule_id = %s order by generation", (schedule_id,))
    cmds = rows(store, "schedule_commands", "schedule_id = %s order by accepted_at_utc", (schedule_id,))
    return gen, cmds


def test_create_captures_one_transaction_timestamp_on_command_and_generation(store, client):
    before = server_now(store)
    view = client.create(every(60))
    after_ = server_now(store)
    gens, cmds = _accepted(store, view.schedule_id)
    assert before <= gens[0]["accepted_at_utc"] <= after_
    assert cmds[0]["accepted_at_utc"] == gens[0]["accepted_at_utc"] == view.definition.accepted_at_utc
    assert definition(store, view.schedule_id)["cursor_utc"] == gens[0]["accepted_at_utc"]


def test_every_without_anchor_is_anchored_on_acceptance(store, client):
    view = client.create(every(60))
    gen = rows(store, "schedule_generations", "schedule_id = %s", (view.schedule_id,))[0]
    assert gen["anchor_utc"] == gen["accepted_at_utc"] and gen["anchor_explicit"] is False


def test_explicit_anchor_and_at_persist_unchanged(store, client):
    anchor = server_now(store).replace(microsecond=123457) - timedelta(days=3)
    anchored = client.create(every(3600, anchor=anchor))
    when = server_now(store) + timedelta(hours=5, microseconds=7)
    one_shot = client.create(at(when))
    gen_every = rows(store, "schedule_generations", "schedule_id = %s", (anchored.schedule_id,))[0]
    gen_at = rows(store, "schedule_generations", "schedule_id = %s", (one_shot.schedule_id,))[0]
    assert gen_every["anchor_utc"] == anchor and gen_every["anchor_explicit"] is True
    assert gen_at["at_utc"] == when


def test_after_is_anchored_on_acceptance_not_on_work_acceptance(store, client, world):
    view = client.create(after(30))
    gen = rows(store, "schedule_generations", "schedule_id = %s", (view.schedule_id,))[0]
    timing = rows(store, "schedule_dispatch_timing")[0]
    assert timing["due_at_utc"] == gen["accepted_at_utc"] + timedelta(seconds=30)


@pytest.mark.parametrize("spec, problem_type, field", [
    (ScheduleSpec(kind="cron", cron="*/5 * * * *", target=Target("x")), "not-admitted", None),
    (ScheduleSpec(kind="every", every=timedelta(seconds=5), target=Target("x", kind="flow")), "not-admitted", None),
    (ScheduleSpec(kind="at", target=Target("x")), "validation", "at"),
    (ScheduleSpec(kind="every", every=timedelta(seconds=-5), target=Target("x")), "validation", "every"),
    (ScheduleSpec(kind="every", every=timedelta(0), target=Target("x")), "validation", "every"),
    (ScheduleSpec(kind="after", after=timedelta(seconds=5), at=None, every=timedelta(1), target=Target("x")),
     "validation", "every"),
    (ScheduleSpec(kind="every", every=timedelta(seconds=5), target=Target(" ")), "validation", "target.command"),
    (ScheduleSpec(kind="every", every=timedelta(seconds=5), target=Target("a\nb")), "validation", "target.command"),
    (ScheduleSpec(kind="every", every=timedelta(seconds=5), target=Target("x", payload=[1])), "validation",
     "target.payload"),
    (ScheduleSpec(kind="every", every=timedelta(seconds=5), target=Target("x"), misfire_policy="fire-all"),
     "validation", "misfire_policy"),
    (ScheduleSpec(kind="every", every=timedelta(seconds=5), target=Target("x"), overlap_policy="allow-all"),
     "validation", "overlap_policy"),
    (ScheduleSpec(kind="every", every=timedelta(seconds=5), target=Target("x"), safety_window=timedelta(days=400)),
     "validation", "safety_window"),
    (ScheduleSpec(kind="yearly", target=Target("x")), "validation", "kind"),
], ids=["cron", "flow-target", "at-missing", "every-negative", "every-zero", "field-of-other-kind", "blank-command",
        "control-char-command", "payload-not-object", "unknown-misfire", "overlap-policy", "safety-window-too-large",
        "unknown-kind"])
def test_refused_definitions_are_problems_and_change_nothing(store, client, spec, problem_type, field):
    before = snapshot(store)
    result = client.create(spec)
    assert isinstance(result, Problem)
    assert result.type.endswith(problem_type)
    assert set(result.to_json()) == {"type", "title", "status", "detail", "errors"}
    assert result.status == (422 if problem_type == "not-admitted" else 400)
    if field:
        assert field in result.errors
    assert snapshot(store) == before


def test_naive_at_is_refused(store, client):
    from datetime import datetime
    result = client.create(at(datetime(2040, 1, 1)))
    assert isinstance(result, Problem) and "at" in result.errors


def test_at_not_after_acceptance_is_refused_unchanged(store, client):
    before = snapshot(store)
    result = client.create(at(server_now(store) - timedelta(seconds=1)))
    assert isinstance(result, Problem) and "acceptance time" in result.errors["at"][0]
    assert snapshot(store) == before


def test_update_appends_a_generation_and_never_rewrites_the_old_snapshot(store, client):
    view = client.create(every(60))
    first = rows(store, "schedule_generations", "schedule_id = %s", (view.schedule_id,))
    updated = client.update(view.schedule_id, every(120), expected_revision=view.revision)
    assert updated.active_generation == 2 and updated.revision == view.revision + 1
    gens = rows(store, "schedule_generations", "schedule_id = %s order by generation", (view.schedule_id,))
    assert gens[0] == first[0]
    assert [g["every_us"] for g in gens] == [60_000_000, 120_000_000]
    assert gens[1]["accepted_at_utc"] > gens[0]["accepted_at_utc"]
    cmds = rows(store, "schedule_commands", "schedule_id = %s and command_kind = 'update'", (view.schedule_id,))
    assert cmds[0]["accepted_at_utc"] == gens[1]["accepted_at_utc"]


def test_generations_refuse_rewrites_even_by_the_owner(store, client):
    client.create(every(60))
    with store.owner() as conn, pytest.raises(psycopg.errors.RestrictViolation):
        conn.execute("update appsurface_durable.schedule_generations set target_command = 'other'")


def test_stale_revision_is_a_conflict_and_changes_nothing(store, client):
    view = client.create(every(60))
    client.update(view.schedule_id, every(90), expected_revision=view.revision)
    before = snapshot(store)
    result = client.update(view.schedule_id, every(30), expected_revision=view.revision)
    assert isinstance(result, Problem) and result.status == 409 and result.type.endswith("revision-conflict")
    result = client.delete(view.schedule_id, expected_revision=view.revision)
    assert isinstance(result, Problem) and result.type.endswith("revision-conflict")
    assert snapshot(store) == before


def test_delete_is_terminal_and_update_cannot_revive(store, client):
    view = client.create(every(60))
    gone = client.delete(view.schedule_id, expected_revision=view.revision)
    assert gone.lifecycle_state == "deleted"
    # The runtime never deletes a dispatch row: it is retired, never claimable again.
    [retired] = rows(store, "schedule_dispatch_timing")
    assert (retired["due_at_utc"], retired["claimable_at_utc"], retired["lease_owner"]) == (None, None, None)
    assert rows(store, "schedule_dispatch")[0]["lease_state"] == "ready"
    before = snapshot(store)
    revived = client.update(view.schedule_id, every(60), expected_revision=gone.revision)
    assert isinstance(revived, Problem) and revived.type.endswith("schedule-deleted") and revived.status == 409
    again = client.delete(view.schedule_id, expected_revision=gone.revision)
    assert isinstance(again, Problem) and again.type.endswith("schedule-deleted")
    assert snapshot(store) == before
    assert [v.schedule_id for v in client.list()] == []
    assert [v.schedule_id for v in client.list(include_deleted=True)] == [view.schedule_id]


def test_get_and_list(store, client):
    a = client.create(every(60))
    b = client.create(after(60))
    assert client.get(a.schedule_id).schedule_id == a.schedule_id
    assert {v.schedule_id for v in client.list()} == {a.schedule_id, b.schedule_id}
    missing = client.get(uuid.uuid4())
    assert isinstance(missing, Problem) and missing.status == 404


def test_repeated_command_id_is_an_idempotent_retry(store, client):
    command = uuid.uuid4()
    first = client.create(every(60), command_id=command)
    second = client.create(every(60), command_id=command, schedule_id=first.schedule_id)
    assert second.schedule_id == first.schedule_id and second.revision == 1
    assert len(rows(store, "schedule_generations")) == 1
    other = client.delete(first.schedule_id, expected_revision=1, command_id=command)
    assert isinstance(other, Problem) and other.type.endswith("command-conflict")


def test_existing_schedule_id_cannot_be_created_again(store, client):
    view = client.create(every(60))
    result = client.create(every(60), schedule_id=view.schedule_id)
    assert isinstance(result, Problem) and result.status == 409


def test_unknown_scope_is_a_problem(store):
    with ScheduleClient(store.runtime_dsn, "tenant-unknown") as stranger:
        before = snapshot(store)
        result = stranger.create(every(60))
        assert isinstance(result, Problem) and result.type.endswith("scope-not-found")
        assert snapshot(store) == before


def test_lock_timeout_is_retriable_after_rollback(store, client):
    view = client.create(every(60))
    before = snapshot(store)
    holder = psycopg.connect(store.owner_dsn)
    holder.execute("select * from appsurface_durable.schedule_dispatch for update")
    impatient = ScheduleClient(store.runtime_dsn + " options='-c lock_timeout=200'", "tenant-a")
    with pytest.raises(RetriableError) as caught:
        impatient.update(view.schedule_id, every(30), expected_revision=view.revision)
    holder.rollback()
    holder.close()
    assert caught.value.retriable and caught.value.sqlstate == "55P03"
    assert snapshot(store) == before
    assert impatient.update(view.schedule_id, every(30), expected_revision=view.revision).revision == 2
    impatient.close()


def test_disconnect_mid_transaction_is_retriable_and_rolled_back(store, world):
    proxied = ScheduleClient(store.dsn("appsurface_durable_runtime", proxied=True), "tenant-a")
    before = snapshot(store)
    original = proxied._history

    def history_then_cut(s, *args):
        original(s, *args)
        world.proxy.cut()
    proxied._history = history_then_cut
    with pytest.raises(RetriableError):
        proxied.create(every(60))
    assert snapshot(store) == before
    proxied._history = original
    proxied.close()


def test_client_deadline_turns_a_lost_reply_into_a_retriable_error(store, world):
    proxied = ScheduleClient(store.dsn("appsurface_durable_runtime", proxied=True), "tenant-a", deadline=1.0)
    world.proxy.blackhole_replies()
    try:
        with pytest.raises(RetriableError):
            proxied.list()
    finally:
        world.proxy.heal()
    proxied.close()


def test_access_denied_is_not_retriable(store):
    session = Session(store.runtime_dsn)
    with pytest.raises(AccessDenied) as caught:
        session.execute("select appsurface_durable.advance_runtime_epoch()")
    assert caught.value.retriable is False
