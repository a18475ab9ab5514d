"""Stop signals around a worker's start: a group interrupt cannot kill a worker still importing with a traceback,
the worker's handler still sees it, and a controller's stop never lands in the middle of starting a worker."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import popen_spawn_posix

import pytest

from testhost.runs import workers
from testhost.runs.pool import Pool, RunStopped, StopSignals, spawn_context

PENDING_WAIT_S = 30.0


def _wait_for_pending_interrupt() -> bool:
    deadline = time.monotonic() + PENDING_WAIT_S
    while signal.SIGINT not in signal.sigpending():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _child_holds_the_interrupt() -> None:
    """Exit 0 when the SIGINT sent during this process's start is still pending here, unhandled."""
    os._exit(0 if _wait_for_pending_interrupt() else 3)


def _exit_naming(signum: int, _frame) -> None:
    os._exit(100 + signum)


def _child_takes_the_stop_signals() -> None:
    """Once the interrupt is pending, hand the stop signals over as a worker's start does: the handler must run."""
    if not _wait_for_pending_interrupt():
        os._exit(3)
    workers.take_stop_signals(_exit_naming)
    os._exit(4)  # the pending interrupt never reached the handler


def _exec_done(pid: int) -> bool:
    """Whether the spawned child runs its own interpreter's command line yet (spawn forks, then execs)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return b"--multiprocessing-fork" in cmdline.read()
    except OSError:
        return True  # gone: the join below says how it ended


def _interrupted_at_start(context, target) -> int:
    child = context.Process(target=target)
    child.start()
    # Once the child has exec'd, long before the spawned interpreter has imported anything: between the fork and the
    # exec the child still has this process's handler, which would take the signal and be replaced by the exec.
    deadline = time.monotonic() + PENDING_WAIT_S
    while not _exec_done(child.pid):
        assert time.monotonic() < deadline, "the spawned child never exec'd"
        time.sleep(0.0005)
    os.kill(child.pid, signal.SIGINT)
    child.join(60)
    assert child.exitcode is not None, "the child neither exited nor died"
    return child.exitcode


def test_a_worker_interrupted_while_it_starts_holds_the_signal_instead_of_dying_with_a_traceback():
    assert _interrupted_at_start(spawn_context(), _child_holds_the_interrupt) == 0
    # What the plain spawn context does, and what tore a group-SIGINT run's stderr with a KeyboardInterrupt
    # traceback from multiprocessing's spawn_main: it does not hold the interrupt. Mostly it ends the child before
    # its target runs (1, -2); twice in a loaded suite the child's target ran and waited for it in vain (3), the
    # interrupt lost (the cause is not established: Python prints and drops one raised inside a finalizer or a
    # callback, for one), never pending.
    assert _interrupted_at_start(multiprocessing.get_context("spawn"), _child_holds_the_interrupt) in (1, -2, 3)


def test_the_interrupt_held_at_start_reaches_the_workers_handler_once_it_is_in():
    assert _interrupted_at_start(spawn_context(), _child_takes_the_stop_signals) == 100 + signal.SIGINT


@pytest.fixture
def interrupt_inside_the_spawn(monkeypatch):
    """Every spawn of a worker sends this (main) thread a SIGINT in its middle, while the start blocks it."""
    spawn = popen_spawn_posix.Popen
    main = threading.main_thread().ident

    def interrupted(process_obj):
        signal.pthread_kill(main, signal.SIGINT)
        return spawn(process_obj)

    monkeypatch.setattr(popen_spawn_posix, "Popen", interrupted)


def test_a_stop_signal_during_a_workers_start_is_raised_after_the_worker_is_registered(interrupt_inside_the_spawn):
    with StopSignals() as signals:
        pool = signals.pool = Pool(lambda: ProcessPoolExecutor(max_workers=1, mp_context=spawn_context()))
        signals.armed = True
        try:
            with pytest.raises(RunStopped) as stopped:
                pool.submit(abs, -3)
            assert stopped.value.signum == signal.SIGINT
            # abort() reaches every worker the executor knows: the one being started when the signal came is one
            started = pool._workers()
            assert len(started) == 1
        finally:
            signals.armed = False
            pool.abort(timeout=30)
    assert not started[0].is_alive()
