"""The checks that stand on the edges of the cursor, the cutoff and the generations (docs/protocol-notes.md, 37a-37e):
against synthetic reads, and on real runs of the reference and of the mutants that break each edge."""

from __future__ import annotations

import shlex
import sys
import uuid
from datetime import datetime, timedelta, timezone

from mutants.catalog import CUTOFF, HIGH_WATER, NEVER_REWRITES
from scenarios.matrix import CasePlan
from scenarios.scenario import load_catalog
from testhost.case.barrier_facts import BarrierFacts
from testhost.judge.registry import CHECKS
from testhost.judge.observations import cursor_high_water, generations_unchanged, pass_decides_due
from scenarios.matrix import CasePlan
from testhost.case.runner import run_case
from testhost.judge.state import StoreState

T = datetime(2031, 3, 3, tzinfo=timezone.utc)
S = "00000000-0000-4000-8000-000000000001"
EVERY = {"schedule_id": uuid.UUID(S), "generation": 1, "schedule_kind": "every", "accepted_at_utc": T, "at_utc": None,
         "after_us": None, "every_us": 60_000_000, "anchor_utc": T}


def _at(seconds: float) -> datetime:
    return T + timedelta(seconds=seconds)


# -- cursor-never-moves-back -------------------------------------------------------------------------------------

def _reads(*cursors, restored_at=None):
    return [{"at": f"read {i + 1}", "cursors": {S: c}, "restored": i == restored_at} for i, c in enumerate(cursors)]


def test_the_high_water_rule_is_the_spec_sentence():
    assert CHECKS["cursor-never-moves-back"].startswith(HIGH_WATER)


def test_a_cursor_that_stays_or_moves_forward_passes_and_one_read_lower_fails_naming_both_reads():
    assert cursor_high_water(_reads(_at(0), _at(0), _at(61), None, _at(120))).ok
    back = cursor_high_water(_reads(_at(150), _at(160), _at(-3450), _at(210)))
    assert not back.ok and back.rule == CHECKS["cursor-never-moves-back"] and back.rows == 4
    assert back.evidence == [{"schedule_id": S, "read": "read 3", "cursor_utc": "2031-03-02T23:02:30.000000Z",
                              "highest_read_before": "2031-03-03T00:02:40.000000Z", "read_there": "read 2",
                              "moved_back_by_s": 3610.0}]
    # a microsecond is a move back too
    assert not cursor_high_water(_reads(_at(120), _at(120) - timedelta(microseconds=1))).ok


def test_a_restore_starts_the_reads_afresh_and_each_schedule_has_its_own_mark():
    assert cursor_high_water(_reads(_at(300), _at(60), _at(90), restored_at=1)).ok
    other = "00000000-0000-4000-8000-000000000002"
    reads = [{"at": "a", "cursors": {S: _at(300), other: _at(10)}}, {"at": "b", "cursors": {other: _at(20), S: _at(300)}}]
    assert cursor_high_water(reads).ok


def test_barrier_reads_and_step_reads_are_noted_in_one_order():
    facts = BarrierFacts()
    facts.note_cursors("after step 1", {S: _at(1)})
    facts.note_cursors("after step 2", {S: _at(0)}, restored=True)
    assert [r["at"] for r in facts.cursor_reads] == ["after step 1", "after step 2"]
    assert cursor_high_water(facts.cursor_reads).ok


# -- pass-decides-what-was-due ------------------------------------------------------------------------------------

def _seen(cursor_s, *, now_s, lease=1, lifecycle="active", generation=1, clean=False):
    return {"cursors": {S: {"cursor_utc": _at(cursor_s), "lease_generation": lease, "lifecycle_state": lifecycle,
                            "active_generation": generation}},
            "processor": {"server_now": _at(now_s)}, "clean_pass": clean, "restored": False}


GENERATIONS = {(S, 1): EVERY, (S, 2): {**EVERY, "generation": 2}}


def test_the_pass_rule_is_the_spec_sentence():
    assert CHECKS["pass-decides-what-was-due"].startswith(CUTOFF)


def test_a_pass_frozen_on_an_instant_that_leaves_it_undecided_fails_and_one_that_decides_it_passes():
    # after the set-clock step the server reads the frozen instant, +60 s; the pass claimed the schedule
    decided = [(0, _seen(0.5, now_s=60)), (1, _seen(60, now_s=60, lease=2, clean=True))]
    assert pass_decides_due(decided, GENERATIONS).ok and pass_decides_due(decided, GENERATIONS).rows == 1
    deferred = [(0, _seen(0.5, now_s=60)), (1, _seen(59.999999, now_s=60, lease=2, clean=True))]
    result = pass_decides_due(deferred, GENERATIONS)
    assert not result.ok and result.evidence == [{
        "schedule_id": S, "step": 2, "claimed_by_the_pass": True,
        "server_time_before_the_pass": "2031-03-03T00:01:00.000000Z",
        "cursor_after_the_pass": "2031-03-03T00:00:59.999999Z", "left_undecided": ["2031-03-03T00:01:00.000000Z"],
        "count": 1}]


def test_what_the_pass_did_not_claim_or_could_not_decide_is_not_judged():
    due = (0, _seen(0.5, now_s=60))
    for after in (_seen(0.5, now_s=60, clean=True),  # not claimed: another schedule took the pass
                  _seen(0.5, now_s=60, lease=2),  # not a clean pass step (a fault, a refusal, no pass)
                  _seen(0.5, now_s=60, lease=2, lifecycle="suspended", clean=True),  # an anomaly or a fence
                  _seen(0.5, now_s=60, lease=2, generation=2, clean=True)):  # an update beside the pass
        assert pass_decides_due([due, (1, after)], GENERATIONS).rows == 0
    # a cutoff behind the cursor (the clock set back): nothing is due before the cursor
    assert pass_decides_due([(0, _seen(120, now_s=-3000)), (1, _seen(120, now_s=-3000, lease=2, clean=True))],
                            GENERATIONS).ok


# -- generations-never-rewritten --------------------------------------------------------------------------------

def _generations(command="job-v1", payload=None, *more):
    first = {**EVERY, "schedule_id": uuid.UUID(S), "target_command": command, "target_payload": payload or {}}
    rows = {(S, 1): first}
    for n, row in enumerate(more, start=2):
        rows[(S, n)] = {**first, "generation": n, **row}
    return rows


def _state(generations: dict) -> StoreState:
    return StoreState(now=T, definitions=[], generations=list(generations.values()), occurrences=[], work=[],
                      dispatch=[], history=[])


def test_the_generation_rule_is_the_spec_sentence():
    assert CHECKS["generations-never-rewritten"].startswith(NEVER_REWRITES)


def test_an_update_that_adds_a_generation_passes_and_one_that_rewrites_an_older_target_fails_once():
    added = [(0, {"generations": _generations()}), (1, {"generations": _generations("job-v1", None, {
        "target_command": "job-v2"})})]
    assert generations_unchanged(added, _state(_generations("job-v1", None, {"target_command": "job-v2"}))).ok
    rewritten = _generations("job-v2", {"x": 1}, {"target_command": "job-v2"})
    result = generations_unchanged([*added[:1], (1, {"generations": rewritten}), (2, {"generations": rewritten})],
                                   _state(rewritten))
    assert not result.ok and result.rule == CHECKS["generations-never-rewritten"]
    assert result.evidence == [{"schedule_id": S, "generation": 1, "first_read_after_step": 1, "at_step": 2,
                                "rewritten": {"target_command": ["job-v1", "job-v2"],
                                              "target_payload": [{}, {"x": 1}]}}]


def test_a_generation_gone_fails_and_a_restore_starts_the_reads_afresh():
    gone = generations_unchanged([(0, {"generations": _generations()}), (1, {"generations": {}})])
    assert not gone.ok and gone.evidence[0]["gone"] is True
    restored = [(0, {"generations": _generations("a", None, {"target_command": "b"})}),
                (1, {"generations": _generations("a"), "restored": True}),
                (2, {"generations": _generations("a", None, {"target_command": "c"})})]
    assert generations_unchanged(restored).ok


def test_the_final_state_is_compared_too():
    result = generations_unchanged([(0, {"generations": _generations()})], _state(_generations("job-v9")))
    assert not result.ok and result.evidence[0]["at_step"] == "final"


# -- on real runs ----------------------------------------------------------------------------------------------

def _run(world, tmp_path, scenario_name: str, module_args: str):
    scenario = next(s for s in load_catalog() if s.name == scenario_name)
    outcome = run_case(world, scenario, CasePlan(scenario_name), f"{shlex.quote(sys.executable)} -m {module_args}",
                       tmp_path)
    return outcome, {c.name: c for c in outcome.checks}


def test_the_reference_passes_the_edge_scenarios_and_the_edge_checks_examine_them(world, tmp_path):
    for name in ("update-behind-cursor", "update-on-cursor", "lateness-on-window", "single-instant-on-cutoff"):
        outcome, checks = _run(world, tmp_path / name, name, "reference.adapter")
        assert outcome.verdict == "pass", (name, outcome.reason)
        assert checks["cursor-never-moves-back"].rows > 0 and checks["generations-never-rewritten"].rows > 0, name
        assert checks["pass-decides-what-was-due"].rows > 0, name


def test_an_instant_on_a_frozen_cutoff_left_to_a_later_pass_is_named_under_the_cutoff_sentence(world, tmp_path):
    outcome, checks = _run(world, tmp_path, "single-instant-on-cutoff", "mutants single-instant-end-excluded")
    assert outcome.verdict == "fail" and not checks["pass-decides-what-was-due"].ok
    left = {e["left_undecided"][0] for e in checks["pass-decides-what-was-due"].evidence}
    assert left == {"2031-03-03T00:01:00.000000Z"} and len(checks["pass-decides-what-was-due"].evidence) == 2
    assert checks["model-agreement"].ok  # decided late, the same occurrence: only the edge's check names it
