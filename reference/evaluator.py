"""The evaluator: pure time arithmetic over one generation, in whole microseconds. No database.

Nominal instants are evaluated in (cursor, cutoff]. A cutoff at or behind the cursor is a no-op; a
due instant later than the safety window behind the cutoff is an anomaly (suspend, cursor unchanged);
one due instant is a nominal occurrence; several make one declared recovery range.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
MICROSECOND = timedelta(microseconds=1)


def to_us(when: datetime) -> int:
    return (when - EPOCH) // MICROSECOND


def from_us(us: int) -> datetime:
    return EPOCH + timedelta(microseconds=us)


@dataclass(frozen=True)
class Timing:
    """The time rule of one generation: At (one instant), After (one instant) or Every (a grid)."""

    kind: str
    at_utc: datetime | None = None
    after: timedelta | None = None
    every: timedelta | None = None
    anchor_utc: datetime | None = None
    accepted_at_utc: datetime | None = None

    def single_instant(self) -> datetime | None:
        if self.kind == "at":
            return self.at_utc
        if self.kind == "after":
            return self.accepted_at_utc + self.after
        return None


def next_after(timing: Timing, t: datetime) -> datetime | None:
    """The first nominal instant strictly after t, or None if there is none."""
    single = timing.single_instant()
    if timing.kind != "every":
        return single if single > t else None
    anchor, step = to_us(timing.anchor_utc), timing.every // MICROSECOND
    n = (to_us(t) - anchor) // step + 1
    return from_us(anchor + n * step)


def last_at_or_before(timing: Timing, t: datetime) -> datetime | None:
    """The last nominal instant at or before t, or None."""
    single = timing.single_instant()
    if timing.kind != "every":
        return single if single <= t else None
    anchor, step = to_us(timing.anchor_utc), timing.every // MICROSECOND
    n = (to_us(t) - anchor) // step
    return from_us(anchor + n * step)


def count_between(timing: Timing, after: datetime, until: datetime) -> int:
    """How many nominal instants lie in (after, until]."""
    first = next_after(timing, after)
    if first is None or first > until:
        return 0
    if timing.kind != "every":
        return 1
    return (to_us(until) - to_us(first)) // (timing.every // MICROSECOND) + 1


@dataclass(frozen=True)
class NoOp:
    reason: str  # "cutoff-not-after-cursor" or "nothing-due"


@dataclass(frozen=True)
class Anomaly:
    """The cutoff is further past the next due instant than the safety window allows."""

    expected_due_utc: datetime
    cutoff_utc: datetime
    lateness: timedelta
    safety_window: timedelta


@dataclass(frozen=True)
class Due:
    """Instants in (cursor, cutoff]: one is nominal, several are one declared recovery range."""

    first_utc: datetime
    last_utc: datetime
    count: int

    @property
    def kind(self) -> str:
        return "nominal" if self.count == 1 else "recovery"


Evaluation = NoOp | Anomaly | Due


def evaluate(timing: Timing, cursor: datetime, cutoff: datetime, safety_window: timedelta) -> Evaluation:
    if cutoff <= cursor:
        return NoOp("cutoff-not-after-cursor")
    first = next_after(timing, cursor)
    if first is None or first > cutoff:
        return NoOp("nothing-due")
    lateness = cutoff - first
    if lateness > safety_window:
        return Anomaly(first, cutoff, lateness, safety_window)
    return Due(first, last_at_or_before(timing, cutoff), count_between(timing, cursor, cutoff))
