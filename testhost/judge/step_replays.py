"""Each step kind in the model alone: its replay on the scenario's nominal clock, keyed like the step registry.

The language of a step (its fields, validation, examples) is scenarios/steps.py; the TestHost's run of it is
testhost/case/step_runs.py, which takes an accepted client command into its model through `apply` here. A replay
acts on the Replay it is given (testhost/judge/replay.py): `model`, `now`, `scenario` and `snapshots`.
"""

from __future__ import annotations

import copy
from datetime import datetime, timedelta
from typing import Any, ClassVar

from scenarios.scenario import Step, relative
from scenarios.steps import STEPS, during_step, pass_denial

from .gate_model import Generation


class StepReplay:
    """One kind of step in the model. Subclasses set `op` and override `replay`."""

    op: ClassVar[str]

    def replay(self, replay, step: Step, skip: frozenset) -> None:
        """The step in the model alone, on the scenario's nominal clock (`crashproof scenarios --lint` and the
        verdict's replays; testhost/judge/replay.py). `skip`: schedules a pass claimed but a fault left undecided."""
        raise NotImplementedError


REPLAYS: dict[str, StepReplay] = {}


def step_replay(cls: type[StepReplay]) -> type[StepReplay]:
    REPLAYS[cls.op] = cls()
    return cls


def generation_of(spec: dict, accepted_at: datetime) -> Generation:
    """A scenario spec as the model's generation (its number is set by create or update)."""
    return Generation(
        1, spec["kind"], accepted_at,
        at=relative(spec["at"]) if "at" in spec else None,
        after=timedelta(seconds=spec["after_s"]) if "after_s" in spec else None,
        every=timedelta(seconds=spec["every_s"]) if "every_s" in spec else None,
        anchor=(relative(spec["anchor"]) if "anchor" in spec else accepted_at) if spec["kind"] == "every" else None,
        misfire=spec.get("misfire_policy", "run-once"),
        window=timedelta(seconds=spec.get("safety_window_s", 3600)))


def _choose(values: list, nth: int) -> Any:
    index = nth - 1 if nth > 0 else nth
    return values[index] if -len(values) <= index < len(values) else None


# -- client steps -------------------------------------------------------------------------------------------

class ClientReplay(StepReplay):
    """A schedule command: the model takes it when the scenario expects it applied."""

    def replay(self, replay, step, skip):
        if step.expected_outcome == "ok":  # a client step the scenario expects to be applied
            self.apply(replay.model, step, replay.now)

    def apply(self, model, step: Step, now: datetime) -> None:
        """The command in a model of Gate A, accepted at `now` (the TestHost's run applies it too)."""
        raise NotImplementedError


class DefinitionReplay(ClientReplay):
    def apply(self, model, step, now):
        generation = generation_of(step.args["spec"], now)
        (model.create if self.op == "create" else model.update)(step.args["schedule"], generation)


@step_replay
class Create(DefinitionReplay):
    op = "create"


@step_replay
class Update(DefinitionReplay):
    op = "update"


@step_replay
class Delete(ClientReplay):
    op = "delete"

    def apply(self, model, step, now):
        model.delete(step.args["schedule"])


@step_replay
class Release(ClientReplay):
    op = "release"

    def apply(self, model, step, now):
        model.release(step.args["schedule"])


# -- the clock ---------------------------------------------------------------------------------------------

@step_replay
class Advance(StepReplay):
    op = "advance"

    def replay(self, replay, step, skip):
        replay.now += timedelta(seconds=step.args["seconds"])


@step_replay
class SetClock(StepReplay):
    op = "set-clock"

    def replay(self, replay, step, skip):
        replay.now = relative(step.args["at"])


# -- processing ----------------------------------------------------------------------------------------------

class PassReplay(StepReplay):
    def replay(self, replay, step, skip):
        """The pass; a step beside its held barrier in the order the spec allows every implementation (it waited
        for the held decision: after the pass)."""
        if pass_denial(replay.scenario, step) is not None:
            return  # its bridge is refused: nothing of Gate A moves (docs/protocol-notes.md, 33b)
        if step.args.get("demote_after_decision"):
            replay.model.pass_(replay.now, 1, skip, bridges=False)  # its decision only (33l)
            return
        if "expect" not in step.args:
            replay.model.pass_(replay.now, STEPS[self.op].claims(step), skip)
        elif step.expected_outcome == "ok":
            replay.model.pass_(replay.now, step.args.get("maximum_schedules", 1), skip)
        beside = during_step(step)
        if beside is not None:
            REPLAYS[beside[2].op].replay(replay, beside[2], frozenset())


@step_replay
class Process(PassReplay):
    op = "process"


@step_replay
class Race(PassReplay):
    op = "race"


@step_replay
class Drain(StepReplay):
    op = "drain"

    def replay(self, replay, step, skip):
        replay.model.drain(replay.now, skip)


# -- Work ---------------------------------------------------------------------------------------------------

@step_replay
class CompleteWork(StepReplay):
    op = "complete-work"

    def replay(self, replay, step, skip):
        args = step.args
        started = [o for o in replay.model.schedules[args["schedule"]].occurrences if o.state == "materialized"]
        if _choose(started, args.get("nth", -1)) is not None:
            replay.model.work(args["schedule"], args.get("nth", -1), args["state"], replay.now)


@step_replay
class PlantWork(StepReplay):
    op = "plant-work"

    def replay(self, replay, step, skip):
        args = step.args
        replay.model.plant(args["schedule"], args.get("generation", 1), args.get("kind", "nominal"),
                           relative(args["first"]))


# -- operator steps ----------------------------------------------------------------------------------------

@step_replay
class AdvanceEpoch(StepReplay):
    op = "advance-epoch"

    def replay(self, replay, step, skip):
        replay.model.advance_epoch()


@step_replay
class AdvanceScopeGeneration(StepReplay):
    op = "advance-scope-generation"

    def replay(self, replay, step, skip):
        replay.model.advance_scope_generation()


# -- backup and restore --------------------------------------------------------------------------------------

@step_replay
class TakeSnapshot(StepReplay):
    op = "snapshot"

    def replay(self, replay, step, skip):
        replay.snapshots[step.args["name"]] = copy.deepcopy(replay.model)


@step_replay
class Restore(StepReplay):
    op = "restore"

    def replay(self, replay, step, skip):
        replay.model = copy.deepcopy(replay.snapshots[step.args["name"]])
