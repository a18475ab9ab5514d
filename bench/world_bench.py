"""World targets: world up, crash + restart, clock move visibility; each beside the plain way."""

from __future__ import annotations

import shutil
import subprocess
import time
from datetime import timedelta

import psycopg

from testhost.world.components import find_postgres
from testhost.world.ports import free_port
from testhost.world.workspace import Workspace
from testhost.world.worlds import World

from .figures import Figure, median_of

SAMPLES = 7


def _pg_ctl(install, workspace: Workspace, *args: str) -> None:
    user = workspace.user
    subprocess.run([str(install.tool("pg_ctl")), *args], check=True, capture_output=True,
                   user=user.uid if user.is_switch else None, group=user.gid if user.is_switch else None)


class PlainCluster:
    """The reference: the same template copy driven by pg_ctl, with no clock and no proxy."""

    def __init__(self, workspace: Workspace):
        self.workspace = workspace
        self.install = workspace.usable_install(find_postgres())
        self.directory = workspace.new_world_dir("bench-plain")
        self.datadir = self.directory / "data"
        self.port = free_port()
        subprocess.run(["cp", "-a", str(workspace.template(self.install)), str(self.datadir)], check=True)

    def pg_ctl(self, *args: str) -> None:
        user = self.workspace.user
        subprocess.run([str(self.install.tool("pg_ctl")), "-D", str(self.datadir), *args], check=True,
                       capture_output=True, user=user.uid if user.is_switch else None,
                       group=user.gid if user.is_switch else None)

    def start(self) -> None:
        self.pg_ctl("-o", f"-p {self.port}", "-l", str(self.directory / "log"), "-w", "start")

    def immediate_stop(self) -> None:
        self.pg_ctl("-m", "immediate", "stop")

    def remove(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


def world_up() -> list[Figure]:
    workspace = Workspace()
    World("bench", workspace=workspace).up().down()  # build the cached template outside the timing
    measured = median_of(SAMPLES, lambda: World("bench", workspace=workspace).up().down())

    def plain_up_down() -> None:
        plain = PlainCluster(workspace)
        plain.start()
        plain.immediate_stop()
        plain.remove()

    reference = median_of(SAMPLES, plain_up_down)
    return [Figure("world up+down from cached template (median)", measured, "s", "<= 2.0 s",
                   measured <= 2.0, reference, "template copy + pg_ctl start -w + stop")]


def crash_restart() -> list[Figure]:
    with World("bench") as world:
        def crash_and_restart() -> None:
            world.cluster.crash()
            world.cluster.restart()
        measured = median_of(SAMPLES, crash_and_restart)
    plain = PlainCluster(Workspace())
    plain.start()
    try:
        def immediate_restart() -> None:
            plain.immediate_stop()
            plain.start()
        reference = median_of(SAMPLES, immediate_restart)
    finally:
        plain.immediate_stop()
        plain.remove()
    return [Figure("crash + restart (median)", measured, "s", "<= 1.0 s", measured <= 1.0, reference,
                   "pg_ctl stop -m immediate + start -w")]


def clock_visibility() -> list[Figure]:
    with World("bench") as world, psycopg.connect(world.admin_dsn(), autocommit=True) as conn:
        samples = []
        for step in range(20):
            before = conn.execute("select clock_timestamp()").fetchone()[0]
            start = time.perf_counter()
            world.clock.shift(timedelta(days=1))
            seen = conn.execute("select clock_timestamp()").fetchone()[0]
            samples.append(time.perf_counter() - start)
            assert seen - before > timedelta(hours=23), f"move {step} not visible to the next statement"
        samples.sort()
        measured = samples[len(samples) // 2] * 1000
        plain = sorted(median_of(1, lambda: conn.execute("select clock_timestamp()")) for _ in range(20))
        reference = plain[len(plain) // 2] * 1000
    return [Figure("clock move visible to next statement (median)", measured, "ms", "<= 10 ms",
                   measured <= 10.0, reference, "one statement round trip")]


BENCHMARKS = [world_up, crash_restart, clock_visibility]
