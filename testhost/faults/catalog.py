"""Faults, as plug-ins behind one Protocol: each is injected when the chosen barrier is hit the chosen time."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol

from barriers import Barrier
from barriers.catalog import PROCESSOR_TRANSACTIONS
from barriers.schema import OWNER

from testhost.impl.implementation import Implementation
from testhost.world import table_rows
from testhost.world.capabilities import DB_CRASH, NETWORK

if TYPE_CHECKING:  # a fault is named and planned where no world runs (a run's controller)
    from .run import FaultedRun

# Built-in scenarios that between them meet every transaction kind in every situation the catalog builds: where a
# fault adds the same thing whatever the scenario (a crash, a pause inside a transaction, a kill or a cut after a
# request's last commit), the built-in catalog plans it in these only.
DB_CRASH_SCENARIOS = ("at-single", "every-anchored", "held-slot", "coalesce-terminal-callback",
                      "max-schedules-crash-middle", "two-processors-race", "link-conflict",
                      "generation-update-supersedes", "delete-with-pending", "epoch-release")


@dataclass
class Injection:
    """What a fault did, for the timeline and for the checks that follow it."""

    fault: str
    barrier: str
    details: dict[str, Any] = field(default_factory=dict)
    open_xid: int | None = None  # the implementation's open write transaction at the barrier, if any
    context: dict[str, Any] = field(default_factory=dict)  # what the implementation said at the barrier


class Fault(Protocol):
    name: str
    needs: tuple[str, ...]  # world capabilities
    summary: str  # what the host does, for PROTOCOL.md's *Faults*
    expects: str  # what the implementation must then do (or must not)

    def applies(self, barrier: Barrier) -> str | None:
        """None if the fault can be injected at this barrier, else why not."""

    def inject(self, run: FaultedRun, impl: Implementation, barrier: Barrier, injection: Injection) -> None:
        ...


def open_write_xid(run: FaultedRun, barrier: Barrier, injection: Injection) -> int | None:
    return open_write_backend(run, barrier, injection.context)[0]


# The live transaction that holds the schedule's dispatch row. PostgreSQL records a row's locker (FOR UPDATE, or an
# UPDATE) in the row's own xmax; every transaction, and every subtransaction with an xid, holds an exclusive lock on
# its own xid in pg_locks, with its backend's pid. So the row names the transaction and pg_locks the backend: exact,
# also while two processors race (SKIP LOCKED means at most one of them can hold the row). The top-level xid, for
# pg_xact_status, is that backend's backend_xid. A row share-locked by several transactions at once holds a
# MultiXactId instead, a number of another counter: the holder must also have locked the queue table itself, so a
# multixact that happens to equal a live xid names nobody.
LOCK_HOLDER = (
    "select a.backend_xid::text::bigint as xid, l.pid from appsurface_durable.schedule_dispatch d "
    "join pg_locks l on l.locktype = 'transactionid' and l.transactionid = d.xmax and l.mode = 'ExclusiveLock' "
    "and l.granted join pg_stat_activity a on a.pid = l.pid "
    "where d.schedule_id = %s::uuid and l.pid <> pg_backend_pid() and a.backend_xid is not null "
    "and exists (select 1 from pg_locks r where r.pid = l.pid and r.locktype = 'relation' and r.granted "
    "and r.relation = 'appsurface_durable.schedule_dispatch'::regclass)")


def lock_holder(run: FaultedRun, schedule_id: str) -> tuple[int | None, int | None]:
    """(top-level xid, server pid) of the live transaction holding the schedule's dispatch row, or (None, None)."""
    with run.store.admin() as conn:
        rows = conn.execute(LOCK_HOLDER, (schedule_id,)).fetchall()
    return (rows[0][0], rows[0][1]) if len(rows) == 1 else (None, None)


def open_write_backend(run: FaultedRun, barrier: Barrier, context: dict | None = None) -> tuple[int | None, int | None]:
    """The xid of the implementation's open write transaction at a before-commit barrier and the server pid of its
    connection.

    At a processor's barrier that names its schedule, the transaction holding that schedule's dispatch row is the
    one (`lock_holder`): exact with two processors racing too. Otherwise, at the barrier the implementation waits
    for the host's reply, so the one session holding an xid on the case's database is its transaction (the host's
    own sessions there hold none between statements); with two processors racing that cannot be told, so none.
    The session's state is not read: the world runs with track_activities off."""
    if not barrier.before_commit:
        return None, None
    schedule_id = (context or {}).get("schedule_id")
    if schedule_id and barrier.transaction in PROCESSOR_TRANSACTIONS:
        found = lock_holder(run, str(schedule_id))
        if found[1] is not None or run.concurrent:
            return found
    if run.concurrent:
        return None, None
    with run.world.admin() as conn:
        rows = conn.execute(
            "select backend_xid::text::bigint, pid from pg_stat_activity where datname = %s "
            "and backend_xid is not null and pid <> pg_backend_pid()",
            (run.store.dbname,)).fetchall()
    return (rows[0][0], rows[0][1]) if len(rows) == 1 else (None, None)


class Kill:
    name, needs = "kill", ()
    summary = ("SIGKILL to your process group. Two kills that leave the same durable state are one case: where your "
               "fault-free run went from `schedule-claim-after-commit` straight to `schedule-decision-before-commit` "
               "of the same schedule, or from `schedule-decision-after-commit` through `schedule-work-after-acceptance` "
               "to `schedule-bridge-before-commit`, with nothing between (and no second processor in the run), the "
               "kill is planned at the later barrier only. At the last barrier of a request (its answer came next in "
               "your fault-free run) the built-in catalog plans it in " + ", ".join(f"`{s}`" for s in DB_CRASH_SCENARIOS)
               + " only")
    expects = ("nothing of you survives; a fresh copy recovers: a transaction open at the barrier is aborted, one "
               "committed there stays committed")
    # A killed process leaves only what committed. Nothing commits between these barriers and the next one of the
    # same schedule (`decision-commits-together` holds the fault-free run to it), and a transaction open at an inside
    # or before-commit barrier is aborted either way: a kill at the first leaves what a kill at the second leaves.
    same_state_as = {
        "schedule-claim-after-commit": ("schedule-decision-before-commit",),
        "schedule-decision-after-commit": ("schedule-work-after-acceptance", "schedule-bridge-before-commit"),
        "schedule-work-after-acceptance": ("schedule-bridge-before-commit",),
    }
    request_end_scenarios = DB_CRASH_SCENARIOS
    request_end_because = ("everything the request writes had committed, so a kill there adds a restart on a store in "
                           "its fault-free state and a lost answer, whatever the scenario")

    def applies(self, barrier: Barrier) -> str | None:
        return None

    def inject(self, run, impl, barrier, injection):
        injection.open_xid = open_write_xid(run, barrier, injection)
        impl.kill()
        injection.details["killed_pid"] = impl.pid


class Disconnect:
    name, needs = "disconnect", (NETWORK,)
    summary = ("every proxied connection is reset; your process goes on. At the last barrier of a request (its answer "
               "came next in your fault-free run) the built-in catalog plans it in "
               + ", ".join(f"`{s}`" for s in DB_CRASH_SCENARIOS) + " only")
    request_end_scenarios = DB_CRASH_SCENARIOS
    request_end_because = ("everything the request writes had committed, so a cut there adds only a next request "
                           "(the recovery's pass) through dead connections to a store in its fault-free state, "
                           "whatever the scenario")
    expects = "notice the dead connection on its next use, roll back and retry after rollback (bounded), or answer"

    def applies(self, barrier: Barrier) -> str | None:
        return None

    def inject(self, run, impl, barrier, injection):
        injection.open_xid = open_write_xid(run, barrier, injection)
        run.world.proxy.cut()


# Scenarios whose lost COMMIT replies are held past the client deadline (tagged in their `covers`): between them
# they reach every before-commit barrier. Each held case costs the implementation's whole deadline, so the matrix
# holds these first hits only; a missing deadline shows there already.
DEADLINE_COVER = "client-deadline"
# The client deadline every case gives the implementation (CRASHPROOF_DEADLINE_S): set here, below the case that
# passes it on, since a lost COMMIT reply is held for it plus DEADLINE_MARGIN_S.
DEADLINE_S = 2.0
# How long past CRASHPROOF_DEADLINE_S a lost COMMIT reply is held before the implementation counts as having no
# deadline. Generous on purpose: a deadline timer fires late on a loaded 2-core machine running three cases side by
# side (scheduling delays of a second were seen there), and a margin that flakes would fail correct implementations;
# an implementation with no deadline at all hangs forever, so any finite margin catches it.
DEADLINE_MARGIN_S = 3.0


class LostCommitReply:
    """Drop server→client bytes, release the barrier: COMMIT reaches the server, its reply never returns. The reply
    stays lost until the implementation abandons the connection, for at most the client deadline plus a margin."""

    name, needs = "lost-commit-reply", (NETWORK,)
    summary = ("before-commit barriers only: the server's replies are dropped, so your COMMIT lands and its reply "
               "never returns; held until you close the connection (at most your deadline plus a margin)")
    expects = ("give up within `CRASHPROOF_DEADLINE_S` and close the connection; the outcome is `unknown`, never "
               "`fail`; a retry must find what committed and not repeat it")
    settle_s = 0.5
    commit_timeout_s = 15.0
    deadline_margin_s = DEADLINE_MARGIN_S

    def applies(self, barrier: Barrier) -> str | None:
        return None if barrier.position == "before-commit" else "only a before-commit barrier has a commit to lose"

    def inject(self, run, impl, barrier, injection):
        injection.open_xid, backend = open_write_backend(run, barrier, injection.context)
        run.world.proxy.blackhole_replies()
        held_from = time.monotonic()
        # Removing the toxic closes the connection, so heal only once the server has finished the transaction
        # (or, for one that wrote nothing, after a moment) and the implementation's own deadline gave up on it:
        # the reply to its COMMIT is then surely lost, and the deadline surely exercised.
        healer = threading.Thread(target=self._heal_after_commit, args=(run, injection, backend, held_from),
                                  daemon=True)
        healer.start()
        run.on_recovery.append(healer.join)

    def _heal_after_commit(self, run, injection: Injection, backend: int | None, held_from: float) -> None:
        try:
            if injection.open_xid is None:
                time.sleep(self.settle_s)
                return
            deadline = time.monotonic() + self.commit_timeout_s
            with run.world.admin() as conn:
                while time.monotonic() < deadline:
                    fate = conn.execute("select pg_xact_status(%s::text::xid8)", (str(injection.open_xid),)).fetchone()[0]
                    if fate != "in progress":
                        injection.details["server_fate_before_heal"] = fate
                        break
                    time.sleep(0.01)
                else:
                    injection.details["server_fate_before_heal"] = "still in progress"
                    return
                if backend is not None and run.plan.hit == 1 and DEADLINE_COVER in run.scenario.covers:
                    self._hold_until_abandoned(run, conn, injection, backend, held_from)
        finally:
            run.world.proxy.heal()

    def _hold_until_abandoned(self, run, conn, injection: Injection, backend: int, held_from: float) -> None:
        """Keep the reply lost until the server sees the implementation close the connection (its deadline fired),
        or until the deadline plus the margin passed: then the implementation is recorded as having none."""
        limit = held_from + DEADLINE_S + self.deadline_margin_s
        injection.details["deadline_s"], injection.details["deadline_margin_s"] = DEADLINE_S, self.deadline_margin_s
        while time.monotonic() < limit:
            if conn.execute("select not exists (select 1 from pg_stat_activity where pid = %s)",
                            (backend,)).fetchone()[0]:
                injection.details["connection_abandoned_after_s"] = round(time.monotonic() - held_from, 3)
                return
            time.sleep(0.02)
        injection.details["connection_kept_past_deadline_s"] = round(time.monotonic() - held_from, 3)


# Where db-crash is planned. What a crash adds to a kill or a cut at the same barrier is the server's side: every
# commit made before it must be durable (no asynchronous commit), and every session, lock and prepared statement is
# gone while your process lives on. Both belong to the barrier's transaction kind, not to the timeline around it,
# so the crash is planned at every barrier and hit of these scenarios, which together meet every transaction kind in
# every situation the catalog builds: a single At, an Every with Work callbacks, a held slot, coalescing, a crash in
# the middle of a pass over several schedules, two processors racing, a link conflict, a superseded generation, a
# delete with a pending occurrence and a fenced epoch. Everywhere else a db-crash case cost what a kill and a
# disconnect there cost together (a restart, every session of the world made again) for the same two paths: with
# it in every scenario it took 30% of the matrix's CPU (docs/crash-matrix.md, "Where db-crash is planned").
class DbCrash:
    name, needs = "db-crash", (DB_CRASH,)
    summary = ("PostgreSQL is killed (postmaster and every backend) and restarted on the same data directory; the "
               "built-in catalog plans it at every barrier and hit of " + ", ".join(f"`{s}`" for s in DB_CRASH_SCENARIOS)
               + ", which meet every transaction kind in every situation it builds; your own scenarios and explore's "
                 "programs get it in every scenario")
    expects = ("reconnect and retry after rollback (bounded), or answer; what was committed before the crash stays: "
               "every row the host read just before it is there after the restart, unchanged "
               "(`committed-survives-crash`; an asynchronous commit is lost here)")
    scenarios = DB_CRASH_SCENARIOS
    scenarios_because = ("what a crash adds to a kill or a cut there, durable commits and a server that forgot your "
                         "sessions, belongs to the barrier's transaction kind, and these meet every kind in every "
                         "situation the catalog builds")
    builtin_only = True  # a team's own scenarios and explore's programs get the crash at every barrier

    def applies(self, barrier: Barrier) -> str | None:
        return None

    def inject(self, run, impl, barrier, injection):
        injection.open_xid = open_write_xid(run, barrier, injection)
        # With a racer running, a row may change between the read and the crash legitimately: not compared.
        before = None if run.concurrent else _protocol_rows(run)
        run.world.cluster.crash()
        run.world.cluster.restart()
        injection.details["crash_durability"] = (
            {"not_compared": "another processor was running beside the crashed one"} if before is None
            else {"rows": sum(len(r) for r in before.values()),
                  "changed": table_rows.changed(before, _protocol_rows(run))})


def _protocol_rows(run: FaultedRun) -> dict[str, set[str]]:
    with run.owner() as conn:
        return table_rows.rows(conn)


class Pause:
    """SIGSTOP at the barrier, move the clock past the lease, let a second processor take over, SIGCONT."""

    name, needs = "pause", ()
    summary = ("processor barriers only: SIGSTOP to your group, the server clock moved past your lease, a second "
               "copy of your command drains everything due, then SIGCONT and the reply. Not planned at "
               "`schedule-decision-after-commit` or `schedule-link-after-commit` where your fault-free run wrote "
               "nothing more under that lease (its next "
               "barrier was another schedule's or a new claim, or the answer came next): nothing is left to take over")
    expects = ("stopped inside a transaction you still hold its row locks and may commit; stopped between "
               "transactions, your next transaction for that schedule finds another dispatch revision and writes "
               "nothing (`late-writes-fenced`)")

    # Stopped inside its transaction a processor holds the schedule's row locks, so the second copy's claim skips that
    # schedule and nobody takes it over: in the whole matrix's 218 pauses at those barriers the second copy claimed
    # nothing at all 198 times, and only other schedules the other 20 (the `stall` fault, which ends the session, is
    # the takeover there). What is left is the transaction kind's: another
    # processor draining beside a held lock, and a COMMIT after the lease expired. So the built-in catalog plans a
    # pause inside a transaction in the crash's scenarios only; between transactions (after-commit), where the
    # takeover happens and the next write must be fenced, in every scenario.
    scenarios_because = ("stopped inside a transaction you hold the schedule's row locks and nobody takes it over "
                         "(`stall` does that); another processor draining beside a held lock and a commit after the "
                         "lease expired belong to the barrier's transaction kind, and these scenarios meet every kind")
    builtin_only = True
    # After its link commits (or a decision that materialized nothing) a processor is done with that lease. When it
    # then writes nothing more under it (the fault-free run's next barrier is another schedule's, a new claim, or
    # none), there is nothing for a takeover to take over and no late write to fence: in the whole matrix's 49
    # pauses after a link, the takeover claimed the paused schedule 0 times. Such a pause is planned only where the
    # same lease is still used afterwards.
    lease_spent_at = ("schedule-decision-after-commit", "schedule-link-after-commit")
    lease_spent_because = ("after this commit the fault-free run wrote nothing more under the lease (its next "
                           "barrier is another schedule's, a new claim, or none): a takeover finds nothing to take over "
                           "and there is no late write to fence")

    def applies(self, barrier: Barrier) -> str | None:
        return None if barrier.transaction in PROCESSOR_TRANSACTIONS else "only a processor holds a lease to lose"

    def scenarios_at(self, barrier: Barrier) -> tuple[str, ...] | None:
        """Where a pause at this barrier is planned in the built-in catalog (None: every scenario)."""
        return None if barrier.position == "after-commit" else DB_CRASH_SCENARIOS

    def inject(self, run, impl, barrier, injection):
        injection.open_xid = open_write_xid(run, barrier, injection)
        impl.pause()
        try:
            run.advance(timedelta(seconds=run.scenario.lease_seconds + 1))
            second = run.start_implementation("takeover")
            counts = run.drain(second)
            injection.details["takeover_passes"] = counts
            second.stop()
            if barrier.position == "after-commit" and "schedule_id" in injection.context:
                # Between its transactions the paused processor holds no lock: from here on its lease is
                # another's, so whatever it does next for this schedule must be fenced (write nothing).
                take_late_probe(run, impl, barrier, injection)
        finally:
            impl.resume()


def take_late_probe(run: FaultedRun, impl: Implementation, barrier: Barrier, injection: Injection) -> None:
    """Snapshot the faulted processor's schedule for `late-writes-fenced`. A processor racing beside it may write
    for that schedule legitimately (it may have claimed it once the lease expired), so its pass ends first: after
    the snapshot only the faulted processor still runs."""
    injection.details["racers_waited_for"] = run.wait_for_other_racers(impl.label)
    schedule_id = str(injection.context["schedule_id"])
    run.late_probe = ({"schedule_id": schedule_id, "barrier": barrier.name, "instance": impl.label},
                      run.schedule_rows(schedule_id))


class Stall:
    """SIGSTOP inside the open transaction, end its server session (as idle_in_transaction_session_timeout or an
    operator would), let a second processor take the lease over and drain, then SIGCONT: with its connection dead,
    whatever the first does next must write nothing for that schedule."""

    name, needs = "stall", ()
    # What a stall tests (the retry after a rollback, once another holds the lease) is the same code at every hit of
    # a barrier; the first hit of each barrier in each scenario already meets every transaction kind in every
    # situation the scenarios build (suspension, coalescing, a link conflict, a race). The last hits would add 56
    # cases to those 94 for that same path (docs/crash-matrix.md, "The stall fault").
    first_hit_only = "a later hit retries the same transaction under the same fence; the first covers it"
    summary = ("a processor's before-commit and inside barriers only: SIGSTOP to your group, then the server ends "
               "the session of your transaction open there (pg_terminate_backend, as "
               "idle_in_transaction_session_timeout or an operator would), the clock moves past your lease, a second "
               "copy of your command claims the lease and drains everything due, then SIGCONT and the reply")
    expects = ("your connection is dead and the transaction aborted: roll back, retry after rollback within your "
               "bound with the fence checked again, or answer `fail`/`unknown`; either way write nothing more for "
               "that schedule (`late-writes-fenced`). The barrier's context must name the `schedule_id`; the host finds "
               "your session as the holder of that schedule's dispatch row (locked or updated), which is exact also "
               "while two processors race, or else, outside a race, as the one session with an open write "
               "transaction; a stall with nothing to end fails `stall-took-over`")
    end_timeout_s = 5.0

    def applies(self, barrier: Barrier) -> str | None:
        if barrier.transaction not in PROCESSOR_TRANSACTIONS:
            return "only a processor holds a lease to lose"
        if not barrier.before_commit:
            return "only a transaction still open at the barrier has a session to end (pause covers the others)"
        return None

    def inject(self, run, impl, barrier, injection):
        stall = injection.details["stall"] = {"ended_backend": None, "took_over": False}
        schedule_id = injection.context.get("schedule_id")
        injection.open_xid, backend = open_write_backend(run, barrier, injection.context)
        if schedule_id is None or backend is None:
            # Nothing to end: the case fails `stall-took-over` instead of passing a stall that never happened.
            stall["why_not"] = ("the barrier's context names no schedule_id" if schedule_id is None else
                                "no transaction holds the schedule's dispatch row (or an xid) at the barrier")
            return
        schedule_id = str(schedule_id)
        impl.pause()
        try:
            before = self._lease_generation(run, schedule_id)
            ended = self._end_session(run, backend)
            stall.update(ended_backend=backend if ended else None, open_xid=injection.open_xid)
            run.note("session-ended", instance=impl.label, backend=backend, ended=ended)
            # A racer's pass ends before the clock moves, so the lease is taken over by a processor the host
            # started for that (or by the racer itself, once the ended transaction released the row).
            injection.details["racers_waited_for"] = run.wait_for_other_racers(impl.label)
            run.advance(timedelta(seconds=run.scenario.lease_seconds + 1))
            second = run.start_implementation("takeover")
            injection.details["takeover_passes"] = run.drain(second)
            second.stop()
            after = self._lease_generation(run, schedule_id)
            stall["lease_generation"] = {"at_barrier": before, "after_takeover": after}
            stall["took_over"] = before is not None and after is not None and after > before
            take_late_probe(run, impl, barrier, injection)
        finally:
            impl.resume()

    def _end_session(self, run: FaultedRun, backend: int) -> bool:
        """pg_terminate_backend, then wait until the backend is gone and its locks with it (polled: the function's own
        wait sleeps in steps of 100 ms)."""
        with run.store.admin() as conn:
            if not conn.execute("select pg_terminate_backend(%s)", (backend,)).fetchone()[0]:
                return False
            deadline = time.monotonic() + self.end_timeout_s
            while time.monotonic() < deadline:
                if not conn.execute("select exists (select 1 from pg_stat_activity where pid = %s)",
                                    (backend,)).fetchone()[0]:
                    return True
                time.sleep(0.002)
        return False

    @staticmethod
    def _lease_generation(run: FaultedRun, schedule_id: str) -> int | None:
        """The committed lease generation of the schedule's dispatch row (a plain read is not blocked by its lock)."""
        rows = run.dispatch_rows(schedule_id)
        return rows[0]["lease_generation"] if rows else None


class Cancel:
    """Hold the schedule's dispatch row from a host session at a committed claim or decision, so the next
    transaction's first lock waits; cancel that waiting statement (pg_cancel_backend, SQLSTATE 57014), then let go.
    A cancel of a backend idle in its transaction at a barrier does nothing, so the statement is made to wait."""

    name, needs = "cancel", ()
    # One transaction kind per barrier: the decision waits after a committed claim, the bridge after a committed
    # decision. The retry after a cancel is the same code in every scenario and at every hit: one scenario's first
    # hits cover it, two cases.
    first_hit_only = "a later hit cancels the same statement of the same transaction kind; the first covers it"
    scenarios = ("at-single",)
    scenarios_because = "the same retry in every scenario"
    builtin_only = True  # a team's own scenarios and explore's programs get the cancel at both barriers
    NEXT = {"schedule-claim-after-commit": "the decision", "schedule-decision-after-commit": "the bridge"}
    summary = ("at `schedule-claim-after-commit` and `schedule-decision-after-commit` (first hits; the built-in "
               "catalog plans it in `at-single`, your own scenarios and explore's programs get it in every scenario): "
               "the host locks the schedule's dispatch row FOR UPDATE, replies, waits until your next "
               "transaction's statement waits for that lock, cancels it (pg_cancel_backend: SQLSTATE 57014, "
               "query_canceled) and lets go")
    expects = ("your transaction aborted with a SQLSTATE failure: roll back and retry within your bound (the pass "
               "then answers `ok`), or answer `unknown` with `retriable: true` (`cancel-retried`; a `fail` is dishonest "
               "here, since the claim or decision before it committed: `outcome-honesty`). For the cancel to reach "
               "you, each scoped transaction must lock the schedule's dispatch row with a statement that waits for "
               "the lock (a plain `FOR UPDATE`, not `NOWAIT` or `SKIP LOCKED`): the role proof and "
               "`set_local_scope` come before it (*Transactions of a pass*), and rows read before it are fine, the "
               "cancel then lands at the lock (protocol note 32d). A cancel that found no statement waiting fails "
               "the case too")
    wait_s = 10.0

    def applies(self, barrier: Barrier) -> str | None:
        if barrier.name not in self.NEXT:
            return ("only after a committed claim or decision does a next transaction lock the dispatch row; "
                    "elsewhere a cancel finds your backend idle in its transaction and does nothing")
        return None

    def inject(self, run, impl, barrier, injection):
        cancel = injection.details["cancel"] = {"next": self.NEXT[barrier.name], "cancelled_backend": None}
        schedule_id = injection.context.get("schedule_id")
        # A barrier context that names no schedule has every dispatch row held (at-single has one).
        import psycopg  # here only: the controller that plans faults never connects

        conn = psycopg.connect(run.store.dsn(OWNER), autocommit=False)
        conn.execute("select 1 from appsurface_durable.schedule_dispatch where %(id)s::uuid is null "
                     "or schedule_id = %(id)s::uuid for update", {"id": schedule_id})
        thread = threading.Thread(target=self._cancel_waiter, args=(run, impl, conn, cancel), daemon=True)
        run.fault_threads = [*getattr(run, "fault_threads", []), thread]
        thread.start()

    def _cancel_waiter(self, run, impl, conn, cancel: dict) -> None:
        """Poll for a statement blocked by the hold while the request runs; cancel it, then end the hold."""
        holder = conn.info.backend_pid
        limit = time.monotonic() + self.wait_s
        try:
            with run.store.admin() as admin:
                while time.monotonic() < limit and impl.label in run.asking:
                    found = admin.execute("select pid from pg_stat_activity where %s = any(pg_blocking_pids(pid))",
                                          (holder,)).fetchone()
                    if found:
                        if admin.execute("select pg_cancel_backend(%s)", (found[0],)).fetchone()[0]:
                            cancel["cancelled_backend"] = found[0]
                        break
                    time.sleep(0.005)
            if cancel["cancelled_backend"] is None:
                cancel["why_not"] = f"no statement of {cancel['next']} waited for the held dispatch row"
            run.note("statement-cancelled", instance=impl.label, **cancel)
        finally:
            conn.close()  # ends the hold: the cancelled transaction's retry goes on


FAULTS: dict[str, Fault] = {fault.name: fault for fault in (Kill(), Disconnect(), LostCommitReply(), DbCrash(), Pause(),
                                                           Stall(), Cancel())}
