"""A world whose PostgreSQL runs in a container (testcontainers), for machines with a Docker engine."""

from __future__ import annotations

from testhost.errors import DockerUnavailable

from .clock import NoClock
from .worlds import CLOCK, World

IMAGE = "postgres:16"


def require_engine():
    try:
        import docker  # installed with the `docker` extra (testcontainers)
    except ImportError:
        raise DockerUnavailable("--docker needs the docker extra: pip install 'crashproof[docker]'") from None
    try:
        client = docker.from_env(timeout=5)
        client.ping()
    except Exception as exc:  # the SDK raises a different type for every way an engine can be absent
        raise DockerUnavailable(f"--docker: no Docker engine answers ({type(exc).__name__}); start one, "
                                "or drop --docker to use the embedded world") from exc
    return client


class DockerWorld(World):
    """Server in a container: crashable (container kill + start), but no clock control."""

    def __init__(self, name: str = "docker", image: str = IMAGE, **kwargs):
        super().__init__(name, **kwargs)
        self.image = image
        self.capabilities.missing[CLOCK] = "Docker server: libfaketime is not preloaded into the container"
        self.clock = NoClock(self.capabilities.missing[CLOCK])
        self._container = None

    def up(self) -> "DockerWorld":
        require_engine()
        from testcontainers.postgres import PostgresContainer

        self.directory = self.workspace.new_world_dir(self.name)
        try:
            self._container = PostgresContainer(self.image, username="postgres", password="postgres",
                                                dbname="postgres", driver=None)
            self._container.with_command("postgres -c fsync=on -c synchronous_commit=on")
            self._container.start()
            self._start_network(f"{self._host()}:{self._port()}")
        except BaseException:
            self.down()
            raise
        return self

    def _host(self) -> str:
        return self._container.get_container_host_ip()

    def _port(self) -> int:
        return int(self._container.get_exposed_port(5432))

    def down(self) -> None:
        super().down()
        if self._container is not None:
            self._container.stop()
            self._container = None

    def kill(self) -> None:
        super().kill()
        if self._container is not None:
            try:
                self._container.stop()
            finally:
                self._container = None

    def crash(self) -> None:
        """Immediate stop (SIGKILL to the container) and start on the same volume."""
        wrapped = self._container.get_wrapped_container()
        wrapped.kill(signal="SIGKILL")
        wrapped.start()

    def admin_dsn(self, dbname: str = "postgres", user: str = "postgres") -> str:
        return f"host={self._host()} port={self._port()} user={user} password=postgres dbname={dbname}"

    def proxied_dsn(self, dbname: str = "postgres", user: str = "postgres") -> str:
        if self.proxy is None:
            return self.admin_dsn(dbname, user)
        return f"host={self.proxy.host} port={self.proxy.port} user={user} password=postgres dbname={dbname}"

    def _server_origin(self) -> str:
        return f"docker: {self.image}"


def docker_world(**kwargs) -> World:
    """A world whose server runs in a container through testcontainers; a clear error without an engine."""
    return DockerWorld(**kwargs)
