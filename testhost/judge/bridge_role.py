"""The bridge's role: a pass whose runtime login is only a member of the runtime role, or whose runtime role lacks a
privilege every scoped transaction needs, commits nothing scoped and answers a failure that is not retriable."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field

import psycopg
from psycopg import sql

from barriers.schema import REVOCABLE, ROWS_SQL, RUNTIME

from .rules import CheckResult, Rules

RULES = Rules()
rule_of = RULES.declare

# A login that holds the runtime role's privileges (INHERIT) without being it: current_user is never the runtime
# role in its sessions, so only a bridge that proves current_user refuses it. Cluster-wide, made once per world.
MEMBER = "crashproof_runtime_member"
# A login whose sessions begin as the runtime role: the runtime role is its default role in the case's store (ALTER
# ROLE ... IN DATABASE ... SET role), so current_user is the runtime role in every session it opens while that holds,
# and the login itself, a member holding the runtime role's privileges as MEMBER does, once the host resets it. The
# host takes it away between a pass's committed decision and its bridge (`demote_after_decision`). Cluster-wide,
# made once per world; the default is the store's, set when the copy starts and reset when the case ends.
DEFAULT_ROLE_LOGIN = "crashproof_runtime_by_default"
LOGIN_ROLES = {"member": MEMBER, "default-role": DEFAULT_ROLE_LOGIN}
DEMOTED_AT = "schedule-decision-after-commit"
# Scoped tables: nothing of a denied pass may change them. The queue's two tables may change as a claim does.
SCOPED = ("schedule_commands", "schedule_definitions", "schedule_generations", "schedule_occurrences",
          "schedule_history", "work_items")

PROVEN = rule_of(
    "bridge-role-proven",
    "A bridge must prove the connection's current_user is the configured runtime role before it sets local scope "
    "state. (A pass whose runtime login, the user of CRASHPROOF_RUNTIME_DSN, is only a member of "
    f"{RUNTIME}, holding its privileges without being it, commits no scoped transaction: no "
    "occurrence, cursor move, Work, link, history row, definition change or lease release; only its claim may "
    "commit.)")
NOT_RETRIABLE = rule_of(
    "bridge-failure-not-retriable",
    "Access-denied and non-runtime bridge-role failures are not retriable. (A pass with something due, under a "
    "runtime login that is only a member of the runtime role or with EXECUTE on set_local_scope revoked from it, "
    "answers `fail`, or `unknown` once its claim committed, with `error.retriable` false; never `ok`. It does not "
    "retry the refused statement either: the server logs at most one such refusal per schedule the pass claimed.)")

_lock = threading.Lock()


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
    """Every row of the scoped tables and the queue's, by table (barriers/schema.py ROWS_SQL)."""
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


# -- the runtime role taken away between a committed decision and its bridge ------------------------------------

PROVEN_AFTER_DECISION = rule_of(
    "bridge-role-proven-after-decision",
    "A bridge must prove the connection's current_user is the configured runtime role before it sets local scope "
    "state. (A pass whose decision committed under the runtime role loses it before its bridge: its copy's runtime "
    "login has the runtime role as its default role (`runtime_login = \"default-role\"`), and at the pass's "
    "`schedule-decision-after-commit` the host resets that default, so a session of the login is the login itself, "
    "a member holding every privilege of the runtime role, and ends the login's sessions. From that barrier until "
    "the pass answered nothing scoped commits: no Work, link, materialized occurrence, history row, definition "
    "change or lease release. The pass must reach that barrier, and the change must hold on the server.)")


@dataclass
class Demotion:
    """One `process` step's `demote_after_decision`: the rows read before the pass, at its first committed decision
    (where the host takes the runtime role from the login) and once it answered (when the host gives it back)."""

    step: int
    label: str
    dbname: str
    armed: bool = False
    not_in_effect: list[str] = field(default_factory=list)  # why the case tested nothing
    before: dict | None = None
    at_decision: dict | None = None
    after: dict | None = None
    context: dict | None = None
    outcome: str | None = None
    error: dict | None = None
    faulted: bool = False

    def start(self, run) -> None:
        """Before the pass: the login's sessions begin as the runtime role, else its decision cannot commit."""
        user, _ = session_role(run.store)
        if user != RUNTIME:
            self.not_in_effect.append(f"before the pass a session of {DEFAULT_ROLE_LOGIN} was {user}, not {RUNTIME}")
        with run.owner() as conn:
            self.before = rows(conn)

    def at_barrier(self, run, impl, name: str, context: dict) -> None:
        """At the pass's first committed decision: the rows, then the runtime role taken from the login."""
        if not self.armed or impl.label != self.label or name != DEMOTED_AT or self.at_decision is not None:
            return
        with run.owner() as conn:
            self.at_decision = rows(conn)
        self.context = dict(context or {})
        set_default_role(run.world, self.dbname, runtime=False)
        user, inherits = session_role(run.store)
        if user == RUNTIME:
            self.not_in_effect.append(f"after the reset a session of {DEFAULT_ROLE_LOGIN} was still {RUNTIME}")
        elif not inherits:
            self.not_in_effect.append(f"{DEFAULT_ROLE_LOGIN} does not hold the privileges of {RUNTIME}: a bridge "
                                      "that does not prove current_user would be refused by them anyway")
        run.note("runtime-role-taken", instance=impl.label, barrier=name, login=DEFAULT_ROLE_LOGIN, now=user,
                 schedule_id=self.context.get("schedule_id"))

    def end(self, run, response, *, faulted: bool) -> None:
        """Once the pass answered (or broke): the rows, then the runtime role given back to the login."""
        try:
            with run.owner() as conn:
                self.after = rows(conn)
        finally:
            if self.at_decision is not None:
                set_default_role(run.world, self.dbname, runtime=True)
                run.note("runtime-role-given-back", instance=self.label, login=DEFAULT_ROLE_LOGIN)
        self.outcome = response.outcome if response is not None else "none"
        self.error = response.error if response is not None else None
        self.faulted = faulted

    def judged(self) -> tuple[dict | None, bool]:
        """What fails the check for this pass (None: nothing), and whether it was judged at all."""
        where = {"step": self.step, "instance": self.label}
        if self.faulted:
            return None, False  # a fault's answer and commits are the fault's checks'
        if self.at_decision is None:
            found = {**where, "tested_nothing": f"the pass never reached {DEMOTED_AT}: no decision committed under "
                                                "the runtime role for a bridge to follow", "outcome": self.outcome,
                     "error": self.error}
            if self.outcome in ("fail", "unknown"):
                found["likely_cause"] = (f"a session of {DEFAULT_ROLE_LOGIN} has current_user {RUNTIME} (its "
                                         "default role; session_user is the login) and must be let through: is "
                                         "session_user compared instead of current_user?")
            return found, True
        if self.not_in_effect:
            return {**where, "tested_nothing": "; ".join(self.not_in_effect)}, True
        schedule_id = str((self.context or {}).get("schedule_id"))
        if not any(str(o["schedule_id"]) == schedule_id and o["state"] == "pending"
                   for o in self.at_decision["schedule_occurrences"]):
            return {**where, "schedule_id": schedule_id, "tested_nothing": "the decision left no pending occurrence "
                                                                           "of its schedule: no bridge had work"}, True
        changed = scoped_changes(self.at_decision, self.after) if self.after is not None else {}
        if changed:
            return {**where, "schedule_id": schedule_id,
                    "committed_after_the_role_was_taken": changed, "outcome": self.outcome,
                    "likely_cause": "a scoped transaction after the decision (its bridge) did not prove current_user "
                                    "on its own connection"}, True
        return None, True


def judge_demotions(demotions: list[Demotion]) -> list[CheckResult]:
    """The passes whose runtime role was taken after their decision: nothing scoped committed from then on."""
    evidence, judged = [], 0
    for demotion in demotions:
        found, counted = demotion.judged()
        judged += counted
        if found is not None:
            evidence.append(found)
    if not judged:
        return []
    return [CheckResult("bridge-role-proven-after-decision", PROVEN_AFTER_DECISION, not evidence, evidence, judged)]
