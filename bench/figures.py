"""One benchmark figure, and how it is printed."""

from __future__ import annotations

import os
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


def backend_cpu(pids: list[int]) -> float:
    """CPU seconds (user + system) the given processes (server backends) have used so far, from /proc."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of the full line)
    return total / os.sysconf("SC_CLK_TCK")
