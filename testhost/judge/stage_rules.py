"""The rules of the stages judged outside a case: the schema-version stage (testhost/runs/schema_version.py) and the
hostile phase of `crashproof explore` (testhost/runs/hostile.py)."""

from __future__ import annotations

from .rules import Rules

RULES = Rules()
rule_of = RULES.declare


# The schema-version stage's check (testhost/runs/schema_version.py), run once per certify on a store migrated only to 0003.
SCHEMA_VERSION_REFUSED = rule_of(
    "schema-version-refused",
    "Runtime version 4 requires it before Schedule operations run. (It: migration 0004_schedule_protocol.sql. "
    "On a store migrated only to 0003, every schedule operation the implementation declares, process-due at least, answers "
    "`fail` with an error whose message says why and `retriable: false`, reports no barrier and changes no row.)")


# The hostile phase of `crashproof explore` (testhost/runs/hostile.py) judges under these.
HOSTILE_CLIENT = rule_of(
    "hostile-client-inputs",
    "Schedule API validation and domain conflicts return durable problem results. (A client operation given one "
    "hostile argument (control or format characters, an empty or 1 MB string, a naive or out-of-range instant, a "
    "zero, negative, huge or mistyped duration, an unknown kind or schedule, a wrong JSON type, a missing or unknown "
    "field) answers `fail` with a problem of PROTOCOL.md's types, one the input allows, whose `detail` is not empty "
    "and which names the argument (a key of `errors` or a word of `detail`) when it is `validation`, and changes no "
    "row of any table of the schema; a crash, a protocol error, `ok`, `unknown` or a retriable error fails it; "
    "`crashproof explore`, hostile phase.)")
HOSTILE_CLAIM = rule_of(
    "hostile-claim-inputs",
    "The function rejects blank or control-character lease owners and lease durations that are null, non-positive, "
    "or longer than ten minutes before it changes a row, so an untrusted dispatcher call cannot strand a Schedule in "
    "a non-expiring or excessively long lease. (`claim_schedule_dispatch` called as the dispatcher, with a schedule "
    "claimable, and one hostile argument (an owner blank by White_Space and Default_Ignorable code points, holding a "
    "Cc, Cf, Zl or Zp code point, or over-long; a null, zero, negative, over-ten-minute or out-of-range duration, or "
    "a mixed-sign one ending outside (0, 10 minutes] at the claim, whatever its parts compare as: protocol notes "
    "24i, 24m) raises an error of SQLSTATE class 22 whose "
    "message names the argument (`lease owner` or `lease duration`), and changes no row of any table of the schema; "
    "`crashproof explore`, hostile phase.)")
