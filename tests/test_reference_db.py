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


def test_statements_prepared_by_a_batch_survive_a_rollback(world):
    """psycopg's own preparation would answer a ROLLBACK with DEALLOCATE ALL once it had prepared anything
    (a statement's sixth run), taking the batch's prepared statements with it; the session keeps it off."""
    from reference.errors import DurableError

    session = Session(world.admin_dsn())
    read = ("select %(n)s::int + 1 as m", {"n": 1})
    with session.transaction(reads=(read,)) as s:
        assert s.read_rows == [[{"m": 2}]]
    for n in range(6):
        session.execute("select %s::int as n", (n,))
    with pytest.raises(DurableError):
        with session.transaction():
            session.execute("select 1 / 0")
    session.execute("select 1")  # when psycopg would have sent its DEALLOCATE ALL
    with session.transaction(reads=(("select %(n)s::int + 1 as m", {"n": 2}),)) as s:
        assert s.read_rows == [[{"m": 3}]]
    assert [r["name"] for r in session.all("select name from pg_prepared_statements")] == ["reference_1"]
    session.close()


def test_a_batch_sends_its_statements_in_one_round_trip_and_returns_each_ones_rows(world):
    session = Session(world.admin_dsn())
    session.execute("create temporary table probe (x int)")
    with session.transaction() as s:
        s.defer("insert into probe values (%(x)s)", {"x": 1})
        s.defer("insert into probe values (%(x)s)", {"x": 2})
        counted, listed = s.batch(("select count(*) as n from probe where x > %(above)s -- a closing comment",
                                   {"above": 0}),
                                  ("select x from probe order by x", {}))
        assert counted == [{"n": 2}] and listed == [{"x": 1}, {"x": 2}]
        s.defer("insert into probe values (%(x)s)", {"x": 3})
    assert session.one("select count(*) as n from probe")["n"] == 3  # the commit sent the last deferred write
    with pytest.raises(Exception):
        with session.transaction() as s:
            s.defer("insert into probe values (%(x)s)", {"x": 4})
            s.batch(("select 1 / %(zero)s", {"zero": 0}))
    assert session.one("select count(*) as n from probe")["n"] == 3  # the failed batch rolled back its writes
    session.close()


def test_a_batch_binds_every_parameter_type_the_reference_uses(world):
    """Parameters travel as text from psycopg's dumpers; the server reads each with the input function of
    the type it inferred when it prepared the statement."""
    import uuid
    from datetime import datetime, timedelta, timezone
    from psycopg.types.json import Jsonb

    values = {"text": "it's 100% \\ 'quoted'; select 1", "none": None, "uuid": uuid.uuid4(),
              "at": datetime(2031, 3, 3, 12, 0, 0, 123456, tzinfo=timezone.utc), "span": timedelta(seconds=90),
              "doc": Jsonb({"a": ["b", 1, None], "q": "'"}), "n": 7}
    session = Session(world.admin_dsn())
    with session.transaction() as s:
        # A prepared statement's parameter types come from the statement, as in the reference's queries.
        [row], = s.batch(("select %(text)s::text as text, %(none)s::text as none, %(uuid)s::uuid as uuid, "
                          "%(at)s::timestamptz as at, %(span)s::interval as span, %(doc)s::jsonb as doc, "
                          "%(n)s::int %% 4 as rest, %(n)s::int + %(n)s::int as twice", values))
    assert row == {"text": values["text"], "none": None, "uuid": values["uuid"], "at": values["at"],
                   "span": values["span"], "doc": {"a": ["b", 1, None], "q": "'"}, "rest": 3, "twice": 14}
    session.close()


def test_sessions_plan_generically_and_keep_the_dsns_own_options(world):
    dsn = world.admin_dsn() + " options='-c statement_timeout=4321'"
    session = Session(dsn)
    settings = session.one("select current_setting('plan_cache_mode') as mode, "
                           "current_setting('statement_timeout') as timeout")
    assert settings == {"mode": "force_generic_plan", "timeout": "4321ms"}
    session.close()


def test_a_deferred_write_that_fails_beside_commit_aborts_the_commit_and_leaves_nothing(world):
    """Deferred writes travel in the COMMIT's own pipeline: one that fails must abort the COMMIT (a definite
    failure, not an unknown outcome) and the transaction it left open must be rolled back."""
    from reference.errors import DurableError

    session = Session(world.admin_dsn())
    session.execute("create temporary table probe (x int check (x > 0))")
    with pytest.raises(DurableError) as raised:
        with session.transaction() as s:
            s.defer("insert into probe values (%(x)s)", {"x": 1})
            s.defer("insert into probe values (%(x)s)", {"x": -1})
    assert not isinstance(raised.value, CommitOutcomeUnknown)
    assert raised.value.sqlstate == "23514"
    assert not session.broken and session.conn.info.transaction_status.name == "IDLE"
    assert session.one("select count(*) as n from probe")["n"] == 0
    session.close()


def test_a_deferred_write_whose_parameter_cannot_be_sent_leaves_no_open_transaction(world):
    """A parameter psycopg cannot adapt fails before the COMMIT's pipeline is sent: the session must still
    roll back, not stay inside the transaction."""
    session = Session(world.admin_dsn())
    session.execute("create temporary table probe (x int)")
    with pytest.raises(psycopg.ProgrammingError):
        with session.transaction() as s:
            s.defer("insert into probe values (%(x)s)", {"x": 1})
            s.defer("insert into probe values (%(x)s)", {"x": object()})
    assert session.conn.info.transaction_status.name == "IDLE"
    assert session.one("select count(*) as n from probe")["n"] == 0
    session.close()


def test_a_statement_whose_parse_an_earlier_failure_skipped_is_prepared_again_on_its_next_use(world):
    """In a pipeline, everything after a failing statement is skipped, its Parse included: the session must not
    believe that statement prepared (its next use would bind a statement that does not exist)."""
    from reference.errors import DurableError

    session = Session(world.admin_dsn())
    later = ("select %(n)s::int * 2 as doubled", {"n": 21})
    with pytest.raises(DurableError, match="division by zero"):
        session.batch(("select 1 / %(zero)s::int as boom", {"zero": 0}), later)
    assert session.batch(later) == [[{"doubled": 42}]]
    with pytest.raises(DurableError, match="syntax error"):
        session.batch(("selec %(n)s::int", {"n": 1}))  # a Parse that fails by itself is not recorded either
    assert session.batch(later) == [[{"doubled": 42}]]
    session.close()
