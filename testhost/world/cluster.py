"""A throwaway PostgreSQL cluster: copied from a cached template, run as the server user, crashable."""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import psycopg

from testhost.errors import ClusterStartFailed, PortInUse

from . import spares
from .components import PostgresInstall
from .orphans import RUN_VARIABLE, remove_tree
from .ports import LOOPBACK, choose
from .processes import die_with_parent, is_alive, kill_tree, popen
from .workspace import SEED_MANIFEST, Workspace

READY_TIMEOUT = 60.0


def _start_failure(log: str) -> str:
    """The server's own words: the first complaint, and the FATAL line that ended start-up."""
    messages = [re.sub(r"^\S+ \S+ \S+ \[\d+\] ", "", line).strip() for line in log.splitlines() if line.strip()]
    complaints = [m for m in messages if m.startswith(("FATAL", "PANIC", "ERROR")) or "invalid" in m
                  or "could not" in m]
    if not complaints:
        return messages[-1] if messages else "no output"
    first, last = complaints[0], complaints[-1]
    return first if first == last else f"{first}; {last}"


class Cluster:
    """One data directory and the postmaster serving it on a loopback port."""

    def __init__(self, workspace: Workspace, install: PostgresInstall, directory: Path, *,
                 port: int | None = None, environment: dict[str, str] | None = None,
                 tie_to_parent: bool = True):
        self.workspace = workspace
        self.install = workspace.usable_install(install)
        self.directory = directory
        self.datadir = directory / "data"
        self.log_path = directory / "postgres.log"
        self.port = choose(port, "PostgreSQL")
        self.environment = dict(environment or {})
        self.tie_to_parent = tie_to_parent
        self._process: subprocess.Popen | None = None
        self.pid: int | None = None

    # -- life cycle -------------------------------------------------------------------------------

    def create(self, source: Path | None = None) -> "Cluster":
        """The data directory, copied from `source` (a kept seed) or else from the cached initdb template."""
        template = source or self.workspace.template(self.install)
        if not self._copy_over_spare(template):
            # cp -a keeps ownership and modes; the data directory must be 0700 and owned by the server user.
            subprocess.run(["cp", "-a", str(template), str(self.datadir)], check=True)
        for marker in (".crashproof-ready", SEED_MANIFEST):
            (self.datadir / marker).unlink(missing_ok=True)
        return self

    def _copy_over_spare(self, template: Path) -> bool:
        """The data directory made by writing `template` over a spare's files, if a spare is there; one that cannot
        be written over is removed, and the copy is made afresh."""
        if not spares.take(self.workspace.spares, self.datadir):
            return False
        try:
            spares.copy_over(template, self.datadir, self.workspace.owner)
        except OSError:
            shutil.rmtree(self.datadir, ignore_errors=True)
            return False
        return True

    def keep_as_spare(self) -> bool:
        """After discard(): leave the data directory to the workspace's spares instead of removing it."""
        return spares.keep(self.workspace.spares, self.datadir)

    def start(self, timeout: float = READY_TIMEOUT) -> "Cluster":
        if self.running:
            return self
        user = self.workspace.user
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C", "LC_ALL": "C", **self.environment}
        if RUN_VARIABLE in os.environ:  # the server and its backends are the run's, for its watcher
            env[RUN_VARIABLE] = os.environ[RUN_VARIABLE]
        log = open(self.log_path, "ab")
        start_offset = log.tell()
        try:
            self._process = popen(
                [str(self.install.tool("postgres")), "-D", str(self.datadir), "-p", str(self.port)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.directory,
                user=user.uid if user.is_switch else None, group=user.gid if user.is_switch else None,
                extra_groups=[] if user.is_switch else None, start_new_session=True,
                preexec_fn=die_with_parent if self.tie_to_parent else None)
        finally:
            log.close()
        self.pid = self._process.pid
        self._wait_ready(timeout, start_offset)
        return self

    def _log_since(self, offset: int) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def _says_ready(self) -> bool:
        """Whether this postmaster's pid file reports it ready for connections (its eighth line).

        Asking the pid file first spares a backend start for each attempt made during crash recovery, and
        it can be asked every few milliseconds. A crashed server's file says ready too; its pid is not ours.
        """
        try:
            lines = (self.datadir / "postmaster.pid").read_text().splitlines()
        except OSError:
            return False
        return len(lines) >= 8 and lines[0].strip() == str(self.pid) and lines[7].strip() == "ready"

    def _wait_ready(self, timeout: float, log_offset: int) -> None:
        """Ready means a real connection succeeds: an open port alone may still be in crash recovery."""
        deadline = time.monotonic() + timeout
        last_error = "no attempt"
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                log = self._log_since(log_offset)
                self._process = self.pid = None
                if "Address already in use" in log:
                    raise PortInUse(f"port {self.port} on {LOOPBACK} is in use; leave the port unset to get a free one")
                raise ClusterStartFailed(f"postgres exited during start-up: {_start_failure(log)} "
                                         f"(log: {self.log_path})")
            if not self._says_ready():
                last_error = "the pid file does not say ready"
                time.sleep(0.002)
                continue
            try:
                with psycopg.connect(self.dsn(), connect_timeout=2):
                    return
            except psycopg.OperationalError as exc:
                last_error = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            time.sleep(0.01)
        self.crash()
        raise ClusterStartFailed(f"postgres not ready after {timeout:.0f}s: {last_error} (log: {self.log_path})")

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def crash(self) -> None:
        """Immediate stop with no checkpoint: SIGKILL the postmaster and every backend, then reap them."""
        if self.pid is None:
            return
        kill_tree(self.pid)
        if self._process is not None:
            self._process.wait()
        self._process = self.pid = None

    def restart(self, timeout: float = READY_TIMEOUT) -> "Cluster":
        """Start again on the same data directory (after crash() this runs crash recovery)."""
        if self.running:
            self.stop()
        return self.start(timeout)

    def stop(self, timeout: float = 30.0) -> None:
        """Fast shutdown (SIGINT); falls back to crash() if the server does not go in time."""
        if not self.running:
            self._process = self.pid = None
            return
        self._process.send_signal(signal.SIGINT)
        try:
            self._process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.crash()
            return
        self._process = self.pid = None

    def discard(self) -> None:
        """Kill the server for good (a throwaway world needs no checkpoint on the way out) and remove the System V
        segment its postmaster made, which a killed postmaster leaves behind: the kernel holds 4096 (`shmmni`), and
        a world per run (three per certify, dozens per test suite) used them up on a machine that ran for a day,
        after which no server could start: "could not create shared memory segment: No space left on device"."""
        segment = self.segment_id()
        self.crash()
        if segment is not None:
            remove_segment(segment)

    def segment_id(self) -> int | None:
        """The System V shared memory id the last postmaster recorded (postmaster.pid, line 7: key and id)."""
        return shared_memory_id(self.datadir)

    def destroy(self) -> None:
        self.discard()  # also after a crash: the pid file still names the segment the killed postmaster left
        remove_tree(self.datadir)

    # -- access ------------------------------------------------------------------------------------

    def dsn(self, user: str = "postgres", dbname: str = "postgres", **extra: str) -> str:
        parts = {"host": LOOPBACK, "port": str(self.port), "user": user, "dbname": dbname, **extra}
        return " ".join(f"{key}={value}" for key, value in parts.items())

    def server_version(self) -> str:
        with psycopg.connect(self.dsn()) as conn:
            return conn.execute("show server_version").fetchone()[0]


_IPC_RMID = 0
_libc = ctypes.CDLL(None, use_errno=True)


def shared_memory_id(datadir: Path) -> int | None:
    """The System V segment a postmaster's lock file names (its seventh line: the key and the id), if any."""
    try:
        lines = (datadir / "postmaster.pid").read_text().splitlines()
    except OSError:
        return None
    fields = lines[6].split() if len(lines) > 6 else []
    return int(fields[1]) if len(fields) == 2 and fields[1].isdigit() else None


def remove_segment(shmid: int) -> bool:
    """shmctl(IPC_RMID) on one segment; False when it is gone already or not ours to remove."""
    return _libc.shmctl(ctypes.c_int(shmid), _IPC_RMID, None) == 0


def sweep_stale_segments(uid: int, table: Path = Path("/proc/sysvipc/shm")) -> int:
    """Remove the server user's segments that no process holds and whose creating postmaster is gone: what a
    postmaster killed outside the harness's teardown (an interrupted run, a killed test) left. A live cluster's
    segment is attached (its postmaster and backends hold it); a crashed world's is recycled or made afresh by
    its restart, so removing an unattached one costs nothing. Returns how many went."""
    try:
        lines = table.read_text().splitlines()[1:]
    except OSError:
        return 0
    removed = 0
    for line in lines:
        fields = line.split()
        try:
            shmid, creator, attached, owner = int(fields[1]), int(fields[4]), int(fields[6]), int(fields[7])
        except (IndexError, ValueError):
            continue
        if owner != uid or attached != 0 or is_alive(creator):
            continue
        removed += remove_segment(shmid)
    return removed
