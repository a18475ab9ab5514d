"""The workspace: where templates and world directories live, and the OS user that runs the server."""

from __future__ import annotations

import fcntl
import os
import pwd
import shutil
import stat
import subprocess
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from testhost.errors import ClusterStartFailed, ComponentMissing, WorkspaceUnusable

from .components import PostgresInstall
from .orphans import sweep_worlds, write_owner

SERVER_USER = "crashproof"
DEFAULT_ROOT = "/tmp/crashproof"

# Appended to every template's postgresql.conf. Durability is the point of the exercise: fsync and
# synchronous commit stay on; the cluster listens on loopback TCP only (no socket directory to own).
SERVER_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "unix_socket_directories": "''",
    "fsync": "on",
    "synchronous_commit": "on",
    "full_page_writes": "on",
    "max_connections": "200",
    "shared_buffers": "'64MB'",
    "timezone": "'UTC'",
    "log_timezone": "'UTC'",
    "log_min_messages": "warning",
    "log_line_prefix": "'%m [%p] '",
    # One line per session let in (user and database): a failed run's diagnosis tells an implementation that never
    # logged in where its DSN points (testhost/case/diagnosis_facts.py).
    "log_connections": "on",
    "huge_pages": "off",
    # Crash recovery first makes the data directory durable. The default opens and fsyncs every file (two
    # thousand, with the case databases), 0.1-0.3 s per db-crash case; syncfs syncs each file system once.
    "recovery_init_sync_method": "syncfs",
    # Every clock call re-reads libfaketime's offset file (open, fstat, read, close), and activity tracking
    # makes two per statement besides the one for the statement's start: half a statement's server CPU.
    # pg_stat_activity keeps pid, user, database and backend_xid; its state and query read 'disabled'.
    "track_activities": "off",
    # Every commit here is synchronous and flushes its own WAL; the WAL writer only flushes what an asynchronous
    # commit left behind. Waking it seldom makes a db-crash right after such a commit lose it every time, not nearly
    # every time (`committed-survives-crash`), and spares its wake-ups.
    "wal_writer_delay": "'10s'",
}


def default_root() -> Path:
    """The workspace's folder: CRASHPROOF_HOME, else /tmp/crashproof."""
    return Path(os.environ.get("CRASHPROOF_HOME") or DEFAULT_ROOT).absolute()


@dataclass(frozen=True)
class ServerUser:
    """The OS account that owns data directories and runs postgres."""

    name: str
    uid: int
    gid: int

    @property
    def is_switch(self) -> bool:
        return self.uid != os.geteuid()


def server_user(name: str = SERVER_USER) -> ServerUser:
    """Ourselves when unprivileged; as root (which PostgreSQL refuses) an unprivileged user, created if missing."""
    if os.geteuid() != 0:
        me = pwd.getpwuid(os.geteuid())
        return ServerUser(me.pw_name, me.pw_uid, me.pw_gid)
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        useradd = shutil.which("useradd") or "/usr/sbin/useradd"
        if not os.path.exists(useradd):
            raise ComponentMissing(f"useradd not found; create an unprivileged OS user named {name} by hand")
        result = subprocess.run(
            [useradd, "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
             "--shell", "/usr/sbin/nologin", name], capture_output=True, text=True)
        try:
            entry = pwd.getpwnam(name)  # another process may have created it in the meantime
        except KeyError:
            raise ComponentMissing(f"could not create OS user {name}: {result.stderr.strip()}") from None
    return ServerUser(entry.pw_name, entry.pw_uid, entry.pw_gid)


def _unreachable_ancestor(path: Path, user: ServerUser) -> Path | None:
    """The first ancestor the user cannot traverse (e.g. a 0700 root-owned temp dir), if any."""
    for ancestor in [*reversed(path.parents), path]:
        st = ancestor.stat()
        if st.st_uid == user.uid:
            ok = st.st_mode & stat.S_IXUSR
        elif st.st_gid == user.gid:
            ok = st.st_mode & stat.S_IXGRP
        else:
            ok = st.st_mode & stat.S_IXOTH
        if not ok:
            return ancestor
    return None


class Workspace:
    """A directory tree: templates/ (cached initdb output) and worlds/ (one directory per world)."""

    def __init__(self, root: str | os.PathLike | None = None, user: ServerUser | None = None):
        self.root = Path(root).absolute() if root else default_root()
        self.user = user or server_user()
        self._prepare()

    def _prepare(self) -> None:
        hint = "set CRASHPROOF_HOME to a writable directory that the server user can reach, e.g. under /tmp"
        try:
            for sub in (self.root, self.root / "templates", self.root / "worlds"):
                sub.mkdir(parents=True, exist_ok=True)
                if sub.stat().st_uid == os.geteuid():
                    os.chmod(sub, 0o755)
            probe = self.root / f".probe-{uuid.uuid4().hex}"
            probe.write_text("ok")
            probe.unlink()
        except OSError as exc:
            raise WorkspaceUnusable(f"workspace {self.root} is not writable ({exc.strerror or exc}); {hint}") from exc
        blocked = _unreachable_ancestor(self.root, self.user)
        if blocked is not None:
            mode = oct(blocked.stat().st_mode & 0o777)
            raise WorkspaceUnusable(
                f"workspace {self.root} is unreachable by OS user {self.user.name}: {blocked} is mode {mode}; {hint}")

    def chown(self, path: Path) -> None:
        if self.user.is_switch:
            os.chown(path, self.user.uid, self.user.gid)

    @contextmanager
    def _lock(self, name: str):
        with open(self.root / f".{name}.lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def new_world_dir(self, name: str, *, detached: bool = False) -> Path:
        """A new world folder, its owner recorded (testhost/world/orphans.py); first the folders of worlds whose owner
        is gone (a run killed before it could tear them down) are removed, with anything still running in them.
        `detached`: the world is meant to outlive this process (`crashproof world up`)."""
        sweep_worlds(self.root / "worlds")
        path = self.root / "worlds" / f"{name}-{uuid.uuid4().hex[:8]}"
        making = path.with_name(f".{path.name}.making")
        making.mkdir(mode=0o755)
        write_owner(making, detached=detached)
        making.rename(path)  # never a folder without its owner, even for a process killed right here
        self.chown(path)
        return path

    def usable_install(self, install: PostgresInstall) -> PostgresInstall:
        """The install itself, or a copy inside the workspace when the server user cannot reach it."""
        if _unreachable_ancestor(install.bindir, self.user) is None:
            return install
        home = install.bindir.parent
        copy = self.root / f"pginstall-{install.version}"
        with self._lock(copy.name):
            if not (copy / "bin" / "postgres").exists():
                shutil.copytree(home, copy, symlinks=True, dirs_exist_ok=True)
        return PostgresInstall(bindir=copy / "bin", version=install.version, source=install.source + " (copied)")

    def template(self, install: PostgresInstall) -> Path:
        """An initdb'd, configured data directory for this server version, made once and reused."""
        fingerprint = uuid.uuid5(uuid.NAMESPACE_OID, repr(sorted(SERVER_SETTINGS.items()))).hex[:8]
        path = self.root / "templates" / f"pg{install.version}-{fingerprint}"
        with self._lock(path.name):
            if (path / "PG_VERSION").exists() and (path / ".crashproof-ready").exists():
                return path
            shutil.rmtree(path, ignore_errors=True)
            path.mkdir(mode=0o700)
            self.chown(path)
            # --no-sync: the template is copied, never run; each world's own server runs with fsync=on.
            result = subprocess.run(
                [str(install.tool("initdb")), "-D", str(path), "-U", "postgres", "--auth=trust",
                 "-E", "UTF8", "--no-locale", "--no-sync"],
                capture_output=True, text=True, user=self.user.uid if self.user.is_switch else None,
                group=self.user.gid if self.user.is_switch else None, cwd=self.root)
            if result.returncode != 0:
                shutil.rmtree(path, ignore_errors=True)
                last = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
                raise ClusterStartFailed(f"initdb failed: {last[0]}")
            with open(path / "postgresql.conf", "a") as conf:
                conf.write("\n# crashproof\n")
                conf.writelines(f"{key} = {value}\n" for key, value in SERVER_SETTINGS.items())
            (path / "pg_hba.conf").write_text(
                "# crashproof: a throwaway loopback cluster; roles, not passwords, are under test\n"
                "host all all 127.0.0.1/32 trust\n")
            marker = path / ".crashproof-ready"
            marker.write_text(install.version)
            for file in (path / "postgresql.conf", path / "pg_hba.conf", marker):
                self.chown(file)
        return path
