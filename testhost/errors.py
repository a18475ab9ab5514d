"""The TestHost error hierarchy: every message is one line that names what to install or fix."""


class TestHostError(Exception):
    """Root of every error the TestHost raises on purpose."""

    __test__ = False  # not a pytest test class, despite the name
    exit_code = 2  # what `crashproof` exits with after printing it: a usage or configuration error


class ComponentMissing(TestHostError):
    """A program or library the world needs is not installed."""


class WorkspaceUnusable(TestHostError):
    """The workspace directory cannot hold clusters (not writable, or unreachable by the server user)."""


class PortInUse(TestHostError):
    """A requested loopback port is already taken."""


class ClusterStartFailed(TestHostError):
    """PostgreSQL did not become ready."""


class ToxiproxyFailed(TestHostError):
    """The Toxiproxy server did not start or refused an API call."""


class ClockUnavailable(TestHostError):
    """This world cannot move the server clock (an external or Docker server)."""


class DockerUnavailable(TestHostError):
    """`--docker` was asked for but no Docker engine answers."""


class FallbackFailed(TestHostError):
    """The harness's own fallback (the reference client or Work store standing in for an operation the
    implementation does not offer) could not complete a step: a harness-side error, never the implementation's."""
