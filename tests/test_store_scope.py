"""Whether the store can honour a transaction-local `set_config` of the scope and still refuse a session-level one.

It cannot: inside a transaction, everything a function (an RLS policy's `current_scope()`) can read of the setting
is the same whichever way it was set. So a store that honoured `set_config(..., true)` would honour the session-level
value that leaks a tenant's rows through a pooled connection (protocol note 24j), and the store honours a scope only
through `appsurface_durable.set_local_scope` (contract 2.0, `scope-through-set-local-scope`).
"""

from __future__ import annotations

import psycopg
import pytest
from psycopg.rows import dict_row

from reference.db import SCOPE_SETTING

pytestmark = pytest.mark.world

# Everything PostgreSQL shows of a setting to SQL running in the transaction: its value, and its pg_settings row
# (source, context, reset value...), which a custom placeholder setting does not even have.
SEEN = ("select current_setting(%(name)s, true) as value, "
        "(select row_to_json(s)::text from pg_settings s where s.name = %(name)s) as listed")


def _seen_after(conn: psycopg.Connection, is_local: bool) -> dict:
    with conn.transaction():
        conn.execute("select set_config(%s, 'tenant-a', %s)", (SCOPE_SETTING, is_local))
        return conn.execute(SEEN, {"name": SCOPE_SETTING}).fetchone()


def test_a_transaction_cannot_tell_a_local_scope_setting_from_a_session_level_one(store):
    with psycopg.connect(store.runtime_dsn, autocommit=True, row_factory=dict_row) as conn:
        local = _seen_after(conn, is_local=True)
        after_local = conn.execute("select current_setting(%s, true) as value", (SCOPE_SETTING,)).fetchone()
        session = _seen_after(conn, is_local=False)
        after_session = conn.execute("select current_setting(%s, true) as value", (SCOPE_SETTING,)).fetchone()
    assert local == session and local["value"] == "tenant-a"  # inside the transaction: indistinguishable
    assert after_local["value"] in ("", None) and after_session["value"] == "tenant-a"  # after it: one leaked


def test_the_store_refuses_a_raw_transaction_local_scope_and_honours_set_local_scope(store):
    """The decision the test above forces: a raw value, set transaction-locally, reads and writes nothing; the same
    transaction through set_local_scope reads the scope's row."""
    with psycopg.connect(store.runtime_dsn, autocommit=True, row_factory=dict_row) as conn:
        with conn.transaction():
            conn.execute("select set_config(%s, 'tenant-a', true)", (SCOPE_SETTING,))
            assert conn.execute("select appsurface_durable.current_scope() as s").fetchone()["s"] is None
            assert conn.execute("select count(*) as n from appsurface_durable.scopes").fetchone()["n"] == 0
        with conn.transaction():
            conn.execute("select appsurface_durable.set_local_scope('tenant-a')")
            assert conn.execute("select count(*) as n from appsurface_durable.scopes").fetchone()["n"] == 1
