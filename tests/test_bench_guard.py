"""The regression guard's own machinery: its verdict at the 10 % edge, its probe, and the committed baseline."""

from __future__ import annotations

import json

from bench import guard


def _figure(normalised: float) -> dict:
    return {"normalised": normalised}


def test_the_guard_fails_beyond_ten_percent_and_passes_at_it():
    assert guard.verdict(_figure(110.0), _figure(100.0)) == (1.1, True)
    ratio, within = guard.verdict(_figure(110.2), _figure(100.0))
    assert ratio > 1.10 and not within
    assert guard.verdict(_figure(80.0), _figure(100.0))[1]  # faster is never a failure


def test_the_probe_measures_cpu_not_nothing():
    spent = guard.probe()
    assert 0.01 < spent < 30


def test_the_committed_baseline_names_its_commit_its_cases_and_agrees_with_itself():
    baseline = json.loads(guard.BASELINE.read_text())
    assert len(baseline["commit"]) >= 7 and baseline["measured_at"][:2] == "20"
    assert len(baseline["cases"]) >= 50 and len(set(baseline["cases"])) == len(baseline["cases"])
    assert all(case.count("/") == 3 for case in baseline["cases"]), "faulted case ids only"
    assert abs(baseline["cpu_ms_per_case"] / baseline["probe_s"] - baseline["normalised"]) < 1
