"""Loopback ports: a free one, or a clear error when a requested one is taken."""

import socket

from testhost.errors import PortInUse

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


def require_free(port: int, what: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            raise PortInUse(f"port {port} on {LOOPBACK} is in use; choose another for {what} "
                            "or leave the port unset to get a free one") from None
    return port


def choose(port: int | None, what: str) -> int:
    return free_port() if port is None else require_free(port, what)
