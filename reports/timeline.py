"""A case's timeline as lanes and one-line labels: the harness lane and one lane per implementation instance."""

from __future__ import annotations

import json
from typing import Any

HARNESS = "harness"
_SHOWN_ELSEWHERE = {"t", "event", "instance"}


def _compact(value: Any, limit: int = 120) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str, separators=(",", ":"))
    return text if len(text) <= limit else text[:limit - 1] + "…"


def lane(event: dict) -> str:
    return str(event.get("instance") or HARNESS)


def label(event: dict) -> str:
    """What happened, in one short line (an unknown event kind shows its fields)."""
    kind = event.get("event", "?")
    if kind == "step":
        args = event.get("args") or {}
        return f"step {event.get('index', '?')}: {event.get('op', '?')}" + (f" {_compact(args, 80)}" if args else "")
    if kind == "barrier":
        return str(event.get("name", "?"))
    if kind == "response":
        error = event.get("error") or {}
        text = f"{event.get('op', '?')} → {event.get('outcome', '?')}"
        return text + (f" ({error.get('kind')}: {_compact(error.get('message', ''), 80)})" if error else "")
    if kind == "fault":
        return f"{event.get('fault', '?')} at {event.get('barrier', '?')} hit {event.get('hit', '?')}"
    if kind == "clock":
        return f"clock moves {float(event.get('shift_s', 0)):+g}s"
    if kind == "start":
        return f"start pid {event.get('pid', '?')} ({event.get('launcher', '?')})"
    if kind == "clock-skew":
        return f"OS clock {event.get('offset', '?')}: {event.get('in_effect', '?')}"
    rest = {k: v for k, v in event.items() if k not in _SHOWN_ELSEWHERE}
    return kind + (f" {_compact(rest)}" if rest else "")


def server_offsets(timeline: list[dict]) -> list[float]:
    """The server clock's total shift at each event (clock events move it for good)."""
    offsets, total = [], 0.0
    for event in timeline:
        if event.get("event") == "clock":
            total += float(event.get("shift_s", 0) or 0)
        offsets.append(total)
    return offsets


def text(timeline: list[dict]) -> str:
    """The timeline as aligned lines: case time, server-clock shift, lane, event, label."""
    lines = []
    for event, offset in zip(timeline, server_offsets(timeline)):
        lines.append(f"{float(event.get('t', 0)):8.3f}s  clock{offset:+8g}s  {lane(event):9} "
                     f"{event.get('event', '?'):15} {label(event)}")
    return "\n".join(lines)
