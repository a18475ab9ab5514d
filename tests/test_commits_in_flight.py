"""Before a recovery counts anything, a COMMIT still in flight on the server is let land (bounded)."""

import threading
import time

import psycopg

from testhost.case.recovery import await_commits_in_flight
from testhost.world.sessions import KeptSession
from barriers.schema import RUNTIME


def test_the_wait_ends_when_the_open_transaction_commits_and_gives_up_at_its_bound(store):
    verifier = KeptSession(store.owner, lambda: 0)
    assert await_commits_in_flight(verifier)[0] == 0  # nothing open: no wait
    with psycopg.connect(store.dsn(RUNTIME)) as runtime:
        runtime.execute("select pg_current_xact_id()")  # an xid, as a transaction that wrote holds one
        committer = threading.Timer(0.3, runtime.commit)
        started = time.monotonic()
        committer.start()
        still_open, waited = await_commits_in_flight(verifier, limit_s=5.0)
        committer.join()
        assert still_open == 0 and 0.25 <= time.monotonic() - started < 5.0 and waited >= 0.25
        runtime.execute("select pg_current_xact_id()")  # one that never ends: the wait stops at its bound
        still_open, waited = await_commits_in_flight(verifier, limit_s=0.2)
        assert still_open == 1 and 0.2 <= waited < 1.0
        runtime.rollback()
    verifier.close()
