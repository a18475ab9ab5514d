"""The scenario language: every step kind with its fields, validation, examples and documentation.

A kind is one class registered in STEPS. Parsing (scenarios/scenario.py) validates a file against the kinds, and
docs/scenarios.md is rendered from them (scenarios/render.py). How the TestHost runs a kind (its case/step_runs.py)
and how the model replays it (its judge/step_replays.py) are registries of their own keyed like STEPS, so the
language is read, checked and documented with nothing but barriers/ beneath it.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

from barriers.catalog import BY_NAME as BARRIERS, CANCEL_BARRIERS, PROCESSOR_TRANSACTIONS
from barriers.protocol import PROBLEMS
from barriers.schema import REVOCABLE

from .errors import StepError, TimeError
from .times import relative



@dataclass(frozen=True)
class Step:
    op: str
    args: dict[str, Any]
    index: int

    @property
    def schedule(self) -> str | None:
        return self.args.get("schedule")

    @property
    def expected_outcome(self) -> str:
        """What a client step must answer: ok unless the scenario says the call is refused."""
        return self.args.get("expect", "ok")

    def describe(self) -> str:
        shown = {k: v for k, v in self.args.items() if k != "spec"}
        return f"{self.op} {shown}" if shown else self.op


@dataclass(frozen=True)
class Field:
    """One field of a step (or of an expectation): its name, the TOML types it takes and what it means."""

    name: str
    types: tuple[type, ...]
    meaning: str
    required: bool = False
    choices: tuple[Any, ...] = ()

    @property
    def type_name(self) -> str:
        names = {str: "string", int: "integer", float: "number", bool: "boolean", dict: "table", list: "array"}
        shown = " or ".join(names[t] for t in self.types if not (t is int and float in self.types))
        return shown + (f" ({' / '.join(map(str, self.choices))})" if self.choices else "")

    def accepts(self, value: Any) -> bool:
        if isinstance(value, bool) and bool not in self.types:
            return False  # TOML's true is no number of seconds
        return isinstance(value, self.types)


@dataclass
class Context:
    """What validation knows from the steps before the one it checks."""

    created: set[str] = field(default_factory=set)
    snapshots: set[str] = field(default_factory=set)


SCHEDULE = Field("schedule", (str,), "the scenario's own name for the schedule: `create` gives it, later steps and "
                 "expectations use it", required=True)
SPEC = Field("spec", (dict,), "the schedule definition, in the adapter protocol's form (see \"Definitions\" below; "
             "`at` and `anchor` are scenario times)", required=True)
EXPECT = Field("expect", (str,), "the answer the step must get; without it the step may get any answer; `any`: "
               "either answer, the model taking the step only when it is applied (what `crashproof explore` writes "
               "where the answer hangs on what a fault's recovery processed)", choices=("ok", "fail", "any"))
PROBLEM = Field("problem", (str,), "with `expect = \"fail\"`: the problem type the refusal must name, as the last "
                "segment of its `type` (barriers/PROTOCOL.md, \"Problem types\")", choices=tuple(p.name for p in PROBLEMS))
RULE = Field("rule", (str,), "with `expect`: the spec sentence the answer pins; the check that judges the step "
             "names it")
ANSWER_FIELDS = (EXPECT, PROBLEM, RULE)
STALE_REVISION = Field("stale_revision", (bool,), "with `expect = \"fail\"`: send the revision before the current one "
                       "as `expected_revision`, a stale read the command must refuse")
COMMAND = Field("command", (str,), "a name for the command's `command_id`: creates that give the same name send the "
                "same ID, so a later one repeats a command ID already accepted")
# The command IDs a scenario names: the same in every case, each of which runs on a store of its own.
COMMAND_NAMESPACE = uuid.UUID("2f0c3c1e-8d4b-4a47-9d0e-5b6a1c7e9f13")
LEASE_SECONDS = Field("lease_seconds", (int, float), "the lease the pass asks for (default: the scenario's "
                      "`lease_seconds`)")
LEASE_OWNER = Field("lease_owner", (str,), "the lease owner string the pass claims under (default: the "
                    "implementation's own)")
MAXIMUM = Field("maximum_schedules", (int,), "at most this many schedules in the pass, a whole number from 1 "
                "(default 1)")
CANCEL_AFTER = Field("cancel_after", (int,), "cancel the pass after this many leases (before the next one)")
# Where the host may deliver a pass's cancellation (barrier-reply `cancel-pass`): every after-commit barrier of a
# pass, read from the barrier registry (docs/protocol-notes.md, 34b and 34l). The claim's and the decision's every
# claimed schedule reaches once, so hit N there is the N-th lease; a bridge's is reached only by a lease whose
# decision opened the slot, and the model takes its hit N for the N-th lease too (the scenario makes those leases
# bridge). The model's pass stops after that lease.
LEASE_COMMITS = ("claim", "decision")  # the commits every claimed schedule makes (barriers/catalog.py `commit`)
LEASE_CANCEL_BARRIERS = tuple(b for b in CANCEL_BARRIERS if BARRIERS[b].commit in LEASE_COMMITS)
CANCEL_AT = Field("cancel_at", (dict,), "cancel the pass while it runs: the host answers the barrier `barrier` "
                  "(one of " + ", ".join(f"`{b}`" for b in CANCEL_BARRIERS) + ", every barrier after a commit of "
                  "a pass) at its hit `hit` in this pass (default 1) with `cancel-pass` instead of `continue`; the "
                  "pass finishes that lease, starts no other, and keeps what it committed (barriers/PROTOCOL.md, "
                  "barrier-reply). A bridge's barrier is reached only where the decision opened the slot: the model "
                  "takes its hit N as the pass's N-th lease, so each of those leases must bridge")
# Where a step may run beside a held pass: before the decision commits, so the step comes wholly before the pass's
# effects or wholly after them (a barrier after the decision's commit would split the pass in two for the model).
BESIDE_BARRIERS = ("schedule-claim-before-commit", "schedule-claim-after-commit", "schedule-decision-before-commit")
# A Work's terminal transition changes dispatch eligibility only, so it may also come between a committed decision
# and the rest of its pass: the final state is the model's either way (docs/protocol-notes.md, 29i).
BESIDE_AFTER_DECISION = ("schedule-decision-after-commit",)
DURING = Field("during", (dict,), "a step the host runs from its own session while the implementation is held at "
               "a barrier of this pass (see \"Steps beside a held barrier\")")


class StepKind:
    """One kind of step. Subclasses set the class attributes and override `validate`."""

    op: ClassVar[str]
    summary: ClassVar[str]
    fields: ClassVar[tuple[Field, ...]] = ()
    example: ClassVar[str]  # a whole scenario file that uses the step
    # May run beside a held barrier (`during`): its order against the held transaction is one the spec decides.
    beside_barrier: ClassVar[bool] = False
    # The transactions of barriers/catalog.py the step makes the implementation run (so where a fault can fire in
    # it): the processor's claim, decision and bridge for a pass, the Work-terminal transition for a Work step.
    transactions: ClassVar[frozenset[str]] = frozenset()

    def validate(self, args: dict[str, Any], context: Context) -> None:
        """Checks beyond the fields' types; raises StepError."""

    def claims(self, step: "Step") -> int | None:
        """How many schedules the step's pass claims at most (None: the step makes no pass)."""
        return None


STEPS: dict[str, StepKind] = {}


def step_kind(cls: type[StepKind]) -> type[StepKind]:
    STEPS[cls.op] = cls()
    return cls


def _times_of(spec: dict) -> None:
    for key in ("at", "anchor"):
        if key in spec:
            if not isinstance(spec[key], str):
                raise StepError(f"spec.{key} must be a scenario time such as \"+90s\"")
            try:
                relative(spec[key])
            except TimeError as exc:
                raise StepError(f"spec.{key}: {exc}") from None


# -- client steps -------------------------------------------------------------------------------------------

class ClientStep(StepKind):
    """A schedule command through the implementation (or the host's fallback when it does not offer it)."""

    operation: ClassVar[str]  # the adapter protocol's operation the step sends

    def validate(self, args, context):
        if args.get("stale_revision") and args.get("expect") != "fail":
            raise StepError("a stale revision must be refused: stale_revision needs expect = \"fail\"")


class DefinitionStep(ClientStep):
    fields = (SCHEDULE, SPEC) + ANSWER_FIELDS

    def validate(self, args, context):
        super().validate(args, context)
        _times_of(args["spec"])


@step_kind
class Create(DefinitionStep):
    op = operation = "create"
    summary = "Create a schedule (the client's create command). Its identity is derived from the scenario's name."
    fields = DefinitionStep.fields + (COMMAND,)
    example = '''description = "An At schedule fires once."
[[steps]]
op = "create"
schedule = "launch"
spec = { kind = "at", at = "+90s", target = { command = "launch" } }

[[steps]]
op = "advance"
seconds = 91

[[steps]]
op = "process"

[expect.launch]
works = 1
'''


@step_kind
class Update(DefinitionStep):
    op = operation = "update"
    summary = ("Update a schedule with its current revision: a new generation supersedes the pending occurrences "
               "of older ones.")
    fields = DefinitionStep.fields + (STALE_REVISION,)
    beside_barrier = True
    example = '''description = "An update makes generation 2."
[[steps]]
op = "create"
schedule = "sync"
spec = { kind = "every", every_s = 60, anchor = "+0s", target = { command = "sync-v1" } }

[[steps]]
op = "update"
schedule = "sync"
spec = { kind = "every", every_s = 30, anchor = "+0s", target = { command = "sync-v2" } }

[expect.sync]
occurrences = []
'''


@step_kind
class Delete(ClientStep):
    op = operation = "delete"
    summary = "Delete a schedule with its current revision; deletion is terminal for the schedule's identity."
    fields = (SCHEDULE,) + ANSWER_FIELDS + (STALE_REVISION,)
    beside_barrier = True
    example = '''description = "A deleted schedule cannot be updated."
[[steps]]
op = "create"
schedule = "invoice"
spec = { kind = "at", at = "+60s", target = { command = "invoice" } }

[[steps]]
op = "delete"
schedule = "invoice"

[[steps]]
op = "update"
schedule = "invoice"
spec = { kind = "at", at = "+120s", target = { command = "invoice" } }
expect = "fail"

[expect.invoice]
lifecycle = "deleted"
'''


@step_kind
class Release(ClientStep):
    op = "release"
    operation = "release-after-recovery"
    summary = "ReleaseAfterRecovery with the current revision: rebinds a schedule suspended for an old runtime epoch."
    fields = (SCHEDULE,) + ANSWER_FIELDS + (STALE_REVISION,)
    example = '''description = "A schedule fenced by a new runtime epoch is released."
[[steps]]
op = "create"
schedule = "ledger"
spec = { kind = "every", every_s = 60, anchor = "+0s", target = { command = "ledger" } }

[[steps]]
op = "advance-epoch"

[[steps]]
op = "advance"
seconds = 61

[[steps]]
op = "process"

[[steps]]
op = "release"
schedule = "ledger"

[expect.ledger]
lifecycle = "active"
'''


# -- the clock ---------------------------------------------------------------------------------------------

QUIET_LIMIT_S = 5.0  # a quiet stretch costs its wall time in the fault-free run


@step_kind
class Advance(StepKind):
    op = "advance"
    summary = "Move the server clock by a number of seconds (negative: backwards); it keeps running from there."
    fields = (Field("seconds", (int, float), "how far to move the clock", required=True),
              Field("quiet_s", (int, float), "then, in the fault-free run only, wait this many seconds of wall time "
                    "asking the implementation nothing (at most 5): a passive processor changes nothing and reports "
                    "no barrier meanwhile (`passive-processor`)"))
    example = '''description = "Time passes."
[[steps]]
op = "create"
schedule = "tick"
spec = { kind = "every", every_s = 60, anchor = "+0s", target = { command = "tick" } }

[[steps]]
op = "advance"
seconds = 61

[[steps]]
op = "process"

[expect.tick]
works = 1
'''

    def validate(self, args, context):
        quiet = args.get("quiet_s", 1)
        if isinstance(quiet, bool) or not 0 < quiet <= QUIET_LIMIT_S:
            raise StepError(f"quiet_s must be more than 0 and at most {QUIET_LIMIT_S:g} seconds")


@step_kind
class SetClock(StepKind):
    op = "set-clock"
    summary = ("Set the server clock to a scenario time. With `freeze = true` the clock stands still at that "
               "instant for the next step (every transaction of that step reads that very instant), then runs on "
               "from it. A server-side wait measured on the wall clock (`pg_sleep`) never ends while it stands.")
    fields = (Field("at", (str,), "the scenario time, e.g. `+60s`", required=True),
              Field("freeze", (bool,), "stop the clock there for the next step (default false)"))
    example = '''description = "An update that commits exactly at a nominal instant."
[[steps]]
op = "create"
schedule = "job"
spec = { kind = "every", every_s = 60, anchor = "+0s", target = { command = "job-v1" } }

[[steps]]
op = "set-clock"
at = "+60s"
freeze = true

[[steps]]
op = "update"
schedule = "job"
spec = { kind = "every", every_s = 60, anchor = "+0s", target = { command = "job-v2" } }

[[steps]]
op = "advance"
seconds = 1

[[steps]]
op = "process"

[expect.job]
occurrences = []
'''

    def validate(self, args, context):
        try:
            when = relative(args["at"])
        except TimeError as exc:
            raise StepError(f"at: {exc}") from None
        if args.get("freeze") and when.microsecond:
            raise StepError("at: a frozen clock stands on a whole second (libfaketime's absolute time)")


# -- processing ----------------------------------------------------------------------------------------------

class Pass(StepKind):
    """A process-due request to one processor (`process`) or to two at once (`race`)."""

    transactions = PROCESSOR_TRANSACTIONS

    def labels(self, step: "Step") -> list[str]:
        raise NotImplementedError

    def validate(self, args, context):
        if args.get("maximum_schedules", 1) < 1:
            raise StepError(f"maximum_schedules must be a whole number from 1, not {args['maximum_schedules']} "
                            f"(the host sends no other: barriers/PROTOCOL.md, process-due)")
        if args.get("expect") == "any":
            raise StepError("expect = \"any\" is for client steps; a pass expects ok or fail")
        if "cancel_at" in args:
            check_cancel_at(args)
        if "during" in args:
            during = args["during"]
            allowed_barriers = BESIDE_BARRIERS + (BESIDE_AFTER_DECISION if during.get("op") == "complete-work" else ())
            if during.get("barrier") not in allowed_barriers:
                raise StepError(f"during.barrier must be one of {', '.join(BESIDE_BARRIERS)} (a barrier before the "
                                f"decision commits: the model orders the step before or after the whole pass)")
            if not isinstance(during.get("hit", 1), int) or isinstance(during.get("hit"), bool) \
                    or during.get("hit", 1) < 1:
                raise StepError("during.hit must be a whole number from 1")
            inner = {k: v for k, v in during.items() if k not in ("barrier", "hit")}
            kind = STEPS.get(inner.get("op"))
            if kind is None or not kind.beside_barrier:
                allowed = ", ".join(op for op, k in STEPS.items() if k.beside_barrier)
                raise StepError(f"during.op must be one of {allowed} (steps whose order against a held "
                                f"transaction the spec decides)")
            try:
                check_fields(kind, {k: v for k, v in inner.items() if k != "op"}, context)
            except StepError as exc:
                raise StepError(f"during: {exc}") from None
        if "revoke" in args and ("during" in args or "expect" in args or "cancel_at" in args):
            raise StepError("a pass with a revoked grant is judged by the bridge-role checks: it takes no during, "
                            "expect or cancel_at")
        if "demote_after_decision" in args:
            if args["demote_after_decision"] is not True:
                raise StepError("demote_after_decision takes true (leave it out for a pass that keeps its role)")
            others = sorted(set(args) & {"during", "expect", "cancel_at", "cancel_after", "revoke"})
            if others:
                raise StepError(f"a pass whose role is taken after its decision is judged by "
                                f"bridge-role-proven-after-decision: it takes no {', '.join(others)}")
            if args.get("maximum_schedules", 1) != 1:
                raise StepError("demote_after_decision: maximum_schedules must be 1 (how many schedules a refused "
                                "pass claims before it answers is the implementation's)")

    def claims(self, step):
        return pass_limit(step.args) * len(self.labels(step))

# Privileges a pass may run without (barriers/schema.py REVOCABLE): the host revokes one from the runtime role for
# that pass alone and grants it back once the pass answered.
REVOKE = Field("revoke", (str,), "run the pass with this privilege revoked from the runtime role, granted back once "
               "it answered: `set-local-scope` is EXECUTE on appsurface_durable.set_local_scope(text), which every "
               "scoped transaction needs first (SQLSTATE 42501). With something due the pass must commit nothing "
               "scoped and answer `fail` (or `unknown` once its claim committed) with `retriable: false` "
               "(`bridge-failure-not-retriable`); the model takes nothing from it", choices=tuple(REVOCABLE))


DEMOTE = Field("demote_after_decision", (bool,), "true: take the runtime role from the copy's runtime login between "
               "the pass's committed decision and its bridge (the copy's `runtime_login = \"default-role\"`, "
               "`maximum_schedules` 1). At the pass's `schedule-decision-after-commit` the host resets the login's "
               "default role, so its sessions are the login itself, a member holding the runtime role's privileges, "
               "and ends them; once the pass answered it gives the role back and ends them again. Nothing scoped may "
               "commit from that barrier until the answer (`bridge-role-proven-after-decision`); the model takes the "
               "pass's decision and no bridge, and the lease it left")
# The runtime logins whose every pass must be refused (scenarios/instances.py RUNTIME_LOGINS): a `default-role`
# login is the runtime role until the host takes it away (`demote_after_decision`).
DENIED_LOGINS = ("member",)


def pass_denial(scenario, step: "Step") -> str | None:
    """Why a `process` step's bridge must be refused: a revoked privilege, or the runtime login of its copy
    (`[instances.B] runtime_login = "member"`); None for a pass that may run."""
    if step.op != "process":
        return None
    if "revoke" in step.args:
        return step.args["revoke"]
    instance = scenario.instances.get(step.args.get("processor", "A")) if scenario is not None else None
    login = getattr(instance, "runtime_login", None)
    return login if login in DENIED_LOGINS else None


@step_kind
class Process(Pass):
    op = "process"
    summary = "One bounded process-due pass of one processor (copy A unless `processor` names another)."
    fields = (MAXIMUM, Field("processor", (str,), "which copy of the implementation runs the pass (default A)"),
              CANCEL_AFTER, LEASE_SECONDS, LEASE_OWNER, DURING, EXPECT, RULE, CANCEL_AT, REVOKE, DEMOTE)
    example = '''description = "Two due schedules, one bounded pass each."
[[steps]]
op = "create"
schedule = "a"
spec = { kind = "at", at = "+10s", target = { command = "a" } }

[[steps]]
op = "create"
schedule = "b"
spec = { kind = "at", at = "+10s", target = { command = "b" } }

[[steps]]
op = "advance"
seconds = 11

[[steps]]
op = "process"
maximum_schedules = 2

[expect.a]
works = 1

[expect.b]
works = 1
'''

    def labels(self, step):
        return [step.args.get("processor", "A")]


@step_kind
class Race(Pass):
    op = "race"
    summary = "Two processors (copies A and B) each make one pass at the same moment."
    fields = (MAXIMUM, CANCEL_AFTER, LEASE_SECONDS, LEASE_OWNER, DURING)
    example = '''description = "Two processors under one lease owner string race for one schedule."
[[steps]]
op = "create"
schedule = "job"
spec = { kind = "at", at = "+30s", target = { command = "job" } }

[[steps]]
op = "advance"
seconds = 31

[[steps]]
op = "race"
lease_owner = "worker-pool-1"

[expect.job]
works = 1
'''

    def labels(self, step):
        return ["A", "B"]


@step_kind
class Drain(StepKind):
    op = "drain"
    transactions = PROCESSOR_TRANSACTIONS
    summary = "Fault-free passes of copy A until nothing is due."
    example = '''description = "Everything due is processed."
[[steps]]
op = "create"
schedule = "a"
spec = { kind = "at", at = "+10s", target = { command = "a" } }

[[steps]]
op = "advance"
seconds = 11

[[steps]]
op = "drain"

[expect.a]
works = 1
'''


# -- Work ---------------------------------------------------------------------------------------------------

@step_kind
class CompleteWork(StepKind):
    op = "complete-work"
    transactions = frozenset({"Work terminal"})
    beside_barrier = True
    summary = ("Move a Work item of the schedule to a state (terminal: its slot is free, and a pending coalesced "
               "occurrence requeues the dispatch row in the same transaction).")
    fields = (SCHEDULE, Field("nth", (int,), "which of the schedule's Work items in acceptance order: 1 the first, "
                              "-1 the last (default -1)"),
              Field("state", (str,), "the Work state to move to, e.g. succeeded, failed, canceled", required=True))
    example = '''description = "A finished Work frees the slot."
[[steps]]
op = "create"
schedule = "tick"
spec = { kind = "every", every_s = 60, anchor = "+0s", target = { command = "tick" } }

[[steps]]
op = "advance"
seconds = 61

[[steps]]
op = "process"

[[steps]]
op = "complete-work"
schedule = "tick"
state = "succeeded"

[expect.tick]
works = 1
'''


@step_kind
class PlantWork(StepKind):
    op = "plant-work"
    summary = ("As a plain Work caller (straight into the Work store), take an occurrence's idempotency key for a "
               "Work that is not the occurrence's: the bridge must find the mismatch and link nothing.")
    fields = (SCHEDULE, Field("first", (str,), "the occurrence's first nominal instant (scenario time)", required=True),
              Field("kind", (str,), "the occurrence's kind (default nominal)", choices=("nominal", "recovery",
                                                                                        "coalesced")),
              Field("generation", (int,), "the occurrence's generation (default 1)"))
    example = '''description = "A foreign Work under the occurrence's key is never linked."
[[steps]]
op = "create"
schedule = "job"
spec = { kind = "at", at = "+50s", target = { command = "job" } }

[[steps]]
op = "plant-work"
schedule = "job"
first = "+50s"

[[steps]]
op = "advance"
seconds = 51

[[steps]]
op = "process"

[expect.job]
lifecycle = "suspended"
works = 0
'''

    def validate(self, args, context):
        try:
            relative(args["first"])
        except TimeError as exc:
            raise StepError(f"first: {exc}") from None


# -- operator steps ----------------------------------------------------------------------------------------

@step_kind
class AdvanceEpoch(StepKind):
    op = "advance-epoch"
    summary = ("As an operator after a restore: advance the store's runtime epoch; every schedule bound to the "
               "old one is fenced until released.")
    example = '''description = "A new runtime epoch fences every schedule."
[[steps]]
op = "create"
schedule = "ledger"
spec = { kind = "every", every_s = 60, anchor = "+0s", target = { command = "ledger" } }

[[steps]]
op = "advance-epoch"

[[steps]]
op = "advance"
seconds = 61

[[steps]]
op = "process"

[expect.ledger]
lifecycle = "suspended"
suspension = "runtime-epoch"
'''


@step_kind
class AdvanceScopeGeneration(StepKind):
    op = "advance-scope-generation"
    summary = ("As an operator: advance the scope's generation; every schedule of the scope is fenced until a "
               "public update gives it a new generation.")
    beside_barrier = True
    example = '''description = "A new scope generation fences the scope's schedules."
[[steps]]
op = "create"
schedule = "sync"
spec = { kind = "every", every_s = 60, anchor = "+0s", target = { command = "sync" } }

[[steps]]
op = "advance-scope-generation"

[[steps]]
op = "advance"
seconds = 61

[[steps]]
op = "process"

[expect.sync]
lifecycle = "suspended"
suspension = "scope-generation"
'''


# -- backup and restore --------------------------------------------------------------------------------------

SNAPSHOT_NAME = Field("name", (str,), "the snapshot's name", required=True)


@step_kind
class TakeSnapshot(StepKind):
    op = "snapshot"
    summary = ("Take a backup of the store (every row of every table, in one repeatable-read snapshot) under a "
               "name, for a later `restore`.")
    fields = (SNAPSHOT_NAME,)
    example = '''description = "A restore drill: an hour-old backup comes back."
[[steps]]
op = "create"
schedule = "tick"
spec = { kind = "every", every_s = 600, anchor = "+0s", safety_window_s = 7200, target = { command = "tick" } }

[[steps]]
op = "snapshot"
name = "nightly"

[[steps]]
op = "advance"
seconds = 3601

[[steps]]
op = "drain"

[[steps]]
op = "restore"
name = "nightly"

[[steps]]
op = "advance-epoch"

[[steps]]
op = "process"

[[steps]]
op = "release"
schedule = "tick"

[[steps]]
op = "drain"

[expect.tick]
lifecycle = "active"
'''

    def validate(self, args, context):
        if args["name"] in context.snapshots:
            raise StepError(f"a snapshot named {args['name']!r} was taken already")
        context.snapshots.add(args["name"])


@step_kind
class Restore(StepKind):
    op = "restore"
    summary = ("Restore the store from a snapshot as an operator would: the processors are stopped, every row goes "
               "back to the snapshot (the clock does not), and the processors start again. The case's report "
               "counts the instants that came back under another Work identity than they had before the restore "
               "(`measurements.restore-drill`).")
    fields = (SNAPSHOT_NAME,)
    example = TakeSnapshot.example

    def validate(self, args, context):
        if args["name"] not in context.snapshots:
            raise StepError(f"no snapshot named {args['name']!r} is taken before this step")


# -- validation ---------------------------------------------------------------------------------------------

def check_fields(kind: StepKind, args: dict[str, Any], context: Context) -> None:
    """A step's fields against its kind: known, present where required, of the right type, consistent."""
    known = {f.name: f for f in kind.fields}
    unknown = sorted(set(args) - set(known))
    if unknown:
        raise StepError(f"{kind.op} takes no {', '.join(unknown)} (it takes {', '.join(known) or 'no fields'})")
    missing = sorted(f.name for f in kind.fields if f.required and f.name not in args)
    if missing:
        raise StepError(f"{kind.op} needs {', '.join(missing)}")
    for name, value in args.items():
        spec = known[name]
        if not spec.accepts(value):
            raise StepError(f"{name} has the wrong type ({type(value).__name__}; it takes {spec.type_name})")
        if spec.choices and value not in spec.choices:
            raise StepError(f"{name} must be one of {', '.join(map(str, spec.choices))}, not {value!r}")
    if "rule" in args and "expect" not in args:
        raise StepError("a rule is cited only for a step with an expected answer (expect)")
    if "problem" in args and args.get("expect") != "fail":
        raise StepError("a problem type is expected only with expect = \"fail\"")
    if "schedule" in args and kind.op != "create" and args["schedule"] not in context.created:
        raise StepError(f"schedule {args['schedule']!r} is used before it is created")
    kind.validate(args, context)
    if kind.op == "create":
        context.created.add(args["schedule"])


def check_step(raw: dict[str, Any], context: Context) -> tuple[str, dict[str, Any]]:
    """A step table as read from TOML: its op and its arguments, validated; raises StepError."""
    op = raw.get("op")
    if op not in STEPS:
        raise StepError(f"op {op!r} is not one of {', '.join(STEPS)}")
    args = {k: v for k, v in raw.items() if k != "op"}
    check_fields(STEPS[op], args, context)
    return op, args


def check_cancel_at(args: dict[str, Any]) -> None:
    """A pass's `cancel_at`: a barrier after a commit of the pass, at a hit the pass can reach."""
    cancel = args["cancel_at"]
    unknown = sorted(set(cancel) - {"barrier", "hit"})
    if unknown:
        raise StepError(f"cancel_at takes no {', '.join(unknown)} (it takes barrier, hit)")
    if cancel.get("barrier") not in CANCEL_BARRIERS:
        raise StepError(f"cancel_at.barrier must be one of {', '.join(CANCEL_BARRIERS)} (a barrier after a commit "
                        f"of the pass, where no COMMIT is in flight)")
    hit = cancel.get("hit", 1)
    if not isinstance(hit, int) or isinstance(hit, bool) or hit < 1:
        raise StepError("cancel_at.hit must be a whole number from 1")
    if hit > args.get("maximum_schedules", 1):
        raise StepError(f"cancel_at.hit {hit} lies beyond the pass's maximum_schedules "
                        f"({args.get('maximum_schedules', 1)}): the barrier would never be reached")
    for other in ("during", "expect"):
        if other in args:
            raise StepError(f"cancel_at does not go with {other}")


def pass_limit(args: dict[str, Any]) -> int:
    """The leases one pass may take: its maximum, cut by `cancel_after` and by a `cancel_at` hit."""
    limit = min(args.get("maximum_schedules", 1), args.get("cancel_after", 1 << 30))
    if "cancel_at" in args:
        limit = min(limit, args["cancel_at"].get("hit", 1))
    return limit


def during_step(step: "Step") -> tuple[str, int, "Step"] | None:
    """The barrier, hit and step a pass runs beside its held barrier, if it has one."""
    during = step.args.get("during")
    if during is None:
        return None
    inner = {k: v for k, v in during.items() if k not in ("op", "barrier", "hit")}
    return during["barrier"], during.get("hit", 1), Step(during["op"], inner, step.index)


def spec_to_wire(spec: dict[str, Any]) -> dict[str, Any]:
    """A scenario spec in adapter-protocol form: relative times resolved against T0."""
    wire = dict(spec)
    for key in ("at", "anchor"):
        if key in wire:
            wire[key] = relative(wire[key]).isoformat()
    return wire


# -- expectations and definitions, for validation and for docs/scenarios.md -----------------------------------

OCCURRENCE_FIELDS = (
    Field("generation", (int,), "the occurrence's generation", required=True),
    Field("kind", (str,), "its kind", required=True, choices=("nominal", "recovery", "coalesced")),
    Field("first", (str,), "its first nominal instant (scenario time; `accepted+Ns` from its generation's "
          "acceptance)", required=True),
    Field("last", (str,), "its last nominal instant (the same as `first` for a nominal one)", required=True),
    Field("state", (str,), "its materialization state", required=True, choices=("pending", "materialized",
                                                                                 "superseded")),
)
DROPPED_FIELDS = (
    Field("generation", (int,), "the generation whose due instants were dropped", required=True),
    Field("first", (str,), "the first dropped instant", required=True),
    Field("last", (str,), "the last dropped instant", required=True),
    Field("instants", (int,), "how many instants", required=True),
)
EXPECTATION_FIELDS = (
    Field("lifecycle", (str,), "the definition's lifecycle state", choices=("active", "suspended", "deleted")),
    Field("suspension", (str,), "the suspension reason, e.g. runtime-epoch, scope-generation, clock-anomaly, "
          "idempotency-conflict"),
    Field("occurrences", (list,), "every occurrence row of the schedule, exactly (tables with the fields below)"),
    Field("works", (int,), "how many occurrences are linked to an accepted Work"),
    Field("dropped", (list,), "the due instants an update or delete left undecided, as its history records them "
          "(tables with the fields below)"),
    Field("cursor", (str,), "where the cursor stands exactly (scenario time); the fault-free run only, since a "
          "fault's recovery moves the clock and so the cutoff"),
)
DEFINITION_FIELDS = (
    Field("kind", (str,), "the schedule kind", required=True, choices=("at", "after", "every")),
    Field("at", (str,), "kind at: the instant (scenario time)"),
    Field("after_s", (int, float), "kind after: seconds after the command's acceptance"),
    Field("every_s", (int, float), "kind every: the interval in seconds"),
    Field("anchor", (str,), "kind every: the grid's anchor (scenario time); without it the acceptance time"),
    Field("misfire_policy", (str,), "what a recovery range does (default run-once)", choices=("run-once", "skip")),
    Field("safety_window_s", (int, float), "how late a cutoff may be before the schedule suspends (default 3600)"),
    Field("target", (dict,), "the Work target: `command` (string) and an optional `payload` table", required=True),
)
SCENARIO_FIELDS = (
    Field("description", (str,), "one sentence: what the scenario shows"),
    Field("covers", (list,), "tags for what it covers; `client-deadline` holds lost COMMIT replies past the "
          "implementation's deadline"),
    Field("lease_seconds", (int, float), "the lease every pass asks for (default 2); recovery moves the clock "
          "by this plus one second"),
    Field("equivalence", (bool,), "false: the faulted runs are not compared with the fault-free run"),
    Field("fault_free", (bool,), "true: the matrix plans no faulted case of the scenario, only its fault-free run "
          "(what it shows is a fault-free property, and every barrier's faults are planned in other scenarios)"),
    Field("bridge_clock_shift_s", (int, float), "move the server clock by this many seconds inside a bridge "
          "transaction (the host holds the dispatch row after a committed decision until the bridge waits for it), "
          "to show that Work samples its own clock"),
    Field("instances", (dict,), "per copy of the implementation (`[instances.A]`, `B`, `takeover`): `clock_offset` "
          "(its OS clock skewed, e.g. \"-1d2h\"), `command` (another program for that copy) and `environment` "
          "(variables for it); see barriers/PROTOCOL.md, \"Your own clock\". `[instances.B]` also takes "
          "`runtime_login = \"member\"`: that copy's CRASHPROOF_RUNTIME_DSN logs in as a role that is only a member "
          "of the runtime role, so every `process` step it runs must be refused by the bridge's proof of "
          "current_user (`bridge-role-proven`, `bridge-failure-not-retriable`) and the model takes nothing from it; "
          "or `runtime_login = \"default-role\"`: a login whose default role in the case's database is the runtime "
          "role, so its passes run until a `process` step's `demote_after_decision` takes that away"),
    Field("steps", (list,), "the timeline, in order (`[[steps]]` tables)", required=True),
    Field("expect", (dict,), "per schedule name, what the fault-free run must end with (`[expect.NAME]`)"),
)


SCENARIO = "the scenario"


def check_table(what: str, fields: tuple[Field, ...], table: Any) -> None:
    """A table against its fields (expectations, occurrence rows); raises StepError naming `what`."""
    if not isinstance(table, dict):
        raise StepError(f"{what} must be a table")
    known = {f.name: f for f in fields}
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise StepError(f"{what} has no field {', '.join(unknown)} (it has {', '.join(known)})")
    missing = sorted(f.name for f in fields if f.required and f.name not in table)
    if missing:
        raise StepError(f"{what} needs {', '.join(missing)}")
    prefix = "" if what == SCENARIO else f"{what}."
    for name, value in table.items():
        spec = known[name]
        if not spec.accepts(value):
            raise StepError(f"{prefix}{name} has the wrong type ({type(value).__name__}; it takes {spec.type_name})")
        if spec.choices and value not in spec.choices:
            raise StepError(f"{prefix}{name} must be one of {', '.join(map(str, spec.choices))}, not {value!r}")


def check_expectation(name: str, want: Any) -> None:
    check_table(f"expect.{name}", EXPECTATION_FIELDS, want)
    for key, fields in (("occurrences", OCCURRENCE_FIELDS), ("dropped", DROPPED_FIELDS)):
        for number, row in enumerate(want.get(key, []), 1):
            check_table(f"expect.{name}.{key}[{number}]", fields, row)
            for time_field in ("first", "last"):
                try:
                    relative(row[time_field], datetime.now().astimezone())
                except TimeError as exc:
                    raise StepError(f"expect.{name}.{key}[{number}].{time_field}: {exc}") from None
    if "cursor" in want:
        try:
            relative(want["cursor"], datetime.now().astimezone())
        except TimeError as exc:
            raise StepError(f"expect.{name}.cursor: {exc}") from None


STEP_LINE = re.compile(r"^[ \t]*\[\[[ \t]*steps[ \t]*\]\]", re.MULTILINE)


def step_lines(text: str) -> list[int]:
    """The line of each `[[steps]]` table in a file, in order (empty when the steps are written inline)."""
    return [text.count("\n", 0, match.start()) + 1 for match in STEP_LINE.finditer(text)]
