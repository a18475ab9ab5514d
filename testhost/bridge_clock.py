"""The server clock moved inside a bridge transaction, so the Work's own clock_timestamp() sample can be told
from the bridge's transaction_timestamp() by seconds, not microseconds.

No barrier sits between a bridge's BEGIN and its Work acceptance, so the host makes the bridge wait instead: at
a committed decision it takes the schedule's dispatch row FOR UPDATE (every scoped transaction locks that row
first), lets the implementation go on, and once the next transaction waits for the lock, moves the clock and
lets go. The waiting transaction began before the move; everything it samples afterwards is after it.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import psycopg

if TYPE_CHECKING:
    from .implementation import Implementation
    from .runner import CaseRun

# How long the host holds the row for a bridge to come; a decision that bridges nothing leaves the hold to run out.
WAIT_S = 10.0
POLL_S = 0.01


class BridgeClock:
    """One scenario's planned move: tried at each committed decision until one bridge waited and the clock moved."""

    def __init__(self, run: "CaseRun", shift_s: float):
        self.run = run
        self.shift = timedelta(seconds=shift_s)
        self.moves: list[dict] = []  # {"schedule_id", "held_from", "moved_at", "shift_s"}: what the check needs
        self.attempts = 0
        self._thread: threading.Thread | None = None

    @property
    def moved(self) -> bool:
        return bool(self.moves)

    def at_barrier(self, impl: "Implementation", name: str, context: dict, faulted: bool) -> None:
        """At a committed decision (not the faulted one: its process may be gone), hold the row for the bridge."""
        if name != "schedule-decision-after-commit" or faulted or self.moved or self.busy:
            return
        self.attempts += 1
        schedule_id = context.get("schedule_id")  # an implementation that names none has all its rows held
        conn = None
        try:
            conn = psycopg.connect(self.run.store.dsn("appsurface_durable_owner"), autocommit=False)
            held_from = conn.execute("select clock_timestamp()").fetchone()[0]
            rows = conn.execute("select dispatch_id from appsurface_durable.schedule_dispatch "
                                "where %(id)s::uuid is null or schedule_id = %(id)s::uuid for update",
                                {"id": schedule_id}).fetchall()
        except psycopg.Error as exc:  # the next committed decision tries again; a run with no move fails the check
            if conn is not None:
                conn.close()
            self.run.note("bridge-clock-released", moved=False, reason=f"hold failed: {type(exc).__name__}: {exc}")
            return
        self.run.note("bridge-clock-hold", instance=impl.label, schedule_id=schedule_id, rows=len(rows))
        self._thread = threading.Thread(target=self._wait_and_move, args=(impl, conn, schedule_id, held_from),
                                        daemon=True)
        self._thread.start()

    @property
    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()

    def _wait_and_move(self, impl: "Implementation", conn: psycopg.Connection, schedule_id: str | None,
                       held_from: datetime) -> None:
        """Wait for a transaction to queue behind the hold while the implementation's request runs; then move."""
        try:
            self._wait_and_move_on(impl, conn, schedule_id, held_from)
        except psycopg.Error as exc:  # the server went away under the hold (a crash): no move, and the check says so
            self.run.note("bridge-clock-released", moved=False, reason=f"{type(exc).__name__}: {exc}")
        finally:
            conn.close()  # ends the holding transaction: the bridge goes on

    def _wait_and_move_on(self, impl: "Implementation", conn: psycopg.Connection, schedule_id: str | None,
                          held_from: datetime) -> None:
        """Poll the server for a transaction blocked by the hold; move the clock under it, or give up."""
        holder = conn.info.backend_pid
        limit = time.monotonic() + WAIT_S
        waiter = None
        with self.run.world.admin() as admin:
            while time.monotonic() < limit and impl.label in self.run._asking:
                found = admin.execute("select pid from pg_stat_activity where %s = any(pg_blocking_pids(pid))",
                                      (holder,)).fetchone()
                if found:
                    waiter = found[0]
                    break
                time.sleep(POLL_S)
        if waiter is None:
            self.run.note("bridge-clock-released", moved=False, reason="no transaction waited for the row")
            return
        moved_at = conn.execute("select clock_timestamp()").fetchone()[0]
        self.run.advance(self.shift)
        self.moves.append({"schedule_id": schedule_id, "held_from": held_from, "moved_at": moved_at,
                           "shift_s": self.shift.total_seconds()})
        self.run.note("bridge-clock-released", moved=True, waiting_pid=waiter)
