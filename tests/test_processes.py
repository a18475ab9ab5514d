"""Reading a process's children from /proc: a thread that ends while they are read does not hide them."""

from __future__ import annotations

import os
import subprocess
import threading

import pytest

from testhost.world import processes


@pytest.fixture
def child():
    """A child of this process, started from a thread of its own, so it sits on that thread's list."""
    started: list[subprocess.Popen] = []
    thread = threading.Thread(target=lambda: started.append(subprocess.Popen(["sleep", "60"])))
    thread.start()
    thread.join()
    yield started[0].pid
    started[0].kill()
    started[0].wait()


def _threads_that_end(monkeypatch, reads_with_a_ghost: int) -> None:
    """The first reads of the thread listing name a thread that is gone before its list is read."""
    real_listdir = os.listdir
    seen = {"task": 0}

    def listdir(path):
        names = real_listdir(path)
        if str(path).endswith("/task"):
            seen["task"] += 1
            if seen["task"] <= reads_with_a_ghost:
                return [*names, "999999999"]
        return names
    monkeypatch.setattr(processes.os, "listdir", listdir)


def test_children_of_finds_a_child_started_from_a_thread_that_has_ended(child):
    assert child in processes.children_of(os.getpid())


def test_a_thread_ending_during_the_read_makes_it_read_again(child, monkeypatch):
    _threads_that_end(monkeypatch, reads_with_a_ghost=1)
    assert child in processes.children_of(os.getpid())


def test_threads_that_keep_ending_fall_back_to_the_scan(child, monkeypatch):
    _threads_that_end(monkeypatch, reads_with_a_ghost=10 * processes._CHILDREN_READS)
    assert child in processes.children_of(os.getpid())


def test_a_process_that_is_gone_has_no_children():
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert processes.children_of(gone.pid) == []
