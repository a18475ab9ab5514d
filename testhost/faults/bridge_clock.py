"""The server clock moved inside a bridge transaction, so the Work's own clock_timestamp() sample can be told
from the bridge's transaction_timestamp() by seconds, not microseconds.

No barrier sits between a bridge's BEGIN and its Work acceptance, so the host makes the bridge wait instead: at
a committed decision it takes the schedule's dispatch row FOR UPDATE (every scoped transaction locks that row
first), lets the implementation go on, and once the next transaction waits for the lock, moves the clock and
lets go. The waiting transaction began before the move; everything it samples afterwards is after it.

The hold is offered wherever the implementation's bridge can meet it: at every committed decision, and at the
faulted one too once the fault was injected, when the process survived it (a lost connection, a crashed server):
an implementation may then bridge on a new session without redoing its decision. The next barrier of the same
instance and schedule tells what waited: a `schedule-decision-before-commit` means a redone decision, and the hold
is offered again at that decision's commit; anything else means the bridge, and the planned move is done.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta

import psycopg

from barriers.schema import OWNER

from testhost.impl.implementation import Implementation

from .run import FaultedRun

# How long the host holds the row for a bridge to come; a decision that bridges nothing leaves the hold to run out.
WAIT_S = 10.0
POLL_S = 0.01
DECISION = "schedule-decision-after-commit"
REDONE = "schedule-decision-before-commit"
BRIDGE_BARRIERS = ("schedule-work-after-acceptance", "schedule-bridge-before-commit", "schedule-link-after-commit")


class BridgeClock:
    """One scenario's planned move: offered at each committed decision until a bridge waited and the clock moved."""

    def __init__(self, run: FaultedRun, shift_s: float):
        self.run = run
        self.shift = timedelta(seconds=shift_s)
        # {"schedule_id", "held_from", "moved_at", "shift_s", "waited"}: what the check needs; "waited" is what the
        # next barrier showed waited ("the bridge" or "a redone decision"), None until one came.
        self.moves: list[dict] = []
        # Every hold offered: {"at", "instance", "schedule_id", "after_fault", "taken", "outcome", "barriers_meanwhile"}
        self.holds: list[dict] = []
        self._thread: threading.Thread | None = None
        self._hold: dict | None = None  # the hold in force, while its thread runs
        self._lock = threading.Lock()

    @property
    def moved(self) -> bool:
        """Whether the planned move is done: the clock moved while something other than a redone decision waited."""
        return any(m["waited"] != "a redone decision" for m in self.moves)

    def at_barrier(self, impl: Implementation, name: str, context: dict, faulted: bool) -> None:
        """Every barrier: what it tells of a hold in force or a move made; at a committed decision that is not the
        faulted one (its fault is not injected yet), the hold."""
        self._observe(impl, name, context)
        if name == DECISION and not faulted:
            self._offer(impl, context, None)

    def after_fault(self, impl: Implementation, name: str, context: dict, fault: str) -> None:
        """At the faulted decision, once the fault was injected: the hold, if the process lives on (a killed one
        leaves its bridge to a fresh copy, whose own decision is held)."""
        if name == DECISION and impl.alive and not getattr(impl, "killed_by_host", False):
            self._offer(impl, context, fault)

    def _observe(self, impl: Implementation, name: str, context: dict) -> None:
        schedule_id = context.get("schedule_id")
        with self._lock:
            hold = self._hold
            if hold is not None and hold["instance"] == impl.label and hold["schedule_id"] in (None, schedule_id):
                hold["barriers_meanwhile"].append(name)
            for move in self.moves:
                if move["waited"] is None and move["instance"] == impl.label \
                        and move["schedule_id"] in (None, schedule_id):
                    move["waited"] = "a redone decision" if name == REDONE else "the bridge"

    def _offer(self, impl: Implementation, context: dict, fault: str | None) -> None:
        if self.moved:
            return
        if self.busy:
            current = self._hold
            if current is not None and current["outcome"] is None:
                return  # a hold still waits for its transaction
            self._thread.join()  # it is letting go: what waited behind it has come back, so this ends at once
        schedule_id = context.get("schedule_id")  # an implementation that names none has all its rows held
        hold = {"at": DECISION, "instance": impl.label, "schedule_id": schedule_id, "after_fault": fault,
                "taken": False, "outcome": None, "barriers_meanwhile": []}
        self.holds.append(hold)
        conn = None
        try:
            conn = psycopg.connect(self.run.store.dsn(OWNER), autocommit=False)
            held_from = conn.execute("select clock_timestamp()").fetchone()[0]
            # NOWAIT: a row another transaction holds (a racer's, or the cancel fault's own hold) is not ours to
            # hold; the next committed decision offers the hold again.
            rows = conn.execute("select dispatch_id from appsurface_durable.schedule_dispatch "
                                "where %(id)s::uuid is null or schedule_id = %(id)s::uuid for update nowait",
                                {"id": schedule_id}).fetchall()
        except psycopg.Error as exc:
            if conn is not None:
                conn.close()
            hold["outcome"] = f"not taken: {type(exc).__name__}: {exc}".strip()
            self.run.note("bridge-clock-released", moved=False, reason=f"hold failed: {type(exc).__name__}: {exc}")
            return
        hold["taken"] = True
        self.run.note("bridge-clock-hold", instance=impl.label, schedule_id=schedule_id, rows=len(rows),
                      **({"after_fault": fault} if fault else {}))
        with self._lock:
            self._hold = hold
        self._thread = threading.Thread(target=self._wait_and_move, args=(impl, conn, hold, held_from), daemon=True)
        self._thread.start()

    @property
    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()

    def _wait_and_move(self, impl: Implementation, conn: psycopg.Connection, hold: dict,
                       held_from: datetime) -> None:
        """Wait for a transaction to queue behind the hold while the implementation's request runs; then move."""
        try:
            self._wait_and_move_on(impl, conn, hold, held_from)
        except psycopg.Error as exc:  # the server went away under the hold (a crash): no move, and the check says so
            hold["outcome"] = f"the server went away under the hold: {type(exc).__name__}"
            self.run.note("bridge-clock-released", moved=False, reason=f"{type(exc).__name__}: {exc}")
        finally:
            with self._lock:
                self._hold = None
            conn.close()  # ends the holding transaction: the waiting transaction goes on

    def _wait_and_move_on(self, impl: Implementation, conn: psycopg.Connection, hold: dict,
                          held_from: datetime) -> None:
        """Poll the server for a transaction blocked by the hold; move the clock under it, or give up."""
        holder = conn.info.backend_pid
        limit = time.monotonic() + WAIT_S
        waiter = None
        with self.run.world.admin() as admin:
            while time.monotonic() < limit and impl.label in self.run.asking:
                found = admin.execute("select pid from pg_stat_activity where %s = any(pg_blocking_pids(pid))",
                                      (holder,)).fetchone()
                if found:
                    waiter = found[0]
                    break
                time.sleep(POLL_S)
        if waiter is None:
            hold["outcome"] = ("the request ended with no transaction waiting for the row"
                               if impl.label not in self.run.asking else
                               f"no transaction waited for the row within {WAIT_S:.0f} s")
            self.run.note("bridge-clock-released", moved=False, reason=hold["outcome"])
            return
        moved_at = conn.execute("select clock_timestamp()").fetchone()[0]
        self.run.advance(self.shift)
        hold["outcome"] = "a transaction waited; the clock moved"
        with self._lock:  # before the row is let go: the waiter's next barrier finds the move
            self.moves.append({"schedule_id": hold["schedule_id"], "held_from": held_from, "moved_at": moved_at,
                               "shift_s": self.shift.total_seconds(), "instance": impl.label, "waited": None})
        self.run.note("bridge-clock-released", moved=True, waiting_pid=waiter)
