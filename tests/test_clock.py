"""The server clock moves at run time, for new and existing connections, in both timestamp functions."""

import time
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from testhost.world.clock import NoClock
from testhost.errors import ClockUnavailable

TOLERANCE = timedelta(seconds=5)


def _server_times(conn) -> tuple[datetime, datetime]:
    with conn.transaction():
        return conn.execute("select transaction_timestamp(), clock_timestamp()").fetchone()


def _assert_near(seen: datetime, expected: datetime) -> None:
    assert abs(seen - expected) < TOLERANCE, f"server says {seen}, expected about {expected}"


@pytest.mark.parametrize("move", [timedelta(days=3), timedelta(days=40), timedelta(hours=-1)],
                         ids=["forward-3-days", "forward-40-days", "backward-1-hour"])
def test_clock_move_seen_by_old_and_new_connections(fresh_world, move):
    clock = fresh_world.clock
    opened_before = psycopg.connect(fresh_world.admin_dsn(), autocommit=True)
    try:
        before, _ = _server_times(opened_before)
        _assert_near(before, datetime.now(timezone.utc))
        clock.shift(move)
        expected = datetime.now(timezone.utc) + move
        with psycopg.connect(fresh_world.admin_dsn(), autocommit=True) as opened_after:
            for conn in (opened_before, opened_after):
                tx_time, wall_time = _server_times(conn)
                _assert_near(tx_time, expected)
                _assert_near(wall_time, expected)
    finally:
        opened_before.close()


def test_forward_then_backward_compose(fresh_world):
    clock = fresh_world.clock
    clock.shift(timedelta(days=2))
    clock.shift(timedelta(hours=-1))
    assert clock.offset == timedelta(days=2, hours=-1)
    with psycopg.connect(fresh_world.admin_dsn(), autocommit=True) as conn:
        tx_time, wall_time = _server_times(conn)
    _assert_near(tx_time, datetime.now(timezone.utc) + timedelta(days=2, hours=-1))
    _assert_near(wall_time, datetime.now(timezone.utc) + timedelta(days=2, hours=-1))


def test_set_time_to_an_absolute_utc_instant(fresh_world):
    target = datetime(2031, 3, 30, 0, 59, 58, tzinfo=timezone.utc)
    fresh_world.clock.set_time(target)
    with psycopg.connect(fresh_world.admin_dsn(), autocommit=True) as conn:
        tx_time, wall_time = _server_times(conn)
    _assert_near(tx_time, target)
    assert wall_time >= tx_time
    fresh_world.clock.reset()
    with psycopg.connect(fresh_world.admin_dsn(), autocommit=True) as conn:
        _assert_near(_server_times(conn)[0], datetime.now(timezone.utc))


def test_within_one_transaction_transaction_timestamp_is_fixed_clock_timestamp_moves(fresh_world):
    with psycopg.connect(fresh_world.admin_dsn()) as conn:
        first_tx, first_wall = conn.execute("select transaction_timestamp(), clock_timestamp()").fetchone()
        fresh_world.clock.shift(timedelta(days=1))
        second_tx, second_wall = conn.execute("select transaction_timestamp(), clock_timestamp()").fetchone()
    assert second_tx == first_tx
    assert second_wall - first_wall > timedelta(hours=23)


def test_naive_datetime_is_refused(world):
    with pytest.raises(ValueError, match="no time zone"):
        world.clock.set_time(datetime(2030, 1, 1))


def test_no_clock_refuses_every_move_with_its_reason():
    clock = NoClock("external server (--dsn)")
    for move in (lambda: clock.shift(timedelta(1)), lambda: clock.set_time(datetime.now(timezone.utc)),
                 lambda: clock.set_offset(timedelta(1)), clock.reset):
        with pytest.raises(ClockUnavailable, match="external server"):
            move()


def test_a_cached_clock_still_moves_every_connection_and_the_server_runs_with_the_cache():
    """The benchmarks' clock (libfaketime caching its reading for a second): a move returns only once every
    process has read it, so an existing session and a new one both see it; the server runs with the cache,
    not with a read of the file at every clock call."""
    from testhost.world.worlds import World

    with World("cached-clock", clock_cache_seconds=1) as world:
        with open(f"/proc/{world.cluster.pid}/environ", "rb") as environ:
            settings = dict(item.split(b"=", 1) for item in environ.read().split(b"\0") if b"=" in item)
        assert settings.get(b"FAKETIME_CACHE_DURATION") == b"1" and b"FAKETIME_NO_CACHE" not in settings
        opened_before = psycopg.connect(world.admin_dsn(), autocommit=True)
        try:
            _server_times(opened_before)  # the session's process has read the file now
            world.clock.shift(timedelta(days=2))
            expected = datetime.now(timezone.utc) + timedelta(days=2)
            with psycopg.connect(world.admin_dsn(), autocommit=True) as opened_after:
                for conn in (opened_before, opened_after):
                    _assert_near(_server_times(conn)[0], expected)
        finally:
            opened_before.close()


def test_a_negative_clock_cache_is_refused(tmp_path):
    from testhost.world.clock import ServerClock

    with pytest.raises(ValueError, match="cache_seconds"):
        ServerClock(tmp_path / "clock", cache_seconds=-1)


def test_a_frozen_clock_stands_still_for_every_connection_then_runs_on_from_there(fresh_world):
    clock = fresh_world.clock
    when = datetime(2031, 3, 3, 0, 1, tzinfo=timezone.utc)
    clock.freeze(when)
    assert clock.frozen and clock.now() == when
    with psycopg.connect(fresh_world.admin_dsn(), autocommit=True) as conn:
        first = _server_times(conn)
        time.sleep(0.3)  # not pg_sleep: it waits for the server's wall clock to reach its end, which never comes
        second = _server_times(conn)
    assert first == second == (when, when)
    clock.shift(timedelta(seconds=2))  # a move keeps a frozen clock frozen, at the moved instant
    with psycopg.connect(fresh_world.admin_dsn(), autocommit=True) as conn:
        assert _server_times(conn) == (when + timedelta(seconds=2),) * 2
    clock.unfreeze()
    assert not clock.frozen
    with psycopg.connect(fresh_world.admin_dsn(), autocommit=True) as conn:
        start, _ = _server_times(conn)
        conn.execute("select pg_sleep(0.2)")
        later, _ = _server_times(conn)
    assert when + timedelta(seconds=2) <= start < when + timedelta(seconds=3)
    assert later - start >= timedelta(seconds=0.2)


def test_a_frozen_clock_stands_on_a_whole_second(fresh_world):
    with pytest.raises(ValueError, match="whole second"):
        fresh_world.clock.freeze(datetime(2031, 3, 3, 0, 1, 0, 500, tzinfo=timezone.utc))
    assert not fresh_world.clock.frozen


# A process whose SIGALRM handler reads the clock while its main loop reads it too: PostgreSQL's timeout handler
# does exactly that (GetCurrentTimestamp), and its timers (the idle statistics flush, lock waits) fire while a
# backend runs statements.
ALARM_PROGRAM = r"""
#include <signal.h>
#include <stdio.h>
#include <sys/time.h>
static void on_alarm(int s) { struct timeval tv; (void)s; gettimeofday(&tv, 0); }
int main(void) {
    struct sigaction sa = {0};
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, 0);
    struct itimerval it = {{0, 50}, {0, 50}};
    setitimer(ITIMER_REAL, &it, 0);
    for (long i = 0; i < 100000; i++) { struct timeval tv; gettimeofday(&tv, 0); }
    puts("done");
    return 0;
}
"""


def _alarm_program(tmp_path):
    import shutil
    import subprocess

    compiler = shutil.which("cc") or shutil.which("gcc")
    assert compiler, "this test builds a small C program: install a C compiler (make setup installs gcc)"
    source = tmp_path / "alarm.c"
    source.write_text(ALARM_PROGRAM)
    subprocess.run([compiler, "-O1", "-o", str(tmp_path / "alarm"), str(source)], check=True)
    (tmp_path / "offset").write_text("+0\n")
    return tmp_path / "alarm"


def _run_under(library, program, offset, timeout):
    import subprocess

    env = {"LD_PRELOAD": str(library), "FAKETIME_TIMESTAMP_FILE": str(offset), "FAKETIME_NO_CACHE": "1",
           "PATH": "/usr/bin:/bin"}
    try:
        return subprocess.run([str(program)], env=env, capture_output=True, text=True, timeout=timeout).stdout
    except subprocess.TimeoutExpired:
        return "hung"


def test_the_server_clock_library_survives_a_signal_handler_that_reads_the_clock(tmp_path):
    from testhost.world.components import find_libfaketime

    program = _alarm_program(tmp_path)
    chosen = find_libfaketime()
    assert chosen.name == "libfaketimeMT.so.1"
    assert _run_under(chosen, program, tmp_path / "offset", 60).strip() == "done"
    # the plain build deadlocks there (the handler's fopen waits for the lock the interrupted fopen holds):
    # the hazard the choice exists for
    plain = chosen.with_name("libfaketime.so.1")
    assert plain.is_file() and _run_under(plain, program, tmp_path / "offset", 10) == "hung"


def test_the_worlds_postmaster_preloads_the_thread_safe_build(world):
    maps = open(f"/proc/{world.cluster.pid}/maps").read()
    assert "libfaketimeMT.so.1" in maps and "/libfaketime.so.1" not in maps
