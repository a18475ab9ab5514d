"""The server clock: an offset from real time, read by libfaketime in the postmaster at every call."""

from __future__ import annotations

import os
import re
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from testhost.errors import ClockUnavailable

from .processes import started_at

SHARED_MEMORY = Path("/dev/shm")
# A process with the object's pid that started this long after the object was made did not make it: the pid was
# reused (a process makes its pair when it loads libfaketime, after its start, so its own is never older).
_PID_REUSED_AFTER_S = 1.0
# libfaketime 0.9.10's objects of one process, named after its pid (ft_shm_create): its shared memory, its semaphore.
_CLOCK_OBJECT = re.compile(r"(faketime_shm_|sem\.faketime_sem_)([0-9]+)")


def utc(dt: datetime) -> datetime:
    """Refuse naive datetimes: the clock API speaks UTC only."""
    if dt.tzinfo is None:
        raise ValueError(f"{dt!r} has no time zone; the server clock takes aware UTC datetimes")
    return dt.astimezone(timezone.utc)


class ServerClock:
    """Moves the clock of every process that preloads libfaketime with FAKETIME_TIMESTAMP_FILE=path.

    The file holds a signed offset in seconds ("+86400.5"); FAKETIME_NO_CACHE=1 makes the server read it
    on every clock call, so a move is visible to the next statement of every connection, old or new.
    An offset (not an absolute "@" start time) keeps every backend on one clock whenever it was forked.

    Reading the file costs each clock call an open, a read and a close, about a tenth of a processor's
    server CPU per occurrence. A benchmark that measures an implementation, not the harness, passes
    `cache_seconds`: each process then reads the file at most once in that many seconds, and every move
    waits until the last cached reading has expired (`settle_seconds`) before it returns.
    """

    def __init__(self, path: Path, *, owner: tuple[int, int] | None = None, cache_seconds: int = 0):
        if cache_seconds < 0:
            raise ValueError(f"cache_seconds must be 0 (read on every call) or more, not {cache_seconds}")
        self.path = Path(path)
        self._owner = owner
        self._offset = 0.0
        self._frozen: datetime | None = None
        self.cache_seconds = cache_seconds
        self._write(0.0, settle=False)  # no server reads the file yet

    @staticmethod
    def environment(libfaketime: Path, path: Path, cache_seconds: int = 0) -> dict[str, str]:
        return {
            "LD_PRELOAD": str(libfaketime),
            "FAKETIME_TIMESTAMP_FILE": str(path),
            **({"FAKETIME_CACHE_DURATION": str(cache_seconds)} if cache_seconds else {"FAKETIME_NO_CACHE": "1"}),
            # PostgreSQL's timeouts and latches use the monotonic clock; only wall time moves.
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        }

    @property
    def settle_seconds(self) -> float:
        """How long a move takes to reach every process: libfaketime counts its cache in whole seconds."""
        return self.cache_seconds + 1.0 if self.cache_seconds else 0.0

    def _write(self, seconds: float, *, settle: bool = True) -> None:
        self._frozen = None
        self._put(f"{seconds:+.6f}")
        self._offset = seconds
        if settle:
            time.sleep(self.settle_seconds)

    def _put(self, text: str) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(text + "\n")
        if self._owner:
            os.chown(tmp, *self._owner)
        os.replace(tmp, self.path)  # atomic: a reader never sees half an offset

    def freeze(self, when: datetime) -> None:
        """Stop the server's clock at `when` (a whole second: libfaketime's absolute time stands still there)
        until the next move; every transaction meanwhile reads that very instant."""
        when = utc(when)
        if when.microsecond:
            raise ValueError(f"a frozen clock stands on a whole second, not {when.isoformat()}")
        self._put(when.strftime("%Y-%m-%d %H:%M:%S"))
        self._frozen = when
        self._offset = when.timestamp() - time.time()
        time.sleep(self.settle_seconds)

    def unfreeze(self) -> None:
        """Let a frozen clock run again from the instant it stands on."""
        if self._frozen is not None:
            self.set_time(self._frozen)

    @property
    def frozen(self) -> bool:
        return self._frozen is not None

    @property
    def offset(self) -> timedelta:
        return timedelta(seconds=self._offset)

    def now(self) -> datetime:
        """The server's wall time as the harness computes it (the server's own reading is authoritative)."""
        if self._frozen is not None:
            return self._frozen
        return datetime.fromtimestamp(time.time() + self._offset, timezone.utc)

    def set_offset(self, offset: timedelta) -> None:
        self._write(offset.total_seconds())

    def shift(self, delta: timedelta) -> None:
        """Jump forward (positive) or backward (negative) from where the clock stands now (a frozen clock stays
        frozen, at the moved instant, when that is a whole second)."""
        if self._frozen is not None:
            if not (self._frozen + delta).microsecond:
                self.freeze(self._frozen + delta)
            else:
                self.set_time(self._frozen + delta)
            return
        self._write(self._offset + delta.total_seconds())

    def set_time(self, when: datetime) -> None:
        """Make the server's current time `when` (it keeps ticking at real speed from there)."""
        self._write(utc(when).timestamp() - time.time())

    def reset(self) -> None:
        self._write(0.0)


class NoClock:
    """The clock of a world that cannot move it (external `--dsn` server, Docker): every move is refused."""

    def __init__(self, reason: str):
        self.reason = reason

    def _refuse(self, *_args, **_kwargs):
        raise ClockUnavailable(f"server clock control unavailable: {self.reason}")

    set_offset = shift = set_time = reset = freeze = unfreeze = _refuse
    frozen = False

    @property
    def offset(self) -> timedelta:
        return timedelta(0)

    def now(self) -> datetime:
        return datetime.now(timezone.utc)


def remove_clock_leftovers(owners: set[int], shared: Path = SHARED_MEMORY) -> list[str]:
    """Remove libfaketime's objects in /dev/shm whose process is gone (its pid ended, or names a later process), of
    the given owners; the names removed.

    The first process that preloads libfaketime makes a pair named after its pid and removes it when it exits (or a
    child it forked does, on that child's exit). A process killed first leaves it (a killed skewed implementation,
    its fork server, a server none of whose backends has exited yet), 8 KB of RAM until reboot. The memory goes
    before the semaphore: a process that starts with the pid meanwhile and finds the semaphore runs without a pair
    (a relative offset needs none), while one that made the semaphore and then found the memory would exit."""
    try:
        found = [(entry, _CLOCK_OBJECT.fullmatch(entry.name)) for entry in shared.iterdir()]
    except OSError:
        return []
    objects = sorted(((entry, match) for entry, match in found if match),
                     key=lambda named: named[1].group(1) != "faketime_shm_")
    removed = []
    for entry, match in objects:  # every memory, then every semaphore
        try:
            made = entry.stat()
            started = started_at(int(match.group(2)))
            if made.st_uid not in owners or (started is not None and started <= made.st_mtime + _PID_REUSED_AFTER_S):
                continue  # another's, or its process's: alive, and not started well after the object was made
            entry.unlink()
        except OSError:  # gone meanwhile, or another's
            continue
        removed.append(entry.name)
    return removed
