"""Each step kind as the TestHost runs it through a case, keyed like the step registry (scenarios/steps.py).

A run acts through the case it is given (testhost/case/runner.py's CaseRun and its parts: the clock, the
implementation, passes, reads, the host's client and its fallbacks, the model of Gate A). An accepted client command enters the case's model by its kind's `apply`
(testhost/judge/step_replays.py), the same the replays use.
"""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from typing import Any, ClassVar

from scenarios.scenario import Step, relative
from scenarios.steps import COMMAND_NAMESPACE, STEPS, StepKind, spec_to_wire

from testhost.judge import commands
from testhost.judge.step_replays import REPLAYS
from testhost.world import table_rows


class StepRun:
    """One kind of step as the TestHost runs it. Subclasses set `op` and override `run`, and `run_beside` for a
    kind that may run beside a held barrier."""

    op: ClassVar[str]

    @property
    def kind(self) -> StepKind:
        """The step's language: its fields, validation and documentation."""
        return STEPS[self.op]

    def run(self, case, step: Step) -> None:
        raise NotImplementedError

    def run_beside(self, case, step: Step) -> str:
        """Run from the host's own session while an implementation is held: `committed`, `refused` (answered with
        a problem, nothing changed), or `waited` when it could not take its locks in time (it then runs again
        once the pass is over)."""
        raise NotImplementedError


RUNS: dict[str, StepRun] = {}


def step_run(cls: type[StepRun]) -> type[StepRun]:
    RUNS[cls.op] = cls()
    return cls


# -- client steps -------------------------------------------------------------------------------------------

class ClientRun(StepRun):
    """A schedule command through the implementation (or the host's fallback when it does not offer it)."""

    @property
    def operation(self) -> str:
        return self.kind.operation

    def request(self, case, step: Step) -> dict:
        request = {"schedule_id": str(case.schedule_ids[step.args["schedule"]])}
        if "spec" in step.args:
            request["spec"] = spec_to_wire(step.args["spec"])
        if self.operation != "create":
            revision = case.reads.revision_of(step.args["schedule"])
            request["expected_revision"] = revision - 1 if step.args.get("stale_revision") else revision
        if "command" in step.args:
            request["command_id"] = str(uuid.uuid5(COMMAND_NAMESPACE, step.args["command"]))
        return request

    def run(self, case, step):
        # Only a step expected refused is read whole before and after: one that should apply and is refused
        # fails its check anyway, and a read of every table around every command would cost every case.
        refusal = step.expected_outcome == "fail"
        if refusal:
            with case.owner() as conn:
                before = table_rows.rows(conn)
        seen = self.before(case, step)
        started = case.world.clock.now()
        response = case.client.op(self.operation, self.request(case, step))
        case.requests.note_response(response, self.operation)
        changed = {}
        if refusal and response.outcome == "fail":
            with case.owner() as conn:
                changed = table_rows.changed(before, table_rows.rows(conn))
        case.facts.client_outcomes.append((step, response, changed))
        if response.outcome == "ok":
            self.observe(case, step, self.model(case, step), seen, (started, case.world.clock.now()))

    def before(self, case, step: Step) -> Any:
        """What the step's observation compares with, read before the command runs (None: nothing)."""
        return None

    def observe(self, case, step: Step, read: Any, before: Any, window: tuple) -> None:
        """Judge an accepted command by what it wrote: `read` is what the model step read back."""

    def run_beside(self, case, step):
        response = case.beside.fallback(self.operation, self.request(case, step))
        if response is None:
            return "waited"
        case.requests.note_response(response, f"{self.operation} (beside the held barrier)")
        case.facts.client_outcomes.append((step, response, {}))
        if response.outcome != "ok":
            return "refused"  # answered, and changed nothing: no order to keep, nothing to run again
        self.model(case, step)
        return "committed"

    def model(self, case, step: Step) -> Any:
        """The accepted command in the case's model."""
        raise NotImplementedError


class DefinitionRun(ClientRun):
    def model(self, case, step):
        """The model takes the same command; a new generation's acceptance time is the server's, read back
        (with its command's, for the observation)."""
        with case.owner() as conn:
            row = conn.execute(commands.GENERATION_SQL, (case.schedule_ids[step.args["schedule"]],)).fetchone()
        if row is None:  # an `ok` that wrote no generation: the model cannot take it, the observation says why
            return None
        REPLAYS[self.op].apply(case.model, step, row["accepted_at_utc"])
        return row

    def observe(self, case, step, read, before, window):
        facts = case.facts.command_facts
        if read is None:
            missing = [{"step": step.index + 1, "op": self.operation, "wrong": ["answered ok, but no generation"]}]
            facts.setdefault("command-accepted-at", []).append(missing)
            return
        facts.setdefault("command-accepted-at", []).append(
            commands.accepted_at(step.index + 1, self.operation, read, window))
        facts.setdefault("definition-persisted", []).append(
            commands.persisted(step.index + 1, self.operation, spec_to_wire(step.args["spec"]), read))


@step_run
class Create(DefinitionRun):
    op = "create"


@step_run
class Update(DefinitionRun):
    op = "update"


@step_run
class Delete(ClientRun):
    op = "delete"

    def model(self, case, step):
        REPLAYS[self.op].apply(case.model, step, None)


@step_run
class Release(ClientRun):
    op = "release"

    def model(self, case, step):
        REPLAYS[self.op].apply(case.model, step, None)

    def before(self, case, step):
        with case.owner() as conn:
            row = conn.execute(commands.FENCES_SQL, (case.schedule_ids[step.args["schedule"]],)).fetchone()
        return dict(row) if row else None

    def observe(self, case, step, read, before, window):
        after = self.before(case, step)
        case.facts.command_facts.setdefault("release-rebinds", []).append(commands.rebinds(step.index + 1, before, after))


# -- the clock ---------------------------------------------------------------------------------------------

@step_run
class Advance(StepRun):
    op = "advance"

    def run(self, case, step):
        case.advance(timedelta(seconds=step.args["seconds"]))
        if "quiet_s" in step.args and case.plan.fault is None:
            # Time passes on the running server clock with nothing asked; faulted runs skip it (it costs wall time
            # in every case, and one fault-free run shows a processor that acts on its own).
            case.note("quiet", seconds=step.args["quiet_s"])
            time.sleep(step.args["quiet_s"])


@step_run
class SetClock(StepRun):
    op = "set-clock"

    def run(self, case, step):
        case.set_clock(relative(step.args["at"]), freeze=step.args.get("freeze", False))


# -- processing ----------------------------------------------------------------------------------------------

class PassRun(StepRun):
    """A process-due request to the copies the kind labels, through the case's pass."""

    def run(self, case, step):
        args = step.args
        labels = self.kind.labels(step)
        request = {"maximum_schedules": args.get("maximum_schedules", 1),
                   "lease_seconds": args.get("lease_seconds", case.scenario.lease_seconds)}
        for key in ("cancel_after", "lease_owner"):
            if key in args:
                request[key] = args[key]
        case.passes.run(step, labels, request)


@step_run
class Process(PassRun):
    op = "process"


@step_run
class Race(PassRun):
    op = "race"


@step_run
class Drain(StepRun):
    op = "drain"

    def run(self, case, step):
        case.drain(case.impls["A"])


# -- Work ---------------------------------------------------------------------------------------------------

@step_run
class CompleteWork(StepRun):
    op = "complete-work"

    def run(self, case, step):
        args = step.args
        work_id = case.reads.nth_work(args["schedule"], args.get("nth", -1))
        if work_id is None:
            case.note("skipped", reason=f"no Work number {args.get('nth', -1)} for {args['schedule']}")
            return
        case.requests.note_response(case.client.op("complete-work", {"work_id": work_id, "state": args["state"]}), step.op)
        case.model.work(args["schedule"], args.get("nth", -1), args["state"], case.world.clock.now())

    def run_beside(self, case, step):
        """The transition from the host's own session while a pass is held (the implementation answers nothing
        meanwhile): the Work terminal transaction locks the schedule's dispatch row, so it waits for a held
        decision and comes wholly before or after it, or between a committed decision and the rest of the pass."""
        args = step.args
        work_id = case.reads.nth_work(args["schedule"], args.get("nth", -1))
        if work_id is None:
            case.note("skipped", reason=f"no Work number {args.get('nth', -1)} for {args['schedule']}")
            return "refused"
        response = case.beside.work(work_id, args["state"])
        if response is None:
            return "waited"
        case.requests.note_response(response, f"{step.op} (beside the held barrier)")
        if response.outcome != "ok":
            return "refused"  # answered, and changed nothing
        case.model.work(args["schedule"], args.get("nth", -1), args["state"], case.world.clock.now())
        return "committed"


@step_run
class PlantWork(StepRun):
    op = "plant-work"

    def run(self, case, step):
        case.client.plant_work(step.args)


# -- operator steps ----------------------------------------------------------------------------------------

@step_run
class AdvanceEpoch(StepRun):
    op = "advance-epoch"

    def run(self, case, step):
        case.model.advance_epoch()
        with case.owner() as conn:
            conn.execute("select appsurface_durable.advance_runtime_epoch()")


@step_run
class AdvanceScopeGeneration(StepRun):
    op = "advance-scope-generation"

    SQL = "select appsurface_durable.advance_scope_generation(%s)"

    def run(self, case, step):
        case.model.advance_scope_generation()
        with case.owner() as conn:
            conn.execute(self.SQL, (case.scope,))

    def run_beside(self, case, step):
        if not case.beside.owner(self.SQL, (case.scope,)):
            return "waited"
        case.model.advance_scope_generation()
        return "committed"


# -- backup and restore --------------------------------------------------------------------------------------

@step_run
class TakeSnapshot(StepRun):
    op = "snapshot"

    def run(self, case, step):
        case.snapshots.take(step.args["name"])


@step_run
class Restore(StepRun):
    op = "restore"

    def run(self, case, step):
        case.snapshots.restore(step.args["name"])
