"""The throwaway cluster: durable settings, unprivileged server user, crash and restart."""

import os

import psycopg
import pytest

from testhost.processes import children_of, is_alive


def _uid_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("Uid:"):
                return int(line.split()[1])
    raise AssertionError("no Uid line")


def test_server_runs_durable_and_unprivileged(world):
    with psycopg.connect(world.admin_dsn()) as conn:
        settings = dict(conn.execute(
            "select name, setting from pg_settings where name in ('fsync', 'synchronous_commit', 'full_page_writes')"
        ).fetchall())
    assert settings == {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}
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
    from testhost.store import StorePool
    pool = StorePool(fresh_world)
    try:
        first = pool.take()
        crasher = threading.Thread(target=lambda: (fresh_world.cluster.crash(), fresh_world.cluster.restart()))
        crasher.start()
        stores = [pool.take() for _ in range(3)]  # made around and after the crash
        crasher.join()
        for store in [first, *stores]:
            with psycopg.connect(store.owner_dsn) as conn:
                assert conn.execute("select count(*) from appsurface_durable.schema_migrations").fetchone() == (4,)
    finally:
        pool.close()
