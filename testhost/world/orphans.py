"""What a killed run leaves behind: a watcher that ends the run's processes when its controller dies, and a
sweep of the worlds whose owner is gone.

A controller (`certify`, `explore`, `mutants`) tags its run: every process started after it (workers,
PostgreSQL, Toxiproxy, fork servers, implementations) inherits `CRASHPROOF_RUN` in its environment, the ids of
the runs it belongs to, innermost last. An id is the controller's pid and start time, so it is alive exactly while
that controller is. The watcher is a small process in a session of its own (a group kill of the controller's
group does not reach it) holding the read end of a pipe only the controller writes to: when the controller ends,
in any way, the pipe reads end-of-file and the watcher stops and kills every process that carries the run's id,
then removes the run's world folders. A world folder also records its owner (`owner.json`), so the next world
started in the same workspace removes a folder whose owner is gone, with any process still inside it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from .clock import remove_clock_leftovers
from .processes import (is_alive, pids_with_cwd_or_arg, signal_quietly, start_resource_tracker, start_ticks,
                        wait_gone)

RUN_VARIABLE = "CRASHPROOF_RUN"
OWNER_FILE = "owner.json"
# How long a world's removal goes on ending what still writes in it before it leaves the rest to a sweep.
REMOVE_WITHIN_S = 10.0
# Threads that unlink a world's files side by side (remove_tree).
UNLINK_THREADS = 16
_ENVIRON_KEY = RUN_VARIABLE.encode() + b"="


def process_id(pid: int | None = None) -> str:
    """`PID-STARTTICKS`: a process's name that a later process given the same pid does not share."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}-{start_ticks(pid)}"


def id_alive(ident: str) -> bool:
    """True while the process named by `process_id` still runs."""
    try:
        pid, ticks = ident.split("-", 1)
        return is_alive(int(pid)) and str(start_ticks(int(pid))) == ticks
    except ValueError:
        return False


def runs_of(pid: int) -> list[str]:
    """The run ids a process carries in the environment it was started with; [] when none or unreadable."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as environ:
            entries = environ.read().split(b"\0")
    except OSError:
        return []
    for entry in entries:
        if entry.startswith(_ENVIRON_KEY):
            return [ident for ident in entry[len(_ENVIRON_KEY):].decode("ascii", "replace").split(":") if ident]
    return []


def processes_of_run(run: str) -> list[int]:
    """Live processes (not this one) that carry `run` among their run ids."""
    me = os.getpid()
    return [int(entry) for entry in os.listdir("/proc")
            if entry.isdigit() and int(entry) != me and run in runs_of(int(entry)) and is_alive(int(entry))]


def end_processes(find, timeout: float = 8.0) -> list[int]:
    """Stop, then kill, every process `find()` returns, again until it returns none (a fork server or a postmaster
    stopped first cannot start another meanwhile); the survivors at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        victims = find()
        if not victims or time.monotonic() >= deadline:
            return victims
        for pid in victims:
            signal_quietly(pid, signal.SIGSTOP)
        for pid in victims:
            signal_quietly(pid, signal.SIGKILL)
        wait_gone(victims, max(0.0, min(1.0, deadline - time.monotonic())))


# -- the owner of a world folder ------------------------------------------------------------------------------

def write_owner(directory: Path, *, detached: bool = False) -> None:
    """Record who owns a world folder: this process, the runs it belongs to, and whether the world is meant to
    outlive it (`crashproof world up`)."""
    record = {"owner": process_id(), "runs": [r for r in os.environ.get(RUN_VARIABLE, "").split(":") if r],
              "detached": detached}
    temporary = directory / f".{OWNER_FILE}.tmp"
    temporary.write_text(json.dumps(record))
    temporary.replace(directory / OWNER_FILE)


def _unlink_each(paths: list[str]) -> None:
    for path in paths:
        try:
            os.unlink(path)
        except OSError:
            pass


def remove_tree(directory: Path) -> None:
    """Remove a directory tree, its files unlinked by UNLINK_THREADS threads side by side. Just after a cluster is
    killed, each unlink of its files waits a little more than it computes: a data directory's 2,400 files one
    after another took 1.8-9.4 s with both cores kept busy, 0.27-0.40 s this way
    (docs/ci.md, "Under load"), and a watcher has 10 s for the whole run."""
    files = [os.path.join(root, name) for root, _dirs, names in os.walk(directory) for name in names]
    threads = []
    for share in (files[start::UNLINK_THREADS] for start in range(UNLINK_THREADS)):
        thread = threading.Thread(target=_unlink_each, args=(share,), daemon=True)
        try:
            thread.start()
        except RuntimeError:  # the interpreter is exiting (World.down as an atexit hook): no thread may start
            _unlink_each(share)
            continue
        threads.append(thread)
    for thread in threads:
        thread.join()
    shutil.rmtree(directory, ignore_errors=True)  # the directories, and what appeared meanwhile


def remove_world(directory: Path) -> None:
    """Remove a world folder (`_remove_world_folder`), then what its killed processes left in /dev/shm: the clock
    objects of gone processes of ours or of the folder's owner (the server user)."""
    try:
        owners = {os.geteuid(), directory.stat().st_uid}
    except OSError:
        owners = {os.geteuid()}
    _remove_world_folder(directory)
    remove_clock_leftovers(owners)


def _remove_world_folder(directory: Path) -> None:
    """Remove a world folder, its owner record last: a removal cut short (a worker killed while it tears its
    world down) leaves a folder that still says whose it is, so a watcher or the next world removes the rest. A
    server process still writing in the folder (a backend of a cluster just killed) can refill a directory as it is
    removed; such a process is ended and the removal tried again, within REMOVE_WITHIN_S, and the record stays
    until nothing else is left."""
    deadline = time.monotonic() + REMOVE_WITHIN_S
    writers = lambda: pids_with_cwd_or_arg(str(directory))  # noqa: E731
    end_processes(writers, timeout=2.0)
    while True:
        try:
            entries = [entry for entry in directory.iterdir() if entry.name != OWNER_FILE]
        except FileNotFoundError:
            return
        except OSError:
            entries = []
        if not entries:
            break
        for entry in entries:
            if entry.is_dir() and not entry.is_symlink():
                remove_tree(entry)
            else:
                try:
                    entry.unlink()
                except OSError:
                    pass
        try:
            if not any(entry.name != OWNER_FILE for entry in directory.iterdir()):
                break
        except OSError:
            return
        if time.monotonic() > deadline:
            return  # the record stays: the watcher or the next world's sweep removes the rest
        end_processes(writers, timeout=2.0)
        time.sleep(0.05)
    shutil.rmtree(directory, ignore_errors=True)


def _owned_worlds(worlds: Path) -> list[tuple[Path, dict]]:
    """Each world folder under `worlds` that records its owner, with the record. A folder without one (being made,
    or made by an older crashproof) is not ours to judge."""
    try:
        entries = [entry for entry in worlds.iterdir() if entry.is_dir()]
    except OSError:
        return []
    owned = []
    for directory in entries:
        try:
            owned.append((directory, json.loads((directory / OWNER_FILE).read_text())))
        except (OSError, ValueError):
            continue
    return owned


def _end_world(directory: Path) -> None:
    """Kill any process still working in a world folder (its PostgreSQL, its Toxiproxy), then remove it."""
    end_processes(lambda: pids_with_cwd_or_arg(str(directory)))
    remove_world(directory)


def sweep_worlds(worlds: Path) -> list[Path]:
    """Remove every world folder under `worlds` whose owner is gone, with anything still running in it; the
    folders removed."""
    removed = []
    for directory, record in _owned_worlds(worlds):
        if not record.get("detached") and not id_alive(str(record.get("owner", ""))):
            _end_world(directory)
            removed.append(directory)
    return removed


def _remove_worlds_of_run(worlds: Path, run: str) -> None:
    for directory, record in _owned_worlds(worlds):
        if run in record.get("runs", []) and not record.get("detached"):
            _end_world(directory)


# -- the watcher ----------------------------------------------------------------------------------------------

@contextmanager
def watched_run(worlds: Path):
    """Tag everything this process starts from here on as one run, and have a watcher end it all when this
    process ends without ending it first (SIGKILL included). On a normal exit the watcher still sweeps what is
    left of the run, then exits."""
    run = process_id()
    outer = os.environ.get(RUN_VARIABLE)
    chain = [r for r in (outer or "").split(":") if r]
    if run in chain:  # a nested controller in the same process: the outer one watches already
        yield run
        return
    start_resource_tracker()  # untagged: the process's, not the run's, so the sweep leaves it to unlink what was left
    read_end, write_end = os.pipe()
    try:
        watcher = subprocess.Popen([sys.executable, "-m", "testhost.world.orphans", run, str(worlds)], stdin=read_end,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                                   env={k: v for k, v in os.environ.items() if k != RUN_VARIABLE})
    finally:
        os.close(read_end)
    os.environ[RUN_VARIABLE] = ":".join([*chain, run])
    try:
        yield run
    finally:
        if outer is None:
            os.environ.pop(RUN_VARIABLE, None)
        else:
            os.environ[RUN_VARIABLE] = outer
        os.close(write_end)
        try:
            watcher.wait(15)
        except subprocess.TimeoutExpired:
            pass  # it goes on sweeping by itself; nothing of ours waits on it


def _watch(run: str, worlds: Path) -> None:
    """The watcher's life: wait for the controller's end (end-of-file on standard input), then end the run."""
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, signal.SIG_IGN)  # the terminal's or the runner's signals are for the run, not us
    while os.read(0, 4096):
        pass
    end_processes(lambda: processes_of_run(run))
    _remove_worlds_of_run(worlds, run)
    # A skewed implementation's fork server outlives its world and is ended above: its clock objects go here.
    remove_clock_leftovers({os.geteuid()})


if __name__ == "__main__":
    _watch(sys.argv[1], Path(sys.argv[2]))
