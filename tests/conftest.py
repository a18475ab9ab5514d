"""Shared fixtures: worlds against the real components, and the Hypothesis profiles (`ci`, `dev`)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from testhost.case.runner import CASE_SEED
from testhost.world.worlds import World

settings.register_profile("ci", max_examples=200, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=50, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


def pytest_collection_modifyitems(config, items):
    """Tests marked `long` (minutes each) start first, one at the head of each test process's first share: run
    last, one of them alone decided when the whole parallel run ended. The shares are those of pytest-xdist's
    worksteal split (consecutive, the rest divided evenly among the processes still to serve)."""
    longs = [item for item in items if item.get_closest_marker("long")]
    if not longs:
        return
    rest = [item for item in items if not item.get_closest_marker("long")]
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    starts, start = [], 0
    for worker in range(workers):
        starts.append(start)
        start += (len(items) - start) // (workers - worker)
    at = {starts[k % workers] + k // workers: item for k, item in enumerate(longs)}
    rest.reverse()
    items[:] = [at[i] if i in at else rest.pop() for i in range(len(items))]


@pytest.fixture(scope="module")
def world():
    """One world per test module: for tests that do not crash or move the clock for good."""
    with World("test", seed=CASE_SEED) as shared:
        yield shared


@pytest.fixture
def fresh_world():
    """A world of its own: for tests that crash the cluster, cut the proxy or move the clock."""
    with World("test", seed=CASE_SEED) as own:
        yield own


@pytest.fixture
def home():
    """A workspace (CRASHPROOF_HOME) of the test's own, under /tmp itself: the server user cannot reach pytest's
    temporary folders. A module that needs more of it (a longer life, a teardown check) defines its own."""
    root = Path(tempfile.mkdtemp(prefix="crashproof-test-", dir="/tmp"))
    os.chmod(root, 0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def store(world):
    """A fresh database with the whole protocol schema, cloned from the world's migrated template."""
    from testhost.world.store import new_store
    world.clock.reset()  # tests in a module share the world; each starts on real time
    fresh = new_store(world)
    fresh.ensure_partitions()
    fresh.create_scope("tenant-a")
    yield fresh
    fresh.drop()


def _certify_into(directory, *args: str) -> None:
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-m", "testhost.cli", "certify", "--jobs", "2", "--report-dir",
                           str(directory), *args], capture_output=True, text=True, timeout=600)
    assert (directory / "report.json").exists(), done.stdout + done.stderr


@pytest.fixture(scope="session")
def mutant_report(tmp_path_factory):
    """A real run with planted failures: the mutant that moves the cursor in a transaction of its own, at the
    barrier right after its decision commits, under every fault (its fault-free run passes, the faulted fail)."""
    import sys
    directory = tmp_path_factory.mktemp("mutant-report")
    _certify_into(directory, "--impl", f"{sys.executable} -m mutants cursor-own-transaction", "--scenario",
                  "at-single", "--barrier", "schedule-decision-after-commit")
    return directory


@pytest.fixture(scope="session")
def reference_report(tmp_path_factory):
    """The reference on a slice of the mutant's run: kill at the same barrier (every case passes)."""
    directory = tmp_path_factory.mktemp("reference-report")
    _certify_into(directory, "--scenario", "at-single", "--barrier", "schedule-decision-after-commit", "--fault", "kill")
    return directory
