"""Crash-matrix targets: the full matrix against the reference on 2 cores, and the cost of one faulted case
beside its fault-free run."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from scenarios.model import load_catalog
from testhost.certify import Options, certify
from testhost.runner import REFERENCE_COMMAND, CasePlan, run_case
from testhost.world import World

from .figures import Figure

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
                            REFERENCE_COMMAND, log_dir, base.picture)
            assert case.verdict == "pass", case.reason
            faulted.append(case.duration_s)
    measured, reference = statistics.median(faulted), statistics.median(fault_free)
    return [Figure("one faulted case (kill at decision, median)", measured, "s", "<= 3x", measured <= 3 * reference,
                   reference, "its fault-free run")]


def full_matrix() -> list[Figure]:
    started = time.monotonic()
    code, report = certify(Options(jobs=2, report_dir=Path(tempfile.mkdtemp(prefix="bench-matrix-")),
                                   progress=lambda line: None))
    elapsed = time.monotonic() - started
    cases = report["summary"]["cases"]
    figures = [Figure(f"full matrix vs reference, 2 jobs ({cases} cases)", elapsed, "s", "<= 120 s",
                      elapsed <= 120 and code == 0)]
    return figures


BENCHMARKS = [faulted_versus_fault_free, full_matrix]
