"""A world: one PostgreSQL cluster, its server clock, a Toxiproxy server and a proxy in front of the cluster."""

from __future__ import annotations

import json
import platform
from pathlib import Path
from typing import Protocol

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from testhost.errors import ComponentMissing, TestHostError

from .capabilities import CLOCK, DB_CRASH, NETWORK, Capabilities
from .clock import NoClock, ServerClock
from .cluster import Cluster, sweep_stale_segments
from .components import find_libfaketime, find_postgres
from .orphans import remove_world
from .processes import is_alive, kill_tree
from .sessions import KeptSession, server_incarnation
from .toxiproxy import Proxy, ToxiproxyServer
from .workspace import Workspace


class Seed(Protocol):
    """Databases a world's cluster starts with, made once per workspace (`key` names what they hold) by
    `build` on a running world, and copied with the data directory by every world made from it."""

    key: str

    def build(self, world: "World") -> list[str]:
        """Make the databases in `world`'s cluster; the names returned are handed out by take_seed_database."""


# Capabilities a case may need; a world lacking one says why, and such cases are reported not-run.
class World:
    """The embedded default world: everything started here, everything torn down on exit.

    `tie_to_parent` (default) makes the servers die with this process even if it is SIGKILLed;
    `crashproof world up` turns it off so the world outlives the command that started it.
    """

    def __init__(self, name: str = "world", *, workspace: Workspace | None = None, pg_port: int | None = None,
                 toxiproxy_port: int | None = None, network_optional: bool = False, tie_to_parent: bool = True,
                 clock_cache_seconds: int = 0, seed: "Seed | None" = None):
        self.name = name
        self.seed = seed
        self.seed_databases: list[str] = []  # the seed's databases not yet taken (take_seed_database)
        self.clock_cache_seconds = clock_cache_seconds  # see ServerClock: 0 for the harness, more for benchmarks
        self.workspace = workspace or Workspace()
        self.pg_port = pg_port
        self.toxiproxy_port = toxiproxy_port
        self.network_optional = network_optional
        self.tie_to_parent = tie_to_parent
        self.capabilities = Capabilities()
        self.directory: Path | None = None
        self.cluster: Cluster | None = None
        self.clock: ServerClock | NoClock = NoClock("world not started")
        self.toxiproxy: ToxiproxyServer | None = None
        self.proxy: Proxy | None = None
        self.on_down: list = []  # callbacks run first when the world goes down
        self.admin = KeptSession(lambda: psycopg.connect(self.admin_dsn(), autocommit=True),
                                 server_incarnation(self))
        """`with world.admin() as conn`: the superuser's autocommit session to `postgres`."""

    # -- life cycle -------------------------------------------------------------------------------

    def up(self) -> "World":
        install = find_postgres()
        libfaketime = find_libfaketime()
        self.directory = self.workspace.new_world_dir(self.name, detached=not self.tie_to_parent)
        try:
            user = self.workspace.user
            self.clock = ServerClock(self.directory / "clock", owner=(user.uid, user.gid) if user.is_switch else None,
                                     cache_seconds=self.clock_cache_seconds)
            self.cluster = Cluster(self.workspace, install, self.directory, port=self.pg_port,
                                   environment=ServerClock.environment(libfaketime, self.clock.path,
                                                                       self.clock_cache_seconds),
                                   tie_to_parent=self.tie_to_parent)
            if user.is_switch:  # the project's own server account: its unattached segments are garbage
                sweep_stale_segments(user.uid)
            if self.seed is None:
                self.cluster.create().start()
            else:
                self._start_seeded()
            self._start_network(f"127.0.0.1:{self.cluster.port}")
        except BaseException:
            self.down()
            raise
        return self

    def _start_seeded(self) -> None:
        """The cluster copied from the workspace's kept seed, which the first world to need it makes in its own
        cluster (stopped cleanly, copied, started again) while any other waits for it. A workspace's very first
        world (it makes the initdb template) makes no seed: a workspace used for one run (a test's own) would pay
        for the copy and the second start and never use the seed."""
        install = self.cluster.install
        if not self.workspace.has_template(install):
            self.cluster.create().start()
            return
        path = self.workspace.seed_path(self.workspace.template(install), self.seed.key)
        if self.workspace.seed_databases(path) is None:
            with self.workspace.making_seed(path):
                if self.workspace.seed_databases(path) is None:
                    self.cluster.create().start()
                    databases = self.seed.build(self)
                    self.cluster.stop()
                    self.workspace.keep_seed(self.cluster.install, self.cluster.datadir, path, databases)
                    self.cluster.start()
                    self.seed_databases = list(databases)
                    return
        with self.workspace.reading_seed(path):
            self.seed_databases = list(self.workspace.seed_databases(path) or [])
            self.cluster.create(path)
        self.cluster.start()

    def take_seed_database(self) -> str | None:
        """One of the seed's databases not yet handed out, if any is left; each is handed out once."""
        return self.seed_databases.pop(0) if self.seed_databases else None

    def _start_network(self, upstream: str) -> None:
        try:
            self.toxiproxy = ToxiproxyServer(self.directory, port=self.toxiproxy_port,
                                             tie_to_parent=self.tie_to_parent).start()
        except ComponentMissing as exc:
            if not self.network_optional:
                raise
            self.capabilities.missing[NETWORK] = str(exc)
        else:
            self.proxy = self.toxiproxy.create_proxy("postgres", upstream)

    def down(self) -> None:
        while self.on_down:
            self.on_down.pop()()
        self.admin.close()
        if self.toxiproxy is not None:
            self.toxiproxy.stop()
        if self.cluster is not None:
            self.cluster.discard()
            self.cluster.keep_as_spare()  # its files are the next world's to write over: none freed, none made
        if self.directory is not None:
            remove_world(self.directory)
        self.toxiproxy = self.proxy = self.cluster = None

    def kill(self) -> None:
        """The hard teardown of an interrupted run: kill the servers and remove the folder, asking nothing of
        them (the thread that talks to them was interrupted mid-case)."""
        for stop in ((self.toxiproxy.stop if self.toxiproxy is not None else None),
                     (self.cluster.discard if self.cluster is not None else None)):
            if stop is not None:
                try:
                    stop()
                except Exception:  # noqa: BLE001 - the rest must still go
                    pass
        if self.directory is not None:
            remove_world(self.directory)

    def __enter__(self) -> "World":
        return self.up()

    def __exit__(self, *exc_info) -> None:
        self.down()

    # -- access ------------------------------------------------------------------------------------

    def admin_dsn(self, dbname: str = "postgres", user: str = "postgres") -> str:
        """Direct to the cluster: the verifier's connection, never cut by a fault."""
        return self.cluster.dsn(user=user, dbname=dbname)

    def proxied_dsn(self, dbname: str = "postgres", user: str = "postgres") -> str:
        """Through the proxy: how the implementation under test reaches the cluster in a case with a network fault."""
        if self.proxy is None:
            return self.admin_dsn(dbname, user)
        return f"host={self.proxy.host} port={self.proxy.port} user={user} dbname={dbname}"

    def components(self) -> dict[str, str]:
        """What this world runs, with versions, for reports and `crashproof world status`."""
        return {
            "postgres": f"{self._server_version()} ({self._server_origin()})",
            "toxiproxy": (f"{self.toxiproxy.version()} ({self.toxiproxy.binary})" if self.toxiproxy
                          else f"not available: {self.capabilities.reason(NETWORK)}"),
            "libfaketime": (str(find_libfaketime()) if self.capabilities.has(CLOCK)
                            else f"not used: {self.capabilities.reason(CLOCK)}"),
            "python": platform.python_version(),
            "psycopg": psycopg.__version__,
            "server_user": self.workspace.user.name if self.cluster else "not ours",
        }

    def _server_version(self) -> str:
        with psycopg.connect(self.admin_dsn()) as conn:
            return conn.execute("show server_version").fetchone()[0]

    def _server_origin(self) -> str:
        return f"{self.cluster.install.source}: {self.cluster.install.bindir}"

    def state(self) -> dict:
        """What `crashproof world status|down` needs to find this world again from another process."""
        return {
            "name": self.name,
            "directory": str(self.directory),
            "postgres": {"pid": self.cluster.pid, "port": self.cluster.port, "dsn": self.admin_dsn()},
            "toxiproxy": ({"pid": self.toxiproxy.pid, "api_port": self.toxiproxy.port,
                           "proxied_dsn": self.proxied_dsn()} if self.toxiproxy else None),
            "clock_file": str(self.clock.path),
        }


# -- detached worlds for the command line ------------------------------------------------------------

def state_file(workspace: Workspace, name: str) -> Path:
    return workspace.root / "worlds" / f"{name}.json"


def save_state(world: World) -> Path:
    path = state_file(world.workspace, world.name)
    path.write_text(json.dumps(world.state(), indent=2) + "\n")
    return path


def load_state(workspace: Workspace, name: str) -> dict:
    path = state_file(workspace, name)
    if not path.exists():
        raise TestHostError(f"no world named {name} is up (no {path}); start one with `crashproof world up`")
    return json.loads(path.read_text())


def teardown_state(workspace: Workspace, name: str) -> dict | None:
    """Kill a detached world's servers and remove it; None when no world of that name is up (nothing to do)."""
    if not state_file(workspace, name).exists():
        return None
    state = load_state(workspace, name)
    for part in ("toxiproxy", "postgres"):
        pid = (state.get(part) or {}).get("pid")
        if pid and is_alive(pid):
            kill_tree(pid)
    remove_world(Path(state["directory"]))
    state_file(workspace, name).unlink()
    return state


def describe_state(state: dict) -> dict:
    alive = {part: bool((state.get(part) or {}).get("pid")) and is_alive(state[part]["pid"])
             for part in ("postgres", "toxiproxy")}
    return {**state, "alive": alive}


def _one_line(exc: Exception) -> str:
    return "; ".join(line.strip() for line in str(exc).strip().splitlines() if line.strip())


class ExternalWorld(World):
    """An existing server given by `--dsn`: no clock control and no crash; Toxiproxy still fronts it."""

    def __init__(self, dsn: str, name: str = "external", **kwargs):
        super().__init__(name, **kwargs)
        self.dsn = dsn
        self.capabilities.missing[CLOCK] = "external server (--dsn): the harness cannot move its clock"
        self.capabilities.missing[DB_CRASH] = "external server (--dsn): the harness cannot crash it"
        self.clock = NoClock(self.capabilities.missing[CLOCK])

    def up(self) -> "ExternalWorld":
        try:
            info = conninfo_to_dict(self.dsn)
        except psycopg.ProgrammingError as exc:
            raise TestHostError(f"--dsn {self.dsn!r} is not a libpq connection string ({_one_line(exc)}); give "
                                "e.g. \"host=127.0.0.1 port=5432 user=postgres\"") from None
        try:
            with psycopg.connect(self.dsn, connect_timeout=5):
                pass
        except psycopg.OperationalError as exc:
            # libpq's first line names host and port, the last gives the hint: keep both, on one line
            raise TestHostError(f"cannot connect to --dsn server: {_one_line(exc)}") from None
        self.directory = self.workspace.new_world_dir(self.name)
        try:
            self._start_network(f"{info.get('host') or '127.0.0.1'}:{info.get('port') or 5432}")
        except BaseException:
            self.down()
            raise
        return self

    def admin_dsn(self, dbname: str = "postgres", user: str | None = None) -> str:
        extra = {"dbname": dbname} | ({"user": user} if user else {})
        return make_conninfo(self.dsn, **extra)

    def proxied_dsn(self, dbname: str = "postgres", user: str | None = None) -> str:
        if self.proxy is None:
            return self.admin_dsn(dbname, user)
        return make_conninfo(self.admin_dsn(dbname, user), host=self.proxy.host, port=str(self.proxy.port))

    def _server_origin(self) -> str:
        return "external: --dsn"
