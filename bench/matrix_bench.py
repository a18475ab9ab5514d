"""Crash-matrix targets: the full matrix against the reference on 2 cores, and the cost of one faulted case
beside its fault-free run."""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

from reports import counted
from scenarios.matrix import CasePlan
from scenarios.scenario import load_catalog
from testhost.runs.certify import certify
from testhost.runs.options import Options, default_jobs
from testhost.case.runner import REFERENCE_COMMAND, run_case
from testhost.world.worlds import World

from .figures import Figure, median_of

SAMPLES = 5


def faulted_versus_fault_free() -> list[Figure]:
    scenario = next(s for s in load_catalog() if s.name == "every-anchored")
    log_dir = Path(tempfile.mkdtemp(prefix="bench-matrix-"))
    fault_free, faulted = [], []
    with World("bench") as world:
        for _ in range(SAMPLES):
            base = run_case(world, scenario, CasePlan(scenario.name), REFERENCE_COMMAND, log_dir)
            fault_free.append(base.duration_s)
            case = run_case(world, scenario, CasePlan(scenario.name, "schedule-decision-before-commit", "kill", 1),
                            REFERENCE_COMMAND, log_dir, base.baseline)
            assert case.verdict == "pass", case.reason
            faulted.append(case.duration_s)
    measured, reference = statistics.median(faulted), statistics.median(fault_free)
    return [Figure("one faulted case (kill at decision, median)", measured, "s", "<= 3x", measured <= 3 * reference,
                   reference, "its fault-free run")]


def implementation_start() -> list[Figure]:
    """Starting the reference adapter until its hello: forked from the fork server beside spawned afresh."""
    from testhost.impl.implementation import Implementation, set_launcher

    unreachable = "host=127.0.0.1 port=1 dbname=none"  # the hello comes before any connection
    env = {"CRASHPROOF_RUNTIME_DSN": unreachable, "CRASHPROOF_DISPATCHER_DSN": unreachable}
    log = Path(tempfile.mkdtemp(prefix="bench-start-")) / "impl.log"

    def start_and_stop(launcher: str) -> None:
        set_launcher(launcher)
        Implementation(REFERENCE_COMMAND, env, lambda *a: None, log).start().stop()

    start_and_stop("fork-server")  # the server itself starts once per TestHost process
    try:
        forked = median_of(SAMPLES * 2, lambda: start_and_stop("fork-server"))
        spawned = median_of(SAMPLES * 2, lambda: start_and_stop("spawn"))
    finally:
        set_launcher("fork-server")
    return [Figure("implementation start to hello (fork server)", forked, "s", "< spawn", forked < spawned,
                   spawned, "spawned")]


def machine_busy_s() -> float:
    """CPU seconds the whole machine has been busy since boot (every core, every process: others' too)."""
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


GO_EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "go" / "run.sh"
TARGET_S = 100  # the reference's whole matrix on 2 cores, default jobs, idle machine
GO_TARGET_S = 150  # the Go example's: spawned, not forked, and its census beside the reference's


def _matrix(jobs: int, command: str | None = None) -> tuple[float, int, int, float]:
    """One full matrix against the reference (or `command`): (seconds, cases, exit code, busy CPU seconds of the
    machine)."""
    busy, started = machine_busy_s(), time.monotonic()
    extra = {"command": command} if command else {}
    code, report = certify(Options(jobs=jobs, report_dir=Path(tempfile.mkdtemp(prefix="bench-matrix-")),
                                   progress=lambda line: None, **extra))
    return time.monotonic() - started, report["summary"]["cases"], code, machine_busy_s() - busy


def full_matrix() -> list[Figure]:
    """The full matrix with the default jobs, beside the same matrix with one job per core, run right after it:
    the reference tells how loaded the machine was and whether the extra job still pays. Then the Go example's
    whole matrix (an outside implementation: spawned per start, and certified with the reference's census beside
    its own), against the reference's figure of the same run. Each line counts the cases and their rate; the
    machine's busy CPU (others' processes included) says whether it was idle."""
    jobs, plain = default_jobs(), os.cpu_count() or 1
    elapsed, cases, code, busy = _matrix(jobs)
    reference, reference_cases, reference_code, reference_busy = _matrix(plain)
    figures = [Figure(f"full matrix, {counted(jobs, 'job')} on {counted(plain, 'core')} ({counted(cases, 'case')}, {cases / elapsed:.1f}/s, "
                      f"busy CPU {busy:.0f} s)", elapsed, "s", f"<= {TARGET_S} s", elapsed <= TARGET_S and code == 0,
                      reference, f"{counted(plain, 'job')} ({counted(reference_cases, 'case')}, {reference_cases / reference:.1f}/s, "
                                 f"busy CPU {reference_busy:.0f} s{'' if reference_code == 0 else ', FAILED'})")]
    go, go_cases, go_code, go_busy = _matrix(jobs, str(GO_EXAMPLE))
    figures.append(Figure(f"full matrix, examples/go, {counted(jobs, 'job')} ({counted(go_cases, 'case')}, {go_cases / go:.1f}/s, busy "
                          f"CPU {go_busy:.0f} s{'' if go_code == 0 else ', FAILED'})", go, "s", f"<= {GO_TARGET_S} s",
                          go <= GO_TARGET_S and go_code == 0, elapsed, "the reference's, same run"))
    return figures


BENCHMARKS = [implementation_start, faulted_versus_fault_free, full_matrix]
