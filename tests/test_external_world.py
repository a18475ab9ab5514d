"""`--dsn` worlds: an existing server, fronted by Toxiproxy, with clock and crash honestly unavailable."""

from datetime import timedelta

import psycopg
import pytest

from testhost.errors import ClockUnavailable
from testhost.world.worlds import CLOCK, DB_CRASH, NETWORK, ExternalWorld


def test_external_world_proxies_and_refuses_clock_moves(world):
    with ExternalWorld(world.admin_dsn()) as external:
        assert not external.capabilities.has(CLOCK) and not external.capabilities.has(DB_CRASH)
        assert external.capabilities.has(NETWORK)
        with psycopg.connect(external.proxied_dsn()) as conn:
            assert conn.execute("select inet_server_port()").fetchone() == (world.cluster.port,)
        external.proxy.cut()
        with pytest.raises(ClockUnavailable, match="external server"):
            external.clock.shift(timedelta(hours=1))
        assert "external" in external.components()["postgres"]
