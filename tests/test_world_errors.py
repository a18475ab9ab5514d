"""Bad set-ups: each gives a one-line error naming what to install or fix, and leaves no process behind."""

import os
import shutil
import socket
import stat
import sys
import tempfile
from pathlib import Path

import pytest

from testhost.world.cluster import Cluster, shared_memory_id
from testhost.world.components import find_postgres
from testhost.errors import (ClusterStartFailed, ComponentMissing, DockerUnavailable, PortInUse, TestHostError,
                             ToxiproxyFailed, WorkspaceUnusable)
from testhost.world.processes import pids_with_cwd_or_arg
from testhost.world.workspace import Workspace
from testhost.world.docker_world import docker_world
from testhost.world.worlds import World


@pytest.fixture
def home(monkeypatch):
    """A workspace root of its own under /tmp, reachable by the server user."""
    root = Path(tempfile.mkdtemp(prefix="crashproof-errors-", dir="/tmp"))
    os.chmod(root, 0o755)
    monkeypatch.setenv("CRASHPROOF_HOME", str(root))
    yield root
    assert pids_with_cwd_or_arg(str(root)) == [], "a process outlived the failed world"
    shutil.rmtree(root, ignore_errors=True)


def _assert_one_line(error: TestHostError, *needles: str) -> None:
    text = str(error)
    assert "\n" not in text, text
    for needle in needles:
        assert needle in text, text


def _assert_nothing_left(root: Path) -> None:
    assert pids_with_cwd_or_arg(str(root)) == []
    assert [p for p in (root / "worlds").glob("*") if p.is_dir()] == []


def _script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return path


def test_no_server_binaries_anywhere_names_what_to_install(monkeypatch):
    monkeypatch.delenv("CRASHPROOF_PG_BINDIR", raising=False)
    with pytest.raises(ComponentMissing) as caught:
        find_postgres(candidates=[])
    _assert_one_line(caught.value, "apt-get install postgresql", "crashproof[embedded]")


def test_bad_bindir_override_fails_the_world_cleanly(home, monkeypatch):
    monkeypatch.setenv("CRASHPROOF_PG_BINDIR", str(home / "nowhere"))
    with pytest.raises(ComponentMissing) as caught:
        World("errors").up()
    _assert_one_line(caught.value, "CRASHPROOF_PG_BINDIR", "postgres and initdb")
    _assert_nothing_left(home)


def test_missing_libfaketime_names_the_package(home, monkeypatch):
    monkeypatch.setenv("CRASHPROOF_LIBFAKETIME", str(home / "libfaketime.so.1"))
    with pytest.raises(ComponentMissing) as caught:
        World("errors").up()
    _assert_one_line(caught.value, "apt-get install libfaketime")
    _assert_nothing_left(home)


def test_missing_toxiproxy_names_the_install_and_stops_the_started_cluster(home, monkeypatch):
    monkeypatch.setenv("CRASHPROOF_TOXIPROXY", str(home / "toxiproxy-server"))
    with pytest.raises(ComponentMissing) as caught:
        World("errors").up()
    _assert_one_line(caught.value, "go install github.com/Shopify/toxiproxy/v2/cmd/server@v2.12.0")
    _assert_nothing_left(home)


def test_missing_toxiproxy_is_a_reported_capability_when_network_is_optional(home, monkeypatch):
    monkeypatch.setenv("CRASHPROOF_TOXIPROXY", str(home / "toxiproxy-server"))
    with World("errors", network_optional=True) as world:
        assert not world.capabilities.has("network")
        assert "toxiproxy-server" in world.capabilities.reason("network")
        assert world.proxied_dsn() == world.admin_dsn()
    _assert_nothing_left(home)


def test_toxiproxy_dying_at_start_is_reported_with_its_output(home, monkeypatch):
    fake = _script(home / "toxiproxy-server", 'echo "listen tcp: permission denied" >&2; exit 1')
    monkeypatch.setenv("CRASHPROOF_TOXIPROXY", str(fake))
    with pytest.raises(ToxiproxyFailed) as caught:
        World("errors").up()
    _assert_one_line(caught.value, "permission denied")
    _assert_nothing_left(home)


def test_busy_postgres_port_is_named(home):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy = holder.getsockname()[1]
        with pytest.raises(PortInUse) as caught:
            World("errors", pg_port=busy).up()
    _assert_one_line(caught.value, f"port {busy}", "PostgreSQL")
    _assert_nothing_left(home)


def test_busy_toxiproxy_port_is_named_and_the_cluster_is_stopped(home):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy = holder.getsockname()[1]
        with pytest.raises(PortInUse) as caught:
            World("errors", toxiproxy_port=busy).up()
    _assert_one_line(caught.value, f"port {busy}", "Toxiproxy")
    _assert_nothing_left(home)


def test_port_taken_between_choice_and_bind_is_reported_by_the_server(home):
    workspace = Workspace()
    cluster = Cluster(workspace, find_postgres(), workspace.new_world_dir("race")).create()
    with socket.socket() as thief:  # someone takes the port after we chose it
        thief.bind(("127.0.0.1", cluster.port))
        thief.listen()
        with pytest.raises(PortInUse) as caught:
            cluster.start()
    _assert_one_line(caught.value, f"port {cluster.port}")
    assert not cluster.running
    cluster.destroy()


def test_server_refusing_its_configuration_gives_the_fatal_line(home):
    workspace = Workspace()
    cluster = Cluster(workspace, find_postgres(), workspace.new_world_dir("badconf")).create()
    with open(cluster.datadir / "postgresql.conf", "a") as conf:
        conf.write("shared_buffers = 'lots'\n")
    with pytest.raises(ClusterStartFailed) as caught:
        cluster.start()
    _assert_one_line(caught.value, "shared_buffers")
    cluster.destroy()


def test_server_not_ready_in_time_is_killed(home):
    workspace = Workspace()
    cluster = Cluster(workspace, find_postgres(), workspace.new_world_dir("slow")).create()
    with pytest.raises(ClusterStartFailed) as caught:
        cluster.start(timeout=0.0)
    _assert_one_line(caught.value, "not ready after")
    assert not cluster.running
    cluster.destroy()


def test_a_destroyed_cluster_leaves_no_shared_memory_segment(home):
    """A killed postmaster's System V segment outlives it; destroy removes it (4096 leaked ones fail every start)."""
    workspace = Workspace()
    cluster = Cluster(workspace, find_postgres(), workspace.new_world_dir("leak")).create().start()
    shmid = shared_memory_id(cluster.datadir)
    assert shmid is not None and _segment_exists(shmid)
    cluster.crash()  # SIGKILL, as db-crash and a timed-out start do: the segment stays
    assert _segment_exists(shmid)
    cluster.destroy()
    assert not _segment_exists(shmid)


def _segment_exists(shmid: int) -> bool:
    return any(line.split()[1:2] == [str(shmid)] for line in Path("/proc/sysvipc/shm").read_text().splitlines()[1:])


def test_initdb_failure_is_reported(home, monkeypatch):
    bindir = home / "fakebin"
    bindir.mkdir()
    _script(bindir / "postgres", 'echo "postgres (PostgreSQL) 99.1"')
    _script(bindir / "initdb", 'echo "initdb: error: could not create directory: No space left on device" >&2; exit 1')
    monkeypatch.setenv("CRASHPROOF_PG_BINDIR", str(bindir))
    with pytest.raises(ClusterStartFailed) as caught:
        World("errors").up()
    _assert_one_line(caught.value, "initdb failed", "No space left on device")
    _assert_nothing_left(home)


def test_workspace_that_is_not_writable(home, monkeypatch):
    blocker = home / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("CRASHPROOF_HOME", str(blocker / "workspace"))
    with pytest.raises(WorkspaceUnusable) as caught:
        World("errors").up()
    _assert_one_line(caught.value, "not writable", "CRASHPROOF_HOME")


@pytest.mark.skipif(os.geteuid() != 0, reason="only root switches to a server user")
def test_workspace_inside_a_private_root_dir_is_refused(home, monkeypatch):
    private = home / "private"
    private.mkdir(mode=0o700)
    os.chmod(private, 0o700)
    monkeypatch.setenv("CRASHPROOF_HOME", str(private / "workspace"))
    with pytest.raises(WorkspaceUnusable) as caught:
        World("errors").up()
    _assert_one_line(caught.value, "unreachable by OS user", str(private), "0o700")
    assert stat.S_IMODE(private.stat().st_mode) == 0o700


def test_docker_without_an_engine_is_a_clear_error(home, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{home}/no-docker.sock")
    with pytest.raises(DockerUnavailable) as caught:
        docker_world().up()
    _assert_one_line(caught.value, "no Docker engine", "drop --docker")
    _assert_nothing_left(home)


def test_docker_without_the_extra_names_it(home, monkeypatch):
    monkeypatch.setitem(sys.modules, "docker", None)  # what an environment without the extra looks like
    with pytest.raises(DockerUnavailable) as caught:
        docker_world().up()
    _assert_one_line(caught.value, "crashproof[docker]")
    _assert_nothing_left(home)
