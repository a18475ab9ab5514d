"""The facts read at the barriers: what commits between them and in which transaction, the occurrence states at every
barrier, and the roles of the transactions open there. Pure judgments on written-out reads (passing and failing),
and real cases where each check passes the reference and the Go example and fires on its mutant."""

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from scenarios.matrix import CasePlan
from scenarios.scenario import load_catalog
from testhost.case.barrier_facts import BarrierFacts
from testhost.judge.barrier_checks import ROLES, STATES_SEEN, TOGETHER, WORK_INSIDE, changes
from testhost.judge.registry import CHECKS
from scenarios.matrix import CasePlan
from testhost.case.runner import run_case

S = "00000000-0000-4000-8000-000000000001"
GO = Path(__file__).resolve().parent.parent / "examples" / "go" / "run.sh"
BARRIER_CHECKS = ("decision-commits-together", "work-inside-link-transaction", "gate-a-states-at-every-barrier",
                  "transaction-roles-at-barriers")


def _facts(cursor="c0", cursor_xmin="10", occurrences=(), work=(), history=(), lease=(1, "leased", "11")):
    generation, state, revision = lease
    return {"definition": {"xmin": cursor_xmin, "cursor_utc": cursor, "revision": 1, "lifecycle_state": "active",
                           "active_generation": 1},
            "dispatch": {"xmin": revision, "lease_state": state, "lease_generation": generation,
                         "dispatch_revision": 2},
            "occurrences": [dict(o) for o in occurrences], "history": [dict(h) for h in history],
            "work": [dict(w) for w in work]}


def _occurrence(xmin, state="pending", last="t1", work_id=None):
    return {"key": "1|nominal|t1", "xmin": xmin, "state": state, "last_nominal_utc": last, "work_id": work_id}


def test_the_checks_are_registered_so_the_protocol_page_lists_them():
    from testhost.runs.protocol_page import render
    page = render()
    for name in BARRIER_CHECKS:
        assert name in CHECKS and f"`{name}`" in page
    assert CHECKS["decision-commits-together"] == TOGETHER and "in one scoped transaction" in TOGETHER
    assert "inside the occurrence-link transaction" in WORK_INSIDE and "does not claim" in STATES_SEEN
    assert "commits before accessing scoped data" in ROLES


def test_a_decision_in_one_transaction_passes_and_a_cursor_moved_by_another_fails():
    before = _facts()
    one = _facts(cursor="t9", cursor_xmin="20", occurrences=[_occurrence("20")])
    facts = BarrierFacts()
    facts._bracket("decision", ("d-before", "d-after"), S, before, one)
    assert facts.evidence[TOGETHER] == [] and facts.rows[TOGETHER] == 1
    two = _facts(cursor="t9", cursor_xmin="21", occurrences=[_occurrence("20")])
    facts._bracket("decision", ("d-before", "d-after"), S, before, two)
    [evidence] = facts.evidence[TOGETHER]
    assert evidence["transactions"] == ["20", "21"]
    # the cursor left to a later transaction: one xmin in the bracket, but a disposition without its cursor move
    later = BarrierFacts()
    later._bracket("decision", ("d-before", "d-after"), S, before, _facts(occurrences=[_occurrence("20")]))
    assert later.evidence[TOGETHER][0]["cursor_moved"] is False


def test_anything_committed_between_an_after_commit_barrier_and_the_next_before_commit_barrier_fails():
    before = _facts()
    facts = BarrierFacts()
    facts._gap(("claim-after", "decision-before"), S, before, _facts())
    assert facts.evidence[TOGETHER] == [] and facts.evidence[WORK_INSIDE] == []
    facts._gap(("decision-after", "bridge-before"), S, before, _facts(work=[{"key": "w1", "xmin": "30"}]))
    assert facts.evidence[WORK_INSIDE][0]["work_committed_outside_the_bridge"][0]["key"] == "w1"
    facts._gap(("claim-after", "decision-before"), S, before, _facts(cursor="t9", cursor_xmin="25"))
    assert facts.evidence[TOGETHER][0]["committed_outside_a_barrier_transaction"][0]["table"] == "definition"


def test_a_link_must_name_a_work_accepted_in_its_own_transaction():
    before = _facts(occurrences=[_occurrence("20")])
    linked = _occurrence("40", state="materialized", work_id="w1")
    facts = BarrierFacts()
    facts._bracket("bridge", ("b-before", "l-after"), S, before,
                   _facts(occurrences=[linked], work=[{"key": "w1", "xmin": "40"}], lease=(1, "ready", "40")))
    assert facts.evidence[WORK_INSIDE] == [] and facts.rows[WORK_INSIDE] == 1
    earlier = _facts(occurrences=[_occurrence("20")], work=[{"key": "w1", "xmin": "35"}])
    facts._bracket("bridge", ("b-before", "l-after"), S, earlier,
                   _facts(occurrences=[linked], work=[{"key": "w1", "xmin": "35"}], lease=(1, "ready", "40")))
    [evidence] = facts.evidence[WORK_INSIDE]
    assert evidence["work_accepted_in_this_transaction"] is False and evidence["work_xmin"] == "35"


def test_a_claim_advances_the_lease_generation_by_exactly_one():
    facts = BarrierFacts()
    ready = _facts(lease=(1, "ready", "5"))
    facts._bracket("claim", ("c-before", "c-after"), S, ready, _facts(lease=(2, "leased", "6")))
    assert facts.evidence[ROLES] == []
    facts._bracket("claim", ("c-before", "c-after"), S, ready, _facts(lease=(3, "leased", "6")))
    assert facts.evidence[ROLES][0]["lease_generation"] == [1, 3]


def _session(role, xid):
    return {"role": role, "xid": xid}


def test_the_open_transactions_at_a_before_commit_barrier_are_exactly_one_of_the_expected_role():
    facts = BarrierFacts()
    facts._sessions("schedule-decision-before-commit", S, [_session("appsurface_durable_runtime", "7")])
    facts._sessions("schedule-claim-before-commit", S, [_session("appsurface_durable_dispatcher", "8")])
    assert facts.evidence[ROLES] == [] and facts.rows[ROLES] == 2
    facts._sessions("schedule-decision-before-commit", S,
                    [_session("appsurface_durable_dispatcher", "8"), _session("appsurface_durable_runtime", "9")])
    facts._sessions("schedule-decision-before-commit", S, [])  # a barrier reported outside its transaction
    assert [len(e["sessions_holding_a_transaction_id"]) for e in facts.evidence[ROLES]] == [2, 0]


def test_a_state_outside_gate_a_at_any_barrier_fails_even_when_it_is_gone_by_the_end():
    facts = BarrierFacts()
    facts._states("schedule-link-after-commit", S, _facts(occurrences=[_occurrence("20", state="materialized",
                                                                                     work_id="w1")]))
    assert facts.evidence[STATES_SEEN] == []
    facts._states("schedule-decision-after-commit", S, _facts(occurrences=[_occurrence("20", state="claimed")]))
    assert facts.evidence[STATES_SEEN][0]["occurrences_outside_gate_a"][0]["state"] == "claimed"
    assert [c["name"] for c in [r.to_json() for r in facts.checks()] if not c["ok"]] == \
        ["gate-a-states-at-every-barrier"]


def test_changes_name_new_and_rewritten_rows_with_their_writer():
    before = _facts()
    after = _facts(cursor_xmin="12", occurrences=[_occurrence("12")])  # the definition rewritten with its values
    assert [(c["table"], c["xmin"]) for c in changes(before, after)] == [("definition", "12"), ("occurrences", "12")]
    assert changes(before, before) == []


# -- real cases -------------------------------------------------------------------------------------------------

def _run(world, tmp_path, plan: CasePlan, command: str):
    scenario = next(s for s in load_catalog() if s.name == plan.scenario)
    outcome = run_case(world, scenario, plan, command, tmp_path)
    return outcome, {c.name: c for c in outcome.checks}


def _module(module_args: str) -> str:
    return f"{shlex.quote(sys.executable)} -m {module_args}"


@pytest.mark.parametrize("plan", [CasePlan("at-single"), CasePlan("coalesce-terminal-callback"),
                                  CasePlan("two-processors-race"),
                                  CasePlan("at-single", "schedule-decision-before-commit", "lost-commit-reply", 1),
                                  CasePlan("two-processors-race", "schedule-decision-before-commit", "pause", 1)],
                         ids=lambda p: p.id)
def test_the_reference_passes_every_barrier_check_and_each_holds_rows(world, tmp_path, plan):
    outcome, checks = _run(world, tmp_path, plan, _module("reference.adapter"))
    assert outcome.verdict == "pass", outcome.reason
    for name in BARRIER_CHECKS:
        assert checks[name].ok, checks[name].evidence
    if plan.fault is None:
        assert checks["decision-commits-together"].rows >= 2
    else:  # read from the fault on: the prefix is the fault-free run's, and a fault breaks the pairs after it
        assert checks["decision-commits-together"].rows == 0
    assert checks["gate-a-states-at-every-barrier"].rows >= 1  # a faulted case: its fault's barrier, the recovery
    if plan.fault is None:  # one processor, no fault: the roles were read at every claim and decision
        assert checks["transaction-roles-at-barriers"].rows >= 3
        assert checks["work-inside-link-transaction"].rows >= 1


@pytest.mark.parametrize("mutant, check, key", [
    ("cursor-committed-beside-decision", "decision-commits-together", "transactions"),
    ("work-accepted-in-own-transaction", "work-inside-link-transaction", "work_committed_outside_the_bridge"),
    ("transient-claimed-occurrence", "gate-a-states-at-every-barrier", "occurrences_outside_gate_a"),
])
def test_each_barrier_check_catches_its_mutant_in_the_fault_free_run(world, tmp_path, mutant, check, key):
    outcome, checks = _run(world, tmp_path, CasePlan("at-single"), _module(f"mutants {mutant}"))
    assert outcome.verdict == "fail" and check in outcome.reason.split(", ")
    assert key in checks[check].evidence[0]


@pytest.fixture(scope="module")
def go_example():
    built = subprocess.run([str(GO), "--build-only"], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, f"examples/go did not build:\n{built.stderr}"
    return str(GO)


@pytest.mark.parametrize("scenario", ["at-single", "coalesce-terminal-callback"])
def test_the_go_example_declaring_only_process_due_passes_every_barrier_check(world, tmp_path, go_example, scenario):
    outcome, checks = _run(world, tmp_path, CasePlan(scenario), go_example)
    assert outcome.verdict == "pass", outcome.reason
    for name in BARRIER_CHECKS:
        assert checks[name].ok and checks[name].rows >= 1, (name, checks[name].evidence)


def test_a_second_runtime_transaction_open_at_the_decision_barrier_fails_the_roles_check(world, tmp_path, monkeypatch):
    """What a claim held open, or a second scoped transaction beside the decision, looks like to the server: here
    a runtime session that holds a transaction ID while the reference's decision waits at its barrier."""
    import psycopg

    import testhost.case.barrier_facts as facts_module

    read, opened = facts_module.BarrierFacts._read, []

    def beside(self, run, schedule_id, sessions, where):
        if sessions and not opened and run.facts.hits.get("schedule-decision-before-commit"):
            conn = psycopg.connect(run.store.runtime_dsn)
            conn.execute("select txid_current()")  # an xid, as any write would take
            opened.append(conn)
        return read(self, run, schedule_id, sessions, where)

    monkeypatch.setattr(facts_module.BarrierFacts, "_read", beside)
    try:
        outcome, checks = _run(world, tmp_path, CasePlan("at-single"), _module("reference.adapter"))
    finally:
        for conn in opened:
            conn.close()
    assert opened and outcome.verdict == "fail" and outcome.reason == "transaction-roles-at-barriers"
    [evidence] = checks["transaction-roles-at-barriers"].evidence
    assert evidence["barrier"] == "schedule-decision-before-commit"
    assert [s["role"] for s in evidence["sessions_holding_a_transaction_id"]] == ["appsurface_durable_runtime"] * 2
