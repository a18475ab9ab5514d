"""The normative schema surface as data: what `crashproof certify --migrations` checks an implementation's own
schema against (testhost/runs/schema_stage.py), rendered into PROTOCOL.md so an outside team reads the same list.

Written from the spec and the role recipe; the TestHost takes its schema verdicts from here, never from the
reference's code.
"""

from __future__ import annotations

from dataclasses import dataclass

OWNER = "appsurface_durable_owner"
RUNTIME = "appsurface_durable_runtime"
DISPATCHER = "appsurface_durable_dispatcher"
# A privilege every scoped transaction needs first, whatever its statements: PROTOCOL.md has every one set its scope
# with set_local_scope, so without EXECUTE on it the first statement fails with SQLSTATE 42501, before any write. The
# host revokes it from the runtime role for one pass (the scenario step field `revoke`): by name, its privilege.
REVOCABLE = {"set-local-scope": "execute on function appsurface_durable.set_local_scope(text)"}

# Exact table-level privileges per (table, grantee). History partitions carry the parent's. Every other
# relation (a table of the implementation's own, a sequence, a view) is granted to nobody but its owner.
TABLE_GRANTS: dict[str, dict[str, set[str]]] = {
    "schema_migrations": {RUNTIME: {"SELECT"}},
    "store_runtime": {RUNTIME: {"SELECT"}},
    "runtime_versions": {RUNTIME: {"SELECT"}},
    "scopes": {RUNTIME: {"SELECT"}},
    "work_items": {RUNTIME: {"SELECT", "INSERT", "UPDATE"}},
    "schedule_commands": {RUNTIME: {"SELECT", "INSERT"}},
    "schedule_definitions": {RUNTIME: {"SELECT", "INSERT", "UPDATE"}},
    "schedule_generations": {RUNTIME: {"SELECT", "INSERT"}},
    "schedule_occurrences": {RUNTIME: {"SELECT", "INSERT", "UPDATE"}},
    # Dispatch rows are retired, never deleted, by the runtime (a delete would erase the fencing token).
    "schedule_dispatch": {RUNTIME: {"SELECT", "INSERT"}},
    "schedule_dispatch_timing": {RUNTIME: {"SELECT", "INSERT", "UPDATE"}},
    "schedule_history": {RUNTIME: {"SELECT", "INSERT"}},
}
QUEUE_COLUMNS = ("dispatch_id", "schedule_id", "scope_routing_id", "lease_state", "lease_generation",
                 "dispatch_revision")
COLUMN_GRANTS: dict[tuple[str, str], set[tuple[str, str]]] = {
    ("schedule_dispatch", DISPATCHER): {(column, "SELECT") for column in QUEUE_COLUMNS},
    ("schedule_dispatch", RUNTIME): {("lease_state", "UPDATE"), ("dispatch_revision", "UPDATE")},
}
# Who may execute which function besides its owner; any other function: nobody.
FUNCTION_GRANTS: dict[str, set[str]] = {
    "claim_schedule_dispatch": {DISPATCHER},
    "current_scope": {RUNTIME},
    "set_local_scope": {RUNTIME},
    "current_scope_routing_id": {RUNTIME},
    "scope_for_routing_id": {RUNTIME},
    "locked_scope_fences": {RUNTIME},
}
SCHEMA_GRANTS = {(RUNTIME, "USAGE"), (DISPATCHER, "USAGE")}

SCOPED = {"scopes", "work_items", "schedule_commands", "schedule_definitions", "schedule_generations",
          "schedule_occurrences", "schedule_dispatch_timing", "schedule_history"}
_IN_SCOPE = "scope_id = appsurface_durable.current_scope()"
_IN_ROUTING = "scope_routing_id = appsurface_durable.current_scope_routing_id()"
# (command, permissive, roles, USING, WITH CHECK) per table; the policy's name is the implementation's.
SCOPE_POLICIES = [("*", True, (RUNTIME,), _IN_SCOPE, _IN_SCOPE)]
QUEUE_POLICIES = [("*", True, (RUNTIME,), _IN_ROUTING, _IN_ROUTING), ("r", True, (DISPATCHER,), "true", None)]

# The tables and columns the verifier reads (testhost/judge/state.py, the judge's checks, testhost/case/reads.py), by type family.
READ_COLUMNS: dict[str, dict[str, str]] = {
    "schedule_definitions": {"scope_id": "text", "schedule_id": "uuid", "lifecycle_state": "text",
                             "suspension_reason": "text", "revision": "integer", "active_generation": "integer",
                             "cursor_utc": "timestamptz", "runtime_epoch": "integer", "scope_generation": "integer"},
    "schedule_generations": {"scope_id": "text", "schedule_id": "uuid", "generation": "integer",
                             "schedule_kind": "text", "at_utc": "timestamptz", "after_us": "integer",
                             "every_us": "integer", "anchor_utc": "timestamptz", "safety_window_us": "integer",
                             "target_command": "text", "accepted_at_utc": "timestamptz"},
    "schedule_occurrences": {"scope_id": "text", "schedule_id": "uuid", "generation": "integer",
                             "occurrence_kind": "text", "first_nominal_utc": "timestamptz",
                             "last_nominal_utc": "timestamptz", "state": "text", "work_id": "uuid",
                             "work_idempotency_key": "text", "work_command": "text", "work_activity": "text",
                             "decided_at_utc": "timestamptz", "materialized_at_utc": "timestamptz"},
    "work_items": {"scope_id": "text", "work_id": "uuid", "idempotency_key": "text", "command": "text",
                   "activity": "text", "state": "text", "accepted_at_utc": "timestamptz",
                   "terminal_at_utc": "timestamptz"},
    "schedule_dispatch": {"dispatch_id": "integer", "schedule_id": "uuid", "scope_routing_id": "integer",
                          "lease_state": "text", "lease_generation": "integer", "dispatch_revision": "integer"},
    "schedule_dispatch_timing": {"dispatch_id": "integer", "due_at_utc": "timestamptz",
                                 "claimable_at_utc": "timestamptz", "lease_owner": "text",
                                 "lease_expires_at_utc": "timestamptz"},
    "schedule_history": {"scope_id": "text", "schedule_id": "uuid", "recorded_at_utc": "timestamptz",
                         "event": "text", "generation": "integer", "detail": "json"},
    # The client checks: one acceptance time on command and generation, and what a release rebinds.
    "schedule_commands": {"scope_id": "text", "command_id": "uuid", "schedule_id": "uuid", "command_kind": "text",
                          "accepted_at_utc": "timestamptz", "generation": "integer"},
    "store_runtime": {"runtime_epoch": "integer"},
    "scopes": {"scope_id": "text", "generation": "integer"},
}
# Every table a client command or a pass may write, read whole in one statement as the migration owner: a JSON
# object of each table's rows, in the order of their text. What a refused command (testhost/world/table_rows.py) or a
# denied pass (testhost/judge/bridge_role.py) changed is the difference between two such reads.
WRITABLE_TABLES = ("schedule_commands", "schedule_definitions", "schedule_generations", "schedule_occurrences",
                   "schedule_history", "schedule_dispatch", "schedule_dispatch_timing", "work_items")
ROWS_SQL = "select json_build_object(" + ", ".join(
    f"'{t}', (select coalesce(json_agg(r order by r::text), '[]') from appsurface_durable.{t} r)"
    for t in WRITABLE_TABLES) + ") as rows"
# The functions the TestHost itself calls as the migration owner (set-up and scenario steps).
OWNER_CALLS = ("create_scope", "ensure_schedule_history_partitions", "advance_runtime_epoch",
               "advance_scope_generation")


@dataclass(frozen=True)
class SchemaRule:
    """A rule the schema stage of `certify --migrations` checks before any case runs."""

    name: str
    rule: str


SCHEMA_RULES = (
    SchemaRule("schema-tables", "every table and column the checks read exists with the type they read: "
               "schedule_definitions, schedule_generations, schedule_occurrences, work_items, schedule_dispatch, "
               "schedule_dispatch_timing, schedule_history, schedule_commands, store_runtime, scopes; the dispatch queue exposes only dispatch ID, Schedule ID, "
               "scope routing ID, lease state/generation, and dispatch revision; the functions the TestHost calls as the "
               "migration owner exist: create_scope(scope_id), ensure_schedule_history_partitions(), "
               "advance_runtime_epoch(), advance_scope_generation(scope_id)"),
    SchemaRule("schema-grants", "the role recipe's exact role grants: PostgreSQL RLS controls rows; exact column "
               "grants and the execution-only claim_schedule_dispatch function control the queue surface; nothing "
               "else is granted to the runtime, the dispatcher or PUBLIC"),
    SchemaRule("schema-row-security", "forced RLS on every scoped table (scopes, work_items and every schedule_* "
               "table but the queue keyed on scope_id = appsurface_durable.current_scope(); the queue on "
               "scope_routing_id = appsurface_durable.current_scope_routing_id() plus the dispatcher's read-only "
               "policy), with the exact policy shape: command, permissive, roles, USING and WITH CHECK"),
    SchemaRule("schema-history-partitions", "The role recipe validates exact role grants after child creation: "
               "ensure_schedule_history_partitions() creates the current and next schedule_history partitions and "
               "applies forced RLS, exact child policy shape and exact grants (checked with the server clock moved "
               "to a month no migration made: partitions must then hold that month and the next)"),
    SchemaRule("schema-security-definer", "claim_schedule_dispatch is SECURITY DEFINER, and every SECURITY "
               "DEFINER function pins its search_path (set on the function, without public or $user, pg_temp "
               "listed last) and PUBLIC may not execute it"),
    SchemaRule("schema-claim-refusals", "The function rejects blank or control-character lease owners and lease "
               "durations that are null, non-positive, or longer than ten minutes before it changes a row, so an "
               "untrusted dispatcher call cannot strand a Schedule in a non-expiring or excessively long lease. "
               "(Read with protocol notes 24i and 24m. The claim function, called as the dispatcher in a session "
               "whose time zone is UTC with a schedule due, the server clock frozen at each claim's own instant: a "
               "null, zero or negative duration, one ending more than ten minutes after the claim (a microsecond "
               "more included), mixed-sign month/day/time intervals drawn to land on either side of (0, 10 minutes] "
               "(judged where the lease ends: months, then days, then time, as PostgreSQL adds them), a null, empty "
               "or blank owner (White_Space and Default_Ignorable code points only) and an owner holding a Cc, Cf, "
               "Zl or Zp code point must raise and change no dispatch row; lawful calls (exactly ten minutes, one "
               "microsecond, a mixed interval ending inside the cap, owners of letters and digits with an inner "
               "space) must be granted, and the lease a grant records must end after the claim and at most ten "
               "minutes after it.)"),
    SchemaRule("schema-local-scope", "A scoped runtime transaction sets the existing local scope setting, validates "
               "store/runtime/scope/generation fences, records Schedule facts, and bridges a pending occurrence. "
               "(Read with protocol note 24j: the scope authorizes only the transaction that set it. As the runtime "
               "role: a transaction that calls appsurface_durable.set_local_scope(scope_id) sees its scope's rows; "
               "a later transaction on the same connection that sets nothing, and transactions on a connection whose "
               "setting appsurface_durable.scope_id was left at session level (set_config(..., false)) with the "
               "value an earlier transaction's set_local_scope wrote or with the raw scope ID, read no row of any "
               "scoped table and update none.)"),
)
SCHEMA_RULE = {r.name: r.rule for r in SCHEMA_RULES}
