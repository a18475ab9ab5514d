"""The reference benchmark's replay of recorded round trips, and its worker collection: the replay does the
recorded work or fails loudly, and a worker that dies fails the run at once."""

import multiprocessing
import os
import queue
import threading
import time
from dataclasses import replace
from datetime import timedelta

import psycopg
import pytest

from bench.reference_bench import _collect, _PgBench
from bench.sql_replay import _Client, record, replay_worker, segment
from reference import ScheduleClient
from testhost.world.store import copy_store

from protocol_helpers import every

SCHEDULES = 3


@pytest.fixture
def copies(world, store):
    """Two copies of a store holding SCHEDULES due schedules, made before anything processed them."""
    with ScheduleClient(store.runtime_dsn, "tenant-a") as client:
        for _ in range(SCHEDULES):
            client.create(every(60))
    world.clock.shift(timedelta(seconds=61))
    made = [copy_store(store, f"{store.dbname}_{use}") for use in ("recorded", "replayed")]
    yield made
    for copy in made:
        copy.drop()


def _replay(target, recording) -> dict:
    """One replay client, in this process."""
    ready, results, start = queue.Queue(), queue.Queue(), threading.Event()
    start.set()
    replay_worker(target.runtime_dsn, target.dispatcher_dsn, recording, ready, start, results)
    return results.get_nowait()


def _links(target) -> set[tuple]:
    with psycopg.connect(target.owner_dsn) as conn:
        return set(conn.execute("select schedule_id, first_nominal_utc, work_id from "
                                "appsurface_durable.schedule_occurrences where state = 'materialized'").fetchall())


def test_a_recorded_pass_replayed_on_a_copy_materializes_the_same_occurrences(copies):
    recorded, replayed = copies
    recording = record(recorded.runtime_dsn, recorded.dispatcher_dsn, batch=64)
    assert len(recording.after_claim) == SCHEDULES
    report = _replay(replayed, recording)
    assert report["replayed"] == SCHEDULES
    assert len(_links(replayed)) == SCHEDULES
    assert _links(replayed) == _links(recorded)  # the same occurrences, linked to the same Work


def test_a_replayed_statement_that_fails_stops_the_replay(copies):
    recorded, replayed = copies
    recording = record(recorded.runtime_dsn, recorded.dispatcher_dsn, batch=64)
    # Corrupt one parameter of every Schedule's first round trip after its claim (the role proof's routing ID).
    broken = {}
    for schedule_id, trips in recording.after_claim.items():
        (role, statements), *rest = trips
        statements = [(sql, [b"not-a-number"] * len(values), prepared) if values else (sql, values, prepared)
                      for sql, values, prepared in statements]
        broken[schedule_id] = [(role, statements), *rest]
    with pytest.raises(RuntimeError, match="replayed statement failed"):
        _replay(replayed, replace(recording, after_claim=broken))
    assert _links(replayed) == set()


def _exit_at_once(code: int) -> None:
    os._exit(code)


def test_collecting_from_workers_fails_at_once_when_one_dies():
    context = multiprocessing.get_context("spawn")
    worker = context.Process(target=_exit_at_once, args=(3,))
    worker.start()
    began = time.monotonic()
    with pytest.raises(RuntimeError, match=r"workers exited with \[3\]"):
        _collect(context.Queue(), [worker], timeout=60)
    assert time.monotonic() - began < 20


def _wait_forever() -> None:
    time.sleep(3600)


def test_collecting_from_a_worker_that_stays_silent_fails_at_its_timeout():
    context = multiprocessing.get_context("spawn")
    worker = context.Process(target=_wait_forever)
    worker.start()
    try:
        with pytest.raises(RuntimeError, match="workers silent for 1 s"):
            _collect(context.Queue(), [worker], timeout=1)
        worker.join(10)
        assert not worker.is_alive()  # the silent worker is killed, not left behind
    finally:
        worker.kill()


def test_recording_a_store_with_nothing_due_is_refused(store):
    with pytest.raises(RuntimeError, match="claimed nothing"):
        record(store.runtime_dsn, store.dispatcher_dsn, batch=64)


def test_a_recording_whose_first_runtime_trip_precedes_any_claim_is_refused():
    with pytest.raises(RuntimeError, match="before any claim"):
        segment([("runtime", [("begin", None, False)], [[]])])


def test_a_replay_client_that_cannot_connect_or_prepare_says_so(store):
    with pytest.raises(RuntimeError, match="could not connect"):
        _Client(store.runtime_dsn.replace("appsurface_durable_runtime", "no_such_role"), store.dispatcher_dsn)
    client = _Client(store.runtime_dsn, store.dispatcher_dsn)
    try:
        with pytest.raises(RuntimeError, match="prepare failed"):
            client.plan("runtime", [("select from no_such_table where x = $1", [b"1"], True)])
    finally:
        client.close()


def test_pgbench_that_fails_to_initialize_leaves_no_database_behind(world):
    bench = _PgBench(world)
    bench._pgbench = "/nonexistent/pgbench"
    with pytest.raises(FileNotFoundError):
        bench.__enter__()
    with psycopg.connect(world.admin_dsn(), autocommit=True) as conn:
        assert conn.execute("select 1 from pg_database where datname = 'bench_pgbench'").fetchone() is None


def _claims_work_it_did_not_do(ready, start, results) -> None:
    from bench.reference_bench import SCHEDULES as ALL
    ready.put(True)
    start.wait()
    now = time.monotonic()
    results.put({"replayed": ALL // 2, "began": now, "ended": now + 1, "cpu": 0.0, "server_cpu": 0.0})


def test_timed_workers_that_report_occurrences_the_store_does_not_hold_fail_the_run(world, store):
    from bench.reference_bench import _time_workers

    with pytest.raises(RuntimeError, match="occurrences materialized"):
        _time_workers(world, store, _claims_work_it_did_not_do, (), "replayed")
