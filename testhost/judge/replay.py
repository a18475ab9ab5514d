"""A scenario's timeline replayed in the model alone, on its nominal clock (T0 plus its advances): what the
model says the scenario ends in, with no implementation and no database."""

from __future__ import annotations

from datetime import timedelta

from scenarios.scenario import T0, Scenario, Step
from scenarios.steps import STEPS

from .gate_model import Model
from .step_replays import REPLAYS


class Replay:
    """The scenario's timeline on its nominal clock (T0 plus its advances), in the model."""

    def __init__(self, scenario: Scenario):
        self.scenario, self.model, self.now = scenario, Model(), T0
        self.snapshots: dict[str, Model] = {}

    def claimed(self, step: Step | None) -> list[str]:
        """What the step's pass (None: the final drain) would claim now: the schedules a fault there may leave."""
        if step is not None:
            limit = STEPS[step.op].claims(step)
            if limit is not None:
                return self.model.claimed(self.now, limit)
        return [s.name for s in self.model.schedules.values() if self.model.due(s, self.now)]

    def step(self, step: Step, skip: frozenset = frozenset()) -> None:
        """One step, by its kind's replay (step_replays.py); `skip`: schedules its pass claimed but a fault stopped
        it from deciding."""
        REPLAYS[step.op].replay(self, step, skip)

    def recover(self, shifts: int, lease_seconds: float) -> None:
        """What a fault's recovery does to the clock and the model: each shift moves past the lease and drains."""
        for _ in range(shifts):
            self.now += timedelta(seconds=lease_seconds + 1)
            self.model.drain(self.now)
