"""One running copy of the implementation under test, spoken to through the adapter protocol."""

from __future__ import annotations

import json
import os
import queue
import shlex
import signal
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from barriers import BY_NAME
from barriers.protocol import MANDATORY, PROTOCOL_VERSION, TIMEOUTS

from . import forkserver
from .errors import TestHostError

# The protocol's timeouts; CRASHPROOF_<NAME>_TIMEOUT_S overrides one on the host side (tests shorten them).
TIMEOUT = {t.name: float(os.environ.get(f"CRASHPROOF_{t.name.upper()}_TIMEOUT_S", t.seconds)) for t in TIMEOUTS}
_EOF = object()

# How this TestHost starts an implementation whose command is `<this interpreter> -m MODULE ...`: "fork-server"
# forks it from a server that has imported the preload already (every other command is spawned); "spawn"
# always spawns. The implementation cannot tell the difference (see testhost/forkserver.py).
LAUNCHERS = ("fork-server", "spawn")
PRELOAD = ("psycopg",)
# Packages of this project that may be imported once and shared by every forked start: their import reads no
# environment and keeps no state a run changes (the adapter reads its environment in main()). A mutant's copy
# of the reference is never among them: it runs as `-m mutants`, and must import its own copy.
FORK_SAFE_PACKAGES = ("reference",)
_launcher = "fork-server"


def preload_for(module: str) -> tuple[str, ...]:
    """What the fork server imports before forking `module`: psycopg, and the module's own package when it
    is one of ours known to be safe to share (the module itself always runs fresh, as `__main__`)."""
    package = module.split(".")[0]
    return PRELOAD + ((package,) if package in FORK_SAFE_PACKAGES and package != module else ())


def set_launcher(name: str) -> None:
    global _launcher
    if name not in LAUNCHERS:
        raise ValueError(f"no launcher named {name!r}; choose from {', '.join(LAUNCHERS)}")
    _launcher = name


def launcher_for(command: str) -> str:
    """The launcher a command gets under the current setting."""
    forkable = _launcher == "fork-server" and forkserver.module_command(shlex.split(command)) is not None
    return "fork-server" if forkable else "spawn"


class AdapterProtocolError(TestHostError):
    """The implementation broke the adapter protocol: the case ends with verdict `error`."""


@dataclass
class Response:
    outcome: str  # "ok", "fail", "unknown"
    value: Any = None
    problem: dict | None = None
    error: dict | None = None
    died: bool = False  # the process ended (or was killed) before answering

    @classmethod
    def from_message(cls, message: dict) -> "Response":
        outcome = message.get("outcome")
        if outcome not in ("ok", "fail", "unknown"):
            raise AdapterProtocolError(f"response outcome must be ok, fail or unknown, not {outcome!r}")
        return cls(outcome, message.get("value"), message.get("problem"), message.get("error"))


BarrierHandler = Callable[["Implementation", str, dict], None]


@dataclass
class Implementation:
    """A process started from the user's command line, with the proxy DSNs and the barrier endpoint."""

    command: str
    environment: dict[str, str]
    on_barrier: BarrierHandler
    log_path: Path
    label: str = "A"
    hello: dict = field(default_factory=dict)
    _process: "subprocess.Popen | forkserver.ForkedProcess | None" = None
    launched_by: str = ""
    _lines: queue.Queue = field(default_factory=queue.Queue)
    _next_id: int = 1
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> "Implementation":
        log = open(self.log_path, "ab")
        argv = shlex.split(self.command)
        env = {**os.environ, **self.environment, "CRASHPROOF_BARRIERS": "stdio"}
        try:
            if launcher_for(self.command) == "fork-server":
                try:
                    module, args = forkserver.module_command(argv)
                    self._process = forkserver.server(preload_for(module)).start(module, args, env, log.fileno())
                    self.launched_by = "fork-server"
                except forkserver.ForkServerError:
                    self._process = None  # spawned below, like any other command
            if self._process is None:
                self._process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                                 env=env, start_new_session=True)
                self.launched_by = "spawn"
        except OSError as exc:
            raise AdapterProtocolError(f"cannot start {self.command!r}: {exc.strerror or exc}") from exc
        finally:
            log.close()
        threading.Thread(target=self._read, daemon=True, name=f"impl-{self.label}").start()
        hello = self._next(TIMEOUT["hello"], "hello")
        if hello is _EOF:
            raise AdapterProtocolError(f"implementation exited before its hello (exit code {self._process.wait()}); "
                                       f"see {self.log_path}")
        if hello.get("type") != "hello":
            raise AdapterProtocolError(f"first message must be hello, got {hello.get('type')!r}")
        if hello.get("protocol") != PROTOCOL_VERSION:
            raise AdapterProtocolError(f"hello speaks protocol {hello.get('protocol')!r}, not {PROTOCOL_VERSION}")
        missing = set(MANDATORY) - set(hello.get("operations", []))
        if missing:
            raise AdapterProtocolError(f"hello lacks the mandatory operation(s) {sorted(missing)}")
        self.hello = hello
        return self

    def _read(self) -> None:
        for raw in self._process.stdout:
            self._lines.put(raw)
        self._lines.put(_EOF)

    def _next(self, timeout: float, waiting_for: str) -> dict | object:
        try:
            raw = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AdapterProtocolError(f"no {waiting_for} within {timeout:g}s") from None
        if raw is _EOF:
            return _EOF
        try:
            message = json.loads(raw)
        except json.JSONDecodeError:
            raise AdapterProtocolError(f"not a JSON line while waiting for {waiting_for}: {raw[:120]!r}") from None
        if not isinstance(message, dict) or "type" not in message:
            raise AdapterProtocolError(f"message without a type: {raw[:120]!r}")
        return message

    def supports(self, operation: str) -> bool:
        return operation in self.hello.get("operations", [])

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def send(self, message: dict) -> None:
        try:
            self._process.stdin.write((json.dumps(message) + "\n").encode())
            self._process.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass  # it died; the reader reports EOF

    def request(self, op: str, args: dict, timeout: float | None = None) -> Response:
        """Send one request; serve its barrier hits through on_barrier until the response (or death)."""
        timeout = TIMEOUT["operation"] if timeout is None else timeout
        with self._lock:
            request_id = self._next_id
            self._next_id += 1
        self.send({"type": "request", "id": request_id, "op": op, "args": args})
        while True:
            message = self._next(timeout, f"the response to {op}")
            if message is _EOF:
                return Response("unknown", error={"kind": "died", "message": "process ended before responding"},
                                died=True)
            kind = message["type"]
            if kind == "barrier":
                name = message.get("name")
                if name not in BY_NAME:
                    raise AdapterProtocolError(f"barrier {name!r} is not in the catalog")
                self.on_barrier(self, name, message.get("context") or {})
                if self.alive:
                    self.send({"type": "barrier-reply", "action": "continue"})
                continue
            if kind != "response":
                raise AdapterProtocolError(f"unexpected message type {kind!r} while waiting for the response to {op}")
            if message.get("id") != request_id:
                raise AdapterProtocolError(f"response id {message.get('id')!r} does not match request {request_id}")
            return Response.from_message(message)

    # -- process control (faults) -----------------------------------------------------------------------

    def kill(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGKILL)
            self._process.wait()

    def pause(self) -> None:
        self._process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        """Polite shutdown, then SIGKILL after the shutdown timeout."""
        if not self.alive:
            return
        self.send({"type": "shutdown"})
        try:
            self._process.wait(TIMEOUT["shutdown"])
        except subprocess.TimeoutExpired:
            self.kill()
        finally:
            for stream in (self._process.stdin, self._process.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
