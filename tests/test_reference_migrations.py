"""The reference's migrations against a real PostgreSQL: the declared schema, forward-only application,
idempotent migrate(), and runtime versions (v3 keeps Work; Schedule needs v4 and 0004)."""

from __future__ import annotations

import difflib
import re
import subprocess
import uuid
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest
from psycopg.rows import dict_row

import reference
import reference.migrations as migrations_module
from reference.db import Session
from reference.errors import MigrationRefused, SchemaNotReady
from reference.migrations import apply, applied, migrate, schema_version
from reference.sql import Migration, migrations
from reference.work import WorkRequest, WorkStore
from testhost.world.components import find_postgres
from testhost.world.store import empty_store, new_store

pytestmark = pytest.mark.world

SCHEMA_SQL = Path(__file__).resolve().parents[1] / "reference" / "schema.sql"
ALL_NAMES = ["0001_store_runtime.sql", "0002_scopes.sql", "0003_work_store.sql", "0004_schedule_protocol.sql"]


# -- helpers ---------------------------------------------------------------------------------------

def pg_dump_schema(store) -> list[str]:
    """`pg_dump --schema-only --no-owner`, without comments, SET lines, blank lines and the random
    \\restrict key newer pg_dump prints."""
    pg_dump = find_postgres().bindir / "pg_dump"
    assert pg_dump.is_file(), f"pg_dump not found beside the server binaries in {pg_dump.parent}"
    out = subprocess.run(
        [str(pg_dump), "--schema-only", "--no-owner", "-h", "127.0.0.1", "-p", str(store.world.cluster.port),
         "-U", "postgres", "-d", store.dbname],
        capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"pg_dump failed: {out.stderr}"
    lines = []
    for line in out.stdout.splitlines():
        line = line.rstrip()
        if not line or line.startswith("--") or line.startswith("SET ") or re.match(r"^\\(un)?restrict\b", line):
            continue
        lines.append(line)
    return lines


def seed_rows(store) -> dict[str, list[tuple]]:
    with psycopg.connect(store.owner_dsn, autocommit=True) as conn:
        return {
            "store_runtime": conn.execute(
                "select singleton, runtime_epoch from appsurface_durable.store_runtime").fetchall(),
            "runtime_versions": conn.execute(
                "select version, requires_migration, admits from appsurface_durable.runtime_versions "
                "order by version").fetchall(),
            "history_partitions": conn.execute(
                "select c.relname from pg_inherits i join pg_class c on c.oid = i.inhrelid "
                "where i.inhparent = 'appsurface_durable.schedule_history'::regclass order by 1").fetchall(),
        }


def ledger(store) -> list[tuple]:
    with psycopg.connect(store.owner_dsn, autocommit=True) as conn:
        if conn.execute("select to_regclass('appsurface_durable.schema_migrations')").fetchone()[0] is None:
            return []
        return conn.execute("select version, name, checksum, applied_at from appsurface_durable.schema_migrations "
                            "order by version").fetchall()


def snapshot(store) -> tuple[list[tuple], list[str]]:
    """What a refused migration must leave untouched: the ledger rows and the whole catalog."""
    return ledger(store), pg_dump_schema(store)


class _owner:
    """A Session as the migration owner, closed on exit."""

    def __init__(self, store):
        self.session = Session(store.owner_dsn)

    def __enter__(self) -> Session:
        return self.session

    def __exit__(self, *exc) -> None:
        self.session.close()


def unified(expected: list[str], actual: list[str], a: str, b: str) -> str:
    return "\n".join(difflib.unified_diff(expected, actual, a, b, lineterm=""))


@pytest.fixture
def stores(world):
    made = []

    def make(kind: str = "new", **kwargs):
        store = (empty_store if kind == "empty" else new_store)(world, **kwargs)
        made.append(store)
        return store

    yield make
    for store in made:
        store.drop()


# -- the declared schema ---------------------------------------------------------------------------

def test_schema_sql_declares_exactly_what_the_migrations_produce(stores):
    migrated = stores("empty")
    with _owner(migrated) as session:
        assert migrate(session) == ALL_NAMES

    declared = stores("empty")
    with _owner(declared) as session, session.transaction():
        session.execute(SCHEMA_SQL.read_text())

    from_migrations, from_schema = pg_dump_schema(migrated), pg_dump_schema(declared)
    # Non-vacuous: the dumps hold the whole protocol, history partitions included.
    assert any("CREATE FUNCTION appsurface_durable.claim_schedule_dispatch" in line for line in from_migrations)
    assert any(re.match(r"CREATE TABLE appsurface_durable\.schedule_history_\d{6} ", line) for line in from_migrations)
    assert from_schema == from_migrations, (
        "reference/schema.sql differs from what migrations 0001-0004 produce:\n"
        + unified(from_migrations, from_schema, "migrations 0001-0004", "reference/schema.sql"))

    # Seed rows are data, not schema: compared on their own.
    seeds = seed_rows(migrated)
    assert seeds["store_runtime"] == [(True, 1)]
    assert seeds["runtime_versions"] == [(3, 3, "Work and Flow"), (4, 4, "Work, Flow and Schedule")]
    assert len(seeds["history_partitions"]) == 2
    assert seed_rows(declared) == seeds
    # The declaration is no installation: the runner's ledger stays empty there.
    assert ledger(declared) == []
    assert [row[1] for row in ledger(migrated)] == ALL_NAMES


# -- forward-only application ----------------------------------------------------------------------

def test_migrate_twice_is_a_no_op(stores):
    store = stores("empty")
    with _owner(store) as session:
        assert migrate(session) == ALL_NAMES
        before = snapshot(store)
        assert migrate(session) == []
        assert schema_version(session) == 4
    assert snapshot(store) == before
    # A clone of the migrated template has nothing pending either.
    with _owner(stores()) as session:
        assert migrate(session) == []


def test_migrate_up_to_a_target_then_the_rest(stores):
    store = stores("empty")
    with _owner(store) as session:
        assert migrate(session, 2) == ALL_NAMES[:2]
        assert sorted(applied(session)) == [1, 2]
        assert migrate(session) == ALL_NAMES[2:]
        assert sorted(applied(session)) == [1, 2, 3, 4]
        recorded = {v: row["checksum"] for v, row in applied(session).items()}
    assert recorded == {m.version: m.checksum for m in migrations()}


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_an_applied_migration_cannot_be_applied_again(stores, version):
    store = stores()
    before = snapshot(store)
    with _owner(store) as session:
        with pytest.raises(MigrationRefused, match="already applied"):
            apply(session, migrations()[version - 1])
    assert snapshot(store) == before


def test_a_migration_cannot_be_applied_backwards(stores):
    # Version 3 after version 4: refused (the ledger already holds it).
    store = stores()
    before = snapshot(store)
    with _owner(store) as session:
        with pytest.raises(MigrationRefused, match="0003_work_store.sql"):
            apply(session, migrations()[2])
    assert snapshot(store) == before

    # Even with a hole in the ledger (row 2 gone, 3 and 4 still there), 0002 is older than 4: forward-only.
    with psycopg.connect(store.owner_dsn, autocommit=True) as conn:
        conn.execute("delete from appsurface_durable.schema_migrations where version = 2")
    before = snapshot(store)
    assert [row[0] for row in before[0]] == [1, 3, 4]
    with _owner(store) as session:
        with pytest.raises(MigrationRefused, match="older than applied version 4; migrations are forward-only"):
            apply(session, migrations()[1])
    assert snapshot(store) == before


def test_a_migration_cannot_skip_a_version(stores):
    store = stores(upto=2)
    before = snapshot(store)
    assert [row[0] for row in before[0]] == [1, 2]
    with _owner(store) as session:
        with pytest.raises(MigrationRefused, match="skips version 3"):
            apply(session, migrations()[3])
    after = snapshot(store)
    assert after == before
    assert not any("schedule_dispatch" in line for line in after[1])


def test_a_changed_migration_file_makes_migrate_refuse(stores, monkeypatch):
    # Stores first: their templates must be migrated with the files as shipped.
    full, partial = stores(), stores(upto=3)
    shipped = migrations()
    # Same version and name, different SQL: a file edited after it was applied.
    edited = replace(shipped[2], sql=shipped[2].sql + "\n-- edited after release\n")
    assert edited.checksum != shipped[2].checksum
    monkeypatch.setattr(migrations_module, "migrations", lambda: (*shipped[:2], edited, *shipped[3:]))

    before = snapshot(full)
    with _owner(full) as session:
        with pytest.raises(MigrationRefused, match="applied migration 0003_work_store.sql differs"):
            migrate(session)
    assert snapshot(full) == before

    # Refused before anything pending runs: a store at version 3 does not get 0004.
    before = snapshot(partial)
    with _owner(partial) as session:
        with pytest.raises(MigrationRefused, match="0003_work_store.sql differs"):
            migrate(session)
        assert schema_version(session) == 3
    assert snapshot(partial) == before

    # An applied version no longer shipped at all is refused the same way.
    monkeypatch.setattr(migrations_module, "migrations", lambda: shipped[:3])
    with _owner(full) as session:
        with pytest.raises(MigrationRefused, match="0004_schedule_protocol.sql differs"):
            migrate(session)


def test_a_refused_apply_rolls_back_partial_sql(stores):
    """A migration whose SQL fails half-way leaves neither its objects nor a ledger row."""
    store = stores()
    before = snapshot(store)
    broken = Migration(5, "0005_broken.sql",
                       "create table appsurface_durable.half_done (x int);\nselect 1/0;\n")
    with _owner(store) as session:
        with pytest.raises(reference.DatabaseError):
            apply(session, broken)
    assert snapshot(store) == before


# -- runtime versions ------------------------------------------------------------------------------

def test_runtime_v4_needs_migration_0004_while_work_keeps_working_at_v3(stores):
    store = stores(upto=3)
    store.create_scope("tenant-a")
    with psycopg.connect(store.owner_dsn, autocommit=True) as conn:
        assert conn.execute("select version from appsurface_durable.runtime_versions").fetchall() == [(3,)]
        assert conn.execute("select to_regclass('appsurface_durable.schedule_dispatch')").fetchone()[0] is None

    with pytest.raises(SchemaNotReady, match=r"0004_schedule_protocol\.sql"):
        reference.ScheduleClient(store.runtime_dsn, "tenant-a")
    with pytest.raises(SchemaNotReady, match=r"0004_schedule_protocol\.sql"):
        reference.ScheduleProcessor(store.runtime_dsn, store.dispatcher_dsn)

    # Work alone is what runtime version 3 admits, and it keeps working.
    work = WorkStore(store.runtime_dsn, "tenant-a")
    try:
        request = WorkRequest(uuid.uuid4(), "key-1", "cmd", "activity", {"n": 1})
        accepted = work.enqueue(request)
        assert accepted.created and accepted.work_id == request.work_id
        again = work.enqueue(request)
        assert not again.created and again.work_id == request.work_id
        assert work.transition(request.work_id, "running")["state"] == "running"
        done = work.transition(request.work_id, "succeeded")
        assert done["state"] == "succeeded" and done["attempt"] == 1 and done["terminal_at_utc"] is not None
        assert [row["work_id"] for row in work.list()] == [request.work_id]
    finally:
        work.close()
    with psycopg.connect(store.owner_dsn, autocommit=True, row_factory=dict_row) as conn:
        row = conn.execute("select scope_id, state from appsurface_durable.work_items").fetchone()
    assert row == {"scope_id": "tenant-a", "state": "succeeded"}


def test_runtime_version_3_refuses_schedule_operations_on_a_full_store(store):
    with pytest.raises(SchemaNotReady, match="Schedule operations need runtime version 4"):
        reference.ScheduleClient(store.runtime_dsn, "tenant-a", runtime_version=3)
    with pytest.raises(SchemaNotReady, match="Schedule operations need runtime version 4"):
        reference.ScheduleProcessor(store.runtime_dsn, store.dispatcher_dsn, runtime_version=3)
    # The same store admits runtime version 4.
    client = reference.ScheduleClient(store.runtime_dsn, "tenant-a")
    client.close()


def test_migrations_0001_to_0004_are_the_whole_schedule_protocol(stores):
    """The normative schema is 0001-0004: a store built from them alone runs the scope functions in PL/pgSQL
    (planned once per session) and the Work-terminal requeue that waits for a decision in flight, and a
    v4 runtime claims, decides and bridges on it."""
    from datetime import timedelta

    assert [m.name for m in migrations()] == ALL_NAMES
    store = stores(upto=4)
    store.ensure_partitions()
    store.create_scope("tenant-a")
    with psycopg.connect(store.owner_dsn, autocommit=True) as conn:
        languages = conn.execute(
            "select p.proname, l.lanname from pg_proc p join pg_language l on l.oid = p.prolang "
            "where p.proname in ('scope_for_routing_id', 'locked_scope_fences', 'current_scope_routing_id') "
            "order by 1").fetchall()
        requeue = conn.execute("select prosrc from pg_proc where proname = 'requeue_after_work_terminal'").fetchone()[0]
    assert languages == [("current_scope_routing_id", "plpgsql"), ("locked_scope_fences", "plpgsql"),
                         ("scope_for_routing_id", "plpgsql")]
    # The dispatch row is locked before the pending coalesced occurrence is looked for.
    assert requeue.index("for update of d") < requeue.index("p.occurrence_kind = 'coalesced'"), requeue
    client = reference.ScheduleClient(store.runtime_dsn, "tenant-a")
    processor = reference.ScheduleProcessor(store.runtime_dsn, store.dispatcher_dsn)
    try:
        created = client.create(reference.ScheduleSpec(kind="after", after=timedelta(microseconds=1),
                                                       target=reference.Target("report")))
        counts = processor.process_due()
        assert (counts.claimed, counts.occurrences, counts.materialized) == (1, 1, 1)
        assert client.get(created.schedule_id).lifecycle_state == "active"
    finally:
        client.close()
        processor.close()
