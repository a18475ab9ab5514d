"""A scenario's timeline replayed in the model alone, on its nominal clock (T0 plus its advances): what the
model says the scenario ends in, with no implementation and no database."""

from __future__ import annotations

from datetime import datetime, timedelta

from scenarios.model import T0, Scenario, Step, relative

from .model import Generation, Model


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


class Replay:
    """The scenario's timeline on its nominal clock (T0 plus its advances), in the model."""

    def __init__(self, scenario: Scenario):
        self.scenario, self.model, self.now = scenario, Model(), T0

    def claimed(self, step: Step | None) -> list[str]:
        """What the step's pass (None: the final drain) would claim now: the schedules a fault there may leave."""
        if step is not None and step.op in ("process", "race"):
            per = step.args.get("maximum_schedules", 1)
            return self.model.claimed(self.now, per * 2 if step.op == "race" else
                                      min(per, step.args.get("cancel_after", 1 << 30)))
        return [s.name for s in self.model.schedules.values() if self.model.due(s, self.now)]

    def step(self, step: Step, skip: frozenset = frozenset()) -> None:
        """One step; `skip`: schedules its pass claimed but a fault stopped it from deciding."""
        args, model = step.args, self.model
        if step.op == "advance":
            self.now += timedelta(seconds=args["seconds"])
        elif step.op == "advance-epoch":
            model.advance_epoch()
        elif step.op == "advance-scope-generation":
            model.advance_scope_generation()
        elif step.op == "drain":
            model.drain(self.now, skip)
        elif step.op == "plant-work":
            model.plant(args["schedule"], args.get("generation", 1), args.get("kind", "nominal"),
                        relative(args["first"]))
        elif step.op == "process":
            if "expect" not in args:
                model.pass_(self.now, min(args.get("maximum_schedules", 1), args.get("cancel_after", 1 << 30)), skip)
            elif step.expected_outcome == "ok":
                model.pass_(self.now, args.get("maximum_schedules", 1), skip)
        elif step.op == "race":
            model.pass_(self.now, args.get("maximum_schedules", 1) * 2, skip)
        elif step.op == "complete-work":
            started = [o for o in model.schedules[args["schedule"]].occurrences if o.state == "materialized"]
            nth = args.get("nth", -1)
            if -len(started) <= (nth - 1 if nth > 0 else nth) < len(started):
                model.work(args["schedule"], nth, args["state"])
        elif step.expected_outcome == "ok":  # a client step the scenario expects to be applied
            name = args["schedule"]
            if step.op == "create":
                model.create(name, generation_of(args["spec"], self.now))
            elif step.op == "update":
                model.update(name, generation_of(args["spec"], self.now))
            elif step.op == "delete":
                model.delete(name)
            elif step.op == "release":
                model.release(name)

    def recover(self, shifts: int, lease_seconds: float) -> None:
        """What a fault's recovery does to the clock and the model: each shift moves past the lease and drains."""
        for _ in range(shifts):
            self.now += timedelta(seconds=lease_seconds + 1)
            self.model.drain(self.now)
