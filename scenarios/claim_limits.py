"""The claim function's limits, as the readings docs/protocol-notes.md pins (24i, 24m), written independently of
any implementation: where a lease ends (PostgreSQL's timestamptz + interval, in UTC), which lease owners are blank
or carry a control character (Unicode properties, from Python's unicodedata), and the probes drawn from them. The
schema stage (testhost/runs/schema_stage.py) and explore's hostile phase (scenarios/hostile.py) send these probes; the
reference's own tests (tests/test_reference_claim_arguments.py) judge against the same readings.

The spec's sentence: "The function rejects blank or control-character lease owners and lease durations that are
null, non-positive, or longer than ten minutes before it changes a row".
"""

from __future__ import annotations

import calendar
import hashlib
import unicodedata
from dataclasses import dataclass
from functools import cache
from datetime import date, datetime, timedelta, timezone

from hypothesis import strategies as st

US_PER_DAY = 86_400_000_000
TEN_MINUTES_US = 600_000_000
TEN_MINUTES = timedelta(minutes=10)

# -- where a lease ends ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Interval:
    """A PostgreSQL interval as its three fields, kept apart (PostgreSQL never normalizes them on input)."""

    months: int
    days: int
    micros: int

    def text(self) -> str:
        """Interval input PostgreSQL reads back to exactly these three fields: `1 mons -30 days +00:05:00.000001`."""
        sign = "-" if self.micros < 0 else "+"
        seconds, micros = divmod(abs(self.micros), 1_000_000)
        minutes, seconds = divmod(seconds, 60)
        hours, minutes = divmod(minutes, 60)
        return f"{self.months} mons {self.days} days {sign}{hours:02d}:{minutes:02d}:{seconds:02d}.{micros:06d}"


def _civil_day(year: int, month: int, day: int) -> int:
    """Days from 1970-01-01 in the proleptic Gregorian calendar, any (astronomical) year: the count PostgreSQL's
    dates keep."""
    year -= month <= 2
    era = year // 400
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146_097 + doe - 719_468


def _month_length(year: int, month: int) -> int:
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    return 29 if month == 2 and leap else calendar.mdays[month]


# PostgreSQL's timestamptz range: from 4714-11-24 BC (Julian day 0) to before 294277-01-01, in microseconds.
_LOWEST = _civil_day(-4713, 11, 24) * US_PER_DAY
_BEYOND = _civil_day(294277, 1, 1) * US_PER_DAY


def lease_offset(start: datetime, interval: Interval) -> int | None:
    """Microseconds from `start` to `start + interval` as PostgreSQL computes timestamptz + interval with the
    session's time zone UTC: the months first (the day of the month clamped to the new month's length), then the
    days (each 24 hours in UTC), then the time part. None where PostgreSQL raises instead (a step leaves the
    timestamp range): no lease ends there."""
    start = start.astimezone(timezone.utc)
    time_of_day = ((start.hour * 60 + start.minute) * 60 + start.second) * 1_000_000 + start.microsecond
    first = day = _civil_day(start.year, start.month, start.day)
    if interval.months:
        year, month = divmod(start.year * 12 + start.month - 1 + interval.months, 12)
        day = _civil_day(year, month + 1, min(start.day, _month_length(year, month + 1)))
        if not _LOWEST <= day * US_PER_DAY + time_of_day < _BEYOND:
            return None
    if interval.days:
        day += interval.days
        if not _LOWEST <= day * US_PER_DAY + time_of_day < _BEYOND:
            return None
    end = day * US_PER_DAY + time_of_day + interval.micros
    if not _LOWEST <= end < _BEYOND:
        return None
    return end - (first * US_PER_DAY + time_of_day)


def lease_end(start: datetime, interval: Interval) -> datetime | None:
    """Where the lease ends (None: out of PostgreSQL's range, or out of Python's, years away either way)."""
    offset = lease_offset(start, interval)
    try:
        return None if offset is None else start + timedelta(microseconds=offset)
    except OverflowError:
        return None


def lease_refusal(start: datetime, interval: Interval | None) -> str | None:
    """Why a claim at `start` must refuse this duration (None: it must grant it). The duration is where the lease
    ends minus when it was granted (note 24i): it must end after the claim and at most ten minutes after it."""
    if interval is None:
        return "a null lease duration"
    offset = lease_offset(start, interval)
    if offset is None:
        return "a lease ending outside PostgreSQL's timestamp range"
    if offset <= 0:
        return (f"a lease ending {_span(-offset)} before the claim" if offset else "a lease ending at the claim") + \
            " (non-positive)"
    if offset > TEN_MINUTES_US:
        return f"a lease ending {_span(offset)} after the claim (over ten minutes)"
    return None


def _span(micros: int) -> str:
    return str(timedelta(microseconds=micros))


# -- blank and control-character lease owners -------------------------------------------------------------------

# Unicode's PropList.txt, written out because Python's unicodedata has no property lookup. White_Space: every Zs,
# Zl and Zp code point, and these controls.
WHITE_SPACE_CONTROLS = frozenset(map(chr, (*range(0x09, 0x0E), 0x85)))
# Default_Ignorable_Code_Point outside category Cf (a Cf code point is refused on its own): Variation_Selector and
# the assigned Other_Default_Ignorable_Code_Point ones (combining grapheme joiner, the Hangul fillers, the Khmer
# inherent vowels).
VARIATION_SELECTORS = frozenset(map(chr, (*range(0x180B, 0x180E), 0x180F, *range(0xFE00, 0xFE10),
                                          *range(0xE0100, 0xE01F0))))
OTHER_DEFAULT_IGNORABLE = frozenset(map(chr, (0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x3164, 0xFFA0)))
CONTROL_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})


def looks_blank(char: str) -> bool:
    """White_Space or Default_Ignorable_Code_Point (for a code point not of category Cf)."""
    return (unicodedata.category(char) in ("Zs", "Zl", "Zp") or char in WHITE_SPACE_CONTROLS
            or char in VARIATION_SELECTORS or char in OTHER_DEFAULT_IGNORABLE)


def owner_refusal(owner: str | None) -> str | None:
    """Why the claim must refuse this lease owner (None: it must grant it), by note 24m: blank when nothing is left
    once White_Space and Default_Ignorable code points are removed; a control character when any code point is of
    general category Cc, Cf, Zl or Zp."""
    if owner is None:
        return "a null lease owner"
    controls = sorted({f"U+{ord(c):04X} ({unicodedata.category(c)})" for c in owner
                       if unicodedata.category(c) in CONTROL_CATEGORIES})
    if controls:
        return f"a lease owner holding {', '.join(controls)}"
    if all(looks_blank(c) for c in owner):
        return "a blank lease owner" + (f" ({code_points(owner)})" if owner else " (empty)")
    return None


def code_points(text: str) -> str:
    return " ".join(f"U+{ord(c):04X}" for c in text)


def shown(owner: str | None) -> str | None:
    """An owner as a finding shows it: as written when it is printable ASCII, else with its code points."""
    if owner is None or (owner.isascii() and owner.isprintable()):
        return owner
    return f"{owner!r} ({code_points(owner)})"


@dataclass(frozen=True)
class OwnerClasses:
    """The code points owners are drawn from, each class from Python's Unicode database (assigned code points only,
    so a newer Unicode version cannot disagree). Planes 0, 1 and 14 hold every Cc, Cf, Zs, Zl and Zp code point
    (planes 2 and 3 hold ideographs, 15 and 16 private use). U+0000 is left out: PostgreSQL's text cannot carry it."""

    spaces: list[str]  # Zs beyond U+0020
    separators: list[str]  # Zl, Zp
    controls: list[str]  # Cc
    formats: list[str]  # Cf in the BMP
    tags: list[str]  # Cf beyond it (tags, musical and shorthand format controls)
    visible: list[str]  # Lu, Ll, Lo, Nd of the BMP that look like nothing blank


@cache
def owner_classes() -> OwnerClasses:
    chars = list(map(chr, (*range(1, 0xD800), *range(0xE000, 0x20000), *range(0xE0000, 0xE1000))))
    by_category: dict[str, list[str]] = {}
    for char, category in zip(chars, map(unicodedata.category, chars)):
        by_category.setdefault(category, []).append(char)
    formats = by_category["Cf"]
    return OwnerClasses([c for c in by_category["Zs"] if c != " "], by_category["Zl"] + by_category["Zp"],
                        by_category["Cc"], [c for c in formats if c <= "\uffff"], [c for c in formats if c > "\uffff"],
                        [c for cat in ("Lu", "Ll", "Lo", "Nd") for c in by_category[cat]
                         if c <= "\uffff" and not looks_blank(c)])


def blank_owners() -> st.SearchStrategy[str]:
    """Owners made only of White_Space and Default_Ignorable code points, at least one beyond ASCII: a space, a
    variation selector or another default-ignorable one, mixed with ASCII spaces. None is a control character (a
    tab, a line separator: control_owners draws those), so only blankness refuses them."""
    classes = owner_classes()
    beyond = st.one_of(st.sampled_from(classes.spaces), st.sampled_from(classes.spaces),
                       st.sampled_from(sorted(VARIATION_SELECTORS)), st.sampled_from(sorted(OTHER_DEFAULT_IGNORABLE)))
    parts = st.lists(beyond | st.just(" "), max_size=4)
    return st.tuples(beyond, parts, st.integers(0, 4)).map(lambda t: "".join(t[1][:t[2]]) + t[0]
                                                            + "".join(t[1][t[2]:]))


def control_owners() -> st.SearchStrategy[str]:
    """A lawful owner with one Cc, Cf, Zl or Zp code point put in it (a format or separator one in four of five)."""
    classes = owner_classes()
    char = st.one_of(st.sampled_from(classes.formats), st.sampled_from(classes.formats),
                     st.sampled_from(classes.separators), st.sampled_from(classes.tags),
                     st.sampled_from(classes.controls))
    return st.tuples(lawful_owners(), char, st.integers(0, 64)).map(
        lambda t: t[0][:t[2] % (len(t[0]) + 1)] + t[1] + t[0][t[2] % (len(t[0]) + 1):])


def lawful_owners() -> st.SearchStrategy[str]:
    """Owners every reading grants: letters and digits (any script), ASCII punctuation, an inner ASCII space."""
    word = st.text(st.sampled_from(owner_classes().visible) | st.sampled_from("abcxyz019-_.:"), min_size=1, max_size=8)
    return st.tuples(word, st.none() | word).map(lambda t: t[0] if t[1] is None else f"{t[0]} {t[1]}")


# -- drawn leases -----------------------------------------------------------------------------------------------

# Where a drawn lease ends, from the claim: the edges of (0, 10 min] and a little beyond each.
END_EDGES = (-US_PER_DAY, -1, 0, 1, 300_000_000, TEN_MINUTES_US - 1, TEN_MINUTES_US, TEN_MINUTES_US + 1,
             US_PER_DAY + 300_000_000, 31 * US_PER_DAY)


def months_span(start: datetime, months: int) -> int:
    """Whole days from `start` to `start + months` months (the day clamped to the month's length)."""
    return lease_offset(start, Interval(months, 0, 0)) // US_PER_DAY


def landing(start: datetime, months: int, end: int, slack: int) -> Interval:
    """An interval of `months` months, whose days cancel the months' calendar length (give or take `slack` days,
    moved into the time part) so that, claimed at `start`, the lease ends `end` microseconds after it."""
    return Interval(months, -months_span(start, months) + slack, end - slack * US_PER_DAY)


# Months a drawn interval may span from a claim instant (claim_instants): up to 100,000 years ahead, 5,000 back (the
# calendar PostgreSQL keeps starts in 4713 BC).
MONTHS = st.integers(-60_000, 1_200_000)


def claim_instants() -> st.SearchStrategy[datetime]:
    """Claim instants on a whole second around month ends (leap days, century years), years ahead of any store."""
    def build(year: int, month: int, day: int, second: int) -> datetime:
        return (datetime(year, month, min(day, _month_length(year, month)), tzinfo=timezone.utc)
                + timedelta(seconds=second))
    return st.builds(build, st.sampled_from([2040, 2041, 2044, 2100, 2400]), st.integers(1, 12),
                     st.sampled_from([1, 2, 15, 28, 29, 30, 31]), st.integers(0, 86_399))


def mixed_leases(start: datetime) -> st.SearchStrategy[Interval]:
    """Mixed-sign month/day/time intervals that land, claimed at `start`, on an edge of (0, 10 min]: their parts
    (or a 30-day month's arithmetic) look like another lease than the one they grant."""
    months = st.integers(-25, 25) | MONTHS
    return st.one_of(
        st.builds(lambda m, e, s: landing(start, m, e, s), months, st.sampled_from(END_EDGES), st.integers(-2, 2)),
        st.builds(lambda d, e: Interval(0, d, e - d * US_PER_DAY), st.integers(-3, 3), st.sampled_from(END_EDGES)),
        st.builds(Interval, st.integers(-3, 3), st.integers(-40, 40), st.integers(-2 * US_PER_DAY, 2 * US_PER_DAY)))


@st.composite
def drawn_leases(draw) -> tuple[datetime, Interval]:
    """A claim instant and a mixed-sign interval landing on an edge of the cap at it."""
    start = draw(claim_instants())
    return start, draw(mixed_leases(start))


def refused_leases(day: date) -> st.SearchStrategy[Interval]:
    """Mixed-sign intervals the claim must refuse at every instant of `day` (UTC): where a lease ends depends on
    the claim's date alone, so one instant of it judges them all."""
    start = datetime(day.year, day.month, day.day, tzinfo=timezone.utc)
    return mixed_leases(start).filter(lambda interval: lease_refusal(start, interval) is not None)


def stable_seed(name: str) -> int:
    """A seed derived from a name, the same in every run and on every machine."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big")


def draws(strategy: st.SearchStrategy, seed: int, count: int) -> list:
    """`count` examples of a strategy drawn with a fixed seed: the same list in every run of one Hypothesis."""
    from hypothesis import HealthCheck, Phase, given, seed as hypothesis_seed, settings

    found: list = []

    @hypothesis_seed(seed)
    @settings(max_examples=count, database=None, derandomize=False, deadline=None, phases=(Phase.generate,),
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(example) -> None:
        found.append(example)

    collect()
    return found[:count]
