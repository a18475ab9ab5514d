"""The matrix: scenario × barrier × fault × hit, skipping only what cannot happen, and saying why."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from barriers import CATALOG

from .model import Scenario


@dataclass(frozen=True)
class Skipped:
    scenario: str
    barrier: str
    fault: str
    reason: str

    def to_json(self) -> dict:
        return {"scenario": self.scenario, "barrier": self.barrier, "fault": self.fault, "reason": self.reason}


def hits_for(count: int) -> list[int]:
    """The first hit, and the last when a scenario reaches the barrier more than once."""
    return sorted({1, count}) if count else []


def select(scenarios: list[Scenario], pattern: str | None) -> list[Scenario]:
    return [s for s in scenarios if pattern is None or fnmatch.fnmatch(s.name, pattern)]


def expand(scenarios: list[Scenario], census: dict[str, dict[str, int]], faults: dict, *,
           barrier: str | None = None, fault: str | None = None, repeat: int = 1, offered: set[str] | None = None):
    """Case plans for every reachable combination, and the combinations skipped with the reason. A barrier of
    an operation the implementation does not offer (`offered`, from its hello) is skipped as the fallback's."""
    from testhost.runner import CasePlan

    plans, skipped = [], []
    for scenario in scenarios:
        hits = census.get(scenario.name, {})
        for b in CATALOG:
            if barrier and b.name != barrier:
                continue
            if offered is not None and b.operation not in offered:
                skipped.append(Skipped(scenario.name, b.name, fault or "*",
                                       f"{b.name} sits in {b.operation}, which the implementation does not offer: "
                                       f"the harness's fallback runs that transaction, not the implementation"))
                continue
            if not hits.get(b.name):
                skipped.append(Skipped(scenario.name, b.name, fault or "*",
                                       f"the fault-free run of {scenario.name} never reaches {b.name}"))
                continue
            for name, plugin in faults.items():
                if fault and name != fault:
                    continue
                reason = plugin.applies(b)
                if reason:
                    skipped.append(Skipped(scenario.name, b.name, name, reason))
                    continue
                for hit in hits_for(hits[b.name]):
                    for r in range(1, repeat + 1):
                        plans.append(CasePlan(scenario.name, b.name, name, hit, r))
    return plans, skipped
