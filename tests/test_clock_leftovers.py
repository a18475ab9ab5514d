"""libfaketime's /dev/shm objects of processes that are gone are removed with their world; a live process's stay."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from testhost.world import orphans
from testhost.world.clock import SHARED_MEMORY, remove_clock_leftovers
from testhost.world.components import find_libfaketime


def _gone_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def _pair(shared: Path, pid: int) -> list[Path]:
    return [shared / f"faketime_shm_{pid}", shared / f"sem.faketime_sem_{pid}"]


def test_the_pairs_of_gone_processes_of_the_owners_go_and_the_rest_stay(tmp_path):
    gone, alive = _gone_pid(), os.getpid()
    for path in [*_pair(tmp_path, gone), *_pair(tmp_path, alive), tmp_path / "sem.mp-abc",
                 tmp_path / f"faketime_shm_{gone}.tmp"]:
        path.write_bytes(b"x")
    removed = remove_clock_leftovers({os.geteuid()}, tmp_path)
    assert removed == [f"faketime_shm_{gone}", f"sem.faketime_sem_{gone}"]  # the memory before the semaphore
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"faketime_shm_{alive}", f"sem.faketime_sem_{alive}", "sem.mp-abc", f"faketime_shm_{gone}.tmp"])


def test_the_pairs_of_another_owner_stay(tmp_path):
    gone = _gone_pid()
    for path in _pair(tmp_path, gone):
        path.write_bytes(b"x")
    assert remove_clock_leftovers({os.geteuid() + 1}, tmp_path) == []
    assert all(path.exists() for path in _pair(tmp_path, gone))


def test_a_folder_that_cannot_be_read_removes_nothing(tmp_path):
    assert remove_clock_leftovers({os.geteuid()}, tmp_path / "no-such-folder") == []


def _preloaded_sleep() -> subprocess.Popen:
    """A process that loads libfaketime first, as a skewed implementation or a world's server does."""
    env = {**os.environ, "LD_PRELOAD": str(find_libfaketime()), "FAKETIME": "+0", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
    env.pop("FAKETIME_SHARED", None)
    process = subprocess.Popen(["sleep", "60"], env=env)
    deadline = time.monotonic() + 10
    while not all(p.exists() for p in _pair(SHARED_MEMORY, process.pid)) and time.monotonic() < deadline:
        time.sleep(0.01)
    return process


# Alone: a world removed by a test beside it would take the killed pair before the test sees it left.
@pytest.mark.alone
def test_a_killed_preloaded_process_leaves_its_pair_which_the_world_s_removal_takes(tmp_path):
    live, killed = _preloaded_sleep(), _preloaded_sleep()
    try:
        assert all(p.exists() for p in _pair(SHARED_MEMORY, killed.pid)), "libfaketime made no pair"
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        assert all(p.exists() for p in _pair(SHARED_MEMORY, killed.pid)), "a killed process keeps its pair"
        world = tmp_path / "certify-gone"
        world.mkdir()
        orphans.write_owner(world)
        orphans.remove_world(world)
        assert not world.exists()
        assert not any(p.exists() for p in _pair(SHARED_MEMORY, killed.pid))
        assert all(p.exists() for p in _pair(SHARED_MEMORY, live.pid)), "a live process's pair was taken"
    finally:
        for process in (live, killed):
            process.kill()
            process.wait()
        remove_clock_leftovers({os.geteuid()})  # the test's own, killed too


def test_a_pair_whose_pid_now_names_a_later_process_goes(tmp_path):
    """A pid reused by a process started after the pair was made: the pair is not that process's."""
    later = subprocess.Popen(["sleep", "60"])
    try:
        for path in _pair(tmp_path, later.pid):
            path.write_bytes(b"x")
            os.utime(path, (time.time() - 60, time.time() - 60))  # made a minute before `later` started
        assert remove_clock_leftovers({os.geteuid()}, tmp_path) == [f"faketime_shm_{later.pid}",
                                                                      f"sem.faketime_sem_{later.pid}"]
    finally:
        later.kill()
        later.wait()
