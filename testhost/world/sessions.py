"""Sessions the host keeps open for as long as the server that made them lives."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable, Iterator

import psycopg


class KeptSession:
    """One autocommit session, reopened when it broke or the server restarted since it was made.

    A new session costs the server a fork, page faults on shared memory and cold catalog caches, a few
    milliseconds of CPU each; the host's own reads are many and small, so it keeps its sessions.
    """

    def __init__(self, connect: Callable[[], psycopg.Connection], incarnation: Callable[[], int | None]):
        self._connect = connect
        self._incarnation = incarnation
        self._conn: psycopg.Connection | None = None
        self._made_in: int | None = None
        self._lock = threading.Lock()

    @contextmanager
    def __call__(self) -> Iterator[psycopg.Connection]:
        with self._lock:
            incarnation = self._incarnation()
            conn = self._conn
            if conn is None or conn.closed or conn.broken or self._made_in != incarnation \
                    or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                if conn is not None:
                    conn.close()
                conn = self._conn = self._connect()
                self._made_in = incarnation
        try:
            yield conn
        except BaseException:
            if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                conn.close()  # never hand out a session left inside a failed transaction
            raise

    def idle_pid(self) -> int | None:
        """The server process of the session kept open, when it is idle outside a transaction; a session left
        inside one is closed (its locks go with it) and None returned."""
        with self._lock:
            conn = self._conn
            if conn is None or conn.closed or conn.broken:
                return None
            if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                conn.close()
                return None
            return conn.info.backend_pid

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
            self._conn = None


def server_incarnation(world) -> Callable[[], int | None]:
    """The postmaster's pid: a crash and restart makes a new one (None for a server that is not ours)."""
    return lambda: world.cluster.pid if world.cluster is not None else None
