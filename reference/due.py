"""What a schedule's dispatch row should say next: which pending occurrence may bridge, and when it is due."""

from __future__ import annotations

import uuid
from datetime import datetime

from .db import Session
from .evaluator import Timing, next_after
from .sql import query


def slot_busy(s: Session, schedule_id: uuid.UUID) -> bool:
    return s.one(query("schedule", "slot_busy"), {"schedule_id": schedule_id})["busy"]


def pending(s: Session, schedule_id: uuid.UUID, generation: int) -> list[dict]:
    """Pending occurrences of the generation, locked: non-coalesced first, then by first instant."""
    return s.all(query("schedule", "pending_occurrences"), {"schedule_id": schedule_id, "generation": generation})


def candidate(slot_busy: bool, waiting: list[dict]) -> dict | None:
    """The one pending occurrence that may take the free slot now, if any (QueueOne), from rows already read:
    waiting is ordered as `pending` orders it."""
    return waiting[0] if waiting and not slot_busy else None


def bridge_candidate(s: Session, schedule_id: uuid.UUID, generation: int) -> dict | None:
    """The one pending occurrence that may take the free slot now, if any (QueueOne)."""
    return candidate(slot_busy(s, schedule_id), pending(s, schedule_id, generation))


def next_due(s: Session, schedule_id: uuid.UUID, generation: int, timing: Timing, cursor: datetime) -> datetime | None:
    """Now if an occurrence can bridge, else the first nominal instant after the cursor (None: never)."""
    if bridge_candidate(s, schedule_id, generation) is not None:
        return s.one(query("schedule", "accepted_at"))["accepted_at_utc"]
    return next_after(timing, cursor)
