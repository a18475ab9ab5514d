"""Hostile inputs, drawn: every client operation and `claim_schedule_dispatch` given one argument that no
implementation may accept (control and format characters, empty and huge strings, naive and out-of-range instants,
zero, negative, huge and mixed-sign durations, unknown kinds and schedules, wrong JSON types, missing and unknown
fields), the rest of the call lawful, so the refusal must name that one argument (docs/protocol-notes.md, 35a-35k)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

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


def _char_in(word: str, chars: tuple[str, ...]):
    return st.tuples(st.sampled_from(chars), st.integers(0, len(word))).map(
        lambda c: (word[:c[1]] + c[0] + word[c[1]:], f"U+{ord(c[0]):04X} in a string"))


def hostile_strings(word: str = WORD, *, nul: bool = True, blank: bool = True):
    """Strings no identifier-like field may hold: (value, why). Without `nul`, none PostgreSQL's text cannot
    carry at all (U+0000, a lone surrogate)."""
    chars = CONTROL + FORMAT + SURROGATE if nul else CONTROL[1:] + FORMAT
    options = [_char_in(word, chars),
               st.just(("x" * HUGE, "a 1 MB string")),
               st.just((word + "\x01" * 16 + "x" * HUGE, "a 1 MB string with control characters"))]
    if blank:
        options += [st.just(("", "an empty string")),
                    st.sampled_from((" ", "\t", "\u3000 ", "\u200b")).map(lambda s: (s, "a blank string"))]
    return st.one_of(*options)


WRONG_TYPES = ((1, "a number"), (-1.5, "a negative number"), (True, "a boolean"), ({}, "an object"),
               ({"value": WORD}, "an object"), ([], "a list"), ([WORD], "a list"))


def wrong_types(*, null: bool = True):
    """JSON values of a type a string (or a number, an object) field is not: (value, why)."""
    values = WRONG_TYPES + (((None, "null"),) if null else ())
    return st.sampled_from(values)


NOT_INSTANTS = (
    ("2031-03-03T01:00:00", "a naive date-time (no offset)"),
    ("2031-03-04", "a date without a time"),
    ("2031-03-03 01:00:00", "a naive date-time with a space"),
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
)


def hostile_instants(*, null: bool):
    return st.one_of(st.sampled_from(NOT_INSTANTS),
                     hostile_strings("2031-03-03T01:00:00Z").filter(lambda v: v[0] != "2031-03-03T01:00:00Z"),
                     st.sampled_from(((1900000000, "epoch seconds"), (True, "a boolean"), ({}, "an object"),
                                      (["2031-03-03T01:00:00Z"], "a list")) + (((None, "null"),) if null else ())))


NOT_DURATIONS = (
    (0, "zero"), (0.0, "zero"), (-1, "negative"), (-0.000001, "a negative microsecond"), (1e-7, "under a microsecond"),
    (1e300, "huge"), (-1e300, "hugely negative"), (10 ** 30, "a huge integer"), (2 ** 63, "past a bigint"),
    (10 ** 10 + 1, "past 10^10 seconds"),
    ("60", "a number as a string"), ("PT1M", "an ISO 8601 duration"), ("PT1H-30M", "a mixed-sign ISO duration"),
    ("P1DT-23H", "a mixed-sign ISO duration"), (True, "a boolean"), ([60], "a list"), ({"seconds": 60}, "an object"),
)


def hostile_durations(*, null: bool):
    return st.sampled_from(NOT_DURATIONS + (((None, "null"),) if null else ()))


def _base_spec() -> dict:
    return {"kind": "every", "every_s": 60, "target": {"command": WORD}}


@st.composite
def hostile_spec(draw) -> tuple[dict, str, str, tuple[str, ...]]:
    """A definition with one hostile part: (spec, field, why, lawful problem names)."""
    part = draw(st.sampled_from(("kind", "at", "anchor", "after_s", "every_s", "safety_window_s", "misfire_policy",
                                 "policy", "target", "target.command", "target.kind", "target.payload", "unknown",
                                 "whole")))
    spec = _base_spec()
    if part == "kind":
        value, why = draw(st.one_of(st.sampled_from((("AT", "an unknown kind"), ("every ", "an unknown kind"),
                                                     ("monthly", "an unknown kind"), ("", "an empty kind"))),
                                    hostile_strings("every"), wrong_types()))
        spec["kind"] = value
        return spec, "spec.kind", why, ("validation",)
    if part == "at":
        value, why = draw(hostile_instants(null=True))
        return {"kind": "at", "at": value, "target": {"command": WORD}}, "spec.at", why, ("validation",)
    if part == "anchor":
        value, why = draw(hostile_instants(null=False))
        spec["anchor"] = value
        return spec, "spec.anchor", why, ("validation",)
    if part == "after_s":
        value, why = draw(hostile_durations(null=True))
        return {"kind": "after", "after_s": value, "target": {"command": WORD}}, "spec.after_s", why, ("validation",)
    if part == "every_s":
        value, why = draw(hostile_durations(null=True))
        spec["every_s"] = value
        return spec, "spec.every_s", why, ("validation",)
    if part == "safety_window_s":
        value, why = draw(st.one_of(hostile_durations(null=False),
                                    st.just((366 * 86400 + 1, "over 366 days"))))
        spec["safety_window_s"] = value
        return spec, "spec.safety_window_s", why, ("validation",)
    if part == "misfire_policy":
        value, why = draw(st.one_of(st.sampled_from((("run-twice", "an unknown policy"), ("RUN-ONCE", "an unknown "
                                                                                         "policy"))),
                                    hostile_strings("run-once"), wrong_types(null=False)))
        spec["misfire_policy"] = value
        return spec, "spec.misfire_policy", why, ("validation",)
    if part == "policy":
        name = draw(st.sampled_from(("overlap_policy", "run_policy")))
        value, why = draw(st.one_of(st.just(("allow-all", "an unknown policy")), wrong_types(null=False)))
        spec[name] = value
        return spec, f"spec.{name}", why, ("validation",)
    if part == "target":
        value, why = draw(st.one_of(st.just((WORD, "a string")), wrong_types()))
        spec["target"] = value
        return spec, "spec.target", why, ("validation",)
    if part == "target.command":
        value, why = draw(st.one_of(hostile_strings(), wrong_types(), st.just(("x" * 257, "257 characters"))))
        spec["target"] = {"command": value}
        return spec, "spec.target.command", why, ("validation",)
    if part == "target.kind":
        value, why = draw(st.one_of(st.sampled_from((("flow", "a Flow target"), ("workflow", "an unknown target "
                                                                                 "kind"))),
                                    hostile_strings("work"), wrong_types(null=False)))
        spec["target"] = {"command": WORD, "kind": value}
        return spec, "spec.target.kind", why, ("validation", "not-admitted")
    if part == "target.payload":
        value, why = draw(st.sampled_from(((["a"], "a list"), ("a", "a string"), (1, "a number"),
                                           ({"a": "x\x00y"}, "U+0000 in a string"),
                                           ({"x\x00": 1}, "U+0000 in a key"), ({"a": ["\ud800"]}, "a lone surrogate"),
                                           ({"blob": "x" * (64 * 1024 + 1)}, "over 64 KiB"),
                                           ({"blob": "x" * HUGE}, "a 1 MB payload"))))
        spec["target"] = {"command": WORD, "payload": value}
        return spec, "spec.target.payload", why, ("validation",)
    if part == "unknown":
        where, name = draw(st.sampled_from((("spec", "every"), ("spec", "colour"), ("spec", "safety_window"),
                                            ("spec", "kind\u200b"), ("target", "cmd"))))
        if where == "spec":
            spec[name] = 60
            return spec, f"spec.{name}", "an unknown field", ("validation",)
        spec["target"] = {"command": WORD, name: "x"}
        return spec, f"spec.target.{name}", "an unknown field", ("validation",)
    value, why = draw(st.one_of(wrong_types(), st.just(({}, "an empty object"))))
    return value, "spec", f"the definition as {why}", ("validation",)


def hostile_uuid(*, null: bool):
    return st.one_of(hostile_strings("6f1c8a62-1b7e-4c8e-9d3a-2f5b7c9e1a04"),
                     st.sampled_from((("6f1c8a62-1b7e-4c8e-9d3a-2f5b7c9e1a0", "a UUID one digit short"),
                                      ("not-a-uuid", "a word"))),
                     wrong_types(null=null))


REVISIONS = (("1", "a number as a string"), (1.5, "a fraction"), (True, "a boolean"), (None, "null"), ([1], "a list"),
             ({}, "an object"))


@st.composite
def hostile_command(draw, schedule_id: str, revision: int) -> Hostile:
    """A client operation on the run's one schedule (or on an unknown one) with one hostile argument."""
    op = draw(st.sampled_from(CLIENT_OPS))
    args: dict[str, Any] = {} if op == "create" else {"schedule_id": schedule_id, "expected_revision": revision}
    if op in ("create", "update"):
        args["spec"] = _base_spec()
    parts = ["schedule_id", "command_id", "missing"]
    parts += ["spec", "spec"] if op in ("create", "update") else []
    parts += ["expected_revision", "unknown-schedule"] if op != "create" else []
    part = draw(st.sampled_from(parts))
    if part == "spec":
        args["spec"], field, why, problems = draw(hostile_spec())
        # An update of the run's schedule reads its revision before the definition or after: either refusal holds.
        return Hostile(op, field, why, args, problems)
    if part == "schedule_id":
        args["schedule_id"], why = draw(hostile_uuid(null=op != "create"))
        return Hostile(op, "schedule_id", why, args)
    if part == "command_id":
        args["command_id"], why = draw(hostile_uuid(null=False))
        return Hostile(op, "command_id", why, args)
    if part == "expected_revision":
        value, why = draw(st.one_of(st.sampled_from(REVISIONS),
                                    st.sampled_from(((-1, "negative"), (0, "zero"), (2 ** 63, "past a bigint"),
                                                     (10 ** 30, "huge")))))
        args["expected_revision"] = value
        lawful = ("validation",) if isinstance(value, (str, float, bool, list, dict)) or value is None else (
            "revision-conflict", "validation")
        return Hostile(op, "expected_revision", why, args, lawful)
    if part == "unknown-schedule":
        args["schedule_id"] = "00000000-0000-4000-8000-00000000dead"
        return Hostile(op, "schedule_id", "a schedule that does not exist", args, ("not-found",))
    required = ["spec"] if op == "create" else ["schedule_id", "expected_revision"] + (
        ["spec"] if op == "update" else [])
    name = draw(st.sampled_from(required))
    args.pop(name)
    return Hostile(op, name, "a required field left out", args)


OWNERS = ((None, "null"), ("", "an empty string"), (" ", "a blank string"), ("\t\n", "white space only"),
          ("\u200b\ufeff", "default-ignorable code points only"), ("o" * 201, "201 characters"),
          ("o" * HUGE, "a 1 MB string"))
LEASES = ((None, "null"), ("0", "zero"), ("-5 seconds", "negative"), ("601 seconds", "over ten minutes"),
          ("10 minutes 0.000001 seconds", "a microsecond over ten minutes"), ("1 day", "a day"),
          ("1 mon -29 days", "mixed-sign: a month less 29 days"), ("1 mon -30 days", "mixed-sign: compares as zero"),
          ("-1 day +23:59:59", "mixed-sign: a second short of zero"), ("1 day -86400 seconds", "mixed-sign: zero"),
          ("1 hour -49 minutes", "mixed-sign: eleven minutes"), ("178000000 years", "huge"),
          ("-178000000 years", "hugely negative"), ("-0.000001 seconds", "a negative microsecond"))
LAWFUL_LEASE = "30 seconds"
LAWFUL_OWNER = "hostile-probe"


@st.composite
def hostile_claim(draw) -> Hostile:
    """`claim_schedule_dispatch(lease_owner, lease_duration)` with one argument its sentence refuses. An owner
    holding U+0000 is not drawn: PostgreSQL's text cannot carry it, so no call reaches the function (35h)."""
    if draw(st.booleans()):
        owner, why = draw(st.one_of(st.sampled_from(OWNERS),
                                    hostile_strings("owner", nul=False, blank=False)))
        return Hostile(CLAIM, "lease_owner", why, {"lease_owner": owner, "lease_duration": LAWFUL_LEASE}, ())
    duration, why = draw(st.sampled_from(LEASES))
    return Hostile(CLAIM, "lease_duration", why, {"lease_owner": LAWFUL_OWNER, "lease_duration": duration}, ())


def hostile_inputs(schedule_id: str, revision: int):
    """Any hostile call: a client operation (three in four) or the claim."""
    return st.one_of(hostile_command(schedule_id, revision), hostile_command(schedule_id, revision),
                     hostile_command(schedule_id, revision), hostile_claim())
