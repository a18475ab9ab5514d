"""The bridge's role: a pass whose runtime login is only a member of the runtime role, or whose runtime role lacks a
privilege every scoped transaction needs, commits nothing scoped and answers a failure that is not retriable."""

from __future__ import annotations

import json
import threading

import psycopg
from psycopg import sql

from barriers.schema import RUNTIME

from .checks import CheckResult, rule_of

# A login that holds the runtime role's privileges (INHERIT) without being it: current_user is never the runtime
# role in its sessions, so only a bridge that proves current_user refuses it. Cluster-wide, made once per world.
MEMBER = "crashproof_runtime_member"
LOGINS = ("member",)
# A privilege every scoped transaction needs first, whatever its statements: PROTOCOL.md has every one set its scope
# with set_local_scope, so without EXECUTE on it the first statement fails with SQLSTATE 42501, before any write.
REVOCABLE = {"set-local-scope": "execute on function appsurface_durable.set_local_scope(text)"}
# Scoped tables: nothing of a denied pass may change them. The queue's two tables may change as a claim does.
SCOPED = ("schedule_commands", "schedule_definitions", "schedule_generations", "schedule_occurrences",
          "schedule_history", "work_items")
ROWS_SQL = "select json_build_object(" + ", ".join(
    f"'{t}', (select coalesce(json_agg(r order by r::text), '[]') from appsurface_durable.{t} r)"
    for t in (*SCOPED, "schedule_dispatch", "schedule_dispatch_timing")) + ") as rows"

PROVEN = rule_of(
    "bridge-role-proven",
    "A bridge must prove the connection's current_user is the configured runtime role before it sets local scope "
    "state. (A pass whose runtime login, the user of CRASHPROOF_RUNTIME_DSN, is only a member of "
    "appsurface_durable_runtime, holding its privileges without being it, commits no scoped transaction: no "
    "occurrence, cursor move, Work, link, history row, definition change or lease release; only its claim may "
    "commit.)")
NOT_RETRIABLE = rule_of(
    "bridge-failure-not-retriable",
    "Access-denied and non-runtime bridge-role failures are not retriable. (A pass with something due, under a "
    "runtime login that is only a member of the runtime role or with EXECUTE on set_local_scope revoked from it, "
    "answers `fail`, or `unknown` once its claim committed, with `error.retriable` false; never `ok`. It does not "
    "retry the refused statement either: the server logs at most one such refusal per schedule the pass claimed.)")

_lock = threading.Lock()


def ensure_member(world) -> None:
    """The member-only login role on the world's cluster, made when first needed (its databases grant CONNECT to
    the runtime role, which the member inherits). Looked up at every start: a world's cluster may be new."""
    with _lock, psycopg.connect(world.admin_dsn(), autocommit=True) as conn:
        made, member = conn.execute(
            "select exists (select 1 from pg_roles where rolname = %(m)s), exists (select 1 from pg_auth_members a "
            "join pg_roles r on r.oid = a.roleid join pg_roles m on m.oid = a.member "
            "where r.rolname = %(r)s and m.rolname = %(m)s)", {"m": MEMBER, "r": RUNTIME}).fetchone()
        if not made:
            conn.execute(sql.SQL("create role {} login inherit nobypassrls").format(sql.Identifier(MEMBER)))
        if not member:
            conn.execute(sql.SQL("grant {} to {}").format(sql.Identifier(RUNTIME), sql.Identifier(MEMBER)))


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


# What the server logs for each statement a revoked privilege refuses: counted around a pass, it tells a retry of the
# 42501, which no answer shows (the world's own cluster logs to a file; an outside server's log is not read).
DENIED_MESSAGE = {"set-local-scope": "permission denied for function set_local_scope"}


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


def claims(before: dict[str, list[dict]], after: dict[str, list[dict]]) -> int:
    """How many claims committed between the two readings (each moves a lease generation by one)."""
    was = {r["dispatch_id"]: r["lease_generation"] for r in before["schedule_dispatch"]}
    return sum(r["lease_generation"] - was.get(r["dispatch_id"], 0) for r in after["schedule_dispatch"])


def rows(conn) -> dict[str, list[dict]]:
    return conn.execute(ROWS_SQL).fetchone()["rows"]


def scoped_changes(before: dict[str, list[dict]], after: dict[str, list[dict]]) -> dict[str, dict]:
    """What a denied pass changed beyond a claim: every scoped table's added and removed rows, and a dispatch row
    changed other than by a claim (now leased, its lease generation one more) with its timing row."""
    def texts(table, side):
        return {json.dumps(r, sort_keys=True) for r in side[table]}

    out = {}
    for table in SCOPED:
        added, removed = texts(table, after) - texts(table, before), texts(table, before) - texts(table, after)
        if added or removed:
            out[table] = {"added": [json.loads(r) for r in sorted(added)],
                          "removed": [json.loads(r) for r in sorted(removed)]}
    old = {r["dispatch_id"]: r for r in before["schedule_dispatch"]}
    claimed = {r["dispatch_id"] for r in after["schedule_dispatch"]
               if r["dispatch_id"] in old and r["lease_state"] == "leased"
               and r["lease_generation"] == old[r["dispatch_id"]]["lease_generation"] + 1}
    for table in ("schedule_dispatch", "schedule_dispatch_timing"):
        was = {r["dispatch_id"]: r for r in before[table]}
        moved = [{"before": was.get(r["dispatch_id"]), "after": r} for r in after[table]
                 if was.get(r["dispatch_id"]) != r and r["dispatch_id"] not in claimed]
        if moved:
            out[table] = {"changed_other_than_by_a_claim": moved}
    return out


def judge(denied: list[dict]) -> list[CheckResult]:
    """The denied passes of a case: nothing scoped committed under a member-only login; every answer a failure
    that is not retriable. A denial that was not in effect, or a pass with nothing due, tested nothing: it fails."""
    if not denied:
        return []
    proven, answers = [], []
    denied = [d for d in denied if not d.get("faulted")]  # a fault's answer is not the refusal's
    if not denied:
        return []
    for d in denied:
        where = {"step": d["step"], "instance": d["instance"], "denial": d["denial"]}
        vacuous = d["not_in_effect"] or (None if d["due"] else "nothing was due: no bridge had anything to refuse")
        if vacuous:
            answers.append({**where, "tested_nothing": vacuous})
            continue
        error = d.get("error") or {}
        if d["outcome"] not in ("fail", "unknown") or error.get("retriable") is not False:
            answers.append({**where, "outcome": d["outcome"], "error": d.get("error"), "value": d.get("value"),
                            "expected": "fail, or unknown once the claim committed, with error.retriable false"})
        if d.get("denied_statements") is not None and d["denied_statements"] > max(d["claims"], 1):
            answers.append({**where, "denied_statements": d["denied_statements"], "claims": d["claims"],
                            "expected": "no retry of the access-denied failure: at most one refused statement per "
                                        "schedule claimed (the server's log)"})
        if d["denial"] == "member" and d["changed"]:
            proven.append({**where, "committed_beyond_the_claim": d["changed"], "outcome": d["outcome"]})
    checks = [CheckResult("bridge-failure-not-retriable", NOT_RETRIABLE, not answers, answers, len(denied))]
    members = [d for d in denied if d["denial"] == "member"]
    if members:
        checks.append(CheckResult("bridge-role-proven", PROVEN, not proven, proven, len(members)))
    return checks
