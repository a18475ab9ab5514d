"""The throwaway cluster: durable settings, unprivileged server user, crash and restart."""

import os

from contextlib import contextmanager
from datetime import timedelta

import psycopg
import pytest
from protocol_helpers import every

from testhost.world.processes import children_of, is_alive


def _uid_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("Uid:"):
                return int(line.split()[1])
    raise AssertionError("no Uid line")


def test_server_runs_durable_and_unprivileged(world):
    with psycopg.connect(world.admin_dsn()) as conn:
        settings = dict(conn.execute(
            "select name, setting from pg_settings where name in ('fsync', 'synchronous_commit', 'full_page_writes', "
            "'recovery_init_sync_method', 'track_activities')").fetchall())
    assert settings == {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on",
                        "recovery_init_sync_method": "syncfs", "track_activities": "off"}
    assert _uid_of(world.cluster.pid) == world.workspace.user.uid
    if os.geteuid() == 0:  # PostgreSQL refuses root, so as root the world must have switched user
        assert world.workspace.user.uid != 0


def test_crash_restart_keeps_committed_and_loses_uncommitted_20_cycles(fresh_world):
    cluster = fresh_world.cluster
    with psycopg.connect(fresh_world.admin_dsn(), autocommit=True) as conn:
        conn.execute("create table facts (cycle int not null, kind text not null)")
    for cycle in range(20):
        committed = psycopg.connect(fresh_world.admin_dsn())
        committed.execute("insert into facts values (%s, 'committed')", (cycle,))
        committed.commit()
        open_tx = psycopg.connect(fresh_world.admin_dsn())
        open_tx.execute("insert into facts values (%s, 'uncommitted')", (cycle,))
        old_pid = cluster.pid
        backends = children_of(old_pid)
        cluster.crash()
        assert not is_alive(old_pid) and not any(is_alive(pid) for pid in backends)
        for conn in (committed, open_tx):
            conn.close()
        cluster.restart()
        with psycopg.connect(fresh_world.admin_dsn()) as check:
            rows = check.execute("select cycle, kind from facts order by cycle").fetchall()
        assert rows == [(n, "committed") for n in range(cycle + 1)], f"cycle {cycle}"


def test_crash_is_immediate_no_checkpoint(fresh_world):
    """The restart after crash() runs crash recovery, which only happens without a shutdown checkpoint."""
    fresh_world.cluster.crash()
    fresh_world.cluster.restart()
    log = fresh_world.cluster.log_path.read_text()
    assert "database system was interrupted" in log or "was not properly shut down" in log


def test_stop_then_restart_keeps_data(fresh_world):
    with psycopg.connect(fresh_world.admin_dsn(), autocommit=True) as conn:
        conn.execute("create table kept (x int)")
        conn.execute("insert into kept values (1)")
    fresh_world.cluster.stop()
    assert not fresh_world.cluster.running
    fresh_world.cluster.start()
    with psycopg.connect(fresh_world.admin_dsn()) as conn:
        assert conn.execute("select x from kept").fetchall() == [(1,)]


def test_connection_fails_while_crashed(fresh_world):
    fresh_world.cluster.crash()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(fresh_world.admin_dsn(), connect_timeout=2)


def test_a_restart_from_a_short_lived_thread_outlives_that_thread(fresh_world):
    """Faults may restart PostgreSQL from a racing processor's thread; the server must not die with it."""
    import threading
    worker = threading.Thread(target=lambda: (fresh_world.cluster.crash(), fresh_world.cluster.restart()))
    worker.start()
    worker.join()
    import time
    time.sleep(0.3)  # PR_SET_PDEATHSIG would have fired by now
    assert fresh_world.cluster.running
    with psycopg.connect(fresh_world.admin_dsn()) as conn:
        assert conn.execute("select 1").fetchone() == (1,)


def test_stores_made_ahead_survive_a_database_crash_in_the_middle(fresh_world):
    """The store pool makes the next case's database while the current case may crash the server."""
    import threading

    from reference.sql import migrations
    from testhost.world.store import StorePool
    pool = StorePool(fresh_world)
    try:
        first = pool.take()
        crasher = threading.Thread(target=lambda: (fresh_world.cluster.crash(), fresh_world.cluster.restart()))
        crasher.start()
        stores = [pool.take() for _ in range(3)]  # made around and after the crash
        crasher.join()
        for store in [first, *stores]:
            with psycopg.connect(store.owner_dsn) as conn:
                assert conn.execute("select count(*) from appsurface_durable.schema_migrations").fetchone() == (
                    len(migrations()),)
    finally:
        pool.close()


def _contents(store):
    """Every user table's rows (sorted), every sequence's position and the schema digest of a store."""
    from testhost.world.store import Snapshot
    snapshot = Snapshot.of(store)
    rows = {name: sorted(data.split(b"\n")) for name, data in snapshot.rows.items()}
    return snapshot.digest, snapshot.tables, snapshot.partitions, rows, snapshot.sequences


@contextmanager
def _pool_beside_a_fresh_clone(world):
    """A store pool, and a store cloned fresh to compare what the pool hands out with."""
    from testhost.world.store import StorePool, new_store

    pool = StorePool(world)
    fresh = new_store(world)
    try:
        yield pool, fresh
    finally:
        pool.close()
        fresh.drop()


def _give_back_and_take_two(pool, used):
    """Hand `used` back; the next two takes are the spare made meanwhile and what became of `used`."""
    pool.give_back(used)
    return [pool.take(), pool.take()]


def test_a_used_store_given_back_is_reset_to_exactly_a_fresh_clone(fresh_world):
    """Rows, sequences, partitions made since and sessions left open (one idle in a transaction holding a
    row lock) are all put back; the pool hands the same database out again."""
    from reference import ScheduleClient

    with _pool_beside_a_fresh_clone(fresh_world) as (pool, fresh):
        used = pool.take()
        with psycopg.connect(used.owner_dsn, autocommit=True) as conn:
            conn.execute("select appsurface_durable.create_scope('tenant-a')")
            conn.execute("select appsurface_durable.ensure_schedule_history_partitions()")
        client = ScheduleClient(used.runtime_dsn, "tenant-a")
        client.create(every(60))
        client.close()
        fresh_world.clock.shift(timedelta(days=120))
        try:
            with psycopg.connect(used.owner_dsn, autocommit=True) as conn:
                conn.execute("select appsurface_durable.ensure_schedule_history_partitions()")
        finally:
            fresh_world.clock.reset()
        holder = psycopg.connect(used.owner_dsn)
        holder.execute("select * from appsurface_durable.schedule_definitions for update").fetchall()
        assert _contents(used) != _contents(fresh)
        handed = _give_back_and_take_two(pool, used)
        reused = [s for s in handed if s.dbname == used.dbname]
        assert reused, "the given-back store was not handed out again"
        assert pool.reused == 1 and pool.replaced == 0
        assert _contents(reused[0]) == _contents(fresh)
        assert holder.broken or holder.closed or _session_ended(holder)


def _session_ended(conn) -> bool:
    try:
        conn.execute("select 1")
    except psycopg.OperationalError:
        return True
    return False


def test_a_store_whose_schema_changed_is_replaced_not_reset(fresh_world):
    with _pool_beside_a_fresh_clone(fresh_world) as (pool, fresh):
        used = pool.take()
        with psycopg.connect(fresh_world.admin_dsn(dbname=used.dbname), autocommit=True) as conn:
            conn.execute("create table appsurface_durable.left_behind (x int)")
        handed = _give_back_and_take_two(pool, used)
        assert used.dbname not in [s.dbname for s in handed]
        assert pool.replaced == 1 and pool.reused == 0
        with psycopg.connect(fresh_world.admin_dsn()) as conn:
            assert conn.execute("select count(*) from pg_database where datname = %s", (used.dbname,)).fetchone() == (0,)
        for store in handed:
            assert _contents(store) == _contents(fresh)


def test_a_store_that_cannot_be_reached_for_reset_is_replaced(fresh_world):
    """A reset that fails (here: its database is gone, as after a crash mid-reset) yields a new clone."""
    from testhost.world.store import Store, StorePool

    pool = StorePool(fresh_world)
    try:
        pool.take()
        handed = _give_back_and_take_two(pool, Store(fresh_world, "store_that_does_not_exist"))
        assert pool.replaced == 1 and all(s.dbname != "store_that_does_not_exist" for s in handed)
    finally:
        pool.close()


def test_a_reset_rolls_back_a_transaction_the_case_left_prepared(fresh_world):
    """An implementation may leave a prepared (two-phase) transaction holding rows and locks."""
    with psycopg.connect(fresh_world.admin_dsn(), autocommit=True) as conn:
        conn.execute("alter system set max_prepared_transactions = 4")
    fresh_world.cluster.restart()
    with _pool_beside_a_fresh_clone(fresh_world) as (pool, fresh):
        used = pool.take()
        with psycopg.connect(used.owner_dsn, autocommit=True) as conn:
            conn.execute("begin")
            conn.execute("select appsurface_durable.create_scope('tenant-left')")
            conn.execute("prepare transaction 'left-by-the-case'")
        handed = _give_back_and_take_two(pool, used)
        assert pool.reused == 1 and used.dbname in [s.dbname for s in handed]
        with psycopg.connect(fresh_world.admin_dsn()) as conn:
            assert conn.execute("select count(*) from pg_prepared_xacts").fetchone() == (0,)
        assert _contents(used) == _contents(fresh)


def test_a_session_that_will_not_end_makes_the_reset_refuse(fresh_world):
    """A backend that ignores termination (here: stopped) leaves the store unsafe to reuse."""
    import signal
    from testhost.world.store import Snapshot, StoreChanged, new_store, reset_store

    store = new_store(fresh_world)
    snapshot = Snapshot.of(store)
    holder = psycopg.connect(store.owner_dsn)
    backend = holder.execute("select pg_backend_pid()").fetchone()[0]
    os.kill(backend, signal.SIGSTOP)
    try:
        with pytest.raises(StoreChanged, match="did not end"):
            reset_store(store, snapshot, settle_s=0.3)
    finally:
        os.kill(backend, signal.SIGCONT)
        holder.close()
        store.drop()


def test_a_reset_spares_the_verifiers_idle_session_and_ends_one_left_in_a_transaction(fresh_world):
    from testhost.world.store import Snapshot, new_store, reset_store

    store = new_store(fresh_world)
    try:
        snapshot = Snapshot.of(store)
        other = psycopg.connect(store.runtime_dsn, autocommit=True)
        with store.verifier() as conn:
            kept = conn.info.backend_pid
        with store.barrier_reader() as conn:
            reader = conn.info.backend_pid
        reset_store(store, snapshot)
        assert _session_ended(other)
        with store.barrier_reader() as conn:  # the barrier reader's idle session is kept too
            assert conn.info.backend_pid == reader and conn.execute("select 1").fetchone()
        with store.verifier() as conn:
            assert conn.info.backend_pid == kept and conn.execute("select 1").fetchone()
            conn.execute("begin")
            conn.execute("select * from appsurface_durable.scopes for update").fetchall()
        reset_store(store, snapshot, settle_s=2)  # its lock would block the reset's delete: it is ended
        with store.verifier() as conn:
            assert conn.info.backend_pid != kept
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    finally:
        store.drop()


def test_a_pool_for_cases_holds_the_history_partitions_of_their_start(fresh_world):
    from datetime import datetime, timezone
    from testhost.world.store import StorePool

    offset = fresh_world.clock.offset
    pool = StorePool(fresh_world, history_at=datetime(2031, 12, 3, tzinfo=timezone.utc))
    try:
        store = pool.take()
        with store.verifier() as conn:
            months = {r["relname"] for r in conn.execute(
                "select c.relname from pg_inherits i join pg_class c on c.oid = i.inhrelid "
                "where i.inhparent = 'appsurface_durable.schedule_history'::regclass").fetchall()}
            forced = conn.execute("select bool_and(relforcerowsecurity) from pg_class "
                                  "where relname in ('schedule_history_203112', 'schedule_history_203201')").fetchone()
        assert {"schedule_history_203112", "schedule_history_203201"} <= months and forced == {"bool_and": True}
        assert fresh_world.clock.offset == offset  # the clock is where it was
        handed = _give_back_and_take_two(pool, store)
        assert store.dbname in [s.dbname for s in handed]  # a reset keeps them: the schema is the clone's
        assert pool.reused == 1 and pool.replaced == 0
    finally:
        pool.close()


def test_a_crashed_servers_pid_file_is_not_taken_for_the_new_servers_readiness(fresh_world):
    cluster = fresh_world.cluster
    old = cluster.pid
    assert cluster._says_ready()
    cluster.crash()
    stale = (cluster.datadir / "postmaster.pid").read_text().splitlines()
    assert stale[0].strip() == str(old) and stale[7].strip() == "ready"  # left behind by the crash
    cluster.pid = old + 1  # a new postmaster that has not written its own file yet
    assert not cluster._says_ready()
    cluster.pid = None
    cluster.start()
    assert cluster.pid != old and cluster._says_ready()


def test_a_copied_store_holds_the_rows_and_grants_of_its_original_and_lives_apart(world):
    """The reference benchmark replays on a copy made while the original's own kept sessions were open."""
    from reference import ScheduleClient
    from testhost.world.store import copy_store, new_store

    original = new_store(world)
    copy = None
    try:
        original.create_scope("tenant-a")
        with ScheduleClient(original.runtime_dsn, "tenant-a") as client:
            created = client.create(every(60))
        with original.verifier() as conn:
            conn.execute("select 1")  # a kept session open on the original: the copy must close it first
        copy = copy_store(original, f"{original.dbname}_copy")
        with ScheduleClient(copy.runtime_dsn, "tenant-a") as client:  # the runtime role's grants came along
            assert client.get(created.schedule_id).schedule_id == created.schedule_id
            client.create(every(60))
        with ScheduleClient(original.runtime_dsn, "tenant-a") as client:
            assert len(client.list()) == 1
        with ScheduleClient(copy.runtime_dsn, "tenant-a") as client:
            assert len(client.list()) == 2
    finally:
        for store in (copy, original):
            if store is not None:
                store.drop()


def _segments() -> dict[int, dict]:
    rows = open("/proc/sysvipc/shm").read().splitlines()[1:]
    return {int(f[1]): {"cpid": int(f[4]), "nattch": int(f[6]), "uid": int(f[7])} for f in (r.split() for r in rows)}


def test_a_world_going_down_takes_its_postmasters_segment_with_it():
    from testhost.world.worlds import World

    world = World("segment").up()
    try:
        segment = world.cluster.segment_id()
        assert segment in _segments() and _segments()[segment]["nattch"] >= 1  # the live server holds it
        world.cluster.crash()  # a crash alone leaves it (a restart recycles it): what the teardown must not do
        assert segment in _segments() and _segments()[segment]["nattch"] == 0
        world.cluster.start()
        restarted = world.cluster.segment_id()
        assert segment not in _segments() or segment == restarted  # the restart recycled the crashed one
    finally:
        world.down()
    assert restarted not in _segments()


def _dynamic_segments(pid: int) -> set[str]:
    """The dynamic shared memory a server process maps: POSIX objects (/dev/shm/PostgreSQL.N) or files of its
    data directory (pg_dynshmem/mmap.N)."""
    with open(f"/proc/{pid}/maps") as maps:
        return {line.split()[-1] for line in maps if "/PostgreSQL." in line or "/pg_dynshmem/" in line}


def test_a_killed_world_leaves_no_dynamic_shared_memory_behind():
    """A server killed outside its own shutdown (a world's teardown, a killed run's watcher) cannot remove its
    dynamic shared memory; held as files in the data directory, it goes with the world folder, where POSIX objects
    stayed in /dev/shm (about 1 MB each, in RAM) until reboot."""
    from testhost.world.worlds import World

    world = World("dynamic-memory").up()
    try:
        datadir, postmaster = world.cluster.datadir, world.cluster.pid
        mapped = _dynamic_segments(postmaster)
        assert mapped, "the postmaster maps no dynamic shared memory: the test would prove nothing"
        assert all(path.startswith(str(datadir / "pg_dynshmem") + "/") for path in mapped), mapped
        world.cluster.crash()  # SIGKILL: nothing of the server's own clean-up runs
        assert all(os.path.exists(path) for path in mapped)  # what a killed server leaves, until its folder goes
    finally:
        world.down()
    assert not any(os.path.exists(path) for path in mapped)


def test_the_sweep_removes_only_unattached_segments_whose_creator_is_gone(tmp_path):
    import ctypes
    import subprocess

    from testhost.world.cluster import sweep_stale_segments

    libc = ctypes.CDLL(None, use_errno=True)
    made = [libc.shmget(0, 56, 0o1000 | 0o600) for _ in range(4)]  # IPC_PRIVATE, IPC_CREAT
    assert all(m >= 0 for m in made), ctypes.get_errno()
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid nobody holds any more
    me = os.geteuid()
    header = "       key      shmid perms size  cpid  lpid nattch   uid   gid  cuid  cgid atime dtime ctime rss swap\n"
    rows = [(made[0], gone.pid, 0, me),       # a killed postmaster's leftover: removed
            (made[1], gone.pid, 1, me),       # still attached: kept
            (made[2], os.getpid(), 0, me),    # its creator lives (a server starting up): kept
            (made[3], gone.pid, 0, me + 1)]   # another account's: kept
    table = tmp_path / "shm"
    table.write_text(header + "".join(f"0 {m} 600 56 {cpid} 0 {n} {uid} 0 {uid} 0 0 0 0 4096 0\n"
                                      for m, cpid, n, uid in rows))
    try:
        assert sweep_stale_segments(me, table) == 1
        assert made[0] not in _segments() and all(m in _segments() for m in made[1:])
        assert sweep_stale_segments(me, tmp_path / "absent") == 0  # no table (another kernel): nothing happens
    finally:
        for m in made[1:]:
            libc.shmctl(m, 0, None)
