"""The environment an implementation is started with: every variable PROTOCOL.md documents and no other, each DSN
also as a URI that reaches the same database as the same role, and the deadline as a decimal number of seconds."""

import re

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from barriers.protocol import ENVIRONMENT
from testhost.case import runner
from testhost.runs import schema_version
from testhost.impl.adapter_env import adapter_environment, dsn_uri, seconds_text

DECIMAL = re.compile(r"^[0-9]+\.[0-9]+$")


def test_the_host_passes_exactly_the_documented_variables():
    env = adapter_environment("host=127.0.0.1 port=1 dbname=d user=r", "host=127.0.0.1 port=1 dbname=d user=q",
                              "tenant-a", 2.0)
    # CRASHPROOF_BARRIERS is added by each start itself (testhost/impl/implementation.py)
    assert set(env) | {"CRASHPROOF_BARRIERS"} == {v.name for v in ENVIRONMENT}


@pytest.mark.parametrize("dsn", [
    "host=127.0.0.1 port=5432 user=appsurface_durable_runtime dbname=crashproof_store_1",
    "host=::1 port=6543 user=appsurface_durable_dispatcher dbname=d",
    "host=/var/run/postgresql user='a b' password='p@ss:/w?rd#&=' dbname='store one' sslmode=disable "
    "application_name='acme worker' options='-c search_path=x'",
])
def test_the_uri_form_names_the_same_connection(dsn):
    uri = dsn_uri(dsn)
    assert uri.startswith("postgresql://") and " " not in uri
    assert conninfo_to_dict(uri) == conninfo_to_dict(dsn)  # parsed by libpq itself


@pytest.mark.parametrize("proxied", [False, True], ids=["direct", "proxied"])
def test_a_client_that_reads_the_uri_lands_where_the_dsn_lands(store, proxied):
    for role in ("appsurface_durable_runtime", "appsurface_durable_dispatcher"):
        dsn = store.dsn(role, proxied=proxied)
        env = adapter_environment(dsn, dsn, "tenant-a", 2.0)
        seen = []
        for text in (env["CRASHPROOF_RUNTIME_DSN"], env["CRASHPROOF_RUNTIME_DSN_URI"]):
            with psycopg.connect(text) as conn:
                server = conn.execute("select current_database(), current_user, inet_server_port()").fetchone()
                seen.append((server, conn.info.host, conn.info.port))
        assert seen[0] == seen[1] and seen[0][0][:2] == (store.dbname, role), seen


def test_the_deadline_is_a_decimal_number_of_seconds():
    for seconds in (runner.DEADLINE_S, schema_version.DEADLINE_S, 2, 0.25, 30):
        text = adapter_environment("", "", "s", seconds)["CRASHPROOF_DEADLINE_S"]
        assert DECIMAL.match(text) and float(text) == seconds, text
    assert seconds_text(2) == "2.0" and seconds_text(2.5) == "2.5"
