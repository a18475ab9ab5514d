"""Where a case's time goes: CPU per process kind (from /proc) and wall time per phase, over a slice of cases run
in one world (`python -m bench.case_cost [SCENARIO_GLOB] [--fault F] [--profile]`).

CPU is the figure to trust on a loaded machine; wall time per phase includes waiting for the cores and is only
comparable within one run."""

from __future__ import annotations

import argparse
import cProfile
import fnmatch
import functools
import os
import pstats
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

from reports import counted
from scenarios.matrix import CasePlan, expand
from scenarios.scenario import load_catalog
from testhost.impl import forkserver
from testhost.case import runner
from testhost.judge import case_judge, verdict
from testhost.world import store
from testhost.faults.catalog import FAULTS
from testhost.case.reads import StoreReads
from testhost.case.recovery import Recovery
from testhost.case.runner import CASE_SEED, REFERENCE_COMMAND, CaseRun, run_case
from testhost.world.worlds import World

TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[float, float]:
    """(own CPU, CPU of reaped children) of a process, in seconds."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0.0
    return (int(fields[11]) + int(fields[12])) / TICK, (int(fields[13]) + int(fields[14])) / TICK


def _children(pid: int) -> list[int]:
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            found += [int(p) for p in open(f"/proc/{pid}/task/{task}/children").read().split()]
        except OSError:
            pass
    return found


_crashed = {"postgres": 0.0}


def _postgres(postmaster: int | None) -> float:
    if postmaster is None:
        return 0.0
    own, reaped = _stat(postmaster)
    return own + reaped + sum(sum(_stat(c)) for c in _children(postmaster))


def cpu(world: World) -> dict[str, float]:
    """CPU so far per process kind. PostgreSQL: the postmaster, its live children and the backends it reaped;
    the implementation: the fork server and every process it forked and reaped."""
    pg = _postgres(world.cluster.pid) + _crashed["postgres"]
    impl = sum(sum(_stat(s.pid)) for s in forkserver.servers())
    times = os.times()
    return {"host (case, readers, store pool)": times.user + times.system,
            "postgres": pg, "implementation": impl, "toxiproxy": sum(_stat(world.toxiproxy.pid))}


class Phases:
    """Wall time per phase, by wrapping the runner's methods (nested phases count in their parent too)."""

    def __init__(self):
        self.total: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._local = threading.local()

    def wrap(self, owner, attr: str, label: str | None = None) -> None:
        original = getattr(owner, attr, None)
        if original is None:  # a phase renamed or gone: say so, or its time would silently go uncounted
            raise SystemExit(f"bench.case_cost: {getattr(owner, '__name__', owner)} has no {attr} any more; "
                             "update the phases bench/case_cost.py times")
        label = label or attr

        @functools.wraps(original)
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.total[label] += time.perf_counter() - start
                self.calls[label] += 1
        setattr(owner, attr, timed)


def count_crashes() -> None:
    """A crashed postmaster's CPU is counted before it goes (its reaped backends go with it); once per process."""
    from testhost.world.cluster import Cluster
    original = Cluster.crash
    if getattr(original, "counted", False):
        return

    def crash(self):
        _crashed["postgres"] += _postgres(self.pid)
        original(self)
    crash.counted = True
    Cluster.crash = crash


def _by_op() -> None:
    """Implementation requests timed per operation."""
    original = runner.Implementation.request

    def request(self, op, args, timeout=None):
        start = time.perf_counter()
        try:
            return original(self, op, args, timeout)
        finally:
            _phases.total[f"request {op}"] += time.perf_counter() - start
            _phases.calls[f"request {op}"] += 1
    runner.Implementation.request = request


_phases = None


def instrument() -> Phases:
    global _phases
    phases = _phases = Phases()
    count_crashes()
    _by_op()
    phases.wrap(store.StorePool, "take", "store take")
    phases.wrap(store, "reset_store", "store reset (pool thread)")
    phases.wrap(CaseRun, "execute", "case (execute)")
    phases.wrap(CaseRun, "start_implementation", "implementation start to hello")
    phases.wrap(CaseRun, "step", "steps")
    phases.wrap(Recovery, "run", "recovery")
    phases.wrap(Recovery, "settle", "settle")
    phases.wrap(CaseRun, "drain", "drain (in steps, recovery, settle, final)")
    phases.wrap(StoreReads, "anything_due", "anything_due")
    phases.wrap(StoreReads, "observe", "observe (the store after each step)")
    phases.wrap(StoreReads, "schedule_rows", "schedule_rows")
    phases.wrap(CaseRun, "ensure_partitions", "ensure_partitions")
    phases.wrap(CaseRun, "teardown", "teardown (stop implementations, give back)")
    phases.wrap(runner, "read_state", "read_state")
    phases.wrap(runner.Implementation, "request", "implementation requests")
    phases.wrap(runner.Implementation, "stop", "implementation stop")
    phases.wrap(runner, "judge", "judge (every case check)")
    for name in ("universal", "model_agreement", "history_agreement", "normalize"):
        phases.wrap(case_judge, name, f"check {name}")
    phases.wrap(verdict, "equivalence", "check equivalence")
    for fault in FAULTS.values():
        phases.wrap(type(fault), "inject", f"inject {fault.name}")
    return phases


def statements(world: World, top: int, cases: int) -> None:
    """Server time per role and the costliest statements (planning and execution, per case)."""
    with world.admin() as conn:
        print("server statement time per role, ms per case (plan + exec), calls per case:")
        for role, spent, calls in conn.execute(
                "select r.rolname, sum(total_plan_time + total_exec_time), sum(calls) from pg_stat_statements s "
                "join pg_roles r on r.oid = s.userid where s.toplevel group by 1 order by 2 desc").fetchall():
            print(f"  {role:34} {spent / cases:8.2f} {calls / cases:7.1f}")
        print(f"top {top} statements (toplevel), ms per case: plan, exec, calls per case")
        for role, plan, run, calls, query in conn.execute(
                "select r.rolname, total_plan_time, total_exec_time, calls, left(regexp_replace(query, '\\s+', ' ', 'g'), 110) "
                "from pg_stat_statements s join pg_roles r on r.oid = s.userid where s.toplevel "
                "order by total_plan_time + total_exec_time desc limit %s", (top,)).fetchall():
            print(f"  {plan / cases:6.2f} {run / cases:6.2f} {calls / cases:5.1f} {role[:22]:22} {query}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", nargs="?", default="*")
    parser.add_argument("--fault", default="*")
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--stride", type=int, default=1, help="every N-th case of the slice (a sample)")
    parser.add_argument("--profile", action="store_true", help="cProfile the host's case thread")
    parser.add_argument("--statements", type=int, default=0, metavar="N",
                        help="load pg_stat_statements in this world and print its N costliest statements")
    options = parser.parse_args()
    scenarios = [s for s in load_catalog() if fnmatch.fnmatch(s.name, options.scenario)]
    log_dir = Path(tempfile.mkdtemp(prefix="case-cost-"))
    if options.statements:
        from testhost.world import workspace
        workspace.SERVER_SETTINGS.update({"shared_preload_libraries": "'pg_stat_statements'",
                                          "pg_stat_statements.track": "all", "pg_stat_statements.track_planning": "on",
                                          "pg_stat_statements.max": "20000"})
    phases = instrument()
    profiler = cProfile.Profile(time.thread_time) if options.profile else None  # CPU of the case thread, not waits
    with World("case-cost", seed=CASE_SEED) as world:
        census, pictures = {}, {}
        for scenario in scenarios:  # fault-free runs: the census, untimed
            outcome = run_case(world, scenario, CasePlan(scenario.name), REFERENCE_COMMAND, log_dir)
            census[scenario.name], pictures[scenario.name] = outcome.hits, outcome.baseline
        plans, _ = expand(scenarios, census, FAULTS, fault=options.fault.split(","))
        plans = [p for p in plans if p.fault is not None][::options.stride][:options.limit or None]
        print(f"{counted(len(scenarios), 'scenario')}, {counted(len(plans), 'faulted case')} sampled")
        phases.total.clear(), phases.calls.clear()
        if options.statements:
            with world.admin() as conn:
                conn.execute("create extension if not exists pg_stat_statements")
                conn.execute("select pg_stat_statements_reset()")
        by_name = {s.name: s for s in scenarios}
        before, started = cpu(world), time.perf_counter()
        verdicts: dict[str, int] = defaultdict(int)
        by_fault: dict[str, list[float]] = defaultdict(list)
        slowest: list[tuple[float, str]] = []
        if profiler:
            profiler.enable()
        for plan in plans:
            outcome = run_case(world, by_name[plan.scenario], plan, REFERENCE_COMMAND, log_dir, pictures[plan.scenario])
            verdicts[outcome.verdict] += 1
            by_fault[plan.fault].append(outcome.duration_s)
            slowest.append((outcome.duration_s, plan.id))
        if profiler:
            profiler.disable()
        time.sleep(0.3)  # the pool thread resets the last store
        if options.statements:
            statements(world, options.statements, len(plans))
        after, elapsed = cpu(world), time.perf_counter() - started
    n = len(plans)
    n = max(n, 1)
    print(f"{counted(len(plans), 'case')} ({dict(verdicts)}) in {elapsed:.1f} s wall, {n / elapsed:.2f} cases/s; load "
          f"{os.getloadavg()[0]:.1f}")
    print("CPU per case, ms (postgres misses a crashed postmaster's children):")
    total = 0.0
    for kind in before:
        spent = (after[kind] - before[kind]) / n * 1000
        total += spent
        print(f"  {kind:34} {spent:8.1f}")
    print(f"  {'total':34} {total:8.1f}")
    print("wall per case, ms (nested phases also count in their parent):")
    for label, spent in sorted(phases.total.items(), key=lambda kv: -kv[1]):
        print(f"  {label:44} {spent / n * 1000:8.1f}  ({phases.calls[label] / n:.1f} calls)")
    print("wall per fault: cases, mean s, sum s")
    for fault, spent in sorted(by_fault.items()):
        print(f"  {fault:20} {len(spent):4} {sum(spent) / len(spent):6.3f} {sum(spent):7.1f}")
    print("slowest:", ", ".join(f"{case} {spent:.2f}" for spent, case in sorted(slowest)[-8:]))
    if profiler:
        stats = pstats.Stats(profiler)
        stats.sort_stats("tottime").print_stats(25)
        stats.sort_stats("cumulative").print_stats(45)
        stats.print_callers("sleep|acquire")


if __name__ == "__main__":
    main()
