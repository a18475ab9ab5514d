"""A fork server for implementations started as `<this interpreter> -m MODULE ...`: heavy imports once, a fork
per start.

Starting the reference costs about 0.2 s of CPU, nearly all of it importing psycopg; a faulted case starts the
implementation two or three times. The server is a single-threaded interpreter that imports the preload list
(third-party libraries only, never the implementation's own modules, so each start runs the implementation's
code from scratch) and then forks one child per start. The child takes the start's standard streams, working
directory, environment and a new session, exactly as a spawned process would, and runs the module as
`__main__`. Its pid is a real process: the TestHost signals it (kill, pause) directly, through a pidfd.

The server is the child's parent; it reaps it and reports the exit status back.
"""

from __future__ import annotations

import array
import io
import json
import os
import runpy
import select
import signal
import socket
import subprocess
import sys
import threading
import traceback
from dataclasses import dataclass, field

_MAX_MESSAGE = 1 << 20
_FDS = 3  # stdin, stdout, stderr of the child


# -- the server (its own process) ------------------------------------------------------------------------------

def _run_child(request: dict, fds: list[int]) -> None:
    """In the forked child: become the process a spawn would have made, run the module, never return."""
    code = 1
    try:
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(3, 65536)
        for number in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM, signal.SIGHUP,
                       signal.SIGPIPE):
            signal.signal(number, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        sys.path[0] = request["cwd"]  # as `python -m` puts the working directory first
        for entry in reversed([p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]):
            if entry not in sys.path:
                sys.path.insert(1, entry)
        sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)))
        sys.argv = [request["module"], *request["args"]]
        _use_compiled(request["module"])
        code = 0
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: BLE001 - what a spawned interpreter would print before exiting 1
        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - a closed pipe: nothing more to say
                pass
        os._exit(code & 0xFF)


# The code of each module the server has forked, compiled once: (path, mtime, size) -> code. Without a bytecode
# cache (PYTHONDONTWRITEBYTECODE, or a source folder nobody may write to) every child compiled its module from
# source again: about 2.5 ms of a start's 6 ms of CPU for the reference's adapter.
_compiled: dict[str, tuple[tuple, object]] = {}


def _compile_once(module: str) -> None:
    """In the server, before the fork: compile `module` unless its file is unchanged since the last time. Only
    a module of a package the server imported is resolved here, where the child will resolve it too (the child
    puts its own working directory and PYTHONPATH first, which could find another top-level module)."""
    import importlib.machinery
    import importlib.util

    package = module.rpartition(".")[0]
    if not package or package.split(".")[0] not in sys.modules:
        return
    try:
        spec = importlib.util.find_spec(module)
        if spec is None or type(spec.loader) is not importlib.machinery.SourceFileLoader:
            return
        found = os.stat(spec.origin)
        key = (spec.origin, found.st_mtime_ns, found.st_size)
        if module not in _compiled or _compiled[module][0] != key:
            _compiled[module] = (key, spec.loader.get_code(module))
    except Exception:  # noqa: BLE001 - the child then finds and compiles the module itself, and reports why not
        _compiled.pop(module, None)


def _use_compiled(module: str) -> None:
    """In the child: runpy gets the server's compiled code for exactly that file, everything else as usual."""
    import importlib.machinery

    if module not in _compiled:
        return
    (path, _, _), compiled = _compiled[module]
    loader = importlib.machinery.SourceFileLoader
    get_code = loader.get_code

    def cached(self, fullname):
        return compiled if fullname == module and self.path == path else get_code(self, fullname)
    loader.get_code = cached


def _status(raw: int) -> int:
    """A wait status as Popen reports it: the exit code, or minus the signal that ended the process."""
    return -os.WTERMSIG(raw) if os.WIFSIGNALED(raw) else os.WEXITSTATUS(raw)


def serve(control: socket.socket, preload: list[str]) -> None:
    for module in preload:
        __import__(module)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    control.sendmsg([json.dumps({"ready": preload}).encode()])
    while True:
        readable, _, _ = select.select([control, wake_r], [], [])
        if wake_r in readable:
            os.read(wake_r, 4096)
        while True:
            try:
                pid, raw = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            control.sendmsg([json.dumps({"exit": pid, "status": _status(raw)}).encode()])
        if control in readable:
            fds = array.array("i")
            message, ancillary, _, _ = control.recvmsg(_MAX_MESSAGE, socket.CMSG_SPACE(_FDS * fds.itemsize))
            if not message:
                return  # the TestHost is gone
            for level, kind, data in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
            request = json.loads(message)
            _compile_once(request["module"])
            pid = os.fork()
            if pid == 0:
                control.close()
                _run_child(request, list(fds))
            for fd in fds:
                os.close(fd)
            control.sendmsg([json.dumps({"pid": pid}).encode()])


def _main() -> None:
    control = socket.socket(fileno=int(sys.argv[1]))
    sys.path[0] = os.getcwd()
    try:
        serve(control, sys.argv[2:])
    except (ConnectionError, BrokenPipeError):
        pass  # the TestHost ended (an interrupted run): so does the server, quietly


# -- the TestHost's side ---------------------------------------------------------------------------------------

class ForkServerError(Exception):
    """The fork server could not start or start a child; the caller falls back to spawning."""


@dataclass(eq=False)
class ForkedProcess:
    """What the TestHost needs of a started implementation, as `subprocess.Popen` offers it."""

    pid: int
    server: "ForkServer"
    stdin: io.BufferedWriter | None = None  # attached by start() once the server has answered
    stdout: io.BufferedReader | None = None
    returncode: int | None = None
    _ended: threading.Event = field(default_factory=threading.Event)
    _pidfd: int | None = None
    _pidfd_lock: threading.Lock = field(default_factory=threading.Lock)

    def _ended_by(self, status: int) -> None:
        with self._pidfd_lock:
            self.returncode = status
            if self._pidfd is not None:
                os.close(self._pidfd)
                self._pidfd = None
        self._ended.set()

    def poll(self) -> int | None:
        if self.returncode is None and not self.server.alive:
            self.returncode = -signal.SIGKILL  # its parent is gone, so is its status; it ran under the server
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
        return self.returncode

    def send_signal(self, number: int) -> None:
        """Through the pidfd taken at start, so a signal never reaches a later process given the same pid."""
        with self._pidfd_lock:
            if self.returncode is not None or self._pidfd is None:
                return
            try:
                signal.pidfd_send_signal(self._pidfd, number)
            except ProcessLookupError:
                pass  # ended; the server has not reported it yet


class ForkServer:
    """One server per TestHost process and preload list, started on first use."""

    def __init__(self, preload: tuple[str, ...], *, ready_timeout: float = 60.0, answer_timeout: float = 10.0,
                 environment: dict[str, str] | None = None, cwd: str | None = None):
        self.preload = preload
        self.cwd = cwd or os.getcwd()
        self.answer_timeout = answer_timeout
        self._lock = threading.Lock()
        self._children: dict[int, ForkedProcess] = {}
        self._reply: "list[ForkedProcess]" = []
        self._replied = threading.Condition()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # No parent-death signal: it is tied to the starting thread. The server ends when its socket closes,
        # which the kernel does when this process ends in any way. Its own session keeps a terminal's Ctrl-C
        # (sent to the TestHost's process group) away from it: the TestHost ends it and its children itself.
        self._process = subprocess.Popen(
            [sys.executable, "-m", "testhost.impl.forkserver", str(theirs.fileno()), *preload],
            pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, cwd=self.cwd,
            start_new_session=True, env={**os.environ, **environment} if environment else None)
        theirs.close()
        self.pid = self._process.pid
        self._control = ours
        self.alive = True
        ours.settimeout(ready_timeout)
        try:
            ready = json.loads(ours.recv(_MAX_MESSAGE) or b"{}")
        except TimeoutError:
            ready = {}
        ours.settimeout(None)
        if "ready" not in ready:
            self._process.kill()
            self.close()
            raise ForkServerError(f"the fork server did not come up within {ready_timeout:g} s "
                                  f"(preloading {', '.join(preload)})")
        threading.Thread(target=self._listen, daemon=True, name="fork-server").start()

    def _listen(self) -> None:
        while True:
            try:
                raw = self._control.recv(_MAX_MESSAGE)
            except OSError:
                raw = b""
            if not raw:
                self.alive = False
                with self._replied:
                    self._replied.notify_all()
                    orphans = list(self._children.values())
                for child in orphans:
                    child._ended_by(-signal.SIGKILL)
                return
            message = json.loads(raw)
            with self._replied:
                if "exit" in message:
                    child = self._children.pop(message["exit"], None)
                else:  # a child's pid: known here before its exit report, which the server sends later
                    child = self._children[message["pid"]] = ForkedProcess(message["pid"], self)
                    self._reply.append(child)
                    self._replied.notify_all()
            if "exit" in message and child is not None:
                child._ended_by(message["status"])

    def start(self, module: str, args: list[str], env: dict[str, str], stderr: int) -> ForkedProcess:
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        try:
            with self._lock:
                request = {"module": module, "args": args, "env": env, "cwd": self.cwd}
                fds = array.array("i", [stdin_r, stdout_w, stderr])
                with self._replied:
                    self._reply.clear()
                    try:
                        self._control.sendmsg([json.dumps(request).encode()],
                                              [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds.tobytes())])
                    except OSError as exc:
                        raise ForkServerError(f"the fork server is gone: {exc}") from exc
                    if not self._replied.wait_for(lambda: self._reply or not self.alive, timeout=self.answer_timeout):
                        self.alive = False  # a hung server is replaced on the next start
                        self._process.kill()
                        raise ForkServerError(f"the fork server did not answer within {self.answer_timeout:g} s")
                    if not self._reply:
                        raise ForkServerError("the fork server is gone")
                    child = self._reply.pop()
            child.stdin, child.stdout = os.fdopen(stdin_w, "wb"), os.fdopen(stdout_r, "rb")
            stdin_w = stdout_r = -1
            with child._pidfd_lock:
                if child.returncode is None:
                    try:
                        child._pidfd = os.pidfd_open(child.pid)
                    except ProcessLookupError:
                        pass  # ended already; its exit report is on the way
            return child
        finally:
            for fd in (stdin_r, stdout_w, stdin_w, stdout_r):
                if fd >= 0:
                    os.close(fd)

    def close(self) -> None:
        self.alive = False
        try:
            self._control.close()
        finally:
            try:
                self._process.wait(5)
            except subprocess.TimeoutExpired:
                self._process.kill()


_servers: dict[tuple[int, tuple[str, ...]], ForkServer] = {}
_servers_lock = threading.Lock()


def module_command(argv: list[str]) -> tuple[str, list[str]] | None:
    """(module, args) when argv is `<this interpreter> -m MODULE ARGS...`, the one form a fork can stand in for."""
    if len(argv) < 3 or argv[1] != "-m":
        return None
    try:
        same = os.path.samefile(argv[0], sys.executable)
    except OSError:
        return None
    return (argv[2], argv[3:]) if same else None


def server(preload: tuple[str, ...], environment: dict[str, str] | None = None,
           cwd: str | None = None) -> ForkServer:
    """This process's fork server for `preload` (one per process: a pool worker never shares its parent's).

    `environment` is what the server itself must be started with because a fork cannot add it later: a
    skewed clock's LD_PRELOAD and FAKETIME (testhost/impl/skew.py). Each such environment has a server of its own,
    whose children inherit libfaketime already loaded. So has each working directory (`cwd`, default this
    process's): the server imports its preload there, and its children start there."""
    cwd = cwd or os.getcwd()
    key = (os.getpid(), preload, tuple(sorted((environment or {}).items())), cwd)
    with _servers_lock:
        found = _servers.get(key)
        if found is None or not found.alive:
            found = _servers[key] = ForkServer(preload, environment=environment, cwd=cwd)
        return found


def servers() -> list[ForkServer]:
    """Every fork server this process started, live or ended (what the benchmarks count the CPU of)."""
    with _servers_lock:
        return list(_servers.values())


if __name__ == "__main__":
    _main()
