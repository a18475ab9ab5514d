"""The worker pool of a run: the worlds side by side (testhost/runs/workers.py), the cases handed out among them,
a worker's death survived, and a stop signal or --fail-fast turned into RunStopped."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from multiprocessing import resource_tracker
from multiprocessing.context import SpawnContext, SpawnProcess
from typing import Callable, Iterator

from reports import counted

from scenarios.matrix import CasePlan

from testhost.case.outcome import CaseOutcome
from testhost.errors import TestHostError
from testhost.world.processes import start_resource_tracker

from . import workers
from .options import Options
from .workers import STOP_SIGNALS


class RunStopped(Exception):
    """The run stops before its end: a stop signal (signum) or --fail-fast (signum None)."""

    def __init__(self, signum: int | None = None, why: str = "", harness: bool = False):
        super().__init__(why or (signal.Signals(signum).name if signum else "stopped"))
        self.signum = signum
        self.why = why
        self.harness = harness  # the harness failed (exit 3), not the implementation
        self.unfinished: list[tuple[CasePlan, str]] = []  # plans not finished, with why


def harness_result(future, what: str):
    """A controller step's result; a worker that died or an unexpected exception stops the run as the harness's
    failure (a one-line error and a partial report, not a traceback). A one-line error of its own passes."""
    try:
        return future.result()
    except TestHostError:
        raise
    except BrokenProcessPool:
        raise RunStopped(why=f"the harness failed: the worker process died during {what}", harness=True) from None
    except Exception as exc:  # noqa: BLE001 - reported in one line, the run stops
        raise RunStopped(why=f"the harness failed during {what}: {type(exc).__name__}: {exc}", harness=True) from None


class QuietSpawnProcess(SpawnProcess):
    """A spawned process that starts with SIGINT blocked. A terminal's interrupt goes to the whole group, and a
    child still importing (multiprocessing's spawn_main) would die of it with a KeyboardInterrupt traceback on the
    run's stderr; blocked, it waits until the worker's own handlers are in (workers.start unblocks it). The block
    is inherited across the spawn's exec, as multiprocessing's resource tracker relies on."""

    @staticmethod
    def _Popen(process_obj):
        # The tracker's first start unblocks SIGINT on its way out: it must not happen inside the block.
        resource_tracker.ensure_running()
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            return SpawnProcess._Popen(process_obj)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class QuietSpawnContext(SpawnContext):
    """multiprocessing's spawn context, its processes started with SIGINT blocked (QuietSpawnProcess)."""

    Process = QuietSpawnProcess


def spawn_context() -> QuietSpawnContext:
    """The context every worker (and explore's queue manager) is spawned with."""
    return QuietSpawnContext()


class Pool:
    """The worker pool of a run, kept across its phases; renewed only when a worker dies."""

    def __init__(self, factory: Callable[[], ProcessPoolExecutor], jobs: int = 1):
        self.factory = factory
        self.jobs = jobs  # the workers of each executor the factory makes (its max_workers)
        self.executor = factory()
        self.signals: StopSignals | None = None  # the run's, once it watches this pool (StopSignals.pool)

    def submit(self, fn: Callable, *args) -> Future:
        """The executor's submit, with a stop signal held while it may be starting a worker: RunStopped raised in
        the middle of a start would leave a worker the executor has not registered, which abort() cannot reach.
        A signal that came meanwhile is raised once the work is submitted."""
        signals = self.signals or NO_SIGNALS
        with signals.held():
            future = self.executor.submit(fn, *args)
        signals.check()
        return future

    def renew(self) -> None:
        self._let_go(self.executor)
        self.executor = self.factory()

    def close(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)

    def _workers(self) -> list:
        # The executor's worker processes: concurrent.futures has no public way to them.
        return list((getattr(self.executor, "_processes", None) or {}).values())

    def terminate(self) -> None:
        """SIGTERM every worker: each kills its implementations and its world, then exits."""
        for worker in self._workers():
            try:
                os.kill(worker.pid, signal.SIGTERM)
            except (ProcessLookupError, TypeError):
                pass

    def abort(self, timeout: float = 60.0) -> None:
        """Stop every worker now and wait for each to have torn its world down."""
        processes = self._workers()
        self.terminate()
        deadline = time.monotonic() + timeout
        for worker in processes:
            worker.join(max(0.0, deadline - time.monotonic()))
            if worker.is_alive():
                worker.kill()  # its servers die with it (parent-death signal); nothing else is left to ask
                worker.join(5)
        self._let_go(self.executor)

    @staticmethod
    def _let_go(executor, timeout: float = 10.0) -> None:
        """Shut an executor down without waiting for its work, but for its manager thread: that thread closes the
        executor's wake-up pipe as it ends, and one still ending when the interpreter exits races the exit hook's
        write to that pipe (CPython 3.11: a `Bad file descriptor` traceback after a run stopped cleanly)."""
        manager = getattr(executor, "_executor_manager_thread", None)  # shutdown() forgets it
        executor.shutdown(wait=False, cancel_futures=True)
        if manager is not None:
            manager.join(timeout)


class StopSignals:
    """While armed, a stop signal (SIGTERM, SIGINT, SIGHUP) raises RunStopped in the main thread; a second one
    forces the exit at once. Installed only in the main thread; the previous handlers come back on exit."""

    def __init__(self):
        self.signum: int | None = None
        self.armed = False
        self._pool: Pool | None = None
        self._held = 0  # sections where a signal is only recorded (Pool.submit), nested
        self._previous: dict = {}

    @property
    def pool(self) -> Pool | None:
        """The run's pool: told to stop its workers when a second signal forces the exit."""
        return self._pool

    @pool.setter
    def pool(self, pool: Pool | None) -> None:
        self._pool = pool
        if pool is not None:
            pool.signals = self

    @contextmanager
    def held(self) -> Iterator[None]:
        """A section a stop signal must not interrupt: inside it the signal is recorded, for check() to raise."""
        self._held += 1
        try:
            yield
        finally:
            self._held -= 1

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            start_resource_tracker()  # before any worker, and immune to the group's SIGHUP
            for number in STOP_SIGNALS:
                self._previous[number] = signal.signal(number, self._handle)
        return self

    def __exit__(self, *exc_info) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)

    def _handle(self, signum: int, _frame) -> None:
        if self.signum is not None:
            print(f"crashproof: second signal ({signal.Signals(signum).name}): exiting now, without clean-up",
                  file=sys.stderr, flush=True)
            if self.pool is not None:
                self.pool.terminate()  # each worker still kills its own world and implementations
            os._exit(128 + signum)
        self.signum = signum
        if self.armed and not self._held:
            raise RunStopped(signum)

    def check(self) -> None:
        """Raise RunStopped when a signal came while the handler could not raise."""
        if self.signum is not None:
            raise RunStopped(self.signum)


NO_SIGNALS = StopSignals()


class Progress:
    """Cases done, failures so far and time left, on one refreshed line (or every tenth when not a terminal)."""

    def __init__(self, total: int, emit: Callable[[str], None], label: str):
        self.total, self.emit, self.label = total, emit, label
        self.done = self.failed = 0
        self.started = time.monotonic()
        self.tty = sys.stderr.isatty()
        self._last_tenth = -1

    def drop(self) -> None:
        """A case that will not run after all (run_cases was told to skip it): the total shrinks by one."""
        self.total -= 1

    def update(self, verdict: str) -> None:
        self.done += 1
        self.failed += verdict in ("fail", "error")
        elapsed = time.monotonic() - self.started
        left = elapsed / self.done * (self.total - self.done)
        width = 30
        bar = "=" * int(width * self.done / max(self.total, 1))
        line = (f"{self.label} [{bar:<{width}}] {self.done}/{counted(self.total, 'case')}, {self.failed} failed, "
                f"~{int(left)}s left")
        tenth = int(10 * self.done / max(self.total, 1))
        if self.tty:
            print("\r" + line, end="" if self.done < self.total else "\n", file=sys.stderr, flush=True)
        elif tenth != self._last_tenth or self.done == self.total:
            self._last_tenth = tenth
            self.emit(line)


def _error_case(plan: CasePlan, reason: str) -> dict:
    return CaseOutcome(plan, "error", reason).to_json()


def run_cases(pool: Pool, plans: list[tuple[CasePlan, dict | None]], command: str, log_dir: str,
              progress: Progress, worker=None, results: list[dict] | None = None, fail_fast: bool = False,
              signals: StopSignals = NO_SIGNALS, skip: Callable[[CasePlan], bool] | None = None,
              finished: Callable[[dict], None] | None = None) -> list[dict]:
    """Run every plan; a worker that dies takes only its case with it (verdict error), the pool is renewed.

    Finished cases go to `results` (and to `finished`) as they finish; a plan that `skip` answers true for when its
    turn comes is not run. A stop (a signal, or the first failed case with fail_fast) raises RunStopped naming the
    plans not finished; the caller aborts the pool."""
    worker = worker or workers.run_plan
    results = [] if results is None else results
    queue = list(plans)
    in_flight: dict = {}
    # When a worker dies every case in flight sees the pool break, and which one killed it cannot be told:
    # each gets one more run, alone, on a fresh pool; only a case that breaks the pool again gets `error`.
    broke_once: set[str] = set()
    try:
        while queue or in_flight:
            signals.check()
            while queue and len(in_flight) < pool.jobs * 2:
                plan, baseline = queue[0]
                if skip is not None and skip(plan):
                    queue.pop(0)
                    progress.drop()
                    continue
                suspect_running = any(p.id in broke_once for p, _ in in_flight.values())
                if suspect_running or (plan.id in broke_once and in_flight):
                    break  # a case under suspicion runs alone, so a second break names it
                future = pool.submit(worker, plan, command, log_dir, baseline)  # a stop here: the plan is not run
                in_flight[future] = queue.pop(0)
            done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
            signals.check()  # a worker ended by a stop signal is no crash to retry
            broken = False
            for future in done:
                plan, baseline = in_flight.pop(future)
                try:
                    result = future.result()
                except BrokenProcessPool:
                    broken = True
                    if plan.id not in broke_once:
                        broke_once.add(plan.id)
                        queue.insert(0, (plan, baseline))
                        continue
                    result = {"case": _error_case(plan, "the worker process running this case died"),
                              "baseline": None}
                except Exception as exc:  # noqa: BLE001 - a harness failure is this case's error
                    result = {"case": _error_case(plan, f"{type(exc).__name__}: {exc}"), "baseline": None}
                results.append({**result, "plan": plan})
                if finished is not None:
                    finished(results[-1])
                progress.update(result["case"]["verdict"])
                if fail_fast and result["case"]["verdict"] in ("fail", "error"):
                    raise RunStopped(why=f"--fail-fast: {plan.id} ended {result['case']['verdict']}")
            if broken:
                queue[:0] = list(in_flight.values())  # not finished when the pool broke: run them again
                in_flight.clear()
                pool.renew()
    except RunStopped as stop:
        stop.unfinished += [(p, "abandoned: the run stopped while this case ran") for p, _ in in_flight.values()]
        stop.unfinished += [(p, "not run: the run stopped before this case") for p, _ in queue]
        raise
    return results


def worker_mode(options: Options) -> dict:
    """What each worker's world is (testhost/runs/workers.py start): where its server runs, how implementations
    start, and the catalog its cases name."""
    return {"dsn": options.dsn, "docker": options.docker, "launcher": options.launcher,
            "catalog": [str(folder) for folder in options.catalog], "with_builtin": options.with_builtin}


def executors(jobs: int, mode: dict, context=None) -> Callable[[], ProcessPoolExecutor]:
    """A factory of executors of `jobs` spawned workers, each starting its world as `mode` says."""
    context = context or spawn_context()
    return lambda: ProcessPoolExecutor(max_workers=jobs, mp_context=context, initializer=workers.start,
                                       initargs=(mode,))


def new_pool(options: Options) -> Pool:
    """This run's pool: --jobs worlds side by side."""
    return Pool(executors(options.jobs, worker_mode(options)), jobs=options.jobs)
