"""The fork server starts `python -m MODULE` implementations as a spawn would: same arguments, environment,
working directory, streams, session and exit status; and the TestHost signals the forked process directly."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from testhost.impl import forkserver
from testhost.impl.implementation import Implementation, launcher_for, set_launcher

PROBE = [sys.executable, "-m", "tests.adapters.probe", "first", "second"]


def _start_both(tmp_path, env_extra=None):
    env = {**os.environ, "PROBE": "seen", **(env_extra or {})}
    log = open(tmp_path / "stderr.log", "ab")
    forked = forkserver.server(("psycopg",)).start("tests.adapters.probe", ["first", "second"], env, log.fileno())
    spawned = subprocess.Popen(PROBE, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=env,
                               start_new_session=True)
    log.close()
    return forked, spawned


def _talk(process, *lines):
    first = json.loads(process.stdout.readline())
    replies = []
    for line in lines:
        process.stdin.write(f"{line}\n".encode())
        process.stdin.flush()
        if not line.startswith(("exit", "raise")):
            replies.append(json.loads(process.stdout.readline()))
    return first, replies


def test_a_forked_start_looks_to_the_implementation_like_a_spawned_one(tmp_path):
    forked, spawned = _start_both(tmp_path)
    seen = [_talk(p, "hello", "exit 7") for p in (forked, spawned)]
    assert [s[0].pop("psycopg_loaded") for s in seen] == [True, False]  # the preload, and nothing else, differs
    assert seen[0] == seen[1]
    first, replies = seen[0]
    assert first["argv"][0].endswith("probe.py") and first["argv"][1:] == ["first", "second"]
    assert first["cwd"] == os.getcwd() == first["path0"] and first["probe"] == "seen"
    assert first["session_leader"] and replies == [{"echo": "hello"}]
    assert first["own_modules"] == ["tests", "tests.adapters"], "only the packages `-m` imports, nothing preloaded"
    assert forked.wait(10) == spawned.wait(10) == 7


def test_an_uncaught_exception_exits_1_with_the_traceback_in_the_log(tmp_path):
    forked, spawned = _start_both(tmp_path)
    for process in (forked, spawned):
        _talk(process, "raise")
        assert process.wait(10) == 1
    assert (tmp_path / "stderr.log").read_text().count("RuntimeError: the probe was asked to fail") == 2


def test_kill_and_pause_reach_the_forked_process_itself(tmp_path):
    forked, spawned = _start_both(tmp_path)
    spawned.kill()
    spawned.wait()
    _talk(forked, "hello")
    forked.send_signal(signal.SIGSTOP)
    deadline = time.monotonic() + 5
    while open(f"/proc/{forked.pid}/stat").read().split(")")[1].split()[0] != "T":
        assert time.monotonic() < deadline, "SIGSTOP did not stop the forked process"
        time.sleep(0.01)
    forked.send_signal(signal.SIGCONT)
    forked.stdin.write(b"again\n")
    forked.stdin.flush()
    assert json.loads(forked.stdout.readline()) == {"echo": "again"}
    forked.send_signal(signal.SIGKILL)
    assert forked.wait(10) == -signal.SIGKILL and forked.poll() == -signal.SIGKILL
    forked.send_signal(signal.SIGKILL)  # a signal after the end reaches nobody (the pidfd is closed)


def test_a_preload_that_cannot_be_imported_is_a_clear_error(tmp_path):
    with pytest.raises(forkserver.ForkServerError, match="no_such_module_for_crashproof"):
        forkserver.ForkServer(("no_such_module_for_crashproof",))


def test_an_implementation_falls_back_to_spawn_when_the_fork_server_cannot_start(tmp_path, monkeypatch):
    monkeypatch.setattr("testhost.impl.implementation.PRELOAD", ("no_such_module_for_crashproof",))
    command = f"{sys.executable} -m reference.adapter"
    unreachable = "host=127.0.0.1 port=1 dbname=none"  # hello comes before any connection
    env = {"CRASHPROOF_RUNTIME_DSN": unreachable, "CRASHPROOF_DISPATCHER_DSN": unreachable}
    impl = Implementation(command, env, lambda *a: None, tmp_path / "impl.log").start()
    try:
        assert impl.launched_by == "spawn" and impl.hello["type"] == "hello"
    finally:
        impl.stop()


def test_a_dead_fork_server_is_replaced_and_its_children_count_as_ended(tmp_path):
    server = forkserver.server(("psycopg",))
    env = dict(os.environ)
    log = open(tmp_path / "stderr.log", "ab")
    child = server.start("tests.adapters.probe", [], env, log.fileno())
    json.loads(child.stdout.readline())
    server._process.kill()
    child.wait(10)
    assert child.poll() is not None and not server.alive
    replacement = forkserver.server(("psycopg",))
    assert replacement is not server
    again = replacement.start("tests.adapters.probe", [], env, log.fileno())
    assert json.loads(again.stdout.readline())["psycopg_loaded"]
    again.stdin.close()
    assert again.wait(10) == 0
    log.close()


def test_only_this_interpreter_running_a_module_is_forked():
    set_launcher("fork-server")
    assert launcher_for(f"{sys.executable} -m reference.adapter") == "fork-server"
    assert launcher_for(f"{sys.executable} tests/adapters/broken.py hang") == "spawn"
    assert launcher_for("/usr/bin/env python3 -m reference.adapter") == "spawn"
    assert launcher_for("java -jar impl.jar") == "spawn"
    set_launcher("spawn")
    try:
        assert launcher_for(f"{sys.executable} -m reference.adapter") == "spawn"
    finally:
        set_launcher("fork-server")
    with pytest.raises(ValueError, match="fork-server, spawn"):
        set_launcher("teleport")


def test_a_server_that_does_not_come_up_in_time_is_a_clear_error():
    started = time.monotonic()
    with pytest.raises(forkserver.ForkServerError, match="did not come up within 0.5 s"):
        forkserver.ForkServer(("tests.adapters.slow_import",), ready_timeout=0.5)
    assert time.monotonic() - started < 10


def test_a_hung_server_is_given_up_on_and_replaced(tmp_path):
    server = forkserver.ForkServer(("psycopg",), answer_timeout=0.5)
    os.kill(server._process.pid, signal.SIGSTOP)
    log = open(tmp_path / "stderr.log", "ab")
    with pytest.raises(forkserver.ForkServerError, match="did not answer within 0.5 s"):
        server.start("tests.adapters.probe", [], dict(os.environ), log.fileno())
    assert not server.alive
    with pytest.raises(forkserver.ForkServerError, match="gone"):
        server.start("tests.adapters.probe", [], dict(os.environ), log.fileno())
    log.close()


def test_a_module_is_compiled_once_in_the_server_and_again_when_its_file_changes(tmp_path, monkeypatch):
    """The server hands each child the code it compiled for the module's file, keyed like a bytecode cache by
    path, modification time and size: the same file runs the server's code, a changed one is compiled anew."""
    package = tmp_path / "compiledpkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    module = package / "say.py"
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    server = forkserver.server(("psycopg", "compiledpkg"))

    def run() -> str:
        with open(tmp_path / "stderr.log", "ab") as log:
            child = server.start("compiledpkg.say", [], {**os.environ}, log.fileno())
        said = child.stdout.readline().decode().strip()
        assert child.wait(10) == 0
        return said

    module.write_text("print('one')\n")
    assert run() == "one"
    stamp = module.stat()
    module.write_text("print('two')\n")  # same size: with the old stamp put back, only the cache can tell
    os.utime(module, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    assert run() == "one", "the child compiled the file itself instead of taking the server's code"
    module.write_text("print('three')\n")
    assert run() == "three"
