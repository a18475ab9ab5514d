"""The crash matrix itself, against the reference: a slice with every barrier × every applicable fault, and
the harness's refusal to pass a run in which a planned barrier or fault never fired."""

import sys
from pathlib import Path

from barriers import CATALOG
from reports.report import validate
from scenarios.matrix import CasePlan
from scenarios.scenario import load_catalog
from testhost.runs.certify import certify
from testhost.runs.options import Options
from testhost.faults.catalog import FAULTS
from testhost.case.runner import REFERENCE_COMMAND, run_case

ADAPTERS = Path(__file__).parent / "adapters"


def test_slice_every_barrier_times_every_fault_passes(tmp_path):
    lines = []
    code, report = certify(Options(scenario="coalesce-terminal-callback", jobs=2, report_dir=tmp_path,
                                   progress=lines.append))
    assert validate(report) == []
    failing = [(c["id"], c["reason"]) for c in report["cases"] if c["verdict"] != "pass"]
    assert code == 0 and not failing, failing
    faulted = [c for c in report["cases"] if c["fault"]]
    wanted = {(b.name, f) for b in CATALOG for f, plugin in FAULTS.items() if plugin.applies(b) is None
              and "coalesce-terminal-callback" in getattr(plugin, "scenarios", ("coalesce-terminal-callback",))}
    # a kill whose twin (the same durable state, later in the run) is planned stands for it, and the report says so
    twins = {(s["barrier"], s["fault"]) for s in report["run"]["skipped"] if "leaves the state" in s["reason"]}
    assert twins and {f for _, f in twins} == {"kill"}
    # a pause after the lease's last write has nothing to take over: skipped, and the report says so
    spent = {(s["barrier"], s["fault"]) for s in report["run"]["skipped"] if "nothing more under the lease" in s["reason"]}
    assert spent and {f for _, f in spent} == {"pause"}
    ran = {(c["barrier"], c["fault"]) for c in faulted}
    assert ran <= wanted and ran | twins | spent == wanted, sorted(wanted - ran - twins - spent)
    for case in faulted:
        names = {check["name"] for check in case["checks"]}
        assert {"planned-fault-fired", "crash-equivalence", "scenario-expectations",
                "one-work-per-materialized-occurrence"} <= names
        injected = next(e for e in case["timeline"] if e["event"] == "fault-injected")
        if case["barrier"].endswith("-before-commit"):  # every such transaction writes: its xid was found
            assert injected["open_xid"] is not None, case["id"]
    fates = [check for c in faulted for check in c["checks"] if check["name"] == "transaction-fate"]
    assert any(c["evidence"] == [] for c in fates) and len(fates) >= 8  # the verifier confirmed what committed
    assert any("faulted [" in line for line in lines)


def test_a_planned_barrier_hit_that_never_comes_fails_the_case(world, tmp_path):
    scenario = next(s for s in load_catalog() if s.name == "at-single")
    outcome = run_case(world, scenario, CasePlan("at-single", "schedule-link-after-commit", "kill", 99),
                       REFERENCE_COMMAND, tmp_path)
    assert outcome.verdict == "fail"
    fired = next(c for c in outcome.checks if c.name == "planned-fault-fired")
    assert not fired.ok and fired.evidence[0]["hits_seen"]["schedule-link-after-commit"] == 1


def test_an_implementation_that_skips_a_barrier_fails_certification(tmp_path):
    command = f"{sys.executable} {ADAPTERS / 'skips_barrier.py'} schedule-decision-before-commit"
    code, report = certify(Options(command=command, scenario="at-single", report_dir=tmp_path,
                                   fault="kill", progress=lambda line: None))
    assert code == 1
    census = next(c for c in report["cases"] if c["fault"] is None)
    assert census["verdict"] == "fail" and census["reason"] == "barrier-coverage"
    assert not any(c["barrier"] == "schedule-decision-before-commit" for c in report["cases"] if c["fault"])


def test_history_partitions_follow_the_clock_across_months(world, tmp_path):
    from datetime import datetime, timedelta, timezone
    from testhost.case.runner import CaseRun, store_pool

    scenario = next(s for s in load_catalog() if s.name == "at-single")
    run = CaseRun(world, scenario, CasePlan("at-single"), REFERENCE_COMMAND, tmp_path)
    run.store = store_pool(world).take()
    owner, calls = run.store.verifier, []

    def counted():
        calls.append(world.clock.now())
        return owner()
    run.store.verifier = counted
    try:
        world.clock.set_time(datetime(2031, 3, 31, 23, 0, tzinfo=timezone.utc))
        run.ensure_partitions()                  # March, and April
        run.advance(timedelta(minutes=30))       # still March: nothing to make
        run.advance(timedelta(hours=1))          # April 1st: April is there, May is made
        run.advance(timedelta(days=31))          # May 2nd: June is made
        run.advance(timedelta(hours=1))
        assert len(calls) == 3
        with owner() as conn:
            months = {r["relname"] for r in conn.execute(
                "select c.relname from pg_inherits i join pg_class c on c.oid = i.inhrelid "
                "where i.inhparent = 'appsurface_durable.schedule_history'::regclass").fetchall()}
        assert {"schedule_history_203103", "schedule_history_203104", "schedule_history_203105",
                "schedule_history_203106"} <= months
    finally:
        world.clock.reset()
        run.store.verifier = owner
        store_pool(world).give_back(run.store)
