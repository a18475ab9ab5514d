"""`bridge-role-proven` and `bridge-failure-not-retriable`: the pure judges on written-out passes, the scenario fields
that ask for them, and real cases: the reference and the Go example pass, each mutant fails naming its sentence, a
revoked grant comes back however the pass ends, and a store whose grant did not come back is not reused."""

import shlex
import sys
import time
from pathlib import Path

import psycopg
import pytest

from scenarios.matrix import CasePlan, expand
from scenarios.scenario import ScenarioError, load_catalog, parse
from scenarios.steps import pass_denial
from testhost.case import role_changes
from testhost.judge import bridge_role
from testhost.judge.registry import CHECKS
from testhost.faults.catalog import FAULTS
from testhost.case.runner import run_case, store_pool
from testhost.world.store import Snapshot, StoreChanged, new_store, reset_store

ROOT = Path(__file__).resolve().parent.parent
GO = str(ROOT / "examples" / "go" / "run.sh")
PROOF = "A bridge must prove the connection's current_user is the configured runtime role"
NOT_RETRIABLE = "Access-denied and non-runtime bridge-role failures are not retriable."


def _denied(denial="member", outcome="fail", retriable=False, changed=None, due=True, not_in_effect=None):
    return {"step": 3, "instance": "B" if denial == "member" else "A", "denial": denial, "due": due,
            "not_in_effect": not_in_effect, "outcome": outcome, "value": None,
            "error": {"kind": "BridgeRoleError", "message": "x", "retriable": retriable}, "changed": changed or {}}


def _by_name(results):
    return {c.name: c for c in results}


def test_both_checks_are_registered_with_their_sentences_and_listed_on_the_protocol_page():
    from testhost.runs.protocol_page import render
    assert CHECKS["bridge-role-proven"].startswith(PROOF)
    assert CHECKS["bridge-failure-not-retriable"].startswith(NOT_RETRIABLE)
    page = render()
    assert "| `bridge-role-proven` |" in page and "| `bridge-failure-not-retriable` |" in page
    assert "runtime_login" in page


def test_a_refusal_that_is_not_retriable_passes_in_both_shapes():
    checks = _by_name(bridge_role.judge([_denied(), _denied("set-local-scope", outcome="unknown")]))
    assert checks["bridge-failure-not-retriable"].ok and checks["bridge-failure-not-retriable"].rows == 2
    assert checks["bridge-role-proven"].ok and checks["bridge-role-proven"].rows == 1
    assert bridge_role.judge([]) == []  # a case without a denied pass has neither check
    assert [c.name for c in bridge_role.judge([_denied("set-local-scope")])] == ["bridge-failure-not-retriable"]


def test_an_ok_a_retriable_answer_or_a_missing_flag_fails_naming_the_sentence():
    for wrong in (_denied(outcome="ok"), _denied(retriable=True), _denied("set-local-scope", outcome="unknown",
                                                                            retriable=None)):
        check = _by_name(bridge_role.judge([wrong]))["bridge-failure-not-retriable"]
        assert not check.ok and NOT_RETRIABLE in check.rule
        assert check.evidence[0]["outcome"] == wrong["outcome"]


def test_a_refused_statement_retried_fails_even_when_the_answer_is_right():
    once = {**_denied("set-local-scope", outcome="unknown"), "denied_statements": 1, "claims": 1}
    assert bridge_role.judge([once])[0].ok
    assert bridge_role.judge([{**once, "denied_statements": None}])[0].ok  # an outside server's log is not read
    retried = bridge_role.judge([{**once, "denied_statements": 2}])[0]
    assert not retried.ok and retried.evidence[0]["denied_statements"] == 2


def test_a_refused_pass_a_fault_fired_in_is_not_judged():
    assert bridge_role.judge([{**_denied(outcome="unknown", retriable=None), "faulted": True}]) == []


def test_scoped_facts_committed_under_a_member_login_fail_the_proof():
    changed = {"work_items": {"added": [{"work_id": "w"}], "removed": []}}
    check = _by_name(bridge_role.judge([_denied(outcome="fail", changed=changed)]))["bridge-role-proven"]
    assert not check.ok and check.evidence[0]["committed_beyond_the_claim"] == changed and PROOF in check.rule


def test_a_denial_not_in_effect_or_a_pass_with_nothing_due_tested_nothing_and_fails():
    for vacuous, why in ((_denied(not_in_effect="still granted"), "still granted"),
                         (_denied(due=False), "nothing was due")):
        check = _by_name(bridge_role.judge([vacuous]))["bridge-failure-not-retriable"]
        assert not check.ok and why in check.evidence[0]["tested_nothing"]


def _rows(lease_state="ready", generation=0, revision=0, due=None, **scoped):
    rows = {t: list(scoped.get(t, [])) for t in bridge_role.SCOPED}
    rows["schedule_dispatch"] = [{"dispatch_id": 1, "lease_state": lease_state, "lease_generation": generation,
                                  "dispatch_revision": revision}]
    rows["schedule_dispatch_timing"] = [{"dispatch_id": 1, "lease_owner": None if lease_state == "ready" else "o",
                                         "due_at_utc": due}]
    return rows


def test_a_claim_may_change_the_queue_but_a_release_or_a_scoped_row_may_not():
    before = _rows()
    assert bridge_role.scoped_changes(before, before) == {}
    assert bridge_role.scoped_changes(before, _rows("leased", 1, 1)) == {}  # a claim
    released = bridge_role.scoped_changes(_rows("leased", 1, 1), _rows("ready", 1, 2, due="later"))
    assert set(released) == {"schedule_dispatch", "schedule_dispatch_timing"}
    work = bridge_role.scoped_changes(before, _rows("leased", 1, 1, work_items=[{"work_id": "w"}]))
    assert work == {"work_items": {"added": [{"work_id": "w"}], "removed": []}}


# -- the scenario language ------------------------------------------------------------------------------------

STEPS = '[[steps]]\nop = "create"\nschedule = "j"\nspec = { kind = "at", at = "+30s", target = { command = "j" } }\n'


def test_a_member_login_is_for_copy_b_alone_and_a_revoked_privilege_is_one_of_the_registry():
    scenario = parse("x", '[instances.B]\nruntime_login = "member"\n' + STEPS +
                     '[[steps]]\nop = "process"\nprocessor = "B"\n[[steps]]\nop = "process"\nrevoke = "set-local-scope"\n'
                     '[[steps]]\nop = "process"\n')
    assert [pass_denial(scenario, s) for s in scenario.steps] == [None, "member", "set-local-scope", None]
    assert scenario.instances["B"].to_json() == {"runtime_login": "member"}
    with pytest.raises(ScenarioError, match="only copy B"):
        parse("x", '[instances.A]\nruntime_login = "member"\n' + STEPS)
    with pytest.raises(ScenarioError, match="runtime_login: must be one of member"):
        parse("x", '[instances.B]\nruntime_login = "owner"\n' + STEPS)
    with pytest.raises(ScenarioError, match="revoke must be one of set-local-scope"):
        parse("x", STEPS + '[[steps]]\nop = "process"\nrevoke = "insert"\n')
    with pytest.raises(ScenarioError, match="takes no during, expect or cancel_at"):
        parse("x", STEPS + '[[steps]]\nop = "process"\nrevoke = "set-local-scope"\nexpect = "fail"\n')


def test_the_catalog_scenario_plans_its_fault_free_run_alone():
    [scenario] = [s for s in load_catalog() if s.name == "bridge-role"]
    assert scenario.fault_free
    census = {"bridge-role": {"schedule-claim-before-commit": 2, "schedule-decision-before-commit": 1}}
    plans, skipped = expand([scenario], census, FAULTS)
    assert plans == [] and {s.barrier for s in skipped if "fault-free only" in s.reason} == set(census["bridge-role"])


# -- real cases --------------------------------------------------------------------------------------------------

def _command(module_args: str) -> str:
    return f"{shlex.quote(sys.executable)} -m {module_args}"


def _run(world, tmp_path, command: str):
    [scenario] = [s for s in load_catalog() if s.name == "bridge-role"]
    outcome = run_case(world, scenario, CasePlan("bridge-role"), command, tmp_path)
    return outcome, {c.name: c for c in outcome.checks}


def _answers(outcome):
    return [(e["instance"], e["outcome"], (e.get("error") or {}).get("retriable"))
            for e in outcome.timeline if e["event"] == "response" and e["op"] == "process-due"]


def test_the_reference_refuses_before_it_claims_then_answers_unknown_after_a_claim(world, tmp_path):
    outcome, checks = _run(world, tmp_path, _command("reference.adapter"))
    assert outcome.verdict == "pass", outcome.reason
    assert checks["bridge-role-proven"].ok and checks["bridge-role-proven"].rows == 1
    assert checks["bridge-failure-not-retriable"].ok and checks["bridge-failure-not-retriable"].rows == 2
    # The member login is refused before its claim (a clean fail); the revoked grant after the claim committed.
    assert _answers(outcome) == [("B", "fail", False), ("A", "unknown", False), ("A", "ok", None)]
    denied = [e for e in outcome.timeline if e["event"] == "denied-pass"]
    assert [e["not_in_effect"] for e in denied] == [None, None]
    assert [e["denied_statements"] for e in denied] == [None, 1]  # the 42501 was not retried


def test_the_go_example_claims_first_and_answers_unknown_both_times(world, tmp_path):
    outcome, checks = _run(world, tmp_path, GO)
    assert outcome.verdict == "pass", outcome.reason
    assert _answers(outcome) == [("B", "unknown", False), ("A", "unknown", False), ("A", "ok", None)]
    assert checks["bridge-role-proven"].ok and checks["outcome-honesty"].ok
    assert [e["denied_statements"] for e in outcome.timeline if e["event"] == "denied-pass"] == [None, 1]


# Found by explore: a refused pass claims s1 and leaves its lease to expire; a pass bounded to one schedule then
# claims s2 (due at the same instant, claimable before s1's expiry), and s1 is decided by the final drain, a
# minute later: one recovery range of three instants, where a model that claimed s1 second sees two occurrences.
LEASE_LEFT = """
[[steps]]
op = "create"
schedule = "s1"
spec = { kind = "every", every_s = 60, anchor = "+0s", target = { command = "s1" } }

[[steps]]
op = "create"
schedule = "s2"
spec = { kind = "at", at = "+60s", target = { command = "s2" } }

[[steps]]
op = "advance"
seconds = 61

[[steps]]
op = "process"
revoke = "set-local-scope"

[[steps]]
op = "advance"
seconds = 64

[[steps]]
op = "process"

[[steps]]
op = "advance"
seconds = 61
"""


@pytest.mark.parametrize("impl", ["reference", "go"])
def test_a_lease_a_refused_pass_left_orders_the_next_bounded_pass(world, tmp_path, impl):
    scenario = parse("lease-left", 'fault_free = true\n' + LEASE_LEFT)
    outcome = run_case(world, scenario, CasePlan("lease-left"), _command("reference.adapter") if impl == "reference"
                       else GO, tmp_path)
    assert outcome.verdict == "pass", outcome.reason
    ids = {str(scenario.schedule_id(name)): name for name in ("s1", "s2")}
    claimed = [ids.get(e["context"]["schedule_id"]) for e in outcome.timeline
               if e["event"] == "barrier" and e["name"] == "schedule-claim-after-commit"]
    assert claimed[:2] == ["s1", "s2"], claimed  # the refused pass's claim, then the bounded pass's


def test_a_bridge_that_does_not_prove_current_user_is_caught(world, tmp_path):
    outcome, checks = _run(world, tmp_path, _command("mutants bridge-role-unproven"))
    assert outcome.verdict == "fail" and "bridge-role-proven" in outcome.reason
    [evidence] = checks["bridge-role-proven"].evidence
    assert {"schedule_occurrences", "work_items"} <= set(evidence["committed_beyond_the_claim"])
    assert evidence["outcome"] == "ok" and not checks["bridge-failure-not-retriable"].ok


def test_a_denial_taken_as_transient_is_caught(world, tmp_path):
    outcome, checks = _run(world, tmp_path, _command("mutants bridge-denial-retriable"))
    assert outcome.verdict == "fail" and outcome.reason == "bridge-failure-not-retriable"
    answers = [(e["outcome"], (e["error"] or {}).get("retriable")) for e in checks["bridge-failure-not-retriable"].evidence
               if "outcome" in e]
    # The member login is refused as the processor starts, retriable; the revoked grant is retried after each
    # rollback, given up, and the pass answers as after a disconnect.
    assert answers == [("fail", True), ("ok", None)]
    [retried] = [e for e in checks["bridge-failure-not-retriable"].evidence if "denied_statements" in e]
    assert retried["denied_statements"] == 3 and retried["claims"] == 1  # the reference's bound of three attempts
    assert checks["bridge-role-proven"].ok


DIES_AT_THE_REVOKED_PASS = '''
import json, sys
print(json.dumps({"type": "hello", "protocol": 1, "implementation": "dies", "operations": ["process-due"]}), flush=True)
passes = 0
for line in sys.stdin:
    request = json.loads(line)
    if request.get("type") == "shutdown":
        break
    passes += 1
    if passes == 2:
        sys.exit(3)
    print(json.dumps({"type": "response", "id": request["id"], "outcome": "fail",
                      "error": {"kind": "refused", "message": "not the runtime role", "retriable": False}}), flush=True)
'''


def _settled(pool, before: int, limit_s: float = 10.0) -> None:
    deadline = time.monotonic() + limit_s
    while pool.reused + pool.replaced == before and time.monotonic() < deadline:
        time.sleep(0.05)


def test_the_revoked_grant_comes_back_when_the_implementation_dies_in_the_pass(world, tmp_path):
    script = tmp_path / "dies.py"
    script.write_text(DIES_AT_THE_REVOKED_PASS)
    pool = store_pool(world)
    replaced, seen = pool.replaced, pool.reused + pool.replaced
    outcome, _ = _run(world, tmp_path, f"{shlex.quote(sys.executable)} {script}")
    assert outcome.verdict == "error" and "exited with status 3" in outcome.reason
    _settled(pool, seen)
    assert pool.replaced == replaced and pool.reused + pool.replaced > seen  # given back as it was, and reused


def test_a_store_whose_grant_did_not_come_back_is_not_reused(world):
    store = new_store(world)
    try:
        snapshot = Snapshot.of(store)
        with psycopg.connect(store.owner_dsn, autocommit=True) as conn:
            role_changes.set_privilege(conn, "set-local-scope", granted=False)
            role_changes.set_privilege(conn, "set-local-scope", granted=True)
        reset_store(store, snapshot)  # restored: the same schema digest, reused
        with psycopg.connect(store.owner_dsn, autocommit=True) as conn:
            role_changes.set_privilege(conn, "set-local-scope", granted=False)
        with pytest.raises(StoreChanged, match="schema digest"):
            reset_store(store, snapshot)
    finally:
        store.drop()


def test_a_refused_pass_a_fault_interrupts_is_not_judged_and_the_case_recovers(world, tmp_path):
    text = (ROOT / "scenarios" / "catalog" / "bridge-role.toml").read_text().replace("fault_free = true", "")
    scenario = parse("bridge-role-faulted", text)
    command = _command("reference.adapter")
    baseline = run_case(world, scenario, CasePlan(scenario.name), command, tmp_path)
    assert baseline.verdict == "pass", baseline.reason
    # The reference's first claim is the revoked pass's (the member login is refused before it claims).
    plan = CasePlan(scenario.name, "schedule-claim-after-commit", "kill", 1)
    outcome = run_case(world, scenario, plan, command, tmp_path, baseline.baseline)
    assert outcome.verdict == "pass", outcome.reason
    denied = [e for e in outcome.timeline if e["event"] == "denied-pass"]
    assert [e["denial"] for e in denied] == ["member", "set-local-scope"]
    checks = {c.name: c for c in outcome.checks}
    assert checks["planned-fault-fired"].ok and checks["bridge-failure-not-retriable"].rows == 1  # the member's only


def test_the_host_reads_on_the_server_whether_a_denial_holds(world):
    from psycopg.rows import dict_row
    store = new_store(world)
    try:
        role_changes.ensure_member(world)
        role_changes.ensure_member(world)  # idempotent: looked up at every start
        with psycopg.connect(store.owner_dsn, autocommit=True, row_factory=dict_row) as conn:
            assert role_changes.denial_in_effect(conn, "member") is None
            assert "still holds execute on function" in role_changes.denial_in_effect(conn, "set-local-scope")
            role_changes.set_privilege(conn, "set-local-scope", granted=False)
            assert role_changes.denial_in_effect(conn, "set-local-scope") is None
            role_changes.set_privilege(conn, "set-local-scope", granted=True)
        with psycopg.connect(store.dsn(bridge_role.MEMBER), autocommit=True) as member:
            assert member.execute("select current_user, pg_has_role(current_user, "
                                  "'appsurface_durable_runtime', 'USAGE')").fetchone() == (bridge_role.MEMBER, True)
    finally:
        store.drop()


# -- the runtime role taken away between a committed decision and its bridge ------------------------------------

DEMOTED = ('[instances.B]\nruntime_login = "default-role"\n' + STEPS + '[[steps]]\nop = "advance"\nseconds = 31\n'
           '[[steps]]\nop = "process"\nprocessor = "B"\n')


def _demotion(changed_rows=None, reached=True, pending=True, not_in_effect=(), faulted=False, outcome="unknown"):
    occurrence = {"schedule_id": "s", "state": "pending" if pending else "materialized"}
    at_decision = _rows("leased", 1, 1, schedule_occurrences=[occurrence]) if reached else None
    demotion = bridge_role.Demotion(3, "B", "db", not_in_effect=list(not_in_effect), at_decision=at_decision,
                                    after=changed_rows or at_decision, context={"schedule_id": "s"} if reached else None,
                                    outcome=outcome, faulted=faulted)
    return demotion


def test_a_default_role_login_runs_its_passes_until_a_step_takes_the_role_after_the_decision():
    scenario = parse("x", DEMOTED + 'demote_after_decision = true\n[[steps]]\nop = "process"\nprocessor = "B"\n')
    assert [pass_denial(scenario, s) for s in scenario.steps] == [None, None, None, None]
    assert scenario.steps[2].args["demote_after_decision"] is True
    from scenarios.steps import STEPS as KINDS
    assert KINDS["process"].claims(scenario.steps[2]) == 1
    for text, message in (
            (DEMOTED.replace('runtime_login = "default-role"', 'runtime_login = "member"') +
             'demote_after_decision = true\n', "demote_after_decision takes the runtime role from a login whose"),
            (STEPS + '[[steps]]\nop = "process"\ndemote_after_decision = true\n', "run it on copy B"),
            (DEMOTED + 'demote_after_decision = true\nmaximum_schedules = 2\n', "maximum_schedules must be 1"),
            (DEMOTED + 'demote_after_decision = true\ncancel_after = 1\n', "it takes no cancel_after"),
            (DEMOTED + 'demote_after_decision = false\n', "demote_after_decision takes true")):
        with pytest.raises(ScenarioError, match=message):
            parse("x", text)
    [catalog] = [s for s in load_catalog() if s.name == "bridge-role-after-decision"]
    assert catalog.fault_free and catalog.instances["B"].runtime_login == "default-role"


def test_nothing_scoped_may_commit_once_the_role_was_taken_and_a_case_that_took_nothing_fails():
    assert bridge_role.judge_demotions([]) == []
    [check] = bridge_role.judge_demotions([_demotion()])
    assert check.name == "bridge-role-proven-after-decision" and check.ok and check.rows == 1
    assert check.rule.startswith(PROOF)
    bridged = _rows("ready", 1, 2, due="later", work_items=[{"work_id": "w"}],
                    schedule_occurrences=[{"schedule_id": "s", "state": "materialized"}])
    [wrong] = bridge_role.judge_demotions([_demotion(changed_rows=bridged)]).pop().evidence
    assert {"work_items", "schedule_occurrences", "schedule_dispatch"} <= set(wrong["committed_after_the_role_was_taken"])
    for vacuous, why in ((_demotion(reached=False), "never reached schedule-decision-after-commit"),
                         (_demotion(not_in_effect=["still the runtime role"]), "still the runtime role"),
                         (_demotion(pending=False), "left no pending occurrence")):
        [check] = bridge_role.judge_demotions([vacuous])
        assert not check.ok and why in check.evidence[0]["tested_nothing"]
    assert bridge_role.judge_demotions([_demotion(changed_rows=bridged, faulted=True)]) == []  # the fault's to judge


def _run_demoted(world, tmp_path, command: str, scenario=None):
    scenario = scenario or next(s for s in load_catalog() if s.name == "bridge-role-after-decision")
    outcome = run_case(world, scenario, CasePlan(scenario.name), command, tmp_path)
    return outcome, {c.name: c for c in outcome.checks}


def _default_role_settings(world) -> int:
    with psycopg.connect(world.admin_dsn(), autocommit=True) as conn:
        return conn.execute("select count(*) from pg_db_role_setting s join pg_roles r on r.oid = s.setrole "
                            "where r.rolname = %s", (bridge_role.DEFAULT_ROLE_LOGIN,)).fetchone()[0]


@pytest.mark.parametrize("impl", ["reference", "go"])
def test_a_bridge_whose_role_was_taken_after_the_decision_commits_nothing(world, tmp_path, impl):
    outcome, checks = _run_demoted(world, tmp_path, _command("reference.adapter") if impl == "reference" else GO)
    assert outcome.verdict == "pass", outcome.reason
    check = checks["bridge-role-proven-after-decision"]
    assert check.ok and check.rows == 1
    taken = [e for e in outcome.timeline if e["event"] == "runtime-role-taken"]
    assert [(e["barrier"], e["now"]) for e in taken] == [("schedule-decision-after-commit",
                                                          bridge_role.DEFAULT_ROLE_LOGIN)]
    # Both retry the schedule on a new session and are refused by a proof of current_user (33m); with the role given
    # back, B's next pass bridges the occurrence the refused pass's decision left.
    assert _answers(outcome)[:2] == [("B", "unknown", False), ("B", "ok", None)]
    assert checks["transaction-roles-at-barriers"].ok and checks["model-agreement"].ok
    assert _default_role_settings(world) == 0  # the store went back to the pool without the login's default


def test_a_bridge_on_its_own_unproven_session_is_caught(world, tmp_path):
    outcome, checks = _run_demoted(world, tmp_path, _command("mutants bridge-own-session-unproven"))
    assert outcome.verdict == "fail" and "bridge-role-proven-after-decision" in outcome.reason.split(", ")
    [evidence] = checks["bridge-role-proven-after-decision"].evidence
    assert {"schedule_occurrences", "work_items", "schedule_dispatch"} <= set(
        evidence["committed_after_the_role_was_taken"])
    assert evidence["outcome"] == "ok"


def test_a_pass_that_never_reaches_its_decision_tested_nothing_and_fails(world, tmp_path):
    # Nothing due: the pass claims nothing, and no decision commits for a bridge to follow.
    scenario = parse("demoted-idle", "fault_free = true\n" + DEMOTED.replace("seconds = 31", "seconds = 1")
                     + "demote_after_decision = true\n")
    outcome, checks = _run_demoted(world, tmp_path, _command("reference.adapter"), scenario)
    assert outcome.verdict == "fail" and outcome.reason == "bridge-role-proven-after-decision", outcome.reason
    [vacuous] = checks["bridge-role-proven-after-decision"].evidence
    assert "never reached schedule-decision-after-commit" in vacuous["tested_nothing"]
