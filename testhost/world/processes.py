"""Process helpers: children by /proc, tree kills, waiting for pids that are not our children."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from multiprocessing import resource_tracker

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


# PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, not only the process. Every server is
# therefore started from this one long-lived thread, whichever thread asks (a fault injected from a racing
# processor's thread restarts PostgreSQL too).
_spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="spawner")


def popen(*args, **kwargs) -> subprocess.Popen:
    """subprocess.Popen, run on the spawner thread so a die-with-parent child outlives the calling thread."""
    return _spawner.submit(subprocess.Popen, *args, **kwargs).result()


def start_resource_tracker() -> None:
    """Start multiprocessing's resource tracker for this process, if it is not running yet, with SIGHUP ignored.

    The tracker unlinks the named semaphores this process and its spawned workers registered once all of them are
    gone, a SIGKILL included. It ignores SIGINT and SIGTERM by itself but dies of a SIGHUP sent to the group, and
    one started again knows nothing of the first's names, which then stay in /dev/shm. A run's controller starts it
    before it tags its environment (orphans.watched_run): the tracker is the process's, not the run's, and must
    outlive the watcher's sweep of the run's processes to do its work."""
    if threading.current_thread() is not threading.main_thread():
        resource_tracker.ensure_running()  # signal handlers are the main thread's to set
        return
    hangup = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        resource_tracker.ensure_running()
    finally:
        signal.signal(signal.SIGHUP, hangup)


def die_with_parent() -> None:
    """preexec_fn: the child gets SIGKILL when the process that started it dies.

    Runs after subprocess has switched user, so the setting survives the credential change.
    """
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("utf-8", "replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # comm may hold spaces or parentheses; the fields after the last ')' are fixed.
    return raw[raw.rindex(")") + 2 :].split()


_CHILDREN_LISTED = os.path.exists(f"/proc/self/task/{os.getpid()}/children")
_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")
_START_TICKS = 19  # field 22 of /proc/PID/stat, counted from the state (field 3) as _stat_fields returns them
_CHILDREN_READS = 5  # reads of the threads' lists before the scan, while threads keep ending


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat); None when it is gone."""
    try:
        fields = _stat_fields(pid)
        return int(fields[_START_TICKS]) if fields is not None else None
    except (IndexError, ValueError):
        return None


def started_at(pid: int) -> float | None:
    """When pid's process started, in seconds since the epoch to a clock tick; None when it is gone or a zombie."""
    fields = _stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return None
    booted = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
    return booted + int(fields[_START_TICKS]) / _TICKS_PER_SECOND


def is_alive(pid: int) -> bool:
    """True while pid exists and is not a zombie (a zombie holds no resources we care about)."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def children_of(pid: int) -> list[int]:
    """Direct children of pid, read from /proc (PostgreSQL backends call setsid(), so no group kill).

    Read from the kernel's list of each of pid's threads' children (a few files, not one per process of the
    machine: the scan cost milliseconds on a busy one); the scan of every process is the fallback for kernels
    without those lists, and for threads that keep ending while they are read."""
    if _CHILDREN_LISTED:
        try:
            for _ in range(_CHILDREN_READS):
                children = _listed_children(pid)
                if children is not None:
                    return children
        except (FileNotFoundError, ProcessLookupError):
            return []  # pid is gone: its children, if any, have another parent now
        except PermissionError:
            pass  # scan instead
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields is not None and fields[1] == str(pid):
                found.append(int(entry))
    return found


def _listed_children(pid: int) -> list[int] | None:
    """pid's children from its threads' lists, or None if a thread ended during the read.

    A thread that ends hands its children to another thread of pid, perhaps one already read, so such a read may
    miss them."""
    threads = sorted(os.listdir(f"/proc/{pid}/task"))
    children: list[int] = []
    for thread in threads:
        try:
            with open(f"/proc/{pid}/task/{thread}/children") as listed:
                children += [int(child) for child in listed.read().split()]
        except (FileNotFoundError, ProcessLookupError):
            return None
    return children if sorted(os.listdir(f"/proc/{pid}/task")) == threads else None


def group_members(pgid: int) -> list[int]:
    """Live processes (not zombies) of process group pgid, read from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields is not None and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
                found.append(int(entry))
    return found


def pids_with_cwd_or_arg(marker: str) -> list[int]:
    """Live processes whose working directory or command line contains marker (a world's directory)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        pid = int(entry)
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if (marker in cwd or marker in cmdline) and is_alive(pid):
            found.append(pid)
    return found


def signal_quietly(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    """Wait until none of pids is alive; return those still alive at the deadline."""
    deadline = time.monotonic() + timeout
    remaining = list(pids)
    while remaining:
        for pid in remaining:
            try:  # reaps our own children; others are reaped by whoever adopted them
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
        remaining = [pid for pid in remaining if is_alive(pid)]
        if not remaining or time.monotonic() >= deadline:
            break
        time.sleep(0.005)
    return remaining


def kill_tree(root: int, timeout: float = 10.0) -> None:
    """SIGKILL root and every direct child, without giving root a chance to fork more first."""
    signal_quietly(root, signal.SIGSTOP)  # a stopped postmaster cannot start new backends
    victims = children_of(root)
    for pid in victims:
        signal_quietly(pid, signal.SIGKILL)
    signal_quietly(root, signal.SIGKILL)
    left = wait_gone([root, *victims], timeout)
    if left:
        raise RuntimeError(f"processes {left} survived SIGKILL for {timeout}s")
