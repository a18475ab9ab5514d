"""The workspace: where templates and world directories live, and the OS user that runs the server."""

from __future__ import annotations

import fcntl
import json
import os
import pwd
import shutil
import stat
import subprocess
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from testhost.errors import ClusterStartFailed, ComponentMissing, WorkspaceUnusable

from . import spares
from .components import PostgresInstall
from .orphans import sweep_worlds, write_owner

SERVER_USER = "crashproof"
SEED_MANIFEST = ".crashproof-seed.json"
# A seed of another key not copied for this long is removed when a new one is kept.
SEED_STALE_S = 1800.0
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
    # Dynamic shared memory as files in the data directory (pg_dynshmem/), not POSIX objects in /dev/shm: a server
    # killed before its own exit cleans up (every world's teardown, a killed run's watcher) left its segments in
    # /dev/shm, about 1 MB each, in RAM until reboot; as files they go with the world folder.
    "dynamic_shared_memory_type": "mmap",
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
    """A directory tree: templates/ (cached initdb output and seeds), worlds/ (one directory per world) and spares/
    (data directories of worlds gone down, for the next copy to write over)."""

    def __init__(self, root: str | os.PathLike | None = None, user: ServerUser | None = None):
        self.root = Path(root).absolute() if root else default_root()
        self.user = user or server_user()
        self._prepare()

    def _prepare(self) -> None:
        hint = "set CRASHPROOF_HOME to a writable directory that the server user can reach, e.g. under /tmp"
        try:
            for sub in (self.root, self.root / "templates", self.root / "worlds", self.spares):
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

    @property
    def spares(self) -> Path:
        """Data directories of worlds gone down, for the next world's copy to write over (testhost/world/spares.py)."""
        return self.root / spares.FOLDER

    @property
    def owner(self) -> tuple[int, int] | None:
        """Who must own what the host makes for the server, when that is another user."""
        return (self.user.uid, self.user.gid) if self.user.is_switch else None

    def chown(self, path: Path) -> None:
        if self.owner is not None:
            os.chown(path, *self.owner)

    @contextmanager
    def _lock(self, name: str, *, shared: bool = False):
        with open(self.root / f".{name}.lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
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

    def _template_path(self, install: PostgresInstall) -> Path:
        fingerprint = uuid.uuid5(uuid.NAMESPACE_OID, repr(sorted(SERVER_SETTINGS.items()))).hex[:8]
        return self.root / "templates" / f"pg{install.version}-{fingerprint}"

    def has_template(self, install: PostgresInstall) -> bool:
        """Whether the initdb template of this server version is made already."""
        path = self._template_path(install)
        return (path / "PG_VERSION").exists() and (path / ".crashproof-ready").exists()

    def template(self, install: PostgresInstall) -> Path:
        """An initdb'd, configured data directory for this server version, made once and reused."""
        path = self._template_path(install)
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

    # -- seeds: a template's data directory with databases made in it, kept for every world to copy ------------

    def seed_path(self, template: Path, key: str) -> Path:
        """Where the seed `key` made on the initdb template `template` is kept."""
        return template.with_name(f"{template.name}-seed-{key}")

    @staticmethod
    def seed_databases(path: Path) -> list[str] | None:
        """The databases a kept seed holds for the taking (its manifest), or None when the seed is not kept."""
        try:
            return json.loads((path / SEED_MANIFEST).read_text())["databases"]
        except (OSError, ValueError, KeyError):
            return None

    @contextmanager
    def reading_seed(self, path: Path):
        """Held while a world copies the seed: a prune of stale seeds skips it. The manifest's modification time
        says when the seed was last used."""
        with self._lock(path.name, shared=True):
            try:
                os.utime(path / SEED_MANIFEST)
            except OSError:
                pass
            yield

    @contextmanager
    def making_seed(self, path: Path):
        """Held while one world makes the seed, so that the others wait and copy it instead of making it too."""
        with self._lock(path.name):
            yield

    def keep_seed(self, install: PostgresInstall, datadir: Path, path: Path, databases: list[str]) -> None:
        """Keep a copy of a cleanly stopped data directory as the seed `path`: its WAL cut to the segment of the
        shutdown checkpoint (the rest were recycled ahead, or precede it: a clean stop needs none of them), its
        manifest written last, then renamed into place (a seed is there whole or not at all). Stale seeds of the
        same template go (see prune_seeds)."""
        making = path.with_name(f".{path.name}.making-{uuid.uuid4().hex[:8]}")
        try:
            subprocess.run(["cp", "-a", str(datadir), str(making)], check=True)
            keep = _checkpoint_segment(install, making)
            for segment in (making / "pg_wal").iterdir():
                if segment.is_file() and len(segment.name) == 24 and segment.name != keep:
                    segment.unlink()
            manifest = making / SEED_MANIFEST
            manifest.write_text(json.dumps({"databases": databases}))
            self.chown(manifest)
            making.rename(path)
        except BaseException:
            shutil.rmtree(making, ignore_errors=True)
            raise
        self.prune_seeds(path)

    def prune_seeds(self, keep: Path, *, older_than_s: float = SEED_STALE_S) -> list[Path]:
        """Remove the seeds of `keep`'s template made for another key (another reference, another month) and not
        used for `older_than_s`, each only while no world copies it; returns what went. A seed is about 60 MB,
        and every change to the reference's package makes a new one."""
        template = keep.name.split("-seed-")[0]
        gone = []
        for other in [*keep.parent.glob(f"{template}-seed-*"), *keep.parent.glob(f".{template}-seed-*.making-*")]:
            if other == keep:
                continue
            try:
                idle_s = time.time() - (other / SEED_MANIFEST).stat().st_mtime
            except OSError:  # a copy left half-made by a killed run, or a seed without its manifest
                idle_s = time.time() - other.stat().st_mtime if other.exists() else 0.0
            if idle_s < older_than_s:
                continue
            with open(self.root / f".{other.name}.lock", "w") as handle:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a world copies it right now
                shutil.rmtree(other, ignore_errors=True)
                gone.append(other)
        return gone


def _checkpoint_segment(install: PostgresInstall, datadir: Path) -> str:
    """The WAL segment holding a cleanly stopped cluster's last checkpoint, as its control file says."""
    result = subprocess.run([str(install.tool("pg_controldata")), "-D", str(datadir)], capture_output=True, text=True,
                            env={**os.environ, "LC_ALL": "C"})
    fields = dict(line.split(":", 1) for line in result.stdout.splitlines() if ":" in line)
    state, segment = fields.get("Database cluster state", "").strip(), fields.get("Latest checkpoint's REDO WAL file", "")
    if result.returncode != 0 or state != "shut down" or len(segment.strip()) != 24:
        raise ClusterStartFailed(f"the seed's data directory is not cleanly stopped: {state or result.stderr.strip()}")
    return segment.strip()
