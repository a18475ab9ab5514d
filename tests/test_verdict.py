"""Which judges a faulted case answers to, and `scenarios --lint`: the model's pictures of two timelines decide
whether crash-equivalence and the scenario's expectations apply. No database: pictures and states are written
out here, the timelines replayed in the model alone."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_checks import S, good_state

from barriers import CATALOG
from scenarios.scenario import load_catalog, parse
from testhost.judge.pictures import normalize
from testhost.judge.rules import CheckResult
from testhost.cli import main
from scenarios.steps import STEPS
from testhost.runs.lint import FAULT_STEPS, PROCESSOR_STEPS, lint, outcome
from testhost.judge.verdict import (NO_BASELINE, SCENARIO_OPTS_OUT, decide, fault_free_judges, model_promise,
                              not_compared)

EXAMPLE = Path(__file__).parent / "scenarios" / "shift-crosses-instant.toml"


def _example(text: str | None = None):
    return parse("shift-crosses-instant", text or EXAMPLE.read_text(), str(EXAMPLE))


def _entry(occurrences, references=None):
    return {"lifecycle": "active", "suspension": None, "generation": 2, "cursor_instant": 120_000_000,
            "occurrences": occurrences, "references": references or {1: "2031-03-03T00:00:00.000000Z"}}


FAULT_FREE = {"export": _entry([(2, "recovery", 60_000_000, 120_000_000, "materialized", "pending")])}
SHIFTED = {"export": _entry([(1, "nominal", 60_000_000, 60_000_000, "materialized", "pending"),
                             (2, "coalesced", 120_000_000, 120_000_000, "pending", None)])}


def test_a_fault_free_run_is_always_held_to_its_expectations():
    assert decide(False, True, None, SHIFTED) == (None, [])
    assert decide(False, False, None, SHIFTED) == (None, [])


def test_a_faulted_timeline_the_model_ends_alike_is_compared_whatever_its_own_reference_instants():
    other_run = {"export": {**FAULT_FREE["export"], "references": {1: "2031-03-03T00:00:00.250000Z"}}}
    assert decide(True, True, {"picture": {}, "model": FAULT_FREE}, other_run) == (None, [])


def test_a_faulted_timeline_the_model_ends_differently_is_not_compared_and_says_why_with_the_differences():
    why, evidence = decide(True, True, {"picture": {}, "model": FAULT_FREE}, SHIFTED, shift_s=6)
    assert why.startswith("not compared: ") and "by 6 s, and" in why and "scenarios --lint" in why
    left, _ = decide(True, True, {"picture": {}, "model": FAULT_FREE}, SHIFTED, 3, frozenset({"export"}))
    assert "by 3 s, the faulted pass left export to the recovery, and" in left
    [difference] = evidence
    assert difference["schedule"] == "export" and difference["differs_in"] == ["occurrences"]
    assert difference["this_timeline"]["occurrences"][0]["first_nominal_utc"] == "2031-03-03T00:01:00.000000Z"
    assert difference["fault_free_timeline"]["occurrences"][0]["kind"] == "recovery"


def test_equivalence_false_and_a_missing_baseline_are_not_compared_with_their_own_reason():
    assert decide(True, False, {"picture": {}, "model": FAULT_FREE}, FAULT_FREE) == (SCENARIO_OPTS_OUT, [])
    assert decide(True, True, None, FAULT_FREE) == (NO_BASELINE, [])
    assert decide(True, True, {"picture": {}, "model": None}, FAULT_FREE) == (NO_BASELINE, [])
    opted_out = parse("x", 'equivalence = false\n[[steps]]\nop = "drain"\n')
    assert opted_out.equivalence is False  # the field still parses: a team's own catalog keeps working


def test_a_check_not_compared_is_neither_a_pass_nor_a_failure_in_report_json():
    skipped = not_compared("crash-equivalence", "rule", "not compared: because", [{"schedule": "export"}]).to_json()
    assert skipped["ok"] is True and skipped["skipped"] == "not compared: because" and skipped["rows"] == 0
    assert "skipped" not in CheckResult("crash-equivalence", "rule", True).to_json()


class _Scenario:
    def __init__(self, expect, equivalence=True):
        self.expect, self.equivalence = expect, equivalence


def _resolve(value, generation):
    from test_checks import T
    from datetime import timedelta
    return T + timedelta(seconds=float(value.lstrip("+").rstrip("s")))


def test_not_compared_judges_leave_no_vacuous_pass_the_model_promises_the_rows_instead():
    empty = [CheckResult("one-occurrence-per-identity", "rule", True, [], 0)]
    found = fault_free_judges(empty, faulted=True, scenario=_Scenario({}), base={"picture": {}, "model": FAULT_FREE},
                              model_picture=SHIFTED, picture={}, state=None, schedule_ids={}, resolve=None, shift_s=3)
    assert [c.name for c in found] == ["scenario-expectations", "no-vacuous-checks", "crash-equivalence"]
    assert found[0].skipped and found[2].skipped and found[0].ok and found[2].ok
    assert not found[1].ok and found[1].evidence[0]["check"] == "one-occurrence-per-identity"
    assert model_promise(SHIFTED)["export"]["works"] == 1


def test_compared_judges_keep_their_power():
    state = good_state()
    ids = {"report": S}
    picture = normalize(state, ids)
    moved = {"report": {**picture["report"], "cursor_instant": picture["report"]["cursor_instant"] + 60_000_000}}
    want = {"report": {"works": 3}}
    found = fault_free_judges([], faulted=True, scenario=_Scenario(want), base={"picture": moved, "model": SHIFTED},
                              model_picture=SHIFTED, picture=picture, state=state, schedule_ids=ids,
                              resolve=_resolve)
    by_name = {c.name: c for c in found}
    assert not by_name["crash-equivalence"].ok and by_name["crash-equivalence"].skipped is None
    assert not by_name["scenario-expectations"].ok and by_name["scenario-expectations"].skipped is None
    fault_free = fault_free_judges([], faulted=False, scenario=_Scenario(want), base=None, model_picture=SHIFTED,
                                   picture=picture, state=state, schedule_ids=ids, resolve=_resolve)
    assert [c.name for c in fault_free] == ["scenario-expectations", "no-vacuous-checks"]


def test_lint_names_the_pass_two_seconds_before_an_instant_and_nothing_else():
    [warning] = lint(_example())
    assert warning.step.index == 3 and warning.step.op == "process" and warning.shift_s == 3
    assert warning.schedules == ("export",) and "+60s" in warning.crossed
    line = warning.line()
    assert line.startswith(f"{EXAMPLE}: step 4 (process): ") and "+60s" in line


def test_the_lints_shifted_timeline_is_the_one_the_failing_cases_ran():
    scenario = _example()
    shifted, fault_free = outcome(scenario, 3), outcome(scenario)
    assert [o[:2] for o in fault_free["export"]["occurrences"]] == [(2, "recovery")]
    assert [o[:2] for o in shifted["export"]["occurrences"]] == [(1, "nominal"), (2, "coalesced")]


def test_lint_is_quiet_where_the_shift_crosses_no_instant():
    # The pass at +53: 3 s later (any fault) or 6 s later (a pause) is still before +60.
    text = EXAMPLE.read_text().replace("seconds = 58", "seconds = 53").replace("seconds = 63", "seconds = 68")
    assert lint(_example(text)) == []


def test_lint_warns_about_a_later_step_the_shift_carries_across_an_instant_and_names_it():
    # The pass at +56 is clear of +60 by 3 s, but the last pass at +119 lands at +122 after a recovery: across
    # +120. A fault in that last pass, or in the final drain after it, has its recovery drain past +120 too.
    text = EXAMPLE.read_text().replace("seconds = 58", "seconds = 56")
    warnings = lint(_example(text))
    assert [(w.step.index + 1 if w.step else 0, w.fault) for w in warnings] == [(4, "any fault"), (7, "any fault"),
                                                                                 (0, "any fault")]
    assert warnings[0].crossings == (("+120s", (7, 0)),)
    assert "step 7, the final drain then fall after nominal instant +120s" in warnings[0].line()
    assert "its recovery, the final drain then fall after nominal instant +120s" in warnings[1].line()
    assert warnings[2].line().startswith(f"{EXAMPLE}: the final drain: ")


def test_lint_checks_a_pause_with_its_two_moves():
    # A pass 5 s before an instant: one move of 3 s stays clear of it, the pause's two (6 s) do not.
    text = EXAMPLE.read_text().replace("seconds = 58", "seconds = 55").replace("seconds = 63", "seconds = 67")
    warnings = lint(_example(text.replace("seconds = 55", "seconds = 54", 1)))
    assert [(w.fault, w.shift_s) for w in warnings] == [("pause", 6.0)]


def test_lint_considers_exactly_the_steps_in_which_a_barrier_can_fire():
    transactions = {b.transaction for b in CATALOG}
    assert transactions == {"dispatcher claim", "scoped decision", "scoped bridge", "Work terminal"}
    assert PROCESSOR_STEPS == {"process", "race", "drain"} and FAULT_STEPS - PROCESSOR_STEPS == {"complete-work"}
    assert set().union(*(STEPS[op].transactions for op in FAULT_STEPS)) == transactions


def test_the_built_in_catalog_warns_only_where_a_fault_must_change_the_outcome():
    """The cancelled pass (recovery drains what it left), and the passes with a step beside their held decision: a
    fault that stops the pass before that decision leaves the step to run before the recovery decides."""
    found = [(w.origin.rsplit("/", 1)[-1], w.step.index + 1) for s in load_catalog() for w in lint(s)]
    assert sorted(found) == [("cancel-between-leases.toml", 5), ("fence-beside-decision.toml", 3),
                             ("update-beside-decision.toml", 3)]


def test_a_scenario_planned_fault_free_only_has_nothing_to_lint(capsys, tmp_path):
    """No fault is injected into a `fault_free` scenario, so no recovery can shift its outcome."""
    (tmp_path / "shift.toml").write_text("fault_free = true\n" + EXAMPLE.read_text())
    assert main(["scenarios", "--lint", "--strict", "--catalog", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "0 warnings in 1 scenario"


def test_scenarios_lint_prints_one_line_per_warning_and_exits_1_only_when_strict(capsys, tmp_path):
    (tmp_path / "shift.toml").write_text(EXAMPLE.read_text())
    assert main(["scenarios", "--lint", "--catalog", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"warning: {tmp_path / 'shift.toml'}: step 4 (process): ")
    assert out[-1] == "1 warning in 1 scenario"
    assert main(["scenarios", "--lint", "--strict", "--catalog", str(tmp_path)]) == 1
    capsys.readouterr()
    (tmp_path / "shift.toml").write_text(EXAMPLE.read_text().replace("seconds = 58", "seconds = 53")
                                         .replace("seconds = 63", "seconds = 68"))
    assert main(["scenarios", "--lint", "--strict", "--catalog", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines() == ["0 warnings in 1 scenario"]


@pytest.mark.parametrize("scenario", load_catalog(), ids=lambda s: s.name)
def test_the_lint_replay_runs_every_built_in_scenario(scenario):
    # a schedule whose every create the scenario expects refused (client-commands) never exists
    created = {s.args["schedule"] for s in scenario.steps if s.op == "create" and s.expected_outcome != "fail"}
    assert created and set(outcome(scenario)) == created


# -- a pass a fault stopped: the model's branches ---------------------------------------------------------------

INTERRUPTED = Path(__file__).parent / "scenarios" / "interrupted-before-instant.toml"


def _every30():
    from datetime import timedelta

    from scenarios.scenario import T0
    from testhost.judge.gate_model import Generation
    from testhost.judge.timelines import Timelines
    model = Timelines()
    model.create("x", Generation(1, "every", T0, every=timedelta(seconds=30), anchor=T0))
    return model, T0, timedelta


def _kinds(model) -> list[tuple]:
    from testhost.judge.gate_model import picture
    return [o[:4] for o in picture(model)["x"]["occurrences"]]


def test_a_fault_in_a_pass_branches_the_model_over_what_the_pass_left_to_the_recovery():
    model, t0, s = _every30()
    model.step_started()
    model.pass_(t0 + s(seconds=58), 1)
    model.fork()
    model.drain(t0 + s(seconds=61))  # the recovery, on the moved clock
    model.pass_(t0 + s(seconds=94), 1)
    assert len(model.branches) == 2
    assert _kinds(model.branches[0]) == [(1, "coalesced", 60_000_000, 90_000_000), (1, "nominal", 30_000_000, 30_000_000)]
    assert _kinds(model.branches[1]) == [(1, "coalesced", 90_000_000, 90_000_000), (1, "recovery", 30_000_000, 60_000_000)]
    from testhost.judge.gate_model import picture
    assert model.matching(picture(model.branches[1])) is model.branches[1]
    assert model.matching({"x": None}) is model.primary  # nothing matches: judged against the fault-free branch


def test_a_branch_matches_a_database_that_shows_no_entry_for_a_schedule_whose_create_was_refused():
    model, t0, s = _every30()
    model.step_started()
    model.pass_(t0 + s(seconds=58), 1)
    model.fork()
    model.drain(t0 + s(seconds=61))
    from testhost.judge.gate_model import picture
    database = {**picture(model.branches[1]), "refused": None}  # the refused create's name: no row, no model entry
    assert "refused" not in picture(model.branches[1])
    assert model.matching(database) is model.branches[1]


def test_a_decision_seen_to_commit_is_not_left_and_a_fault_outside_a_pass_branches_nothing():
    model, t0, s = _every30()
    model.pass_(t0 + s(seconds=58), 1)
    model.fork({"x"})  # its decision-after-commit barrier came before the fault
    assert len(model.branches) == 1
    model, t0, s = _every30()
    model.pass_(t0 + s(seconds=58), 1)
    model.step_started()  # a later step (complete-work, say): the fault did not stop that pass
    model.fork()
    assert len(model.branches) == 1


def test_a_fault_in_a_bounded_pass_over_schedules_due_at_one_instant_branches_over_which_it_claimed():
    from datetime import timedelta

    from scenarios.scenario import T0
    from testhost.judge.gate_model import Generation, picture
    from testhost.judge.timelines import Timelines
    model = Timelines()
    for name in ("s1", "s2"):
        model.create(name, Generation(1, "at", T0, at=T0 + timedelta(seconds=60)))
    model.step_started()
    assert model.claimed(T0 + timedelta(seconds=61), 1) == ["s1"]  # the model's order: the primary branch's claim
    model.pass_(T0 + timedelta(seconds=61), 1)
    model.fork({"s2"})  # s2's decision was seen to commit: this pass claimed s2, which the model's order did not
    decided = [{name for name, entry in picture(branch).items() if entry["occurrences"]} for branch in model.branches]
    assert decided[0] == {"s1"}
    assert {"s2"} in decided[1:] and set() not in decided  # s2 claimed and decided; s2 is never left undecided
    assert all("s1" not in d for d in decided[1:])  # a branch claiming s1 could not have decided s2
    model = Timelines()
    for name in ("s1", "s2"):
        model.create(name, Generation(1, "at", T0, at=T0 + timedelta(seconds=60)))
    model.pass_(T0 + timedelta(seconds=61), 1)
    model.fork()  # nothing seen to commit: either may have been claimed, and either left undecided
    decided = [frozenset(n for n, e in picture(b).items() if e["occurrences"]) for b in model.branches]
    assert sorted(decided, key=sorted) == sorted([frozenset({"s1"}), frozenset(), frozenset({"s2"})], key=sorted)


def test_the_claim_choices_of_a_bounded_pass_are_bounded():
    from datetime import timedelta

    from scenarios.scenario import T0
    from testhost.judge.gate_model import Generation, Model
    from testhost.judge.timelines import MAX_CLAIM_CHOICES, claim_choices
    model = Model()
    for i in range(8):  # C(8, 4) = 70 choices: more than are branched
        model.create(f"s{i}", Generation(1, "at", T0, at=T0 + timedelta(seconds=60)))
    now = T0 + timedelta(seconds=61)
    assert len(list(__import__("itertools").combinations(range(8), 4))) > MAX_CLAIM_CHOICES
    assert claim_choices(model, now, 4, set()) == [model.claimed(now, 4)]
    assert len(claim_choices(model, now, 7, set())) == 8  # C(8, 7): the model's order and the seven others
    assert claim_choices(model, now, 8, set()) == [model.claimed(now, 8)]  # not bounded below the due


def test_the_branches_of_an_interrupted_pass_are_its_claims_subsets_or_their_tails():
    from testhost.judge.timelines import MAX_SUBSETS_OF, left_undecided
    assert left_undecided(["a", "b"]) == [frozenset("a"), frozenset("b"), frozenset("ab")]
    many = [str(i) for i in range(MAX_SUBSETS_OF + 1)]
    assert left_undecided(many)[0] == frozenset(many) and left_undecided(many)[-1] == frozenset([many[-1]])
    assert left_undecided([]) == []


def test_lint_warns_where_a_stopped_pass_leaves_its_decision_past_an_instant():
    scenario = parse("interrupted-before-instant", INTERRUPTED.read_text(), str(INTERRUPTED))
    [warning] = lint(scenario)
    assert warning.step.index == 2 and warning.left == ("x",) and warning.crossed == ("+60s",)
    assert "a fault that stops the pass before it decides x leaves it to the recovery" in warning.line()
    assert outcome(scenario, 2) == outcome(scenario)  # the shift alone changes nothing here


def test_a_report_counts_and_validates_its_checks_not_compared():
    from reports.report import SCHEMA_VERSION, summary, validate
    skipped = not_compared("crash-equivalence", "rule", "not compared: why").to_json()
    case = {"id": "s/b/kill/1", "scenario": "s", "barrier": "b", "fault": "kill", "hit": 1, "verdict": "pass",
            "checks": [skipped], "timeline": [], "duration_s": 0}
    plain = {**case, "id": "s", "barrier": None, "fault": None, "hit": None, "checks": []}
    assert summary([plain]) == {"cases": 1, "passed": 1, "failed": 0, "error": 0, "not_run": 0}
    report = {"schema_version": SCHEMA_VERSION, "suite_version": "x", "implementation": {}, "environment": {},
              "cases": [plain, case], "summary": summary([plain, case])}
    assert report["summary"]["not_compared"] == 1 and validate(report) == []
    case["checks"] = [{**skipped, "ok": False}]
    assert validate(report) == ["case s/b/kill/1: check crash-equivalence not compared needs a reason and ok true"]
