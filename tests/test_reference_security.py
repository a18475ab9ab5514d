"""The reference's security shape against a real PostgreSQL: exact grants (validated, also on history
partitions created later), what each role must not do, forced RLS between scopes, the claim function's
argument fences, the bridge's current_user proof, and the payload-free queue."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from psycopg import errors as pgerrors
from psycopg.rows import dict_row

import reference
from reference.db import PROVE_AND_SET_SCOPE, SCOPE_SETTING, Session
from reference.errors import AccessDenied, BridgeRoleError, DurableError, HistoryPartitionMissing, RetriableError
from reference.roles import OWNER, QUEUE_COLUMNS, RUNTIME, TABLE_GRANTS, validate
from reference.work import WorkRequest, WorkStore
from protocol_helpers import snapshot
from testhost.world.store import new_store

pytestmark = pytest.mark.world

REPO = Path(__file__).resolve().parents[1]
SCOPED_TABLES = ("scopes", "work_items", "schedule_commands", "schedule_definitions", "schedule_generations",
                 "schedule_occurrences", "schedule_dispatch_timing", "schedule_history")
PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE")


# -- helpers ---------------------------------------------------------------------------------------

def every_spec(seconds: float = 1.0) -> reference.ScheduleSpec:
    return reference.ScheduleSpec(kind="every", every=timedelta(seconds=seconds), target=reference.Target("cmd"))


def create_schedule(store, scope_id: str = "tenant-a") -> uuid.UUID:
    with reference.ScheduleClient(store.runtime_dsn, scope_id) as client:
        view = client.create(every_spec())
    assert isinstance(view, reference.ScheduleView), view
    return view.schedule_id


def connect(dsn: str) -> psycopg.Connection:
    return psycopg.connect(dsn, autocommit=True, row_factory=dict_row)


def history_partitions(store) -> list[str]:
    with store.owner() as conn:
        return [r["relname"] for r in conn.execute(
            "select c.relname from pg_inherits i join pg_class c on c.oid = i.inhrelid "
            "where i.inhparent = 'appsurface_durable.schedule_history'::regclass order by 1").fetchall()]


def relations(store, kinds: str = "rpS") -> list[str]:
    with store.owner() as conn:
        return [r["relname"] for r in conn.execute(
            "select c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace "
            "where n.nspname = 'appsurface_durable' and c.relkind = any(%s) order by 1",
            (list(kinds),)).fetchall()]


def queue_snapshot(store) -> tuple[list[dict], list[dict]]:
    with store.owner() as conn:
        return (conn.execute("select * from appsurface_durable.schedule_dispatch order by dispatch_id").fetchall(),
                conn.execute("select * from appsurface_durable.schedule_dispatch_timing order by dispatch_id").fetchall())


def validate_findings(store) -> list[str]:
    session = Session(store.owner_dsn)
    try:
        return validate(session)
    finally:
        session.close()


def denied(conn: psycopg.Connection, statement: str, params=None) -> None:
    with pytest.raises(pgerrors.InsufficientPrivilege):
        conn.execute(statement, params)


def validate_cli(store) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "reference", "validate-grants", "--dsn", store.owner_dsn],
                          capture_output=True, text=True, cwd=REPO, timeout=60)


# -- the validator ---------------------------------------------------------------------------------

def test_validate_is_exact_on_a_fresh_store(store):
    assert validate_findings(store) == []
    out = validate_cli(store)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip().splitlines()[-1] == "grants exact"


def test_history_partitions_created_after_a_clock_move_keep_the_exact_shape(fresh_world):
    store = new_store(fresh_world)
    try:
        store.create_scope("tenant-a")
        before = history_partitions(store)
        assert len(before) == 2
        fresh_world.clock.shift(timedelta(days=62))

        # Past the pre-created months the runtime cannot record history until the owner ensures partitions.
        with reference.ScheduleClient(store.runtime_dsn, "tenant-a") as client:
            with pytest.raises(HistoryPartitionMissing):
                client.create(every_spec())

        ensured = store.ensure_partitions()
        new = sorted(set(ensured) - set(before))
        assert len(new) == 2 and history_partitions(store) == sorted(before + new), (before, ensured)
        assert validate_findings(store) == []

        # The new partition really carries the runtime's grants and the scope policy.
        schedule_id = create_schedule(store)
        with store.owner() as conn:
            where = conn.execute("select tableoid::regclass::text as part from appsurface_durable.schedule_history "
                                 "where schedule_id = %s", (schedule_id,)).fetchall()
        assert where == [{"part": f"appsurface_durable.{ensured[0]}"}]
        assert ensured[0] in new
    finally:
        store.drop()


BREAKAGES = {
    "extra table grant": (
        "grant select on appsurface_durable.work_items to appsurface_durable_dispatcher",
        "extra grant: appsurface_durable_dispatcher has SELECT on work_items"),
    "revoked runtime grant": (
        "revoke insert on appsurface_durable.schedule_commands from appsurface_durable_runtime",
        "missing grant: appsurface_durable_runtime lacks INSERT on schedule_commands"),
    "partition without forced rls": (
        "alter table appsurface_durable.{partition} no force row level security",
        "row level security is not enabled and forced on {partition}"),
    "partition without its policy": (
        "drop policy scope_isolation on appsurface_durable.{partition}",
        "policy shape on {partition} is [], expected [('scope_isolation', '*', True, "
        "['appsurface_durable_runtime'], ('scope_id = appsurface_durable.current_scope', "
        "'scope_id = appsurface_durable.current_scope'))]"),
    "sequence grant": (
        "grant usage on sequence appsurface_durable.schedule_dispatch_dispatch_id_seq to appsurface_durable_dispatcher",
        "extra grant: appsurface_durable_dispatcher has USAGE on schedule_dispatch_dispatch_id_seq"),
    "partition with its history guard disabled": (
        "alter table appsurface_durable.{partition} disable trigger history_is_an_audit_trail",
        "guard trigger history_is_an_audit_trail is missing or disabled on {partition}"),
    "cursor guard dropped": (
        "drop trigger cursor_never_moves_backwards on appsurface_durable.schedule_definitions",
        "guard trigger cursor_never_moves_backwards is missing or disabled on schedule_definitions"),
    "runtime may delete dispatch rows": (
        "grant delete on appsurface_durable.schedule_dispatch to appsurface_durable_runtime",
        "extra grant: appsurface_durable_runtime has DELETE on schedule_dispatch"),
    "claim executable by public": (
        "grant execute on function appsurface_durable.claim_schedule_dispatch(text, interval) to public",
        "extra grant: PUBLIC may execute claim_schedule_dispatch"),
}


@pytest.mark.parametrize("breakage", list(BREAKAGES))
def test_validate_reports_each_deliberate_breakage(store, breakage):
    statement, finding = BREAKAGES[breakage]
    partition = history_partitions(store)[-1]
    with store.owner() as conn:
        conn.execute(statement.format(partition=partition))
    assert validate_findings(store) == [finding.format(partition=partition)]


def test_validate_grants_cli_exits_1_with_the_finding(store):
    with store.owner() as conn:
        conn.execute(BREAKAGES["extra table grant"][0])
    out = validate_cli(store)
    assert out.returncode == 1, out.stdout + out.stderr
    assert out.stdout.strip().splitlines() == [BREAKAGES["extra table grant"][1], "1 finding"]


# -- the dispatcher --------------------------------------------------------------------------------

def test_dispatcher_reads_six_queue_columns_and_nothing_else(store):
    schedule_id = create_schedule(store)
    with connect(store.dispatcher_dsn) as conn:
        rows = conn.execute(f"select {', '.join(QUEUE_COLUMNS)} from appsurface_durable.schedule_dispatch").fetchall()
        assert [r["schedule_id"] for r in rows] == [schedule_id]

        others = [r for r in relations(store) if r != "schedule_dispatch"]
        assert {"schedule_dispatch_timing", "schedule_definitions", "work_items", "scopes"} <= set(others)
        assert any(r.startswith("schedule_history_") for r in others)
        for relation in others:
            denied(conn, f"select * from appsurface_durable.{relation} limit 1")

        denied(conn, "update appsurface_durable.schedule_dispatch set lease_state = 'leased'")
        denied(conn, "update appsurface_durable.schedule_dispatch set dispatch_revision = dispatch_revision + 1")
        denied(conn, "delete from appsurface_durable.schedule_dispatch")
        denied(conn, "insert into appsurface_durable.schedule_dispatch (schedule_id, scope_routing_id) "
                     "values (gen_random_uuid(), 1)")
        for call in ("ensure_schedule_history_partitions()", "advance_runtime_epoch()", "scope_for_routing_id(1)",
                     "create_scope('tenant-x')", "advance_scope_generation('tenant-a')", "current_scope()",
                     "current_scope_routing_id()", "locked_scope_fences()"):
            denied(conn, f"select * from appsurface_durable.{call}")
    with store.owner() as conn:
        assert conn.execute("select runtime_epoch from appsurface_durable.store_runtime").fetchone() == {"runtime_epoch": 1}
        assert conn.execute("select scope_id, generation from appsurface_durable.scopes").fetchall() == [
            {"scope_id": "tenant-a", "generation": 1}]
    assert queue_snapshot(store)[0][0]["lease_state"] == "ready"


def test_the_dispatch_queue_has_exactly_the_six_payload_free_columns(store):
    with store.owner() as conn:
        columns = [r["column_name"] for r in conn.execute(
            "select column_name from information_schema.columns "
            "where table_schema = 'appsurface_durable' and table_name = 'schedule_dispatch' "
            "order by ordinal_position").fetchall()]
    assert columns == ["dispatch_id", "schedule_id", "scope_routing_id", "lease_state", "lease_generation",
                       "dispatch_revision"]
    assert tuple(columns) == QUEUE_COLUMNS
    for word in ("payload", "target", "policy", "due", "cursor", "label", "scope_id"):
        assert not [c for c in columns if word in c and c != "scope_routing_id"], word


# -- the claim function --------------------------------------------------------------------------

BAD_CLAIMS = [
    ("", "30 seconds"), ("   ", "30 seconds"), (None, "30 seconds"), ("a\nb", "30 seconds"), ("a\x01b", "30 seconds"),
    ("a\tb", "30 seconds"), ("x" * 201, "30 seconds"),
    ("worker-1", None), ("worker-1", "0"), ("worker-1", "-1 second"), ("worker-1", "10 minutes 1 microsecond"),
]


def test_claim_rejects_bad_owners_and_durations_before_changing_a_row(store):
    create_schedule(store)
    time.sleep(1.1)  # the every-1s schedule is due now: a valid claim would take it
    before = queue_snapshot(store)
    assert before[0][0]["lease_state"] == "ready" and before[1][0]["lease_owner"] is None

    with connect(store.dispatcher_dsn) as conn:
        for owner, duration in BAD_CLAIMS:
            with pytest.raises(pgerrors.InvalidParameterValue) as caught:
                conn.execute("select * from appsurface_durable.claim_schedule_dispatch(%s, %s)", (owner, duration))
            assert caught.value.sqlstate == "22023", (owner, duration)
        assert queue_snapshot(store) == before

        # Exactly ten minutes is admitted, and the lease is exactly that long.
        with conn.transaction():
            now = conn.execute("select transaction_timestamp() as now").fetchone()["now"]
            cur = conn.execute("select * from appsurface_durable.claim_schedule_dispatch(%s, %s)",
                               ("worker-1", "10 minutes"))
            assert [c.name for c in cur.description] == ["scope_routing_id", "schedule_id", "dispatch_revision"]
            claimed = cur.fetchall()
    dispatch, timing = queue_snapshot(store)
    assert claimed == [{"scope_routing_id": before[0][0]["scope_routing_id"],
                        "schedule_id": before[0][0]["schedule_id"],
                        "dispatch_revision": before[0][0]["dispatch_revision"] + 1}]
    assert dispatch[0]["lease_state"] == "leased" and dispatch[0]["lease_generation"] == 1
    assert timing[0]["lease_owner"] == "worker-1"
    assert timing[0]["lease_expires_at_utc"] == timing[0]["claimable_at_utc"] == now + timedelta(minutes=10)


def test_claim_is_a_security_definer_owned_by_the_migration_owner(store):
    with store.owner() as conn:
        row = conn.execute(
            "select p.prosecdef, pg_get_userbyid(p.proowner) as owner, p.proconfig from pg_proc p "
            "where p.oid = 'appsurface_durable.claim_schedule_dispatch(text, interval)'::regprocedure").fetchone()
    assert row["prosecdef"] is True
    assert row["owner"] == OWNER
    assert row["proconfig"] == ["search_path=pg_catalog, pg_temp"]


# -- the runtime -----------------------------------------------------------------------------------

def test_runtime_holds_no_privilege_beyond_the_declared_ones(store):
    with connect(store.runtime_dsn) as conn:
        denied(conn, "select * from appsurface_durable.claim_schedule_dispatch('worker-1', '1 minute')")
        for call in ("ensure_schedule_history_partitions()", "advance_runtime_epoch()", "create_scope('tenant-x')",
                     "advance_scope_generation('tenant-a')"):
            denied(conn, f"select * from appsurface_durable.{call}")
        tried = 0
        for relation, grants in TABLE_GRANTS.items():
            first = conn.execute(
                # Not an identity column: updating one is refused by the parser before any privilege check.
                "select attname from pg_attribute where attrelid = %s::regclass and attnum > 0 "
                "and not attisdropped and attidentity = '' order by attnum limit 1",
                (f"appsurface_durable.{relation}",)).fetchone()["attname"]
            statements = {
                "SELECT": f"select * from appsurface_durable.{relation}",
                "INSERT": f"insert into appsurface_durable.{relation} default values",
                "UPDATE": f"update appsurface_durable.{relation} set {first} = {first}",
                "DELETE": f"delete from appsurface_durable.{relation}",
                "TRUNCATE": f"truncate appsurface_durable.{relation}",
            }
            for privilege in PRIVILEGES:
                if privilege not in grants.get(RUNTIME, set()):
                    denied(conn, statements[privilege])
                    tried += 1
        assert tried > 30
        # Named in the protocol: scopes are read-only, generations append-only, the queue's routing fixed.
        denied(conn, "update appsurface_durable.scopes set generation = generation + 1")
        denied(conn, "update appsurface_durable.schedule_generations set target_command = 'other'")
        denied(conn, "delete from appsurface_durable.schedule_generations")
        denied(conn, "update appsurface_durable.schedule_dispatch set scope_routing_id = scope_routing_id")
    with store.owner() as conn:
        assert conn.execute("select runtime_epoch from appsurface_durable.store_runtime").fetchone() == {"runtime_epoch": 1}


def test_generations_are_append_only_even_for_the_owner(store):
    schedule_id = create_schedule(store)
    with store.owner() as conn:
        before = conn.execute("select * from appsurface_durable.schedule_generations").fetchall()
        assert len(before) == 1
        with pytest.raises(pgerrors.RestrictViolation, match="append-only: UPDATE refused"):
            conn.execute("update appsurface_durable.schedule_generations set target_command = 'other' "
                         "where schedule_id = %s", (schedule_id,))
        with pytest.raises(pgerrors.RestrictViolation, match="append-only: DELETE refused"):
            conn.execute("delete from appsurface_durable.schedule_generations where schedule_id = %s", (schedule_id,))
        assert conn.execute("select * from appsurface_durable.schedule_generations").fetchall() == before


@contextmanager
def _scoped(conn: psycopg.Connection, scope_id: str | None):
    """A runtime transaction with the local scope set (or, for None, left unset)."""
    with conn.transaction():
        if scope_id is not None:
            conn.execute("select appsurface_durable.set_local_scope(%s)", (scope_id,))
        yield conn


def test_rls_shows_the_runtime_only_its_own_scope(store):
    routing_b = store.create_scope("tenant-b")
    for scope in ("tenant-a", "tenant-b"):
        create_schedule(store, scope)
    time.sleep(1.1)
    processor = reference.ScheduleProcessor(store.runtime_dsn, store.dispatcher_dsn)
    try:
        counts = processor.process_due(reference.ProcessRequest(maximum_schedules=2))
    finally:
        processor.close()
    assert counts.materialized == 2, counts

    # Non-vacuous: every scoped table holds rows of both scopes.
    with store.owner() as conn:
        routing = {r["scope_id"]: r["routing_id"] for r in
                   conn.execute("select scope_id, routing_id from appsurface_durable.scopes").fetchall()}
        assert routing["tenant-b"] == routing_b
        for table in SCOPED_TABLES:
            scopes = {r["scope_id"] for r in conn.execute(f"select scope_id from appsurface_durable.{table}")}
            assert scopes == {"tenant-a", "tenant-b"}, table
        assert {r["scope_routing_id"] for r in conn.execute(
            "select scope_routing_id from appsurface_durable.schedule_dispatch")} == set(routing.values())

    with connect(store.runtime_dsn) as conn:
        for scope in ("tenant-a", "tenant-b"):
            with _scoped(conn, scope):
                for table in SCOPED_TABLES:
                    seen = {r["scope_id"] for r in conn.execute(f"select scope_id from appsurface_durable.{table}")}
                    assert seen == {scope}, (scope, table, seen)
                for partition in history_partitions(store):
                    seen = {r["scope_id"] for r in conn.execute(f"select scope_id from appsurface_durable.{partition}")}
                    assert seen <= {scope}, (scope, partition, seen)
                seen = {r["scope_routing_id"] for r in conn.execute(
                    "select scope_routing_id from appsurface_durable.schedule_dispatch")}
                assert seen == {routing[scope]}

        for scope in (None, "", "tenant-z"):
            with _scoped(conn, scope):
                for table in (*SCOPED_TABLES, "schedule_dispatch", *history_partitions(store)):
                    count = conn.execute(f"select count(*) as n from appsurface_durable.{table}").fetchone()["n"]
                    assert count == 0, (scope, table)


def test_rls_with_check_refuses_rows_of_another_scope(store):
    store.create_scope("tenant-b")
    schedule_b = create_schedule(store, "tenant-b")
    create_schedule(store, "tenant-a")
    WorkStore(store.runtime_dsn, "tenant-a").enqueue(WorkRequest(uuid.uuid4(), "key-a", "cmd", "act"))
    with store.owner() as conn:
        routing_b = conn.execute("select routing_id from appsurface_durable.scopes where scope_id = 'tenant-b'"
                                 ).fetchone()["routing_id"]
        counts_before = {t: conn.execute(f"select count(*) as n from appsurface_durable.{t}").fetchone()["n"]
                         for t in (*SCOPED_TABLES, "schedule_dispatch")}

    refused = [
        ("insert into appsurface_durable.work_items (scope_id, work_id, idempotency_key, command, activity) "
         "values ('tenant-b', gen_random_uuid(), 'key-b', 'cmd', 'act')", None),
        ("insert into appsurface_durable.schedule_commands (scope_id, command_id, schedule_id, command_kind, "
         "accepted_at_utc, revision) values ('tenant-b', gen_random_uuid(), %s, 'delete', now(), 2)", (schedule_b,)),
        ("insert into appsurface_durable.schedule_dispatch (schedule_id, scope_routing_id) "
         "values (gen_random_uuid(), %s)", (routing_b,)),
        ("update appsurface_durable.work_items set scope_id = 'tenant-b'", None),
    ]
    with connect(store.runtime_dsn) as conn:
        for statement, params in refused:
            with pytest.raises(pgerrors.InsufficientPrivilege, match="row-level security"):
                with _scoped(conn, "tenant-a"):
                    conn.execute(statement, params)
        # History of another scope is refused even before row security: its schedule is not one of the
        # runtime's scope (the audit trail's guard reads definitions under the same policy).
        with pytest.raises(pgerrors.ForeignKeyViolation, match="about a schedule of its scope"):
            with _scoped(conn, "tenant-a"):
                conn.execute("insert into appsurface_durable.schedule_history (scope_id, schedule_id, "
                             "recorded_at_utc, event) values ('tenant-b', %s, now(), 'created')", (schedule_b,))
        # Another scope's rows are not even visible to update.
        with _scoped(conn, "tenant-a"):
            cur = conn.execute("update appsurface_durable.schedule_definitions set revision = revision "
                               "where schedule_id = %s", (schedule_b,))
            assert cur.rowcount == 0
    with store.owner() as conn:
        counts_after = {t: conn.execute(f"select count(*) as n from appsurface_durable.{t}").fetchone()["n"]
                        for t in counts_before}
        assert conn.execute("select scope_id from appsurface_durable.work_items").fetchall() == [
            {"scope_id": "tenant-a"}]
    assert counts_after == counts_before


# -- the bridge's current_user proof ---------------------------------------------------------------

def test_the_bridge_proves_current_user_before_setting_the_scope(store):
    session = Session(store.owner_dsn)
    try:
        with pytest.raises(BridgeRoleError, match=f"current_user is {OWNER}, not the configured runtime role {RUNTIME}"):
            with session.scoped("tenant-a", RUNTIME):
                pytest.fail("the scoped block must not run for a non-runtime role")
        assert session.conn.info.transaction_status.name == "IDLE"
        # Proof and setting are one statement (sent with BEGIN): the scope is set only for the runtime role.
        proof = (PROVE_AND_SET_SCOPE, {"runtime_role": RUNTIME, "scope_id": "tenant-a", "routing_id": None})
        with session.transaction(reads=(proof,)) as s:
            assert s.read_rows[0] == [{"user": OWNER, "scope": None}]
            assert s.one("select current_setting(%s, true) as scope", (SCOPE_SETTING,))["scope"] in (None, "")
    finally:
        session.close()

    # The runtime role passes the same proof and does get its local scope.
    runtime = Session(store.runtime_dsn)
    try:
        with runtime.scoped("tenant-a", RUNTIME) as s:
            assert s.one("select appsurface_durable.current_scope() as scope")["scope"] == "tenant-a"
    finally:
        runtime.close()


def test_client_and_processor_on_the_owner_dsn_refuse_at_the_bridge(store):
    client = reference.ScheduleClient(store.owner_dsn, "tenant-a")
    try:
        with pytest.raises(BridgeRoleError):
            client.create(every_spec())
        with pytest.raises(BridgeRoleError):
            client.list()
    finally:
        client.close()
    with store.owner() as conn:
        assert conn.execute("select count(*) as n from appsurface_durable.schedule_definitions").fetchone()["n"] == 0

    create_schedule(store)
    time.sleep(1.1)
    # The processor proves its runtime session before it claims: nothing is leased either.
    with pytest.raises(BridgeRoleError, match="refusing to process"):
        reference.ScheduleProcessor(store.owner_dsn, store.dispatcher_dsn)
    with store.owner() as conn:
        assert conn.execute("select lease_generation from appsurface_durable.schedule_dispatch").fetchone()[
            "lease_generation"] == 0
        for table in ("schedule_occurrences", "work_items"):
            assert conn.execute(f"select count(*) as n from appsurface_durable.{table}").fetchone()["n"] == 0, table
        definition = conn.execute("select revision, cursor_utc, created_at_utc from appsurface_durable.schedule_definitions"
                                  ).fetchone()
    assert definition["revision"] == 1 and definition["cursor_utc"] == definition["created_at_utc"]


def test_access_and_bridge_failures_are_not_retriable(store):
    assert BridgeRoleError.retriable is False and BridgeRoleError("x").retriable is False
    assert AccessDenied.retriable is False and AccessDenied("x").retriable is False
    assert RetriableError.retriable is True and RetriableError("x").retriable is True
    assert issubclass(BridgeRoleError, DurableError) and not issubclass(BridgeRoleError, RetriableError)
    assert not issubclass(AccessDenied, RetriableError)

    # A real 42501 is translated to AccessDenied (not retriable).
    session = Session(store.runtime_dsn)
    try:
        with pytest.raises(AccessDenied) as caught:
            session.execute("select * from appsurface_durable.claim_schedule_dispatch('worker-1', '1 minute')")
        assert caught.value.retriable is False
    finally:
        session.close()


# -- the scope authorizes only the transaction that set it -------------------------------------------

def test_a_scope_left_at_session_level_reads_nothing_in_later_transactions(store):
    """A pooled connection that once set the scope for its session (SET, or set_config(..., false)) leaks no
    row into the next transaction: the value is bound to the transaction that set it."""
    schedule_id = create_schedule(store)
    tables = ("schedule_definitions", "schedule_generations", "schedule_commands", "schedule_dispatch",
              "schedule_dispatch_timing", "schedule_history", "scopes")
    with connect(store.runtime_dsn) as conn:
        def visible() -> dict[str, int]:
            return {t: conn.execute(f"select count(*) as n from appsurface_durable.{t}").fetchone()["n"]
                    for t in tables}

        # Inside the transaction that bound it, the scope reads its rows.
        with conn.transaction():
            assert conn.execute("select appsurface_durable.set_local_scope('tenant-a') as scope").fetchone() \
                == {"scope": "tenant-a"}
            inside = visible()
            leaked = conn.execute("select current_setting(%s) as value", (SCOPE_SETTING,)).fetchone()["value"]
        assert all(inside.values()), inside

        for leftover in (f"set {SCOPE_SETTING} = 'tenant-a'",
                         f"select set_config('{SCOPE_SETTING}', 'tenant-a', false)",
                         # the exact value the binding wrote, replayed at session level
                         f"select set_config('{SCOPE_SETTING}', '{leaked}', false)",
                         f"select set_config('{SCOPE_SETTING}', pg_current_xact_id()::text || '/tenant-a', false)"):
            conn.execute(leftover)
            assert conn.execute("select current_setting(%s) as value", (SCOPE_SETTING,)).fetchone()["value"]
            with conn.transaction():
                assert conn.execute("select appsurface_durable.current_scope() as scope").fetchone()["scope"] is None
                assert visible() == dict.fromkeys(tables, 0), leftover
                with pytest.raises(pgerrors.InsufficientPrivilege):
                    with conn.transaction():
                        conn.execute("insert into appsurface_durable.schedule_commands (scope_id, command_id, "
                                     "schedule_id, command_kind, accepted_at_utc, revision) "
                                     "values ('tenant-a', gen_random_uuid(), %s, 'delete', now(), 9)", (schedule_id,))
            assert visible() == dict.fromkeys(tables, 0), leftover  # autocommit statements too
            conn.execute(f"reset {SCOPE_SETTING}")


# -- history an auditor can trust: each forgery as each role ------------------------------------------

ROLE_DSNS = {"owner": "owner_dsn", "runtime": "runtime_dsn", "dispatcher": "dispatcher_dsn"}
FORGERIES = {
    # name: (statement, what the owner / the scoped runtime meets; the dispatcher meets no privilege)
    "back-dated history": (
        "insert into appsurface_durable.schedule_history (scope_id, schedule_id, recorded_at_utc, event) "
        "values ('tenant-a', %(schedule_id)s, transaction_timestamp() - interval '1 second', 'created')",
        pgerrors.CheckViolation, "stamped by the server"),
    "future-dated history": (
        "insert into appsurface_durable.schedule_history (scope_id, schedule_id, recorded_at_utc, event) "
        "values ('tenant-a', %(schedule_id)s, transaction_timestamp() + interval '1 second', 'updated')",
        pgerrors.CheckViolation, "stamped by the server"),
    "history of a made-up schedule": (
        "insert into appsurface_durable.schedule_history (scope_id, schedule_id, recorded_at_utc, event) "
        "values ('tenant-a', gen_random_uuid(), transaction_timestamp(), 'deleted')",
        pgerrors.ForeignKeyViolation, "about a schedule of its scope"),
    "history of another scope's schedule under this scope": (
        "insert into appsurface_durable.schedule_history (scope_id, schedule_id, recorded_at_utc, event) "
        "values ('tenant-a', %(other_id)s, transaction_timestamp(), 'suspended')",
        pgerrors.ForeignKeyViolation, "about a schedule of its scope"),
    "history with an event the protocol never writes": (
        "insert into appsurface_durable.schedule_history (scope_id, schedule_id, recorded_at_utc, event) "
        "values ('tenant-a', %(schedule_id)s, transaction_timestamp(), 'work-succeeded')",
        pgerrors.CheckViolation, "schedule_history"),
    "rewritten history": (
        "update appsurface_durable.schedule_history set event = 'deleted' where schedule_id = %(schedule_id)s",
        pgerrors.RestrictViolation, "append-only: UPDATE refused"),
    "erased history": (
        "delete from appsurface_durable.schedule_history where schedule_id = %(schedule_id)s",
        pgerrors.RestrictViolation, "append-only: DELETE refused"),
    "cursor moved backwards": (
        "update appsurface_durable.schedule_definitions set cursor_utc = cursor_utc - interval '1 microsecond' "
        "where schedule_id = %(schedule_id)s",
        pgerrors.CheckViolation, "the cursor never moves backwards"),
    "dispatch row deleted": (
        "delete from appsurface_durable.schedule_dispatch where schedule_id = %(schedule_id)s",
        None, None),
    "dispatch timing deleted": (
        "delete from appsurface_durable.schedule_dispatch_timing",
        None, None),
}


def forgery_outcome(role: str, forgery: str):
    """What each role meets: the dispatcher holds no privilege on any of these, the runtime none to update or
    delete history nor to delete dispatch rows; every other attempt meets the database's own guard."""
    statement, guard, message = FORGERIES[forgery]
    if role == "dispatcher" or guard is None and role == "runtime":
        return pgerrors.InsufficientPrivilege, None
    if role == "runtime" and statement.startswith(("update appsurface_durable.schedule_history",
                                                   "delete from appsurface_durable.schedule_history")):
        return pgerrors.InsufficientPrivilege, None
    return guard, message


# The owner may delete dispatch rows (it owns the schema); the guard is that the runtime may not.
FORGERY_CASES = [(role, forgery) for role in ROLE_DSNS for forgery in FORGERIES
                 if not (role == "owner" and FORGERIES[forgery][1] is None)]


@pytest.mark.parametrize("role, forgery", FORGERY_CASES)
def test_each_forgery_is_refused_for_each_role_and_changes_nothing(store, role, forgery):
    store.create_scope("tenant-b")
    schedule_id, other_id = create_schedule(store), create_schedule(store, "tenant-b")
    with reference.ScheduleClient(store.runtime_dsn, "tenant-a") as client:
        view = client.get(schedule_id)
        client.update(schedule_id, every_spec(2.0), expected_revision=view.revision)  # some history to rewrite
    before = snapshot(store)
    error, message = forgery_outcome(role, forgery)
    with connect(getattr(store, ROLE_DSNS[role])) as conn:
        with pytest.raises(error) as caught:
            with conn.transaction():
                if role == "runtime":
                    conn.execute("select appsurface_durable.set_local_scope('tenant-a')")
                conn.execute(FORGERIES[forgery][0], {"schedule_id": schedule_id, "other_id": other_id})
    if message:
        assert message in str(caught.value)
    assert snapshot(store) == before
