"""A run killed with SIGKILL (a CI runner's timeout or cancel) leaves nothing behind: no process and no world of
it within 10 s, whatever it was doing; a world whose owner is gone is swept by the next one."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from testhost.world import orphans
from testhost.world.processes import group_members, is_alive, pids_with_cwd_or_arg

# Its 10 s deadlines are what an idle machine must meet; with the suite's own processes beside it a world's removal
# took longer (docs/ci.md, "Under load"), so `make test` runs it alone after the parallel share.
pytestmark = [pytest.mark.world, pytest.mark.alone]

GONE_WITHIN_S = 10.0


@pytest.fixture(scope="module")
def home():
    """One workspace for this module's runs (its templates made once): its worlds folder must be empty after each.
    Under /tmp itself, since the server user cannot reach pytest's own temporary folders."""
    root = Path(tempfile.mkdtemp(prefix="crashproof-killed-", dir="/tmp"))
    os.chmod(root, 0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def started():
    """The runs a test started; one the test did not kill (it failed first) is stopped at teardown."""
    runs: list[subprocess.Popen] = []
    yield runs
    for run in runs:
        if run.poll() is None:
            run.terminate()  # its own clean stop: workers and worlds go with it
            try:
                run.wait(60)
            except subprocess.TimeoutExpired:
                run.kill()


def _start(started: list, home: Path, report: Path, *argv: str) -> subprocess.Popen:
    env = {**os.environ, "CRASHPROOF_HOME": str(home)}
    env.pop(orphans.RUN_VARIABLE, None)
    started.append(run := subprocess.Popen([sys.executable, "-m", "testhost.cli", *argv, "--report-dir", str(report)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True))
    return run


def _wait_for_line(run: subprocess.Popen, wanted: str, timeout: float = 180.0) -> list[str]:
    """Read the run's output until a line contains `wanted` (the moment to kill it)."""
    seen = []
    deadline = time.monotonic() + timeout
    for line in run.stdout:
        seen.append(line)
        if wanted in line:
            return seen
        assert time.monotonic() < deadline, f"no line with {wanted!r} within {timeout}s:\n{''.join(seen[-20:])}"
    pytest.fail(f"the run ended (rc {run.wait()}) before a line with {wanted!r}:\n{''.join(seen[-30:])}")


def _shared_memory() -> set[str]:
    """The /dev/shm objects a run can leave when its processes are killed: multiprocessing's named semaphores (its
    resource tracker unlinks them once their users are gone), PostgreSQL's POSIX dynamic shared memory and
    libfaketime's pair of each process that preloads it (a world's removal takes those of gone processes)."""
    return {name for name in os.listdir("/dev/shm")
            if name.startswith(("sem.mp-", "PostgreSQL.", "faketime_shm_", "sem.faketime_sem_"))}


def _survivors(home: Path, group: int, run: str, shared_before: set[str]) -> dict[str, list]:
    worlds = home / "worlds"
    return {"process group": group_members(group),
            "new objects in /dev/shm": sorted(_shared_memory() - shared_before),
            "command line or working directory under CRASHPROOF_HOME": pids_with_cwd_or_arg(str(home)),
            "environment tagged with the run": orphans.processes_of_run(run),
            "world folders": sorted(p.name for p in worlds.iterdir()) if worlds.exists() else []}


def _kill_and_look(home: Path, run: subprocess.Popen, shared_before: set[str], *, running: bool = True
                   ) -> dict[str, list]:
    """SIGKILL the controller; what of its run is still there GONE_WITHIN_S later (or as soon as nothing is).
    `shared_before`: /dev/shm's objects before the run started (this module runs alone, so any new one is its)."""
    tag = orphans.process_id(run.pid)
    if running:
        assert pids_with_cwd_or_arg(str(home)), "the run's worlds should be up before the kill"
        assert orphans.processes_of_run(tag), "the run's processes should carry its tag"
    run.send_signal(signal.SIGKILL)
    run.wait()
    deadline = time.monotonic() + GONE_WITHIN_S
    while any((left := _survivors(home, run.pid, tag, shared_before)).values()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


# A skewed scenario in each: its implementation and fork server preload libfaketime, whose objects a kill leaves.
CERTIFY = ["certify", "--scenario", "at-*,every-anchored,every-skewed-ahead", "--jobs", "2"]
SMALL = ["certify", "--scenario", "at-single,every-skewed-ahead", "--fault", "kill", "--jobs", "2"]


@pytest.mark.parametrize("moment, line", [("census", "fault-free"), ("matrix", "faulted ["),
                                          ("report", "writing the report")])
def test_a_certify_killed_at_any_moment_leaves_no_process_and_no_world(home, started, tmp_path, moment, line):
    # the report's moment needs only a run that gets there, the others one still running when its line comes
    shared_before = _shared_memory()
    run = _start(started, home, tmp_path / "report", *(SMALL if moment == "report" else CERTIFY))
    _wait_for_line(run, line)
    # writing the report, the workers are done and gone: what is left to find is what the controller started
    left = _kill_and_look(home, run, shared_before, running=moment != "report")
    assert not any(left.values()), f"left behind {GONE_WITHIN_S}s after SIGKILL at the {moment}: {left}"


def test_a_certify_that_ends_normally_leaves_nothing_in_dev_shm(home, started, tmp_path):
    """One job runs its cases in the controller, whose world goes before its skewed fork server ends: the watcher
    ends that server as the controller exits, then takes its clock objects."""
    shared_before = _shared_memory()
    run = _start(started, home, tmp_path / "report", "certify", "--scenario", "at-single,every-skewed-ahead", "--fault",
                 "kill", "--jobs", "1")
    output = run.communicate(timeout=300)[0]
    assert run.returncode == 0, output[-3000:]
    deadline = time.monotonic() + GONE_WITHIN_S  # the controller waits for its watcher, but not forever
    while (left := sorted(_shared_memory() - shared_before)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left == []


def test_an_explore_killed_mid_program_leaves_no_process_and_no_world(home, started, tmp_path):
    shared_before = _shared_memory()
    run = _start(started, home, tmp_path / "found", "explore", "--jobs", "2", "--max-examples", "200", "--hostile", "0")
    _wait_for_line(run, "steps,")  # its first progress line: programs are running
    left = _kill_and_look(home, run, shared_before)
    assert not any(left.values()), f"left behind {GONE_WITHIN_S}s after SIGKILL of explore: {left}"


def test_a_mutants_run_killed_mid_matrix_leaves_no_process_and_no_world(home, started, tmp_path):
    shared_before = _shared_memory()
    run = _start(started, home, tmp_path / "mutants", "mutants", "--jobs", "2", "--slice-only", "--scenario", "at-*")
    _wait_for_line(run, "mutants: ")  # the mutants' own cases are running
    left = _kill_and_look(home, run, shared_before)
    assert not any(left.values()), f"left behind {GONE_WITHIN_S}s after SIGKILL of mutants: {left}"


def _dead_process_id() -> str:
    gone = subprocess.Popen(["true"])
    ident = orphans.process_id(gone.pid)
    gone.wait()
    return ident


def test_the_next_world_sweeps_a_world_whose_owner_is_gone_and_keeps_the_others(home):
    from testhost.world.workspace import Workspace
    workspace = Workspace(home / "sweep")
    worlds = workspace.root / "worlds"
    abandoned, detached, alive, unowned = (worlds / name for name in ("abandoned", "detached", "alive", "unowned"))
    for folder in (abandoned, detached, alive, unowned):
        folder.mkdir()
    dead = _dead_process_id()
    (abandoned / orphans.OWNER_FILE).write_text(json.dumps({"owner": dead, "runs": [], "detached": False}))
    (detached / orphans.OWNER_FILE).write_text(json.dumps({"owner": dead, "runs": [], "detached": True}))
    (alive / orphans.OWNER_FILE).write_text(json.dumps({"owner": orphans.process_id(), "runs": [], "detached": False}))
    inside = subprocess.Popen(["sleep", "300"], cwd=abandoned)  # a server the dead owner left running in its world
    try:
        made = workspace.new_world_dir("next")
        assert not abandoned.exists()
        deadline = time.monotonic() + GONE_WITHIN_S
        while inside.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert inside.poll() is not None, "the process working in the abandoned world was not ended"
        assert detached.exists() and alive.exists() and unowned.exists() and made.exists()
        assert json.loads((made / orphans.OWNER_FILE).read_text())["owner"] == orphans.process_id()
    finally:
        if inside.poll() is None:
            inside.kill()


WATCHED = """
import subprocess, sys, time
from pathlib import Path
from testhost.world import orphans
worlds = Path(sys.argv[1])
with orphans.watched_run(worlds):
    folder = worlds / "of-the-run"
    folder.mkdir()
    orphans.write_owner(folder)
    subprocess.Popen(["sleep", "300"], start_new_session=True)  # its own session: no group kill reaches it
    print("ready", flush=True)
    time.sleep(300)
"""


def test_the_watcher_ends_every_tagged_process_and_the_run_s_worlds_when_its_controller_is_killed(tmp_path):
    worlds = tmp_path / "worlds"
    worlds.mkdir()
    env = {k: v for k, v in os.environ.items() if k != orphans.RUN_VARIABLE}
    controller = subprocess.Popen([sys.executable, "-c", WATCHED, str(worlds)], stdout=subprocess.PIPE, text=True,
                                  env=env)
    assert controller.stdout.readline().strip() == "ready"
    tag = orphans.process_id(controller.pid)
    tagged = orphans.processes_of_run(tag)
    assert tagged and all(is_alive(pid) for pid in tagged)
    controller.send_signal(signal.SIGKILL)
    controller.wait()
    deadline = time.monotonic() + GONE_WITHIN_S
    while (orphans.processes_of_run(tag) or (worlds / "of-the-run").exists()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert orphans.processes_of_run(tag) == [] and not (worlds / "of-the-run").exists()


def test_a_run_that_ends_normally_leaves_its_environment_as_it_was(tmp_path):
    before = os.environ.get(orphans.RUN_VARIABLE)
    with orphans.watched_run(tmp_path) as run:
        assert os.environ[orphans.RUN_VARIABLE].split(":")[-1] == run
        with orphans.watched_run(tmp_path) as nested:  # the same controller again: one watcher is enough
            assert nested == run and os.environ[orphans.RUN_VARIABLE].count(run) == 1
    assert os.environ.get(orphans.RUN_VARIABLE) == before


def test_a_controller_run_in_its_callers_process_leaves_that_process_its_resource_tracker(tmp_path):
    """testhost.cli.main called in a process of its own caller (a library user, a test) tags what it starts for
    its watcher. multiprocessing's resource tracker, first started by the run, is that process's: the watcher's
    sweep must leave it, or the names a later run registers have no tracker to unlink them (and Python warns that
    it "died unexpectedly")."""
    script = ("import os, sys\n"
              "from testhost.cli import main\n"
              "from testhost.world.processes import children_of\n"
              "assert main(['mutants', '--mutant', 'no-such-*', '--report-dir', sys.argv[1]]) == 2\n"
              "trackers = [p for p in children_of(os.getpid())\n"
              "            if b'resource_tracker' in open(f'/proc/{p}/cmdline', 'rb').read()]\n"
              "print(len(trackers), [open(f'/proc/{p}/environ', 'rb').read().count(b'CRASHPROOF_RUN=') for p in trackers])\n")
    env = {**os.environ, "CRASHPROOF_HOME": str(tmp_path / "home")}
    env.pop(orphans.RUN_VARIABLE, None)
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "report")], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "[0]"], done.stdout + done.stderr  # alive after the sweep, and untagged


def test_a_controller_started_from_another_thread_still_starts_the_resource_tracker():
    """Only the main thread may set a signal handler, so from any other thread (a library user's) the tracker is
    started without the SIGHUP guard rather than not at all."""
    # multiprocessing names its tracker's pid. Its start returns between the fork and the exec, while the tracker's
    # command line is still this script's, so the child waits (bounded) for the exec rather than reading it at once.
    # The mark is built from two halves so that this script's own command line never holds it.
    script = ("import os, threading, time\n"
              "from multiprocessing import resource_tracker\n"
              "from testhost.world.processes import children_of, start_resource_tracker\n"
              "errors = []\n"
              "def start():\n"
              "    try:\n"
              "        start_resource_tracker()\n"
              "    except Exception as exc:\n"
              "        errors.append(repr(exc))\n"
              "thread = threading.Thread(target=start)\n"
              "thread.start()\n"
              "thread.join()\n"
              "tracker = resource_tracker._resource_tracker._pid\n"
              "mark = b'multiprocessing.resource_tracker' + b' import main'\n"
              "deadline = time.monotonic() + 10\n"
              "while tracker and time.monotonic() < deadline and mark not in open(f'/proc/{tracker}/cmdline', 'rb').read():\n"
              "    time.sleep(0.01)\n"
              "running = bool(tracker) and mark in open(f'/proc/{tracker}/cmdline', 'rb').read()\n"
              "print(int(running and tracker in children_of(os.getpid())), errors)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.split(maxsplit=1) == ["1", "[]\n"], done.stdout + done.stderr


def test_a_world_removal_cut_short_still_leaves_the_owner_record(tmp_path, monkeypatch):
    world = tmp_path / "certify-cut"
    (world / "data" / "base").mkdir(parents=True)
    (world / "toxiproxy.log").write_text("x")
    orphans.write_owner(world)

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # the worker dies in the middle of its teardown
    monkeypatch.setattr(orphans.shutil, "rmtree", killed)
    with pytest.raises(KeyboardInterrupt):
        orphans.remove_world(world)
    assert (world / orphans.OWNER_FILE).exists(), "a half-removed world must still say whose it is"
    monkeypatch.undo()
    orphans.remove_world(world)
    assert not world.exists()

