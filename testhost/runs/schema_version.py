"""The schema-version stage of every certify: the implementation on a store migrated only to 0003 must refuse
each schedule operation it declares with a definite error, report no barrier and change no row."""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg
from psycopg import sql

from barriers.schema import DISPATCHER, RUNTIME

from testhost.impl.adapter_env import adapter_environment
from testhost.impl.implementation import AdapterProtocolError, Implementation
from testhost.judge.rules import CheckResult
from testhost.judge.stage_rules import SCHEMA_VERSION_REFUSED
from testhost.world.store import Store, new_store

from .stage_ids import SCHEMA_VERSION_ID

CASE_ID = SCHEMA_VERSION_ID
SCOPE = "schema-version"
# The last migration before 0004_schedule_protocol.sql: Work and Flow only (runtime version 3).
UPTO = 3
DEADLINE_S = 5.0


def _requests(offered: set[str]) -> list[tuple[str, dict]]:
    """The schedule operations to send: process-due always (every implementation declares it), create when
    declared (a client operation, refused the same way)."""
    requests = [("process-due", {"maximum_schedules": 1, "lease_seconds": 30, "lease_owner": "schema-version"})]
    if "create" in offered:
        at = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()
        requests.append(("create", {"schedule_id": str(uuid.uuid4()), "command_id": str(uuid.uuid4()),
                                    "spec": {"kind": "at", "at": at, "target": {"command": "schema-version"}}}))
    return requests


def read_rows(store: Store) -> dict[str, list]:
    """Every row of every table of the protocol's schema, as text, read by the superuser past row security."""
    with psycopg.connect(store.world.admin_dsn(dbname=store.dbname), autocommit=True) as conn:
        tables = [r[0] for r in conn.execute(
            "select c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace "
            "where n.nspname = 'appsurface_durable' and c.relkind in ('r', 'p') order by 1")]
        return {t: sorted(str(row) for row in conn.execute(
            sql.SQL("select t::text from appsurface_durable.{} t").format(sql.Identifier(t))))
            for t in tables}


def judge(answers: list[dict], barriers: list[str], before: dict, after: dict) -> CheckResult:
    """Each answer `fail` with an error that says why and `retriable: false`; no barrier; no row changed."""
    evidence: list = []
    for answer in answers:
        error = answer.get("error") or {}
        if answer["outcome"] != "fail" or error.get("retriable") is not False or not str(error.get("message") or
                                                                                      "").strip():
            evidence.append({"op": answer["op"], "outcome": answer["outcome"], "error": answer.get("error"),
                             "problem": answer.get("problem"), "value": answer.get("value"),
                             "expected": "fail with an error whose message says why and retriable: false (no "
                                         "retry can succeed before migration 0004 is applied)"})
    if barriers:
        evidence.append({"barriers": barriers, "expected": "no barrier: no schedule transaction may begin"})
    changed = sorted(t for t in set(before) | set(after) if before.get(t) != after.get(t))
    if changed:
        evidence.append({"changed_tables": changed,
                         "rows": {t: {"before": before.get(t), "after": after.get(t)} for t in changed}})
    rows = sum(len(v) for v in before.values())
    return CheckResult("schema-version-refused", SCHEMA_VERSION_REFUSED, not evidence, evidence, rows + len(answers))


def run_schema_version(world, command: str, log_dir: Path) -> dict:
    """The stage's case for report.json; its verdict is `fail` when the check has evidence, `error` when the
    implementation broke the adapter protocol."""
    return run_with_hello(world, command, log_dir)[0]


def run_with_hello(world, command: str, log_dir: Path) -> tuple[dict, dict]:
    """The stage's case and the hello the implementation sent ({} when none came): a run of this stage alone
    records the implementation's identity and operations from it, as any case's run does."""
    started = time.monotonic()
    store = new_store(world, upto=UPTO)
    timeline: list[dict] = [{"event": "store", "migrated_to": f"{UPTO:04d}"}]
    barriers: list[str] = []
    impl = None
    verdict, reason, checks, cause = "error", "", [], "harness"
    try:
        store.create_scope(SCOPE)
        before = read_rows(store)
        env = adapter_environment(store.dsn(RUNTIME), store.dsn(DISPATCHER), SCOPE, DEADLINE_S)
        impl = Implementation(command, env, lambda _impl, name, _ctx: barriers.append(name),
                              log_dir / CASE_ID / "A.stderr").start()
        answers = []
        for op, args in _requests(set(impl.hello.get("operations", []))):
            response = impl.request(op, args)
            answer = {"op": op, "outcome": response.outcome, "error": response.error, "problem": response.problem,
                      "value": response.value}
            answers.append(answer)
            timeline.append({"event": "response", **answer})
        impl.stop()
        check = judge(answers, barriers, before, read_rows(store))
        checks = [check.to_json()]
        verdict, reason = ("pass", "") if check.ok else ("fail", check.name)
    except AdapterProtocolError as exc:
        reason, cause = f"{type(exc).__name__}: {exc}", "implementation"
        impl.kill_group()
    except (psycopg.Error, OSError) as exc:
        reason = f"the harness could not run the stage: {type(exc).__name__}: {exc}"
        if impl is not None:
            impl.kill_group()
    finally:
        store.drop()
    hello = (impl.hello or {}) if impl is not None else {}
    return {"id": CASE_ID, "scenario": CASE_ID, "barrier": None, "fault": None, "hit": None,
            "verdict": verdict, "reason": reason, "checks": checks, "timeline": timeline,
            "duration_s": round(time.monotonic() - started, 3), "barrier_hits": {}, "fallbacks": [],
            "operations": sorted(hello.get("operations", [])),
            **({"cause": cause} if verdict == "error" else {})}, hello
