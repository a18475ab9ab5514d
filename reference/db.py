"""Database sessions: explicit transactions, a client-side deadline on every round trip, one translation point."""

from __future__ import annotations

import os
import socket
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator

import psycopg
from psycopg.rows import dict_row

from .errors import BridgeRoleError, DurableError, translate

SCOPE_SETTING = "appsurface_durable.scope_id"


class _Watchdog:
    """Shuts the socket down when an armed round trip outlives its deadline.

    The server cannot time out a reply that never reaches us (a lost COMMIT reply), so the client keeps
    its own deadline. Armed only around a round trip, never while the code waits elsewhere.
    """

    def __init__(self, conn: psycopg.Connection):
        self._conn = conn
        self._cond = threading.Condition()
        self._deadline: float | None = None
        self._wakes_at: float | None = None  # when the thread looks again; None: only when notified
        self._closed = False
        self.fired = False
        self._thread = threading.Thread(target=self._run, name="db-deadline", daemon=True)
        self._thread.start()

    def arm(self, seconds: float) -> None:
        with self._cond:
            self._deadline = time.monotonic() + seconds
            # Wake the thread only if it would otherwise look too late: waking it on every round trip
            # cost a thread switch per statement.
            if self._wakes_at is None or self._deadline < self._wakes_at:
                self._cond.notify()

    def disarm(self) -> None:
        with self._cond:
            self._deadline = None

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()

    def _run(self) -> None:
        with self._cond:
            while not self._closed:
                if self._deadline is None:
                    self._wakes_at = None
                    self._cond.wait()
                    continue
                remaining = self._deadline - time.monotonic()
                if remaining > 0:
                    self._wakes_at = self._deadline
                    self._cond.wait(remaining)
                    continue
                self._deadline = self._wakes_at = None
                self.fired = True
                try:
                    with socket.socket(fileno=os.dup(self._conn.fileno())) as sock:
                        sock.shutdown(socket.SHUT_RDWR)
                except (OSError, psycopg.Error):
                    pass


class Session:
    """One connection used with explicit BEGIN/COMMIT so barriers can sit right before and after COMMIT."""

    def __init__(self, dsn: str, *, deadline: float = 30.0, application_name: str = "appsurface-durable"):
        self.deadline = deadline
        self.current_scope = ""
        try:
            self.conn = psycopg.connect(dsn, autocommit=True, connect_timeout=max(2, int(deadline)),
                                        application_name=application_name, row_factory=dict_row)
        except psycopg.Error as exc:
            raise translate(exc) from exc
        self._watchdog = _Watchdog(self.conn)

    @property
    def broken(self) -> bool:
        return self.conn.closed or self.conn.broken

    def close(self) -> None:
        self._watchdog.close()
        self.conn.close()

    def execute(self, sql: str, params: Any = None, *, committing: bool = False,
                prepare: bool | None = None) -> psycopg.Cursor:
        self._watchdog.arm(self.deadline)
        try:
            return self.conn.execute(sql, params, prepare=prepare)
        except psycopg.Error as exc:
            raise translate(exc, during_commit=committing) from exc
        finally:
            self._watchdog.disarm()

    def one(self, sql: str, params: Any = None) -> dict | None:
        return self.execute(sql, params).fetchone()

    def all(self, sql: str, params: Any = None) -> list[dict]:
        return self.execute(sql, params).fetchall()

    @contextmanager
    def transaction(self) -> Iterator["Session"]:
        """BEGIN … COMMIT; any exception rolls back (quietly if the connection is gone) and propagates."""
        # Transaction control is never auto-prepared: psycopg would send the Parse on its own and wait for
        # its reply first, so a lost reply would leave the COMMIT unsent rather than its outcome unknown.
        self.execute("begin", prepare=False)
        try:
            yield self
        except BaseException:
            self._rollback_quietly()
            raise
        self.execute("commit", committing=True, prepare=False)

    def _rollback_quietly(self) -> None:
        if self.broken:
            return
        try:
            self.execute("rollback", prepare=False)
        except DurableError:
            self.conn.close()

    @contextmanager
    def scoped(self, scope_id: str | None, runtime_role: str, *, routing_id: int | None = None) -> Iterator["Session"]:
        """The scoped runtime transaction: prove the runtime role, then set the local scope.

        A processor knows only the claim's scope routing ID; it is resolved to the scope inside this same
        transaction (no read outside the two transaction forms). `current_scope` is '' when it names none.
        """
        with self.transaction():
            user = self.one("select current_user as user")["user"]
            if user != runtime_role:
                raise BridgeRoleError(f"current_user is {user}, not the configured runtime role {runtime_role}; "
                                      "refusing to set the local scope")
            self.current_scope = self.one(
                "select set_config(%s, coalesce(%s, appsurface_durable.scope_for_routing_id(%s), ''), true) as scope",
                (SCOPE_SETTING, scope_id, routing_id))["scope"]
            yield self
