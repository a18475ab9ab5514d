"""The checks on client commands (testhost/judge/commands.py, and the refusals judged by `client-outcomes` and
`step-outcomes`): the pure checks on written-out rows, the problem registry PROTOCOL.md lists, the steps' new
fields, and real cases where each check passes the reference and the host's fallbacks and fires on its mutant."""

import re
import shlex
import sys
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from barriers.protocol import PROBLEMS, problem_name
from scenarios.matrix import CasePlan
from scenarios.scenario import ScenarioError, Step, load_catalog, parse
from testhost.judge import commands
from testhost.judge.commands import client_outcomes
from testhost.judge.registry import CHECKS
from testhost.impl.implementation import Response
from scenarios.matrix import CasePlan
from testhost.case.runner import run_case
from testhost.world import table_rows

REPO = Path(__file__).resolve().parent.parent
T = datetime(2031, 3, 3, tzinfo=timezone.utc)
S = uuid.UUID("00000000-0000-4000-8000-000000000001")
FALLBACK_ONLY = f"{shlex.quote(sys.executable)} {REPO / 'tests' / 'adapters' / 'process_due_only.py'}"
CLIENT_CHECKS = ("command-accepted-at", "definition-persisted", "release-rebinds")


# -- pure: the registry, the matching, the checks on rows -------------------------------------------------------

def test_every_problem_the_reference_answers_is_registered_and_listed_on_the_protocol_page():
    from testhost.runs.protocol_page import render
    answered = set(re.findall(r'BASE \+ "([a-z-]+)"', (REPO / "reference" / "problems.py").read_text()))
    assert answered == {p.name for p in PROBLEMS}
    page = render()
    for problem in PROBLEMS:
        assert f"| `{problem.name}` | {problem.when} |" in page
    for name in CLIENT_CHECKS:
        assert f"| `{name}` | " in page and f" | {CHECKS[name]} |" in page.replace("&#124;", "|")


def test_a_problem_is_named_by_the_last_segment_of_its_type():
    assert problem_name("urn:appsurface-durable:problem:revision-conflict") == "revision-conflict"
    assert problem_name("https://acme.example/problems/command-conflict") == "command-conflict"
    assert problem_name("https://acme.example/problems#validation") == "validation"
    assert problem_name("") == "" and problem_name(None) == ""


def _outcome(problem_type, *, expect="fail", problem="revision-conflict", changed=None):
    step = Step("update", {"schedule": "s", "expect": expect, "problem": problem}, 3)
    return step, Response("fail", problem={"type": problem_type} if problem_type else None), changed or {}


def test_a_refusal_must_name_its_problem_exactly_and_change_no_row():
    [right] = client_outcomes([_outcome("urn:x:problem:revision-conflict")])
    assert right.ok and right.name == "client-outcomes" and right.rows == 1
    # a suffix is not the name: "command-conflict" is no "conflict", "xrevision-conflict" no "revision-conflict"
    [suffix] = client_outcomes([_outcome("urn:x:problem:xrevision-conflict")])
    assert not suffix.ok and suffix.evidence[0]["expected_problem"] == "revision-conflict"
    [bare] = client_outcomes([_outcome(None)])
    assert not bare.ok
    changed = {"schedule_definitions": {"added": [{"revision": 2}], "removed": [{"revision": 1}]}}
    [wrote] = client_outcomes([_outcome("urn:x:problem:revision-conflict", changed=changed)])
    assert not wrote.ok and wrote.evidence == [{"step": 4, "op": "update", "refused_but_changed": changed}]
    assert "changes no row" in wrote.rule and "durable problem results" in wrote.rule


def test_changed_rows_are_named_by_table_added_and_removed():
    empty = {t: set() for t in table_rows.WRITTEN_BY_COMMANDS}
    assert table_rows.changed(empty, empty) == {}
    after = {**empty, "schedule_commands": {'{"command_id": "c"}'}, "schedule_history": set()}
    assert table_rows.changed(empty, after) == {"schedule_commands": {"added": [{"command_id": "c"}], "removed": []}}
    assert table_rows.changed(after, empty) == {"schedule_commands": {"added": [], "removed": [{"command_id": "c"}]}}


def _generation(accepted, command_accepted, kind="create", **columns):
    return {"generation": 1, "accepted_at_utc": accepted, "command_accepted_at_utc": command_accepted,
            "command_kind": kind, **columns}


def test_command_and_generation_carry_one_server_time():
    window = (T, T + timedelta(seconds=1))
    at = T + timedelta(microseconds=500_123)
    assert commands.accepted_at(1, "create", _generation(at, at), window) == []
    [later] = commands.accepted_at(1, "create", _generation(at, at + timedelta(microseconds=7)), window)
    assert later["wrong"] == ["the command and the generation carry different accepted_at_utc"]
    [missing] = commands.accepted_at(1, "update", _generation(at, None, kind=None), window)
    assert missing["wrong"] == ["no schedule_commands row of this schedule, generation and kind create/update"]
    client_clock = datetime(2026, 12, 1, tzinfo=timezone.utc)  # the client's own clock, years from the server's
    [own] = commands.accepted_at(1, "create", _generation(client_clock, client_clock), window)
    assert own["wrong"] == ["accepted_at_utc is not the server's time while the command ran"]


def test_a_generation_holds_its_definition_to_the_microsecond():
    anchor = T + timedelta(seconds=90, microseconds=123456)
    sent = {"kind": "every", "every_s": 60, "anchor": anchor.isoformat(), "target": {"command": "probe"}}
    stored = {"generation": 1, "at_utc": None, "anchor_utc": anchor, "every_us": 60_000_000, "after_us": None,
              "safety_window_us": 3_600_000_000, "target_command": "probe"}
    assert commands.persisted(1, "create", sent, stored) == []
    [truncated] = commands.persisted(1, "create", sent, {**stored, "anchor_utc": anchor.replace(microsecond=0)})
    assert list(truncated["differences"]) == ["anchor_utc"]
    unanchored = {k: v for k, v in sent.items() if k != "anchor"}
    assert commands.persisted(1, "create", unanchored, {**stored, "anchor_utc": T}) == []  # anchored on acceptance
    windowed = {**sent, "safety_window_s": 120.5}
    [window] = commands.persisted(2, "update", windowed, stored)
    assert window["differences"] == {"safety_window_us": {"sent": 120_500_000, "stored": 3_600_000_000}}


def test_an_accepted_release_rebinds_both_fences_and_keeps_the_cursor():
    before = {"lifecycle_state": "suspended", "runtime_epoch": 1, "scope_generation": 1, "cursor_utc": T}
    after = {"lifecycle_state": "active", "runtime_epoch": 2, "scope_generation": 2, "cursor_utc": T,
             "store_runtime_epoch": 2, "scope_current_generation": 2}
    assert commands.rebinds(5, before, after) == []
    [epoch_only] = commands.rebinds(5, before, {**after, "scope_generation": 1})
    assert epoch_only["wrong"] == ["the scope generation is not the scope's current one"]
    [moved] = commands.rebinds(5, before, {**after, "cursor_utc": T + timedelta(seconds=1)})
    assert moved["wrong"] == ["the cursor moved"]
    [result] = commands.results({"release-rebinds": [[], [epoch_only]]})
    assert not result.ok and result.rows == 2 and "rebinds the current scope generation" in result.rule
    assert commands.results({}) == []  # nothing examined: no result, so no vacuous pass


HEAD = '''[[steps]]
op = "create"
schedule = "s"
spec = { kind = "at", at = "+60s", target = { command = "c" } }

'''


@pytest.mark.parametrize("step, message", [
    ('op = "update"\nschedule = "s"\nspec = { kind = "at", at = "+90s", target = { command = "c" } }\n'
     'stale_revision = true\n', "stale_revision needs expect"),
    ('op = "delete"\nschedule = "s"\nexpect = "fail"\nproblem = "conflict"\n', "problem must be one of"),
    ('op = "update"\nschedule = "s"\nspec = { kind = "at", at = "+90s", target = { command = "c" } }\n'
     'command = "first"\n', "update takes no command"),
])
def test_the_new_step_fields_are_checked_before_anything_runs(step, message):
    with pytest.raises(ScenarioError, match=message):
        parse("x", HEAD + "[[steps]]\n" + step)


# -- real cases: each check passes the reference and the fallbacks, and fires on its mutant -----------------------

def _scenario(name):
    return next(s for s in load_catalog() if s.name == name)


def _run(world, tmp_path, scenario: str, command: str):
    outcome = run_case(world, _scenario(scenario), CasePlan(scenario), command, tmp_path)
    return outcome, {c.name: c for c in outcome.checks}


def _module(module_args: str) -> str:
    return f"{shlex.quote(sys.executable)} -m {module_args}"


@pytest.mark.parametrize("command", [_module("reference.adapter"), FALLBACK_ONLY], ids=["reference", "fallbacks"])
def test_client_commands_pass_the_reference_and_the_hosts_fallbacks(world, tmp_path, command):
    outcome, checks = _run(world, tmp_path, "client-commands", command)
    assert outcome.verdict == "pass", outcome.reason
    assert ("create" in outcome.fallbacks) == (command == FALLBACK_ONLY)
    assert checks["client-outcomes"].ok and checks["client-outcomes"].rows == 7
    assert checks["step-outcomes"].ok and checks["step-outcomes"].rows == 1
    assert checks["command-accepted-at"].rows == 2 and checks["definition-persisted"].rows == 2
    assert all(checks[name].ok for name in ("command-accepted-at", "definition-persisted"))


@pytest.mark.parametrize("command", [_module("reference.adapter"), FALLBACK_ONLY], ids=["reference", "fallbacks"])
def test_a_release_after_both_fences_advanced_rebinds_both(world, tmp_path, command):
    outcome, checks = _run(world, tmp_path, "release-keeps-cursor", command)
    assert outcome.verdict == "pass", outcome.reason
    assert checks["release-rebinds"].ok and checks["release-rebinds"].rows == 1


@pytest.mark.parametrize("scenario", ["scope-generation-repair", "link-conflict"])
def test_a_release_of_a_schedule_suspended_for_another_fence_is_refused_through_the_fallback(world, tmp_path,
                                                                                            scenario):
    outcome, checks = _run(world, tmp_path, scenario, FALLBACK_ONLY)
    assert outcome.verdict == "pass", outcome.reason
    assert "release-after-recovery" in outcome.fallbacks
    assert checks["step-outcomes"].ok and checks["step-outcomes"].rows == 1


def _failed(outcome) -> dict:
    return {c.name: c for c in outcome.checks if not c.ok}


def test_a_refused_release_that_wrote_a_revision_is_caught_with_the_rows_it_changed(world, tmp_path):
    outcome, _ = _run(world, tmp_path, "client-commands", _module("mutants refused-release-bumps-revision"))
    failed = _failed(outcome)
    assert outcome.verdict == "fail" and set(failed) == {"step-outcomes"}
    [evidence] = failed["step-outcomes"].evidence
    assert evidence["step"] == 4 and set(evidence["refused_but_changed"]) == {"schedule_definitions"}
    [row] = evidence["refused_but_changed"]["schedule_definitions"]["added"]
    assert row["revision"] == 2
    assert failed["step-outcomes"].rule == "Recovery release applies only to admitted stale-runtime-epoch fences."


@pytest.mark.parametrize("mutant, step", [("stale-revision-applied", 6), ("repeated-command-id-taken-as-new", 3),
                                          ("every-interval-not-validated", 2)])
def test_a_command_that_should_be_a_problem_result_is_caught_at_its_step(world, tmp_path, mutant, step):
    outcome, _ = _run(world, tmp_path, "client-commands", _module(f"mutants {mutant}"))
    failed = _failed(outcome)
    assert outcome.verdict == "fail" and "client-outcomes" in failed
    assert step in [e["step"] for e in failed["client-outcomes"].evidence]
    assert "durable problem results" in failed["client-outcomes"].rule


def test_a_command_row_with_its_own_time_sample_is_caught(world, tmp_path):
    outcome, _ = _run(world, tmp_path, "client-commands", _module("mutants command-accepted-at-own-sample"))
    failed = _failed(outcome)
    assert set(failed) == {"command-accepted-at"}
    evidence = failed["command-accepted-at"].evidence
    assert [e["step"] for e in evidence] == [1, 5]
    assert all(e["wrong"] == ["the command and the generation carry different accepted_at_utc"] for e in evidence)


def test_an_anchor_cut_to_whole_seconds_is_caught(world, tmp_path):
    outcome, _ = _run(world, tmp_path, "client-commands", _module("mutants anchor-whole-seconds"))
    failed = _failed(outcome)
    assert set(failed) == {"definition-persisted"}  # every other check reads times relative to the anchor
    [evidence] = failed["definition-persisted"].evidence
    assert evidence["step"] == 1 and list(evidence["differences"]) == ["anchor_utc"]


def test_a_release_that_rebinds_the_epoch_only_is_caught(world, tmp_path):
    outcome, _ = _run(world, tmp_path, "release-keeps-cursor", _module("mutants release-keeps-scope-generation"))
    failed = _failed(outcome)
    assert "release-rebinds" in failed
    [evidence] = failed["release-rebinds"].evidence
    assert evidence["wrong"] == ["the scope generation is not the scope's current one"]


def test_an_accepted_release_of_no_definition_is_a_finding_not_a_harness_error():
    [found] = commands.rebinds(2, None, None)
    assert found["wrong"] == ["answered ok, but there is no definition"]


def test_an_ok_create_that_wrote_no_generation_is_a_finding_of_the_acceptance_check():
    from types import SimpleNamespace

    from testhost.case.step_runs import RUNS
    case = SimpleNamespace(facts=SimpleNamespace(command_facts={}))
    step = Step("create", {"schedule": "s", "spec": {"kind": "at", "at": "+60s", "target": {"command": "c"}}}, 0)
    RUNS["create"].observe(case, step, None, None, (T, T))
    [result] = commands.results(case.facts.command_facts)
    assert result.name == "command-accepted-at" and not result.ok
    assert result.evidence == [{"step": 1, "op": "create", "wrong": ["answered ok, but no generation"]}]


@pytest.mark.parametrize("scenario, mutant, rule", [
    ("scope-generation-repair", "release-clears-scope-generation-suspension",
     "a scope-generation-only mismatch requires a public update or delete/recreate"),
    ("link-conflict", "release-clears-conflict-suspension",
     "Recovery release applies only to admitted stale-runtime-epoch fences."),
])
def test_a_release_that_clears_another_suspension_is_caught_at_its_step(world, tmp_path, scenario, mutant, rule):
    outcome, _ = _run(world, tmp_path, scenario, _module(f"mutants {mutant}"))
    failed = _failed(outcome)
    assert outcome.verdict == "fail" and "step-outcomes" in failed and rule in failed["step-outcomes"].rule
    [evidence] = [e for e in failed["step-outcomes"].evidence if "expected" in e]
    assert evidence["step"] == 5 and evidence["expected"] == "fail" and evidence["outcome"] == "ok"
