"""`pytest --crashproof`: the matrix as pytest items, under pytest-xdist with --junitxml, -k, -x and --lf."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from junitparser import Failure, JUnitXml

from testhost.pytest_plugin import cache_dir
from testhost.world.workspace import Workspace

pytestmark = pytest.mark.world
SLICE = ["--crashproof-scenario", "at-single", "--crashproof-barrier", "schedule-link-after-commit"]


def _pytest(cwd, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "--crashproof", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600)


@pytest.fixture
def cache(tmp_path):
    """Where pytest's cache goes for runs in tmp_path (under CRASHPROOF_HOME), removed after the test."""
    path = cache_dir(tmp_path.resolve())
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_a_slice_runs_under_xdist_with_junitxml(tmp_path, cache):
    home = Workspace().root
    worlds_before = set((home / "worlds").glob("pytest-gw*"))
    logs_before = set(home.glob("pytest-logs-*"))  # an earlier run's failures keep theirs
    done = _pytest(tmp_path, *SLICE, "-n", "2", "--junitxml", "junit.xml", "-q")
    assert done.returncode == 0, done.stdout + done.stderr
    # Each worker took down its own world, and the census the workers shared is gone with the run.
    assert set((home / "worlds").glob("pytest-gw*")) == worlds_before and not list(home.glob("pytest-census-*"))
    assert set(home.glob("pytest-logs-*")) == logs_before, "a run that passed leaves no logs behind"
    # A CI's test list: the scenario as the class, the barrier and the fault as the name.
    names = sorted((case.classname, case.name) for suite in JUnitXml.fromfile(str(tmp_path / "junit.xml"))
                   for case in suite)
    assert names == sorted(("crashproof.at-single", name) for name in (
        "fault-free", "schedule-link-after-commit[kill-1]", "schedule-link-after-commit[disconnect-1]",
        "schedule-link-after-commit[db-crash-1]"))  # no pause: its lease is spent
    assert "gw0" in done.stdout or "2 workers" in done.stdout or "bringing up nodes" in done.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["junit.xml"]  # no .pytest_cache in the folder
    assert cache.is_dir()  # pytest's cache is kept under CRASHPROOF_HOME instead


def test_collect_only_lists_the_fault_free_runs_without_running_the_implementation(tmp_path):
    (tmp_path / "test_own.py").write_text("def test_own():\n    pass\n")  # the folder's own: not collected
    # The census would run this command (and fail); listing runs nothing.
    listed = _pytest(tmp_path, "--crashproof-impl", str(tmp_path / "no-such-adapter"), "--crashproof-scenario",
                     "at-*,every-*", "--collect-only", "-q")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    ids = [line for line in listed.stdout.splitlines() if line.startswith("crashproof/")]
    assert ids and "crashproof/at-single::fault-free" in ids and all(i.endswith("::fault-free") for i in ids)
    assert "faulted cases are planned from the barriers that run reaches" in listed.stdout
    assert "fault-free [" not in listed.stderr  # no census progress line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["test_own.py"]  # no __pycache__, no .pytest_cache
    without_cache = _pytest(tmp_path, "-p", "no:cacheprovider", "--crashproof-scenario", "at-single",
                            "--collect-only", "-q")
    assert without_cache.returncode == 0, without_cache.stdout + without_cache.stderr
    chosen = _pytest(tmp_path, "--crashproof-scenario", "at-*,every-*", "-k", "at-single", "--collect-only", "-q")
    assert [l for l in chosen.stdout.splitlines() if l.startswith("crashproof/")] == [
        "crashproof/at-single::fault-free"]  # -k matches the scenario


def test_a_failing_case_reports_its_checks_and_reruns_with_lf(tmp_path, cache):
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
    failed = [(c.classname, c.name) for s in JUnitXml.fromfile(str(tmp_path / "junit.xml")) for c in s
              if any(isinstance(r, Failure) for r in c.result)]
    assert sorted(failed) == [("crashproof.at-single", "fault-free"),
                              ("crashproof.at-single", "schedule-decision-after-commit[kill-1]")]
    again = _pytest(tmp_path, *mutant, "--lf", "-k", "kill")  # the last failures, and of them the kill case
    try:
        assert again.returncode == 1 and "rerun previous 1 failure" in again.stdout, again.stdout + again.stderr
        assert "1 failed" in again.stdout and "1 deselected" in again.stdout
        assert "passed" not in again.stdout.splitlines()[-1]
        # --lf found its failures in the cache kept under CRASHPROOF_HOME, not in the implementation's folder.
        assert (cache / "v" / "cache" / "lastfailed").exists()
        assert sorted(p.name for p in tmp_path.iterdir()) == ["junit.xml"]
    finally:
        for kept in re.findall(r"crashproof: the cases' logs are kept in (\S+)", again.stdout):
            shutil.rmtree(kept)


def test_a_bad_clock_offset_is_a_usage_error_before_any_world(tmp_path):
    done = _pytest(tmp_path, *SLICE, "--crashproof-impl-clock-offset", "soon", "-q")
    assert done.returncode == 4, done.stdout + done.stderr  # pytest's usage error
    assert "--crashproof-impl-clock-offset: 'soon' is not a duration" in done.stderr
