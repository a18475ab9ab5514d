"""The TestHost: real worlds (PostgreSQL, server clock, Toxiproxy), faults, checks and the runner."""

from .errors import (
    ClockUnavailable,
    ClusterStartFailed,
    ComponentMissing,
    DockerUnavailable,
    PortInUse,
    TestHostError,
    ToxiproxyFailed,
    WorkspaceUnusable,
)

__all__ = [
    "ClockUnavailable",
    "ClusterStartFailed",
    "ComponentMissing",
    "DockerUnavailable",
    "PortInUse",
    "TestHostError",
    "ToxiproxyFailed",
    "WorkspaceUnusable",
]
