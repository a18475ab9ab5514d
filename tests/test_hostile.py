"""Hostile inputs: every drawn call is one the protocol refuses, the judge tells a clear refusal from everything
else, a snapshot catches a changed row, and the hostile phase passes the reference and the Go example and fails
a client or a claim function that lets a hostile argument through, naming the input."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings

from mutants import BY_NAME, Edit, Mutant, materialize, migrations_dir
from reference import wire
from reference.model import check
from reference.problems import Problem
from scenarios.hostile import CLAIM, CLIENT_OPS, Hostile, hostile_claim, hostile_command, sweep
from testhost.runs.explore import Options, explore
from testhost.runs.hostile_phase import (CLAIM_RULE, CLIENT_RULE, Answer, HostileRun, HostileSearch, changed, judge,
                              names_field, replay, snapshot, targets_text)
from testhost.case.runner import REFERENCE_COMMAND

ROOT = Path(__file__).resolve().parents[1]
GO = str(ROOT / "examples" / "go" / "run.sh")
PROBLEM_RESULTS = "Schedule API validation and domain conflicts return durable problem results."
SCHEDULE = "5e1f2c3d-4b5a-4f6e-8d7c-9b0a1f2e3d4c"
# Deliberately wrong clients, for these tests only (the catalog's mutants must be caught by the matrix too).
NAIVE_AS_UTC = Mutant(
    "planted-naive-instant-as-utc", PROBLEM_RESULTS, "An instant without an offset is taken as UTC.",
    (Edit("wire.py", '        bad(name, "must carry an offset (Z or +hh:mm): a naive date-time names no instant")\n'
                     '        return None\n', "        parsed = parsed.replace(tzinfo=timezone.utc)\n"),))
DIES_ON_COMMAND_ID = Mutant(
    "planted-dies-on-a-bad-command-id", PROBLEM_RESULTS, "The adapter exits when a command ID is no UUID.",
    (Edit("wire.py", '    bad(name, "must be a UUID string")\n',
          '    if name == "command_id":\n        raise SystemExit(3)\n    bad(name, "must be a UUID string")\n'),))


def launcher(mutant: Mutant, tmp_path: Path) -> str:
    """A command running the mutant copy's adapter (the catalog's `python -m mutants` knows only its own)."""
    root = materialize(mutant, tmp_path / "mutants")
    path = tmp_path / f"{mutant.name}-adapter"
    code = (f"import runpy, sys; sys.path.insert(0, {str(root)!r}); "
            "runpy.run_module('reference.adapter', run_name='__main__', alter_sys=True)")
    path.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -c {shlex.quote(code)}\n")
    path.chmod(0o755)
    return str(path)


def _refused_by_reading(hostile: Hostile) -> Problem | None:
    read = wire.command(hostile.op, hostile.args)
    return read if isinstance(read, Problem) else (check(read.spec) if read.spec is not None else None)


# -- the generator and the judge, without a database -----------------------------------------------------------

@settings(max_examples=300, deadline=None)
@given(hostile_command(SCHEDULE, 1))
def test_every_drawn_definition_or_argument_is_refused_by_reading_it(hostile):
    """What the reference refuses before any transaction: a hostile spec or a mistyped argument, each named."""
    assert hostile.op in CLIENT_OPS
    problem = _refused_by_reading(hostile)
    if hostile.problems in (("not-found",), ("revision-conflict", "validation")):
        return  # refused by the store (an unknown schedule, a stale revision), judged against a real one below
    assert problem is not None, hostile
    assert judge(hostile, Answer("fail", problem=problem.to_json()), {}) == [], hostile


@settings(max_examples=100, deadline=None)
@given(hostile_claim())
def test_a_drawn_claim_changes_one_argument_from_a_lawful_call(hostile):
    assert hostile.op == CLAIM and hostile.field in ("lease_owner", "lease_duration")
    other = {"lease_owner": "lease_duration", "lease_duration": "lease_owner"}[hostile.field]
    assert hostile.args[other] in ("30 seconds", "hostile-probe")


VALIDATION = {"type": "urn:x:problem:validation", "title": "invalid", "status": 400,
              "detail": "fix these fields: every", "errors": {"every": ["must be positive"]}}
EVERY = Hostile("create", "spec.every_s", "zero", {"spec": {"every_s": 0}})


@pytest.mark.parametrize("answer, changes, wrong", [
    (Answer("fail", problem=VALIDATION), {}, None),
    (Answer("ok", value={}), {}, "answered ok"),
    (Answer("fail", problem=VALIDATION), {"schedule_commands": {"added": ["(1)"], "removed": []}}, "rows changed"),
    (Answer("unknown", error={"kind": "x", "message": "m", "retriable": True}), {}, "answered unknown"),
    (Answer("fail", problem=VALIDATION, error={"kind": "x", "retriable": True}), {}, "retriable"),
    (Answer("fail", error={"kind": "bad-arguments", "message": "every_s must be a number"}), {}, "no problem result"),
    (Answer("crash", error={"message": "exited with status 1"}), {}, "crashed"),
    (Answer("fail", problem={**VALIDATION, "type": "urn:x:problem:oops"}), {}, "none of PROTOCOL.md"),
    (Answer("fail", problem={**VALIDATION, "type": "urn:x:problem:not-found"}), {}, "this input allows"),
    (Answer("fail", problem={**VALIDATION, "detail": " "}), {}, "no detail"),
    (Answer("fail", problem={**VALIDATION, "detail": "bad", "errors": {"kind": ["x"]}}), {}, "does not name"),
])
def test_the_judge_accepts_only_a_clear_refusal_that_changed_nothing(answer, changes, wrong):
    found = judge(EVERY, answer, changes)
    assert (found == []) if wrong is None else any(wrong in w for w in found), found


def test_the_claim_must_fail_with_a_data_exception_naming_its_argument():
    owner = Hostile(CLAIM, "lease_owner", "blank", {"lease_owner": " ", "lease_duration": "30 seconds"}, ())
    good = Answer("fail", error={"sqlstate": "22023", "message": "lease owner must not be blank"})
    assert judge(owner, good, {}) == []
    assert judge(owner, Answer("fail", error={"sqlstate": "42501", "message": "lease owner"}), {})
    assert judge(owner, Answer("fail", error={"sqlstate": "22023", "message": "bad value"}), {})
    assert judge(owner, Answer("ok", value=[["1", SCHEDULE, "2"]]), {})


def test_a_field_is_named_by_its_path_a_suffix_or_a_field_under_it():
    assert names_field({"detail": "fix these fields: after", "errors": {}}, "spec.after_s")
    assert names_field({"detail": "x", "errors": {"target.command": ["y"]}}, "spec.target.command")
    assert names_field({"detail": "fix these fields: spec.target", "errors": {}}, "spec")
    assert not names_field({"detail": "fix these fields: kind", "errors": {"kind": []}}, "spec.at")
    assert not names_field({"detail": "the state is invalid", "errors": {}}, "spec.at")  # no word "at"


def test_changed_names_each_table_whose_text_differs():
    before = {"a": "(1,x)\n(2,y)", "b": ""}
    assert changed(before, dict(before)) == {}
    assert changed(before, {"a": "(1,x)\n(2,z)", "b": ""}) == {"a": {"added": ["(2,z)"], "removed": ["(2,y)"]}}


# -- against a real store ---------------------------------------------------------------------------------------

def _search(world, tmp_path, command, examples, seed=0, migrations=None, sweep=True) -> HostileSearch:
    search = HostileSearch(HostileRun(world, command, tmp_path / "logs", migrations), shrink_s=20,
                           share=(0, 1) if sweep else None)
    search.run(seed, examples)
    return search


def test_a_snapshot_is_byte_identical_until_a_row_changes(world, tmp_path):
    run = HostileRun(world, REFERENCE_COMMAND, tmp_path / "logs")
    try:
        run.start()
        assert {"schedule_commands", "work_items", "schedule_dispatch", "store_runtime"} <= set(run.tables)
        first, second = run.snapshot(), run.snapshot()
        assert first == second and first["schedule_definitions"]
        with run.case.owner() as conn:  # a planted change: one microsecond of one row
            conn.execute("update appsurface_durable.schedule_dispatch_timing set due_at_utc = due_at_utc + "
                         "interval '1 microsecond', claimable_at_utc = claimable_at_utc + interval '1 microsecond'")
            after = snapshot(conn, run.tables)
        assert list(changed(first, after)) == ["schedule_dispatch_timing"]
    finally:
        run.close()


def test_the_reference_refuses_a_ci_sized_hostile_run(world, tmp_path):
    search = _search(world, tmp_path, REFERENCE_COMMAND, 150)
    assert search.failure is None, search.printable()
    assert search.stats.inputs == 150 + len(sweep(SCHEDULE, 1))
    assert set(search.stats.by_op) == {*CLIENT_OPS, CLAIM}
    assert search.result().ok
    # The reference declares every client operation: they went to it, the claims to the claim function.
    assert search.stats.to == {"implementation": search.stats.inputs - search.stats.by_op[CLAIM],
                               "claim": search.stats.by_op[CLAIM]}


def test_the_go_example_runs_through_it_on_the_fallback(world, tmp_path):
    search = HostileSearch(HostileRun(world, GO, tmp_path / "logs"), shrink_s=20, share=(0, 1))
    seen = []
    original = search.check
    search.check = lambda h, a, c: (seen.append(search.run_.case.fallbacks.copy()), original(h, a, c))[1]
    search.run(0, 60)
    assert search.failure is None, search.printable()
    assert any({"create", "update"} & f for f in seen)  # client calls went to the host's fallback
    assert search.stats.by_op.get(CLAIM)
    # process-due alone declared: no hostile call reached the implementation, and the counts say where they went.
    assert search.stats.to == {"fallback": search.stats.inputs - search.stats.by_op[CLAIM],
                               "claim": search.stats.by_op[CLAIM]}
    assert targets_text(search.stats.to) == (f"to the implementation 0, the harness's fallback client "
                                             f"{search.stats.to['fallback']}, the claim function {search.stats.by_op[CLAIM]}")


def test_a_client_that_stores_a_format_character_fails_naming_the_input(world, tmp_path):
    mutant = BY_NAME["target-format-characters-stored"]
    search = _search(world, tmp_path, mutant.command, 150)
    failure = search.failure
    assert failure is not None
    assert failure["input"]["field"] == "spec.target.command" and failure["check"] == "hostile-client-inputs"
    assert mutant.rule in failure["rule"] == CLIENT_RULE
    assert any("answered ok" in w for w in failure["wrong"]) and "schedule_definitions" in failure["changed"]
    assert json.loads(failure["request"])["args"]["spec"]["target"]["command"] == failure["input"]["args"]["spec"][
        "target"]["command"]


def test_a_client_that_takes_a_naive_instant_as_utc_fails_shrunk_to_it(world, tmp_path):
    search = _search(world, tmp_path, launcher(NAIVE_AS_UTC, tmp_path), 150)
    failure = search.failure
    assert failure is not None and failure["input"]["field"] in ("spec.at", "spec.anchor")
    assert "offset" in failure["input"]["why"] or "naive" in failure["input"]["why"]
    assert "answered ok" in failure["wrong"][-1]


def test_a_claim_function_granting_a_long_lease_fails_naming_the_duration(world, tmp_path):
    mutant = BY_NAME["claim-long-lease"]
    search = _search(world, tmp_path, mutant.command, 150, migrations=migrations_dir(mutant))
    failure = search.failure
    assert failure is not None and failure["check"] == "hostile-claim-inputs"
    assert failure["input"]["field"] == "lease_duration" and mutant.rule in CLAIM_RULE == failure["rule"]
    assert "schedule_dispatch" in failure["changed"]  # the lease it granted, seen in the snapshot


@pytest.mark.parametrize("name, field", [("claim-cap-on-epoch", "lease_duration"),
                                         ("owner-blank-by-ascii-only", "lease_owner")])
def test_drawn_claims_alone_find_a_cap_on_the_parts_and_an_ascii_only_blank(world, tmp_path, name, field):
    """Without the sweep: the calls drawn from the readings (a mixed-sign interval landing outside the cap on the
    claim day, an owner of Unicode spaces and default-ignorable code points) find the mutant."""
    mutant = BY_NAME[name]
    search = _search(world, tmp_path, mutant.command, 150, migrations=migrations_dir(mutant), sweep=False)
    failure = search.failure
    assert failure is not None and failure["check"] == "hostile-claim-inputs", search.printable()
    assert failure["input"]["field"] == field and mutant.rule in failure["rule"]
    assert "schedule_dispatch" in failure["changed"]


def test_an_implementation_that_dies_on_a_hostile_call_fails_and_is_restarted(world, tmp_path):
    command = launcher(DIES_ON_COMMAND_ID, tmp_path)
    search = _search(world, tmp_path, command, 0)
    failure = search.failure
    assert failure is not None and failure["input"]["field"] == "command_id"
    assert any("crashed" in w for w in failure["wrong"])
    run = HostileRun(world, command, tmp_path / "again")
    try:
        run.start()
        dying = Hostile("delete", "command_id", "a word", {"schedule_id": SCHEDULE, "expected_revision": 1,
                                                           "command_id": "not-a-uuid"})
        answer, _ = run.send(dying)
        assert answer.outcome == "crash"
        after = Hostile("delete", "schedule_id", "unknown", {"schedule_id": "00000000-0000-4000-8000-00000000dead",
                                                             "expected_revision": 1}, ("not-found",))
        answer, rows = run.send(after)  # the next call reaches a fresh start of the implementation
        assert judge(after, answer, rows) == [] and len(run.case.started) == 2
    finally:
        run.close()


class _RaisingFallback(HostileRun):
    """The host's fallback raising once the run's schedule exists (as a reference client with a bug would)."""

    def start(self) -> None:
        super().start()

        def raising(op, args, command_id):
            raise KeyError("planted")
        self.case.client.call = raising


def test_a_fallback_that_raises_is_a_finding_not_a_harness_error(world, tmp_path):
    search = HostileSearch(_RaisingFallback(world, GO, tmp_path / "logs"), shrink_s=5)
    search.run(0, 30)
    assert search.failure is not None and "raised KeyError" in search.failure["wrong"][-1]


def test_explore_writes_a_hostile_failure_with_its_request_and_replays_it(tmp_path, capsys):
    mutant = BY_NAME["target-format-characters-stored"]
    out, report_dir = tmp_path / "found", tmp_path / "report"
    code, report = explore(Options(command=mutant.command, max_examples=1, hostile=150, out=out,
                                   report_dir=report_dir, progress=lambda line: None))
    assert code == 1
    hostile = report["run"]["explore"]["hostile"]
    assert hostile["inputs"] >= 1 and hostile["failures"] == 1 and hostile["found"][0]["field"] == "spec.target.command"
    written = json.loads(Path(hostile["found"][0]["file"]).read_text())
    path = Path(hostile["found"][0]["file"])
    assert json.loads(written["request"])["op"] == written["input"]["op"]
    # It replays where it was found, with its own --impl, and records which code that was.
    assert written["replay"] == (f"cd {shlex.quote(written['code']['cwd'])} && crashproof explore --replay-hostile "
                                 f"{path.absolute()} --impl {shlex.quote(mutant.command)}")
    assert written["code"] == report["implementation"]["code"] and written["code"]["module"] == "mutants"
    assert replay(path) == 1  # the file's own --impl
    assert "running other code" not in capsys.readouterr().err
    assert replay(path, REFERENCE_COMMAND) == 0
    # The same --impl running other code (here: after an edit of its package) is named on standard error.
    path.write_text(json.dumps(dict(written, code=dict(written["code"], module_sha256="0" * 64))))
    assert replay(path, mutant.command) == 1
    note = capsys.readouterr().err
    assert f"note: {path} was found with this --impl running other code: module_sha256 " in note


def test_a_negative_hostile_budget_is_a_one_line_usage_error(tmp_path):
    import subprocess
    done = subprocess.run([sys.executable, "-m", "testhost.cli", "explore", "--hostile", "-1", "--report-dir",
                           str(tmp_path / "r")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--hostile" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_each_job_takes_its_share_of_the_hostile_calls():
    from testhost.runs.explore import hostile_share
    from testhost.runs.explore_profiles import PROFILES
    shares = [hostile_share(Options(jobs=3), PROFILES["ci"], i) for i in range(3)]
    assert sum(shares) == PROFILES["ci"].hostile_examples and max(shares) - min(shares) <= 1
    assert [hostile_share(Options(jobs=2, hostile=0), PROFILES["ci"], i) for i in range(2)] == [0, 0]


def test_a_run_whose_schedule_cannot_be_created_is_a_harness_error(world, tmp_path, monkeypatch):
    from testhost.runs import hostile_phase as hostile
    from testhost.errors import TestHostError
    monkeypatch.setattr(hostile, "BASE_SPEC", {"kind": "every", "every_s": 0, "target": {"command": "x"}})
    run = HostileRun(world, REFERENCE_COMMAND, tmp_path / "logs")
    try:
        with pytest.raises(TestHostError, match="could not create its schedule"):
            run.start()
    finally:
        run.close()


def test_once_the_shrinking_time_is_spent_the_first_failure_stands(world, tmp_path):
    search = HostileSearch(HostileRun(world, launcher(NAIVE_AS_UTC, tmp_path), tmp_path / "logs"), shrink_s=0)
    search.run(0, 400)
    assert search.failure is not None and search.stats.shrinks == 0 and search.stats.failures == 1
