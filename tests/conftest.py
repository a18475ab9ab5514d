"""Shared fixtures: worlds against the real components, and the Hypothesis profiles (`ci`, `dev`)."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

from testhost.world import World

settings.register_profile("ci", max_examples=200, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=50, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


@pytest.fixture(scope="module")
def world():
    """One world per test module: for tests that do not crash or move the clock for good."""
    with World("test") as shared:
        yield shared


@pytest.fixture
def fresh_world():
    """A world of its own: for tests that crash the cluster, cut the proxy or move the clock."""
    with World("test") as own:
        yield own


@pytest.fixture
def store(world):
    """A fresh database with the whole protocol schema, cloned from the world's migrated template."""
    from testhost.store import new_store
    world.clock.reset()  # tests in a module share the world; each starts on real time
    fresh = new_store(world)
    fresh.ensure_partitions()
    fresh.create_scope("tenant-a")
    yield fresh
    fresh.drop()
