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


def bridge_candidate(s: Session, schedule_id: uuid.UUID, generation: int) -> dict | None:
    """The one pending occurrence that may take the free slot now, if any (QueueOne)."""
    if slot_busy(s, schedule_id):
        return None
    waiting = pending(s, schedule_id, generation)
    return waiting[0] if waiting else None


def next_due(s: Session, schedule_id: uuid.UUID, generation: int, timing: Timing, cursor: datetime) -> datetime | None:
    """Now if an occurrence can bridge, else the first nominal instant after the cursor (None: never)."""
    if bridge_candidate(s, schedule_id, generation) is not None:
        return s.one(query("schedule", "accepted_at"))["accepted_at_utc"]
    return next_after(timing, cursor)
