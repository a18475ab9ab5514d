"""Protocol stores inside a world: the role recipe once per cluster, a migrated template database, a fresh
clone per test or case. Set-up uses the reference's migrations (the normative schema); verdicts never do."""

from __future__ import annotations

import hashlib
import itertools
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

from .world import World

OWNER = "appsurface_durable_owner"
RUNTIME = "appsurface_durable_runtime"
DISPATCHER = "appsurface_durable_dispatcher"
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
            found.append(Migration(int(match.group(1)), path.name, path.read_text()))
    if [m.version for m in found] != list(range(1, len(found) + 1)) or not found:
        raise ValueError(f"{directory} must hold migrations numbered 0001.. without gaps")
    return found


def _prepare_template(world: World, *, upto: int | None, migrations: Path | None = None) -> str:
    """Create (once per world and migration set) a database with roles granted and migrations applied.
    Without `migrations` the schema is the reference's (normative) one."""
    from reference.db import Session
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
    if shipped is None:
        migrate(owner, upto)
    else:
        for migration in shipped:
            apply(owner, migration)
    owner.close()
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
        with psycopg.connect(self.world.admin_dsn(), autocommit=True) as admin:
            admin.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(self.dbname)))


def new_store(world: World, *, upto: int | None = None, migrations: Path | None = None) -> Store:
    """A fresh database cloned from the migrated template (migrations up to `upto`, default all; from the
    directory `migrations` when the implementation ships its own schema)."""
    from reference.db import Session
    from reference.roles import apply_recipe

    with _lock:
        template = _prepare_template(world, upto=upto, migrations=migrations)
        name = f"store_{os.getpid()}_{next(_counter)}"
        with psycopg.connect(world.admin_dsn(), autocommit=True) as admin:
            admin.execute(sql.SQL("create database {} template {}").format(sql.Identifier(name), sql.Identifier(template)))
    # A clone does not inherit the template's database-level grants (pg_database.datacl): without the
    # recipe the owner lacks CREATE on the database and the migration runner's bootstrap fails there.
    store = Store(world, name)
    try:
        recipe = Session(world.admin_dsn(dbname=name))
        apply_recipe(recipe)
        recipe.close()
    except BaseException:
        try:
            store.drop()
        except psycopg.Error:
            pass  # the server is away; the half-made database is left to the world's teardown
        raise
    return store


def empty_store(world: World) -> Store:
    """A database with the roles granted and no migration applied."""
    from reference.db import Session
    from reference.roles import apply_recipe

    with _lock:
        name = f"empty_{os.getpid()}_{next(_counter)}"
        with psycopg.connect(world.admin_dsn(), autocommit=True) as admin:
            admin.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    recipe = Session(world.admin_dsn(dbname=name))
    apply_recipe(recipe)
    recipe.close()
    return Store(world, name)


class StorePool:
    """Clones made ahead on a background thread, so a case does not wait for CREATE DATABASE (about 0.3 s
    with fsync on). One spare at a time; every store is used once and dropped."""

    def __init__(self, world: World, spares: int = 1, migrations: Path | None = None):
        import queue
        self.world = world
        self.migrations = migrations
        self._ready: "queue.Queue[Store | BaseException]" = queue.Queue(maxsize=spares)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._fill, daemon=True, name="store-pool")
        self._thread.start()

    def _make(self, attempts: int = 40) -> "Store | BaseException":
        """A new store; while a case crashes and restarts the server under us, try again (bounded)."""
        for attempt in range(attempts):
            try:
                return new_store(self.world, migrations=self.migrations)
            except Exception as exc:  # noqa: BLE001 - handed to the taker if every attempt fails
                failure = exc
                if self._stop.wait(0.25):
                    break
        return failure

    def _fill(self) -> None:
        while not self._stop.is_set():
            store = self._make()
            while not self._stop.is_set():
                try:
                    self._ready.put(store, timeout=0.2)
                    break
                except Exception:  # queue.Full: wait for a taker
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

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        while not self._ready.empty():
            self._discard(self._ready.get_nowait())
