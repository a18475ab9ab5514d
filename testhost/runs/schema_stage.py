"""The schema stage of `certify --migrations DIR`: an implementation's own migrations, applied as the migration
owner, checked against the normative surface before any case runs; every finding names its rule.

The expectations are data in barriers/schema.py (rendered into PROTOCOL.md), written from the spec and the role
recipe, not read from any implementation: a verdict never depends on the reference's code. The reference client only
seeds one due schedule (set-up, like every fallback) so the claim function's refusals can be seen changing no row and
the local scope has rows to show or hide (the probes: testhost/runs/schema_probes.py).
"""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cache
from importlib import resources
from pathlib import Path

import psycopg
from psycopg.rows import dict_row

from barriers.schema import (COLUMN_GRANTS, DISPATCHER, FUNCTION_GRANTS, OWNER, OWNER_CALLS, QUEUE_COLUMNS,
                             QUEUE_POLICIES, READ_COLUMNS, RUNTIME, SCHEMA_GRANTS, SCHEMA_RULE, SCOPE_POLICIES, SCOPED,
                             TABLE_GRANTS)

from testhost.judge.rules import CheckResult
from testhost.judge.contract_notes import settle
from testhost.world.store import MigrationFailed, Store, new_store, schema_migrations
from testhost.world.worlds import CLOCK, World

from .stage_ids import SCHEMA_STAGE_ID

CASE_ID = SCHEMA_STAGE_ID
SCOPE = "schema-stage"

_FAMILIES = {"smallint": "integer", "integer": "integer", "bigint": "integer", "text": "text",
             "character varying": "text", "uuid": "uuid", "timestamp with time zone": "timestamptz",
             "jsonb": "json", "json": "json"}

# How far ahead the history partitions are made: a month no migration has made yet.
FUTURE = timedelta(days=400)


@cache
def _queries() -> dict[str, str]:
    text = resources.files("testhost.runs").joinpath("schema_stage.sql").read_text()
    parts = re.split(r"^-- name: ([a-z_]+)\s*$", text, flags=re.MULTILINE)
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2])}


def check_directory(directory: Path) -> None:
    """A one-line error unless `directory` holds migrations numbered 0001.. without gaps."""
    if not directory.is_dir():
        raise MigrationFailed(f"--migrations {directory}: no such directory")
    try:
        schema_migrations(directory)
    except ValueError as exc:
        raise MigrationFailed(f"--migrations {exc}") from None


def migrations_digest(directory: Path) -> str:
    """The SHA-256 over the shipped migrations (each file's name and text, in order): the schema certified."""
    digest = hashlib.sha256()
    for migration in schema_migrations(directory):
        digest.update(f"{migration.name}\0{migration.sql}\0".encode())
    return digest.hexdigest()


@dataclass
class Findings:
    """Findings per rule, and how many objects each rule examined (a rule over nothing would prove nothing)."""

    by_rule: dict[str, list] = field(default_factory=lambda: {name: [] for name in SCHEMA_RULE})
    rows: dict[str, int] = field(default_factory=lambda: {name: 0 for name in SCHEMA_RULE})

    def add(self, rule: str, finding: str | dict) -> None:
        self.by_rule[rule].append(finding)

    def examined(self, rule: str, count: int = 1) -> None:
        self.rows[rule] += count

    def checks(self) -> list[CheckResult]:
        for name, found in self.by_rule.items():
            if not found and not self.rows[name]:
                found.append("the rule examined nothing, so it proves nothing")
        return [CheckResult(name, SCHEMA_RULE[name], not found, found, self.rows[name])
                for name, found in self.by_rule.items()]


def _all(conn: psycopg.Connection, name: str, params: dict | None = None) -> list[dict]:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(_queries()[name], params).fetchall()


def _expression(expr: str | None) -> str | None:
    """pg_get_expr adds parentheses and casts; compare the bare predicate."""
    if expr is None:
        return None
    return " ".join(expr.replace("(", "").replace(")", "").replace("::text", "").split())


def _shape(policies: list[tuple]) -> list[tuple]:
    return sorted((command, permissive, tuple(roles), _expression(using), _expression(check))
                  for command, permissive, roles, using, check in policies)


def _table_key(relation: str, parent: str | None) -> str:
    return "schedule_history" if parent == "schedule_history" else relation


def check_tables(conn: psycopg.Connection, findings: Findings) -> None:
    columns: dict[str, dict[str, str]] = {}
    for row in _all(conn, "columns"):
        columns.setdefault(row["relation"], {})[row["column_name"]] = row["type"]
    rule = "schema-tables"
    for table, wanted in READ_COLUMNS.items():
        findings.examined(rule, len(wanted))
        if table not in columns:
            findings.add(rule, f"table appsurface_durable.{table} is missing")
            continue
        for column, family in wanted.items():
            have = columns[table].get(column)
            if have is None:
                findings.add(rule, f"column {table}.{column} is missing")
            elif _FAMILIES.get(have) != family:
                findings.add(rule, f"column {table}.{column} is {have}; the checks read it as {family}")
    for column in sorted(set(columns.get("schedule_dispatch", {})) - set(QUEUE_COLUMNS)):
        findings.add(rule, f"the dispatch queue holds column {column}; it exposes only {', '.join(QUEUE_COLUMNS)}")
    functions = {f["function"] for f in _all(conn, "functions") if f["schema"] == "appsurface_durable"}
    for function in OWNER_CALLS:
        findings.examined(rule)
        if function not in functions:
            findings.add(rule, f"function appsurface_durable.{function} is missing (the TestHost calls it as the owner)")


def check_grants(conn: psycopg.Connection, findings: Findings, relations: list[dict], children: set[str]) -> None:
    """Exact grants on every relation, column, function and the schema, and the roles' attributes."""
    rule = "schema-grants"
    roles = {r["rolname"]: r for r in _all(conn, "roles", {"roles": [OWNER, RUNTIME, DISPATCHER]})}
    for role in (RUNTIME, DISPATCHER):
        if role in roles and (roles[role]["rolsuper"] or roles[role]["rolbypassrls"]):
            findings.add(rule, f"{role} must be neither superuser nor BYPASSRLS")
    actual: dict[tuple[str, str], set[str]] = {}
    for row in _all(conn, "relation_grants"):
        actual.setdefault((row["relation"], row["grantee"]), set()).add(row["privilege"])
    present = {r["relation"] for r in relations}
    for table in sorted(set(TABLE_GRANTS) - present):
        findings.add(rule, f"table appsurface_durable.{table} is missing")
    for r in relations:
        relation = r["relation"]
        expected = TABLE_GRANTS.get(_table_key(relation, r["parent"]), {}) if r["kind"] in ("r", "p") else {}
        where = "schema-history-partitions" if relation in children else rule
        findings.examined(where)
        for grantee in sorted({g for (rel, g) in actual if rel == relation} | set(expected)):
            have, want = actual.get((relation, grantee), set()), expected.get(grantee, set())
            for privilege in sorted(have - want):
                findings.add(where, f"extra grant: {grantee} has {privilege} on {relation}")
            for privilege in sorted(want - have):
                findings.add(where, f"missing grant: {grantee} lacks {privilege} on {relation}")
    columns: dict[tuple[str, str], set[tuple[str, str]]] = {}
    for row in _all(conn, "column_grants"):
        columns.setdefault((row["relation"], row["grantee"]), set()).add((row["column_name"], row["privilege"]))
    for relation, grantee in sorted(set(columns) | set(COLUMN_GRANTS)):
        have, want = columns.get((relation, grantee), set()), COLUMN_GRANTS.get((relation, grantee), set())
        findings.examined(rule, len(have | want))
        for column, privilege in sorted(have - want):
            findings.add(rule, f"extra column grant: {grantee} has {privilege} on {relation}.{column}")
        for column, privilege in sorted(want - have):
            findings.add(rule, f"missing column grant: {grantee} lacks {privilege} on {relation}.{column}")
    executors: dict[str, set[str]] = {}
    for row in _all(conn, "functions"):
        if row["schema"] == "appsurface_durable":
            executors.setdefault(row["function"], set()).update(row["executors"])
    for function in sorted(set(executors) | set(FUNCTION_GRANTS)):
        findings.examined(rule)
        if function not in executors:
            findings.add(rule, f"function appsurface_durable.{function} is missing")
            continue
        have, want = executors[function], FUNCTION_GRANTS.get(function, set())
        for grantee in sorted(have - want):
            findings.add(rule, f"extra grant: {grantee} may execute {function}")
        for grantee in sorted(want - have):
            findings.add(rule, f"missing grant: {grantee} may not execute {function}")
    schema = {(row["grantee"], row["privilege"]) for row in _all(conn, "schema_grants")}
    for grantee, privilege in sorted(schema - SCHEMA_GRANTS):
        findings.add(rule, f"extra grant: {grantee} has {privilege} on schema appsurface_durable")
    for grantee, privilege in sorted(SCHEMA_GRANTS - schema):
        findings.add(rule, f"missing grant: {grantee} lacks {privilege} on schema appsurface_durable")


def check_row_security(conn: psycopg.Connection, findings: Findings, relations: list[dict], children: set[str]) -> None:
    """Forced RLS and the exact policy shape on every scoped table, the queue, and every history partition."""
    policies: dict[str, list[tuple]] = {}
    for p in _all(conn, "policies"):
        policies.setdefault(p["relation"], []).append(
            (p["command"], p["permissive"], p["roles"], p["using_expr"], p["check_expr"]))
    for r in relations:
        relation, key = r["relation"], _table_key(r["relation"], r["parent"])
        if key in SCOPED:
            want = SCOPE_POLICIES
        elif key == "schedule_dispatch":
            want = QUEUE_POLICIES
        else:
            continue
        where = "schema-history-partitions" if relation in children else "schema-row-security"
        findings.examined(where)
        if not (r["enabled"] and r["forced"]):
            findings.add(where, f"row level security is not enabled and forced on {relation} "
                                f"(enabled: {r['enabled']}, forced: {r['forced']})")
        shape = _shape(policies.get(relation, []))
        if shape != _shape(want):
            findings.add(where, {"relation": relation, "policies": shape, "expected": _shape(want)})


def _search_path(config: list[str]) -> list[str] | None:
    for setting in config:
        name, _, value = setting.partition("=")
        if name == "search_path":
            return [part.strip().strip('"') for part in value.split(",")]
    return None


def check_security_definers(conn: psycopg.Connection, findings: Findings) -> None:
    rule = "schema-security-definer"
    for f in _all(conn, "functions"):
        if f["schema"] == "appsurface_durable" and f["function"] == "claim_schedule_dispatch":
            findings.examined(rule)
            if not f["security_definer"]:
                findings.add(rule, "appsurface_durable.claim_schedule_dispatch must be SECURITY DEFINER: the "
                                   "dispatcher may read no due time, yet the claim uses it")
        if not f["security_definer"]:
            continue
        findings.examined(rule)
        name = f"{f['schema']}.{f['function']}({f['arguments']})"
        path = _search_path(f["config"])
        if path is None:
            findings.add(rule, f"SECURITY DEFINER {name} does not pin search_path")
        elif {"public", "$user"} & set(path) or path[-1] != "pg_temp":
            findings.add(rule, f"SECURITY DEFINER {name} has search_path {', '.join(path)}: it must leave out "
                               "public and $user and list pg_temp last")
        if "PUBLIC" in f["executors"]:
            findings.add(rule, f"PUBLIC may execute SECURITY DEFINER {name}")


def _seed_due_schedule(store: Store) -> None:
    """One At schedule due now, through the reference client over the schema under test (set-up, like every
    fallback); returns once the server's clock has passed its instant."""
    from reference import ScheduleClient, ScheduleSpec, ScheduleView, Target

    store.create_scope(SCOPE)
    store.ensure_partitions()
    with psycopg.connect(store.owner_dsn, autocommit=True) as conn:
        due = conn.execute("select transaction_timestamp()").fetchone()[0] + timedelta(milliseconds=200)
        with ScheduleClient(store.runtime_dsn, SCOPE) as client:
            view = client.create(ScheduleSpec(kind="at", at=due, target=Target("schema-stage")))
        if not isinstance(view, ScheduleView):
            raise RuntimeError(f"the reference client could not create a schedule on this schema: {view}")
        while conn.execute("select clock_timestamp() <= %s", (due,)).fetchone()[0]:
            time.sleep(0.05)


def check_behaviour(world: World, store: Store, findings: Findings) -> None:
    """The probes of testhost/runs/schema_probes.py on a store holding one due schedule: the claim function's refusals
    and grants, and the local scope's reach."""
    # Here, not at the top: the probes draw with Hypothesis, whose import cost every CLI start and every spawned
    # worker a third of a second of CPU when options.py (which names this module's case) imported it.
    from .schema_probes import CLAIM_RULE, SCOPE_RULE, ClaimProber, check_local_scope
    try:
        _seed_due_schedule(store)
    except Exception as exc:  # noqa: BLE001 - the schema under test could not hold a due schedule
        for rule in (CLAIM_RULE, SCOPE_RULE):
            findings.add(rule, f"could not seed a due schedule to probe with: {type(exc).__name__}: {exc}")
        return
    check_local_scope(store, SCOPE, findings)
    prober = ClaimProber(store, world)
    try:
        prober.run()
    except psycopg.Error as exc:
        findings.add(CLAIM_RULE, f"could not call the claim function or read the queue: {exc.sqlstate}: "
                                 f"{str(exc).splitlines()[0]}")
    prober.report(findings)


def _bound(text: str) -> tuple[datetime | None, datetime | None] | None:
    """A range partition's [from, to) (None for MINVALUE/MAXVALUE), or None for a DEFAULT partition."""
    if text.strip().upper() == "DEFAULT":
        return None
    match = re.search(r"FROM \((.+?)\) TO \((.+?)\)", text)
    if match is None:
        raise ValueError(f"not a range bound: {text}")
    low, high = (None if v.strip().upper() in ("MINVALUE", "MAXVALUE") else datetime.fromisoformat(v.strip().strip("'"))
                 for v in match.groups())
    return low, high


def _holds(bound: tuple | None, at: datetime) -> bool:
    return bound is None or ((bound[0] is None or bound[0] <= at) and (bound[1] is None or at < bound[1]))


def _future_children(world: World, store: Store, findings: Findings) -> set[str]:
    """The history partitions ensure_schedule_history_partitions() makes for a month no migration made, with the
    server clock moved there for that one call (a world without clock control checks today's months); they
    must hold that month and the next."""
    rule = "schema-history-partitions"
    with psycopg.connect(store.owner_dsn, autocommit=True) as conn:
        before = {r["relation"] for r in _all(conn, "history_children")}
        now = conn.execute("select transaction_timestamp()").fetchone()[0]
    moved = world.capabilities.has(CLOCK)
    at = now + FUTURE if moved else now
    if moved:
        offset = world.clock.offset
        world.clock.set_time(at)
    try:
        with psycopg.connect(store.owner_dsn, autocommit=True) as conn:
            conn.execute("select appsurface_durable.ensure_schedule_history_partitions()")
            children = _all(conn, "history_children")
            months = _all(conn, "month_starts", {"at": at})[0]
    except psycopg.Error as exc:
        findings.add(rule, f"ensure_schedule_history_partitions() failed: {exc.sqlstate}: {str(exc).splitlines()[0]}")
        return set()
    finally:
        if moved:
            world.clock.set_offset(offset)
    bounds = {}
    for c in children:
        try:
            bounds[c["relation"]] = _bound(c["bound"])
        except ValueError:
            findings.add(rule, f"history partition {c['relation']} is {c['bound']}, not a range of recorded_at_utc")
    for which in ("current_month", "next_month"):
        findings.examined(rule)
        if not any(_holds(bound, months[which]) for bound in bounds.values()):
            findings.add(rule, f"after ensure_schedule_history_partitions() at {at:%Y-%m-%d} (server time), no "
                               f"schedule_history partition holds {months[which]:%Y-%m-%d} ({which.replace('_', ' ')})")
    return set(bounds) - before if moved else set(bounds)


def run_schema_stage(world: World, migrations: Path | None) -> dict:
    """The stage's case for report.json: one check per rule, verdict fail when any rule has a finding (None: the
    normative schema, the reference's migrations, as `crashproof mutants` runs it for its control).
    Raises MigrationFailed (naming the file and the server's message) when a migration does not apply."""
    started = time.monotonic()
    store = new_store(world, migrations=migrations)
    if migrations is None:
        migrations = Path(str(resources.files("reference").joinpath("migrations")))
    findings = Findings()
    try:
        check_behaviour(world, store, findings)
        children = _future_children(world, store, findings)
        with psycopg.connect(store.world.admin_dsn(dbname=store.dbname), autocommit=True) as conn:
            relations = _all(conn, "relations")
            check_tables(conn, findings)
            check_grants(conn, findings, relations, children)
            check_row_security(conn, findings, relations, children)
            check_security_definers(conn, findings)
    finally:
        store.drop()
    checks = settle(findings.checks(), None)
    failed = [c.name for c in checks if not c.ok]
    return {"id": CASE_ID, "scenario": CASE_ID, "barrier": None, "fault": None, "hit": None,
            "verdict": "fail" if failed else "pass", "reason": ", ".join(failed),
            "checks": [c.to_json() for c in checks],
            "timeline": [{"event": "migrations", "directory": str(migrations),
                          "files": [m.name for m in schema_migrations(migrations)]}],
            "duration_s": round(time.monotonic() - started, 3), "barrier_hits": {}, "fallbacks": []}
