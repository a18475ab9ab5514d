"""The client operations' arguments as the adapter protocol carries them, read into the client's types: a wrong
JSON type, an unknown field, an unreadable instant or a number out of range is a validation problem naming the
field, never an exception (docs/protocol-notes.md, 35a-35e)."""

from __future__ import annotations

import math
import re
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from . import problems
from .model import ScheduleSpec, Target

SPEC_FIELDS = ("kind", "at", "anchor", "after_s", "every_s", "misfire_policy", "overlap_policy", "run_policy", "cron",
               "safety_window_s", "target")
TARGET_FIELDS = ("command", "payload", "kind")
# Seconds a duration may hold: 10^10 s (about 317 years) keeps every instant a definition implies inside the
# years 0001-9999 that RFC 3339 and the Work identity's instant form can write, from any acceptance this side of
# year 9000, and its microseconds inside a bigint.
MAX_SECONDS = 10 ** 10
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?P<offset>[Zz]|[+-]\d{2}:\d{2})?",
                      re.ASCII)


@dataclass(frozen=True)
class Command:
    """A client operation's arguments, read."""

    schedule_id: uuid.UUID | None = None
    command_id: uuid.UUID | None = None
    expected_revision: int | None = None
    spec: ScheduleSpec | None = None


class _Bad:
    def __init__(self) -> None:
        self.errors: dict[str, list[str]] = {}

    def __call__(self, name: str, message: str) -> None:
        self.errors.setdefault(name, []).append(message)


def _instant(value: Any, name: str, bad: _Bad) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, str):
        bad(name, f"must be an RFC 3339 string, not {type(value).__name__}")
        return None
    # Matched whole first: datetime.fromisoformat reads "2031-03-03T01:00:00Z\x00" as a valid instant (35c).
    shape = _RFC3339.fullmatch(value)
    try:
        if shape is None:
            raise ValueError(value)
        parsed = datetime.fromisoformat(value[:-1] + "+00:00" if value[-1] in "Zz" else value)
    except ValueError:
        bad(name, "must be an RFC 3339 instant with an offset, such as 2031-03-03T00:00:00Z")
        return None
    if shape.group("offset") is None or parsed.tzinfo is None or parsed.utcoffset() is None:
        bad(name, "must carry an offset (Z or +hh:mm): a naive date-time names no instant")
        return None
    try:
        return parsed.astimezone(timezone.utc)
    except OverflowError:
        bad(name, "must lie in the years 0001-9999 in UTC")
        return None


def _seconds(value: Any, name: str, bad: _Bad) -> timedelta | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        bad(name, f"must be a number of seconds, not {type(value).__name__}")
        return None
    if not math.isfinite(value) or abs(value) > MAX_SECONDS:
        bad(name, f"must be a finite number of seconds of at most {MAX_SECONDS}")
        return None
    return timedelta(seconds=value)


def _string(value: Any, name: str, bad: _Bad, default: str | None = None) -> str | None:
    if value is None:
        return default
    if not isinstance(value, str):
        bad(name, f"must be a string, not {type(value).__name__}")
        return default
    return value


def _uuid(value: Any, name: str, bad: _Bad) -> uuid.UUID | None:
    if value is None:
        return None
    if isinstance(value, str) and len(value) <= 64:
        try:
            return uuid.UUID(value)
        except ValueError:
            pass
    bad(name, "must be a UUID string")
    return None


def _unknown(data: dict, known: tuple[str, ...], prefix: str, bad: _Bad) -> None:
    for key in data:
        if key not in known:
            bad(f"{prefix}{key}", "is not a field of a schedule definition" if not prefix.startswith("spec.target")
                else "is not a field of a target")


def spec(data: Any, bad: _Bad) -> ScheduleSpec | None:
    """A definition in the wire's form read into a ScheduleSpec; what cannot be read goes to `bad`."""
    if not isinstance(data, dict):
        bad("spec", f"must be an object, not {type(data).__name__}")
        return None
    _unknown(data, SPEC_FIELDS, "spec.", bad)
    target = data.get("target")
    if target is None:
        target = {}  # no command: the definition's own check says so, after a Cron's not-admitted
    elif not isinstance(target, dict):
        bad("spec.target", f"must be an object with a command, not {type(target).__name__}")
        target = {}
    _unknown(target, TARGET_FIELDS, "spec.target.", bad)
    command = _string(target.get("command"), "spec.target.command", bad, "")
    payload = target.get("payload", {})
    if not isinstance(payload, dict):
        bad("spec.target.payload", f"must be an object, not {type(payload).__name__}")
        payload = {}
    optional: dict[str, Any] = {}
    for key in ("misfire_policy", "overlap_policy", "run_policy"):
        if key in data:
            value = _string(data[key], f"spec.{key}", bad)
            if value is not None:
                optional[key] = value
    if "safety_window_s" in data:
        window = _seconds(data["safety_window_s"], "spec.safety_window_s", bad)
        if window is not None:
            optional["safety_window"] = window
    kind = _string(data.get("kind"), "spec.kind", bad, "")
    read = ScheduleSpec(kind=kind, at=_instant(data.get("at"), "spec.at", bad),
                        after=_seconds(data.get("after_s"), "spec.after_s", bad),
                        every=_seconds(data.get("every_s"), "spec.every_s", bad),
                        anchor=_instant(data.get("anchor"), "spec.anchor", bad),
                        cron=_string(data.get("cron"), "spec.cron", bad),
                        target=Target(command, payload, _string(target.get("kind"), "spec.target.kind", bad, "work")),
                        **optional)
    return read


def command(op: str, args: Any) -> Command | problems.Problem:
    """The arguments of create, update, delete or release-after-recovery, or the validation problem naming every
    field that cannot be read. Unknown fields beside the definition are the envelope's, and ignored (35d)."""
    bad = _Bad()
    if not isinstance(args, dict):
        return problems.validation({"args": [f"must be an object, not {type(args).__name__}"]})
    schedule_id = _uuid(args.get("schedule_id"), "schedule_id", bad)
    if op != "create" and args.get("schedule_id") is None:
        bad("schedule_id", "is required")
    command_id = _uuid(args.get("command_id"), "command_id", bad)
    revision = None
    if op != "create":
        revision = args.get("expected_revision")
        if isinstance(revision, bool) or not isinstance(revision, int):
            bad("expected_revision", "must be an integer" if "expected_revision" in args else "is required")
            revision = None
    read = None
    if op in ("create", "update"):
        if "spec" not in args:
            bad("spec", "is required")
        else:
            read = spec(args["spec"], bad)
    if bad.errors:
        return problems.validation(bad.errors)
    return Command(schedule_id, command_id, revision, read)
