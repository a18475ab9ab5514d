"""Database sessions: explicit transactions, a client-side deadline on every round trip, one translation point."""

from __future__ import annotations

import os
import re
import socket
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

import psycopg
from psycopg import generators
from psycopg.adapt import PyFormat, Transformer
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row

from .errors import BridgeRoleError, DurableError, translate

SCOPE_SETTING = "appsurface_durable.scope_id"
TRANSACTION_CONTROL = ("begin", "commit", "rollback")
_ROWS = psycopg.pq.ExecStatus.TUPLES_OK
_FAILED = psycopg.pq.ExecStatus.FATAL_ERROR
_TEXT = PyFormat.TEXT
_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%%")


@dataclass(frozen=True)
class _Prepared:
    """A statement prepared on one session: its server-side name, its parameters in $n order, and their
    formats (all text: the server reads each with the input function of the type it inferred)."""

    name: bytes
    params: tuple[str, ...]
    formats: list[PyFormat]


def server_form(sql: str) -> tuple[str, tuple[str, ...]]:
    """psycopg's %(name)s placeholders as PREPARE's $1..$n (a repeated name keeps its number); %% is %."""
    names: list[str] = []

    def number(match: re.Match) -> str:
        if match.group(0) == "%%":
            return "%"
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    return _PLACEHOLDER.sub(number, sql), tuple(names)


# The bridge's proof: the scope is set only when current_user is the configured runtime role (else the
# scope column is null and the caller refuses); the routing ID resolves inside the same transaction.
# set_local_scope binds the scope to this transaction: it authorizes nothing after COMMIT or ROLLBACK.
PROVE_AND_SET_SCOPE = """select current_user as user,
       case when current_user = %(runtime_role)s
            then appsurface_durable.set_local_scope(
                     coalesce(%(scope_id)s, appsurface_durable.scope_for_routing_id(%(routing_id)s::bigint), ''))
       end as scope"""


# Every statement the reference runs is prepared (by `batch`, or inside PL/pgSQL) and keyed on IDs, so a
# plan made for any values serves all of them. With the default, a statement is planned afresh for each of
# its first five runs; an adapter's session in the crash matrix rarely runs one more often than that, and
# planning was a sixth of its backend's CPU (26.9 against 22.5 ms for a short session). Long sessions are
# unchanged: they settle on the generic plan anyway.
GENERIC_PLANS = "-c plan_cache_mode=force_generic_plan"


def _with_generic_plans(dsn: str) -> str:
    """The DSN's own `options` (or PGOPTIONS'), then the reference's plan cache mode."""
    given = conninfo_to_dict(dsn).get("options") or os.environ.get("PGOPTIONS", "")
    return f"{given} {GENERIC_PLANS}".strip()


def _pipeline(pgconn, commands: list[tuple[Any, tuple]]):
    """Send `commands` as one pipeline closed by a Sync, and return each command's results (one result each:
    the first failure, then PIPELINE_ABORTED for the rest). A psycopg generator, driven by `Connection.wait`.

    Between commands and Sync the server runs one implicit transaction, or goes on with the explicit one a
    BEGIN opened, as a multi-statement simple query would."""
    pgconn.enter_pipeline_mode()
    try:
        for send, args in commands:
            send(*args)
        pgconn.pipeline_sync()
        yield from generators.send(pgconn)
        results = []
        for _ in commands:
            results.append((yield from generators.fetch_many(pgconn)))
        yield from generators.fetch_many(pgconn)  # the Sync's own result
    except BaseException:
        # The connection is in an unknown place of the exchange: nothing more can be read from it in order.
        pgconn.finish()
        raise
    pgconn.exit_pipeline_mode()
    return results


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
                                        application_name=application_name, row_factory=dict_row,
                                        options=_with_generic_plans(dsn))
        except psycopg.Error as exc:
            raise translate(exc) from exc
        # psycopg's own automatic preparation stays off: after a ROLLBACK it sends DEALLOCATE ALL, which would
        # also drop the statements `batch` prepared. Other statements go unprepared, as before their fifth use.
        self.conn.prepare_threshold = None
        self._watchdog = _Watchdog(self.conn)
        self._adapters = Transformer.from_context(self.conn)  # the connection's dumpers and loaders
        self._encoding = self.conn.info.encoding
        # A prepared statement's name -> its result's column names and the loaders of its columns.
        self._results: dict[bytes, tuple[list[str], Transformer]] = {}
        self._prepared: dict[str, _Prepared] = {}
        self._statements = 0
        self._deferred: list[tuple[str, Any]] = []
        self.read_rows: list[list[dict]] = []

    @property
    def broken(self) -> bool:
        return self.conn.closed or self.conn.broken

    def close(self) -> None:
        self._watchdog.close()
        self.conn.close()

    def execute(self, sql: str, params: Any = None, *, committing: bool = False) -> psycopg.Cursor:
        self.flush()  # a statement must see the writes queued before it
        self._watchdog.arm(self.deadline)
        try:
            return self.conn.execute(sql, params)
        except psycopg.Error as exc:
            raise translate(exc, during_commit=committing) from exc
        finally:
            self._watchdog.disarm()

    def one(self, sql: str, params: Any = None) -> dict | None:
        return self.execute(sql, params).fetchone()

    def all(self, sql: str, params: Any = None) -> list[dict]:
        return self.execute(sql, params).fetchall()

    @contextmanager
    def transaction(self, *, reads: tuple[tuple[str, Any], ...] = ()) -> Iterator["Session"]:
        """BEGIN … COMMIT; any exception rolls back (quietly if the connection is gone) and propagates.

        `reads` run right after BEGIN in the same round trip; the rows each returned are in `self.read_rows`.
        """
        # Transaction control is never prepared: a Parse sent on its own and waiting for its reply would
        # leave a COMMIT unsent on a lost reply, rather than its outcome unknown.
        if reads:
            try:
                self.read_rows = self.batch(("begin", None), *reads)[1:]
            except BaseException:
                self._rollback_quietly()
                raise
        else:
            self.execute("begin")
        with self._open_transaction():
            yield self

    @contextmanager
    def _open_transaction(self) -> Iterator["Session"]:
        """The body of a begun transaction, then its deferred writes and COMMIT in one round trip; ROLLBACK if
        the body raises or a write fails."""
        try:
            yield self
        except BaseException:
            self._deferred.clear()
            self._rollback_quietly()
            raise
        self._commit()

    def defer(self, sql: str, params: Any = None) -> None:
        """Queue a write whose result nobody reads; it is sent with the next batch, flush or COMMIT."""
        self._deferred.append((sql, params))

    def flush(self) -> None:
        """Send the deferred writes now (one round trip), for a statement that must see them."""
        if self._deferred:
            self.batch()

    def batch(self, *statements: tuple[str, Any]) -> list[list[dict]]:
        """The deferred writes, then `statements`, in one round trip; the rows each statement returned.

        The statements travel as one pipeline of the extended query protocol, closed by one Sync. Every
        statement with parameters is prepared on the server once per session (its Parse rides in the same
        pipeline the first time) and then only bound and executed, its parameters sent as text by psycopg's
        own dumpers. A failing statement aborts the rest.
        """
        queued, self._deferred = self._deferred, []
        return self._send([*queued, *statements])[len(queued):]

    def _send(self, sent: list[tuple[str, Any]], *, committing: bool = False) -> list[list[dict]]:
        """`sent` as one pipeline; the rows each statement returned."""
        if not sent:
            return []
        pgconn = self.conn.pgconn
        commands: list[tuple[Any, tuple]] = []
        executes: list[bytes | None] = []  # per command: the prepared statement it runs (or None)
        slots: list[int] = []
        new: dict[str, _Prepared] = {}
        dump = self._adapters.dump_sequence
        for sql, params in sent:
            if sql in TRANSACTION_CONTROL or params is None:
                slots.append(len(commands))
                commands.append((pgconn.send_query_params, (sql.encode(self._encoding), None)))
                executes.append(None)
                continue
            prepared = self._prepared.get(sql) or new.get(sql)
            if prepared is None:
                # A fresh name each time: a statement prepared in a pipeline that failed later may exist
                # unrecorded; it is never reused.
                self._statements += 1
                server_sql, names = server_form(sql)
                prepared = new[sql] = _Prepared(f"reference_{self._statements}".encode(), names,
                                                [_TEXT] * len(names))
                commands.append((pgconn.send_prepare, (prepared.name, server_sql.encode(self._encoding))))
                executes.append(None)
            values = dump([params[name] for name in prepared.params], prepared.formats) if prepared.params else None
            slots.append(len(commands))
            commands.append((pgconn.send_query_prepared, (prepared.name, values)))
            executes.append(prepared.name)
        results = self._round_trip(commands, executes, committing=committing)
        self._prepared.update(new)
        return [results[slot] for slot in slots]

    def _round_trip(self, commands: list[tuple[Any, tuple]], executes: list[bytes | None], *,
                    committing: bool = False) -> list[list[dict]]:
        """One pipeline and the rows of each command in it, through psycopg's own protocol generators: a
        cursor's per-statement bookkeeping was a third of a processor's Python CPU.

        `executes` names, per command, the prepared statement it runs (or None): a prepared statement's
        column names and column loaders are set up once, since its result columns cannot change while it
        exists."""
        self._watchdog.arm(self.deadline)
        try:
            with self.conn.lock:
                results = self.conn.wait(_pipeline(self.conn.pgconn, commands))
        except psycopg.Error as exc:
            raise translate(exc, during_commit=committing) from exc
        finally:
            self._watchdog.disarm()
        rows: list[list[dict]] = []
        for index, (result,) in enumerate(results):
            status = result.status
            if status == _FAILED:
                error = psycopg.errors.error_from_result(result, encoding=self._encoding)
                raise translate(error, during_commit=committing) from error
            if status != _ROWS:
                rows.append([])
                continue
            prepared = executes[index]
            known = self._results.get(prepared) if prepared else None
            if known is None:
                names = [result.fname(i).decode(self._encoding) for i in range(result.nfields)]
                loaders = Transformer.from_context(self.conn) if prepared else self._adapters
                loaders.set_pgresult(result)
                if prepared:
                    self._results[prepared] = (names, loaders)
            else:
                names, loaders = known
                loaders.set_pgresult(result, set_loaders=False)
            rows.append(loaders.load_rows(0, result.ntuples, lambda values: dict(zip(names, values))))
        return rows

    def _commit(self) -> None:
        """The deferred writes and COMMIT in one pipeline: a failing write aborts the COMMIT with it, and the
        transaction it left open and aborted is rolled back."""
        queued, self._deferred = self._deferred, []
        try:
            self._send([*queued, ("commit", None)], committing=True)
        except BaseException:
            self._rollback_quietly()  # nothing to do on a lost connection; else the transaction is still open
            raise

    def _rollback_quietly(self) -> None:
        self._deferred.clear()
        if self.broken:
            return
        try:
            self.execute("rollback")
        except DurableError:
            self.conn.close()

    @contextmanager
    def scoped(self, scope_id: str | None, runtime_role: str, *, routing_id: int | None = None,
               reads: tuple[tuple[str, Any], ...] = ()) -> Iterator["Session"]:
        """The scoped runtime transaction: prove the runtime role, then set the local scope.

        A processor knows only the claim's scope routing ID; it is resolved to the scope inside this same
        transaction (no read outside the two transaction forms). `current_scope` is '' when it names none.
        BEGIN, the proof and `reads` (statements run once the scope is set) travel in one round trip; the
        rows each read returned are in `self.read_rows`.
        """
        try:
            proof, *self.read_rows = self.batch(("begin", None), (PROVE_AND_SET_SCOPE, {
                "runtime_role": runtime_role, "scope_id": scope_id, "routing_id": routing_id}), *reads)[1:]
        except BaseException:
            self._rollback_quietly()
            raise
        if proof[0]["scope"] is None:
            self._rollback_quietly()
            raise BridgeRoleError(f"current_user is {proof[0]['user']}, not the configured runtime role "
                                  f"{runtime_role}; refusing to set the local scope")
        self.current_scope = proof[0]["scope"]
        with self._open_transaction():
            yield self
