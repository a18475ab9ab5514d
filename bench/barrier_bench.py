"""The barrier hook costs nothing measurable while barriers are off: beside an empty function call."""

from __future__ import annotations

import timeit

import barriers

from .figures import Figure

CALLS = 1_000_000


def _empty(name: str, **context) -> None:
    return None


def disabled_hit() -> list[Figure]:
    barriers.disable()
    hit = min(timeit.repeat(lambda: barriers.hit("schedule-decision-before-commit", schedule_id="s", dispatch_revision=2),
                            number=CALLS, repeat=5)) / CALLS * 1e9
    empty = min(timeit.repeat(lambda: _empty("schedule-decision-before-commit", schedule_id="s", dispatch_revision=2),
                              number=CALLS, repeat=5)) / CALLS * 1e9
    return [Figure("barriers.hit while off (per call)", hit, "ns", "<= 1.5x", hit <= 1.5 * empty, empty,
                   "an empty function call")]


BENCHMARKS = [disabled_hit]
