"""`pytest --crashproof`: the matrix as pytest items, under pytest-xdist with --junitxml, -k, -x and --lf."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from junitparser import Failure, JUnitXml

from testhost.workspace import Workspace

pytestmark = pytest.mark.world
SLICE = ["--crashproof-scenario", "at-single", "--crashproof-barrier", "schedule-link-after-commit"]


def _pytest(cwd, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "--crashproof", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600)


def test_a_slice_runs_under_xdist_with_junitxml(tmp_path):
    home = Workspace().root
    worlds_before = set((home / "worlds").glob("pytest-gw*"))
    logs_before = set(home.glob("pytest-logs-*"))  # an earlier run's failures keep theirs
    done = _pytest(tmp_path, *SLICE, "-n", "2", "--junitxml", "junit.xml", "-q")
    assert done.returncode == 0, done.stdout + done.stderr
    # Each worker took down its own world, and the census the workers shared is gone with the run.
    assert set((home / "worlds").glob("pytest-gw*")) == worlds_before and not list(home.glob("pytest-census-*"))
    assert set(home.glob("pytest-logs-*")) == logs_before, "a run that passed leaves no logs behind"
    names = sorted(case.name for suite in JUnitXml.fromfile(str(tmp_path / "junit.xml")) for case in suite)
    assert names == sorted(["at-single[fault-free]", "at-single[schedule-link-after-commit-kill-1]",
                            "at-single[schedule-link-after-commit-disconnect-1]",
                            "at-single[schedule-link-after-commit-db-crash-1]"])  # no pause: its lease is spent
    assert "gw0" in done.stdout or "2 workers" in done.stdout or "bringing up nodes" in done.stdout
    chosen = _pytest(tmp_path, *SLICE, "-k", "kill", "--collect-only", "-q")
    assert [l for l in chosen.stdout.splitlines() if "[" in l] == ["::at-single[schedule-link-after-commit-kill-1]"]


def test_a_failing_case_reports_its_checks_and_reruns_with_lf(tmp_path):
    mutant = ["--crashproof-impl", f"{sys.executable} -m mutants cursor-own-transaction", "--crashproof-scenario",
              "at-single", "--crashproof-barrier", "schedule-decision-after-commit", "--crashproof-fault", "kill"]
    first = _pytest(tmp_path, *mutant, "--junitxml", "junit.xml")
    assert first.returncode == 1, first.stdout + first.stderr
    # The header says which code the cases run: the folder they start in and where the module comes from.
    assert "Implementation:" in first.stdout and re.search(rf"\n  cwd +{re.escape(str(tmp_path.resolve()))}\n",
                                                           first.stdout)
    assert re.search(r"module +mutants from \S+/mutants/__main__\.py, package sha256 [0-9a-f]{16}", first.stdout)
    assert "instant-decided-once (rule: It writes the occurrence disposition" in first.stdout
    # the barrier facts catch this mutant in its fault-free run too (decision-commits-together)
    assert "2 failed" in first.stdout and "decision-commits-together (rule: It writes the occurrence" in first.stdout
    kept = re.search(r"crashproof: the cases' logs are kept in (\S+)", first.stdout)
    assert kept and Path(kept.group(1)).parent == Workspace().root and any(Path(kept.group(1)).rglob("*"))
    shutil.rmtree(kept.group(1))
    failed = [c.name for s in JUnitXml.fromfile(str(tmp_path / "junit.xml")) for c in s
              if any(isinstance(r, Failure) for r in c.result)]
    assert sorted(failed)[-1] == "at-single[schedule-decision-after-commit-kill-1]" and len(failed) == 2
    again = _pytest(tmp_path, *mutant, "--lf", "-x")
    assert again.returncode == 1 and "1 failed" in again.stdout and "passed" not in again.stdout.splitlines()[-1]
    for kept in re.findall(r"crashproof: the cases' logs are kept in (\S+)", again.stdout):
        shutil.rmtree(kept)


def test_a_bad_clock_offset_is_a_usage_error_before_any_world(tmp_path):
    done = _pytest(tmp_path, *SLICE, "--crashproof-impl-clock-offset", "soon", "-q")
    assert done.returncode == 4, done.stdout + done.stderr  # pytest's usage error
    assert "--crashproof-impl-clock-offset: 'soon' is not a duration" in done.stderr
