"""The adapter protocol as data: environment, messages, operations, outcomes and timeouts.

The TestHost's adapter client and the generated PROTOCOL.md both read these registries, so the page
cannot drift from what the harness speaks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .catalog import CANCEL_BARRIERS

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


_URI_FORM = ("as a libpq connection URI: `postgresql://USER[:PASSWORD]@HOST:PORT/DBNAME[?KEYWORD=VALUE&...]`, every "
             "part percent-encoded (a host that is a socket directory too; an IPv6 host in brackets), each keyword "
             "of the DSN but user, password, host, port and dbname a query parameter. For a driver that reads only "
             "URIs: node-pg's `connectionString` reads a keyword/value string as a database name.")

ENVIRONMENT = (
    EnvironmentVariable("CRASHPROOF_RUNTIME_DSN", "libpq connection string for the runtime role, in libpq's "
                        "keyword/value form (`host=127.0.0.1 port=54321 user=appsurface_durable_runtime "
                        "dbname=...`; a value holding a space or a quote is single-quoted the libpq way), through "
                        "the TestHost's proxy in a case whose fault acts on the network (`disconnect`, "
                        "`lost-commit-reply`), straight to the server otherwise. Use it, or the same connection "
                        "as a URI in `CRASHPROOF_RUNTIME_DSN_URI`, for every scoped transaction. In a scenario that "
                        "tests the bridge's proof (`runtime_login`) it logs in as a role that is only a member of "
                        "the runtime role, which your code must refuse, or as a login whose default role is the "
                        "runtime role until the host takes that away (*Transactions of a pass*)."),
    EnvironmentVariable("CRASHPROOF_RUNTIME_DSN_URI", "the same connection as `CRASHPROOF_RUNTIME_DSN` (server, port, "
                        "database, login), " + _URI_FORM),
    EnvironmentVariable("CRASHPROOF_DISPATCHER_DSN", "libpq connection string for the dispatcher role, in the "
                        "keyword/value form, through the proxy or straight to the server as the runtime DSN. Use it "
                        "(or `CRASHPROOF_DISPATCHER_DSN_URI`) for the claim transaction only."),
    EnvironmentVariable("CRASHPROOF_DISPATCHER_DSN_URI", "the same connection as `CRASHPROOF_DISPATCHER_DSN`, "
                        + _URI_FORM),
    EnvironmentVariable("CRASHPROOF_SCOPE", "the scope ID to set as the local scope for client operations."),
    EnvironmentVariable("CRASHPROOF_BARRIERS", "the barrier endpoint. `stdio`: report each barrier hit on standard "
                        "output and wait for the host's reply on standard input. Unset: barriers are off."),
    EnvironmentVariable("CRASHPROOF_DEADLINE_S", "the client-side deadline, in seconds, to apply to every database "
                        "round trip: a decimal number with a fractional part (`2.0` in the cases, `5.0` in the "
                        "schema-version stage), so parse it as a floating-point number, not an integer (Go's "
                        "`strconv.ParseFloat`, Rust's `f64`). A lost COMMIT reply must turn into an error within "
                        "it, not a hang: give up on the round trip and close that connection (the host watches for "
                        "the close; see *Answers*). The host sets it at every start, so under the host it is never "
                        "unset; the default you take without it (run by hand) is yours and no check reads it (the "
                        "reference takes 30 s)."),
)

TIMEOUTS = (
    Timeout("build", 600.0, "the build stage: from the first start of a spawned command, once before any case, to "
            "its first line on standard output (*Processes*)"),
    Timeout("hello", 15.0, "from process start to the `hello` message, in every case (after the build stage)"),
    Timeout("operation", 60.0, "from a `request` to its `response`, not counting time the host holds a barrier"),
    Timeout("shutdown", 5.0, "from `shutdown` to process exit; then the host sends SIGKILL"),
)

# How the host treats the processes it starts: rendered into PROTOCOL.md as the section "Processes".
PROCESS_RULES = (
    "Each start of your command runs in a session of its own, so the process started leads a new process group. "
    "Every signal the host sends goes to that whole group: the `kill` fault is SIGKILL to the group, the `pause` "
    "and `stall` faults SIGSTOP and later SIGCONT to the group, and every clean-up (after `shutdown` and its timeout, after a "
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
    "A spawned command (every command but a `PYTHON -m MODULE` the fork server starts) gets a build stage first: "
    "once per run, before any case, the host starts it with the environment a case gives (a store of the stage's "
    "own, with the scope) and waits up to the build timeout (*Timeouts*) for its first line on standard output; "
    "then it sends `shutdown` and kills the group, as after a case. A launcher that builds on its first start "
    "(`cargo build`, `go build`, `npm ci && tsc`) builds there, so the hello timeout of every case measures a start "
    "that finds the build done: keep what you build where the next start finds it, and write the build's output "
    "to standard error, not standard output. What the first line says is the cases' to judge. A first start that exits, or says "
    "nothing within the build timeout, ends the run before any case with one line naming the stage, how the start "
    "ended and the last line of its standard error (`crashproof` exits 1, no report is written; the log is "
    "`REPORT_DIR/logs/build-stage/A.stderr`). A run records the stage's time as `run.build_stage` of "
    "`report.json`; `crashproof scenarios --matrix`, `crashproof explore` and the pytest plugin run the stage "
    "too, and `crashproof mutants --impl` starts each patched copy once before its cases, under the same timeout.",
)

# Your own OS clock: how the host skews it and how it tells whether the skew took effect (testhost/impl/skew.py).
CLOCK_RULES = (
    "A certified implementation takes its cutoffs and leases from PostgreSQL only; its own OS clock may be wrong. "
    "The host proves it by running copies of your command with their OS clock skewed: `crashproof certify "
    "--impl-clock-offset DURATION` skews every copy (`+1d`, `-36h`, `90s`, `-1d2h`: days, hours, minutes, "
    "seconds), and a scenario may skew one copy with `[instances.B] clock_offset = \"-1d\"` (the built-in "
    "`*-skewed-*` scenarios do: they are part of the default certification). A scenario's own offset for a copy "
    "replaces `--impl-clock-offset` for that copy.",
    "A skewed copy runs with "
    "`LD_PRELOAD` naming libfaketime (the one the world's PostgreSQL uses, `CRASHPROOF_LIBFAKETIME`), "
    "`FAKETIME=\"+86400\"` (the offset in seconds, relative: the clock keeps ticking at real speed) and "
    "`FAKETIME_DONT_FAKE_MONOTONIC=1` (the monotonic clock, which timeouts read, is left alone). A fork cannot add "
    "a preload, so a `PYTHON -m MODULE` command is forked from a fork server of its own, started with those "
    "variables (the child inherits libfaketime loaded and has them in its environment too); every other command "
    "is spawned with them. libfaketime 0.9.10 "
    "then fails `clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, ...)` (Python's `time.sleep`) with EINVAL, so the "
    "host preloads a small fix before it that passes a sleep on a monotonic clock straight to the kernel "
    "(`testhost/impl/native/monotonic_sleep.c`, built once with the system's C compiler; where there is none, "
    "`time.sleep` fails in a skewed process: wait on a condition, a socket or an event with a timeout instead).",
    "The host must know the skew took effect. Put your process's own wall-clock reading in the `hello` "
    "(`clock_utc`, RFC 3339 UTC, read right before you write the hello): the host takes its own clock right "
    "before the start and when the hello arrives, and the skew is `in-effect` when your reading less the offset "
    "falls between the two (1 s either side), `not-in-effect` when your reading itself falls there (your runtime "
    "does not read time through libc: Go's reads it through the vDSO, so libfaketime does not skew a Go program, "
    "cgo or not), `unverified` when the offset is too small to tell. Without `clock_utc` the host reads "
    "`/proc/PID/environ` and `/proc/PID/maps` of every process of your group: `unverified` when each one "
    "preloads and maps libfaketime, `not-in-effect` when one does not.",
    "What the host does with the verdict: the case runs and is judged as usual, and `report.json` records for each "
    "skewed instance the offset and the verdict with its evidence (`clock_skew`); the certificate counts the "
    "skewed cases by verdict and names every case whose skew was not in effect. It never states a skew that "
    "was not in effect: an implementation that cannot be skewed is certified without that claim, not failed "
    "for it (the skew is the harness's instrument, not your code).",
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
              (Field("maximum_schedules", "integer", False, "at most this many schedules (default 1). The host sends a "
                     "whole number from 1 only (*Answers*: what another value gets is yours)"),
               Field("lease_seconds", "number", False, "lease duration to claim with (default 30). The host sets it "
                     "(2 s in the suite) and moves the server clock just past it to recover from a fault: honour it. "
                     "One the claim function refuses must be refused (*Answers*)"),
               Field("lease_owner", "string", False, "lease owner to claim as (default: the implementation's own); "
                     "a blank or control-character one must be refused (*Answers*)"),
               Field("cancel_after", "integer", False, "cancel the pass after this many schedules: cancellation "
                     "must be observed before the next lease is started, and what was committed stays committed")),
              "counts: an object of integers, any of the names under *Counts of a pass* below (each optional; "
              "other names are yours, and the host ignores them)"),
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
             Field("operations", "array of strings", True, "the operations it implements; `process-due` is mandatory"),
             Field("contract", "integer", False, "the contract major version you implement "
                   "(docs/contract-changes.md); a failing check whose rule changed after it says so, and a version "
                   "newer than the host's is refused"),
             Field("clock_utc", "string (RFC 3339)", False, "your process's own wall-clock reading, for the host to "
                   "see whether a skewed OS clock it asked for took effect (*Your own clock*); never used for a "
                   "verdict on your protocol")),
            '{"type": "hello", "protocol": 1, "contract": 6, "implementation": "acme-scheduler 2.3", "operations": ["process-due", "create"]}'),
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
            (Field("action", "string", True, "`continue`, or `cancel-pass`: go on from the barrier with the pass's "
                   "cancellation signalled now, as a caller's CancellationToken firing at that moment (sent only to a "
                   "barrier of `process-due`; every implementation must honour it, see *Answers*)"),),
            '{"type": "barrier-reply", "action": "continue"}'),
    Message("shutdown", "host → implementation", "exit cleanly", (), '{"type": "shutdown"}'),
)



@dataclass(frozen=True)
class Count:
    """A count a `process-due` answer may report: what it counts, and how the verifier sees it committed."""

    name: str
    meaning: str
    seen_as: str


# The counts the host compares with the committed facts (`process-counts`). Each is optional; every one that is
# reported must be exact. Counts of what leaves no durable fact the verifier can attribute (a fenced transaction
# writes nothing; two decisions extending one coalesced occurrence leave one move) are not named here.
COUNTS = (
    Count("claimed", "dispatch rows this pass claimed: claim transactions that committed and returned a row",
          "the sum of `schedule_dispatch.lease_generation` moved by this many (each claim advances a row's lease "
          "generation by one)"),
    Count("occurrences", "occurrences of kind `nominal` or `recovery` this pass created (each waits for a bridge of "
          "its own; a coalesced occurrence created or extended is not counted here)",
          "this many new `schedule_occurrences` rows of kind `nominal` or `recovery`"),
    Count("materialized", "occurrences this pass linked to their accepted Work",
          "this many `schedule_occurrences` rows whose `work_id` went from null to set"),
    Count("suspended", "schedules this pass suspended (runtime epoch, scope generation, clock anomaly, idempotency "
          "conflict)", "this many new `schedule_history` rows with event `suspended`"),
    Count("recovery_skipped", "recovery ranges this pass skipped under misfire policy `skip`",
          "this many new `schedule_history` rows with event `recovery-skipped`"),
)

# How the host compares the counts, rendered under the table of counts in PROTOCOL.md.
COUNT_RULES = (
    "Count only what committed: a transaction rolled back (and retried) or whose COMMIT outcome is unknown adds "
    "nothing, even if it did commit. A count is a JSON integer; a name reported by a pass must be exact, a name left "
    "out is not read.",
    "The host reads the normative tables just before it sends a `process-due` request and again once the answer "
    "came, and compares each reported count of an `ok` answer with what committed in between. Two processors "
    "racing (scenario steps `race`) cannot be told apart in the tables: their counts are summed and compared with "
    "what committed while either ran. A request during which a `lost-commit-reply` or `pause` fault fired is not "
    "compared (a COMMIT whose reply was lost is unknown to you, and during a pause another processor works), nor "
    "are racing requests during which any fault fired (it waits for one processor at its barrier and may cut the "
    "other's COMMIT, leaving that one's outcome unknown to it), nor an answer other than `ok`; the case's "
    "timeline says why (`counts-not-compared`). A `kill`, `disconnect` or `db-crash` fault at one processor's "
    "barrier leaves it knowing what committed: those requests are compared.",
)

BY_OPERATION = {op.name: op for op in OPERATIONS}


@dataclass(frozen=True)
class ProblemType:
    """A problem a refused client command answers with: its name (the last segment of the problem's `type`)."""

    name: str
    when: str


# The problem types a scenario may expect (`problem = "..."` with `expect = "fail"`), and so every problem the
# checks accept: a step's expected name must be one of these, and the answer's `type` must end in it as its last
# segment (after the last `:`, `/` or `#`), so `urn:acme:problem:revision-conflict` is a `revision-conflict`.
PROBLEMS = (
    ProblemType("validation", "the definition is invalid: a kind without its fields, a non-positive interval or "
                "safety window, a target command that is blank or too long, an At instant at or before the "
                "command's acceptance; or an argument cannot be read (a wrong JSON type, a missing or unknown field, "
                "an instant without an offset: *Client commands* below)"),
    ProblemType("not-admitted", "outside Gate A: a Cron schedule, a Flow target, a policy other than QueueOne "
                "plus RunOnce"),
    ProblemType("not-found", "no schedule with that identity in the scope"),
    ProblemType("scope-not-found", "the scope is not registered"),
    ProblemType("revision-conflict", "`expected_revision` is not the definition's current revision (a stale "
                "read): nothing is applied, the caller reads again"),
    ProblemType("schedule-deleted", "the schedule is deleted: deletion is terminal for that identity"),
    ProblemType("release-refused", "release-after-recovery on a schedule that is not suspended for a stale "
                "runtime epoch (active, or suspended for scope generation, clock anomaly or idempotency conflict)"),
    ProblemType("command-conflict", "the `command_id` was accepted before for another command (another kind or "
                "another schedule)"),
    ProblemType("invalid-state", "the command does not apply in the schedule's state (a create of an identity "
                "that exists)"),
)
BY_PROBLEM = {problem.name: problem for problem in PROBLEMS}


def problem_name(problem_type: str) -> str:
    """The last segment of a problem's `type` URI, the name PROBLEMS lists."""
    return re.split(r"[:/#]", problem_type or "")[-1]
MANDATORY = tuple(op.name for op in OPERATIONS if op.mandatory)


@dataclass(frozen=True)
class Section:
    """A group of normative rules: what a certified implementation must do, in the protocol's words."""

    title: str
    rules: tuple[str, ...]


# Everything the checks enforce, stated for an outside team. Each rule a check enforces names that check in
# backticks; PROTOCOL.md renders these sections, and the check table after them.
NORMATIVE = (
    Section("Roles and schema", (
        "The database holds three roles: `appsurface_durable_owner` (the migration owner; the TestHost reads and "
        "audits as it), `appsurface_durable_runtime` (every scoped transaction: `CRASHPROOF_RUNTIME_DSN`) and "
        "`appsurface_durable_dispatcher` (the claim only: `CRASHPROOF_DISPATCHER_DSN`). Your code never connects "
        "as the owner.",
        "The schema is the reference's migrations, applied in order before any case runs: {migrations}. The "
        "normative tables are `schedule_definitions`, `schedule_generations`, `schedule_occurrences`, "
        "`schedule_history`, `schedule_dispatch` with `schedule_dispatch_timing`, and the Work store's "
        "`work_items`, with the client's `schedule_commands`; the checks read these and nothing else, but for the "
        "fences a release must rebind (`store_runtime.runtime_epoch`, `scopes.generation`).",
    )),
    Section("Transactions of a pass", (
        "A pass claims with `appsurface_durable.claim_schedule_dispatch(lease_owner, lease_duration)` as the "
        "dispatcher in a transaction of its own, then works on the claimed schedule in scoped runtime "
        "transactions: a *decision* (fences, evaluation, disposition, cursor) and, when an occurrence may take the "
        "slot, a *bridge* (Work, link, lease release). Claim, decision and bridge each commit on their own "
        "(`instant-decided-once`, `one-work-per-materialized-occurrence`).",
        "A scoped transaction first proves `current_user` is the runtime role, then sets its scope with "
        "`select appsurface_durable.set_local_scope(scope_id)`, which binds the scope to that transaction alone "
        "(a value left at session level, or written to the setting by hand, authorizes nothing). The scope of a "
        "claimed schedule is `appsurface_durable.scope_for_routing_id(scope_routing_id)`.",
        "The configured runtime role is always `appsurface_durable_runtime`; prove it on the connection as it "
        "logged in, never by `SET ROLE` or `SET SESSION AUTHORIZATION`. Scenario `bridge-role` runs one pass with "
        "`CRASHPROOF_RUNTIME_DSN` logged in as `crashproof_runtime_member`, a role that holds the runtime role's "
        "privileges (a member, INHERIT) without being it, and one pass with EXECUTE on "
        "`appsurface_durable.set_local_scope(text)` revoked from the runtime role (granted back once the pass "
        "answered), each with a schedule due. Neither pass may commit a scoped transaction: under the member login "
        "no occurrence, cursor move, Work, link, history row, definition change or lease release commits, only a "
        "claim may (`bridge-role-proven`). Each answers `fail` when nothing of it committed (prove `current_user` "
        "before you claim, and no lease is left behind), else `unknown` (the claim committed, so `fail` would be "
        "dishonest: `outcome-honesty`), in both cases with `error.retriable` false and never `ok`: no retry can "
        "succeed before an operator changes the login or the grant (`bridge-failure-not-retriable`). A lease the "
        "claim took is left to expire; once the proper login and grant are back, a later pass materializes the "
        "instant exactly once.",
        "Every scoped transaction proves it, the bridge too, on the connection it runs on. Scenario "
        "`bridge-role-after-decision` gives `CRASHPROOF_RUNTIME_DSN` the login `crashproof_runtime_by_default`, whose "
        "default role in the case's database is the runtime role (`ALTER ROLE ... IN DATABASE ... SET role`): "
        "`current_user` is the runtime role in every session it opens (`session_user` is the login), so its passes "
        "run. At the `schedule-decision-after-commit` of one pass the host resets that default and ends the login's "
        "sessions: from then on a session of the login is the login itself, a member holding every privilege of "
        "the runtime role, whether your bridge reconnects, takes a pool's other connection or retries the "
        "schedule. Nothing scoped may commit from that barrier until the pass answered: no Work, link, "
        "materialized occurrence, history row, definition change or lease release "
        "(`bridge-role-proven-after-decision`). The answer is yours (the ended session is a disconnect; a refused "
        "proof is not retriable); the lease the decision took is left to expire. Once the pass answered the host "
        "gives the role back and ends the login's sessions again, and the next pass materializes the instant "
        "exactly once.",
        "The database guards its audit trail and fencing token for every role: `schedule_history` rows carry "
        "`recorded_at_utc = transaction_timestamp()`, an event of the schema's list and a schedule of their own "
        "scope, and are never updated or deleted; `cursor_utc` never moves backwards; the runtime cannot delete "
        "dispatch rows (a deleted schedule's row is retired, not removed). A write that breaks one is refused.",
        "The fencing token is `dispatch_revision`, which the claim returns. Every scoped transaction locks the "
        "schedule's dispatch row first and writes nothing unless the revision is still the claimed one and the row "
        "is `leased`. The lease release (lease_state `ready`, `dispatch_revision` + 1, lease owner and expiry "
        "null) is written in the last scoped transaction of the pass for that schedule, so the release advances "
        "the revision too: a processor whose lease expired and was taken over writes nothing more "
        "(`late-writes-fenced`).",
        "What `due_at_utc` (and `claimable_at_utc`, equal to it while ready) becomes on release: the transaction "
        "time when the slot is free and another occurrence of the active generation waits for its bridge; else "
        "the first nominal instant after the cursor; null when there is none (an At or After already decided, a "
        "suspended or deleted schedule). After recovery the TestHost runs fault-free passes until nothing is due "
        "and every lease is released (`recovered-nothing-due`).",
        "At most one Work per schedule per pass. Bridge order: when the slot is free, the oldest pending "
        "non-coalesced occurrence of the active generation bridges first (by first instant), then the coalesced "
        "one (`queue-one-slot`).",
        "`process-due` after a fault must cope with a connection it kept from before the fault being dead (the "
        "database restarted, or the proxy cut it): reconnect and retry the interrupted scoped transaction after "
        "rollback (bounded); the fence makes the repeat safe. A kept connection that fails on its first use "
        "after a fault is the normal case, not an error to answer with.",
        "A retry after a rollback compares the dispatch revision again, like a first attempt: when the server "
        "ended your session while your process was stopped inside a transaction (the `stall` fault), another "
        "processor may have taken the lease over and finished the schedule before you noticed, and whatever you "
        "do next must write nothing for it (`late-writes-fenced`, `transaction-fate`).",
        "The decision reads the scope generation under a lock that an operator's `advance_scope_generation()` "
        "waits for (`appsurface_durable.locked_scope_fences()` share-locks the scope row), or checks it again at "
        "commit: once a scope-generation change has committed, no decision on the old generation commits "
        "(`fence-locked-beside-decision`). Likewise an update or delete of a schedule waits for a decision that "
        "holds its definition, or that decision commits nothing of the superseded generation "
        "(`nothing-materialized-for-superseded-or-suspended`). The TestHost runs such a change from its own "
        "session while your decision is held at its barrier, and cancels it as soon as the server shows it waiting for a lock.",
        "While your process waits at a processor barrier whose context names a `schedule_id`, the host reads that "
        "schedule's rows (definition, dispatch row, occurrences, `suspended` and `recovery-skipped` history rows, the "
        "Work under its occurrences' idempotency keys), each with its writer's `xmin`. Between an after-commit "
        "barrier (`schedule-claim-after-commit`, `schedule-decision-after-commit`) and the next transaction's "
        "before-commit barrier nothing of that schedule may commit; what commits between a transaction's "
        "before-commit and after-commit barriers is that one transaction, one `xmin` on every row, and a decision "
        "that writes or extends an occurrence or skips a range moves the cursor in it (`decision-commits-together`); "
        "an occurrence linked in a bridge links a Work accepted by that same transaction "
        "(`work-inside-link-transaction`). Write a transaction's rows at its top level: a row written inside a "
        "savepoint carries the savepoint's own xid and reads as another transaction. Every occurrence of the "
        "schedule is `pending`, `materialized` or `superseded` at every such barrier, not only at the end "
        "(`gate-a-states-at-every-barrier`). With one processor running and no fault injected yet, at "
        "`schedule-claim-before-commit` exactly one session of yours holds a transaction ID, logged in as the "
        "dispatcher, and at `schedule-decision-before-commit` exactly one, as the runtime role; the claim advances "
        "`lease_generation` by exactly one (`transaction-roles-at-barriers`). Barriers with a fault, another request "
        "or a committed step beside the pass between them are not compared.",
    )),
    Section("Time: instants, lateness, recovery", (
        "The cutoff is PostgreSQL's time in the decision transaction (`transaction_timestamp()`), never the "
        "processor's clock (`due-instants-decided`). Nominal instants are evaluated in (cursor_utc, cutoff_utc]: "
        "a cutoff exactly on an instant decides it in that pass, neither dropped nor left to a later pass, and "
        "the cursor then stands exactly on it (`pass-decides-what-was-due`; "
        "scenarios `cutoff-on-instant` for a grid and `single-instant-on-cutoff` for At and After, with the "
        "server clock frozen on the instant). An instant the cursor stands on is not decided again "
        "(`range-opens-after-the-cursor`).",
        "An Every grid is `anchor + n·every` for every integer n, negative included: with an anchor in the "
        "future, the instants before the anchor are due as they pass (`model-agreement`). At is its instant, "
        "After is `accepted_at_utc + after`. All arithmetic is in whole microseconds.",
        "If you offer `create` or `update`: a generation of an Every whose command gave no anchor stores as "
        "`anchor_utc` exactly its own `accepted_at_utc`, to the microsecond, an update's new generation as much as "
        "the first (`acceptance-anchor`; scenario `update-unanchored`).",
        "If you offer `update`: it moves the cursor to max(cursor_utc, accepted_at_utc), never back, also when it "
        "commits while the server clock stands behind the cursor or exactly on it; every read of a cursor, after "
        "each step and at each barrier, is at or after the highest read before (`cursor-never-moves-back`; "
        "scenarios `update-behind-cursor`, `update-on-cursor`). It adds a generation row and leaves every older "
        "one, its target snapshot included, exactly as it was (`generations-never-rewritten`).",
        "Lateness is `cutoff − the first due instant after the cursor`. Lateness greater than the generation's "
        "safety window is an anomaly: the schedule is suspended with reason `clock-anomaly` and the cursor does not "
        "move (`suspension-keeps-the-cursor`); lateness equal to the window is inside it, to the microsecond "
        "(`anomaly-suspends`, `anomaly-only-past-the-window`; scenario `lateness-on-window`: late by exactly a "
        "120 s window recovers, by the window and one microsecond suspends).",
        "One due instant is a `nominal` occurrence with first = last = that instant. Two or more are one "
        "`recovery` occurrence with the range [first, last] under misfire policy `run-once`; under `skip` the "
        "range writes no occurrence at all, only the history row `recovery-skipped` (`processor-history`).",
        "Under `skip` a range is skipped also while the QueueOne slot is held: the policy wins, the range writes "
        "its `recovery-skipped` row and no occurrence, and neither creates nor extends the pending coalesced one. "
        "One due instant is no range: behind a held slot it coalesces under either policy (protocol note 5a; "
        "`model-agreement`, `processor-history`).",
        "A decision that disposes of at least one due instant (an occurrence written or extended, or a range "
        "skipped) moves the cursor to that decision's cutoff. A cutoff at or behind the cursor, a fence mismatch "
        "and an anomaly leave it where it is (`cursor-never-moves-back`, `fence-before-cursor-at-every-step`, "
        "`suspension-keeps-the-cursor`, `cursor-within-decisions-and-server-time`). A pass with nothing due may "
        "leave it or move it to its cutoff: the reference leaves it, and `idle-pass-keeps-cursor` reports the "
        "other as a difference from the reference, never a failure (a reference choice).",
        "The safety window is the generation's own `safety_window_s` (default 3600): lateness at or under it is a "
        "recovery (or nominal) decision, never a suspension (`anomaly-only-past-the-window`; scenario "
        "`safety-window-sides`: a 120 s window late by about 240 s suspends, a 7,200 s window late by about "
        "5,340 s recovers).",
        "A cutoff at or behind the cursor decides nothing and suspends nothing, also when the schedule is "
        "claimable then (a Work finished while the server clock stood behind the cursor requeued it: the bridge "
        "still materializes the waiting coalesced occurrence). No `clock-anomaly` suspension is written at a "
        "transaction time at or before its cursor, and no occurrence or skipped range starts after the time of "
        "the transaction that decided it (`behind-cursor-no-op`; scenario `clock-behind-cursor`).",
    )),
    Section("Occurrences and the slot", (
        "Occurrence kinds are `nominal`, `recovery` and `coalesced`; Gate A writes the states `pending`, "
        "`materialized` and `superseded` only (`gate-a-writes-three-states`).",
        "The QueueOne slot is held by a materialized occurrence (of any generation) whose Work is not terminal "
        "(`succeeded`, `failed`, `canceled`), and also by a pending occurrence of the active generation waiting "
        "for its bridge. Instants due while the slot is held go to the one pending coalesced occurrence: created, "
        "or its last instant moved forward; its first instant never moves (`at-most-one-pending-coalesced`, "
        "`at-most-one-pending-coalesced-at-every-step`, `coalesced-range-forward`).",
        "A new generation supersedes the pending occurrences of older ones; nothing is materialized for a "
        "superseded occurrence or while the schedule is suspended "
        "(`nothing-materialized-for-superseded-or-suspended`).",
        "A Work that reaches terminal truth while a pending coalesced occurrence waits requeues the schedule in "
        "the same transaction (the schema's trigger sets `due_at_utc` to its transaction time, and "
        "`claimable_at_utc` too unless a lease is held). A pass that holds the lease then must not write a later "
        "due time over that requeue when it releases: after every step, an active schedule with a pending "
        "coalesced occurrence of its active generation, no nonterminal Work in its slot and no lease held is "
        "claimable at once (`requeue-kept`). Scenario `coalesce-terminal-callback` finishes the Work from the "
        "host's own session at `schedule-decision-after-commit`, right after a decision coalesced an instant "
        "behind it: a release in a transaction of its own after that barrier must look again.",
    )),
    Section("Work identity and payload", (
        "The canonical occurrence identity is the text `scope_id|schedule_id|generation|kind|first_nominal_utc` "
        "with no spaces around `|`: the scope ID as given; the schedule UUID in lower-case 8-4-4-4-12 form; the "
        "generation as a decimal integer; `kind` the occurrence kind (`nominal`, `recovery`, `coalesced`); the "
        "first nominal instant in UTC as `YYYY-MM-DDTHH:MM:SS.ffffffZ` (always six fractional digits). The Work "
        "ID, idempotency key, activity and command derive from it as given under *Deterministic Work identity* "
        "below (`deterministic-work-identity`).",
        "The Work is accepted inside the bridge transaction; the link on the occurrence is compare-or-return: "
        "where no link exists write exactly the derived tuple and the state `materialized`; where another Work "
        "holds the occurrence's idempotency key, link nothing and suspend the schedule with reason "
        "`idempotency-conflict` in the same transaction (`link-compare-or-return`).",
        "The Work owns its clock: a Work accepted in the bridge carries `accepted_at_utc` = `clock_timestamp()` "
        "sampled when it is inserted (the reference's column default), never the bridge's "
        "`transaction_timestamp()`; the occurrence's `materialized_at_utc` is the bridge transaction's "
        "`transaction_timestamp()`. So a linked Work's `accepted_at_utc` is later than its occurrence's "
        "`materialized_at_utc`. The scenarios that set `bridge_clock_shift_s` ({bridge_clock_scenarios}) pin it: "
        "at a committed decision's `schedule-decision-after-commit` (the first one no fault fired at; again at "
        "the next until one move happened) the host takes the schedule's dispatch row `FOR UPDATE` and replies; "
        "once the bridge transaction waits for that lock it moves the server clock forward by that many seconds "
        "and lets go. The Work accepted in that bridge must carry an `accepted_at_utc` at or after the moved "
        "clock, and a run in which the clock never moved inside a bridge fails. Lock the dispatch row with a "
        "plain `FOR UPDATE` that waits (`work-own-clock`).",
        "The Work payload is yours: the checks do not read it. The reference writes `{\"target\": <the "
        "generation's target payload>, \"occurrence\": {schedule_id, generation, kind, first_nominal_utc, "
        "last_nominal_utc}}` with instants in the canonical form above.",
    )),
    Section("Suspension and history", (
        "Fences come first in every scoped transaction, before any cursor move or Work: runtime epoch first (a "
        "stale persisted `runtime_epoch` suspends with reason `runtime-epoch`), then scope generation (reason "
        "`scope-generation`); when both mismatch, the reason is `runtime-epoch` (`fence-before-cursor`; a schedule "
        "the model holds fenced acts on nothing after any step: `fence-before-cursor-at-every-step`).",
        "A suspension sets `lifecycle_state` `suspended` and `suspension_reason`, bumps `revision` by one, keeps "
        "the cursor, releases the lease with no due time, and writes one `schedule_history` row with event "
        "`suspended` and `detail.reason` equal to the reason; a `clock-anomaly` detail also holds `cursor_utc`, "
        "the unchanged cursor as an RFC 3339 instant (`processor-history`, `suspension-keeps-the-cursor`).",
        "A skipped recovery range writes one `schedule_history` row with event `recovery-skipped` and "
        "`detail.first_nominal_utc`, `detail.last_nominal_utc` (RFC 3339) in the decision transaction. Other "
        "history rows (`recovery-declared`, the client's `created`, `updated`, `deleted`, "
        "`released-after-recovery`) are free: write them or not, the checks do not read them. An update or "
        "delete that drops due instants of the old generation no pass decided records them in one "
        "`due-instants-superseded` row (first, last, count); the reference client writes it, and the scenario "
        "`update-drops-due-instants` expects it.",
        "The definition's `revision` records every change of the row but its cursor: whatever changes "
        "`lifecycle_state`, `suspension_reason`, `active_generation`, `runtime_epoch` or `scope_generation` (a "
        "suspension, an update, a delete, a release) also moves `revision` forward, and nothing moves it back; a pass "
        "that only moves the cursor leaves it (`definition-revision`, judged after every step and on the final "
        "state).",
    )),
    Section("Answers", (
        "`fail` tells the host nothing was applied: an operation answers `fail` only when none of its "
        "transactions committed. Once any transaction of a `process-due` pass committed (the claim's lease "
        "included), the pass answers `ok` with its counts, or `unknown` if a later COMMIT's outcome is "
        "unknown; never `fail` (`outcome-honesty`).",
        "An `ok` answer of `process-due` counts what its pass committed: each count it reports under a name of "
        "*Counts of a pass* equals what the verifier saw commit while the pass ran (`process-counts`).",
        "A cancelled pass (`cancel_after`) answers `ok` with the counts of what it did; what it committed stays "
        "committed. A pass whose claim found nothing answers `ok` with zero counts.",
        "A pass asked for a lease the claim function refuses (a `lease_seconds` of zero or less, or longer than ten "
        "minutes; a blank or control-character `lease_owner`: scenario `claim-refusals` sends 1800, 0 and \" \", "
        "explore also -5 and 601) answers `fail` and changes no row: let `claim_schedule_dispatch` refuse it "
        "(SQLSTATE class 22) before anything of the pass commits, or refuse it yourself first (`step-outcomes`). "
        "`maximum_schedules` is a whole number from 1 in every request the host sends (a scenario step with "
        "another value is refused when its catalog loads), so no check reads what you answer to 0, a negative "
        "number or a non-integer; the reference answers `fail` (error kind `bad-arguments`) and changes nothing.",
        "A pass is also cancelled in flight: the host answers one of its barriers after a commit ("
        + ", ".join(f"`{b}`" for b in CANCEL_BARRIERS) + "; scenario step `cancel_at`) with the barrier-reply action "
        "`cancel-pass` instead of `continue`. Honouring it is mandatory, like `cancel_after`, at each of them: go on "
        "from that barrier, finish the "
        "lease in hand (its decision and, when the decision opened the slot, its bridge, whose commit releases the "
        "lease), start no other lease, and answer `ok` with the counts of what the pass did. Cancellation does not "
        "roll back a committed Schedule fact: what the pass had committed for that schedule when the cancel came "
        "(its occurrences with their ranges, the cursor, its history and Work rows) is all still there when it "
        "answers and at the end; nothing compensates for it (`cancel-keeps-committed`, which the verifier judges on "
        "the schedule's rows read while you wait for that reply, again once you answered, and at the end of the "
        "case; `pass-bounded` holds the pass to the leases it had claimed when the cancel came; "
        "`pass-leaves-no-lease`). A planned cancel whose barrier is never reached fails the case, unless a fault "
        "stopped the pass before it. An implementation that ignores the action goes on to the next lease and fails "
        "`pass-bounded`.",
        "A pass claims at most `maximum_schedules` dispatch rows, and at most `cancel_after` when it is cancelled "
        "after that many: the host counts the lease generations that moved while the request ran (racing "
        "requests against their sum; not where a `lost-commit-reply` or `pause` fault fired) (`pass-bounded`). "
        "Before any fault of the case, a pass that claimed nothing must answer `ok` (`empty-pass-ok`), unless its "
        "step expects a refusal, and a pass that answered leaves no lease it took held: every dispatch row whose "
        "lease generation moved while it ran is `ready` once it answered, so cancellation is looked at before "
        "the next claim, not after it (`pass-leaves-no-lease`). Which of the schedules due a pass bounded below "
        "them claims is yours (the claim function orders by claimable time only, and ties are the heap's): where "
        "a pass with no fault claimed as many as the verifier's model of Gate A expected but others, the model "
        "follows the dispatch rows it claimed; so does it after a pass whose bridge was refused, which leaves its "
        "leases to expire.",
        "The processor is passive: it runs a pass only while a `process-due` request is in flight, never on a "
        "timer or a thread of its own. A barrier reported while no request is in flight (or after the answer to "
        "the one in flight) is answered `continue` at once and fails the case, and so does a claim, an "
        "occurrence decided or linked, a skipped range or a "
        "suspension that commits across steps in which the host sent no `process-due` (`passive-processor`; in "
        "scenario `safety-window-sides` an `advance` with `quiet_s` leaves 1.5 s of wall time with two schedules "
        "due and nothing asked, in the fault-free run).",
        "A lost COMMIT reply must turn into an error within it, not a hang: when a round trip outlives "
        "`CRASHPROOF_DEADLINE_S`, give up on it and close that connection. The host holds a lost COMMIT reply "
        "for the deadline plus {margin} s (at the first hit of each before-commit barrier in the scenarios tagged "
        "`client-deadline`: {deadline_scenarios}) and fails the case if the connection is still open then "
        "(`client-deadline`).",
    )),
    Section("Barriers on paths that decide nothing", (
        "The claim barriers fire only when the claim returned a row. The decision barriers fire for every "
        "claimed schedule whose lease still holds (its dispatch revision the claimed one, the row `leased`), "
        "whatever the decision is: nothing due, a suspension (stale runtime epoch or scope generation, clock "
        "anomaly), or a disposition. A transaction that finds its lease lost (another dispatch revision: the "
        "lease expired and was taken over, or the schedule was deleted) writes nothing; the reference reports no "
        "barrier for it. The matrix plans faults by hit number from the reference's fault-free run, so a barrier "
        "reached fewer times than there fails `planned-fault-fired`.",
        "A pass opens a bridge for a schedule right after that schedule's decision committed, in the same pass "
        "and under the same lease, exactly when the decision leaves the slot free (no materialized occurrence "
        "with a nonterminal Work) and an occurrence of the active generation pending: one the decision wrote, or "
        "one pending from before (a coalesced occurrence a Work's terminal transition requeued, an occurrence "
        "whose bridge a fault cut off). Otherwise (nothing due and nothing pending, an instant coalesced behind "
        "a held slot, a skipped range, a suspension) the decision itself releases the lease and no bridge "
        "follows. That is where the reference opens one, and the bridge barriers are planned by its hit numbers "
        "(protocol notes 13 and 29i): an implementation that opens bridges elsewhere (a release of its own after "
        "a decision that opened no slot) reaches them other times, and a bridge barrier reached fewer times "
        "than the reference's fails `planned-fault-fired`.",
        "The bridge barriers `schedule-bridge-before-commit` and `schedule-link-after-commit` fire for every "
        "bridge transaction, including one that only releases the lease (it found the runtime epoch or scope "
        "generation stale and suspended, or no occurrence left to bridge). `schedule-work-after-acceptance` "
        "fires once the Work writer returned inside the bridge, with the Work it accepted or with the Work "
        "another caller had already accepted under the occurrence's idempotency key (the link then conflicts "
        "and suspends the schedule); a bridge that calls no writer does not reach it. The Work-terminal "
        "barriers fire only for a transition into a terminal state (*Work transitions*).",
    )),
    Section("Work transitions", (
        "`complete-work` is optional. Where you offer it, it moves the Work `work_id` of the scope "
        "`CRASHPROOF_SCOPE` to `state`: `running`, `retrying` or `suspended` (nonterminal), `succeeded`, `failed` or "
        "`canceled` (terminal), in a scoped runtime transaction (the role proof and `set_local_scope` first: "
        "*Transactions of a pass*). The host asks it only for a Work accepted under one of a schedule's "
        "occurrence idempotency keys (`schedule-occurrence/v1|...`). The model "
        "follows every such step, and `model-agreement` compares each linked Work's state with it; the answer's "
        "`value` is not read.",
        "A transition into a terminal state sets `terminal_at_utc` to a time of its own transaction (the reference "
        "samples `clock_timestamp()`; the schema's check keeps it null exactly while the state is nonterminal) and, "
        "in that same transaction, requeues the schedule when a pending coalesced occurrence of its active "
        "generation waits: the normative schema's trigger on `work_items` does the requeue for any writer that "
        "updates `state` (`requeue-kept`, `recovered-nothing-due`). `queue-one-slot` reads `terminal_at_utc`: no "
        "later occurrence of the schedule may be materialized before the Work that held the slot ended.",
        "Terminal is final (protocol note 11a): a transition out of a terminal state changes nothing, and a Work "
        "moved back fails `model-agreement`, which keeps it terminal. The reference answers it `fail` with the "
        "problem `invalid-state`; the host accepts any answer that changed nothing, and judges a `fail` only by "
        "`outcome-honesty` (nothing of it may have committed).",
        "A retry after an unknown COMMIT never reaches you as a repeat: after an `unknown` or retriable answer the "
        "host reads the Work's state itself and asks again only while the Work is not yet in the state asked, and "
        "the recovery from a fault during the step redoes it only then. A request for the state the Work is "
        "already in comes only from a scenario that asks it twice: a nonterminal one is yours to apply again or "
        "not (the reference applies it and counts an attempt), a terminal one is a transition out of a terminal "
        "state (above). `attempt` is yours: no check reads it (the reference counts each move into `running` or "
        "`retrying`).",
        "`work-terminal-before-commit` comes after the transition's last write, before its COMMIT, and "
        "`work-terminal-after-commit` once the COMMIT returned, each once per transition into a terminal state; "
        "a nonterminal or refused transition reports neither. Their context is yours, shown in reports (the "
        "reference sends `work_id` and `state`); no check reads it.",
    )),
    Section("Client commands", (
        "`create`, `update`, `delete` and `release-after-recovery` are optional. Where you offer one, the rules "
        "below hold your answers and your rows; where you do not, the host's fallback (the reference client) "
        "runs the step and is held to the same checks, so a scenario's client steps judge whoever ran them.",
        "A refused command answers `fail` with a `problem` naming one of the *Problem types* above and changes no "
        "row: before and after every client step the scenario expects refused, the host reads every row of "
        "`schedule_commands`, `schedule_definitions`, `schedule_generations`, `schedule_occurrences`, "
        "`schedule_history`, `schedule_dispatch`, `schedule_dispatch_timing` and `work_items`, and any row added, "
        "removed or changed fails the step (`client-outcomes`, or `step-outcomes` for a step that cites its "
        "rule). A client step the scenario expects to apply must answer `ok` (`client-outcomes`).",
        "A stale `expected_revision` (an update, delete or release that read an older revision) is refused with "
        "`revision-conflict`; a create whose `command_id` was accepted before for another schedule with "
        "`command-conflict`; an invalid definition (an Every interval of zero, say) with `validation` "
        "(`client-outcomes`; scenario `client-commands`).",
        "Create and update capture one PostgreSQL `transaction_timestamp()`: the generation they make and their "
        "`schedule_commands` row (that schedule, that generation, `command_kind` `create` or `update`) carry the "
        "same `accepted_at_utc`, the server's time while the command ran, never the client's own clock "
        "(`command-accepted-at`, after every accepted create and update).",
        "A generation holds the definition as sent, to the microsecond: `at_utc` and an explicit `anchor_utc` "
        "exactly as given (scenario `client-commands` sends an anchor `+90.123456s` and an At `+3600.654321s`), "
        "`every_us`, `after_us`, `safety_window_us` when sent, and `target_command` (`definition-persisted`).",
        "`release-after-recovery` applies only to a schedule suspended for a stale runtime epoch: on an active "
        "schedule, or one suspended for scope generation, clock anomaly or idempotency conflict, it answers "
        "`release-refused` and changes nothing (`step-outcomes`; scenarios `client-commands`, "
        "`scope-generation-repair`, `link-conflict`, `release-refuses-clock-suspension`). An accepted release "
        "leaves the definition `active` with the store's current `runtime_epoch` and the scope's current "
        "generation in `scope_generation`, both rebound when both had advanced, and its cursor where it stood "
        "(`release-rebinds`; scenario `release-keeps-cursor` advances both before the suspension).",
        "A hostile argument is refused, never accepted, crashed on or retried: a client command whose arguments "
        "hold a wrong JSON type, a missing required field, an unknown field of `spec` or `spec.target`, a "
        "string that is not a UUID where one goes, an instant without an offset or outside the years 0001-9999 "
        "in UTC, a duration that is not a finite number of seconds, is not positive or exceeds 10^10 s (a "
        "`safety_window_s` 366 days), a target command that is blank, over 256 characters or holds a control, "
        "format or line/paragraph separator character, or a payload holding U+0000 or a lone surrogate answers "
        "`fail` with a `validation` problem whose `errors` keys or `detail` name the argument (its wire path, "
        "such as `spec.every_s`, or a suffix of it, with or without `_s`); an unknown schedule answers "
        "`not-found`, a well-typed but stale `expected_revision` `revision-conflict`. Fields beside `spec` that "
        "the operation does not define are the envelope's and ignored. Every table of the schema is "
        "byte-identical before and after, `unknown` or a `retriable` error does not answer it, and a process "
        "that exits on it fails (`hostile-client-inputs`). `claim_schedule_dispatch` called as the dispatcher "
        "with a blank, control- or format-character or over-200-character owner, or a null, zero, negative, "
        "mixed-sign, over-ten-minute or out-of-range duration raises SQLSTATE class 22 with a message naming "
        "`lease owner` or `lease duration`, and changes no row (`hostile-claim-inputs`). `crashproof explore` "
        "draws these in its hostile phase (docs/explore.md); scenario `hostile-definitions` holds a few.",
    )),
)
