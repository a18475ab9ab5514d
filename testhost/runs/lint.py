"""`crashproof scenarios --lint`: the steps after which a fault's recovery (which moves the server clock by
lease_seconds + 1) changes what the timeline must end in, found by replaying the scenario in the model with and
without that shift (and, for a pass, with what a fault may stop it from deciding left to the recovery); a
faulted case at such a step is judged by the model alone, not against the fault-free run."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from barriers.catalog import PROCESSOR_TRANSACTIONS
from scenarios.scenario import Scenario, Step, T0
from scenarios.steps import STEPS

from testhost.judge.pictures import comparable
from testhost.judge.gate_model import picture
from testhost.judge.replay import Replay
from testhost.judge.timelines import left_undecided

# The steps in which a barrier can fire (the catalog's transactions are a processor's claim, decision and bridge,
# and the Work-terminal transition), so the only ones a fault's recovery can follow; the final drain is one too.
# A pause fires only in a processor's transactions and moves the clock twice (for the takeover, then the recovery).
PROCESSOR_STEPS = {op for op, kind in STEPS.items() if kind.transactions & PROCESSOR_TRANSACTIONS}
FAULT_STEPS = {op for op, kind in STEPS.items() if kind.transactions}
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
    left: tuple[str, ...] = ()  # the schedules a fault that stopped this step's pass left to the recovery

    @property
    def crossed(self) -> tuple[str, ...]:
        return tuple(instant for instant, _ in self.crossings)

    def line(self) -> str:
        where = FINAL_DRAIN if self.step is None else f"step {self.step.index + 1} ({self.step.describe()})"
        own = None if self.step is None else self.step.index + 1
        label = lambda n: "its recovery" if n == own else FINAL_DRAIN if n == 0 else f"step {n}"  # noqa: E731
        across = "; ".join(f"{', '.join(map(label, steps))} then fall{'s' * (len(steps) == 1)} after nominal "
                           f"instant {instant}" for instant, steps in self.crossings)
        left = (f"; a fault that stops the pass before it decides {', '.join(self.left)} leaves "
                f"{'it' if len(self.left) == 1 else 'them'} to the recovery" if self.left else "")
        return (f"{self.origin}: {where}: {self.fault} here moves the server clock {self.shift_s:g} s "
                f"(lease_seconds + 1{' twice' if self.fault == 'pause' else ''}) for the rest of the timeline"
                f"{left}{'; ' + across if across else ''}; the model then ends {', '.join(self.schedules)} "
                "differently, so faulted cases here are not compared with the fault-free run")


def _replay(scenario: Scenario, faulted_after: int | None, shifts: int, skip: frozenset = frozenset()) -> Replay:
    """The whole replay, final drain included, with a recovery after step `faulted_after` (len(steps): after the
    final drain; None: fault-free), whose pass left `skip` undecided."""
    replay = Replay(scenario)
    for step in scenario.steps:
        replay.step(step, skip if step.index == faulted_after else frozenset())
        if step.index == faulted_after:
            replay.recover(shifts, scenario.lease_seconds)
    replay.model.drain(replay.now, skip if faulted_after == len(scenario.steps) else frozenset())
    if faulted_after == len(scenario.steps):
        replay.recover(shifts, scenario.lease_seconds)
    return replay


def outcome(scenario: Scenario, faulted_after: int | None = None, shifts: int = 1,
            skip: frozenset = frozenset()) -> dict:
    """The model's final picture of the scenario, with a recovery after step `faulted_after` (None: fault-free;
    len(steps): after the final drain) whose pass a fault stopped before it decided `skip`."""
    return picture(_replay(scenario, faulted_after, shifts, skip).model)


def claimed_at(scenario: Scenario, index: int) -> list[str]:
    """What the pass of step `index` (len(steps): the final drain) claims in the fault-free replay."""
    replay = Replay(scenario)
    for step in scenario.steps[:index]:
        replay.step(step)
    if index == len(scenario.steps):
        return replay.claimed(None)
    return replay.claimed(scenario.steps[index])


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
    """Every step after which a fault's recovery changes what the model says the scenario ends in (none in a
    scenario whose matrix plans its fault-free run only: no fault is ever injected there)."""
    if scenario.fault_free:
        return []
    fault_free = {name: comparable(entry) for name, entry in outcome(scenario).items()}
    warnings = []
    for index, op in [(s.index, s.op) for s in scenario.steps] + [(len(scenario.steps), "drain")]:
        if op not in FAULT_STEPS:
            continue
        interrupted = left_undecided(claimed_at(scenario, index)) if op in PROCESSOR_STEPS else []
        found = None
        for fault, shifts in (("any fault", 1), ("pause", 2)):
            if fault == "pause" and op not in PROCESSOR_STEPS:
                continue
            for skip in [frozenset()] + interrupted:
                shifted = outcome(scenario, index, shifts, skip)
                differing = tuple(name for name in sorted(set(shifted) | set(fault_free))
                                  if comparable(shifted.get(name)) != fault_free.get(name))
                if differing:
                    found = (fault, shifts, differing, skip)
                    break
            if found:
                break
        if found:
            fault, shifts, differing, skip = found
            shift = timedelta(seconds=shifts * (scenario.lease_seconds + 1))
            step = scenario.steps[index] if index < len(scenario.steps) else None
            warnings.append(LintWarning(scenario.origin or scenario.name, step, shift.total_seconds(), fault,
                                        differing, crossings(scenario, index, shift), tuple(sorted(skip))))
    return warnings
