"""The matrix: scenario × barrier × fault × hit, skipping only what cannot happen, and saying why."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Iterable

from barriers import BY_NAME, CATALOG

from .scenario import Scenario, is_builtin


@dataclass(frozen=True)
class CasePlan:
    """scenario × barrier × fault × hit; a plan without a fault is the scenario's fault-free run."""

    scenario: str
    barrier: str | None = None
    fault: str | None = None
    hit: int | None = None
    repeat: int = 1

    @property
    def id(self) -> str:
        base = self.scenario if self.fault is None else f"{self.scenario}/{self.barrier}/{self.fault}/{self.hit}"
        return base if self.repeat == 1 else f"{base}#{self.repeat}"


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


def patterns(values: "str | Iterable[str] | None") -> list[str] | None:
    """Filter values as given on the command line: a string or several, each a comma-separated list of globs."""
    if values is None:
        return None
    found = [part.strip() for value in ([values] if isinstance(values, str) else values)
             for part in value.split(",") if part.strip()]
    return found or None


def matches(name: str, globs: "str | Iterable[str] | None") -> bool:
    """True when no filter is given or name matches one of its globs."""
    wanted = patterns(globs)
    return wanted is None or any(fnmatch.fnmatchcase(name, glob) for glob in wanted)


def select(scenarios: list[Scenario], pattern: "str | Iterable[str] | None") -> list[Scenario]:
    return [s for s in scenarios if matches(s.name, pattern)]


RESPONSE = "response"  # an answer in a barrier sequence: the request before it ended there


def barrier_sequence(timeline: list[dict]) -> list[tuple[int, str, str, str | None]]:
    """A fault-free run's barriers and answers in order: (position in its timeline, instance, barrier or
    RESPONSE, schedule_id)."""
    return [(position, e.get("instance"), e["name"] if e.get("event") == "barrier" else RESPONSE,
             (e.get("context") or {}).get("schedule_id"))
            for position, e in enumerate(timeline) if e.get("event") in ("barrier", RESPONSE)]


def _single_processor(sequence: list) -> bool:
    return bool(sequence) and len({instance for _, instance, name, _ in sequence if name != RESPONSE}) == 1


def _after_hit(sequence: list, barrier: str, hit: int) -> tuple | None:
    """What the fault-free run did next after this hit of the barrier (None: nothing, or no such hit)."""
    hits = [i for i, entry in enumerate(sequence) if entry[2] == barrier]
    if hit > len(hits) or hits[hit - 1] + 1 == len(sequence):
        return None
    return sequence[hits[hit - 1] + 1]


def ends_request(sequence: list, barrier: str, hit: int) -> bool:
    """True when this hit was the last barrier of its request in the fault-free run (its answer came next), with one
    processor only: after it the implementation touches the store again only in a later request."""
    if not _single_processor(sequence):
        return False
    after = _after_hit(sequence, barrier, hit)
    return after is not None and after[2] == RESPONSE


def same_state_twin(plugin, sequence: list, barrier: str, hit: int, planned_hits) -> str | None:
    """The later barrier hit a fault at (barrier, hit) is the same as, when the plugin says which barriers leave the
    same state and the fault-free run went from one to the next with nothing between (no step, no answer, no other
    instance's barrier), for the same schedule; the furthest such hit that is planned itself, or None."""
    pairs = getattr(plugin, "same_state_as", None)
    if not pairs or not _single_processor(sequence):
        return None  # processors racing interleave by timing: the plan must not depend on it
    seen: dict[str, int] = {}
    numbered = []
    for position, instance, name, schedule in sequence:
        seen[name] = seen.get(name, 0) + 1
        numbered.append((position, instance, name, schedule, seen[name]))
    start = next((i for i, e in enumerate(numbered) if e[2] == barrier and e[4] == hit), None)
    if start is None:
        return None
    twin, i = None, start
    while i + 1 < len(numbered):
        here, after = numbered[i], numbered[i + 1]
        if after[0] != here[0] + 1 or after[1] != here[1] or after[3] != here[3] or here[3] is None \
                or after[2] not in pairs.get(here[2], ()):
            break
        i += 1
        if after[4] in planned_hits(after[2]):
            twin = f"{after[2]} hit {after[4]}"
    return twin


def lease_spent(plugin, sequence: list, barrier: str, hit: int) -> bool:
    """True when the plugin says a fault at this barrier matters only while the lease it follows is still in use,
    and the fault-free run wrote nothing more under that lease after this hit: next came an answer, another
    schedule's barrier, a new claim, or nothing (one processor only: a race's interleaving is timing)."""
    if barrier not in getattr(plugin, "lease_spent_at", ()) or not _single_processor(sequence):
        return False
    hits = [i for i, entry in enumerate(sequence) if entry[2] == barrier]
    if hit > len(hits):
        return False
    after = _after_hit(sequence, barrier, hit)
    schedule = sequence[hits[hit - 1]][3]
    return after is None or after[2] in (RESPONSE, *CLAIM_BARRIERS) or after[3] != schedule


CLAIM_BARRIERS = ("schedule-claim-before-commit", "schedule-claim-after-commit")


def expand(scenarios: list[Scenario], census: dict[str, dict[str, int]], faults: dict, *,
           barrier: "str | Iterable[str] | None" = None, fault: "str | Iterable[str] | None" = None,
           repeat: int = 1, offered: set[str] | None = None, sequences: dict[str, list] | None = None):
    """Case plans for every reachable combination, and the combinations skipped with the reason. A barrier of
    an operation the implementation does not offer (`offered`, from its hello) is skipped as the fallback's. With
    `sequences` (each passing fault-free run's barriers in order), a fault whose plugin names barriers that leave
    the same state is planned at the later of two such hits only."""
    plans, skipped = [], []
    any_fault = ",".join(patterns(fault) or ["*"])  # a skipped combination's fault: the filter, as one string
    for scenario in scenarios:
        hits = census.get(scenario.name, {})
        for b in CATALOG:
            if not matches(b.name, barrier):
                continue
            if offered is not None and b.operation not in offered:
                skipped.append(Skipped(scenario.name, b.name, any_fault,
                                       f"{b.name} sits in {b.operation}, which the implementation does not offer: "
                                       f"the harness's fallback runs that transaction, not the implementation"))
                continue
            if not hits.get(b.name):
                skipped.append(Skipped(scenario.name, b.name, any_fault,
                                       f"the fault-free run of {scenario.name} never reaches {b.name}"))
                continue
            if scenario.fault_free:
                skipped.append(Skipped(scenario.name, b.name, any_fault,
                                       f"{scenario.name} is fault-free only (`fault_free = true`): its point is a "
                                       f"fault-free property, and {b.name}'s faults are planned in other scenarios"))
                continue
            for name, plugin in faults.items():
                if not matches(name, fault):
                    continue
                reason = plugin.applies(b)
                only = plugin.scenarios_at(b) if hasattr(plugin, "scenarios_at") else getattr(plugin, "scenarios", None)
                if not reason and only and scenario.name not in only and (
                        not getattr(plugin, "builtin_only", False) or is_builtin(scenario)):
                    reason = f"{name} is planned in {', '.join(only)} only: {plugin.scenarios_because}"
                if reason:
                    skipped.append(Skipped(scenario.name, b.name, name, reason))
                    continue
                planned = hits_for(hits[b.name])
                if getattr(plugin, "first_hit_only", None) and len(planned) > 1:
                    skipped.append(Skipped(scenario.name, b.name, name,
                                           f"hit {planned[-1]}: {name} plans first hits only ({plugin.first_hit_only})"))
                    planned = planned[:1]
                sequence = (sequences or {}).get(scenario.name)
                for hit in planned:
                    # a twin counts only where this same selection plans it: a filter may leave it out
                    twin = same_state_twin(plugin, sequence, b.name, hit,
                                           lambda other: hits_for(hits.get(other, 0)) if matches(other, barrier)
                                           and (offered is None or BY_NAME[other].operation in offered) else [])
                    if twin:
                        skipped.append(Skipped(scenario.name, b.name, name,
                                               f"hit {hit}: {name} here leaves the state {name} at {twin} leaves "
                                               f"(nothing between them in the fault-free run), which is planned"))
                        continue
                    at_end = getattr(plugin, "request_end_scenarios", None)
                    if at_end and is_builtin(scenario) and scenario.name not in at_end \
                            and ends_request(sequence, b.name, hit):
                        skipped.append(Skipped(scenario.name, b.name, name,
                                               f"hit {hit}: the last barrier of its request in the fault-free run: "
                                               f"{plugin.request_end_because}; planned there in "
                                               f"{', '.join(at_end)} only"))
                        continue
                    if lease_spent(plugin, sequence, b.name, hit):
                        skipped.append(Skipped(scenario.name, b.name, name,
                                               f"hit {hit}: {plugin.lease_spent_because}"))
                        continue
                    for r in range(1, repeat + 1):
                        plans.append(CasePlan(scenario.name, b.name, name, hit, r))
    return plans, skipped
