"""The public shapes: schedule definitions as callers give them, and schedules as callers read them."""

from __future__ import annotations

import json
import re
import unicodedata
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from . import problems
from .evaluator import Timing

KINDS = ("at", "after", "every")
MISFIRE_POLICIES = ("run-once", "skip")
DEFAULT_SAFETY_WINDOW = timedelta(hours=1)
MAX_SAFETY_WINDOW = timedelta(days=366)
MAX_PAYLOAD_BYTES = 64 * 1024
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Code points no target command may hold (docs/protocol-notes.md, 35b): control, format, line and paragraph
# separators, and lone surrogates, which no UTF-8 column can store.
_UNFIT = ("Cc", "Cf", "Zl", "Zp", "Cs")


def _unfit(text: str) -> bool:
    return any(unicodedata.category(c) in _UNFIT for c in text)


def _unstorable(value: Any) -> bool:
    """Whether a JSON value holds a string PostgreSQL's jsonb refuses (U+0000, a lone surrogate)."""
    if isinstance(value, str):
        return "\x00" in value or any(unicodedata.category(c) == "Cs" for c in value)
    if isinstance(value, dict):
        return any(_unstorable(k) or _unstorable(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_unstorable(v) for v in value)
    return False


@dataclass(frozen=True)
class Target:
    """What an occurrence starts. Gate A admits registered Work only."""

    command: str
    payload: dict[str, Any] = field(default_factory=dict)
    kind: str = "work"


@dataclass(frozen=True)
class ScheduleSpec:
    """A definition as a caller gives it to create or update."""

    kind: str
    target: Target
    at: datetime | None = None
    after: timedelta | None = None
    every: timedelta | None = None
    anchor: datetime | None = None
    cron: str | None = None
    misfire_policy: str = "run-once"
    overlap_policy: str = "queue-one"
    run_policy: str = "run-once"
    safety_window: timedelta = DEFAULT_SAFETY_WINDOW


def _aware(value: Any) -> bool:
    return isinstance(value, datetime) and value.tzinfo is not None and value.utcoffset() is not None


def _positive(value: Any) -> bool:
    return isinstance(value, timedelta) and value >= timedelta(microseconds=1) and value % timedelta(microseconds=1) == timedelta(0)


def check(spec: ScheduleSpec) -> problems.Problem | None:
    """Everything that can be refused before touching the database; None means admissible."""
    if spec.kind == "cron" or spec.cron is not None:
        return problems.not_admitted("Cron", "cron evaluation is outside Gate A until CronosV1 is admitted "
                                     "with its grammar, evaluator version, time-zone rules and DST behaviour persisted")
    if spec.target.kind != "work":
        return problems.not_admitted("A Flow target" if spec.target.kind == "flow" else f"target kind {spec.target.kind!r}",
                                     "Gate A admits registered Work targets only")
    errors: dict[str, list[str]] = {}

    def bad(name: str, message: str) -> None:
        errors.setdefault(name, []).append(message)

    if spec.kind not in KINDS:
        bad("kind", f"must be one of {', '.join(KINDS)}")
    expected = {"at": {"at"}, "after": {"after"}, "every": {"every", "anchor"}}.get(spec.kind, set())
    for name in ("at", "after", "every", "anchor"):
        if getattr(spec, name) is not None and name not in expected:
            bad(name, f"is not used by a {spec.kind} schedule")
    if spec.kind == "at" and not _aware(spec.at):
        bad("at", "must be a UTC-aware datetime")
    if spec.kind == "after" and not _positive(spec.after):
        bad("after", "must be a positive duration in whole microseconds")
    if spec.kind == "every":
        if not _positive(spec.every):
            bad("every", "must be a positive duration in whole microseconds")
        if spec.anchor is not None and not _aware(spec.anchor):
            bad("anchor", "must be a UTC-aware datetime when given")
    if spec.misfire_policy not in MISFIRE_POLICIES:
        bad("misfire_policy", f"must be one of {', '.join(MISFIRE_POLICIES)}")
    if spec.overlap_policy != "queue-one":
        bad("overlap_policy", "Gate A admits queue-one only")
    if spec.run_policy != "run-once":
        bad("run_policy", "Gate A admits run-once only")
    if not _positive(spec.safety_window) or spec.safety_window > MAX_SAFETY_WINDOW:
        bad("safety_window", f"must be positive and at most {MAX_SAFETY_WINDOW.days} days")
    command = spec.target.command
    if not isinstance(command, str) or not command.strip() or len(command) > 256 or _CONTROL.search(command) \
            or _unfit(command):
        bad("target.command", "must be 1-256 characters without control, format or separator characters")
    try:
        if not isinstance(spec.target.payload, dict):
            raise TypeError("payload must be an object")
        if _unstorable(spec.target.payload):
            bad("target.payload", "must hold no U+0000 and no lone surrogate, which PostgreSQL's jsonb refuses")
        elif len(json.dumps(spec.target.payload)) > MAX_PAYLOAD_BYTES:
            bad("target.payload", f"must serialize to at most {MAX_PAYLOAD_BYTES} bytes of JSON")
    except (TypeError, ValueError) as exc:
        bad("target.payload", f"must be a JSON object ({exc})")
    return problems.validation(errors) if errors else None


@dataclass(frozen=True)
class Generation:
    """One immutable generation as stored."""

    generation: int
    kind: str
    timing: Timing
    misfire_policy: str
    safety_window: timedelta
    target: Target
    accepted_at_utc: datetime
    anchor_explicit: bool

    @classmethod
    def from_row(cls, row: dict) -> "Generation":
        after = timedelta(microseconds=row["after_us"]) if row["after_us"] else None
        every = timedelta(microseconds=row["every_us"]) if row["every_us"] else None
        return cls(
            generation=row["generation"], kind=row["schedule_kind"],
            timing=Timing(row["schedule_kind"], row["at_utc"], after, every, row["anchor_utc"], row["accepted_at_utc"]),
            misfire_policy=row["misfire_policy"], safety_window=timedelta(microseconds=row["safety_window_us"]),
            target=Target(row["target_command"], row["target_payload"], row["target_kind"]),
            accepted_at_utc=row["accepted_at_utc"], anchor_explicit=row["anchor_explicit"])


@dataclass(frozen=True)
class ScheduleView:
    """A schedule as callers read it."""

    schedule_id: uuid.UUID
    lifecycle_state: str
    suspension_reason: str | None
    revision: int
    active_generation: int
    cursor_utc: datetime
    definition: Generation

    def to_json(self) -> dict[str, Any]:
        d = self.definition
        return {
            "schedule_id": str(self.schedule_id), "lifecycle_state": self.lifecycle_state,
            "suspension_reason": self.suspension_reason, "revision": self.revision,
            "active_generation": self.active_generation, "cursor_utc": self.cursor_utc.isoformat(),
            "kind": d.kind, "accepted_at_utc": d.accepted_at_utc.isoformat(),
            "misfire_policy": d.misfire_policy, "safety_window_s": d.safety_window.total_seconds(),
            "target": {"kind": d.target.kind, "command": d.target.command, "payload": d.target.payload},
        }
