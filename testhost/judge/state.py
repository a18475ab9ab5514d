"""What the verifier reads: the normative tables of one store, as the migration owner, in one snapshot."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from .identity import parse_instant

if TYPE_CHECKING:
    import psycopg

TABLES = {
    "definitions": "select * from appsurface_durable.schedule_definitions order by schedule_id",
    "generations": "select * from appsurface_durable.schedule_generations order by schedule_id, generation",
    "occurrences": "select * from appsurface_durable.schedule_occurrences "
                   "order by schedule_id, generation, first_nominal_utc, occurrence_kind",
    "work": "select * from appsurface_durable.work_items order by accepted_at_utc, work_id",
    "dispatch": "select d.*, t.due_at_utc, t.claimable_at_utc, t.lease_owner, t.lease_expires_at_utc "
                "from appsurface_durable.schedule_dispatch d "
                "left join appsurface_durable.schedule_dispatch_timing t on t.dispatch_id = d.dispatch_id "
                "order by d.schedule_id",
    "history": "select * from appsurface_durable.schedule_history order by recorded_at_utc, event",
}


@dataclass
class StoreState:
    """One repeatable-read snapshot of every normative table, with the server's time of the snapshot."""

    now: datetime
    definitions: list[dict]
    generations: list[dict]
    occurrences: list[dict]
    work: list[dict]
    dispatch: list[dict]
    history: list[dict]
    drained_at: datetime | None = None  # server time when the final fault-free passes began, if any
    planted: frozenset = frozenset()  # Work IDs a plain Work caller (the scenario) placed under occurrence keys

    def generation(self, schedule_id, generation: int) -> dict | None:
        return next((g for g in self.generations
                     if g["schedule_id"] == schedule_id and g["generation"] == generation), None)

    def definition(self, schedule_id) -> dict | None:
        return next((d for d in self.definitions if d["schedule_id"] == schedule_id), None)

    def occurrences_of(self, schedule_id) -> list[dict]:
        return [o for o in self.occurrences if o["schedule_id"] == schedule_id]

    def work_by_id(self) -> dict:
        return {w["work_id"]: w for w in self.work}


def is_clock_anomaly(row: dict) -> bool:
    """Whether a history row is a `clock-anomaly` suspension."""
    return row["event"] == "suspended" and (row["detail"] or {}).get("reason") == "clock-anomaly"


def recorded_cursor(row: dict) -> datetime | None:
    """The cursor a suspension row's detail records (`cursor_utc`, an RFC 3339 instant); None where it is missing or
    unreadable (`processor-history` judges such a row)."""
    try:
        return parse_instant((row["detail"] or {})["cursor_utc"])
    except (KeyError, AttributeError, TypeError, ValueError):
        return None


def read_state(owner: "str | psycopg.Connection") -> StoreState:
    """From the migration owner's DSN, or on an open autocommit connection of the owner (the case's)."""
    import psycopg  # here only: the rest of the module is what checks read, also where no store is (a controller)
    from psycopg.rows import dict_row

    if isinstance(owner, str):
        with psycopg.connect(owner, autocommit=True) as conn:
            return read_state(conn)
    with owner.transaction(), owner.cursor(row_factory=dict_row) as cur:
        cur.execute("set transaction isolation level repeatable read")
        now = cur.execute("select clock_timestamp() as now").fetchone()["now"]
        tables = {name: cur.execute(sql).fetchall() for name, sql in TABLES.items()}
    return StoreState(now=now, **tables)
