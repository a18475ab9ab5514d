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
