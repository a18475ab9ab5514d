"""Per-instance settings of a scenario (`[instances.B]`): an OS clock offset, a command, an environment."""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

# The copies of the implementation a case may start: "A" runs every step, "B" races it, "takeover" drains
# what a paused copy leased (testhost/faults/catalog.py).
INSTANCE_LABELS = ("A", "B", "takeover")
INSTANCE_FIELDS = {"clock_offset": str, "command": str, "environment": dict, "runtime_login": str}
# What a copy's runtime DSN may log in as instead of the runtime role (testhost/judge/bridge_role.py makes the role): a
# mere member of it (every pass refused), or a login whose default role it is (its passes run until a step takes the
# role away, `demote_after_decision`). Only copy B: A runs the client steps, the drains and every recovery, and the
# takeover drains a paused copy's lease.
RUNTIME_LOGINS = ("member", "default-role")
# libfaketime skews by whole seconds here; ten years keeps every instant inside datetime's range.
MAX_OFFSET = timedelta(days=3650)
_DURATION = re.compile(r"^(?P<sign>[+-]?)(?=\d)(?:(?P<d>\d+)d)?(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m)?(?:(?P<s>\d+)s)?$")


class DurationError(ValueError):
    """A duration that is not of the form +1d, -36h, 90s or -1d2h."""


def parse_duration(text: str) -> timedelta:
    """"+1d", "-36h", "90s", "-1d2h30m": a signed whole number of seconds, not zero, at most ten years."""
    match = _DURATION.match(text.strip()) if isinstance(text, str) else None
    if not match or not any(match.group(unit) for unit in "dhms"):
        raise DurationError(f"{text!r} is not a duration; write it like +1d, -36h, 90s or -1d2h")
    units = {unit: int(match.group(unit) or 0) for unit in "dhms"}
    delta = timedelta(days=units["d"], hours=units["h"], minutes=units["m"], seconds=units["s"])
    if not delta:
        raise DurationError(f"{text!r} is no offset (zero); leave it out to run with the OS clock as it is")
    if delta > MAX_OFFSET:
        raise DurationError(f"{text!r} is more than {MAX_OFFSET.days} days")
    return -delta if match.group("sign") == "-" else delta


def format_offset(delta: timedelta) -> str:
    """An offset as the report shows it: +1d, -1d2h, +90s."""
    seconds = int(delta.total_seconds())
    sign, seconds = ("-" if seconds < 0 else "+"), abs(seconds)
    parts = [(seconds // 86400, "d"), (seconds % 86400 // 3600, "h"), (seconds % 3600 // 60, "m"), (seconds % 60, "s")]
    return sign + "".join(f"{n}{unit}" for n, unit in parts if n) if seconds else "+0s"


@dataclass(frozen=True)
class Instance:
    """What one copy of the implementation runs with, beside what every copy gets."""

    label: str
    clock_offset: timedelta | None = None
    command: str | None = None  # resolved: a relative program path is made absolute (see resolve_command)
    environment: dict[str, str] = field(default_factory=dict)
    runtime_login: str | None = None  # a login other than the runtime role for CRASHPROOF_RUNTIME_DSN

    def to_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {}
        if self.clock_offset is not None:
            found["clock_offset"] = format_offset(self.clock_offset)
        if self.command is not None:
            found["command"] = self.command
        if self.environment:
            found["environment"] = dict(self.environment)
        if self.runtime_login is not None:
            found["runtime_login"] = self.runtime_login
        return found


def resolve_command(command: str, folder: Path) -> str:
    """A program named with a slash but not absolute is relative to the scenario file's folder, so a catalog
    can ship the adapter it names; a bare name is looked up on PATH when it starts, as --impl's is."""
    argv = shlex.split(command)
    if not argv:
        raise ValueError("is empty")
    if "/" in argv[0] and not os.path.isabs(argv[0]):
        argv[0] = str((folder / argv[0]).resolve())
    return shlex.join(argv)


def _line_of(text: str, label: str) -> str:
    """" (line N)" of the instance's table header in the TOML text, when it has one of its own."""
    pattern = re.compile(rf"^\s*\[\s*instances\s*\.\s*(?:\"{re.escape(label)}\"|'{re.escape(label)}'|{re.escape(label)})\s*\]")
    for number, line in enumerate(text.splitlines(), 1):
        if pattern.match(line):
            return f" (line {number})"
    return ""


def parse_instances(raw: Any, label: str, text: str = "", origin: str | None = None) -> dict[str, Instance]:
    """The scenario's `[instances.LABEL]` tables, checked; errors are one line naming the file, line and field."""
    from .errors import ScenarioError
    try:
        return _parse(raw, label, text, origin)
    except ValueError as exc:
        raise ScenarioError(str(exc)) from None


def _parse(raw: Any, label: str, text: str, origin: str | None) -> dict[str, Instance]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ValueError(f"{label}: instances must be a table of tables ([instances.B] ...)")
    folder = Path(origin).parent if origin else Path.cwd()
    found = {}
    for name, table in raw.items():
        where = f"{label}{_line_of(text, name)}: instances.{name}"
        if name not in INSTANCE_LABELS:
            raise ValueError(f"{where}: no instance is labelled {name!r}; the labels are {', '.join(INSTANCE_LABELS)}")
        if not isinstance(table, dict):
            raise ValueError(f"{where}: must be a table ({', '.join(INSTANCE_FIELDS)})")
        unknown = sorted(set(table) - set(INSTANCE_FIELDS))
        if unknown:
            raise ValueError(f"{where}: takes no {', '.join(unknown)} (only {', '.join(INSTANCE_FIELDS)})")
        for key, value in table.items():
            if not isinstance(value, INSTANCE_FIELDS[key]):
                raise ValueError(f"{where}.{key}: must be a {'table' if key == 'environment' else 'string'}, "
                                 f"not {type(value).__name__}")
        offset = None
        if "clock_offset" in table:
            try:
                offset = parse_duration(table["clock_offset"])
            except DurationError as exc:
                raise ValueError(f"{where}.clock_offset: {exc}") from None
        command = None
        if "command" in table:
            try:
                command = resolve_command(table["command"], folder)
            except ValueError as exc:
                raise ValueError(f"{where}.command: {exc}") from None
        environment = table.get("environment", {})
        for key, value in environment.items():
            if not isinstance(value, str):
                raise ValueError(f"{where}.environment.{key}: must be a string, not {type(value).__name__} "
                                 f"(write {key} = \"{value}\")")
            if key.startswith("CRASHPROOF_") or key in ("LD_PRELOAD",) or key.startswith("FAKETIME"):
                raise ValueError(f"{where}.environment.{key}: is the harness's to set (the DSNs, the barrier "
                                 "endpoint and the clock skew); use clock_offset for a skewed clock")
        login = table.get("runtime_login")
        if login is not None and login not in RUNTIME_LOGINS:
            raise ValueError(f"{where}.runtime_login: must be one of {', '.join(RUNTIME_LOGINS)}, not {login!r}")
        if login is not None and name != "B":
            raise ValueError(f"{where}.runtime_login: only copy B takes another login (A runs the client steps, "
                             "the drains and the recoveries)")
        found[name] = Instance(name, offset, command, dict(environment), login)
    return found
