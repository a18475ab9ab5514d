"""The claim function's argument fences against a real PostgreSQL: the lease it grants ends strictly after
the claim and at most ten minutes after it, checked on the computed expiry (calendar months and days
included), and blank or invisible lease owners are refused; every refusal changes no row."""

from __future__ import annotations

import calendar
import time
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from psycopg import errors as pgerrors
from psycopg.rows import dict_row

import reference
from scenarios.claim_limits import (OTHER_DEFAULT_IGNORABLE, VARIATION_SELECTORS, Interval, lease_end, lease_refusal,
                                    owner_classes, owner_refusal)

pytestmark = pytest.mark.world

CLAIM = "select * from appsurface_durable.claim_schedule_dispatch(%s, %s)"
# The interval travels as its three fields, so every mixed-sign combination reaches the server unnormalized.
INTERVAL = "(make_interval(months => %s, days => %s) + %s::bigint * interval '1 microsecond')"
TEN_MINUTES = timedelta(minutes=10)
US = timedelta(microseconds=1)
FIXTURE_HEALTH = settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
                          deadline=None)


def connect(dsn: str) -> psycopg.Connection:
    return psycopg.connect(dsn, autocommit=True, row_factory=dict_row)


def expiry_by_the_calendar(start: datetime, months: int, days: int, micros: int) -> datetime | None:
    """Where the lease ends by the reading's calendar oracle (scenarios/claim_limits.py, tested against
    PostgreSQL itself in tests/test_claim_limits.py)."""
    return lease_end(start, Interval(months, days, micros))


def admitted(start: datetime, months: int, days: int, micros: int) -> bool:
    return lease_refusal(start, Interval(months, days, micros)) is None


def queue_snapshot(store) -> tuple[list[dict], list[dict]]:
    with store.owner() as conn:
        return (conn.execute("select * from appsurface_durable.schedule_dispatch order by dispatch_id").fetchall(),
                conn.execute("select * from appsurface_durable.schedule_dispatch_timing order by dispatch_id").fetchall())


def due_schedule(store) -> None:
    spec = reference.ScheduleSpec(kind="every", every=timedelta(seconds=1), target=reference.Target("cmd"))
    with reference.ScheduleClient(store.runtime_dsn, "tenant-a") as client:
        assert isinstance(client.create(spec), reference.ScheduleView)
    time.sleep(1.1)  # due now: a claim that passed its fences would take it


# -- the lease cap ------------------------------------------------------------------------------------

def month_edges() -> st.SearchStrategy[datetime]:
    """Claim times on the last or first day of a month, leap days and century years included."""
    def build(year: int, month: int, last: bool, seconds: int, micros: int) -> datetime:
        day = calendar.monthrange(year, month)[1] if last else 1
        return datetime(year, month, day, tzinfo=timezone.utc) + timedelta(seconds=seconds, microseconds=micros)
    return st.builds(build, st.sampled_from([1900, 2000, 2023, 2024, 2026, 2028, 2100]), st.integers(1, 12),
                     st.booleans(), st.integers(0, 86_399), st.integers(0, 999_999))


def mixed_intervals() -> st.SearchStrategy[tuple[int, int, int]]:
    """(months, days, microseconds) whose parts nearly cancel under the 30-day month the interval comparison
    uses (the bypass), plus wild ones: huge years against negative days, and plain time."""
    months = st.integers(-1_200_000, 1_200_000) | st.integers(-25, 25)
    near_cancel = st.builds(lambda m, per_month, slack, micros: (m, -m * per_month + slack, micros),
                            months, st.sampled_from([28, 29, 30, 31]), st.integers(-2, 2),
                            st.integers(-86_400_000_000, 86_400_000_000) | st.integers(-1, 600_000_001))
    anything = st.tuples(st.integers(-50, 50), st.integers(-400, 400), st.integers(-10**11, 10**11))
    return near_cancel | anything


@FIXTURE_HEALTH
@given(start=month_edges(), parts=mixed_intervals())
def test_the_lease_is_checked_where_it_ends_around_month_ends_and_leap_days(store, start, parts):
    """The cap holds on the computed expiry: admitted exactly when it lands in (claim, claim + 10 min]."""
    months, days, micros = parts
    expected = expiry_by_the_calendar(start, months, days, micros)
    with connect(store.owner_dsn) as conn:
        try:
            got = conn.execute(f"select appsurface_durable.lease_expiry(%s, {INTERVAL}) as expires",
                               (start, months, days, micros)).fetchone()["expires"]
        except pgerrors.InvalidParameterValue as refused:
            assert not admitted(start, *parts), (start, parts, expected)
            assert "at most 10 minutes after it" in str(refused)
        else:
            assert admitted(start, *parts), (start, parts, got)
            assert got == expected


@FIXTURE_HEALTH
@given(parts=mixed_intervals())
def test_every_lease_landing_outside_ten_minutes_is_refused_with_no_row_changed(store, parts):
    months, days, micros = parts
    if not queue_snapshot(store)[0]:
        due_schedule(store)
    before = queue_snapshot(store)
    with connect(store.dispatcher_dsn) as conn:
        with conn.transaction(force_rollback=True):
            now = conn.execute("select transaction_timestamp() as now").fetchone()["now"]
            assume(not admitted(now, months, days, micros))
        with pytest.raises(pgerrors.InvalidParameterValue, match="at most 10 minutes after it"):
            conn.execute(f"select * from appsurface_durable.claim_schedule_dispatch(%s, {INTERVAL})",
                         ("worker-1", months, days, micros))
    assert queue_snapshot(store) == before


# The two bypasses the cap had, each at a claim time where it lands far from ten minutes, and their
# neighbours that land inside it.
BYPASSES = [
    (datetime(2026, 12, 15, 12, tzinfo=timezone.utc), "100000 years -36000000 days 5 minutes", False),
    (datetime(2026, 12, 15, 12, tzinfo=timezone.utc), "1 mon -30 days 10 minutes", False),  # a day and ten minutes
    (datetime(2028, 2, 28, 12, tzinfo=timezone.utc), "1 mon -30 days 5 minutes", False),  # lands before the claim
    (datetime(2028, 2, 28, 12, tzinfo=timezone.utc), "1 mon -29 days 5 minutes", True),  # exactly five minutes
    (datetime(2026, 12, 15, 12, tzinfo=timezone.utc), "1 mon -31 days 10 minutes", True),  # exactly ten minutes
]


@pytest.mark.parametrize("claimed_at, duration, granted", BYPASSES)
def test_the_bypassing_intervals_at_the_server_clock(store, world, claimed_at, duration, granted):
    world.clock.set_time(claimed_at)
    try:
        store.ensure_partitions()
        due_schedule(store)
        before = queue_snapshot(store)
        with connect(store.dispatcher_dsn) as conn:
            if not granted:
                with pytest.raises(pgerrors.InvalidParameterValue, match="at most 10 minutes after it"):
                    conn.execute(CLAIM, ("worker-1", duration))
                assert queue_snapshot(store) == before
                return
            with conn.transaction():
                now = conn.execute("select transaction_timestamp() as now").fetchone()["now"]
                assert conn.execute(CLAIM, ("worker-1", duration)).fetchall()
        timing = queue_snapshot(store)[1][0]
        assert now < timing["lease_expires_at_utc"] == timing["claimable_at_utc"] <= now + TEN_MINUTES
    finally:
        world.clock.reset()


# -- blank and control-character lease owners ---------------------------------------------------------

def owner_refused(owner: str) -> bool:
    """The reading (note 24m, scenarios/claim_limits.py, from Python's own Unicode database): any Cc, Cf, Zl or Zp
    code point, or nothing left once White_Space and Default_Ignorable code points are removed; or longer than 200
    characters (the reference's own limit)."""
    return len(owner) > 200 or owner_refusal(owner) is not None


CLASSES = owner_classes()
owner_parts = st.one_of(st.sampled_from(CLASSES.controls + CLASSES.formats + CLASSES.tags + CLASSES.separators),
                        st.sampled_from(CLASSES.spaces + [" "] + [c for c in "\t\n\r\x0b\x0c\x85"]),
                        st.sampled_from(sorted(VARIATION_SELECTORS | OTHER_DEFAULT_IGNORABLE)),
                        st.characters(whitelist_categories=("Lu", "Ll", "Lo", "Nd", "Pd", "Po", "Sm", "Mn", "Zs")))


@FIXTURE_HEALTH
@given(owner=st.lists(owner_parts, min_size=1, max_size=8).map("".join))
def test_lease_owners_blank_or_with_control_code_points_are_refused(store, owner):
    """Over Cc, Cf, Zl, Zp, White_Space and Default_Ignorable code points mixed with visible ones: refused
    exactly when the reading says so (no schedule is due, so an admitted claim finds nothing to take)."""
    assume("\x00" not in owner)
    with connect(store.dispatcher_dsn) as conn:
        try:
            conn.execute(CLAIM, (owner, "30 seconds")).fetchall()
        except pgerrors.InvalidParameterValue as refused:
            assert owner_refused(owner), (owner, [hex(ord(c)) for c in owner], str(refused))
            assert "lease owner must" in str(refused)
        else:
            assert not owner_refused(owner), (owner, [hex(ord(c)) for c in owner])


INVISIBLE_OWNERS = ["\u00a0", "\u200b", "\u2028", "\u2029", "\ufeff", "\u3000\u3164", "worker\u200d1", "\u180e",
                    "w\u0085", "\U000e0041"]


@pytest.mark.parametrize("owner", INVISIBLE_OWNERS, ids=lambda o: "-".join(f"U+{ord(c):04X}" for c in o))
def test_owners_that_look_blank_or_hide_a_format_character_are_refused_with_no_row_changed(store, owner):
    due_schedule(store)
    before = queue_snapshot(store)
    with connect(store.dispatcher_dsn) as conn:
        with pytest.raises(pgerrors.InvalidParameterValue, match="lease owner must"):
            conn.execute(CLAIM, (owner, "30 seconds"))
    assert queue_snapshot(store) == before
