"""One benchmark figure, and how it is printed."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable


@dataclass
class Figure:
    """A measured value against its target; `reference` is the same thing done the plain way, same run."""

    name: str
    value: float
    unit: str
    target: str
    met: bool
    reference: float | None = None
    reference_name: str = ""

    def line(self) -> str:
        ratio = (f"ratio {self.value / self.reference:.2f} vs {self.reference_name} "
                 f"({self.reference:.3g} {self.unit})" if self.reference else "no reference")
        verdict = "met" if self.met else "MISSED"
        return f"{self.name:44} {self.value:10.3g} {self.unit:6} target {self.target:12} {verdict:6} {ratio}"


def median_of(samples: int, action: Callable[[], None], setup: Callable[[], None] | None = None) -> float:
    """Median wall time of action over samples runs (setup, if given, runs untimed before each)."""
    times = []
    for _ in range(samples):
        if setup:
            setup()
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)
