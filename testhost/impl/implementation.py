"""One running copy of the implementation under test, spoken to through the adapter protocol."""

from __future__ import annotations

import json
import os
import queue
import shlex
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from barriers import BY_NAME
from barriers.contract import MAJOR_VERSION as CONTRACT_MAJOR, VERSION as CONTRACT_VERSION
from barriers.protocol import MANDATORY, PROTOCOL_VERSION, TIMEOUTS

from testhost.errors import TestHostError

from . import forkserver

# The protocol's timeouts; CRASHPROOF_<NAME>_TIMEOUT_S overrides one on the host side (tests shorten them).
TIMEOUT = {t.name: float(os.environ.get(f"CRASHPROOF_{t.name.upper()}_TIMEOUT_S", t.seconds)) for t in TIMEOUTS}
_EOF = object()

# How this TestHost starts an implementation whose command is `<this interpreter> -m MODULE ...`: "fork-server"
# forks it from a server that has imported the preload already (every other command is spawned); "spawn"
# always spawns. The implementation cannot tell the difference (see testhost/impl/forkserver.py).
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


class ImplementationDied(AdapterProtocolError):
    """The implementation exited while the host waited for it (the host did not kill it)."""


class NoMessage(AdapterProtocolError):
    """A live implementation said nothing within the timeout the host waited for its next message."""


# How long the host waits for the end of standard output once the process it started has exited: its children
# (a wrapper's program) are killed with the group, so only a process that left the group can hold it longer.
_EOF_GRACE_S = 5.0
_POLL_S = 0.05
STDERR_TAIL_LINES = 5
# Every implementation process group this process started and has not yet seen end (for a hard teardown).
_live: "set[Implementation]" = set()
_live_lock = threading.RLock()  # re-entered when a stop signal interrupts a clean-up that holds it


def kill_all() -> None:
    """SIGKILL every implementation process group still running (an interrupted run's teardown)."""
    with _live_lock:
        running = list(_live)
    for impl in running:
        impl.kill_group()


def _pid_taken(pid: int) -> bool:
    """Whether some process has this pid now. Asked after the process that had it was reaped: the kernel gives
    a pid out again only once no process holds it as its group id either, so a live holder means the group is
    gone (an O(1) probe instead of reading every process's /proc entry, which cost milliseconds a stop)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stderr_tail(path: Path, lines: int = STDERR_TAIL_LINES) -> list[str]:
    """The last lines a process wrote to its standard error log."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 8192))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()][-lines:]


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


BarrierHandler = Callable[["Implementation", str, dict], "str | None"]  # the reply's action, None: continue


@dataclass(eq=False)
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
    # What the fork server itself must start with (a skewed clock's LD_PRELOAD and FAKETIME): a fork cannot add a
    # preload, so such a start forks from a server of its own that has it (testhost/impl/forkserver.py).
    server_environment: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None  # the working directory it starts in (None: this process's)
    started_utc: datetime | None = None  # the host's clock right before the start, and when the hello came
    hello_utc: datetime | None = None
    killed_by_host: bool = False  # the host ended it (a kill fault or a clean-up), so its death is no finding
    broken: bool = False  # it broke the protocol: no polite shutdown, the group is killed at once
    _output_ended: bool = False
    # Barriers reported while no request was in flight (a processor that is not passive), as (name, context,
    # host time); each was answered `continue` at once so the implementation is not left waiting on the host.
    unsolicited: list = field(default_factory=list)
    _in_request: bool = False
    _answered: bool = False  # the reader saw the response to the request in flight: later barriers belong to none

    def start(self, hello_timeout: float | None = None) -> "Implementation":
        """Start the process in its own session (its process group is the unit every signal goes to) and read
        its hello within `hello_timeout` (default: the protocol's hello timeout; the build stage waits longer);
        on any failure the whole group is killed before the error is raised."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        argv = shlex.split(self.command)
        env = {**os.environ, **self.environment, "CRASHPROOF_BARRIERS": "stdio"}
        self.started_utc = datetime.now(timezone.utc)
        try:
            if launcher_for(self.command) == "fork-server":
                try:
                    module, args = forkserver.module_command(argv)
                    self._process = forkserver.server(preload_for(module), self.server_environment or None,
                                                      self.cwd).start(module, args, env, log.fileno())
                    self.launched_by = "fork-server"
                except forkserver.ForkServerError:
                    self._process = None  # spawned below, like any other command
            if self._process is None:
                self._process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                                 env=env, start_new_session=True, cwd=self.cwd)
                self.launched_by = "spawn"
        except OSError as exc:
            raise AdapterProtocolError(f"cannot start {self.command!r}: {exc.strerror or exc}") from exc
        finally:
            log.close()
        with _live_lock:
            _live.add(self)
        threading.Thread(target=self._read, daemon=True, name=f"impl-{self.label}").start()
        try:
            self._read_hello(TIMEOUT["hello"] if hello_timeout is None else hello_timeout)
        except BaseException:
            self.broken = True
            self.kill_group()
            raise
        return self

    def _read_hello(self, timeout: float) -> None:
        hello = self._next(timeout, "hello")
        if hello is _EOF:
            self._wait_ended(_EOF_GRACE_S)
            raise ImplementationDied(self.death_reason("before its hello"))
        if hello.get("type") != "hello":
            raise AdapterProtocolError(f"first message must be hello, got {hello.get('type')!r}")
        if hello.get("protocol") != PROTOCOL_VERSION:
            raise AdapterProtocolError(f"hello speaks protocol {hello.get('protocol')!r}, not {PROTOCOL_VERSION}")
        contract = hello.get("contract")
        if contract is not None and (not isinstance(contract, int) or isinstance(contract, bool)
                                     or not 1 <= contract <= CONTRACT_MAJOR):
            raise AdapterProtocolError(f"hello names contract {contract!r}; this crashproof certifies contract "
                                       f"{CONTRACT_VERSION}: name a major version from 1 to {CONTRACT_MAJOR}, or none")
        missing = set(MANDATORY) - set(hello.get("operations", []))
        if missing:
            raise AdapterProtocolError(f"hello lacks the mandatory operation{'s' * (len(missing) != 1)} "
                                       f"{', '.join(sorted(missing))}")
        self.hello = hello
        self.hello_utc = datetime.now(timezone.utc)

    def death_reason(self, when: str = "") -> str:
        """`the implementation exited with status N` (or the signal that ended it), with its last stderr lines."""
        status = self._process.poll() if self._process is not None else None
        if status is None:
            ended = "closed its standard output"
        elif status < 0:
            try:
                name = signal.Signals(-status).name
            except ValueError:
                name = f"signal {-status}"
            ended = f"was ended by {name}"
        else:
            ended = f"exited with status {status}"
        reason = f"the implementation {ended}" + (f" {when}" if when else "")
        tail = stderr_tail(self.log_path)
        reason += (f"; its last stderr lines: {' | '.join(tail)}" if tail else "; it wrote nothing to stderr")
        return f"{reason} (log: {self.log_path})"

    def _read(self) -> None:
        for raw in self._process.stdout:
            if self._unsolicited(raw):
                continue
            self._lines.put(raw)
        self._lines.put(_EOF)

    def _unsolicited(self, raw: bytes) -> bool:
        """A barrier line read while no request is in flight, or after the response to the one in flight: recorded
        and answered here. Every barrier of a request is written after the request was sent and before its
        response, and this thread reads lines in order, so such a line belongs to no request."""
        if b'"barrier"' not in raw and b'"response"' not in raw:
            return False
        try:
            message = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return False
        if not isinstance(message, dict):
            return False
        if message.get("type") == "response":
            self._answered = True
            return False
        if message.get("type") != "barrier" or (self._in_request and not self._answered):
            return False
        self.unsolicited.append({"barrier": message.get("name"), "context": message.get("context"),
                                 "host_utc": datetime.now(timezone.utc).isoformat()})
        self.send({"type": "barrier-reply", "action": "continue"})
        return True

    def _next(self, timeout: float, waiting_for: str) -> dict | object:
        """The next message, or _EOF once the process has ended. The protocol's timeout is for a live process
        that says nothing: the exit of the started process is noticed within a poll, and its group (a wrapper's
        children, which may hold standard output open) is killed so the output ends."""
        if self._output_ended:
            return _EOF
        deadline = time.monotonic() + timeout
        ended_at = None
        while True:
            try:
                raw = self._lines.get(timeout=_POLL_S)
                break
            except queue.Empty:
                pass
            now = time.monotonic()
            if ended_at is None and self._process.poll() is not None:
                ended_at = now
                self.kill_group()
            if ended_at is not None and now - ended_at > _EOF_GRACE_S:
                self._output_ended = True
                return _EOF  # a process outside the group holds the pipe; the one started is gone
            if ended_at is None and now >= deadline:
                raise NoMessage(f"no {waiting_for} within {timeout:g}s from a live process "
                                           f"(pid {self.pid}; log: {self.log_path})")
        if raw is _EOF:
            self._output_ended = True
            return _EOF
        try:
            message = json.loads(raw)
        except json.JSONDecodeError:
            raise AdapterProtocolError(f"not a JSON line while waiting for the {waiting_for}: {raw[:120]!r}") from None
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
        self._answered, self._in_request = False, True
        self.send({"type": "request", "id": request_id, "op": op, "args": args})
        try:
            return self._serve_until_response(op, request_id, timeout)
        except AdapterProtocolError:
            self.broken = True
            raise
        finally:
            self._in_request = False

    def _serve_until_response(self, op: str, request_id: int, timeout: float) -> Response:
        while True:
            message = self._next(timeout, f"response to {op}")
            if message is _EOF:
                self._wait_ended(_EOF_GRACE_S)
                if not self.killed_by_host:
                    raise ImplementationDied(self.death_reason(f"while the host waited for the response to {op}"))
                return Response("unknown", error={"kind": "died", "message": "process ended before responding"},
                                died=True)
            kind = message["type"]
            if kind == "barrier":
                name = message.get("name")
                if name not in BY_NAME:
                    raise AdapterProtocolError(f"barrier {name!r} is not in the catalog")
                # The handler may answer with another action than `continue` (a pass's `cancel-pass`).
                action = self.on_barrier(self, name, message.get("context") or {})
                if self.alive:
                    self.send({"type": "barrier-reply", "action": action or "continue"})
                continue
            if kind != "response":
                raise AdapterProtocolError(f"unexpected message type {kind!r} while waiting for the response to {op}")
            if message.get("id") != request_id:
                raise AdapterProtocolError(f"response id {message.get('id')!r} does not match request {request_id}")
            return Response.from_message(message)

    # -- process control (faults) -----------------------------------------------------------------------

    # The process started is its group's leader (a new session), so its pid is the group id. The id stays
    # taken while any member lives, even after the leader is reaped, so a group signal never reaches a stranger.

    def _signal_group(self, number: int) -> None:
        if self._process is None:
            return
        leader = self._process.pid
        if self._process.poll() is not None and _pid_taken(leader):
            return  # leader reaped and its pid given to another process: no member is left, the id is a stranger's
        try:
            os.killpg(self._process.pid, number)
        except (ProcessLookupError, PermissionError):
            pass  # the whole group has ended

    def _wait_ended(self, timeout: float = 10.0) -> None:
        try:
            self._process.wait(timeout)
        except subprocess.TimeoutExpired:
            pass

    def kill_group(self) -> None:
        """SIGKILL every process of the group (the host's clean-up; wrappers' children included)."""
        if self._process is None:
            return
        if self._process.poll() is None:
            self.killed_by_host = True
        self._signal_group(signal.SIGKILL)
        self._wait_ended()
        with _live_lock:
            _live.discard(self)

    def kill(self) -> None:
        """The kill fault: SIGKILL to the whole process group, as a crash of the machine would end it."""
        self.killed_by_host = True
        self.kill_group()

    def pause(self) -> None:
        self._signal_group(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal_group(signal.SIGCONT)

    def stop(self) -> None:
        """Polite shutdown, then SIGKILL to the group after the shutdown timeout; the group is killed in any
        case, so no child the implementation left behind outlives its case."""
        if self._process is None:
            return
        try:
            if self.alive and not self.broken:
                self.send({"type": "shutdown"})
                try:
                    self._process.wait(TIMEOUT["shutdown"])
                except subprocess.TimeoutExpired:
                    pass
        finally:
            self.kill_group()
            for stream in (self._process.stdin, self._process.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
