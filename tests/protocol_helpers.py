"""Helpers for reference tests: specs, owner-side reads, and snapshots to prove nothing durable changed."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import reference
from reference import ScheduleSpec, Target

TABLES = ("schedule_commands", "schedule_definitions", "schedule_generations", "schedule_occurrences",
          "schedule_dispatch", "schedule_dispatch_timing", "schedule_history", "work_items", "scopes", "store_runtime")


def every(seconds: float = 60, **kwargs) -> ScheduleSpec:
    return ScheduleSpec(kind="every", every=timedelta(seconds=seconds), target=Target("send-report", {"n": 1}), **kwargs)


def after(seconds: float = 60, **kwargs) -> ScheduleSpec:
    return ScheduleSpec(kind="after", after=timedelta(seconds=seconds), target=Target("remind", {}), **kwargs)


def at(when: datetime, **kwargs) -> ScheduleSpec:
    return ScheduleSpec(kind="at", at=when, target=Target("launch", {}), **kwargs)


def rows(store, table: str, where: str = "true", params=()) -> list[dict]:
    with store.owner() as conn:
        return conn.execute(f"select * from appsurface_durable.{table} where {where}", params).fetchall()


def snapshot(store) -> dict[str, list]:
    """Every protocol table as the owner sees it, in a stable order."""
    with store.owner() as conn:
        return {table: sorted(map(repr, conn.execute(f"select * from appsurface_durable.{table}").fetchall()))
                for table in TABLES}


def server_now(store) -> datetime:
    with store.owner() as conn:
        return conn.execute("select clock_timestamp() as now").fetchone()["now"]


def occurrences(store, schedule_id) -> list[dict]:
    return rows(store, "schedule_occurrences", "schedule_id = %s order by first_nominal_utc, occurrence_kind",
                (schedule_id,))


def definition(store, schedule_id) -> dict:
    return rows(store, "schedule_definitions", "schedule_id = %s", (schedule_id,))[0]


def drain(processor: reference.ScheduleProcessor, maximum: int = 64, passes: int = 50) -> list[reference.ProcessCounts]:
    """Run passes until one claims nothing."""
    done = []
    for _ in range(passes):
        counts = processor.process_due(reference.ProcessRequest(maximum_schedules=maximum))
        done.append(counts)
        if counts.claimed == 0:
            return done
    raise AssertionError(f"still claiming after {passes} passes: {done[-3:]}")


UTC = timezone.utc


def race_worker(runtime_dsn: str, dispatcher_dsn: str, start, results) -> None:
    """One racing processor process: passes until one claims nothing; reports its totals."""
    processor = reference.ScheduleProcessor(runtime_dsn, dispatcher_dsn)
    start.wait()
    totals = {"claimed": 0, "materialized": 0, "fenced": 0, "aborted": 0}
    while True:
        counts = processor.process_due(reference.ProcessRequest(maximum_schedules=16))
        for key in totals:
            totals[key] += getattr(counts, key)
        if counts.claimed == 0:
            break
    processor.close()
    results.put(totals)


def fake_case_worker(plan, command, log_dir, baseline):
    """Stands in for a certification worker: passes every case except the one named "die", where the
    worker process itself dies, as a crashed world or interpreter would."""
    import os
    if plan.scenario == "die":
        os._exit(3)
    return {"case": {"id": plan.id, "verdict": "pass", "reason": "", "checks": [], "timeline": [], "duration_s": 0,
                     "barrier_hits": {}, "fallbacks": []}, "baseline": None, "implementation": "fake"}
