"""The real Toxiproxy server, and the fault primitives on one proxy: cut, blackhole_replies, heal."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import requests
import toxiproxy.api as toxiproxy_api
from toxiproxy.api import APIConsumer
from toxiproxy.exceptions import InvalidToxic, NotFound, ProxyExists
from toxiproxy.proxy import Proxy as _ClientProxy
from toxiproxy.server import Toxiproxy as _ClientServer

from testhost.errors import ToxiproxyFailed

from .components import find_toxiproxy, toxiproxy_version
from .ports import LOOPBACK, choose, free_port
from .processes import die_with_parent, kill_tree, popen

# One proxy serves one case's few connections at a time. With one scheduler thread the Go runtime stops waking
# idle threads for every packet, and at error level it stops logging ten lines per connection: together they halved
# the server's CPU per case (11.4 to 6.2 ms in a slice of kill, disconnect and pause cases). The environment
# the TestHost runs in still wins, so a team can set either back.
SERVER_ENVIRONMENT = {"GOMAXPROCS": "1", "LOG_LEVEL": "error"}

# toxiproxy-python keeps the API address in class attributes; one lock makes it safe for several servers.
_client_lock = threading.Lock()


class _KeptHttp:
    """What toxiproxy-python calls as `requests`: get, post and delete on one kept HTTP session.

    requests' module functions build a new Session per call (adapters, environment and netrc lookups, a new
    TCP connection): several milliseconds of CPU per API call, and a case makes up to five. One session per
    process (a forked worker makes its own) keeps its connections alive instead.
    """

    def __init__(self) -> None:
        self._session: requests.Session | None = None
        self._pid: int | None = None

    def _current(self) -> requests.Session:
        if self._session is None or self._pid != os.getpid():
            self._session = requests.Session()
            self._session.trust_env = False  # loopback only: no proxy or netrc from the environment
            self._pid = os.getpid()
        return self._session

    def get(self, url, **kwargs):
        return self._current().get(url, **kwargs)

    def post(self, url, **kwargs):
        return self._current().post(url, **kwargs)

    def delete(self, url, **kwargs):
        return self._current().delete(url, **kwargs)


_http = _KeptHttp()

_BLACKHOLE = "crashproof_blackhole_replies"


@contextmanager
def _client(port: int):
    with _client_lock:
        APIConsumer.host, APIConsumer.port = LOOPBACK, port
        toxiproxy_api.requests = _http
        try:
            yield
        except (requests.RequestException, ProxyExists, NotFound, InvalidToxic) as exc:
            raise ToxiproxyFailed(f"Toxiproxy API on {LOOPBACK}:{port} refused a call: {exc}") from exc


class Proxy:
    """One TCP proxy in front of an upstream; what the implementation under test connects through."""

    def __init__(self, server: "ToxiproxyServer", client_proxy: _ClientProxy, host: str, port: int):
        self._server = server
        self._proxy = client_proxy
        self.name = client_proxy.name
        self.host = host
        self.port = port
        self.upstream = client_proxy.upstream
        # Whether a fault may have left a toxic or a disabled proxy behind. Only this object changes the
        # proxy, so a heal with nothing to undo skips its two API calls (a few milliseconds, several per case).
        self._dirty = True

    def cut(self) -> None:
        """Reset every current connection; the proxy keeps listening on the same port for new ones."""
        was_dirty, self._dirty = self._dirty, True  # a cut that fails half-way may leave the proxy disabled
        with _client(self._server.port):
            self._proxy.disable()
            self._proxy.enable()
        self._dirty = was_dirty

    def blackhole_replies(self) -> None:
        """Drop server→client bytes while client→server bytes pass (a timeout toxic with timeout 0)."""
        self._dirty = True
        with _client(self._server.port):
            self._proxy.add_toxic(name=_BLACKHOLE, type="timeout", stream="downstream",
                                  attributes={"timeout": 0})

    def heal(self) -> None:
        """Remove every toxic and make sure the proxy is enabled (nothing to do when no fault touched it)."""
        if not self._dirty:
            return
        with _client(self._server.port):
            for name in self._proxy.toxics():
                self._proxy.destroy_toxic(name)
            self._proxy.enable()
        self._dirty = False

    def toxics(self) -> list[str]:
        with _client(self._server.port):
            return sorted(self._proxy.toxics())


class ToxiproxyServer:
    """A toxiproxy-server process on a loopback API port."""

    def __init__(self, directory: Path, *, binary: Path | None = None, port: int | None = None,
                 tie_to_parent: bool = True):
        self.binary = binary or find_toxiproxy()
        self.directory = directory
        self.port = choose(port, "the Toxiproxy API")
        self.tie_to_parent = tie_to_parent
        self.log_path = directory / "toxiproxy.log"
        self._process: subprocess.Popen | None = None
        self.pid: int | None = None

    def start(self, timeout: float = 15.0) -> "ToxiproxyServer":
        with open(self.log_path, "ab") as log:
            self._process = popen(
                [str(self.binary), "-host", LOOPBACK, "-port", str(self.port)], cwd=self.directory,
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                env={**SERVER_ENVIRONMENT, **os.environ}, preexec_fn=die_with_parent if self.tie_to_parent else None)
        self.pid = self._process.pid
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                tail = self.log_path.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
                self._process = self.pid = None
                raise ToxiproxyFailed(f"toxiproxy-server exited during start-up: {tail[0]}")
            try:
                requests.get(f"http://{LOOPBACK}:{self.port}/version", timeout=1).raise_for_status()
                return self
            except requests.RequestException:
                time.sleep(0.01)
        self.stop()
        raise ToxiproxyFailed(f"toxiproxy-server not answering on {LOOPBACK}:{self.port} after {timeout:.0f}s")

    def version(self) -> str:
        return toxiproxy_version(self.binary)

    def create_proxy(self, name: str, upstream: str, listen_port: int | None = None) -> Proxy:
        """A proxy to upstream ("host:port") on a fixed loopback port."""
        # A fixed listen port, not :0: cut() disables and re-enables, which must re-bind the same port.
        port = listen_port or free_port()
        with _client(self.port):
            created = _ClientServer().create(upstream=upstream, name=name,
                                             listen=f"{LOOPBACK}:{port}", enabled=True)
        return Proxy(self, created, LOOPBACK, port)

    def stop(self) -> None:
        if self.pid is not None:
            kill_tree(self.pid)
            if self._process is not None:
                self._process.wait()
        self._process = self.pid = None
