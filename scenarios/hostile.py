"""Hostile inputs, drawn: every client operation and `claim_schedule_dispatch` given one argument that no
implementation may accept (control and format characters, empty and huge strings, naive and out-of-range instants,
zero, negative, huge and mixed-sign durations, unknown kinds and schedules, wrong JSON types, missing and unknown
fields), the rest of the call lawful, so the refusal must name that one argument (docs/protocol-notes.md, 35a-35k)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from hypothesis import strategies as st

from .claim_limits import blank_owners, control_owners, lease_refusal, owner_refusal, refused_leases
from .times import T0

CLIENT_OPS = ("create", "update", "delete", "release-after-recovery")
CLAIM = "claim"
# One of each: C0 controls and DEL; format characters (zero-width space, the bidi overrides and isolates, the byte
# order mark, the soft hyphen, the Arabic letter mark); the line and paragraph separators; a lone surrogate.
CONTROL = tuple(chr(c) for c in range(0x20)) + ("\x7f",)
FORMAT = ("\u200b", "\u200e", "\u202e", "\u2066", "\ufeff", "\u00ad", "\u061c", "\u2028", "\u2029")
SURROGATE = ("\ud800",)
HUGE = 1 << 20  # a megabyte
WORD = "probe"


@dataclass(frozen=True)
class Hostile:
    """One call: the operation, its arguments as sent, the argument that is hostile and how, and the problem
    names that answer it lawfully (for the claim: the function refuses; no problem is involved)."""

    op: str
    field: str
    why: str
    args: dict
    problems: tuple[str, ...] = ("validation",)

    def to_json(self) -> dict:
        return {"op": self.op, "field": self.field, "why": self.why, "args": self.args,
                "problems": list(self.problems)}


def strings(word: str = WORD, *, nul: bool = True, blank: bool = True) -> tuple[tuple[Any, str], ...]:
    """Strings no identifier-like field may hold: (value, why), simplest first. Without `nul`, none PostgreSQL's
    text cannot carry at all (U+0000, a lone surrogate)."""
    chars = CONTROL + FORMAT + SURROGATE if nul else CONTROL[1:] + FORMAT
    out = [(word + c, f"U+{ord(c):04X} in a string") for c in chars]
    out += [(c + word, f"U+{ord(c):04X} first in a string") for c in ("\x01", "\u202e", "\ufeff")]
    if blank:
        out += [("", "an empty string"), (" ", "a blank string"), ("\t", "a tab"), ("\u3000 ", "a blank string"),
                ("\u200b", "a zero-width space alone")]
    return tuple(out) + (("x" * HUGE, "a 1 MB string"), (word + "\x01" * 16 + "x" * HUGE, "a 1 MB string with "
                                                                                        "control characters"))


WRONG_TYPES = ((1, "a number"), (-1.5, "a negative number"), (True, "a boolean"), ({}, "an object"),
               ({"value": WORD}, "an object"), ([], "a list"), ([WORD], "a list"))


def wrong_types(*, null: bool = True) -> tuple[tuple[Any, str], ...]:
    """JSON values of a type a string (or a number, an object) field is not: (value, why)."""
    return WRONG_TYPES + (((None, "null"),) if null else ())


NOT_INSTANTS = (
    ("2031-03-03T01:00:00", "a naive date-time (no offset)"),
    ("2031-03-04", "a date without a time (no offset)"),
    ("2031-03-03 01:00:00", "a naive date-time with a space (no offset)"),
    ("10000-01-01T00:00:00Z", "year 10000"),
    ("+294277-01-01T00:00:00Z", "past PostgreSQL's range"),
    ("9999-12-31T23:59:59-14:00", "year 9999 west of UTC: year 10000 in UTC"),
    ("0001-01-01T00:00:00+14:00", "year 1 east of UTC: year 0 in UTC"),
    ("0000-01-01T00:00:00Z", "year 0"),
    ("2031-02-30T00:00:00Z", "February 30"),
    ("2031-03-03T24:00:01Z", "hour 24"),
    ("+90s", "a scenario time, not an instant"),
    ("now", "a word"),
    ("1900000000", "epoch seconds as a string"),
    (1900000000, "epoch seconds"), (True, "a boolean"), ({}, "an object"), (["2031-03-03T01:00:00Z"], "a list"),
)


def instants(*, null: bool) -> tuple[tuple[Any, str], ...]:
    return NOT_INSTANTS + strings("2031-03-03T01:00:00Z") + (((None, "null"),) if null else ())


NOT_DURATIONS = (
    (0, "zero"), (0.0, "zero"), (-1, "negative"), (-0.000001, "a negative microsecond"), (1e-7, "under a microsecond"),
    (1e300, "huge"), (-1e300, "hugely negative"), (10 ** 30, "a huge integer"), (2 ** 63, "past a bigint"),
    (10 ** 10 + 1, "past 10^10 seconds"),
    ("60", "a number as a string"), ("PT1M", "an ISO 8601 duration"), ("PT1H-30M", "a mixed-sign ISO duration"),
    ("P1DT-23H", "a mixed-sign ISO duration"), (True, "a boolean"), ([60], "a list"), ({"seconds": 60}, "an object"),
)


def durations(*, null: bool) -> tuple[tuple[Any, str], ...]:
    return NOT_DURATIONS + (((None, "null"),) if null else ())


def _base_spec() -> dict:
    return {"kind": "every", "every_s": 60, "target": {"command": WORD}}


def _with(path: str, value: Any, base: dict | None = None) -> dict:
    """The base definition (or `base`) with the value at a dotted path under it."""
    spec = base if base is not None else _base_spec()
    *parents, last = path.split(".")
    at = spec
    for name in parents:
        at = at.setdefault(name, {}) if isinstance(at.get(name), dict) else at.setdefault(name, {})
    at[last] = value
    return spec


PAYLOADS = ((["a"], "a list"), ("a", "a string"), (1, "a number"), ({"a": "x\x00y"}, "U+0000 in a string"),
            ({"x\x00": 1}, "U+0000 in a key"), ({"a": ["\ud800"]}, "a lone surrogate"),
            ({"blob": "x" * (64 * 1024 + 1)}, "over 64 KiB"), ({"blob": "x" * HUGE}, "a 1 MB payload"))
UNKNOWN_FIELDS = ("spec.every", "spec.colour", "spec.safety_window", "spec.kind\u200b", "spec.target.cmd")


def _spec_parts() -> tuple[tuple[str, tuple, Any, tuple[str, ...]], ...]:
    """(field, its hostile values, how a value becomes the definition, the lawful problems), per part."""
    every = lambda name: lambda v: _with(name, v)  # noqa: E731
    return (
        ("spec.kind", (("AT", "an unknown kind"), ("every ", "an unknown kind"), ("monthly", "an unknown kind"))
         + strings("every") + wrong_types(), every("kind"), ("validation",)),
        ("spec.at", instants(null=True), lambda v: {"kind": "at", "at": v, "target": {"command": WORD}},
         ("validation",)),
        ("spec.anchor", instants(null=False), every("anchor"), ("validation",)),
        ("spec.after_s", durations(null=True), lambda v: {"kind": "after", "after_s": v, "target": {"command": WORD}},
         ("validation",)),
        ("spec.every_s", durations(null=True), every("every_s"), ("validation",)),
        ("spec.safety_window_s", durations(null=False) + ((366 * 86400 + 1, "over 366 days"),),
         every("safety_window_s"), ("validation",)),
        ("spec.misfire_policy", (("run-twice", "an unknown policy"), ("RUN-ONCE", "an unknown policy"))
         + strings("run-once") + wrong_types(null=False), every("misfire_policy"), ("validation",)),
        ("spec.overlap_policy", (("allow-all", "an unknown policy"),) + wrong_types(null=False),
         every("overlap_policy"), ("validation",)),
        ("spec.run_policy", (("run-many", "an unknown policy"),) + wrong_types(null=False), every("run_policy"),
         ("validation",)),
        ("spec.target", ((WORD, "a string"),) + wrong_types(), every("target"), ("validation",)),
        ("spec.target.command", strings() + wrong_types() + (("x" * 257, "257 characters"),),
         lambda v: _with("target", {"command": v}), ("validation",)),
        ("spec.target.kind", (("flow", "a Flow target"), ("workflow", "an unknown target kind")) + strings("work")
         + wrong_types(null=False), lambda v: _with("target", {"command": WORD, "kind": v}),
         ("validation", "not-admitted")),
        ("spec.target.payload", PAYLOADS, lambda v: _with("target", {"command": WORD, "payload": v}),
         ("validation",)),
        ("spec", wrong_types() + (({}, "an empty object"),), lambda v: v, ("validation",)),
    )


SPEC_PARTS = _spec_parts()
UUIDS = ((("6f1c8a62-1b7e-4c8e-9d3a-2f5b7c9e1a0", "a UUID one digit short"), ("not-a-uuid", "a word"))
         + strings("6f1c8a62-1b7e-4c8e-9d3a-2f5b7c9e1a04"))
REVISIONS = (("1", "a number as a string"), (1.5, "a fraction"), (True, "a boolean"), (None, "null"), ([1], "a list"),
             ({}, "an object"), (-1, "negative"), (0, "zero"), (2 ** 63, "past a bigint"), (10 ** 30, "huge"))
UNKNOWN_SCHEDULE = "00000000-0000-4000-8000-00000000dead"


def _calls(op: str, schedule_id: str, revision: int) -> list[tuple[str, Any]]:
    """Every hostile variant of one operation, as (part, how to build it from a drawn index)."""
    def base() -> dict:
        args: dict[str, Any] = {} if op == "create" else {"schedule_id": schedule_id, "expected_revision": revision}
        if op in ("create", "update"):
            args["spec"] = _base_spec()
        return args

    out: list[tuple[str, Any]] = []
    if op in ("create", "update"):
        for name, values, build, lawful in SPEC_PARTS:
            out += [(name, lambda i, v=values, b=build, n=name, p=lawful: Hostile(
                op, n, v[i][1], {**base(), "spec": b(v[i][0])}, p), len(values))]
        out += [("unknown", lambda i: Hostile(op, UNKNOWN_FIELDS[i], "an unknown field",
                                              {**base(), "spec": _with(UNKNOWN_FIELDS[i][5:], 60)}), len(UNKNOWN_FIELDS))]
    ids = UUIDS + wrong_types(null=op != "create")  # a create without an identity is lawful: it makes one
    out += [("schedule_id", lambda i: Hostile(op, "schedule_id", ids[i][1], {**base(), "schedule_id": ids[i][0]}),
             len(ids)),
            ("command_id", lambda i: Hostile(op, "command_id", UUIDS[i][1], {**base(), "command_id": UUIDS[i][0]}),
             len(UUIDS))]
    if op != "create":
        out += [("expected_revision", lambda i: Hostile(
            op, "expected_revision", REVISIONS[i][1], {**base(), "expected_revision": REVISIONS[i][0]},
            ("validation",) if i < 6 else ("revision-conflict", "validation")), len(REVISIONS)),
            ("unknown-schedule", lambda i: Hostile(op, "schedule_id", "a schedule that does not exist",
                                                   {**base(), "schedule_id": UNKNOWN_SCHEDULE}, ("not-found",)), 1)]
    required = ["spec"] if op == "create" else ["schedule_id", "expected_revision"] + (["spec"] if op == "update"
                                                                                        else [])
    out += [("missing", lambda i: Hostile(op, required[i], "a required field left out",
                                          {k: v for k, v in base().items() if k != required[i]}), len(required))]
    return out


@st.composite
def hostile_command(draw, schedule_id: str, revision: int) -> Hostile:
    """A client operation on the run's one schedule (or on an unknown one) with one hostile argument."""
    op = draw(st.sampled_from(CLIENT_OPS))
    calls = _calls(op, schedule_id, revision)
    part, build, size = calls[draw(st.integers(0, len(calls) - 1))]
    return build(draw(st.integers(0, size - 1)))


OWNERS = ((None, "null"), ("", "an empty string"), (" ", "a blank string"), ("\t\n", "white space only"),
          ("\u200b\ufeff", "default-ignorable code points only"), ("\u00a0", "a no-break space alone"),
          ("\u3000\u3164", "an ideographic space and a Hangul filler"), ("\ufe0f", "a variation selector alone"),
          ("o" * 201, "201 characters"), ("o" * HUGE, "a 1 MB string")) + strings("owner", nul=False, blank=False)
# The hostile run's server clock stands on T0's day, where a lease of months and days ends is fixed (note 24i): the
# mixed-sign ones below land outside (0, 10 minutes] on it, though those marked "compares as" do not look it.
CLAIM_DAY = T0.date()
LEASES = ((None, "null"), ("0", "zero"), ("-5 seconds", "negative"), ("601 seconds", "over ten minutes"),
          ("10 minutes 0.000001 seconds", "a microsecond over ten minutes"), ("1 day", "a day"),
          ("1 mon -29 days", "mixed-sign: a month less 29 days"), ("1 mon -30 days", "mixed-sign: compares as zero"),
          ("-1 day +23:59:59", "mixed-sign: a second short of zero"), ("1 day -86400 seconds", "mixed-sign: zero"),
          ("1 hour -49 minutes", "mixed-sign: eleven minutes"), ("178000000 years", "huge"),
          ("-178000000 years", "hugely negative"), ("-0.000001 seconds", "a negative microsecond"),
          ("1 mon -30 days 5 minutes", "mixed-sign: compares as five minutes, ends a day and five minutes later"),
          ("-1 mon 30 days 5 minutes", "mixed-sign: compares as five minutes, ends two days and five minutes later"),
          ("12 mons -360 days 5 minutes", "mixed-sign: compares as five minutes, ends six days and five minutes "
                                         "later (a leap day in the year)"))
LAWFUL_LEASE = "30 seconds"
LAWFUL_OWNER = "hostile-probe"


def _claim(field: str, index: int) -> Hostile:
    if field == "lease_owner":
        owner, why = OWNERS[index]
        return Hostile(CLAIM, field, why, {"lease_owner": owner, "lease_duration": LAWFUL_LEASE}, ())
    duration, why = LEASES[index]
    return Hostile(CLAIM, field, why, {"lease_owner": LAWFUL_OWNER, "lease_duration": duration}, ())


@st.composite
def hostile_claim(draw) -> Hostile:
    """`claim_schedule_dispatch(lease_owner, lease_duration)` with one argument its sentence refuses: from the
    tables, or drawn from the readings (scenarios/claim_limits.py): an owner of White_Space and Default_Ignorable
    code points only, or a lawful one with a Cc, Cf, Zl or Zp code point in it; a mixed-sign month/day/time
    interval landing outside (0, 10 minutes] on the claim's day. An owner holding U+0000 or a lone surrogate is
    not drawn: PostgreSQL's text cannot carry it, so no call reaches the function (35h)."""
    field = draw(st.sampled_from(("lease_owner", "lease_duration")))
    if draw(st.booleans()):
        return _claim(field, draw(st.integers(0, len(OWNERS if field == "lease_owner" else LEASES) - 1)))
    if field == "lease_owner":
        owner = draw(blank_owners() | control_owners())
        return Hostile(CLAIM, field, owner_refusal(owner), {"lease_owner": owner, "lease_duration": LAWFUL_LEASE}, ())
    interval = draw(refused_leases(CLAIM_DAY))
    day = datetime(CLAIM_DAY.year, CLAIM_DAY.month, CLAIM_DAY.day, tzinfo=timezone.utc)
    return Hostile(CLAIM, field, f"mixed-sign, claimed on {CLAIM_DAY}: {lease_refusal(day, interval)}",
                   {"lease_owner": LAWFUL_OWNER, "lease_duration": interval.text()}, ())


# The characters a sweep sends, one of each class: the rest of the C0 controls are drawn, not swept.
SWEPT_CHARS = {f"U+{ord(c):04X}" for c in ("\x00", "\x01", "\x1f", "\x7f", "\u200b", "\u202e", "\ufeff", "\u2028",
                                           "\ud800")}


def _swept(hostile: Hostile) -> bool:
    return not hostile.why.startswith("U+") or hostile.why.split()[0] in SWEPT_CHARS


def sweep(schedule_id: str, revision: int) -> list[Hostile]:
    """Every hostile call the tables hold, each once (one character of each class): the floor a hostile phase
    covers before it draws."""
    calls = [build(i) for op in CLIENT_OPS for _, build, size in _calls(op, schedule_id, revision)
             for i in range(size)]
    calls += [_claim("lease_owner", i) for i in range(len(OWNERS))]
    return [h for h in calls if _swept(h)] + [_claim("lease_duration", i) for i in range(len(LEASES))]


def hostile_inputs(schedule_id: str, revision: int):
    """Any hostile call: a client operation (three in four) or the claim."""
    return st.one_of(hostile_command(schedule_id, revision), hostile_command(schedule_id, revision),
                     hostile_command(schedule_id, revision), hostile_claim())
