"""Reference targets: materialization throughput against pgbench's commit ceiling, and a claim whose cost
stays flat as the number of schedules grows; each beside the plain way on the same cluster, same run."""

from __future__ import annotations

import multiprocessing
import os
import queue as queue_module
import re
import resource
import subprocess
import time
from dataclasses import dataclass
from datetime import timedelta

import psycopg
from psycopg import sql
from reports import counted

from reference import ProcessRequest, ScheduleClient, ScheduleProcessor, ScheduleSpec, Target
from testhost.world.components import find_postgres
from testhost.world.store import Store, copy_store, new_store
from testhost.world.worlds import World

from .figures import Figure, backend_cpu, median_of
from .sql_replay import record, replay_worker

SCOPE = "bench"
SCHEDULES = 2_000          # due Every schedules materialized by the two processors
PROCESSORS = 2
BATCH = 64                 # maximum_schedules per process_due pass
CREATORS = 2               # client connections creating the schedules (set-up only, untimed)
PGBENCH_SECONDS = 10
CLAIM_SIZES = (1_000, 1_000_000)
CLAIM_DUE = 10             # due dispatch rows at either size; every other schedule is due in the future
CLAIM_WARMUP = 20
CLAIM_SAMPLES = 300
INSERT_CHUNK = 250_000
# The server reads the clock file at most once a second per process, not at every clock call: that read is
# the harness's, not the implementation's, and it taxed the reference (and pgbench) per statement.
BENCH_CLOCK_CACHE_S = 1
# The same throughput run on a server whose every WAL flush waits this much first (commit_delay): printed
# beside the target, with no target of its own (see throughput).
SLOW_COMMIT_US = 1000


class Info(Figure):
    """A measured figure printed beside the targets, with no target of its own (never counts as missed)."""

    def __init__(self, name: str, value: float, unit: str, reference: float | None = None, reference_name: str = ""):
        super().__init__(name, value, unit, "", True, reference, reference_name)

    def line(self) -> str:
        ratio = (f"ratio {self.value / self.reference:.2f} vs {self.reference_name} "
                 f"({self.reference:.3g} {self.unit})" if self.reference else "")
        return f"{self.name:44} {self.value:10.3g} {self.unit:6} {'(measured, no target)':26} {ratio}".rstrip()


# -- helpers -------------------------------------------------------------------------------------------

def _admin(world: World, dbname: str = "postgres") -> psycopg.Connection:
    return psycopg.connect(world.admin_dsn(dbname=dbname), autocommit=True)


def _quiesce(world: World, dbname: str, timeout: float = 10.0) -> None:
    """Wait until no other backend is connected to dbname: an exiting backend flushes its statistics."""
    deadline = time.monotonic() + timeout
    with _admin(world) as conn:
        while time.monotonic() < deadline:
            others = conn.execute("select count(*) from pg_stat_activity where datname = %s "
                                  "and backend_type = 'client backend' and pid <> pg_backend_pid()",
                                  (dbname,)).fetchone()[0]
            if others == 0:
                return
            time.sleep(0.05)


def _counters(world: World, dbname: str) -> tuple[int, int]:
    """(xact_commit of dbname, the cluster's next transaction ID) from a fresh connection.

    The xid is read without assigning one (pg_snapshot_xmax of a fresh snapshot is the next xid), so the
    difference between two readings counts the transactions that wrote something, cluster-wide.
    """
    _quiesce(world, dbname)
    with _admin(world) as conn:
        conn.execute("select pg_stat_clear_snapshot()")
        commits = conn.execute("select xact_commit from pg_stat_database where datname = %s", (dbname,)).fetchone()[0]
        next_xid = conn.execute("select pg_snapshot_xmax(pg_current_snapshot())::text::bigint").fetchone()[0]
    return commits, next_xid


def _cpu_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine, from /proc/stat: how saturated the cores were."""
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def _due_schedule() -> ScheduleSpec:
    return ScheduleSpec(kind="every", every=timedelta(hours=1), target=Target("bench-report", {"n": 1}))


def _create_schedules(dsn: str, count: int) -> None:
    with ScheduleClient(dsn, SCOPE) as client:
        for _ in range(count):
            result = client.create(_due_schedule())
            if not hasattr(result, "schedule_id"):
                raise RuntimeError(f"schedule create refused: {result}")


def _processor_worker(runtime_dsn: str, dispatcher_dsn: str, ready, start, results) -> None:
    """One processor process: bounded passes until a pass claims nothing; reports totals and its own span."""
    processor = ScheduleProcessor(runtime_dsn, dispatcher_dsn)
    backends = [session.one("select pg_backend_pid() as pid")["pid"]
                for session in (processor.runtime, processor.dispatcher)]
    ready.put(True)
    start.wait()
    began, before, server_before = time.monotonic(), resource.getrusage(resource.RUSAGE_SELF), backend_cpu(backends)
    totals = {"passes": 0, "claimed": 0, "occurrences": 0, "materialized": 0, "fenced": 0, "aborted": 0}
    errors: list[str] = []
    while True:
        counts = processor.process_due(ProcessRequest(maximum_schedules=BATCH))
        totals["passes"] += 1
        for key in ("claimed", "occurrences", "materialized", "fenced", "aborted"):
            totals[key] += getattr(counts, key)
        errors.extend(counts.errors)
        if counts.claimed == 0:
            break
    ended = time.monotonic()
    after, server_after = resource.getrusage(resource.RUSAGE_SELF), backend_cpu(backends)
    processor.close()
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    results.put({**totals, "began": began, "ended": ended, "cpu": cpu, "server_cpu": server_after - server_before,
                 "errors": errors[:5]})


class _PgBench:
    """pgbench -N, 2 clients, 2 threads, straight to the cluster (no proxy), in a database of its own made once
    and dropped on exit; each `run` returns committed transactions per second and how busy the machine's cores
    were meanwhile."""

    def __init__(self, world: World):
        self._world = world
        self._pgbench = str(find_postgres().bindir / "pgbench")
        self._connect = ["-h", "127.0.0.1", "-p", str(world.cluster.port), "-U", "postgres"]

    def __enter__(self) -> "_PgBench":
        with _admin(self._world) as conn:
            conn.execute("drop database if exists bench_pgbench with (force)")
            conn.execute("create database bench_pgbench")
        try:
            subprocess.run([self._pgbench, "-i", "-q", *self._connect, "bench_pgbench"], check=True,
                           capture_output=True, text=True, timeout=120)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        with _admin(self._world) as conn:
            conn.execute("drop database if exists bench_pgbench with (force)")

    def run(self) -> tuple[float, float]:
        busy_before, total_before = _cpu_jiffies()
        run = subprocess.run([self._pgbench, "-N", "-c", "2", "-j", "2", "-T", str(PGBENCH_SECONDS),
                              *self._connect, "bench_pgbench"], check=True, capture_output=True, text=True,
                             timeout=PGBENCH_SECONDS + 60)
        busy_after, total_after = _cpu_jiffies()
        match = re.search(r"tps = ([0-9.]+)", run.stdout)
        if match is None:
            raise RuntimeError(f"no 'tps = ' in pgbench output:\n{run.stdout}\n{run.stderr}")
        return float(match.group(1)), (busy_after - busy_before) / max(1, total_after - total_before)


# -- (a) throughput ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Timed:
    """One timed run of worker processes over one store: its rate and what each occurrence cost."""

    rate: float
    commits_per: float
    writes_per: float
    cpu_per: float
    server_cpu_per: float
    busy: float


@dataclass(frozen=True)
class _Run:
    """One throughput run, optionally the same round trips replayed without logic right after it, between two
    pgbench runs on the same server: the ceiling takes their mean, so a machine whose speed drifts during the
    run moves both sides (the two TPS figures are printed, and show the drift)."""

    processors: _Timed
    replayed: _Timed | None
    tps_before: float
    tps_after: float
    pgbench_busy: float

    @property
    def tps(self) -> float:
        return (self.tps_before + self.tps_after) / 2

    @property
    def ceiling(self) -> float:
        return self.tps / self.processors.commits_per


def _collect(queue, workers: list, timeout: float) -> list:
    """One message from each worker; fails as soon as a worker has died without sending its own."""
    deadline, messages = time.monotonic() + timeout, []
    while len(messages) < len(workers):
        try:
            messages.append(queue.get(timeout=0.5))
        except queue_module.Empty:
            dead = [w.exitcode for w in workers if w.exitcode not in (None, 0)]
            if dead or time.monotonic() > deadline:
                for worker in workers:
                    worker.kill()
                raise RuntimeError(f"workers exited with {dead}" if dead else f"workers silent for {timeout} s")
    return messages


def _time_workers(world: World, store: Store, target, args: tuple, done_key: str) -> _Timed:
    """PROCESSORS worker processes over `store`, started together once all are ready; each reports how many
    occurrences it handled under `done_key`, its span and CPU. Checks that all SCHEDULES were handled."""
    context = multiprocessing.get_context("spawn")
    # Read before the workers connect (their few set-up reads land in the count: ~0.003 per occurrence).
    commits_before, xid_before = _counters(world, store.dbname)
    ready, start, results = context.Queue(), context.Event(), context.Queue()
    workers = [context.Process(target=target, args=(*args, ready, start, results)) for _ in range(PROCESSORS)]
    for worker in workers:
        worker.start()
    _collect(ready, workers, 60)
    busy_before, total_before = _cpu_jiffies()
    start.set()
    reports = _collect(results, workers, 600)
    busy_after, total_after = _cpu_jiffies()
    for worker in workers:
        worker.join(60)
    commits_after, xid_after = _counters(world, store.dbname)
    elapsed = max(r["ended"] for r in reports) - min(r["began"] for r in reports)
    done = sum(r[done_key] for r in reports)
    if done != SCHEDULES or any(r.get("aborted") or r.get("errors") for r in reports):
        raise RuntimeError(f"expected {SCHEDULES} materialized occurrences, got {reports}")
    with store.owner() as conn:
        due_left = conn.execute("select count(*) as n from appsurface_durable.schedule_dispatch_timing "
                                "where claimable_at_utc <= transaction_timestamp()").fetchone()["n"]
        materialized = conn.execute("select count(*) as n from appsurface_durable.schedule_occurrences "
                                    "where state = 'materialized'").fetchone()["n"]
    if due_left or materialized != SCHEDULES:
        raise RuntimeError(f"{counted(due_left, 'schedule')} still due and {counted(materialized, 'occurrence')} materialized "
                           f"after the workers finished (expected 0 and {SCHEDULES})")
    return _Timed(
        rate=done / elapsed,
        # The _counters reading before the run is one read-only commit of its own; do not charge it.
        commits_per=(commits_after - commits_before - 1) / done,
        writes_per=(xid_after - xid_before) / done,
        cpu_per=sum(r["cpu"] for r in reports) / done * 1000,
        server_cpu_per=sum(r["server_cpu"] for r in reports) / done * 1000,
        busy=(busy_after - busy_before) / max(1, total_after - total_before))


def _materialize_all(world: World, *, replay: bool = False) -> _Run:
    """SCHEDULES due schedules materialized by the processors; with `replay`, their round trips recorded on one
    copy of the store (untimed, before anything is timed) and replayed on another right after the processors.
    pgbench runs right before and right after the timed runs."""
    store = new_store(world)
    copies: list[Store] = []
    try:
        store.create_scope(SCOPE)
        context = multiprocessing.get_context("spawn")
        creators = [context.Process(target=_create_schedules, args=(store.runtime_dsn, SCHEDULES // CREATORS))
                    for _ in range(CREATORS)]
        for creator in creators:
            creator.start()
        for creator in creators:
            creator.join()
            if creator.exitcode != 0:
                raise RuntimeError(f"a schedule creator exited with {creator.exitcode}")
        with store.owner() as conn:
            span = conn.execute("select max(accepted_at_utc) - min(accepted_at_utc) as span "
                                "from appsurface_durable.schedule_generations").fetchone()["span"]
        # Every schedule is due once an hour from its acceptance: past the first instant, before the second.
        if span >= timedelta(minutes=30):
            raise RuntimeError(f"creating the schedules took {span}: they would not have exactly one due instant")
        world.clock.shift(timedelta(hours=1) + span + timedelta(seconds=5))
        recording = None
        if replay:
            copies = [copy_store(store, f"{store.dbname}_{use}") for use in ("recorded", "replayed")]
            recording = record(copies[0].runtime_dsn, copies[0].dispatcher_dsn, BATCH)
        with _PgBench(world) as pgbench:
            tps_before, pgbench_busy = pgbench.run()
            processors = _time_workers(world, store, _processor_worker, (store.runtime_dsn, store.dispatcher_dsn),
                                       "materialized")
            replayed = None
            if recording is not None:
                target = copies[1]
                replayed = _time_workers(world, target, replay_worker,
                                         (target.runtime_dsn, target.dispatcher_dsn, recording), "replayed")
            tps_after, _ = pgbench.run()
        world.clock.reset()
    finally:
        for each in (*copies, store):
            each.drop()
    return _Run(processors, replayed, tps_before, tps_after, pgbench_busy)


def _with_slow_commits(world: World, delay_us: int) -> _Run:
    """Every WAL flush first waits `delay_us` (commit_delay, with commit_siblings 0 so that it always does):
    the server behaves as on a disk whose flush takes that much longer, as many network volumes do."""
    with _admin(world) as conn:
        conn.execute(f"alter system set commit_delay = {int(delay_us)}")
        conn.execute("alter system set commit_siblings = 0")
        conn.execute("select pg_reload_conf()")
    try:
        return _materialize_all(world)
    finally:
        with _admin(world) as conn:
            conn.execute("alter system reset commit_delay")
            conn.execute("alter system reset commit_siblings")
            conn.execute("select pg_reload_conf()")


def throughput(world: World | None = None) -> list[Figure]:
    if world is None:
        with World("bench", clock_cache_seconds=BENCH_CLOCK_CACHE_S) as own:
            return throughput(own)
    run = _materialize_all(world, replay=True)
    slow = _with_slow_commits(world, SLOW_COMMIT_US)
    cores = os.cpu_count() or 1
    mine, bare = run.processors, run.replayed
    return [
        Info("pgbench -N TPS, 2 clients, 2 threads (mean)", run.tps, "tps"),
        Info("  right before the processors", run.tps_before, "tps"),
        Info("  right after them (and the replay)", run.tps_after, "tps"),
        Info(f"machine CPU busy during pgbench ({counted(cores, 'core')})", run.pgbench_busy * 100, "%"),
        Info("commits per occurrence (xact_commit)", mine.commits_per, "commit"),
        Info("  of which write (xids assigned)", mine.writes_per, "commit"),
        Info("processor CPU per occurrence (Python)", mine.cpu_per, "ms"),
        Info("server CPU per occurrence (its backends)", mine.server_cpu_per, "ms"),
        Info(f"CPU-bound limit on {counted(cores, 'core')}", cores * 1000 / (mine.cpu_per + mine.server_cpu_per), "occ/s"),
        Info(f"machine CPU busy while processing ({counted(cores, 'core')})", mine.busy * 100, "%"),
        Figure(f"occurrences/s, {PROCESSORS} processors, {SCHEDULES:,} due", mine.rate, "occ/s", ">= 0.75 ceil",
               mine.rate >= 0.75 * run.ceiling, run.ceiling, "ceiling = pgbench TPS / commits per occ"),
        Info("  the same against the write-commit ceiling", mine.rate, "occ/s", run.tps / mine.writes_per,
             "pgbench TPS / writing commits per occ"),
        # What the protocol's SQL costs without the processor's client side (bench/sql_replay.py): the same round
        # trips, replayed on a copy of the same store by two clients that decode nothing and decide nothing.
        Info("  its round trips replayed without logic", bare.rate, "occ/s", run.ceiling, "the same ceiling"),
        Info("  replay: client CPU per occurrence", bare.cpu_per, "ms"),
        Info("  replay: server CPU per occurrence", bare.server_cpu_per, "ms"),
        Info("  replay: commits per occurrence", bare.commits_per, "commit"),
        Info(f"  replay: machine CPU busy ({counted(cores, 'core')})", bare.busy * 100, "%"),
        # The target assumes durable commits bound both runs. Where a flush is fast the processors are bound by
        # CPU instead (pgbench, waiting on its round trips, leaves cores idle), so the same runs follow on a
        # server whose every flush is slower, as on many network volumes: figures with no target of their own.
        Info(f"  flush +{SLOW_COMMIT_US / 1000:g} ms: pgbench -N TPS", slow.tps, "tps"),
        Info(f"  flush +{SLOW_COMMIT_US / 1000:g} ms: busy during pgbench", slow.pgbench_busy * 100, "%"),
        Info(f"  flush +{SLOW_COMMIT_US / 1000:g} ms: busy while processing", slow.processors.busy * 100, "%"),
        Info(f"  flush +{SLOW_COMMIT_US / 1000:g} ms: occurrences/s", slow.processors.rate, "occ/s", slow.ceiling,
             "its own ceiling"),
    ]


# -- (b) claim cost flat in the number of schedules ---------------------------------------------------

POPULATE = """
insert into appsurface_durable.schedule_definitions
    (scope_id, schedule_id, lifecycle_state, revision, active_generation, runtime_epoch, scope_generation,
     cursor_utc, created_at_utc, updated_at_utc)
select %(scope)s, md5('bench-schedule-' || i)::uuid, 'active', 1, 1, r.runtime_epoch, s.generation,
       %(now)s::timestamptz - interval '61 seconds', %(now)s::timestamptz - interval '61 seconds',
       %(now)s::timestamptz - interval '61 seconds'
from generate_series(%(lo)s::bigint, %(hi)s::bigint) i,
     appsurface_durable.store_runtime r, appsurface_durable.scopes s
where s.scope_id = %(scope)s;

-- Due ones: anchored a minute ago. The others: anchored 1-59 minutes ahead, the cursor at acceptance.
insert into appsurface_durable.schedule_generations
    (scope_id, schedule_id, generation, schedule_kind, every_us, anchor_utc, anchor_explicit, misfire_policy,
     overlap_policy, run_policy, safety_window_us, target_kind, target_command, target_payload, accepted_at_utc,
     command_id)
select %(scope)s, md5('bench-schedule-' || i)::uuid, 1, 'every', 3600000000,
       case when i <= %(due)s then %(now)s::timestamptz - interval '60 seconds'
            else %(now)s::timestamptz + (60 + i %% 3480) * interval '1 second' end,
       true, 'run-once', 'queue-one', 'run-once', 3600000000, 'work', 'bench-report', '{"n": 1}',
       %(now)s::timestamptz - interval '61 seconds', md5('bench-command-' || i)::uuid
from generate_series(%(lo)s::bigint, %(hi)s::bigint) i;

insert into appsurface_durable.schedule_dispatch (schedule_id, scope_routing_id)
select md5('bench-schedule-' || i)::uuid, s.routing_id
from generate_series(%(lo)s::bigint, %(hi)s::bigint) i, appsurface_durable.scopes s
where s.scope_id = %(scope)s;

-- The due time is the first grid instant after the cursor: the anchor itself (every anchor lies within
-- the hour after the cursor).
insert into appsurface_durable.schedule_dispatch_timing (dispatch_id, scope_id, due_at_utc, claimable_at_utc)
select d.dispatch_id, %(scope)s, g.anchor_utc, g.anchor_utc
from generate_series(%(lo)s::bigint, %(hi)s::bigint) i
join appsurface_durable.schedule_dispatch d on d.schedule_id = md5('bench-schedule-' || i)::uuid
join appsurface_durable.schedule_generations g on g.scope_id = %(scope)s and g.schedule_id = d.schedule_id
                                              and g.generation = 1;
"""

CLAIM = "select * from appsurface_durable.claim_schedule_dispatch('bench', '30 seconds')"


def _populate(store: Store, lo: int, hi: int, now) -> None:
    with psycopg.connect(store.owner_dsn, autocommit=True) as conn:
        for chunk_lo in range(lo, hi + 1, INSERT_CHUNK):
            chunk_hi = min(chunk_lo + INSERT_CHUNK - 1, hi)
            with conn.transaction():
                for statement in POPULATE.split(";\n"):
                    if statement.strip():
                        conn.execute(statement, {"scope": SCOPE, "lo": chunk_lo, "hi": chunk_hi,
                                                 "due": CLAIM_DUE, "now": now})
        for table in ("schedule_definitions", "schedule_generations", "schedule_dispatch", "schedule_dispatch_timing"):
            conn.execute(sql.SQL("vacuum analyze appsurface_durable.{}").format(sql.Identifier(table)))


def _claim_latency(store: Store) -> tuple[float, str]:
    """Median seconds of one claim statement (in its own transaction, rolled back untimed), and its plan."""
    with psycopg.connect(store.dispatcher_dsn, autocommit=True) as conn:
        def begin() -> None:
            conn.execute("rollback")
            conn.execute("begin")

        def claim() -> None:
            if conn.execute(CLAIM).fetchone() is None:
                raise RuntimeError("the claim found nothing due")

        median_of(CLAIM_WARMUP, claim, setup=begin)
        latency = median_of(CLAIM_SAMPLES, claim, setup=begin)
        conn.execute("rollback")
    # The function's select as PL/pgSQL runs it: a cached generic plan with the timestamp as a parameter.
    with psycopg.connect(store.owner_dsn, autocommit=True) as conn:
        conn.execute("set plan_cache_mode = force_generic_plan")
        conn.execute(
            "prepare claim_select(timestamptz) as "
            "select t.dispatch_id from appsurface_durable.schedule_dispatch_timing t "
            "join appsurface_durable.schedule_dispatch d on d.dispatch_id = t.dispatch_id "
            "where t.claimable_at_utc <= $1 order by t.claimable_at_utc limit 1 for update of t, d skip locked")
        conn.execute("begin")
        plan = conn.execute("explain (analyze, buffers, costs off, timing off, summary off) "
                            "execute claim_select(transaction_timestamp())").fetchall()
        conn.execute("rollback")
    return latency, "\n".join(row[0] for row in plan)


def claim_flat(world: World | None = None) -> list[Figure]:
    if world is None:
        with World("bench", clock_cache_seconds=BENCH_CLOCK_CACHE_S) as own:
            return claim_flat(own)
    store = new_store(world)
    try:
        store.create_scope(SCOPE)
        with store.owner() as conn:
            now = conn.execute("select transaction_timestamp() as now").fetchone()["now"]
        latencies, plans, done = {}, {}, 0
        for size in CLAIM_SIZES:
            _populate(store, done + 1, size, now)
            done = size
            latencies[size], plans[size] = _claim_latency(store)
    finally:
        store.drop()
    small, large = CLAIM_SIZES
    ratio = latencies[large] / latencies[small]
    figures = [Figure(f"claim at {large:,} schedule{'s' * (large != 1)} (median)", latencies[large] * 1000, "ms", "<= 1.5x",
                      ratio <= 1.5, latencies[small] * 1000, f"the same claim at {small:,} schedule{'s' * (small != 1)}")]
    if ratio > 1.5:
        for size in CLAIM_SIZES:
            print(f"plan of the claim's select at {size:,} schedule{'s' * (size != 1)}:\n{plans[size]}", flush=True)
    return figures


def reference_suite() -> list[Figure]:
    """Both targets in one world (the cluster start is paid once)."""
    with World("bench", clock_cache_seconds=BENCH_CLOCK_CACHE_S) as world:
        return throughput(world) + claim_flat(world)


BENCHMARKS = [reference_suite]
