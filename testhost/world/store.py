"""Protocol stores inside a world: the role recipe once per cluster, a migrated template database, a fresh
clone per test, and for cases a pool of clones reset to their fresh state after each case. Set-up uses the
reference's migrations (the normative schema); verdicts never do."""

from __future__ import annotations

import functools
import hashlib
import itertools
import os
import threading
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import psycopg
from psycopg import sql

from barriers.schema import DISPATCHER, OWNER, RUNTIME
from testhost.errors import TestHostError

from .sessions import KeptSession, server_incarnation
from .worlds import World

TEMPLATE = "appsurface_template"
_counter = itertools.count(1)
_lock = threading.Lock()


def schema_migrations(directory: Path):
    """The numbered migrations an implementation ships in its own directory (a mutant's changed schema)."""
    from reference.sql import Migration, MIGRATION_FILE

    found = []
    for path in sorted(directory.iterdir()):
        match = MIGRATION_FILE.match(path.name)
        if match:
            try:
                found.append(Migration(int(match.group(1)), path.name, path.read_text()))
            except (OSError, UnicodeDecodeError) as exc:
                raise ValueError(f"{path}: cannot be read as UTF-8 text: {exc}") from None
    if not found:
        raise ValueError(f"{directory} holds no migration: name them 0001_name.sql, 0002_name.sql, ...")
    if [m.version for m in found] != list(range(1, len(found) + 1)):
        raise ValueError(f"{directory} must hold migrations numbered 0001.. without gaps, found "
                         f"{', '.join(m.name for m in found)}")
    return found


class MigrationFailed(TestHostError):
    """A directory of shipped migrations that cannot be used: missing, empty, or holding a file the server
    refused (the half-made template is dropped)."""


def _prepare_template(world: World, *, upto: int | None, migrations: Path | None = None) -> str:
    """Create (once per world and migration set) a database with roles granted and migrations applied.
    Without `migrations` the schema is the reference's (normative) one."""
    from reference.db import Session
    from reference.errors import DurableError
    from reference.migrations import apply, migrate
    from reference.roles import apply_recipe

    name = TEMPLATE if upto is None else f"{TEMPLATE}_v{upto}"
    shipped = schema_migrations(migrations) if migrations is not None else None
    if shipped is not None:
        digest = hashlib.sha256("".join(m.checksum for m in shipped).encode()).hexdigest()[:12]
        name = f"{TEMPLATE}_{digest}"
    with psycopg.connect(world.admin_dsn(), autocommit=True) as admin:
        if admin.execute("select 1 from pg_database where datname = %s", (name,)).fetchone():
            return name
        admin.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    recipe = Session(world.admin_dsn(dbname=name))
    apply_recipe(recipe)
    recipe.close()
    owner = Session(world.admin_dsn(dbname=name, user=OWNER))
    try:
        if shipped is None:
            migrate(owner, upto)
        for migration in shipped or ():
            try:
                apply(owner, migration)
            except DurableError as exc:
                raise MigrationFailed(f"migration {migrations / migration.name} failed: "
                                      f"{' '.join(str(exc).split())}") from None
    except BaseException:
        owner.close()
        with psycopg.connect(world.admin_dsn(), autocommit=True) as admin:
            admin.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))
        raise
    owner.close()
    return name


def _grant(world: World, name: str) -> None:
    """The role recipe on a clone: a clone does not inherit the template's database-level grants
    (pg_database.datacl), and without them the owner lacks CREATE on the database."""
    from reference.db import Session
    from reference.roles import apply_recipe

    recipe = Session(world.admin_dsn(dbname=name))
    try:
        apply_recipe(recipe)
    finally:
        recipe.close()


def _clone(world: World, template: str, name: str) -> None:
    with psycopg.connect(world.admin_dsn(), autocommit=True) as admin:
        admin.execute(sql.SQL("create database {} template {}").format(sql.Identifier(name), sql.Identifier(template)))
    _grant(world, name)


def _history_template(world: World, template: str, at: datetime) -> str:
    """A clone of `template` that also holds the history partitions of the month of `at` and the next, made by
    the normative `ensure_schedule_history_partitions()` with the server's clock at `at` for that one call.

    Cases start at one instant; without these partitions every case would create them (DDL, new files) and
    every reset drop them again. Made once per world, before its pool hands out a store, so no case's clock
    is moved under it.
    """
    name = f"{template}_h{at:%Y%m}"
    with psycopg.connect(world.admin_dsn(), autocommit=True) as admin:
        if admin.execute("select 1 from pg_database where datname = %s", (name,)).fetchone():
            return name
    _clone(world, template, name)
    offset = world.clock.offset
    world.clock.set_time(at)
    try:
        with psycopg.connect(world.admin_dsn(dbname=name, user=OWNER), autocommit=True) as owner:
            owner.execute("select appsurface_durable.ensure_schedule_history_partitions()")
    finally:
        world.clock.set_offset(offset)
    return name


@dataclass
class Store:
    """One database holding the protocol schema, with a DSN per role, direct or through the world's proxy."""

    world: World
    dbname: str

    def dsn(self, user: str, *, proxied: bool = False) -> str:
        return (self.world.proxied_dsn if proxied else self.world.admin_dsn)(dbname=self.dbname, user=user)

    @property
    def owner_dsn(self) -> str:
        return self.dsn(OWNER)

    @property
    def runtime_dsn(self) -> str:
        return self.dsn(RUNTIME)

    @property
    def dispatcher_dsn(self) -> str:
        return self.dsn(DISPATCHER)

    def __post_init__(self) -> None:
        # The superuser's session in this database, through which the pool resets the store after a case. It is
        # in replica mode for good: setting the mode in each reset's transaction flushed the session's plan cache
        # twice per reset, so the schema digest and every delete were parsed and planned again each time.
        self.admin = KeptSession(lambda: psycopg.connect(self.world.admin_dsn(dbname=self.dbname), autocommit=True,
                                                         options="-c session_replication_role=replica"),
                                 server_incarnation(self.world))
        # The verifier's session (migration owner, direct, autocommit), kept from case to case: a reset spares it.
        self.verifier = KeptSession(self.owner, server_incarnation(self.world))
        # The barrier reader's (testhost/case/barrier_facts.py): its own, since racers' barriers read on two threads.
        self.barrier_reader = KeptSession(self.owner, server_incarnation(self.world))

    def owner(self) -> psycopg.Connection:
        """The verifier's connection: the migration owner, direct, autocommit, sees every scope."""
        from psycopg.rows import dict_row
        return psycopg.connect(self.owner_dsn, autocommit=True, row_factory=dict_row)

    def create_scope(self, scope_id: str) -> int:
        with self.owner() as conn:
            return conn.execute("select appsurface_durable.create_scope(%s) as routing_id", (scope_id,)).fetchone()["routing_id"]

    def ensure_partitions(self) -> list[str]:
        with self.owner() as conn:
            return [r["name"] for r in conn.execute(
                "select appsurface_durable.ensure_schedule_history_partitions() as name").fetchall()]

    def drop(self) -> None:
        self.admin.close()
        self.verifier.close()
        self.barrier_reader.close()
        with psycopg.connect(self.world.admin_dsn(), autocommit=True) as admin:
            admin.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(self.dbname)))


@functools.cache
def _made_from() -> str:
    """A digest of the reference package's files and this module: what a ReferenceSeed's databases come from."""
    import reference
    package = Path(reference.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted([*package.rglob("*.py"), *package.rglob("*.sql"), Path(__file__).resolve()]):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


@dataclass(frozen=True)
class ReferenceSeed:
    """What a seeded world's cluster starts with (worlds.Seed): `stores` fresh stores for the case pool, each made
    exactly as new_store makes one with the history partitions of `history_at`'s month. A world copies them with its
    data directory instead of making them, and only they are copied: the templates they came from are dropped
    before the seed is kept, since every database copied costs the copy some 300 new files, and a world's pool
    rarely needs a third store (then it makes the templates as an unseeded world does)."""

    history_at: datetime
    stores: int = 2

    @property
    def key(self) -> str:
        """A digest of everything the stores are made from: the reference package's files (its migrations and
        role recipe among them), this module, the month and the count."""
        return hashlib.sha256(f"{_made_from()}|{self.history_at:%Y-%m}|{self.stores}".encode()).hexdigest()[:12]

    def build(self, world: World) -> list[str]:
        template = _prepare_template(world, upto=None)
        history = _history_template(world, template, self.history_at)
        names = [f"store_seed_{n}" for n in range(1, self.stores + 1)]
        for name in names:
            _clone(world, history, name)
        with psycopg.connect(world.admin_dsn(), autocommit=True) as admin:
            for name in (history, template):
                admin.execute(sql.SQL("drop database {}").format(sql.Identifier(name)))
        return names


def new_store(world: World, *, upto: int | None = None, migrations: Path | None = None,
              history_at: datetime | None = None) -> Store:
    """A fresh database cloned from the migrated template (migrations up to `upto`, default all; from the
    directory `migrations` when the implementation ships its own schema), with the history partitions of
    `history_at`'s month and the next when it is given. A seeded world hands out the seed's stores first."""
    seed = world.seed
    if isinstance(seed, ReferenceSeed) and (upto, migrations, history_at) == (None, None, seed.history_at):
        with _lock:
            seeded = world.take_seed_database()
        if seeded is not None:
            return Store(world, seeded)
    with _lock:
        template = _prepare_template(world, upto=upto, migrations=migrations)
        if history_at is not None:
            template = _history_template(world, template, history_at)
        name = f"store_{os.getpid()}_{next(_counter)}"
        with psycopg.connect(world.admin_dsn(), autocommit=True) as admin:
            admin.execute(sql.SQL("create database {} template {}").format(sql.Identifier(name), sql.Identifier(template)))
    store = Store(world, name)
    try:
        _grant(world, name)
    except BaseException:
        try:
            store.drop()
        except psycopg.Error:
            pass  # the server is away; the half-made database is left to the world's teardown
        raise
    return store


def copy_store(store: Store, name: str) -> Store:
    """A new database `name` holding `store` as it is now; nobody may be connected to `store` meanwhile, so
    its own kept sessions are closed first (they reconnect on their next use)."""
    store.admin.close()
    store.verifier.close()
    _clone(store.world, store.dbname, name)
    return Store(store.world, name)


def empty_store(world: World) -> Store:
    """A database with the roles granted and no migration applied."""
    with _lock:
        name = f"empty_{os.getpid()}_{next(_counter)}"
        with psycopg.connect(world.admin_dsn(), autocommit=True) as admin:
            admin.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    _grant(world, name)
    return Store(world, name)


# What a store's schema is, as one digest: every relation, column, routine, policy, trigger, constraint and
# privilege outside the system schemas. Two stores with equal digests were built by the same migrations.
_SCHEMA_DIGEST = """
with user_ns as (
  select oid, nspname from pg_namespace
  where nspname not in ('pg_catalog', 'information_schema') and nspname !~ '^pg_(toast|temp_)')
select md5(coalesce(string_agg(item, E'\\n' order by item), '')) as digest from (
  select format('ns %s %s', nspname, (select nspacl from pg_namespace x where x.oid = n.oid)) from user_ns n
  union all
  select format('rel %s.%s %s %s %s %s %s', n.nspname, c.relname, c.relkind, c.relrowsecurity, c.relforcerowsecurity,
                c.relacl, pg_get_userbyid(c.relowner))
  from pg_class c join user_ns n on n.oid = c.relnamespace
  union all
  select format('col %s.%s %s %s %s %s', a.attrelid::regclass, a.attname, a.atttypid::regtype, a.attnotnull,
                pg_get_expr(d.adbin, d.adrelid), a.attacl)
  from pg_attribute a join pg_class c on c.oid = a.attrelid join user_ns n on n.oid = c.relnamespace
  left join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
  where a.attnum > 0 and not a.attisdropped
  union all
  select format('fn %s.%s(%s) %s %s %s %s', n.nspname, p.proname, pg_get_function_identity_arguments(p.oid),
                md5(p.prosrc), p.prosecdef, p.proconfig, p.proacl)
  from pg_proc p join user_ns n on n.oid = p.pronamespace
  union all
  select format('policy %s %s %s %s %s', polrelid::regclass, polname, polcmd, pg_get_expr(polqual, polrelid),
                pg_get_expr(polwithcheck, polrelid))
  from pg_policy
  union all
  select format('trigger %s %s %s', tgrelid::regclass, tgname, tgenabled) from pg_trigger where not tgisinternal
  union all
  select format('constraint %s %s %s', conrelid::regclass, conname, pg_get_constraintdef(oid))
  from pg_constraint where connamespace in (select oid from user_ns)
  union all
  select format('database %s', datacl) from pg_database where datname = current_database()
  union all
  select format('large objects %s', count(*)) from pg_largeobject_metadata
) items(item)
"""

_USER_RELATIONS = """
select format('%I.%I', n.nspname, c.relname) as name, c.relkind, c.relispartition
from pg_class c join pg_namespace n on n.oid = c.relnamespace
where c.relkind in ('r', 'p', 'S') and n.nspname not in ('pg_catalog', 'information_schema')
  and n.nspname !~ '^pg_(toast|temp_)'
order by 1
"""


@dataclass
class Snapshot:
    """What a freshly cloned store holds, so a used one can be put back exactly: its schema digest, its
    partitions, the rows of every table that has any, and where each sequence stands."""

    digest: str
    tables: list[str]
    partitions: set[str]
    rows: dict[str, bytes]
    sequences: dict[str, tuple[int, bool]]

    @classmethod
    def of(cls, store: Store) -> "Snapshot":
        with store.admin() as conn, conn.transaction():
            # One snapshot of every table: a backup taken while a processor could still write is consistent.
            conn.execute("set transaction isolation level repeatable read")
            relations = conn.execute(_USER_RELATIONS).fetchall()
            tables = [name for name, kind, _ in relations if kind in ("r", "p")]
            rows = {}
            for name in tables:
                data = bytearray()
                with conn.cursor().copy(f"copy (select * from only {name}) to stdout") as copy:
                    for chunk in copy:
                        data += chunk
                if data:
                    rows[name] = bytes(data)
            sequences = {name: tuple(conn.execute(f"select last_value, is_called from {name}").fetchone())
                         for name, kind, _ in relations if kind == "S"}
            return cls(digest=conn.execute(_SCHEMA_DIGEST).fetchone()[0], tables=tables,
                       partitions={name for name, _, partition in relations if partition},
                       rows=rows, sequences=sequences)


class StoreChanged(Exception):
    """A used store no longer has the schema it was cloned with; it is dropped instead of reset."""


def reset_store(store: Store, snapshot: Snapshot, *, settle_s: float = 10.0) -> None:
    """Put a used store back to `snapshot` in one transaction: end every session still attached but the
    verifier's and the barrier reader's (a killed or paused implementation's backends), roll back prepared transactions, drop partitions made since, and
    replace every table's rows and every sequence's position with the snapshot's. Raises StoreChanged when
    anything else in the schema differs."""
    import time

    with store.admin() as conn:
        deadline = time.monotonic() + settle_s
        spared = store.verifier.idle_pid() or 0
        reader = store.barrier_reader.idle_pid() or 0
        while conn.execute("select count(pg_terminate_backend(pid)) from pg_stat_activity "
                           "where datname = current_database() and pid not in (pg_backend_pid(), %s, %s)",
                           (spared, reader)).fetchone()[0]:
            if time.monotonic() > deadline:
                raise StoreChanged("sessions of the last case did not end")
            time.sleep(0.01)
        for (gid,) in conn.execute("select gid from pg_prepared_xacts where database = current_database()").fetchall():
            conn.execute(sql.SQL("rollback prepared {}").format(sql.Literal(gid)))
        with conn.transaction():
            # Replica mode: no trigger fires (foreign keys included), so append-only guards allow the delete,
            # the order of the tables does not matter, and seed rows go in as they were copied out.
            conn.execute("set local session_replication_role = replica")
            conn.execute("set local lock_timeout = '10s'")  # a lock nobody releases: replace, never hang
            for name, kind, partition in conn.execute(_USER_RELATIONS).fetchall():
                if partition and name not in snapshot.partitions:
                    conn.execute(f"drop table {name}")
            digest = conn.execute(_SCHEMA_DIGEST).fetchone()[0]
            if digest != snapshot.digest:
                raise StoreChanged(f"schema digest {digest} differs from the clone's {snapshot.digest}")
            # DELETE, not TRUNCATE: a truncate gives every table and index a new file, and creating files
            # (ext4 searching for an inode not recently deleted) cost more server CPU than the whole case.
            for name in snapshot.tables:
                conn.execute(f"delete from {name}")
            for name, data in snapshot.rows.items():
                with conn.cursor().copy(f"copy {name} from stdin") as copy:
                    copy.write(data)
            for name, (value, called) in snapshot.sequences.items():
                conn.execute("select setval(%s::regclass, %s, %s)", (name, value, called))


class StorePool:
    """Stores made ahead on a background thread, so a case does not wait for CREATE DATABASE (about 0.3 s of
    server CPU with fsync on). A store given back is reset to the state of a fresh clone (a millisecond or
    two) and handed out again; one whose schema changed is dropped and replaced by a new clone."""

    def __init__(self, world: World, spares: int = 1, migrations: Path | None = None,
                 history_at: datetime | None = None):
        import queue
        self.world = world
        self.migrations = migrations
        self.history_at = history_at
        self.snapshot: Snapshot | None = None
        self.reused = self.replaced = 0
        self._ready: "queue.Queue[Store | BaseException]" = queue.Queue(maxsize=spares)
        self._returned: "queue.Queue[Store]" = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._fill, daemon=True, name="store-pool")
        self._thread.start()

    def _make(self, attempts: int = 40) -> "Store | BaseException":
        """A new store; while a case crashes and restarts the server under us, try again (bounded)."""
        for attempt in range(attempts):
            try:
                store = new_store(self.world, migrations=self.migrations, history_at=self.history_at)
            except Exception as exc:  # noqa: BLE001 - handed to the taker if every attempt fails
                failure = exc
                if self._stop.wait(0.25):
                    break
                continue
            try:
                if self.snapshot is None:
                    self.snapshot = Snapshot.of(store)
                return store
            except Exception as exc:  # noqa: BLE001
                failure = exc
                self._discard(store)
                if self._stop.wait(0.25):
                    break
        return failure

    def _recycle(self, store: Store) -> "Store | BaseException":
        """The used store reset in place; a new clone when the reset is refused or fails (a crash under us)."""
        try:
            reset_store(store, self.snapshot)
            self.reused += 1
            return store
        except (StoreChanged, psycopg.Error):
            self.replaced += 1
            self._discard(store)
            return self._make()

    def _fill(self) -> None:
        import queue
        while not self._stop.is_set():
            try:
                store = self._recycle(self._returned.get(timeout=0.05))
            except queue.Empty:
                if self._ready.full():
                    continue
                store = self._make()
            while not self._stop.is_set():
                try:
                    self._ready.put(store, timeout=0.2)
                    break
                except queue.Full:  # wait for a taker
                    continue
            else:
                self._discard(store)

    @staticmethod
    def _discard(store: "Store | BaseException") -> None:
        """Drop an unused store; when the world is already going down there is nothing left to drop."""
        if isinstance(store, Store):
            try:
                store.drop()
            except psycopg.Error:
                pass

    def take(self, timeout: float = 120.0) -> Store:
        store = self._ready.get(timeout=timeout)
        if isinstance(store, BaseException):
            raise store
        return store

    def give_back(self, store: Store) -> None:
        """A store whose case is over: reset and handed out again (or dropped when the pool is closed)."""
        if self._stop.is_set():
            self._discard(store)
        else:
            self._returned.put(store)

    def close(self) -> None:
        import queue
        self._stop.set()
        self._thread.join(5)
        for waiting in (self._ready, self._returned):
            while True:
                try:
                    self._discard(waiting.get_nowait())
                except queue.Empty:
                    break
