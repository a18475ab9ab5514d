"""Pure logic, no database: the evaluator (reference/evaluator.py) and the Work identity (reference/identity.py).

Every expectation is computed independently of the code under test: a brute-force walk over the grid
anchor + n*step (seeded by a float estimate, then corrected by direct comparisons, never by the floor
division the evaluator uses), hand-computed boundaries, and a SHA-256 digest taken outside Python.
The Every grid runs over every integer n, before the anchor as well as after it, as the evaluator does.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from reference.evaluator import (Anomaly, Due, NoOp, Timing, count_between, evaluate, from_us, last_at_or_before,
                                 next_after, to_us)
from reference.identity import IDEMPOTENCY_PREFIX, OccurrenceIdentity, canonical_instant, work_identity

US = 1
SECOND = 1_000_000 * US
DAY = 86_400 * SECOND
LO = to_us(datetime(1971, 1, 1, tzinfo=timezone.utc))   # every instant drawn stays in [LO, HI]
HI = to_us(datetime(2400, 1, 1, tzinfo=timezone.utc))
MAX_POINTS = 3_000                                        # bound on (cutoff - cursor) / step
HUGE_WINDOW = timedelta(days=500 * 366)                   # wider than any span drawn: never an anomaly
T0 = datetime(2024, 3, 1, 12, 0, tzinfo=timezone.utc)


def utc(us: int) -> datetime:
    return from_us(us)


def every(anchor: int, step: int) -> Timing:
    return Timing("every", every=timedelta(microseconds=step), anchor_utc=utc(anchor))


# -- the brute force ----------------------------------------------------------------------------------

def _grid_start(anchor: int, step: int, t: int) -> int:
    """Some n with anchor + n*step <= t: a float estimate, then stepped down by direct comparison."""
    n = int((t - anchor) / step) - 2
    while anchor + n * step > t:
        n -= 1
    return n


def brute_points(timing: Timing, lo: int, hi: int) -> list[int]:
    """Every nominal instant in (lo, hi], in microseconds, found by walking the candidates one by one."""
    if timing.kind == "at":
        single = to_us(timing.at_utc)
        return [single] if lo < single <= hi else []
    if timing.kind == "after":
        single = to_us(timing.accepted_at_utc) + timing.after // timedelta(microseconds=1)
        return [single] if lo < single <= hi else []
    anchor, step = to_us(timing.anchor_utc), timing.every // timedelta(microseconds=1)
    n = _grid_start(anchor, step, lo)
    while anchor + n * step <= lo:
        n += 1
    found = []
    while anchor + n * step <= hi:
        found.append(anchor + n * step)
        n += 1
    return found


def brute_next_after(timing: Timing, t: int) -> int | None:
    if timing.kind != "every":
        points = brute_points(timing, t, HI * 2)
        return points[0] if points else None
    anchor, step = to_us(timing.anchor_utc), timing.every // timedelta(microseconds=1)
    n = _grid_start(anchor, step, t)
    while anchor + n * step <= t:
        n += 1
    return anchor + n * step


def brute_last_at_or_before(timing: Timing, t: int) -> int | None:
    if timing.kind != "every":
        points = brute_points(timing, 0, t)
        return points[-1] if points else None
    anchor, step = to_us(timing.anchor_utc), timing.every // timedelta(microseconds=1)
    n = _grid_start(anchor, step, t)
    while anchor + (n + 1) * step <= t:
        n += 1
    return anchor + n * step


def expected_evaluation(timing: Timing, cursor: int, cutoff: int, window: timedelta):
    if cutoff <= cursor:
        return NoOp("cutoff-not-after-cursor")
    points = brute_points(timing, cursor, cutoff)
    if not points:
        return NoOp("nothing-due")
    lateness = timedelta(microseconds=cutoff - points[0])
    if lateness > window:
        return Anomaly(utc(points[0]), utc(cutoff), lateness, window)
    return Due(utc(points[0]), utc(points[-1]), len(points))


def instants_of(due: Due, timing: Timing) -> list[int]:
    """The instants a Due stands for: the grid points in [first, last] (one point for At and After)."""
    first, last = to_us(due.first_utc), to_us(due.last_utc)
    if timing.kind != "every":
        assert first == last
        return [first]
    step = timing.every // timedelta(microseconds=1)
    assert (last - first) % step == 0, "a Due's last instant must lie on the same grid as its first"
    return list(range(first, last + 1, step))


# -- strategies ---------------------------------------------------------------------------------------

steps = st.one_of(st.integers(1, 1_000), st.integers(1, SECOND), st.integers(1, 3 * DAY),
                  st.sampled_from([1, 7, SECOND, 60 * SECOND, 3_600 * SECOND, DAY, 7 * DAY]))


@st.composite
def grid_relative(draw, anchor: int, step: int, lo: int, hi: int) -> int:
    """An instant in [lo, hi], often exactly on the grid or one microsecond either side of a point."""
    k = draw(st.integers((lo - anchor) // step + 1, (hi - anchor) // step - 1))
    offset = draw(st.one_of(st.sampled_from([0, 1, -1]), st.integers(0, step - 1)))
    return min(max(anchor + k * step + offset, lo), hi)


@st.composite
def every_timings(draw) -> Timing:
    step = draw(steps)
    anchor = draw(st.integers(LO + 2 * DAY, HI - 2 * DAY))
    return every(anchor, step)


@st.composite
def single_timings(draw) -> Timing:
    if draw(st.booleans()):
        return Timing("at", at_utc=utc(draw(st.integers(LO, HI))))
    accepted = draw(st.integers(LO, HI - 400 * DAY))
    after = draw(st.one_of(st.integers(1, 1_000), st.integers(1, 365 * DAY)))
    return Timing("after", after=timedelta(microseconds=after), accepted_at_utc=utc(accepted))


def step_of(timing: Timing) -> int:
    return timing.every // timedelta(microseconds=1) if timing.kind == "every" else DAY


def single_of(timing: Timing) -> int:
    return to_us(timing.single_instant())


@st.composite
def interval(draw, timing: Timing) -> tuple[int, int]:
    """(cursor, cutoff): cutoff after the cursor by at most MAX_POINTS steps, sometimes at or behind it."""
    if timing.kind == "every":
        anchor, step = to_us(timing.anchor_utc), step_of(timing)
        cursor = draw(grid_relative(anchor, step, LO, HI - (MAX_POINTS + 2) * step))
        m = draw(st.integers(-3, MAX_POINTS))
        offset = draw(st.one_of(st.sampled_from([0, 1, -1]), st.integers(0, step - 1)))
        cutoff = cursor + m * step + offset
        # Keep it on the grid's phase sometimes, so the cutoff lands exactly on a nominal instant.
        if draw(st.booleans()):
            cutoff = brute_last_at_or_before(timing, cutoff) + draw(st.sampled_from([0, 1, -1]))
        return cursor, min(cutoff, HI)
    single = single_of(timing)
    near = st.one_of(st.sampled_from([single, single - 1, single + 1]), st.integers(LO, HI))
    return draw(near), draw(near)


# -- properties: every reported instant equals the brute force ---------------------------------------

@given(st.data(), st.one_of(every_timings(), single_timings()))
def test_instants_equal_brute_force(data, timing):
    cursor, cutoff = data.draw(interval(timing), label="cursor, cutoff")
    points = brute_points(timing, cursor, cutoff)
    lateness = cutoff - points[0] if points else 1
    window = timedelta(microseconds=data.draw(st.one_of(
        st.sampled_from([max(lateness - 1, 1), max(lateness, 1), lateness + 1]), st.integers(1, 400 * 366 * DAY)),
        label="safety window µs"))

    assert count_between(timing, utc(cursor), utc(cutoff)) == len(points)
    nxt = next_after(timing, utc(cursor))
    expected_next = brute_next_after(timing, cursor)
    assert (to_us(nxt) if nxt is not None else None) == expected_next
    last = last_at_or_before(timing, utc(cutoff))
    expected_last = brute_last_at_or_before(timing, cutoff)
    assert (to_us(last) if last is not None else None) == expected_last
    if points:
        assert expected_next == points[0] and expected_last == points[-1]

    result = evaluate(timing, utc(cursor), utc(cutoff), window)
    assert result == expected_evaluation(timing, cursor, cutoff, window)
    if isinstance(result, Due):
        assert instants_of(result, timing) == points
        assert result.kind == ("nominal" if len(points) == 1 else "recovery")


@given(every_timings(), st.integers(-10, 10))
def test_every_grid_points_themselves(timing, k):
    """On a grid point p: next_after(p) is the next point, last_at_or_before(p) is p itself."""
    anchor, step = to_us(timing.anchor_utc), step_of(timing)
    p = anchor + k * step
    assert to_us(next_after(timing, utc(p))) == p + step
    assert to_us(next_after(timing, utc(p - 1))) == p
    assert to_us(last_at_or_before(timing, utc(p))) == p
    assert to_us(last_at_or_before(timing, utc(p + step - 1))) == p
    assert count_between(timing, utc(p - 1), utc(p)) == 1
    assert count_between(timing, utc(p), utc(p + step - 1)) == 0


@given(st.data(), st.one_of(every_timings(), single_timings()))
def test_result_does_not_depend_on_the_time_zone_of_the_inputs(data, timing):
    cursor, cutoff = data.draw(interval(timing))
    zone = timezone(timedelta(minutes=data.draw(st.integers(-14 * 60, 14 * 60))))
    window = HUGE_WINDOW
    in_utc = evaluate(timing, utc(cursor), utc(cutoff), window)
    elsewhere = evaluate(timing, utc(cursor).astimezone(zone), utc(cutoff).astimezone(zone), window)
    assert in_utc == elsewhere


# -- properties: successive passes -----------------------------------------------------------------------

@st.composite
def pass_plan(draw, timing_strategy=st.one_of(every_timings(), single_timings())):
    """A timing, an initial cursor and non-decreasing cutoffs spanning at most MAX_POINTS steps in all."""
    timing = draw(timing_strategy)
    step = step_of(timing)
    if timing.kind == "every":
        cursor = draw(grid_relative(to_us(timing.anchor_utc), step, LO, HI - (MAX_POINTS + 2) * step))
    else:
        cursor = single_of(timing) - draw(st.integers(-2 * step, 4 * step))
    budget = MAX_POINTS * step
    gaps = draw(st.lists(st.one_of(st.just(0), st.integers(1, step), st.integers(1, max(1, budget // 8))),
                         min_size=1, max_size=12))
    cutoffs, at = [], cursor
    for gap in gaps:
        at = min(at + gap, cursor + budget, HI)
        cutoffs.append(at)
    return timing, cursor, cutoffs


@given(pass_plan(st.one_of(every_timings())))
def test_coalesced_range_only_grows_forward(plan):
    """Each Due extends one running coalesced range: its first instant never changes, its last never recedes."""
    timing, cursor, cutoffs = plan
    initial = cursor
    coalesced: tuple[datetime, datetime] | None = None
    for cutoff in cutoffs:
        result = evaluate(timing, utc(cursor), utc(cutoff), HUGE_WINDOW)
        assert not isinstance(result, Anomaly)
        if isinstance(result, NoOp):
            continue
        if coalesced is None:
            coalesced = (result.first_utc, result.last_utc)
        else:
            assert result.first_utc > coalesced[1], "a later pass reports an instant already coalesced"
            grown = (coalesced[0], max(coalesced[1], result.last_utc))
            assert grown[0] == coalesced[0] and grown[1] >= coalesced[1]
            assert result.last_utc > coalesced[1]
            coalesced = grown
        cursor = cutoff
    points = brute_points(timing, initial, cutoffs[-1])
    if points:
        assert coalesced is not None
        assert (to_us(coalesced[0]), to_us(coalesced[1])) == (points[0], points[-1])
    else:
        assert coalesced is None


@given(pass_plan(), st.one_of(st.just(HUGE_WINDOW), st.integers(1, 30 * DAY).map(lambda us: timedelta(microseconds=us))))
def test_successive_passes_lose_and_repeat_nothing(plan, window):
    """cursor := cutoff after each Due: ranges are disjoint and increasing; their union is the brute force.

    An anomaly leaves the cursor where it was, and every later (larger) cutoff is then anomalous too.
    """
    timing, cursor, cutoffs = plan
    initial = cursor
    reported: list[int] = []
    ranges: list[Due] = []
    anomalous = False
    for cutoff in cutoffs:
        result = evaluate(timing, utc(cursor), utc(cutoff), window)
        if anomalous:
            assert isinstance(result, Anomaly), "an anomaly must stay until a repair, not clear itself"
        if isinstance(result, Anomaly):
            anomalous = True
            assert result.expected_due_utc == utc(brute_next_after(timing, cursor))
            continue  # the processor suspends: the cursor does not move
        if isinstance(result, NoOp):
            assert result.reason == ("cutoff-not-after-cursor" if cutoff <= cursor else "nothing-due")
            continue
        if ranges:
            assert ranges[-1].last_utc < result.first_utc, "recovery ranges overlap or go backwards"
        assert cursor < to_us(result.first_utc) <= to_us(result.last_utc) <= cutoff
        ranges.append(result)
        reported.extend(instants_of(result, timing))
        cursor = cutoff
    if not anomalous:
        assert reported == brute_points(timing, initial, cutoffs[-1])
        assert sum(r.count for r in ranges) == len(reported)
    assert len(reported) == len(set(reported))


# -- boundaries, by hand ----------------------------------------------------------------------------------

MINUTE = timedelta(minutes=1)
EVERY_MINUTE = Timing("every", every=MINUTE, anchor_utc=T0)
WINDOW = timedelta(hours=1)
ONE_US = timedelta(microseconds=1)


def test_instant_exactly_at_the_cursor_is_not_due():
    assert evaluate(EVERY_MINUTE, T0, T0 + 30 * timedelta(seconds=1), WINDOW) == NoOp("nothing-due")
    assert evaluate(EVERY_MINUTE, T0, T0 + MINUTE, WINDOW) == Due(T0 + MINUTE, T0 + MINUTE, 1)
    at = Timing("at", at_utc=T0)
    assert evaluate(at, T0, T0 + MINUTE, WINDOW) == NoOp("nothing-due")
    assert evaluate(at, T0 - ONE_US, T0 + MINUTE, WINDOW) == Due(T0, T0, 1)


def test_instant_exactly_at_the_cutoff_is_due():
    assert evaluate(EVERY_MINUTE, T0 - ONE_US, T0, WINDOW) == Due(T0, T0, 1)
    assert evaluate(EVERY_MINUTE, T0 - ONE_US, T0 - ONE_US + MINUTE, WINDOW) == Due(T0, T0, 1)
    assert evaluate(EVERY_MINUTE, T0 + ONE_US, T0 + MINUTE - ONE_US, WINDOW) == NoOp("nothing-due")
    after = Timing("after", after=timedelta(seconds=90), accepted_at_utc=T0)
    assert evaluate(after, T0, T0 + timedelta(seconds=90), WINDOW) == Due(T0 + timedelta(seconds=90),
                                                                           T0 + timedelta(seconds=90), 1)
    assert evaluate(after, T0, T0 + timedelta(seconds=90) - ONE_US, WINDOW) == NoOp("nothing-due")


def test_cutoff_equal_to_or_before_the_cursor_is_a_noop():
    assert evaluate(EVERY_MINUTE, T0, T0, WINDOW) == NoOp("cutoff-not-after-cursor")
    assert evaluate(EVERY_MINUTE, T0 + MINUTE, T0, WINDOW) == NoOp("cutoff-not-after-cursor")
    assert evaluate(EVERY_MINUTE, T0 + ONE_US, T0, WINDOW) == NoOp("cutoff-not-after-cursor")
    # Even with instants in between and a window so small every one of them would be an anomaly.
    assert evaluate(EVERY_MINUTE, T0 + timedelta(days=1), T0, ONE_US) == NoOp("cutoff-not-after-cursor")


def test_lateness_equal_to_the_safety_window_is_due():
    cursor = T0 - ONE_US
    cutoff = T0 + WINDOW  # first due instant T0, lateness exactly one hour
    result = evaluate(EVERY_MINUTE, cursor, cutoff, WINDOW)
    assert result == Due(T0, T0 + WINDOW, 61)
    assert result.kind == "recovery"


def test_one_microsecond_past_the_safety_window_is_an_anomaly():
    cursor = T0 - ONE_US
    cutoff = T0 + WINDOW + ONE_US
    result = evaluate(EVERY_MINUTE, cursor, cutoff, WINDOW)
    assert isinstance(result, Anomaly)
    assert result.expected_due_utc == T0
    assert result.cutoff_utc == cutoff
    assert result.lateness == WINDOW + ONE_US
    assert result.safety_window == WINDOW
    single = Timing("at", at_utc=T0)
    assert evaluate(single, cursor, T0 + WINDOW, WINDOW) == Due(T0, T0, 1)
    assert evaluate(single, cursor, T0 + WINDOW + ONE_US, WINDOW) == Anomaly(T0, T0 + WINDOW + ONE_US,
                                                                             WINDOW + ONE_US, WINDOW)


def test_one_instant_is_nominal_several_are_recovery():
    one = evaluate(EVERY_MINUTE, T0, T0 + MINUTE + timedelta(seconds=59), WINDOW)
    assert one == Due(T0 + MINUTE, T0 + MINUTE, 1) and one.kind == "nominal"
    two = evaluate(EVERY_MINUTE, T0, T0 + 2 * MINUTE, WINDOW)
    assert two == Due(T0 + MINUTE, T0 + 2 * MINUTE, 2) and two.kind == "recovery"
    many = evaluate(EVERY_MINUTE, T0 - ONE_US, T0 + 10 * MINUTE + timedelta(seconds=30), WINDOW)
    assert many == Due(T0, T0 + 10 * MINUTE, 11) and many.kind == "recovery"


def test_grid_before_the_anchor_counts_too():
    """The evaluator's Every grid extends before the anchor (every integer n): pinned as it behaves."""
    anchor = T0 + timedelta(days=1)
    timing = Timing("every", every=timedelta(hours=1), anchor_utc=anchor)
    assert next_after(timing, T0) == T0 + timedelta(hours=1)
    assert evaluate(timing, T0, T0 + timedelta(hours=1), WINDOW) == Due(T0 + timedelta(hours=1),
                                                                         T0 + timedelta(hours=1), 1)


def test_single_instant_in_the_past_has_nothing_after_the_cursor():
    for timing in (Timing("at", at_utc=T0), Timing("after", after=MINUTE, accepted_at_utc=T0 - MINUTE)):
        assert next_after(timing, T0) is None
        assert next_after(timing, T0 + timedelta(days=1)) is None
        assert next_after(timing, T0 - ONE_US) == T0
        assert last_at_or_before(timing, T0 - ONE_US) is None
        assert last_at_or_before(timing, T0) == T0
        assert count_between(timing, T0, T0 + timedelta(days=1)) == 0
        assert evaluate(timing, T0, T0 + timedelta(days=1), timedelta(days=2)) == NoOp("nothing-due")
        assert evaluate(timing, T0 + MINUTE, T0 + 2 * MINUTE, WINDOW) == NoOp("nothing-due")


def test_after_is_anchored_on_acceptance():
    timing = Timing("after", after=timedelta(minutes=5), accepted_at_utc=T0)
    assert timing.single_instant() == T0 + timedelta(minutes=5)
    assert evaluate(timing, T0, T0 + timedelta(minutes=6), WINDOW) == Due(T0 + timedelta(minutes=5),
                                                                           T0 + timedelta(minutes=5), 1)


def test_microsecond_conversions_round_trip():
    assert to_us(datetime(1970, 1, 1, tzinfo=timezone.utc)) == 0
    assert to_us(datetime(1970, 1, 1, 0, 0, 1, 5, tzinfo=timezone.utc)) == 1_000_005
    assert to_us(datetime(1970, 1, 1, 1, 0, tzinfo=timezone(timedelta(hours=1)))) == 0
    assert from_us(-1) == datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=timezone.utc)


@given(st.integers(to_us(datetime(1, 1, 2, tzinfo=timezone.utc)), to_us(datetime(9999, 12, 30, tzinfo=timezone.utc))))
def test_to_us_from_us_inverse(us):
    assert to_us(from_us(us)) == us


# -- identity ---------------------------------------------------------------------------------------------

SCHEDULE = uuid.UUID("0b7c7f5e-3f1a-4c2d-9e8f-112233445566")
FIRST = datetime(2024, 2, 29, 12, 34, 56, 789_012, tzinfo=timezone.utc)
OCCURRENCE = OccurrenceIdentity("tenant-a", SCHEDULE, 3, "recovery", FIRST)
CANONICAL = "tenant-a|0b7c7f5e-3f1a-4c2d-9e8f-112233445566|3|recovery|2024-02-29T12:34:56.789012Z"
# sha256("appsurface-durable/schedule-work/v1|" + CANONICAL) computed with coreutils sha256sum:
#   1a6caea8461ae42b7e5c014649ae09b3…; byte 6 0xe4 -> 0x84 (version 8), byte 8 0x7e -> 0xbe (RFC variant).
GOLDEN_WORK_ID = uuid.UUID("1a6caea8-461a-842b-be5c-014649ae09b3")
CANONICAL_FORMAT = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$")


def test_canonical_text_and_golden_identity():
    assert OCCURRENCE.canonical == CANONICAL
    work = work_identity(OCCURRENCE, "billing.close-day")
    assert work.work_id == GOLDEN_WORK_ID
    assert work.idempotency_key == "schedule-occurrence/v1|" + CANONICAL
    assert work.command == "billing.close-day"
    assert work.activity == f"schedule/{SCHEDULE}/g3/recovery"


def test_work_id_follows_the_documented_derivation():
    digest = bytearray(hashlib.sha256(("appsurface-durable/schedule-work/v1|" + CANONICAL).encode()).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x80
    digest[8] = (digest[8] & 0x3F) | 0x80
    assert work_identity(OCCURRENCE, "x").work_id.bytes == bytes(digest)


def test_canonical_instant_is_utc_also_for_other_zones():
    plus_five_thirty = timezone(timedelta(hours=5, minutes=30))
    local = FIRST.astimezone(plus_five_thirty)
    assert local.hour == 18
    assert canonical_instant(local) == "2024-02-29T12:34:56.789012Z"
    shifted = OccurrenceIdentity("tenant-a", SCHEDULE, 3, "recovery", local)
    assert shifted.canonical == CANONICAL
    assert work_identity(shifted, "c") == work_identity(OCCURRENCE, "c")
    minus = timezone(timedelta(hours=-8))
    assert canonical_instant(datetime(2023, 12, 31, 16, 0, tzinfo=minus)) == "2024-01-01T00:00:00.000000Z"
    assert canonical_instant(datetime(2024, 1, 1, tzinfo=timezone.utc)) == "2024-01-01T00:00:00.000000Z"


def test_canonical_instant_pads_years_before_1000_and_refuses_naive_instants():
    assert canonical_instant(datetime(999, 1, 2, tzinfo=timezone.utc)) == "0999-01-02T00:00:00.000000Z"
    with pytest.raises(ValueError, match="no time zone"):
        canonical_instant(datetime(2031, 1, 2))


scope_ids = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,20}", fullmatch=True)
instants = st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(9998, 12, 31),
                        timezones=st.sampled_from([timezone.utc, timezone(timedelta(hours=14)),
                                                   timezone(timedelta(hours=-12)),
                                                   timezone(timedelta(hours=5, minutes=45))]))
occurrences = st.builds(OccurrenceIdentity, scope_ids, st.uuids(), st.integers(1, 2**62),
                        st.sampled_from(["nominal", "recovery", "coalesced"]), instants)
commands = st.text(min_size=1, max_size=40)


@given(occurrences, commands)
def test_work_identity_is_deterministic_and_well_formed(occurrence, command):
    first = work_identity(occurrence, command)
    again = work_identity(OccurrenceIdentity(occurrence.scope_id, uuid.UUID(str(occurrence.schedule_id)),
                                             occurrence.generation, occurrence.kind,
                                             occurrence.first_nominal_utc.astimezone(timezone.utc)), command)
    assert first == again
    assert first.work_id.version == 8
    assert first.work_id.variant == uuid.RFC_4122
    assert first.idempotency_key.startswith(IDEMPOTENCY_PREFIX)
    assert IDEMPOTENCY_PREFIX == "schedule-occurrence/v1|"
    assert first.idempotency_key == IDEMPOTENCY_PREFIX + occurrence.canonical
    assert first.command == command
    assert first.activity == f"schedule/{occurrence.schedule_id}/g{occurrence.generation}/{occurrence.kind}"
    scope, schedule, generation, kind, instant = occurrence.canonical.split("|")
    assert (scope, schedule, generation, kind) == (occurrence.scope_id, str(occurrence.schedule_id),
                                                   str(occurrence.generation), occurrence.kind)
    assert CANONICAL_FORMAT.match(instant)
    parsed = datetime.strptime(instant, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
    assert parsed == occurrence.first_nominal_utc


@given(occurrences, st.sampled_from(["scope_id", "schedule_id", "generation", "kind", "first_nominal_utc"]),
       st.data())
def test_work_identity_changes_with_every_identity_field(occurrence, field, data):
    changed = {
        "scope_id": scope_ids, "schedule_id": st.uuids(), "generation": st.integers(1, 2**62),
        "kind": st.sampled_from(["nominal", "recovery", "coalesced"]),
        "first_nominal_utc": instants,
    }[field]
    value = data.draw(changed.filter(lambda v: v != getattr(occurrence, field)), label=field)
    fields = {f: getattr(occurrence, f) for f in ("scope_id", "schedule_id", "generation", "kind", "first_nominal_utc")}
    other = OccurrenceIdentity(**{**fields, field: value})
    a, b = work_identity(occurrence, "cmd"), work_identity(other, "cmd")
    assert a.work_id != b.work_id
    assert a.idempotency_key != b.idempotency_key


@given(occurrences, commands, commands)
def test_target_command_is_carried_not_hashed(occurrence, one, two):
    """The command is the generation's target command unchanged; it is not part of the occurrence identity."""
    assume(one != two)
    a, b = work_identity(occurrence, one), work_identity(occurrence, two)
    assert (a.work_id, a.idempotency_key, a.activity) == (b.work_id, b.idempotency_key, b.activity)
    assert (a.command, b.command) == (one, two)
