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

from bench.reference_bench import _collect
from bench.replay import record, replay_worker
from reference import ScheduleClient
from testhost.store import copy_store

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
