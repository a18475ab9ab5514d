"""Sessions: a lost COMMIT reply becomes CommitOutcomeUnknown within the deadline, and the COMMIT itself
always reaches the server, however often the connection has committed before."""

import psycopg
import pytest

from reference.db import Session
from reference.errors import CommitOutcomeUnknown


@pytest.mark.parametrize("earlier_commits", [0, 5, 8], ids=["first-commit", "commit-that-psycopg-would-prepare", "later-commit"])
def test_lost_commit_reply_is_indefinite_and_the_server_committed(fresh_world, earlier_commits):
    with psycopg.connect(fresh_world.admin_dsn(), autocommit=True) as admin:
        admin.execute("create table probe (x int)")
    session = Session(fresh_world.proxied_dsn(), deadline=1.0)
    for n in range(earlier_commits):  # psycopg prepares a statement the sixth time it runs it
        with session.transaction():
            session.execute("insert into probe values (%s)", (n,))
    with pytest.raises(CommitOutcomeUnknown):
        with session.transaction():
            session.execute("insert into probe values (-1)")
            fresh_world.proxy.blackhole_replies()
    fresh_world.proxy.heal()
    with psycopg.connect(fresh_world.admin_dsn()) as verifier:
        assert verifier.execute("select count(*) from probe where x = -1").fetchone() == (1,)
    assert session.broken
    session.close()


def test_a_shorter_deadline_armed_while_a_longer_one_is_pending_still_fires_on_time(world):
    """The deadline thread is woken only when a new deadline falls before the time it next looks; a
    shorter deadline after a long one must wake it (else the round trip would wait the long one out)."""
    import time

    from reference.errors import DurableError

    session = Session(world.admin_dsn(), deadline=60.0)
    session.execute("select 1")  # the thread now next looks a minute from now
    session.deadline = 0.5
    started = time.monotonic()
    with pytest.raises(DurableError):
        session.execute("select pg_sleep(5)")
    assert time.monotonic() - started < 3
    assert session.broken
    session.close()
