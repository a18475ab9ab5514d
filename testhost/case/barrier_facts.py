"""What commits between a pass's barriers: a schedule's facts, with the transaction that wrote each, read at each of
its processor barriers while the implementation waits for the reply.

The final state cannot tell one transaction from two that committed one after the other with no barrier between
them, and a fault can only land on a barrier. At a barrier the implementation is blocked, so what committed since its
previous barrier for the same schedule is known exactly: between an after-commit barrier and the next transaction's
before-commit barrier nothing may commit; between a transaction's before- and after-commit barriers what committed is
that one transaction (PostgreSQL stamps each row version with its writer's xid, `xmin`).
"""

from __future__ import annotations

import json
import threading
from datetime import datetime
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.rows import tuple_row

from barriers.schema import DISPATCHER, RUNTIME
from testhost.judge.checks import GATE_A_STATES, CheckResult, rule_of

if TYPE_CHECKING:
    from testhost.impl.implementation import Implementation
    from .runner import CaseRun


def runtime_logins() -> tuple[str, ...]:
    """What a copy's runtime DSN may log in as (testhost/judge/bridge_role.py): its sessions are the runtime role's here."""
    from testhost.judge.bridge_role import LOGIN_ROLES  # bridge_role registers its checks through .checks, which imports us
    return (RUNTIME, *LOGIN_ROLES.values())


# One statement, one round trip: the schedule's rows that a pass writes, each with its xmin. The Work rows are those
# under the schedule's occurrence idempotency keys (`schedule-occurrence/v1|scope|schedule|...`).
FACTS_SQL = """
select
  (select json_build_object('xmin', d.xmin::text, 'cursor_utc', d.cursor_utc, 'revision', d.revision,
                            'lifecycle_state', d.lifecycle_state, 'active_generation', d.active_generation)
     from appsurface_durable.schedule_definitions d where d.schedule_id = %(s)s::uuid)::text as definition,
  (select json_build_object('xmin', q.xmin::text, 'lease_state', q.lease_state, 'lease_generation', q.lease_generation,
                            'dispatch_revision', q.dispatch_revision)
     from appsurface_durable.schedule_dispatch q where q.schedule_id = %(s)s::uuid)::text as dispatch,
  (select coalesce(json_agg(json_build_object(
            'key', o.generation || '|' || o.occurrence_kind || '|' || o.first_nominal_utc, 'xmin', o.xmin::text,
            'state', o.state, 'last_nominal_utc', o.last_nominal_utc, 'work_id', o.work_id)), '[]')
     from appsurface_durable.schedule_occurrences o where o.schedule_id = %(s)s::uuid)::text as occurrences,
  (select coalesce(json_agg(json_build_object(
            'key', h.event || '|' || h.recorded_at_utc || '|' || h.detail::text, 'xmin', h.xmin::text)), '[]')
     from appsurface_durable.schedule_history h
    where h.schedule_id = %(s)s::uuid and h.event in ('suspended', 'recovery-skipped'))::text as history,
  (select coalesce(json_agg(json_build_object('key', w.work_id, 'xmin', w.xmin::text)), '[]')
     from appsurface_durable.work_items w
    where position('|' || %(s)s || '|' in w.idempotency_key) > 0
      and w.idempotency_key like 'schedule-occurrence/%%')::text as work,
  case when %(sessions)s then (select coalesce(json_agg(json_build_object('role', usename, 'xid', backend_xid::text)
                                                         order by backend_xid::text), '[]')
                                 from pg_stat_activity
                                where datname = current_database() and backend_xid is not null
                                  and usename::text = any(%(users)s))::text end as sessions
"""

# `sessions`: the implementation's sessions holding a transaction ID on the case's database (the host's own log in as
# the owner or a superuser, and a step beside a held barrier has finished before the barrier is read).

# The barriers read, and which pairs (previous barrier of the same schedule and instance, this one) are judged.
READ_AT = ("schedule-claim-before-commit", "schedule-claim-after-commit", "schedule-decision-before-commit",
           "schedule-decision-after-commit", "schedule-bridge-before-commit", "schedule-link-after-commit")
GAPS = {("schedule-claim-after-commit", "schedule-decision-before-commit"),
        ("schedule-decision-after-commit", "schedule-bridge-before-commit")}
BRACKETS = {("schedule-claim-before-commit", "schedule-claim-after-commit"): "claim",
            ("schedule-decision-before-commit", "schedule-decision-after-commit"): "decision",
            ("schedule-bridge-before-commit", "schedule-link-after-commit"): "bridge"}
OPEN_AT = {"schedule-claim-before-commit": DISPATCHER, "schedule-decision-before-commit": RUNTIME}

TOGETHER = rule_of(
    "decision-commits-together",
    "It writes the occurrence disposition and cursor movement in one scoped transaction. (Read at every processor "
    "barrier of a schedule in the fault-free run: nothing of it commits between an after-commit barrier and the "
    "next transaction's before-commit barrier; what commits between a transaction's before- and after-commit "
    "barriers is one transaction, one `xmin` on every row it wrote; a decision that records a disposition moves the "
    "cursor in it.)")
WORK_INSIDE = rule_of(
    "work-inside-link-transaction",
    "The Work bridge calls the existing PostgreSqlDurableWorkTransactionWriter.EnqueueAsync(NpgsqlTransaction, "
    "DurableWorkRequest) inside the occurrence-link transaction. (Read at the bridge's barriers in the fault-free "
    "run: an occurrence linked between `schedule-bridge-before-commit` and `schedule-link-after-commit` links a "
    "Work accepted by that same transaction, its row's `xmin` the link's, and no Work of the schedule commits "
    "outside a bridge.)")
STATES_SEEN = rule_of(
    "gate-a-states-at-every-barrier",
    "Gate A writes only pending, materialized, and superseded; it does not claim individual occurrence rows. (Read "
    "at every processor barrier of a schedule in the fault-free run and, in a faulted case, from the barrier where "
    "the fault fires on, not only at the end, so a state written and left again, a transient `claimed`, is seen.)")
ROLES = rule_of(
    "transaction-roles-at-barriers",
    "There are two non-overlapping transaction forms: A trusted dispatcher claims one payload-free dispatch queue "
    "row under a lease and commits before accessing scoped data. (With one processor running and no fault yet: at "
    "`schedule-claim-before-commit` exactly one session of the implementation holds a transaction ID, the "
    "dispatcher role's; at `schedule-decision-before-commit` exactly one, the runtime role's; the claim advances "
    "the schedule's `lease_generation` by exactly one.)")


class BarrierFacts:
    """One case's reads at the barriers and what they showed wrong, per check."""

    def __init__(self) -> None:
        self.last: dict[tuple[str, str], dict] = {}  # (instance, schedule_id) -> its previous read
        self.evidence: dict[str, list] = {TOGETHER: [], WORK_INSIDE: [], STATES_SEEN: [], ROLES: []}
        self.rows: dict[str, int] = {TOGETHER: 0, WORK_INSIDE: 0, STATES_SEEN: 0, ROLES: 0}
        self.unread: list[str] = []
        # Every read of a cursor in the case, in the order the reads were made (barriers, and the states after steps):
        # {"at": where, "cursors": {schedule_id: cursor_utc}, "restored": a restore put older rows back first}.
        self.cursor_reads: list[dict] = []
        self._lock = threading.Lock()

    def note_cursors(self, where: str, cursors: dict[str, Any], *, restored: bool = False) -> None:
        """Cursors read outside a barrier (the state after a step, the final state), in order with the barriers'."""
        with self._lock:
            self.cursor_reads.append({"at": where, "cursors": cursors, "restored": restored})

    def at_barrier(self, run: "CaseRun", impl: "Implementation", name: str, context: dict, fire: bool) -> None:
        """Read the barrier's schedule (before any fault is injected there) and judge it against its last read."""
        schedule_id = (context or {}).get("schedule_id")
        if name not in READ_AT or not schedule_id or run.store is None:
            return
        schedule_id = str(schedule_id)
        if run.plan.fault is not None and run.injection is None and not fire:
            # Before its fault a faulted case runs the fault-free run's timeline, whose barriers that run read and
            # judged: reading them again in every case cost a tenth of the matrix's CPU. From the fault on (the
            # barrier where it fires included) every barrier is read, for the states the recovery leaves.
            return
        quiet = run.injection is None or fire  # no fault injected before this barrier
        alone = quiet and not run.concurrent and impl.label != "takeover"
        try:
            facts, sessions = self._read(run, schedule_id, alone and name in OPEN_AT, f"at {name} ({impl.label})")
        except psycopg.Error as exc:  # a barrier after a crash may meet a server still starting: not judged
            self.unread.append(f"{name}: {type(exc).__name__}")
            return
        beside = run.beside
        read = {"barrier": name, "facts": facts, "quiet": quiet, "asked": run.asking.get(impl.label),
                "beside": (id(beside), beside and beside["outcome"])}
        self._states(name, schedule_id, facts)
        if sessions is not None:
            self._sessions(name, schedule_id, sessions)
        previous = self.last.get((impl.label, schedule_id))
        self.last[(impl.label, schedule_id)] = read
        if previous is None or not previous["quiet"] or not quiet or previous["asked"] is not read["asked"] \
                or previous["beside"] != read["beside"]:
            return  # a fault, another request or a step beside the pass lies between: what committed is not known
        pair = (previous["barrier"], name)
        if pair in GAPS:
            self._gap(pair, schedule_id, previous["facts"], facts)
        elif pair in BRACKETS:
            self._bracket(BRACKETS[pair], pair, schedule_id, previous["facts"], facts)

    def read(self, run: "CaseRun", schedule_id: str) -> dict:
        """A schedule's facts now, on the barrier reader (for a read outside `at_barrier`: a cancelled pass's)."""
        return self._read(run, schedule_id, False, "beside a cancelled pass")[0]

    def _read(self, run: "CaseRun", schedule_id: str, sessions: bool, where: str) -> tuple[dict, list | None]:
        """On the store's barrier reader, not the verifier's session: racers' barriers arrive on two threads at once,
        and the verifier's is shared by threads that do not lock it. Read again once when a crash ended it. The
        cursor read is noted under the lock, so racers' reads are noted in the order they were made."""
        with self._lock:
            for attempt in (1, 2):
                try:
                    with run.store.barrier_reader() as conn:
                        facts = read_facts(conn.cursor(row_factory=tuple_row), schedule_id, sessions)
                    if facts["definition"] and facts["definition"].get("cursor_utc"):
                        self.cursor_reads.append({"at": where, "restored": False, "cursors": {
                            schedule_id: datetime.fromisoformat(facts["definition"]["cursor_utc"])}})
                    return facts, facts.pop("sessions") if sessions else None
                except psycopg.OperationalError:
                    if attempt == 2:
                        raise
        raise AssertionError("unreachable")

    def _states(self, name: str, schedule_id: str, facts: dict) -> None:
        self.rows[STATES_SEEN] += len(facts["occurrences"])
        wrong = [o for o in facts["occurrences"] if o["state"] not in GATE_A_STATES]
        if wrong:
            self.evidence[STATES_SEEN].append({"barrier": name, "schedule_id": schedule_id,
                                               "occurrences_outside_gate_a": wrong})

    def _sessions(self, name: str, schedule_id: str, sessions: list) -> None:
        self.rows[ROLES] += 1
        logins = runtime_logins()
        if [RUNTIME if row["role"] in logins else row["role"] for row in sessions] != [OPEN_AT[name]]:
            self.evidence[ROLES].append({"barrier": name, "schedule_id": schedule_id,
                                         "sessions_holding_a_transaction_id": sessions,
                                         "expected": f"exactly one, {OPEN_AT[name]}'s"})

    def _gap(self, pair: tuple, schedule_id: str, before: dict, after: dict) -> None:
        changed = changes(before, after)
        self.rows[TOGETHER] += 1
        work = [c for c in changed if c["table"] == "work"]
        rest = [c for c in changed if c["table"] != "work"]
        if rest:
            self.evidence[TOGETHER].append({"schedule_id": schedule_id, "between": list(pair),
                                            "committed_outside_a_barrier_transaction": rest})
        if work:
            self.rows[WORK_INSIDE] += 1
            self.evidence[WORK_INSIDE].append({"schedule_id": schedule_id, "between": list(pair),
                                               "work_committed_outside_the_bridge": work})

    def _bracket(self, kind: str, pair: tuple, schedule_id: str, before: dict, after: dict) -> None:
        changed = changes(before, after)
        if kind == "claim":
            self.rows[ROLES] += 1
            was = (before["dispatch"] or {}).get("lease_generation")
            now = (after["dispatch"] or {}).get("lease_generation")
            if was is None or now != was + 1:
                self.evidence[ROLES].append({"schedule_id": schedule_id, "between": list(pair),
                                             "lease_generation": [was, now], "expected": "advanced by exactly one"})
            return
        self.rows[TOGETHER] += 1
        xmins = sorted({c["xmin"] for c in changed})
        if len(xmins) > 1:
            self.evidence[TOGETHER].append({"schedule_id": schedule_id, "between": list(pair),
                                            "transactions": xmins, "rows": changed})
        if kind == "decision":
            disposed = [c for c in changed if c["table"] == "history" or (
                c["table"] == "occurrences" and (c["was"] is None or c["was"]["last_nominal_utc"]
                                                 != c["now"]["last_nominal_utc"]))]
            disposed = [c for c in disposed if c["table"] != "history" or c["key"].startswith("recovery-skipped|")]
            cursor = [c for c in changed if c["table"] == "definition"
                      and c["was"] and c["now"] and c["was"]["cursor_utc"] != c["now"]["cursor_utc"]]
            if disposed and not cursor:
                self.evidence[TOGETHER].append({"schedule_id": schedule_id, "between": list(pair),
                                                "disposition": disposed, "cursor_moved": False})
            return
        work = {c["key"]: c for c in changed if c["table"] == "work"}
        for c in changed:
            if c["table"] != "occurrences" or not c["now"]["work_id"] or (c["was"] or {}).get("work_id"):
                continue
            self.rows[WORK_INSIDE] += 1
            accepted = work.get(c["now"]["work_id"])
            if accepted is None or accepted["xmin"] != c["xmin"]:
                self.evidence[WORK_INSIDE].append({
                    "schedule_id": schedule_id, "between": list(pair), "linked": c["key"], "link_xmin": c["xmin"],
                    "work_id": c["now"]["work_id"],
                    "work_xmin": accepted["xmin"] if accepted else _xmin_of(after, c["now"]["work_id"]),
                    "work_accepted_in_this_transaction": accepted is not None})

    def checks(self) -> list[CheckResult]:
        """One result per check; a case whose barriers could not all be read says so in the evidence."""
        names = {TOGETHER: "decision-commits-together", WORK_INSIDE: "work-inside-link-transaction",
                 STATES_SEEN: "gate-a-states-at-every-barrier", ROLES: "transaction-roles-at-barriers"}
        return [CheckResult(names[rule], rule, not self.evidence[rule], self.evidence[rule], self.rows[rule])
                for rule in names]


def read_facts(cur: psycopg.Cursor, schedule_id: str, sessions: bool = False) -> dict:
    """The schedule's rows a pass writes, keyed per table, as one statement sees them (with `sessions`, also the
    implementation's sessions holding a transaction ID)."""
    row = cur.execute(FACTS_SQL, {"s": schedule_id, "sessions": sessions,
                                  "users": [*runtime_logins(), DISPATCHER]}).fetchone()
    return {name: json.loads(value) if value is not None else None
            for name, value in zip(("definition", "dispatch", "occurrences", "history", "work", "sessions"), row)}


def _rows(facts: dict, table: str) -> dict[str, dict]:
    if table in ("definition", "dispatch"):
        return {table: facts[table]} if facts[table] else {}
    return {str(r["key"]): r for r in facts[table]}


def _xmin_of(facts: dict, work_id: str) -> Any:
    return next((r["xmin"] for r in facts["work"] if str(r["key"]) == str(work_id)), None)


def changes(before: dict, after: dict) -> list[dict]:
    """Every row new or different in `after`, with its writer's xmin (a row gone is no write a pass may make)."""
    found = []
    for table in ("definition", "dispatch", "occurrences", "history", "work"):
        was, now = _rows(before, table), _rows(after, table)
        for key, row in now.items():
            old = was.get(key)
            if old != row:
                found.append({"table": table, "key": key, "xmin": row["xmin"], "was": old, "now": row})
    return found


# A pass cancelled in flight (barrier-reply `cancel-pass`) is judged in a module of its own that reads facts as this one
# does; imported here, last, so its rule follows these in CHECKS whichever module is imported first.
from testhost.faults import cancel_pass  # noqa: E402,F401
