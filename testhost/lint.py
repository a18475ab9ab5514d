"""`crashproof scenarios --lint`: the steps after which a fault's recovery (which moves the server clock by
lease_seconds + 1) changes what the timeline must end in, found by replaying the scenario in the model with and
without that shift; a faulted case at such a step is judged by the model alone, not against the fault-free run."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from scenarios.model import Scenario, Step, T0

from .checks import comparable
from .model import picture
from .replay import Replay

# The steps in which a barrier can fire (the catalog's transactions are a processor's claim, decision and bridge,
# and the Work-terminal transition), so the only ones a fault's recovery can follow; the final drain is one too.
# A pause fires only in a processor's transactions and moves the clock twice (for the takeover, then the recovery).
PROCESSOR_STEPS = {"process", "race", "drain"}
FAULT_STEPS = PROCESSOR_STEPS | {"complete-work"}
FINAL_DRAIN = "the final drain"


@dataclass(frozen=True)
class LintWarning:
    origin: str
    step: Step | None  # None: the final drain
    shift_s: float
    fault: str  # "any fault" or "pause"
    schedules: tuple[str, ...]  # whose outcome the model then says differs
    # By nominal instant (relative to T0), what the shift carries past it: this step's recovery drain, later steps
    # (1-based numbers) or the final drain (0). Empty when the difference comes from what the recovery drained early
    # (a cancelled pass's leftovers), not from a crossing.
    crossings: tuple[tuple[str, tuple[int, ...]], ...] = ()

    @property
    def crossed(self) -> tuple[str, ...]:
        return tuple(instant for instant, _ in self.crossings)

    def line(self) -> str:
        where = FINAL_DRAIN if self.step is None else f"step {self.step.index + 1} ({self.step.describe()})"
        own = None if self.step is None else self.step.index + 1
        label = lambda n: "its recovery" if n == own else FINAL_DRAIN if n == 0 else f"step {n}"  # noqa: E731
        across = "; ".join(f"{', '.join(map(label, steps))} then fall{'s' * (len(steps) == 1)} after nominal "
                           f"instant {instant}" for instant, steps in self.crossings)
        return (f"{self.origin}: {where}: {self.fault} here moves the server clock {self.shift_s:g} s "
                f"(lease_seconds + 1{' twice' if self.fault == 'pause' else ''}) for the rest of the timeline"
                f"{'; ' + across if across else ''}; the model then ends {', '.join(self.schedules)} differently, "
                "so faulted cases here are not compared with the fault-free run")


def _replay(scenario: Scenario, faulted_after: int | None, shifts: int) -> Replay:
    """The whole replay, final drain included, with a recovery after step `faulted_after` (len(steps): after the
    final drain; None: fault-free)."""
    replay = Replay(scenario)
    for step in scenario.steps:
        replay.step(step)
        if step.index == faulted_after:
            replay.recover(shifts, scenario.lease_seconds)
    replay.model.drain(replay.now)
    if faulted_after == len(scenario.steps):
        replay.recover(shifts, scenario.lease_seconds)
    return replay


def outcome(scenario: Scenario, faulted_after: int | None = None, shifts: int = 1) -> dict:
    """The model's final picture of the scenario, with a recovery after step `faulted_after` (None: fault-free;
    len(steps): after the final drain)."""
    return picture(_replay(scenario, faulted_after, shifts).model)


def crossings(scenario: Scenario, index: int, shift: timedelta) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The steps from `index` on (and the final drain) whose fault-free time t has a nominal instant of an active
    generation in (t, t + shift]: the shifted run does them past that instant."""
    replay, found = Replay(scenario), {}

    def look(number: int) -> None:
        for s in replay.model.schedules.values():
            if s.lifecycle != "deleted":
                for t in s.active.instants_between(replay.now, replay.now + shift):
                    found.setdefault(t, []).append(number)

    for step in scenario.steps:
        if step.index >= index and step.op != "advance":
            look(step.index + 1)  # before the step: its own clock reading is the one the shift moves
        replay.step(step)
    look(0)
    return tuple((f"{(t - T0).total_seconds():+g}s", tuple(sorted(set(n), key=lambda x: x or 1 << 30)))
                 for t, n in sorted(found.items()))


def lint(scenario: Scenario) -> list[LintWarning]:
    """Every step after which a fault's recovery changes what the model says the scenario ends in."""
    fault_free = {name: comparable(entry) for name, entry in outcome(scenario).items()}
    warnings = []
    for index, op in [(s.index, s.op) for s in scenario.steps] + [(len(scenario.steps), "drain")]:
        if op not in FAULT_STEPS:
            continue
        for fault, shifts in (("any fault", 1), ("pause", 2)):
            if fault == "pause" and op not in PROCESSOR_STEPS:
                continue
            shifted = outcome(scenario, index, shifts)
            differing = tuple(name for name in sorted(set(shifted) | set(fault_free))
                              if comparable(shifted.get(name)) != fault_free.get(name))
            if differing:
                shift = timedelta(seconds=shifts * (scenario.lease_seconds + 1))
                step = scenario.steps[index] if index < len(scenario.steps) else None
                warnings.append(LintWarning(scenario.origin or scenario.name, step, shift.total_seconds(), fault,
                                            differing, crossings(scenario, index, shift)))
                break  # one line per step: the single shift already diverges
    return warnings

