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

from testhost.judge.barrier_checks import (BRACKETS, DISPATCHER_ROLE, GAPS, OPEN_AT, READ_AT, BarrierJudgement,
                                           runtime_logins)

if TYPE_CHECKING:
    from testhost.faults.run import FaultedRun as CaseRun  # what a barrier read touches of the case's run
    from testhost.impl.implementation import Implementation

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


class BarrierFacts(BarrierJudgement):
    """One case's reads at the barriers; what they showed wrong is judged as testhost/judge/barrier_checks.py says."""

    def __init__(self) -> None:
        super().__init__()
        self.last: dict[tuple[str, str], dict] = {}  # (instance, schedule_id) -> its previous read
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
        beside = run.beside.current
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


def read_facts(cur: psycopg.Cursor, schedule_id: str, sessions: bool = False) -> dict:
    """The schedule's rows a pass writes, keyed per table, as one statement sees them (with `sessions`, also the
    implementation's sessions holding a transaction ID)."""
    row = cur.execute(FACTS_SQL, {"s": schedule_id, "sessions": sessions,
                                  "users": [*runtime_logins(), DISPATCHER_ROLE]}).fetchone()
    return {name: json.loads(value) if value is not None else None
            for name, value in zip(("definition", "dispatch", "occurrences", "history", "work", "sessions"), row)}
