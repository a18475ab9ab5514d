"""`schema-version-refused`: the judgment on written-out answers and rows, the stage's selection, and real runs
on a store migrated only to 0003 (the reference and the Go example pass; a mutant that calls the missing
migration retriable, and an implementation that hides it behind an empty pass, fail naming the sentence)."""

import shlex
import sys
from pathlib import Path

import pytest

from testhost.runs.protocol_page import render
from testhost.runs.options import Options, schema_version_plans, validate
from testhost.judge.registry import CHECKS
from scenarios.matrix import CasePlan
from testhost.runs.schema_version import CASE_ID, judge, run_schema_version

SENTENCE = "Runtime version 4 requires it before Schedule operations run."
REFUSED = {"op": "process-due", "outcome": "fail",
           "error": {"kind": "SchemaNotReady", "message": "migration 0004 is missing", "retriable": False}}
ROWS = {"scopes": ["(1,schema-version)"], "runtime_versions": ["(3,3,Work and Flow)"]}
ADAPTERS = Path(__file__).resolve().parent / "adapters"
GO = Path(__file__).resolve().parent.parent / "examples" / "go" / "run.sh"


def test_the_check_is_registered_under_the_sentence_and_stated_on_the_protocol_page():
    assert CHECKS["schema-version-refused"].startswith(SENTENCE)
    page = render()
    assert "## A store without migration 0004" in page and "`schema-version-refused`" in page


def test_a_definite_refusal_with_nothing_changed_passes():
    result = judge([REFUSED, {**REFUSED, "op": "create"}], [], ROWS, ROWS)
    assert result.ok and result.rows == 4 and SENTENCE in result.rule


@pytest.mark.parametrize("answer", [
    {"op": "process-due", "outcome": "ok", "value": {"claimed": 0}},
    {"op": "process-due", "outcome": "unknown", "error": {"kind": "x", "message": "lost", "retriable": True}},
    {**REFUSED, "error": {**REFUSED["error"], "retriable": True}},
    {**REFUSED, "error": {"kind": "x", "message": "schema", "retriable": None}},
    {**REFUSED, "error": {**REFUSED["error"], "message": "  "}},
    {"op": "process-due", "outcome": "fail", "problem": {"type": "x/conflict"}},
], ids=["ok", "unknown", "retriable", "retriable-missing", "no-message", "problem-only"])
def test_every_other_answer_fails_naming_the_operation(answer):
    result = judge([REFUSED, answer], [], ROWS, ROWS)
    assert not result.ok
    assert [e["op"] for e in result.evidence] == ["process-due"] and result.evidence[0]["outcome"] == answer["outcome"]


def test_a_barrier_or_a_changed_row_fails_even_beside_a_refusal():
    barrier = judge([REFUSED], ["schedule-claim-before-commit"], ROWS, ROWS)
    assert not barrier.ok and barrier.evidence == [{"barriers": ["schedule-claim-before-commit"],
                                                   "expected": "no barrier: no schedule transaction may begin"}]
    changed = judge([REFUSED], [], ROWS, {**ROWS, "scopes": ["(1,schema-version)", "(2,other)"]})
    assert not changed.ok and changed.evidence[0]["changed_tables"] == ["scopes"]
    added = judge([REFUSED], [], ROWS, {**ROWS, "schedule_definitions": []})
    assert not added.ok and added.evidence[0]["changed_tables"] == ["schedule_definitions"]  # a table made


def test_the_stage_runs_when_the_scenario_filter_matches_its_name():
    assert schema_version_plans(None) and schema_version_plans("schema-*") and schema_version_plans("at-single,sch*")
    assert [p.id for p in schema_version_plans("schema-version")] == [CASE_ID]
    assert schema_version_plans("at-single") == [] and schema_version_plans(["every-*"]) == []
    assert schema_version_plans(None, ["at-single/schedule-link-after-commit/kill/1"]) == []  # --case names others
    assert schema_version_plans(None, ["at-single", CASE_ID]) == [CasePlan(CASE_ID)]
    scenarios, wanted = validate(Options(cases=[CASE_ID]))
    assert scenarios == [] and wanted == []  # only the stage runs


def _stage(world, tmp_path, command: str) -> dict:
    case = run_schema_version(world, command, tmp_path)
    assert case["id"] == CASE_ID and case["timeline"][0] == {"event": "store", "migrated_to": "0003"}
    return case


def test_the_reference_refuses_every_operation_on_a_store_without_0004(world, tmp_path):
    case = _stage(world, tmp_path, f"{shlex.quote(sys.executable)} -m reference.adapter")
    assert case["verdict"] == "pass", case
    answers = [e for e in case["timeline"] if e["event"] == "response"]
    assert [a["op"] for a in answers] == ["process-due", "create"]  # the reference declares create
    assert all(a["error"]["kind"] == "SchemaNotReady" and "0004" in a["error"]["message"] for a in answers)
    assert case["checks"][0]["rows"] > len(answers)  # the store's rows were compared


def test_a_missing_migration_called_retriable_fails_naming_the_sentence(world, tmp_path):
    case = _stage(world, tmp_path, f"{shlex.quote(sys.executable)} -m mutants missing-migration-retriable")
    assert case["verdict"] == "fail" and case["reason"] == "schema-version-refused"
    [check] = case["checks"]
    assert SENTENCE in check["rule"]
    assert [e["error"]["retriable"] for e in check["evidence"]] == [True, True]


def test_an_implementation_hiding_the_missing_schema_behind_an_empty_pass_fails(world, tmp_path):
    case = _stage(world, tmp_path, f"{shlex.quote(sys.executable)} {ADAPTERS / 'hides_missing_schema.py'}")
    assert case["verdict"] == "fail"
    evidence = case["checks"][0]["evidence"]
    assert evidence[0]["op"] == "process-due" and evidence[0]["outcome"] == "ok"
    assert evidence[1]["barriers"] == ["schedule-claim-before-commit"]


def test_the_go_example_declaring_only_process_due_passes(world, tmp_path):
    case = _stage(world, tmp_path, str(GO))
    assert case["verdict"] == "pass", case
    [answer] = [e for e in case["timeline"] if e["event"] == "response"]
    assert answer["op"] == "process-due" and answer["error"]["retriable"] is False


def test_certify_runs_the_stage_beside_the_scenarios_and_fails_the_mutant_with_exit_1(tmp_path, capsys):
    from reference.adapter import OPERATIONS
    from testhost.runs.certify import certify
    command = f"{shlex.quote(sys.executable)} -m mutants missing-migration-retriable"
    code, report = certify(Options(command=command, scenario="schema-version", report_dir=tmp_path,
                                   progress=lambda line: None))
    assert code == 1
    [case] = report["cases"]
    assert case["id"] == CASE_ID and case["verdict"] == "fail" and case["reason"] == "schema-version-refused"
    # The stage alone records the implementation as its hello declared it, as any case's run does.
    assert report["implementation"]["identity"] == "crashproof-reference"
    assert report["implementation"]["operations"] == case["operations"] == sorted(OPERATIONS)
    assert report["run"]["selection"]["plan_count"] == len(report["cases"]) == 1  # the stage's case is planned
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("1 case: 0 passed, 1 failed, 0 error, 0 not-run in ")
    assert out[1].startswith("NOT CERTIFIED: 0 of 1 case passed; 1 failed")
    assert out[2] == "Implementation: crashproof-reference (declares " + ", ".join(sorted(OPERATIONS)) + ")"
