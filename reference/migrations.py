"""The migration runner: forward-only, in order, each once, recorded with its checksum."""

from __future__ import annotations

from .db import Session
from .errors import MigrationRefused, SchemaNotReady
from .sql import Migration, migrations, query

OWNER_ROLE = "appsurface_durable_owner"


def applied(session: Session) -> dict[int, dict]:
    exists = session.one("select to_regclass('appsurface_durable.schema_migrations') is not null as present")
    if not exists["present"]:
        return {}
    return {row["version"]: row for row in session.all(query("bootstrap", "applied"))}


def apply(session: Session, migration: Migration) -> None:
    """Apply exactly one migration; refuses a repeat, a step backwards, a gap, or a changed file."""
    with session.transaction():
        session.execute(query("bootstrap", "lock"))
        session.execute(query("bootstrap", "bootstrap"))
        done = applied(session)
        if migration.version in done:
            raise MigrationRefused(f"migration {migration.name} is already applied; migrations run once")
        newest = max(done, default=0)
        if migration.version < newest:
            raise MigrationRefused(f"migration {migration.name} is older than applied version {newest}; "
                                   "migrations are forward-only")
        if migration.version != newest + 1:
            raise MigrationRefused(f"migration {migration.name} skips version {newest + 1}; apply in order")
        session.execute(migration.sql)
        session.execute(query("bootstrap", "record"),
                        {"version": migration.version, "name": migration.name, "checksum": migration.checksum})


def migrate(session: Session, target: int | None = None) -> list[str]:
    """Apply every pending migration up to target (default: all); verify the applied ones are unchanged."""
    available = migrations()
    target = available[-1].version if target is None else target
    done = applied(session)
    for version, row in done.items():
        known = next((m for m in available if m.version == version), None)
        if known is None or known.checksum != row["checksum"]:
            raise MigrationRefused(f"applied migration {row['name']} differs from the file shipped here")
    ran = []
    for migration in available:
        if migration.version <= target and migration.version not in done:
            apply(session, migration)
            ran.append(migration.name)
    return ran


def schema_version(session: Session) -> int:
    return max(applied(session), default=0)


def require_schedule_protocol(session: Session, runtime_version: int) -> None:
    """Schedule operations need runtime version 4 and migration 0004 applied."""
    if runtime_version < 4:
        raise SchemaNotReady(f"runtime version {runtime_version} admits Work and Flow only; "
                             "Schedule operations need runtime version 4")
    if 4 not in applied(session):
        raise SchemaNotReady("runtime version 4 requires migration 0004_schedule_protocol.sql; "
                             "apply it as the migration owner (python -m reference migrate)")
