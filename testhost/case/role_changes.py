"""What the host does to a case's roles: the member and default-role logins made on the cluster, a privilege revoked
from the runtime role for one pass, the runtime role taken from a login after a pass's committed decision, and the
rows and server log read around them. What is judged of them is testhost/judge/bridge_role.py's."""

from __future__ import annotations

import threading

import psycopg
from psycopg import sql

from barriers.schema import REVOCABLE, ROWS_SQL, RUNTIME

from testhost.judge.bridge_role import DEFAULT_ROLE_LOGIN, DEMOTED_AT, MEMBER, Demotion

_lock = threading.Lock()


# What the server logs for each statement a revoked privilege refuses: counted around a pass, it tells a retry of the
# 42501, which no answer shows (the world's own cluster logs to a file; an outside server's log is not read).
DENIED_MESSAGE = {"set-local-scope": "permission denied for function set_local_scope"}


def ensure_member(world, login: str = MEMBER) -> None:
    """A login role that is a member of the runtime role (MEMBER, or DEFAULT_ROLE_LOGIN) on the world's cluster, made
    when first needed (its databases grant CONNECT to the runtime role, which the member inherits). Looked up at
    every start: a world's cluster may be new."""
    with _lock, psycopg.connect(world.admin_dsn(), autocommit=True) as conn:
        made, member = conn.execute(
            "select exists (select 1 from pg_roles where rolname = %(m)s), exists (select 1 from pg_auth_members a "
            "join pg_roles r on r.oid = a.roleid join pg_roles m on m.oid = a.member "
            "where r.rolname = %(r)s and m.rolname = %(m)s)", {"m": login, "r": RUNTIME}).fetchone()
        if not made:
            conn.execute(sql.SQL("create role {} login inherit nobypassrls").format(sql.Identifier(login)))
        if not member:
            conn.execute(sql.SQL("grant {} to {}").format(sql.Identifier(RUNTIME), sql.Identifier(login)))


def set_default_role(world, dbname: str, *, runtime: bool) -> None:
    """DEFAULT_ROLE_LOGIN's sessions in `dbname` begin as the runtime role (`runtime`), or as itself. Then every
    session of it in that database is ended, so none opened under the other default is kept (an implementation's
    next statement there fails as after a disconnect and it opens another)."""
    with psycopg.connect(world.admin_dsn(), autocommit=True) as conn:
        login, database = sql.Identifier(DEFAULT_ROLE_LOGIN), sql.Identifier(dbname)
        if runtime:
            conn.execute(sql.SQL("alter role {} in database {} set role = {}").format(
                login, database, sql.Literal(RUNTIME)))
        else:
            conn.execute(sql.SQL("alter role {} in database {} reset role").format(login, database))
        conn.execute("select pg_terminate_backend(pid, 5000) from pg_stat_activity where usename = %s and "
                     "datname = %s and pid <> pg_backend_pid()", (DEFAULT_ROLE_LOGIN, dbname))


def session_role(store) -> tuple[str, bool]:
    """current_user in a new session of DEFAULT_ROLE_LOGIN in the store, and whether it holds the runtime role's
    privileges there."""
    with psycopg.connect(store.dsn(DEFAULT_ROLE_LOGIN), autocommit=True) as conn:
        return conn.execute("select current_user::text, pg_has_role(current_user, %s, 'USAGE')", (RUNTIME,)).fetchone()


def set_privilege(conn, name: str, *, granted: bool) -> None:
    """Revoke a privilege of REVOCABLE from the runtime role, or grant it back (as the migration owner)."""
    statement = "grant {} to {}" if granted else "revoke {} from {}"
    conn.execute(sql.SQL(statement).format(sql.SQL(REVOCABLE[name]), sql.Identifier(RUNTIME)))


def denial_in_effect(conn, denial: str) -> str | None:
    """None when the denial holds on the server now, else why not (the case then tests nothing)."""
    if denial == "member":
        row = conn.execute("select pg_has_role(%s, %s, 'USAGE') as inherits", (MEMBER, RUNTIME)).fetchone()
        return None if row["inherits"] else f"{MEMBER} does not hold the privileges of {RUNTIME}"
    row = conn.execute("select has_function_privilege(%s, 'appsurface_durable.set_local_scope(text)', 'EXECUTE') "
                       "as granted", (RUNTIME,)).fetchone()
    return f"{RUNTIME} still holds {REVOCABLE[denial]}" if row["granted"] else None


def log_offset(world) -> int | None:
    """Where the world's server log ends now (None: the server is not the world's own)."""
    cluster = getattr(world, "cluster", None)
    path = getattr(cluster, "log_path", None)
    try:
        return path.stat().st_size if path is not None else None
    except OSError:
        return None


def denials_logged(world, offset: int | None, denial: str) -> int | None:
    """How many statements the server refused for the revoked privilege since `offset`."""
    if offset is None:
        return None
    with open(world.cluster.log_path, "rb") as log:
        log.seek(offset)
        return log.read().decode(errors="replace").count(DENIED_MESSAGE[denial])


def rows(conn) -> dict[str, list[dict]]:
    """Every row of the scoped tables and the queue's, by table (barriers/schema.py ROWS_SQL)."""
    return conn.execute(ROWS_SQL).fetchone()["rows"]


def start_demotion(demotion: Demotion, case) -> None:
    """Before the pass: the login's sessions begin as the runtime role, else its decision cannot commit."""
    user, _ = session_role(case.store)
    if user != RUNTIME:
        demotion.not_in_effect.append(f"before the pass a session of {DEFAULT_ROLE_LOGIN} was {user}, not {RUNTIME}")
    with case.owner() as conn:
        demotion.before = rows(conn)

def demote_at_barrier(demotion: Demotion, case, impl, name: str, context: dict) -> None:
    """At the pass's first committed decision: the rows, then the runtime role taken from the login."""
    if not demotion.armed or impl.label != demotion.label or name != DEMOTED_AT or demotion.at_decision is not None:
        return
    with case.owner() as conn:
        demotion.at_decision = rows(conn)
    demotion.context = dict(context or {})
    set_default_role(case.world, demotion.dbname, runtime=False)
    user, inherits = session_role(case.store)
    if user == RUNTIME:
        demotion.not_in_effect.append(f"after the reset a session of {DEFAULT_ROLE_LOGIN} was still {RUNTIME}")
    elif not inherits:
        demotion.not_in_effect.append(f"{DEFAULT_ROLE_LOGIN} does not hold the privileges of {RUNTIME}: a bridge "
                                  "that does not prove current_user would be refused by them anyway")
    case.note("runtime-role-taken", instance=impl.label, barrier=name, login=DEFAULT_ROLE_LOGIN, now=user,
             schedule_id=demotion.context.get("schedule_id"))

def end_demotion(demotion: Demotion, case, response, *, faulted: bool) -> None:
    """Once the pass answered (or broke): the rows, then the runtime role given back to the login."""
    try:
        with case.owner() as conn:
            demotion.after = rows(conn)
    finally:
        if demotion.at_decision is not None:
            set_default_role(case.world, demotion.dbname, runtime=True)
            case.note("runtime-role-given-back", instance=demotion.label, login=DEFAULT_ROLE_LOGIN)
    demotion.outcome = response.outcome if response is not None else "none"
    demotion.error = response.error if response is not None else None
    demotion.faulted = faulted
