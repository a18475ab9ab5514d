"""The barrier catalog and the hook implementations call at each barrier.

`hit(name, **context)` is a no-op unless a TestHost (or a test) installed a sink; an unregistered
name is an error whenever barriers are enabled.
"""

from __future__ import annotations

from typing import Any, Callable

from .catalog import BY_NAME, CATALOG, SPEC_NAMES, Barrier, required_of

__all__ = ["BY_NAME", "CATALOG", "SPEC_NAMES", "Barrier", "required_of", "UnknownBarrier", "enable", "disable", "hit"]

Sink = Callable[[str, dict[str, Any]], None]
_sink: Sink | None = None


class UnknownBarrier(Exception):
    """Code hit a barrier name that is not in the catalog."""


def hit(name: str, **context: Any) -> None:
    if _sink is None:
        return
    if name not in BY_NAME:
        raise UnknownBarrier(f"barrier {name!r} is not in the catalog")
    _sink(name, context)


def enable(sink: Sink) -> None:
    global _sink
    _sink = sink


def disable() -> None:
    global _sink
    _sink = None
