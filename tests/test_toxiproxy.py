"""The proxy in front of the cluster, and its fault primitives: cut, blackhole_replies, heal."""

import os
import socket
import threading
import time

import psycopg
import pytest

from testhost.errors import ToxiproxyFailed


def _wait_backend_gone(admin_dsn: str, pid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            if not conn.execute("select 1 from pg_stat_activity where pid = %s", (pid,)).fetchone():
                return
            time.sleep(0.02)
    raise AssertionError(f"backend {pid} still present after {timeout}s")


class _ClientTimeout:
    """A client-side deadline: shut the socket down so a blocked read returns, as a timeout would."""

    def __init__(self, conn: psycopg.Connection, seconds: float):
        self._fd = os.dup(conn.fileno())
        self._timer = threading.Timer(seconds, self._fire)
        self.fired = False

    def _fire(self) -> None:
        self.fired = True
        with socket.socket(fileno=self._fd) as sock:
            sock.shutdown(socket.SHUT_RDWR)

    def __enter__(self):
        self._timer.start()
        return self

    def __exit__(self, *exc):
        self._timer.cancel()
        if not self.fired:
            os.close(self._fd)


def test_connection_through_the_proxy_reaches_the_cluster(world):
    with psycopg.connect(world.proxied_dsn()) as conn:
        assert conn.execute("select 41 + 1").fetchone() == (42,)
        client_port = conn.execute("select inet_server_port()").fetchone()[0]
    assert client_port == world.cluster.port  # the server side of the proxied connection
    assert world.proxy.port != world.cluster.port


def test_cut_resets_the_client_and_the_server_rolls_back(fresh_world):
    with psycopg.connect(fresh_world.admin_dsn(), autocommit=True) as admin:
        admin.execute("create table cut_probe (id int primary key)")
    conn = psycopg.connect(fresh_world.proxied_dsn())
    conn.execute("insert into cut_probe values (1)")
    backend = conn.execute("select pg_backend_pid()").fetchone()[0]
    fresh_world.proxy.cut()
    with pytest.raises(psycopg.OperationalError):
        conn.execute("select 1")
    conn.close()
    _wait_backend_gone(fresh_world.admin_dsn(), backend)
    with psycopg.connect(fresh_world.admin_dsn(), autocommit=True) as admin:
        assert admin.execute("select count(*) from cut_probe").fetchone() == (0,)
        admin.execute("set lock_timeout = '2s'")
        admin.execute("insert into cut_probe values (1)")  # the key lock was released with the rollback
    with psycopg.connect(fresh_world.proxied_dsn()) as again:  # same port, new connections still pass
        assert again.execute("select count(*) from cut_probe").fetchone() == (1,)


def test_ambiguous_commit_client_errors_server_committed(fresh_world):
    with psycopg.connect(fresh_world.admin_dsn(), autocommit=True) as admin:
        admin.execute("create table commit_probe (id int primary key)")
    conn = psycopg.connect(fresh_world.proxied_dsn())
    conn.execute("insert into commit_probe values (7)")
    fresh_world.proxy.blackhole_replies()
    assert fresh_world.proxy.toxics() == ["crashproof_blackhole_replies"]
    with _ClientTimeout(conn, seconds=1.0) as deadline, pytest.raises(psycopg.OperationalError):
        conn.commit()
    assert deadline.fired
    conn.close()
    with psycopg.connect(fresh_world.admin_dsn()) as verifier:
        assert verifier.execute("select id from commit_probe").fetchall() == [(7,)]
    fresh_world.proxy.heal()
    assert fresh_world.proxy.toxics() == []
    with psycopg.connect(fresh_world.proxied_dsn()) as healed:
        assert healed.execute("select count(*) from commit_probe").fetchone() == (1,)


def test_blackhole_passes_client_bytes_and_drops_replies(fresh_world):
    with psycopg.connect(fresh_world.admin_dsn(), autocommit=True) as admin:
        admin.execute("create table upstream_probe (id int)")
    conn = psycopg.connect(fresh_world.proxied_dsn(), autocommit=True)
    fresh_world.proxy.blackhole_replies()
    with _ClientTimeout(conn, seconds=1.0), pytest.raises(psycopg.OperationalError):
        conn.execute("insert into upstream_probe values (1)")
    conn.close()
    fresh_world.proxy.heal()
    with psycopg.connect(fresh_world.admin_dsn()) as verifier:
        assert verifier.execute("select count(*) from upstream_probe").fetchone() == (1,)


def test_api_refusal_is_a_clear_error(world):
    with pytest.raises(ToxiproxyFailed, match="refused a call"):
        world.toxiproxy.create_proxy("postgres", f"127.0.0.1:{world.cluster.port}")


def test_heal_after_a_cut_that_failed_half_way_enables_the_proxy(fresh_world, monkeypatch):
    proxy = fresh_world.proxy
    proxy.heal()

    def refused():
        raise ToxiproxyFailed("enable refused")
    monkeypatch.setattr(proxy._proxy, "enable", refused)
    with pytest.raises(ToxiproxyFailed):
        proxy.cut()  # disabled, never enabled again
    monkeypatch.undo()
    proxy.heal()
    with psycopg.connect(fresh_world.proxied_dsn(), connect_timeout=3) as conn:
        assert conn.execute("select 1").fetchone() == (1,)


def test_heal_with_nothing_to_undo_makes_no_api_call(fresh_world, monkeypatch):
    proxy = fresh_world.proxy
    proxy.blackhole_replies()
    proxy.heal()
    proxy.cut()  # a cut that succeeded leaves nothing to undo

    def no_call():
        raise AssertionError("heal called the Toxiproxy API with nothing to undo")
    monkeypatch.setattr(proxy._proxy, "toxics", no_call)
    monkeypatch.setattr(proxy._proxy, "enable", no_call)
    proxy.heal()
    monkeypatch.undo()
    assert proxy.toxics() == []


def test_api_calls_share_one_kept_http_session_per_process(world):
    from testhost.world import toxiproxy as tp

    world.proxy.toxics()
    session = tp._http._current()
    world.proxy.toxics()
    assert tp._http._current() is session and session.trust_env is False
    tp._http._pid = -1  # as in a forked child: its own session, never the parent's connections
    world.proxy.toxics()
    assert tp._http._current() is not session
