"""Four processes racing process_due over 500 due schedules: one occurrence per identity, one Work per
materialized occurrence, nothing left due."""

import multiprocessing
from datetime import timedelta

from reference import ScheduleClient
from protocol_helpers import every, race_worker, rows

SCHEDULES = 500
PROCESSES = 4


def test_four_processors_race_over_500_due_schedules(store, world):
    with ScheduleClient(store.runtime_dsn, "tenant-a") as client:
        ids = {client.create(every(60)).schedule_id for _ in range(SCHEDULES)}
    world.clock.shift(timedelta(seconds=61))
    context = multiprocessing.get_context("spawn")
    start, results = context.Event(), context.Queue()
    workers = [context.Process(target=race_worker, args=(store.runtime_dsn, store.dispatcher_dsn, start, results))
               for _ in range(PROCESSES)]
    for worker in workers:
        worker.start()
    start.set()
    totals = [results.get(timeout=300) for _ in workers]
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    assert sum(t["aborted"] for t in totals) == 0
    assert sum(t["materialized"] for t in totals) == SCHEDULES
    assert sum(1 for t in totals if t["claimed"] > 0) >= 2, f"no race happened: {totals}"

    occurrences = rows(store, "schedule_occurrences")
    per_schedule = {}
    for occ in occurrences:
        per_schedule.setdefault(occ["schedule_id"], []).append(occ)
    assert set(per_schedule) == ids
    assert all(len(occs) == 1 and occs[0]["state"] == "materialized" for occs in per_schedule.values())
    work = rows(store, "work_items")
    assert len(work) == SCHEDULES
    assert {o["work_id"] for o in occurrences} == {w["work_id"] for w in work}
    assert rows(store, "schedule_dispatch", "lease_state <> 'ready'") == []
    with store.owner() as conn:
        due = conn.execute("select count(*) as n from appsurface_durable.schedule_dispatch_timing "
                           "where claimable_at_utc <= transaction_timestamp()").fetchone()["n"]
    assert due == 0
