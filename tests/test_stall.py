"""The stall fault: a processor stopped inside its open transaction has its server session ended, another processor
takes the lease over and drains, and whatever the first does when it continues must write nothing for that schedule
(late-writes-fenced). Also: the faulted transaction is told apart while two processors race, so late-writes-fenced
and transaction-fate run in race scenarios; and a stall that could not happen fails its case."""

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import psycopg

from barriers import CATALOG
from barriers.catalog import PROCESSOR_TRANSACTIONS
from mutants.catalog import LEASE
from scenarios.matrix import CasePlan, expand
from scenarios.scenario import load_catalog
from testhost.runs.certify import certify
from testhost.runs.options import Options
from testhost.judge.fault_checks import stall_took_over
from testhost.faults.catalog import FAULTS, lock_holder
from scenarios.matrix import CasePlan
from testhost.case.runner import run_case

ADAPTERS = Path(__file__).parent / "adapters"
GO = Path(__file__).resolve().parent.parent / "examples" / "go" / "run.sh"
BARRIERS = "schedule-decision-before-commit,schedule-bridge-before-commit"


def _check(case: dict, name: str) -> dict | None:
    return next((c for c in case["checks"] if c["name"] == name), None)


def _assert_stalled_and_fenced(case: dict) -> None:
    """The stall happened (a session ended, the lease taken over by a takeover on the timeline) and was judged."""
    assert case["verdict"] == "pass", (case["id"], case["reason"])
    events = [e["event"] for e in case["timeline"]]
    assert "session-ended" in events
    assert any(e["event"] == "start" and e.get("instance") == "takeover" for e in case["timeline"])
    injected = next(e for e in case["timeline"] if e["event"] == "fault-injected")
    stall = injected["details"]["stall"]
    assert stall["ended_backend"] and stall["took_over"]
    assert stall["lease_generation"]["after_takeover"] > stall["lease_generation"]["at_barrier"]
    late = _check(case, "late-writes-fenced")
    assert late is not None and late["ok"] and late["rows"] >= 3  # definition, dispatch, history count at least
    fate = _check(case, "transaction-fate")
    assert fate is not None and fate["ok"] and injected["open_xid"] is not None  # the ended transaction aborted
    assert _check(case, "stall-took-over")["ok"]


def test_stall_applies_only_inside_a_processors_open_transaction_and_the_matrix_says_why():
    stall = FAULTS["stall"]
    for barrier in CATALOG:
        reason = stall.applies(barrier)
        if barrier.transaction in PROCESSOR_TRANSACTIONS and barrier.before_commit:
            assert reason is None, barrier.name
        else:
            assert reason, barrier.name
    scenario = next(s for s in load_catalog() if s.name == "at-single")
    census = {"at-single": {b.name: 1 for b in CATALOG}}
    plans, skipped = expand([scenario], census, FAULTS, fault="stall")
    assert {p.barrier for p in plans} == {"schedule-claim-before-commit", "schedule-decision-before-commit",
                                          "schedule-work-after-acceptance", "schedule-bridge-before-commit"}
    reasons = {s.barrier: s.reason for s in skipped}
    assert "session to end" in reasons["schedule-link-after-commit"]
    assert "lease" in reasons["work-terminal-before-commit"]


def test_a_stall_that_did_not_end_a_session_or_see_a_takeover_fails():
    assert stall_took_over({}) is None  # not a stall
    assert stall_took_over({"stall": {"ended_backend": 7, "took_over": True}}).ok
    missed = stall_took_over({"stall": {"ended_backend": None, "took_over": False, "why_not": "no transaction"}})
    assert not missed.ok and missed.evidence[0]["session_not_ended"] == "no transaction"
    kept = stall_took_over({"stall": {"ended_backend": 7, "took_over": False,
                                      "lease_generation": {"at_barrier": 1, "after_takeover": 1}}})
    assert not kept.ok and kept.evidence[0]["lease_not_taken_over"] == {"at_barrier": 1, "after_takeover": 1}


def test_stall_against_the_reference_is_fenced_after_the_takeover(tmp_path):
    code, report = certify(Options(scenario="at-single", barrier=BARRIERS, fault="stall", report_dir=tmp_path,
                                   progress=lambda line: None))
    stalled = [c for c in report["cases"] if c["fault"] == "stall"]
    assert code == 0 and len(stalled) == 2
    for case in stalled:
        _assert_stalled_and_fenced(case)
        # the reference noticed the dead session, retried after rollback and was fenced by the new revision
        answers = [e for e in case["timeline"] if e["event"] == "response" and e.get("instance") == "A"
                   and e.get("op") == "process-due"]
        assert answers[0]["value"]["fenced"] == 1, answers


def test_stall_against_the_go_example_is_fenced_after_the_takeover(tmp_path):
    built = subprocess.run([str(GO), "--build-only"], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    code, report = certify(Options(command=str(GO), scenario="at-single", barrier=BARRIERS, fault="stall",
                                   report_dir=tmp_path, progress=lambda line: None))
    stalled = [c for c in report["cases"] if c["fault"] == "stall"]
    assert code == 0 and len(stalled) == 2
    for case in stalled:
        _assert_stalled_and_fenced(case)


def test_a_stall_where_no_transaction_is_open_fails_the_case(world, tmp_path):
    """An implementation that reports its before-commit barrier after committing holds nothing to end there: the
    case fails instead of passing a stall that never happened."""
    scenario = next(s for s in load_catalog() if s.name == "at-single")
    command = f"{sys.executable} {ADAPTERS / 'late_before_commit.py'}"
    outcome = run_case(world, scenario, CasePlan("at-single", "schedule-decision-before-commit", "stall", 1),
                       command, tmp_path)
    assert outcome.verdict == "fail"
    check = next(c for c in outcome.checks if c.name == "stall-took-over")
    assert not check.ok and "no transaction holds" in check.evidence[0]["session_not_ended"]
    assert not any(e["event"] == "session-ended" for e in outcome.timeline)
    assert not any(e["event"] == "start" and e["instance"] == "takeover" for e in outcome.timeline)


def test_race_scenario_runs_late_writes_fenced_under_pause_and_stall(tmp_path):
    code, report = certify(Options(scenario="two-processors-race", fault="pause,stall",
                                   barrier="schedule-decision-before-commit,schedule-decision-after-commit",
                                   report_dir=tmp_path, progress=lambda line: None))
    failing = [(c["id"], c["reason"]) for c in report["cases"] if c["verdict"] != "pass"]
    assert code == 0 and not failing, failing
    probed = [c for c in report["cases"] if c["fault"] == "stall"
              or (c["fault"] == "pause" and c["barrier"].endswith("after-commit"))]
    assert len(probed) == 3  # stall at the first hit; pause at the first and the last
    for case in probed:
        late = _check(case, "late-writes-fenced")
        assert late is not None and late["ok"] and late["rows"] >= 3, case["id"]  # definition, dispatch, history
        injected = next(e for e in case["timeline"] if e["event"] == "fault-injected")
        assert injected["details"]["racers_waited_for"], case["id"]  # the other racer finished before the snapshot
    for case in (c for c in report["cases"] if c["fault"] == "stall"):
        _assert_stalled_and_fenced(case)


def test_the_locker_of_a_dispatch_row_is_told_apart_from_another_open_transaction(store):
    from protocol_helpers import every
    from reference import ScheduleClient

    with ScheduleClient(store.runtime_dsn, "tenant-a") as client:
        first, second = (client.create(every(60)).schedule_id for _ in range(2))
    dsn = store.world.admin_dsn(dbname=store.dbname)
    with psycopg.connect(dsn) as one, psycopg.connect(dsn) as two:
        for conn, schedule in ((one, first), (two, second)):
            conn.execute("select 1 from appsurface_durable.schedule_dispatch where schedule_id = %s for update",
                         (schedule,))
        xids = [conn.execute("select pg_current_xact_id()::text::bigint").fetchone()[0] for conn in (one, two)]
        run = SimpleNamespace(store=store)
        assert lock_holder(run, str(first)) == (xids[0], one.info.backend_pid)
        assert lock_holder(run, str(second)) == (xids[1], two.info.backend_pid)
        one.rollback()
        assert lock_holder(run, str(first)) == (None, None)


def test_a_processor_whose_retry_skips_the_lease_fence_is_caught_by_stall_alone(tmp_path):
    """The mutant retry-skips-lease-fence passes kill, disconnect, lost-commit-reply and pause at the decision's
    before-commit barrier (its retry there, if any, still holds its lease); only stall lets another take the lease
    before the retry, and late-writes-fenced names the lease sentence."""
    code, report = certify(Options(command=f"{sys.executable} -m mutants retry-skips-lease-fence",
                                   scenario="at-single", barrier="schedule-decision-before-commit",
                                   report_dir=tmp_path, progress=lambda line: None))
    verdicts = {c["fault"]: c for c in report["cases"] if c["fault"]}
    assert set(verdicts) >= {"kill", "disconnect", "lost-commit-reply", "pause", "stall"}
    assert code == 1
    assert [f for f, c in verdicts.items() if c["verdict"] != "pass"] == ["stall"]
    late = _check(verdicts["stall"], "late-writes-fenced")
    assert not late["ok"] and LEASE in late["rule"] and late["evidence"][0]["changed"]


def test_a_stall_whose_lease_nobody_takes_over_fails_the_case(world, tmp_path):
    """An implementation that claims ten-minute leases whatever it is asked: the host ends the session, but past the
    clock move the lease still holds, the takeover claims nothing, and the case fails rather than passing a stall
    whose competitor never came."""
    scenario = next(s for s in load_catalog() if s.name == "at-single")
    command = f"{sys.executable} {ADAPTERS / 'long_lease.py'}"
    outcome = run_case(world, scenario, CasePlan("at-single", "schedule-decision-before-commit", "stall", 1),
                       command, tmp_path)
    assert outcome.verdict == "fail"
    check = next(c for c in outcome.checks if c.name == "stall-took-over")
    assert not check.ok
    assert check.evidence[0]["lease_not_taken_over"]["at_barrier"] == check.evidence[0]["lease_not_taken_over"][
        "after_takeover"]
    assert any(e["event"] == "session-ended" and e["ended"] for e in outcome.timeline)
