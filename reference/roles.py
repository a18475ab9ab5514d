"""The role recipe and the validator of exact grants, row security and policy shape."""

from __future__ import annotations

from .db import Session
from .sql import query, resource_text

OWNER = "appsurface_durable_owner"
RUNTIME = "appsurface_durable_runtime"
DISPATCHER = "appsurface_durable_dispatcher"
ROLES = (OWNER, RUNTIME, DISPATCHER)

# Exact table-level privileges per (relation, grantee); anything else granted is a finding.
# History partitions ("schedule_history_YYYYMM") must carry the parent's grants.
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
FUNCTION_GRANTS: dict[str, set[str]] = {
    "claim_schedule_dispatch": {DISPATCHER},
    "current_scope": {RUNTIME},
    "set_local_scope": {RUNTIME},
    "current_scope_routing_id": {RUNTIME},
    "scope_for_routing_id": {RUNTIME},
    "locked_scope_fences": {RUNTIME},
}
# The guards the database enforces for every role, by table (history partitions carry the parent's):
# enabled triggers with these names must exist, or history and the cursor are forgeable.
GUARD_TRIGGERS: dict[str, set[str]] = {
    "schedule_definitions": {"cursor_never_moves_backwards"},
    "schedule_generations": {"generations_are_immutable"},
    "schedule_occurrences": {"coalesced_range_only_grows"},
    "schedule_history": {"history_is_an_audit_trail"},
}
SECURITY_DEFINERS = {"claim_schedule_dispatch", "scope_for_routing_id", "locked_scope_fences"}
SCHEMA_GRANTS = {(RUNTIME, "USAGE"), (DISPATCHER, "USAGE")}
SCOPED_BY_SCOPE_ID = {"scopes", "work_items", "schedule_commands", "schedule_definitions", "schedule_generations",
                      "schedule_occurrences", "schedule_dispatch_timing", "schedule_history"}
SCOPE_POLICY = ("scope_id = appsurface_durable.current_scope()",) * 2
QUEUE_POLICY = ("scope_routing_id = appsurface_durable.current_scope_routing_id()",) * 2


def apply_recipe(session: Session) -> None:
    """Create the three roles if missing and grant them this database (run as a superuser)."""
    with session.transaction():
        session.execute(resource_text("roles", "recipe.sql"))


def _relation_key(relation: str, parent: str | None) -> str:
    return "schedule_history" if parent == "schedule_history" else relation


def validate(session: Session) -> list[str]:
    """Every difference between the database and the declared security shape; empty means exact."""
    findings: list[str] = []
    roles = {row["rolname"]: row for row in session.all(query("roles", "role_attributes"), {"roles": list(ROLES)})}
    for role in ROLES:
        if role not in roles:
            findings.append(f"role {role} is missing; run the role recipe")
    if OWNER in roles and not roles[OWNER]["rolbypassrls"]:
        findings.append(f"{OWNER} must have BYPASSRLS (it audits every scope and owns the claim function)")
    for role in (RUNTIME, DISPATCHER):
        if role in roles and (roles[role]["rolsuper"] or roles[role]["rolbypassrls"]):
            findings.append(f"{role} must be neither superuser nor BYPASSRLS")

    security = {row["relation"]: row for row in session.all(query("roles", "row_security"))}
    actual: dict[tuple[str, str], set[str]] = {}
    for row in session.all(query("roles", "relation_grants")):
        actual.setdefault((row["relation"], row["grantee"]), set()).add(row["privilege"])
    relations = set(security)
    for relation in sorted(relations):
        key = _relation_key(relation, security[relation]["parent"])
        if security[relation]["kind"] in ("S", "v", "m"):
            expected: dict[str, set[str]] = {}  # sequences and views: nobody but the owner
        elif key not in TABLE_GRANTS:
            findings.append(f"table {relation} is not declared in the security shape")
            continue
        else:
            expected = TABLE_GRANTS[key]
        grantees = {g for (r, g) in actual if r == relation} | set(expected)
        for grantee in sorted(grantees):
            have, want = actual.get((relation, grantee), set()), expected.get(grantee, set())
            for privilege in sorted(have - want):
                findings.append(f"extra grant: {grantee} has {privilege} on {relation}")
            for privilege in sorted(want - have):
                findings.append(f"missing grant: {grantee} lacks {privilege} on {relation}")
        if key in SCOPED_BY_SCOPE_ID or key == "schedule_dispatch":
            if not (security[relation]["enabled"] and security[relation]["forced"]):
                findings.append(f"row level security is not enabled and forced on {relation}")

    columns: dict[tuple[str, str], set[tuple[str, str]]] = {}
    for row in session.all(query("roles", "column_grants")):
        columns.setdefault((row["relation"], row["grantee"]), set()).add((row["column_name"], row["privilege"]))
    for key in sorted(set(columns) | set(COLUMN_GRANTS)):
        have, want = columns.get(key, set()), COLUMN_GRANTS.get(key, set())
        for column, privilege in sorted(have - want):
            findings.append(f"extra column grant: {key[1]} has {privilege} on {key[0]}.{column}")
        for column, privilege in sorted(want - have):
            findings.append(f"missing column grant: {key[1]} lacks {privilege} on {key[0]}.{column}")

    functions: dict[str, set[str]] = {}
    definers: set[str] = set()
    for row in session.all(query("roles", "function_grants")):
        functions.setdefault(row["function"], set()).add(row["grantee"])
        if row["security_definer"]:
            definers.add(row["function"])
    for function in sorted(set(functions) | set(FUNCTION_GRANTS)):
        have, want = functions.get(function, set()), FUNCTION_GRANTS.get(function, set())
        for grantee in sorted(have - want):
            findings.append(f"extra grant: {grantee} may execute {function}")
        for grantee in sorted(want - have):
            findings.append(f"missing grant: {grantee} may not execute {function}")
    for function in sorted(SECURITY_DEFINERS - definers):
        if function in functions:
            findings.append(f"{function} must be SECURITY DEFINER")

    schema = {(row["grantee"], row["privilege"]) for row in session.all(query("roles", "schema_grants"))}
    for grantee, privilege in sorted(schema - SCHEMA_GRANTS):
        findings.append(f"extra grant: {grantee} has {privilege} on schema appsurface_durable")
    for grantee, privilege in sorted(SCHEMA_GRANTS - schema):
        findings.append(f"missing grant: {grantee} lacks {privilege} on schema appsurface_durable")

    guards: dict[str, set[str]] = {}
    for row in session.all(query("roles", "enabled_triggers")):
        guards.setdefault(row["relation"], set()).add(row["trigger"])
    for relation in sorted(relations):
        key = _relation_key(relation, security[relation]["parent"])
        for trigger in sorted(GUARD_TRIGGERS.get(key, set()) - guards.get(relation, set())):
            findings.append(f"guard trigger {trigger} is missing or disabled on {relation}")

    policies: dict[str, list[dict]] = {}
    for row in session.all(query("roles", "policies")):
        policies.setdefault(row["relation"], []).append(row)
    for relation in sorted(relations):
        key = _relation_key(relation, security[relation]["parent"])
        if security[relation]["kind"] in ("S", "v", "m"):
            continue
        expected_shape = []
        if key in SCOPED_BY_SCOPE_ID:
            expected_shape = [("scope_isolation", "*", True, [RUNTIME], SCOPE_POLICY)]
        elif key == "schedule_dispatch":
            expected_shape = [("dispatcher_reads_queue", "r", True, [DISPATCHER], ("true", None)),
                              ("scope_isolation", "*", True, [RUNTIME], QUEUE_POLICY)]
        shape = sorted((p["policy"], p["command"], p["permissive"], list(p["roles"]),
                        (_strip(p["using_expr"]), _strip(p["check_expr"]))) for p in policies.get(relation, []))
        want = sorted((name, cmd, perm, roles_, tuple(_strip(e) for e in exprs))
                      for name, cmd, perm, roles_, exprs in expected_shape)
        if shape != want:
            findings.append(f"policy shape on {relation} is {shape}, expected {want}")
    return findings


def _strip(expr: str | None) -> str | None:
    """pg_get_expr adds parentheses and casts; compare the bare predicate."""
    if expr is None:
        return None
    return expr.replace("(", "").replace(")", "").replace("::text", "").strip()
