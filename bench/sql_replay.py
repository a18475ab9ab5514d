"""The reference's own round trips, replayed by a client with no logic: what the protocol's SQL costs alone.

A processor runs over one copy of a store with its sessions recording every round trip: each statement's
server form and the exact parameter bytes it sent. Replay clients then run over another copy of the same
store (cloned before either ran), claim with the recorded claim, and send the recorded round trips of the
Schedule each claim returned: the same statements, prepared the same way, with the same parameters, in the
same pipelines, on the same two connections per client. They decode no row and decide nothing; libpq blocks
in its own wait (no deadline thread). What separates their rate from the reference's is the processor's
client side: its logic, its row decoding and parameter encoding, and its deadline.
"""

from __future__ import annotations

import resource
import time
from dataclasses import dataclass

import psycopg
from psycopg import pq

from reference import ProcessRequest, ScheduleProcessor
from reference.db import GENERIC_PLANS, TRANSACTION_CONTROL, Session, server_form

from .figures import backend_cpu

# One statement as sent: its server form (placeholders as $n), its parameters as the text psycopg dumped,
# and whether it ran prepared (every statement with parameters) or as a plain simple statement.
Statement = tuple[str, "list[bytes | None] | None", bool]
RoundTrip = tuple[str, list[Statement]]  # the session that sent it ("runtime" or "dispatcher"), its statements


@dataclass(frozen=True)
class Recording:
    """The claim's round trip (the same for every claim), and per Schedule ID the round trips after its claim."""

    claim: list[Statement]
    after_claim: dict[str, list[RoundTrip]]


class _RecordingSession(Session):
    def __init__(self, dsn: str, log: list, role: str, **kwargs):
        super().__init__(dsn, **kwargs)
        self._log, self._role = log, role

    def _send(self, sent, *, committing: bool = False):
        rows = super()._send(sent, committing=committing)
        trip: list[Statement] = []
        for sql, params in sent:
            if sql in TRANSACTION_CONTROL or params is None:
                trip.append((sql, None, False))
                continue
            prepared = self._prepared[sql]
            values = (self._adapters.dump_sequence([params[name] for name in prepared.params], prepared.formats)
                      if prepared.params else None)
            trip.append((server_form(sql)[0], values, True))
        self._log.append((self._role, trip, rows))
        return rows


class _RecordingProcessor(ScheduleProcessor):
    """The reference's processor, its two sessions recording (reopened when broken, as the processor's own)."""

    def __init__(self, runtime_dsn: str, dispatcher_dsn: str, log: list):
        self._log = log
        super().__init__(runtime_dsn, dispatcher_dsn)

    @property
    def runtime(self) -> Session:
        if self._runtime is None or self._runtime.broken:
            self._runtime = _RecordingSession(self.runtime_dsn, self._log, "runtime", deadline=self.deadline)
        return self._runtime

    @property
    def dispatcher(self) -> Session:
        if self._dispatcher is None or self._dispatcher.broken:
            self._dispatcher = _RecordingSession(self.dispatcher_dsn, self._log, "dispatcher", deadline=self.deadline)
        return self._dispatcher


def record(runtime_dsn: str, dispatcher_dsn: str, batch: int) -> Recording:
    """One processor's passes until nothing is due, with every round trip recorded. Untimed."""
    log: list = []
    processor = _RecordingProcessor(runtime_dsn, dispatcher_dsn, log)
    log.clear()  # the start-up check of the schema version is not part of any occurrence
    try:
        while processor.process_due(ProcessRequest(maximum_schedules=batch)).claimed:
            pass
    finally:
        processor.close()
    return segment(log)


def segment(log: list) -> Recording:
    """The recorded round trips, (role, statements, rows) in order, cut at each claim."""
    claim: list[Statement] | None = None
    after_claim: dict[str, list[RoundTrip]] = {}
    current: list[RoundTrip] | None = None
    for role, trip, rows in log:
        if role == "dispatcher":
            if trip[0][0] == "begin":  # the claim (its COMMIT follows alone)
                claim = trip
                current = after_claim.setdefault(str(rows[1][0]["schedule_id"]), []) if rows[1] else None
            continue
        if current is None:
            raise RuntimeError("a runtime round trip came before any claim")
        current.append((role, trip))
    if claim is None or not after_claim:
        raise RuntimeError("the recorded processor claimed nothing")
    return Recording(claim, after_claim)


def _connect(dsn: str) -> pq.PGconn:
    conn = pq.PGconn.connect(psycopg.conninfo.make_conninfo(dsn, options=GENERIC_PLANS).encode())
    if conn.status != pq.ConnStatus.OK:
        raise RuntimeError(f"replay client could not connect: {conn.error_message.decode(errors='replace')}")
    return conn


class _Client:
    """Two blocking libpq connections, each recorded statement prepared on its own once, before the clock runs."""

    def __init__(self, runtime_dsn: str, dispatcher_dsn: str):
        self.conns = {"runtime": _connect(runtime_dsn), "dispatcher": _connect(dispatcher_dsn)}
        self._names: dict[tuple[str, str], bytes] = {}

    def plan(self, role: str, statements: list[Statement]) -> list[tuple[bytes, list | None, bytes | None]]:
        """Each statement as (text, parameters, prepared name or None), preparing it now if new."""
        planned = []
        for sql, values, prepared in statements:
            name = None
            if prepared:
                name = self._names.get((role, sql))
                if name is None:
                    name = self._names[(role, sql)] = f"replay_{len(self._names)}".encode()
                    result = self.conns[role].prepare(name, sql.encode())
                    if result.status != pq.ExecStatus.COMMAND_OK:
                        raise RuntimeError(f"prepare failed: {result.error_message.decode(errors='replace')}")
            planned.append((sql.encode(), values, name))
        return planned

    def trip(self, role: str, planned) -> list[pq.PGresult]:
        """One pipeline closed by one Sync; every result must succeed (the replay did the recorded work)."""
        conn = self.conns[role]
        conn.enter_pipeline_mode()
        for sql, values, name in planned:
            if name is None:
                conn.send_query_params(sql, None)
            else:
                conn.send_query_prepared(name, values)
        conn.pipeline_sync()
        results = []
        while True:
            result = conn.get_result()
            if result is None:
                continue
            if result.status == pq.ExecStatus.PIPELINE_SYNC:
                break
            if result.status in (pq.ExecStatus.FATAL_ERROR, pq.ExecStatus.PIPELINE_ABORTED):
                raise RuntimeError(f"replayed statement failed: {result.error_message.decode(errors='replace')}")
            results.append(result)
        conn.exit_pipeline_mode()
        return results

    def backend_pids(self) -> list[int]:
        return [conn.backend_pid for conn in self.conns.values()]

    def close(self) -> None:
        for conn in self.conns.values():
            conn.finish()


def replay_worker(runtime_dsn: str, dispatcher_dsn: str, recording: Recording, ready, start, results) -> None:
    """One replay client (its own process): claims until nothing is due, replaying each claimed Schedule's
    recorded round trips; reports what it did and the CPU it and its two backends used."""
    client = _Client(runtime_dsn, dispatcher_dsn)
    claim = client.plan("dispatcher", recording.claim)
    commit = client.plan("dispatcher", [("commit", None, False)])
    after_claim = {schedule_id: [(role, client.plan(role, trip)) for role, trip in trips]
                   for schedule_id, trips in recording.after_claim.items()}
    backends = client.backend_pids()
    column = None
    ready.put(True)
    start.wait()
    began, before, server_before = time.monotonic(), resource.getrusage(resource.RUSAGE_SELF), backend_cpu(backends)
    replayed = 0
    while True:
        claimed = client.trip("dispatcher", claim)[1]
        client.trip("dispatcher", commit)
        if claimed.ntuples == 0:
            break
        if column is None:
            column = [claimed.fname(i) for i in range(claimed.nfields)].index(b"schedule_id")
        schedule_id = claimed.get_value(0, column).decode()
        for role, trip in after_claim[schedule_id]:
            client.trip(role, trip)
        replayed += 1
    ended = time.monotonic()
    after, server_after = resource.getrusage(resource.RUSAGE_SELF), backend_cpu(backends)
    client.close()
    results.put({"replayed": replayed, "began": began, "ended": ended,
                 "cpu": after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime,
                 "server_cpu": server_after - server_before})
