"""The adapter protocol as data: environment, messages, operations, outcomes and timeouts.

The TestHost's adapter client and the generated PROTOCOL.md both read these registries, so the page
cannot drift from what the harness speaks.
"""

from __future__ import annotations

from dataclasses import dataclass

PROTOCOL_VERSION = 1


@dataclass(frozen=True)
class Field:
    name: str
    type: str
    required: bool
    meaning: str


@dataclass(frozen=True)
class Message:
    type: str
    direction: str  # "host → implementation" or "implementation → host"
    meaning: str
    fields: tuple[Field, ...]
    example: str


@dataclass(frozen=True)
class Operation:
    name: str
    mandatory: bool
    meaning: str
    args: tuple[Field, ...]
    value: str
    fallback: str = ""


@dataclass(frozen=True)
class EnvironmentVariable:
    name: str
    meaning: str


@dataclass(frozen=True)
class Timeout:
    name: str
    seconds: float
    meaning: str


ENVIRONMENT = (
    EnvironmentVariable("CRASHPROOF_RUNTIME_DSN", "libpq connection string for the runtime role, through the "
                        "TestHost's proxy. Use it for every scoped transaction."),
    EnvironmentVariable("CRASHPROOF_DISPATCHER_DSN", "libpq connection string for the dispatcher role, through the "
                        "proxy. Use it for the claim transaction only."),
    EnvironmentVariable("CRASHPROOF_SCOPE", "the scope ID to set as the local scope for client operations."),
    EnvironmentVariable("CRASHPROOF_BARRIERS", "the barrier endpoint. `stdio`: report each barrier hit on standard "
                        "output and wait for the host's reply on standard input. Unset: barriers are off."),
    EnvironmentVariable("CRASHPROOF_DEADLINE_S", "the client-side deadline, in seconds, to apply to every database "
                        "round trip. A lost COMMIT reply must turn into an error within it, not a hang."),
)

TIMEOUTS = (
    Timeout("hello", 15.0, "from process start to the `hello` message"),
    Timeout("operation", 60.0, "from a `request` to its `response`, not counting time the host holds a barrier"),
    Timeout("shutdown", 5.0, "from `shutdown` to process exit; then the host sends SIGKILL"),
)

# How the host treats the processes it starts: rendered into PROTOCOL.md as the section "Processes".
PROCESS_RULES = (
    "Each start of your command runs in a session of its own, so the process started leads a new process group. "
    "Every signal the host sends goes to that whole group: the `kill` fault is SIGKILL to the group, the `pause` "
    "fault SIGSTOP and later SIGCONT to the group, and every clean-up (after `shutdown` and its timeout, after a "
    "protocol error, at the end of each case, when a run is interrupted) is SIGKILL to the group. A launcher that "
    "runs your program as its child (a shell script, `go run`, `npm start`, `dotnet run`) is therefore welcome; "
    "`exec` is not required. A child that leaves the group (calls `setsid` or `setpgid`) is out of the host's "
    "reach: do not do that.",
    "The host watches the process it started. If it exits while the host waits for a message (the `hello`, a "
    "response), the case ends at once with the verdict `error` and the reason `the implementation exited with "
    "status N` and its last lines of standard error; any child of it still in the group is killed. The timeouts "
    "below are only for a live process that says nothing. A case restarts a process that the host killed; one "
    "that keeps ending on its own ends the case after a bounded number of starts.",
    "Standard error goes to `REPORT_DIR/logs/<case id>/<instance>.stderr` (instances `A`, `B`, `takeover`; a "
    "restart appends to the same file), and each case in `report.json` names its logs.",
)

OUTCOMES = {
    "ok": "the operation happened; `value` holds its result",
    "fail": "the operation definitely did not happen (nothing durable changed); `problem` or `error` says why",
    "unknown": "the operation may or may not have happened (for example the connection failed during COMMIT)",
}

_spec = Field("spec", "object", True, "a schedule definition: `kind` (`at`, `after`, `every`), `at`/`anchor` "
              "(RFC 3339 UTC), `after_s`/`every_s` (seconds), optional `misfire_policy` (`run-once`, `skip`), "
              "`safety_window_s`, and `target` {`command`, `payload`}")
_schedule = Field("schedule_id", "string (UUID)", True, "the schedule")
_revision = Field("expected_revision", "integer", True, "the revision the caller last read")

OPERATIONS = (
    Operation("process-due", True, "one bounded pass of the implementation's processor",
              (Field("maximum_schedules", "integer", False, "at most this many schedules (default 1)"),
               Field("lease_seconds", "number", False, "lease duration to claim with (default 30). The host sets it "
                     "(2 s in the suite) and moves the server clock just past it to recover from a fault: honour it"),
               Field("lease_owner", "string", False, "lease owner to claim as (default: the implementation's own)"),
               Field("cancel_after", "integer", False, "cancel the pass after this many schedules: cancellation "
                     "must be observed before the next lease is started, and what was committed stays committed")),
              "counts: an object of integers (`claimed`, `materialized`, ... any the implementation keeps)"),
    Operation("create", False, "create a schedule",
              (_spec, Field("schedule_id", "string (UUID)", False, "the identity to create under"),
               Field("command_id", "string (UUID)", False, "idempotency key of the command")),
              "the schedule as read back (at least `schedule_id`, `revision`)",
              "the reference client, over the normative schema, as the runtime role"),
    Operation("update", False, "a new generation of a schedule", (_schedule, _spec, _revision),
              "the schedule as read back", "the reference client"),
    Operation("delete", False, "delete a schedule (terminal)", (_schedule, _revision), "the schedule as read back",
              "the reference client"),
    Operation("release-after-recovery", False, "release a stale-runtime-epoch suspension", (_schedule, _revision),
              "the schedule as read back", "the reference client"),
    Operation("complete-work", False, "move a Work item to a state (`running`, `retrying`, `suspended`, "
              "`succeeded`, `failed`, `canceled`); terminal states run the Work terminal transaction",
              (Field("work_id", "string (UUID)", True, "the Work"), Field("state", "string", True, "the new state")),
              "the Work row", "the reference Work store"),
)

MESSAGES = (
    Message("hello", "implementation → host", "first line the implementation writes, before reading anything",
            (Field("protocol", "integer", True, f"protocol version, {PROTOCOL_VERSION}"),
             Field("implementation", "string", True, "name and version, printed in the certificate"),
             Field("operations", "array of strings", True, "the operations it implements; `process-due` is mandatory")),
            '{"type": "hello", "protocol": 1, "implementation": "acme-scheduler 2.3", "operations": ["process-due", "create"]}'),
    Message("request", "host → implementation", "run one operation; one request at a time, in order",
            (Field("id", "integer", True, "echoed in the response"), Field("op", "string", True, "the operation"),
             Field("args", "object", True, "the operation's arguments")),
            '{"type": "request", "id": 7, "op": "process-due", "args": {"maximum_schedules": 4}}'),
    Message("response", "implementation → host", "the result of the request with the same id",
            (Field("id", "integer", True, "the request's id"),
             Field("outcome", "string", True, "`ok`, `fail` or `unknown`"),
             Field("value", "any", False, "with `ok`: the result"),
             Field("problem", "object", False, "with `fail`: an RFC 9457 problem (type, title, status, detail, errors)"),
             Field("error", "object", False, "with `fail` or `unknown`: {`kind`, `message`, `retriable`}")),
            '{"type": "response", "id": 7, "outcome": "ok", "value": {"claimed": 1, "materialized": 1}}'),
    Message("barrier", "implementation → host", "a barrier was reached; the implementation blocks until the reply",
            (Field("name", "string", True, "a barrier name from the catalog below"),
             Field("context", "object", True, "what the implementation knows there (schedule_id, dispatch_revision, "
                   "work_id, ...); shown in reports")),
            '{"type": "barrier", "name": "schedule-decision-before-commit", "context": {"schedule_id": "6f1c..."}}'),
    Message("barrier-reply", "host → implementation", "go on from the barrier (the host may have injected a fault "
            "first, or may kill the process instead of replying)",
            (Field("action", "string", True, "`continue`"),),
            '{"type": "barrier-reply", "action": "continue"}'),
    Message("shutdown", "host → implementation", "exit cleanly", (), '{"type": "shutdown"}'),
)

BY_OPERATION = {op.name: op for op in OPERATIONS}
MANDATORY = tuple(op.name for op in OPERATIONS if op.mandatory)
