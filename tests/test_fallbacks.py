"""The harness's fallbacks, for an implementation that offers only `process-due`: they survive the faults a case
injects, answer in the protocol's JSON, are never charged to the implementation, and the barriers of the
operations they stand in for are neither required of the implementation nor planned as its cases."""

import sys
from datetime import datetime
from pathlib import Path

import pytest

from barriers import CATALOG
from scenarios.matrix import CasePlan
from scenarios.scenario import load_catalog
from testhost.runs.certify import certify
from testhost.runs.options import Options
from testhost.errors import FallbackFailed
from testhost.case.runner import CaseRun, store_pool

ADAPTER = Path(__file__).parent / "adapters" / "process_due_only.py"
COMMAND = f"{sys.executable} {ADAPTER}"
WORK_TERMINAL = sorted(b.name for b in CATALOG if b.operation == "complete-work")


def _fallback_responses(report: dict, op: str) -> list[dict]:
    return [e for c in report["cases"] for e in c["timeline"]
            if e["event"] == "response" and e.get("op") == op and op in c["fallbacks"]]


def test_fallbacks_reconnect_after_a_database_crash_and_answer_in_protocol_json(tmp_path):
    """A db-crash kills the fallback client's kept connection; the update and the Work completions that follow
    still run (reconnected), so every case passes. Before: RetriableError escaped, verdict error."""
    code, report = certify(Options(command=COMMAND, scenario="generation-update-supersedes", fault="db-crash",
                                   barrier="schedule-link-after-commit", jobs=2, report_dir=tmp_path,
                                   progress=lambda line: None))
    faulted = [c for c in report["cases"] if c["fault"] == "db-crash"]
    assert faulted, "the db-crash cases were planned"
    assert [(c["id"], c["verdict"], c["reason"]) for c in report["cases"] if c["verdict"] != "pass"] == []
    assert code == 0
    assert {"create", "update", "complete-work"} <= set(report["implementation"]["fallbacks"])

    updates = [e["value"] for e in _fallback_responses(report, "update") if e["outcome"] == "ok"]
    assert updates and all(isinstance(v, dict) and {"schedule_id", "revision", "active_generation"} <= set(v)
                           for v in updates), updates[:2]
    assert all(datetime.fromisoformat(v["cursor_utc"]).utcoffset() is not None for v in updates)  # RFC 3339
    completions = [e["value"] for e in _fallback_responses(report, "complete-work") if e["outcome"] == "ok"]
    assert completions and all(isinstance(v, dict) and {"work_id", "state"} <= set(v) for v in completions)


def test_barriers_of_an_operation_not_offered_are_the_fallbacks_not_required_nor_planned(tmp_path):
    """The reference reaches the Work-terminal barriers in this scenario; an implementation without
    complete-work cannot, and passes: coverage asks only for the barriers of what it declared, the matrix
    skips the others with that reason, and the certificate names the cases the fallback covered."""
    code, report = certify(Options(command=COMMAND, scenario="held-slot", fault="kill", jobs=2,
                                   barrier=None, report_dir=tmp_path, progress=lambda line: None))
    census = next(c for c in report["cases"] if c["fault"] is None)
    coverage = next(c for c in census["checks"] if c["name"] == "barrier-coverage")
    assert coverage["ok"] and census["verdict"] == "pass", census["reason"]
    assert census["operations"] == ["process-due"]
    skipped = [s for s in report["run"]["skipped"] if s["barrier"] in WORK_TERMINAL]
    assert {s["barrier"] for s in skipped} == set(WORK_TERMINAL)
    assert all("complete-work, which the implementation does not offer" in s["reason"] for s in skipped)
    assert not [c for c in report["cases"] if c["barrier"] in WORK_TERMINAL]
    implementation = report["implementation"]
    assert implementation["operations"] == ["process-due"]
    assert implementation["fallback_barriers"] == WORK_TERMINAL
    assert "held-slot" in implementation["fallback_cases"]["complete-work"]
    assert "complete-work (in " in implementation["fallback_note"]
    assert not report["run"]["problems"]
    assert code == 0, [(c["id"], c["reason"]) for c in report["cases"] if c["verdict"] != "pass"]


def test_a_fallback_that_cannot_reach_the_server_is_a_harness_error_not_the_implementations(fresh_world, tmp_path):
    """With the server stopped, the fallback's bounded retries run out and the step raises FallbackFailed, whose
    message names the harness's fallback and says the implementation is not at fault."""
    scenario = next(s for s in load_catalog() if s.name == "at-single")
    run = CaseRun(fresh_world, scenario, CasePlan(scenario.name), COMMAND, tmp_path)
    run.store = store_pool(fresh_world).take()
    with run.owner() as conn:
        conn.execute("select appsurface_durable.create_scope('tenant-a')")
    run.impls["A"] = run.start_implementation("A")
    try:
        fresh_world.cluster.stop()
        with pytest.raises(FallbackFailed, match=r"harness fallback \(reference client\) could not run delete "
                                                 r"after 5 attempts: .*not its failure"):
            run.client.op("delete", {"schedule_id": str(scenario.schedule_id("launch")), "expected_revision": 1})
        assert [e for e in run.facts.timeline if e["event"] == "fallback-retry"], "the fallback retried first"
    finally:
        run.teardown()
