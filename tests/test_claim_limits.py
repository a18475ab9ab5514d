"""The claim's limits as readings (scenarios/claim_limits.py): the calendar oracle agrees with PostgreSQL itself,
interval and owner literals read back exactly, the owner classes follow Python's Unicode database, and the probes
the schema stage and the hostile phase send are what the readings say (refused, or granted) on their claim days."""

from __future__ import annotations

import unicodedata
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scenarios.claim_limits import (END_EDGES, MONTHS, TEN_MINUTES_US, US_PER_DAY, Interval, blank_owners, claim_instants,
                                    control_owners, draws, lawful_owners, landing, lease_end, lease_offset,
                                    lease_refusal, mixed_leases, owner_classes, owner_refusal)
from scenarios.hostile import CLAIM_DAY, LEASES, hostile_claim
from testhost.runs.schema_probes import claim_probes, sql_literal

UTC = timezone.utc
WORLD = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- pure -----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("start, interval, refused", [
    (datetime(2041, 1, 15, 12, tzinfo=UTC), Interval(1, -30, 300_000_000), "1 day, 0:05:00 after the claim"),
    (datetime(2041, 4, 15, 12, tzinfo=UTC), Interval(1, -30, 300_000_000), None),
    (datetime(2041, 1, 31, tzinfo=UTC), Interval(1, -28, 300_000_000), None),  # 28 February, clamped
    (datetime(2044, 1, 31, tzinfo=UTC), Interval(1, -29, 300_000_000), None),  # 29 February of a leap year
    (datetime(2044, 3, 31, tzinfo=UTC), Interval(-1, 31, TEN_MINUTES_US), None),
    (datetime(2040, 4, 15, tzinfo=UTC), Interval(0, 0, TEN_MINUTES_US + 1), "0:10:00.000001 after the claim"),
    (datetime(2040, 4, 15, tzinfo=UTC), Interval(0, 1, -US_PER_DAY), "at the claim (non-positive)"),
    (datetime(2040, 4, 15, tzinfo=UTC), None, "a null lease duration"),
    (datetime(2040, 12, 15, tzinfo=UTC), Interval(1_200_000, -36_000_000, 300_000_000), "over ten minutes"),
    (datetime(2040, 12, 15, tzinfo=UTC), Interval(-1_200_000, 0, 0), "outside PostgreSQL's timestamp range"),
])
def test_a_lease_is_judged_where_it_ends(start, interval, refused):
    why = lease_refusal(start, interval)
    assert (why is None) if refused is None else (refused in why), why


@given(start=claim_instants(), months=MONTHS, end=st.sampled_from(END_EDGES),
       slack=st.integers(-2, 2))
def test_a_drawn_interval_lands_exactly_where_it_was_aimed(start, months, end, slack):
    interval = landing(start, months, end, slack)
    assert lease_offset(start, interval) == end, (start, interval)


def test_owners_are_refused_by_their_unicode_classes():
    for owner in ("\u00a0", "\u3000 ", "\u3164", "\ufe0f", "\U000e0100", "  ", ""):
        assert "blank" in owner_refusal(owner), owner
    for owner in ("a\u200bb", "w\u00adx", "\u202eworker", "worker\u2028", "worker\u0085", "x\U000e0041"):
        assert "holding" in owner_refusal(owner), owner
    for owner in ("worker-1", "Jörg 1", "作業者 7", "диспетчер", "a\u3164b"):
        assert owner_refusal(owner) is None, owner


def test_the_owner_classes_come_from_the_unicode_database():
    classes = owner_classes()
    assert {unicodedata.category(c) for c in classes.spaces} == {"Zs"} and "\u00a0" in classes.spaces
    assert {unicodedata.category(c) for c in classes.controls} == {"Cc"} and "\x00" not in classes.controls
    assert {unicodedata.category(c) for c in classes.formats + classes.tags} == {"Cf"}
    assert {"\u200b", "\u202e", "\ufeff", "\u00ad", "\u180e"} <= set(classes.formats)
    assert {"\U000e0001", "\U0001d173"} <= set(classes.tags)
    assert classes.separators == ["\u2028", "\u2029"]


@settings(max_examples=300, deadline=None)
@given(blank=blank_owners(), control=control_owners(), lawful=lawful_owners())
def test_drawn_owners_are_what_their_kind_says(blank, control, lawful):
    assert "blank" in owner_refusal(blank) and "holding" in owner_refusal(control) and owner_refusal(lawful) is None
    assert any(not c.isascii() for c in blank)


@settings(max_examples=300, deadline=None)
@given(hostile_claim())
def test_every_drawn_hostile_claim_is_refused_all_day_on_the_claim_day(hostile):
    """The hostile run's clock stands on T0's day: a drawn argument must be refused at any instant of it."""
    day = datetime(CLAIM_DAY.year, CLAIM_DAY.month, CLAIM_DAY.day, tzinfo=UTC)
    owner, duration = hostile.args["lease_owner"], hostile.args["lease_duration"]
    if hostile.field == "lease_owner":
        assert owner_refusal(owner) is not None or len(owner) > 200 or "\x00" in owner, hostile
    elif hostile.why.startswith("mixed-sign, claimed on"):
        months, _, days, _, time = duration.split()
        sign = -1 if time.startswith("-") else 1
        hours, minutes, seconds = time[1:].split(":")
        micros = sign * ((int(hours) * 60 + int(minutes)) * 60_000_000 + round(float(seconds) * 1_000_000))
        interval = Interval(int(months), int(days), micros)
        for at in (day, day + timedelta(days=1, microseconds=-1)):
            assert lease_refusal(at, interval) is not None, (hostile, at)


def test_the_stage_probes_are_fixed_and_hold_grants_and_refusals():
    probes = claim_probes()
    assert [p.at for p in probes] == sorted(p.at for p in probes)
    verdicts = {p.field: set() for p in probes}
    for probe in probes:
        verdicts[probe.field].add(probe.refusal(probe.at) is None)
    assert verdicts == {"lease_owner": {True, False}, "lease_duration": {True, False}}
    drawn = [p for p in probes if p.what.startswith("drawn")]
    assert len(drawn) == 24 + 3 * 8
    assert draws(mixed_leases(datetime(2040, 1, 31, tzinfo=UTC)), 7, 12) == draws(
        mixed_leases(datetime(2040, 1, 31, tzinfo=UTC)), 7, 12)


# -- against PostgreSQL ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def utc_session(world):
    with psycopg.connect(world.admin_dsn(), autocommit=True) as conn:
        conn.execute("set time zone 'UTC'")
        yield conn


month_edges = st.builds(lambda instant, hours: instant + timedelta(hours=hours), claim_instants(),
                        st.sampled_from([0, -24, 24 * 27, 24 * 28]))


@pytest.mark.world
@WORLD
@given(start=month_edges | st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30),
                                        timezones=st.just(UTC)),
       parts=st.tuples(st.integers(-30, 30), st.integers(-1000, 1000), st.integers(-10**12, 10**12)) | st.tuples(
           st.integers(-2_000_000, 2_000_000), st.integers(-50_000_000, 50_000_000), st.integers(-10**12, 10**12)))
def test_the_calendar_oracle_is_postgresqls_timestamptz_plus_interval(utc_session, start, parts):
    """Over month ends, leap days and intervals of every sign, the interval's text reads back as its three fields,
    and timestamptz + interval ends where the oracle says, or raises where it says no lease ends."""
    interval = Interval(*parts)
    months, days, micros = parts
    read, built = utc_session.execute(
        "select %s::interval::text, (make_interval(months => %s, days => %s) + %s::bigint * interval '1 microsecond')"
        "::text", (interval.text(), months, days, micros)).fetchone()
    assert read == built
    expected = lease_offset(start, interval)
    try:  # the end as microseconds after the start (exact: extract returns numeric), whatever year it lands in
        got = utc_session.execute(
            "select ((extract(epoch from %(start)s::timestamptz + %(interval)s::interval) "
            "- extract(epoch from %(start)s::timestamptz)) * 1000000)::bigint",
            {"start": start, "interval": interval.text()}).fetchone()[0]
    except psycopg.errors.DatetimeFieldOverflow:
        assert expected is None, (start, interval)
        return
    assert got == expected, (start, interval)
    end = lease_end(start, interval)
    assert end is None or end == start + timedelta(microseconds=got)  # None: past Python's year 9999


@pytest.mark.world
@settings(max_examples=100, deadline=None)
@given(st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=12))
def test_an_owner_literal_reads_back_exactly(utc_session, owner):
    assert utc_session.execute(f"select {sql_literal(owner)}::text").fetchone()[0] == owner


@pytest.mark.world
def test_the_tabled_hostile_mixed_leases_end_outside_the_cap_on_the_claim_day(utc_session):
    day = datetime(CLAIM_DAY.year, CLAIM_DAY.month, CLAIM_DAY.day, 0, 2, tzinfo=UTC)
    for text, why in LEASES:
        if text is None:
            continue
        try:
            end = utc_session.execute("select %s::timestamptz + %s::interval", (day, text)).fetchone()[0]
        except psycopg.errors.DatetimeFieldOverflow:
            continue  # no lease ends out of range
        assert not day < end <= day + timedelta(minutes=10), (text, why, end)
