"""The scenario language's steps run against real components: a step beside a held barrier (it waits for the
held decision, or a decision that did not lock its fence is caught), a frozen clock, a restore drill and its
measurement, and a planned barrier that never came. The reference and the Go example both."""

from pathlib import Path

import pytest

from mutants.catalog import BY_NAME, LOCKED_FENCE
from scenarios.matrix import CasePlan
from scenarios.scenario import load_catalog, parse
from testhost.case.runner import REFERENCE_COMMAND, run_case

GO = str(Path(__file__).resolve().parent.parent / "examples" / "go" / "run.sh")
CATALOG = {s.name: s for s in load_catalog()}


def _check(outcome, name: str):
    return next((c for c in outcome.checks if c.name == name), None)


def _beside(outcome) -> list[dict]:
    return [e for e in outcome.timeline if e["event"] == "beside-barrier"]


@pytest.mark.parametrize("command", [REFERENCE_COMMAND, GO], ids=["reference", "go"])
def test_a_scope_generation_change_beside_a_held_decision_waits_for_it(world, tmp_path, command):
    outcome = run_case(world, CATALOG["fence-beside-decision"], CasePlan("fence-beside-decision"), command, tmp_path)
    assert outcome.verdict == "pass", outcome.reason
    held, after = _beside(outcome)
    assert held["outcome"] == "waited" and held["barrier"] == "schedule-decision-before-commit"
    assert after["then"] == "runs after the pass"
    assert _check(outcome, "beside-barrier-reached").ok


def test_a_decision_that_reads_the_scope_generation_unlocked_is_caught_naming_the_locked_fence(world, tmp_path):
    mutant = BY_NAME["scope-generation-unlocked"]
    outcome = run_case(world, CATALOG["fence-beside-decision"], CasePlan("fence-beside-decision"), mutant.command,
                       tmp_path)
    assert [e["outcome"] for e in _beside(outcome)] == ["committed"]
    locked = _check(outcome, "fence-locked-beside-decision")
    assert not locked.ok and locked.rule.startswith(LOCKED_FENCE)
    assert locked.evidence[0]["fence"] == "scope-generation" and "cursor_utc" in locked.evidence[0]["changed"]


def test_an_update_beside_a_held_decision_waits_and_makes_the_next_generation(world, tmp_path):
    outcome = run_case(world, CATALOG["update-beside-decision"], CasePlan("update-beside-decision"),
                       REFERENCE_COMMAND, tmp_path)
    assert outcome.verdict == "pass", outcome.reason
    assert [e["outcome"] for e in _beside(outcome)] == ["waited", "waited"]
    assert "update (beside a held barrier)" in outcome.fallbacks
    assert outcome.picture["sync"]["generation"] == 2


# Found by explore: two schedules due at the same instant, a pass bounded to one holds its first claim (s1), and an
# update of s1 commits beside it. The claim was made before the update; the model re-claimed on the updated state
# (s1 no longer due) and decided s2 in that pass, where the implementation decided s1 as nothing and s2 later.
CLAIMED_BEFORE_THE_UPDATE = """
[[steps]]
op = "create"
schedule = "s1"
spec = { kind = "every", every_s = 60, anchor = "+0s", target = { command = "s1" } }

[[steps]]
op = "create"
schedule = "s2"
spec = { kind = "every", every_s = 60, anchor = "+0s", target = { command = "s2" } }

[[steps]]
op = "advance"
seconds = 61

[[steps]]
op = "process"
during = { barrier = "schedule-claim-after-commit", op = "update", schedule = "s1", spec = { kind = "every", every_s = 60, anchor = "+0s", target = { command = "s1-v2" } } }

[[steps]]
op = "advance"
seconds = 61
"""


@pytest.mark.parametrize("command", [REFERENCE_COMMAND, GO], ids=["reference", "go"])
def test_a_change_committed_beside_a_held_claim_leaves_the_pass_its_claimed_schedule(world, tmp_path, command):
    outcome = run_case(world, parse("claimed-before-the-update", CLAIMED_BEFORE_THE_UPDATE),
                       CasePlan("claimed-before-the-update"), command, tmp_path)
    assert outcome.verdict == "pass", outcome.reason
    assert [e["outcome"] for e in _beside(outcome)] == ["committed"]
    # s2 waited for the final drain: one recovery range of two instants, not a nominal one and a coalesced one.
    assert [o[1:4] for o in outcome.picture["s2"]["occurrences"]] == [("recovery", 60_000_000, 120_000_000)]


# Found by explore (27 steps, shrunk as far as its budget went): two Every schedules due at one instant, a pass
# bounded to one. The claim function orders by claimable time alone, so which of the two it claims is the store's;
# here it claimed the one the model, which breaks ties by creation order, did not predict.
TIED_CLAIMS = """
[[steps]]
op = "create"
schedule = "s1"
spec = { kind = "every", every_s = 30, anchor = "+7.123456s", target = { command = "s1-v1" } }

[[steps]]
op = "advance"
seconds = 90

[[steps]]
op = "process"
maximum_schedules = 2

[[steps]]
op = "process"
maximum_schedules = 2
lease_seconds = 0
expect = "fail"
rule = "{rule}"

[[steps]]
op = "advance"
seconds = 61

[[steps]]
op = "process"
maximum_schedules = 2

[[steps]]
op = "create"
schedule = "s2"
spec = { kind = "every", every_s = 60, anchor = "+0s", target = { command = "s2-v1" } }

[[steps]]
op = "advance"
seconds = 68

[[steps]]
op = "process"

[[steps]]
op = "complete-work"
schedule = "s2"
state = "running"
nth = 1

[[steps]]
op = "advance"
seconds = 68

[[steps]]
op = "process"

[[steps]]
op = "update"
schedule = "s2"
spec = { kind = "every", every_s = 60, anchor = "+7.123456s", target = { command = "s2-v2" } }

[[steps]]
op = "complete-work"
schedule = "s2"
state = "succeeded"
nth = 1

[[steps]]
op = "process"

[[steps]]
op = "advance"
seconds = 61

[[steps]]
op = "process"
maximum_schedules = 2

[[steps]]
op = "advance-epoch"

[[steps]]
op = "advance-scope-generation"

[[steps]]
op = "advance"
seconds = 68

[[steps]]
op = "process"

[[steps]]
op = "release"
schedule = "s2"
expect = "any"

[[steps]]
op = "advance"
seconds = 68

[[steps]]
op = "process"

[[steps]]
op = "advance"
seconds = -30

[[steps]]
op = "process"

[[steps]]
op = "advance"
seconds = 30
"""


def test_a_bounded_pass_that_claims_another_of_the_schedules_due_is_followed_by_the_model(world, tmp_path):
    from scenarios.generate import CLAIM_LIMITS

    scenario = parse("tied-claims", "fault_free = true\n" + TIED_CLAIMS.replace("{rule}", CLAIM_LIMITS))
    outcome = run_case(world, scenario, CasePlan("tied-claims"), REFERENCE_COMMAND, tmp_path)
    assert outcome.verdict == "pass", outcome.reason
    followed = [e for e in outcome.timeline if e["event"] == "model-claims"]
    assert followed and all(e["predicted"] != e["seen"] and len(e["predicted"]) == len(e["seen"]) for e in followed)


def test_a_planned_barrier_that_never_comes_fails_the_fault_free_run(world, tmp_path):
    scenario = parse("beside-nothing-due", '''
[[steps]]
op = "create"
schedule = "later"
spec = { kind = "at", at = "+600s", target = { command = "later" } }

[[steps]]
op = "process"
during = { barrier = "schedule-decision-before-commit", op = "advance-scope-generation" }
''')
    outcome = run_case(world, scenario, CasePlan(scenario.name), REFERENCE_COMMAND, tmp_path)
    reached = _check(outcome, "beside-barrier-reached")
    assert outcome.verdict == "fail" and not reached.ok
    assert reached.evidence == [{"step": 2, "op": "advance-scope-generation", "barrier":
                                 "schedule-decision-before-commit", "hit": 1, "outcome": "barrier-not-reached"}]


def test_a_cutoff_frozen_on_an_instant_decides_it_and_the_cursor_stands_on_it(world, tmp_path):
    outcome = run_case(world, CATALOG["cutoff-on-instant"], CasePlan("cutoff-on-instant"), REFERENCE_COMMAND,
                       tmp_path)
    assert outcome.verdict == "pass", outcome.reason
    expectations = _check(outcome, "scenario-expectations")
    assert expectations.ok and expectations.rows == 2  # +60 s decided on its instant, then +120 s on its own
    assert any(e["event"] == "clock-set" and e.get("frozen") for e in outcome.timeline)
    assert any(e["event"] == "clock-set" and "unfrozen_at" in e for e in outcome.timeline)
    assert not world.clock.frozen


def test_an_exclusive_range_end_is_caught_by_the_frozen_cutoff(world, tmp_path):
    """A cutoff that excluded its instant would leave the cursor short of +120 s: the exact cursor tells."""
    text = CATALOG["cutoff-on-instant"].source.replace('cursor = "+120s"', 'cursor = "+121s"')
    outcome = run_case(world, parse("cutoff-on-instant", text), CasePlan("cutoff-on-instant"), REFERENCE_COMMAND,
                       tmp_path)
    expectations = _check(outcome, "scenario-expectations")
    assert not expectations.ok and "cursor" in expectations.evidence[0]


def test_a_restore_drill_counts_the_instants_that_came_back_under_another_work_identity(world, tmp_path):
    outcome = run_case(world, CATALOG["restore-drill"], CasePlan("restore-drill"), REFERENCE_COMMAND, tmp_path)
    assert outcome.verdict == "pass", outcome.reason
    [drill] = outcome.measurements["restore-drills"]
    assert drill["snapshot"] == "hour-old"
    assert (drill["instants_with_work_before_restore"], drill["same_work_identity"],
            drill["another_work_identity"], drill["without_work_now"]) == (7, 1, 6, 0)
    assert outcome.to_json()["measurements"] == outcome.measurements
    events = [e["event"] for e in outcome.timeline]
    assert events.count("snapshot") == 1 and events.count("restore") == 1
    # the processors were stopped for the restore and started again
    assert sum(1 for e in outcome.timeline if e["event"] == "start") >= 2


def test_a_faulted_restore_drill_is_judged_on_the_restored_timeline(world, tmp_path):
    scenario = CATALOG["restore-drill"]
    base = run_case(world, scenario, CasePlan(scenario.name), REFERENCE_COMMAND, tmp_path)
    outcome = run_case(world, scenario, CasePlan(scenario.name, "schedule-link-after-commit", "kill", 5),
                       REFERENCE_COMMAND, tmp_path, base.baseline)
    assert outcome.verdict == "pass", outcome.reason
    assert _check(outcome, "planned-fault-fired").ok


def test_a_step_beside_a_barrier_that_waits_for_a_lock_is_cancelled_by_the_host_and_counts_as_waiting(world, tmp_path):
    """The host cancels the step as soon as the server shows it blocked (PostgreSQL's lock_timeout does not fire on a
    moved clock), or at its limit; an error that is not that cancel is the harness's failure, named."""
    import time

    import psycopg

    from testhost.errors import FallbackFailed
    from testhost.case.beside import cancelled_when_blocked
    from testhost.case.runner import CaseRun
    from testhost.world.store import new_store

    scenario = CATALOG["fence-beside-decision"]
    case = CaseRun(world, scenario, CasePlan(scenario.name), REFERENCE_COMMAND, tmp_path)
    case.store = new_store(world)
    holder = psycopg.connect(case.store.owner_dsn)
    try:
        holder.execute("select * from appsurface_durable.store_runtime for update")  # held, like a decision's lock
        started = time.monotonic()
        assert case.beside.owner("select appsurface_durable.advance_runtime_epoch()") is False
        assert time.monotonic() - started < 2  # told by the lock, not by a timeout
        holder.rollback()
        assert case.beside.owner("select appsurface_durable.advance_runtime_epoch()") is True
        with psycopg.connect(case.store.owner_dsn, autocommit=True) as conn:
            started = time.monotonic()
            with cancelled_when_blocked(conn, case.store.dsn("postgres"), limit_s=0.3) as waited:
                with pytest.raises(psycopg.errors.QueryCanceled):
                    conn.execute("select pg_sleep(30)")  # no lock, but it never ends: the limit cancels it
            assert waited() and 0.3 <= time.monotonic() - started < 3
        case.store.create_scope("tenant-a")
        with case.owner() as conn:  # the runtime role loses a privilege the update needs: an error, not a wait
            conn.execute("revoke update on appsurface_durable.schedule_definitions from appsurface_durable_runtime")
        spec = {"kind": "at", "at": "2031-03-03T00:01:00+00:00", "target": {"command": "x"}}
        with pytest.raises(FallbackFailed, match="update beside the held barrier: AccessDenied"):
            case.beside.fallback("update", {"schedule_id": str(scenario.schedule_id("ledger")), "spec": spec,
                                            "expected_revision": 1})
    finally:
        holder.close()
        case.client.close()
        case.store.drop()


def test_a_refused_step_beside_a_held_decision_changes_nothing_and_is_not_run_again(world, tmp_path):
    scenario = parse("refused-beside", '''
[[steps]]
op = "create"
schedule = "sync"
spec = { kind = "every", every_s = 60, anchor = "+0s", target = { command = "sync" } }

[[steps]]
op = "advance"
seconds = 61

[[steps]]
op = "process"
during = { barrier = "schedule-decision-before-commit", op = "update", schedule = "sync", expect = "fail", spec = { kind = "cron", target = { command = "sync" } } }

[expect.sync]
occurrences = [{ generation = 1, kind = "nominal", first = "+60s", last = "+60s", state = "materialized" }]
works = 1
''')
    outcome = run_case(world, scenario, CasePlan(scenario.name), REFERENCE_COMMAND, tmp_path)
    assert outcome.verdict == "pass", outcome.reason
    assert [e["outcome"] for e in _beside(outcome)] == ["refused"]
    assert _check(outcome, "client-outcomes").ok and _check(outcome, "client-outcomes").rows == 2  # create, update
    refused = [e for e in outcome.timeline if e["event"] == "response" and e["op"].startswith("update")]
    assert [(e["op"], e["outcome"]) for e in refused] == [("update (beside the held barrier)", "fail")]
    assert outcome.picture["sync"]["generation"] == 1


# Found by explore: a Work accepted after the clock was set back bears an acceptance time before the Work accepted
# ahead of it, so ordering by accepted_at_utc alone made `nth` name the first Work where the model (and the
# scenario's author) meant the second.
ACCEPTED_BEHIND = """
[[steps]]
op = "create"
schedule = "tick"
spec = { kind = "every", every_s = 60, anchor = "+0s", target = { command = "tick" } }

[[steps]]
op = "advance"
seconds = 68

[[steps]]
op = "process"

[[steps]]
op = "complete-work"
schedule = "tick"
state = "suspended"
nth = 1

[[steps]]
op = "advance"
seconds = 60

[[steps]]
op = "process"

[[steps]]
op = "advance"
seconds = -300

[[steps]]
op = "complete-work"
schedule = "tick"
state = "succeeded"
nth = 1

[[steps]]
op = "process"

[[steps]]
op = "advance"
seconds = 300

[[steps]]
op = "complete-work"
schedule = "tick"
state = "succeeded"
nth = 2

[expect.tick]
works = 2
"""


@pytest.mark.parametrize("command", [REFERENCE_COMMAND, GO], ids=["reference", "go"])
def test_nth_work_is_acceptance_order_even_for_work_accepted_after_the_clock_was_set_back(world, tmp_path, command):
    scenario = parse("accepted-behind", "fault_free = true\n" + ACCEPTED_BEHIND)
    outcome = run_case(world, scenario, CasePlan("accepted-behind"), command, tmp_path)
    assert outcome.verdict == "pass", outcome.reason
    works = [o[-1] for o in outcome.picture["tick"]["occurrences"] if o[-1] is not None]
    assert sorted(works) == ["succeeded", "succeeded"]  # the second step's nth 2 reached the coalesced Work


# Found by explore: the first Work made terminal beside the decision of the tick behind it requeues the schedule
# claimable at its terminal time; the clock set back 30 s then meets no claim, and the scope generation advanced
# once the clock is back fences the requeue's pass. The model had the requeue claimable at once, so the pass on the
# clock set back materialized the coalesced occurrence before the fence.
REQUEUED_BEHIND = """
[[steps]]
op = "create"
schedule = "s1"
spec = { kind = "every", every_s = 60, anchor = "+0s", target = { command = "s1-v1" } }

[[steps]]
op = "advance"
seconds = 68

[[steps]]
op = "process"

[[steps]]
op = "advance"
seconds = 61

[[steps]]
op = "process"
cancel_after = 1
during = { barrier = "schedule-decision-after-commit", op = "complete-work", schedule = "s1", nth = 1, state = "succeeded" }

[[steps]]
op = "advance"
seconds = -30

[[steps]]
op = "process"

[[steps]]
op = "advance"
seconds = 30

[[steps]]
op = "advance-scope-generation"
"""


@pytest.mark.parametrize("command", [REFERENCE_COMMAND, GO], ids=["reference", "go"])
def test_a_requeue_is_claimable_at_its_terminal_time_not_on_a_clock_set_back_before_it(world, tmp_path, command):
    scenario = parse("requeued-behind", "fault_free = true\n" + REQUEUED_BEHIND)
    outcome = run_case(world, scenario, CasePlan("requeued-behind"), command, tmp_path)
    assert outcome.verdict == "pass", outcome.reason
    assert (outcome.picture["s1"]["lifecycle"], outcome.picture["s1"]["suspension"]) == ("suspended",
                                                                                       "scope-generation")


# protocol-notes 31n: an Every of 30 s whose first pass accepts its Work (never started) with an update to 60 s
# committed beside that pass's claim; the new generation's first instant then coalesces behind the old generation's
# Work, which turns terminal beside that decision; the pass after materializes the coalesced occurrence.
OLD_GENERATION_ACCEPTED = """
[[steps]]
op = "create"
schedule = "s1"
spec = { kind = "every", every_s = 30, anchor = "+0s", target = { command = "s1-v1" } }

[[steps]]
op = "advance"
seconds = 31

[[steps]]
op = "process"
during = { barrier = "schedule-claim-before-commit", op = "update", schedule = "s1", spec = { kind = "every", every_s = 60, anchor = "+0s", target = { command = "s1-v2" } } }

[[steps]]
op = "advance"
seconds = 30

[[steps]]
op = "process"
during = { barrier = "schedule-decision-after-commit", op = "complete-work", schedule = "s1", nth = 1, state = "succeeded" }

[[steps]]
op = "process"

[expect.s1]
occurrences = [
  { generation = 1, kind = "nominal", first = "+30s", last = "+30s", state = "materialized" },
  { generation = 2, kind = "coalesced", first = "+60s", last = "+60s", state = "materialized" },
]
works = 2
"""


@pytest.mark.parametrize("command", [REFERENCE_COMMAND, GO], ids=["reference", "go"])
def test_an_old_generation_work_accepted_but_not_started_holds_the_slot_after_an_update(world, tmp_path, command):
    """31n's reading: a materialized old-generation target is started (its Work accepted), so it keeps the slot
    until terminal and the new generation's first instant coalesces behind it, as the model expects."""
    scenario = parse("old-generation-accepted", "fault_free = true\n" + OLD_GENERATION_ACCEPTED)
    outcome = run_case(world, scenario, CasePlan("old-generation-accepted"), command, tmp_path)
    assert outcome.verdict == "pass", outcome.reason
    kinds = [(o[0], o[1], o[4]) for o in outcome.picture["s1"]["occurrences"]]
    assert kinds == [(1, "nominal", "materialized"), (2, "coalesced", "materialized")], kinds


def test_nth_work_after_a_restore_counts_only_the_work_the_store_still_holds(world, tmp_path):
    """The drill's Work accepted after the backup is gone once it is restored: `nth = 2` is then the recovery
    occurrence's Work, not the second Work ever seen."""
    text = (Path(__file__).resolve().parent.parent / "scenarios" / "catalog" / "restore-drill.toml").read_text()
    head, expect = text.split("[expect.tick]")
    then = '[[steps]]\nop = "complete-work"\nschedule = "tick"\nstate = "succeeded"\nnth = 2\n\n'
    text = head + then + "[expect.tick]" + expect
    scenario = parse("restore-drill-then-work", "fault_free = true\n" + text)
    outcome = run_case(world, scenario, CasePlan("restore-drill-then-work"), REFERENCE_COMMAND, tmp_path)
    assert outcome.verdict == "pass", outcome.reason
    works = {o[1]: o[-1] for o in outcome.picture["tick"]["occurrences"]}
    assert works["recovery"] == "succeeded"
