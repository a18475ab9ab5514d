"""The implementation's own OS clock, skewed through libfaketime, and the evidence that the skew took effect."""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path

from scenarios.instances import format_offset

from testhost.world.processes import group_members
from testhost.world.workspace import Workspace

# A reading of the implementation's clock is taken between the host's reading before the start and its reading
# when the hello arrived; this much more either side absorbs the granularity of the two clocks.
SLACK = timedelta(seconds=1)
IN_EFFECT, NOT_IN_EFFECT, UNVERIFIED = "in-effect", "not-in-effect", "unverified"
# Worst first: a case that started an instance several times reports the worst of its starts.
ORDER = (NOT_IN_EFFECT, UNVERIFIED, IN_EFFECT)


SLEEP_FIX_SOURCE = Path(__file__).with_name("native") / "monotonic_sleep.c"


@functools.cache
def sleep_fix() -> Path | None:
    """The small preload that lets a monotonic clock_nanosleep past libfaketime 0.9.10 (native/monotonic_sleep.c),
    built once per workspace with the system's C compiler; None where none is installed (then Python's
    time.sleep fails with EINVAL in a skewed process, as PROTOCOL.md says)."""
    source = SLEEP_FIX_SOURCE.read_bytes()
    target = Workspace().root / f"monotonic-sleep-{hashlib.sha256(source).hexdigest()[:12]}.so"
    if target.exists():
        return target
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(f".{os.getpid()}.tmp")
    built = subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-o", str(partial), str(SLEEP_FIX_SOURCE), "-ldl"],
                           capture_output=True, text=True)
    if built.returncode != 0:
        partial.unlink(missing_ok=True)
        return None
    os.replace(partial, target)  # whole: a worker building beside this one finds one file or none
    return target


def environment(libfaketime: Path, offset: timedelta, inherited: dict[str, str]) -> dict[str, str]:
    """What a skewed process gets: libfaketime preloaded with a relative offset, so its wall clock keeps ticking
    at real speed (an absolute FAKETIME would stop it), and the monotonic clock left alone, which timeouts and
    condition waits read (faking it makes a Python lock's timed wait last the whole offset). The sleep fix goes
    first, so its clock_nanosleep is the one the process calls."""
    fix = sleep_fix()
    preload = " ".join(p for p in (str(fix) if fix else "", str(libfaketime), inherited.get("LD_PRELOAD", "")) if p)
    return {"LD_PRELOAD": preload, "FAKETIME": f"{int(offset.total_seconds()):+d}",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1"}


def server_environment(environment: dict[str, str]) -> dict[str, str]:
    """Of a skewed start's environment, what the fork server must itself be started with: the preload and
    libfaketime's settings, read when libfaketime loads (the forked child keeps them, and gets them again in its
    own environment)."""
    return {k: v for k, v in environment.items() if k == "LD_PRELOAD" or k.startswith("FAKETIME")}


def _parse_clock(value) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        reading = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return reading if reading.tzinfo is not None else None


def _proc_evidence(pid: int | None, libfaketime: Path) -> list[dict]:
    """Each live process of the group: does its environment preload libfaketime, and does it map it?"""
    found = []
    for member in sorted(group_members(pid)) if pid else []:
        try:
            with open(f"/proc/{member}/environ", "rb") as f:
                env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
            with open(f"/proc/{member}/maps", "rb") as f:
                maps = f.read()
            exe = os.readlink(f"/proc/{member}/exe")
        except OSError:
            continue
        found.append({"pid": member, "exe": exe,
                      "preloaded": str(libfaketime).encode() in env.get(b"LD_PRELOAD", b""),
                      "faketime": env.get(b"FAKETIME", b"").decode("utf-8", "replace"),
                      "maps_libfaketime": libfaketime.name.encode() in maps})
    return found


def verify(offset: timedelta, hello: dict, before: datetime, after: datetime, pid: int | None,
           libfaketime: Path) -> dict:
    """Whether the requested skew is what the started process reads (PROTOCOL.md, "A skewed clock").

    With `clock_utc` in the hello, the reading less the offset must fall between the host's readings around the
    start: then `in-effect`; a reading that falls there unskewed is `not-in-effect` (the runtime does not read
    time through libc, as Go's does not). Without it, the process group's /proc says only whether libfaketime was
    preloaded and mapped: `unverified` when every process maps it, `not-in-effect` when one does not.
    """
    record = {"offset": format_offset(offset), "offset_s": int(offset.total_seconds())}
    reading = _parse_clock(hello.get("clock_utc"))
    low, high = before - SLACK, after + SLACK
    if reading is not None:
        record["clock_utc"] = reading.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
        record["host_window_utc"] = [low.isoformat().replace("+00:00", "Z"), high.isoformat().replace("+00:00", "Z")]
        skewed_ok = low <= reading - offset <= high
        unskewed = low <= reading <= high
        if skewed_ok and not unskewed:
            record["in_effect"] = IN_EFFECT
        elif unskewed and not skewed_ok:
            record["in_effect"] = NOT_IN_EFFECT
            record["why"] = "the clock the implementation reported is the host's, not skewed by the offset"
        elif skewed_ok:
            record["in_effect"] = UNVERIFIED
            record["why"] = "the offset is too small to tell from the time the start took"
        else:
            record["in_effect"] = NOT_IN_EFFECT
            record["why"] = (f"the clock the implementation reported is off by "
                             f"{(reading - after).total_seconds():+.0f} s, not by the offset")
        return record
    if "clock_utc" in hello:  # not an RFC 3339 instant with an offset: judged as if absent, and said so
        record["clock_utc_unreadable"] = str(hello["clock_utc"])[:80]
    processes = _proc_evidence(pid, libfaketime)
    record["processes"] = processes
    if processes and all(p["preloaded"] and p["maps_libfaketime"] for p in processes):
        record["in_effect"] = UNVERIFIED
        record["why"] = ("the hello reports no clock_utc; every process of the group preloads and maps libfaketime, "
                         "but whether its runtime reads time through libc cannot be seen from outside")
    else:
        record["in_effect"] = NOT_IN_EFFECT if processes else UNVERIFIED
        record["why"] = ("the hello reports no clock_utc, and a process of the group does not map libfaketime"
                         if processes else "the hello reports no clock_utc, and no process of the group was readable")
    return record


def worst(first: dict | None, second: dict) -> dict:
    """Of two starts of one instance, the record whose skew is least in effect (with the starts counted)."""
    if first is None:
        return {**second, "starts": 1}
    keep = first if ORDER.index(first["in_effect"]) <= ORDER.index(second["in_effect"]) else second
    return {**keep, "starts": first.get("starts", 1) + 1}
