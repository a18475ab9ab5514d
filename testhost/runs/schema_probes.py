"""The schema stage's behavioural probes (testhost/runs/schema_stage.py): calls an implementation's own schema must
answer as the spec's sentences and our pinned readings say, whatever its functions look like inside.

- The claim function, as the dispatcher: tabled and drawn lease owners and durations (scenarios/claim_limits.py),
  each claimed at an instant of its own with the server clock frozen there, judged where the lease ends (24i) and
  by the Unicode classes of the owner (24m): a refusal raises and changes no dispatch row; a lawful call is
  granted, and the lease it records ends after the claim and at most ten minutes after it.
- The local scope, as the runtime role (24j): a scope authorizes the transaction that set it and no other.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import cache

import psycopg
from psycopg.rows import dict_row

from scenarios.claim_limits import (TEN_MINUTES, TEN_MINUTES_US, US_PER_DAY, Interval, blank_owners, control_owners,
                                    draws, drawn_leases, lawful_owners, lease_end, lease_refusal, owner_refusal, shown,
                                    stable_seed)

from testhost.judge.state import TABLES
from testhost.world.worlds import CLOCK

CLAIM_RULE = "schema-claim-refusals"
SCOPE_RULE = "schema-local-scope"
CLAIM_SQL = "select * from appsurface_durable.claim_schedule_dispatch(%s::text, %s::interval)"
# The seed every run draws its probes with (printed in each finding, so a find replays).
CLAIM_SEED = stable_seed(CLAIM_RULE)
DRAWN_LEASES = 24
DRAWN_OWNERS = 8  # of each kind: blank-looking, holding a control character, lawful
LAWFUL_OWNER = "schema-stage"
LAWFUL_LEASE = Interval(0, 0, 30_000_000)
SHOWN = 8  # findings written out per rule; the rest are counted
_UTC = timezone.utc


@dataclass(frozen=True)
class ClaimProbe:
    """One claim: one argument under test, the other lawful; `at` is the instant the server clock is frozen at
    for it (None: whenever it runs, in a world without clock control)."""

    what: str
    field: str  # lease_owner or lease_duration: the argument under test
    owner: str | None = LAWFUL_OWNER
    duration: Interval | None = LAWFUL_LEASE
    at: datetime | None = None

    def refusal(self, claimed_at: datetime) -> str | None:
        """Why the claim must refuse (None: it must grant)."""
        return owner_refusal(self.owner) or lease_refusal(claimed_at, self.duration)


def _at(year: int, month: int, day: int, hour: int = 12) -> datetime:
    return datetime(year, month, day, hour, tzinfo=_UTC)


MINUTES = 60_000_000
# Claimed 11 minutes apart from noon on 15 April 2040 (a lawful lease has expired by the next).
_PLAIN = (
    ("a null lease duration", None),
    ("a zero lease duration", Interval(0, 0, 0)),
    ("a lease of minus one microsecond", Interval(0, 0, -1)),
    ("a negative lease duration", Interval(0, 0, -30_000_000)),
    ("a lease of exactly ten minutes", Interval(0, 0, TEN_MINUTES_US)),
    ("a lease of one microsecond", Interval(0, 0, 1)),
    ("a lease of ten minutes and one microsecond", Interval(0, 0, TEN_MINUTES_US + 1)),
    ("a lease of ten minutes and one second", Interval(0, 0, TEN_MINUTES_US + 1_000_000)),
    ("an eleven-minute lease", Interval(0, 0, 11 * MINUTES)),
    ("1 day -24:00: ends at the claim", Interval(0, 1, -US_PER_DAY)),
    ("1 day -23:50: exactly ten minutes", Interval(0, 1, 10 * MINUTES - US_PER_DAY)),
    ("1 day -23:49:59.999999: ten minutes and one microsecond", Interval(0, 1, 10 * MINUTES + 1 - US_PER_DAY)),
)
TABLED_LEASES = tuple((what, _at(2040, 4, 15) + i * timedelta(minutes=11), d) for i, (what, d) in enumerate(_PLAIN)) + (
    ("1 mon -30 days 5 min on 15 January: a day and five minutes", _at(2041, 1, 15), Interval(1, -30, 5 * MINUTES)),
    ("1 mon -30 days 5 min on 15 April: five minutes", _at(2041, 4, 15), Interval(1, -30, 5 * MINUTES)),
    ("1 mon -29 days 5 min on 31 January of a leap year: five minutes", _at(2044, 1, 31), Interval(1, -29, 5 * MINUTES)),
    ("1 mon -28 days 5 min on 31 January of a common year: five minutes", _at(2041, 1, 31),
     Interval(1, -28, 5 * MINUTES)),
    ("1 mon -29 days 5 min on 31 January of a common year: before the claim", _at(2041, 1, 31, 13),
     Interval(1, -29, 5 * MINUTES)),
    ("-1 mon 31 days 10 min on 31 March of a leap year: exactly ten minutes", _at(2044, 3, 31),
     Interval(-1, 31, 10 * MINUTES)),
    ("100000 years -36000000 days 5 min: about 1,400 years", _at(2040, 12, 15), Interval(1_200_000, -36_000_000,
                                                                                          5 * MINUTES)),
)
TABLED_OWNERS = (
    ("a null lease owner", None), ("an empty lease owner", ""), ("a blank lease owner", " \t "),
    ("a lease owner with a control character", "schema\x01stage"), ("a lease owner with a newline", "schema\nstage"),
    ("a no-break space", "\u00a0"), ("an ideographic space", "\u3000"), ("an em space and a no-break space",
                                                                        "\u2003 \u00a0"),
    ("a Hangul filler", "\u3164"), ("a Hangul choseong filler", "\u115f"), ("a variation selector", "\ufe0f"),
    ("a Mongolian vowel separator (Cf)", "\u180e"), ("a zero width space", "\u200b"), ("a byte order mark", "\ufeff"),
    ("a line separator", "\u2028"), ("a zero width joiner inside", "worker\u200d1"), ("a soft hyphen inside",
                                                                                    "w\u00adx"),
    ("a right-to-left override first", "\u202eworker"), ("a paragraph separator last", "worker\u2029"),
    ("a next line (U+0085) last", "worker\u0085"),
    ("letters with an inner space", "Jörg 1"), ("CJK letters with an inner space", "作業者 7"),
    ("Cyrillic letters", "диспетчер-2"),
)
# Owners are claimed 11 minutes apart (a 30-second lease has expired by the next) on a day no lease probe uses.
_OWNERS_FROM = _at(2045, 7, 1, 0)


@cache
def claim_probes() -> tuple[ClaimProbe, ...]:
    """The tabled probes and those drawn with CLAIM_SEED, in the order of their instants."""
    leases = [ClaimProbe(what, "lease_duration", duration=d, at=at) for what, at, d in TABLED_LEASES]
    leases += [ClaimProbe(f"drawn (seed {CLAIM_SEED}): a mixed-sign interval", "lease_duration", duration=d, at=at)
               for at, d in draws(drawn_leases(), CLAIM_SEED, DRAWN_LEASES)]
    owners = [(what, o) for what, o in TABLED_OWNERS]
    for kind, strategy in (("blank-looking", blank_owners()), ("holding a control character", control_owners()),
                           ("lawful", lawful_owners())):
        owners += [(f"drawn (seed {CLAIM_SEED}): an owner {kind}", o) for o in draws(strategy, CLAIM_SEED,
                                                                                     DRAWN_OWNERS)]
    leases += [ClaimProbe(what, "lease_owner", owner=o, at=_OWNERS_FROM + i * timedelta(minutes=11)) for i, (what, o)
               in enumerate(owners)]
    return tuple(sorted(leases, key=lambda p: p.at))


def sql_literal(text: str | None) -> str:
    """A string as SQL that psql reads back exactly: plain when printable ASCII, else a U& literal."""
    if text is None:
        return "null"
    if text.isascii() and text.isprintable():
        return "'" + text.replace("'", "''") + "'"
    escaped = "".join(c if c.isascii() and c.isprintable() and c not in "'\\" else "''" if c == "'"
                      else "\\\\" if c == "\\" else f"\\{ord(c):04X}" if ord(c) <= 0xFFFF else f"\\+{ord(c):06X}"
                      for c in text)
    return f"U&'{escaped}'"


def _error(exc: psycopg.Error) -> str:
    return f"{exc.sqlstate}: {(str(exc).splitlines() or [''])[0]}"


class ClaimProber:
    """Sends every claim probe to a store with a due schedule, as the dispatcher in a UTC session, and collects
    what was wrong per probe."""

    def __init__(self, store, world):
        self.store, self.world = store, world
        self.moved = world.capabilities.has(CLOCK)
        self.findings: list[dict] = []
        self.judged = self.took_a_row = 0

    def run(self) -> None:
        probes = list(claim_probes())
        offset = self.world.clock.offset if self.moved else None
        with psycopg.connect(self.store.owner_dsn, autocommit=True, row_factory=dict_row) as owner, \
                psycopg.connect(self.store.dispatcher_dsn, autocommit=True, row_factory=dict_row) as dispatcher:
            dispatcher.execute("set time zone 'UTC'")  # the session's: where a day or a month ends
            if not self.moved:  # refusals first: the grants leave the row leased for up to ten minutes
                now = owner.execute("select transaction_timestamp() as now").fetchone()["now"]
                probes.sort(key=lambda p: p.refusal(now) is None)
            try:
                for probe in probes:
                    if self.moved:
                        self.world.clock.freeze(probe.at)
                    self._one(probe, owner, dispatcher)
            finally:
                if self.moved:
                    self.world.clock.set_offset(offset)

    def _one(self, probe: ClaimProbe, owner, dispatcher) -> None:
        before = owner.execute(TABLES["dispatch"]).fetchall()
        got, rows = None, []
        try:
            with dispatcher.transaction():
                start = dispatcher.execute("select transaction_timestamp() as t").fetchone()["t"]
                rows = dispatcher.execute(CLAIM_SQL, (probe.owner, probe.duration.text() if probe.duration
                                                      else None)).fetchall()
                end = dispatcher.execute("select clock_timestamp() as t").fetchone()["t"]
        except psycopg.Error as exc:
            got = _error(exc)
            end = dispatcher.execute("select clock_timestamp() as t").fetchone()["t"]
        after = owner.execute(TABLES["dispatch"]).fetchall()
        # Where a lease lands depends on the claim's date alone; a claim that straddled midnight is not judged.
        wanted = probe.refusal(start)
        if (wanted is None) != (probe.refusal(end) is None):
            return
        self.judged += 1
        seen = {"probe": probe.what, "claimed_at": start.isoformat(), "lease_owner": shown(probe.owner),
                "lease_duration": probe.duration.text() if probe.duration else None}
        if probe.field == "lease_duration" and probe.duration is not None:
            end_at = lease_end(start, probe.duration)
            seen["lease_ends"] = end_at.isoformat() if end_at else "out of range"
        if wanted is not None and got is None:
            self._add({**seen, "expected": f"refused: {wanted}", "got": f"granted ({len(rows)} row{'s' * (len(rows) != 1)} claimed)",
                       "changed_rows": before != after}, probe)
        elif wanted is not None and before != after:
            self._add({**seen, "expected": f"refused: {wanted}", "got": f"refused ({got}) but the queue changed",
                       "before": before, "after": after}, probe)
        elif wanted is None and got is not None:
            self._add({**seen, "expected": "granted", "got": f"refused: {got}"}, probe)
        elif wanted is None and rows:
            self.took_a_row += 1
            self._check_lease(probe, seen, rows, after, start, end)

    def _check_lease(self, probe: ClaimProbe, seen: dict, rows: list[dict], after: list[dict], start: datetime,
                     end: datetime) -> None:
        """The lease a granted claim recorded ends after the claim and at most ten minutes after it."""
        claimed = {str(r["schedule_id"]) for r in rows}
        for row in after:
            if str(row["schedule_id"]) in claimed:
                expires = row["lease_expires_at_utc"]
                if expires is None or not start < expires <= end + TEN_MINUTES:
                    self._add({**seen, "expected": "a lease ending after the claim and at most ten minutes after it",
                               "got": f"lease_expires_at_utc {expires}"}, probe)

    def _add(self, finding: dict, probe: ClaimProbe) -> None:
        duration = f"'{probe.duration.text()}'" if probe.duration else "null"
        self.findings.append({**finding, "seed": CLAIM_SEED, "replay": (
            "as the dispatcher, in a session with TimeZone UTC"
            + (f", the server clock at {finding['claimed_at']}" if self.moved else "")
            + f": select * from appsurface_durable.claim_schedule_dispatch({sql_literal(probe.owner)}, "
              f"{duration}::interval)")})

    def report(self, findings) -> None:
        """Into the stage's findings: the probes judged, the first SHOWN wrong answers and how many more."""
        findings.examined(CLAIM_RULE, self.judged)
        for finding in self.findings[:SHOWN]:
            findings.add(CLAIM_RULE, finding)
        if len(self.findings) > SHOWN:
            findings.add(CLAIM_RULE, f"and {len(self.findings) - SHOWN} more probes answered wrongly")
        if not self.took_a_row:
            findings.add(CLAIM_RULE, "no lawful claim took the due row (a schedule due since before every probe), so "
                                     "the refusals proved nothing")


# -- the local scope -------------------------------------------------------------------------------------------

SCOPED_READS = ("scopes", "schedule_definitions", "schedule_generations", "schedule_commands",
                "schedule_dispatch_timing", "schedule_dispatch")
SETTING = "appsurface_durable.scope_id"


def _visible(conn, scope: str) -> dict[str, int | str]:
    """What a transaction on `conn` can read and update (rows per scoped table; the update's row count)."""
    seen: dict[str, int | str] = {t: conn.execute(f"select count(*) as n from appsurface_durable.{t}").fetchone()["n"]
                                  for t in SCOPED_READS}
    try:
        with conn.transaction():
            seen["updated schedule_definitions"] = conn.execute(
                "update appsurface_durable.schedule_definitions set revision = revision where scope_id = %s",
                (scope,)).rowcount
    except psycopg.Error as exc:
        seen["updated schedule_definitions"] = f"refused: {_error(exc)}"
    return seen


def _leaked(seen: dict) -> bool:
    return any(isinstance(n, int) and n > 0 for n in seen.values())


def check_local_scope(store, scope: str, findings) -> None:
    """As the runtime role, with schedules of `scope` in the store: a transaction that sets the scope with
    set_local_scope sees them; a later transaction on that connection, and transactions on a connection whose
    scope setting was left at session level, see and update nothing."""
    try:
        with psycopg.connect(store.runtime_dsn, autocommit=True, row_factory=dict_row) as first, \
                psycopg.connect(store.runtime_dsn, autocommit=True, row_factory=dict_row) as second:
            with first.transaction(force_rollback=True):
                first.execute("select appsurface_durable.set_local_scope(%s)", (scope,))
                proper = _visible(first, scope)
            findings.examined(SCOPE_RULE)
            if not proper["schedule_definitions"]:
                findings.add(SCOPE_RULE, {"set_local_scope": scope, "saw": proper, "expected": "the scope's schedule",
                                          "why": "a scope that authorizes nothing would make the probes below "
                                                 "prove nothing"})
                return
            with first.transaction():
                first.execute("select appsurface_durable.set_local_scope(%s)", (scope,))
                bound = first.execute("select current_setting(%s, true) as v", (SETTING,)).fetchone()["v"]
            with first.transaction(force_rollback=True):
                later = _visible(first, scope)
            leaks = []
            if _leaked(later):
                leaks.append({"scope": f"set_local_scope({scope!r}) in an earlier, committed transaction on the same "
                                       "connection; nothing set in this one", "saw": later})
            values = [v for v in dict.fromkeys((bound, scope)) if v]
            for value in values:
                with second.transaction():
                    second.execute("select set_config(%s, %s, false)", (SETTING, value))
                with second.transaction(force_rollback=True):
                    session = _visible(second, scope)
                if _leaked(session):
                    leaks.append({"scope": f"left at session level: set_config('{SETTING}', {value!r}, false) "
                                           + ("(the raw scope ID)" if value == scope else "(the value set_local_scope "
                                              "wrote in an earlier transaction of another connection)"),
                                  "saw": session})
            findings.examined(SCOPE_RULE, 1 + len(values))
            for leak in leaks:
                findings.add(SCOPE_RULE, {**leak, "expected": "no row read or updated: the scope authorizes only "
                                                              "the transaction that set it (note 24j)"})
    except psycopg.Error as exc:
        findings.add(SCOPE_RULE, f"could not set or use the local scope as the runtime role: {_error(exc)}")
