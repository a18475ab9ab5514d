"""The invariants on where decisions fall: past the safety window for an anomaly, never at or behind the cursor,
the range open at the cursor, and no instant of a generation's grid passed over."""

from __future__ import annotations

from datetime import datetime, timedelta

from .identity import instant_text, parse_instant
from .gate_model import generation_of
from .rules import Rules
from .state import StoreState, is_clock_anomaly, recorded_cursor

RULES = Rules()
invariant = RULES.invariant


@invariant("anomaly-only-past-the-window",
           "A forward cutoff inside the configured safety window creates one declared recovery range and follows "
           "the persisted misfire policy. (A `clock-anomaly` suspension is right only where its lateness, the "
           "suspending transaction's time minus the first instant after the cursor, exceeds the safety window of the "
           "generation it suspended, as configured; lateness equal to the window is inside it.)")
def _anomaly_past_window(state: StoreState):
    evidence = []
    rows = 0
    for h in state.history:
        if not is_clock_anomaly(h):
            continue
        rows += 1
        d = state.definition(h["schedule_id"])
        g = state.generation(h["schedule_id"], h["generation"] if h.get("generation") is not None
                             else d["active_generation"])
        cursor = recorded_cursor(h)
        if cursor is None:
            cursor = d["cursor_utc"]  # PROTOCOL.md asks for detail.cursor_utc; the cursor stayed put regardless
        if g is None or h["recorded_at_utc"] <= cursor:
            continue  # a cutoff at or behind the cursor: `behind-cursor-no-op` judges it
        first = generation_of(g).instants_between(cursor, h["recorded_at_utc"])[:1]
        window = timedelta(microseconds=g["safety_window_us"])
        if not first or h["recorded_at_utc"] - first[0] <= window:
            evidence.append({"suspended_inside_the_window": h, "cursor_utc": instant_text(cursor),
                             "first_due_instant": instant_text(first[0]) if first else None,
                             "lateness_s": (h["recorded_at_utc"] - first[0]).total_seconds() if first else None,
                             "safety_window_s": window.total_seconds()})
    return evidence, rows


@invariant("behind-cursor-no-op",
           "A cutoff at or behind the cursor is a no-op. (No decision acts on a cutoff at or behind the cursor: no "
           "`clock-anomaly` suspension is written at a transaction time at or before the cursor it records, and no "
           "occurrence or skipped range starts after the time of the transaction that decided it.)")
def _behind_cursor(state: StoreState):
    evidence = []
    rows = 0
    for h in state.history:
        detail = h["detail"] or {}
        if is_clock_anomaly(h):
            rows += 1
            cursor = recorded_cursor(h)
            if cursor is None:
                cursor = state.definition(h["schedule_id"])["cursor_utc"]
            if h["recorded_at_utc"] <= cursor:
                evidence.append({"suspended_with_cutoff_behind_cursor": h, "cursor_utc": instant_text(cursor)})
        elif h["event"] == "recovery-skipped" and "first_nominal_utc" in detail:
            rows += 1
            try:
                early = parse_instant(detail["first_nominal_utc"]) > h["recorded_at_utc"]
            except (AttributeError, TypeError, ValueError):
                early = False  # an unreadable instant is `processor-history`'s to judge
            if early:
                evidence.append({"skipped_before_it_was_due": h})
    for o in state.occurrences:
        rows += 1
        if o["decided_at_utc"] is not None and o["first_nominal_utc"] > o["decided_at_utc"]:
            evidence.append({"decided_before_it_was_due": o})
    return evidence, rows


@invariant("range-opens-after-the-cursor",
           "A processor evaluates nominal instants in (cursor_utc, cutoff_utc], where the cutoff comes from "
           "PostgreSQL. (The range is open at the cursor: a decision moves the cursor to its cutoff, so the "
           "schedule's next decision decides no instant at or before the time of the one before it; seen on its "
           "occurrences and skipped ranges in the order of their decision times. A generation's cursor starts at "
           "or after its acceptance (docs/protocol-notes.md, 6 and 8), so none of its decisions decides an instant "
           "at or before its accepted_at_utc: the instant an Every without anchor is anchored on is not its first.)",
           examines="occurrences")
def _open_at_cursor(state: StoreState):
    evidence = []
    decisions: dict = {}
    for o in state.occurrences:
        if o["decided_at_utc"] is not None:
            decisions.setdefault(o["schedule_id"], []).append((o["decided_at_utc"], o["first_nominal_utc"], o))
            _before_acceptance(state, o["schedule_id"], o["generation"], o["first_nominal_utc"], o, evidence)
    for h in state.history:
        if h["event"] == "recovery-skipped":
            try:
                first = parse_instant((h["detail"] or {})["first_nominal_utc"])
            except (KeyError, AttributeError, TypeError, ValueError):
                continue  # `processor-history` judges an unreadable range
            decisions.setdefault(h["schedule_id"], []).append((h["recorded_at_utc"], first, h))
            if h.get("generation") is not None:
                _before_acceptance(state, h["schedule_id"], h["generation"], first, h, evidence)
    for rows in decisions.values():
        rows.sort(key=lambda r: (r[0], r[1]))
        for (at_a, _, a), (at_b, first_b, b) in zip(rows, rows[1:]):
            if at_b > at_a and first_b <= at_a:
                evidence.append({"decided_again_at_or_before_the_cursor": b, "cursor_from_the_decision_before": a,
                                 "cursor_utc": instant_text(at_a)})
    return evidence, sum(len(r) for r in decisions.values())


@invariant("no-instant-passed-over",
           "A processor evaluates nominal instants in (cursor_utc, cutoff_utc], where the cutoff comes from "
           "PostgreSQL. (No instant is passed over: every instant of a generation's grid after where its cursor "
           "started (its acceptance, or the cursor the update found, docs/protocol-notes.md 8) up to its last "
           "decision (the cursor, for the active generation) lies in a range that generation decided, an "
           "occurrence's or a skipped one; the instants before a future anchor included (39e).)",
           examines="occurrences")
def _none_passed_over(state: StoreState):
    evidence = []
    ranges: dict = {}  # (schedule, generation or None) -> [(decided at, first, last)]
    for o in state.occurrences:
        if o["decided_at_utc"] is not None:
            ranges.setdefault((o["schedule_id"], o["generation"]), []).append(
                (o["decided_at_utc"], o["first_nominal_utc"], o["last_nominal_utc"]))
    for h in state.history:
        if h["event"] == "recovery-skipped":
            try:
                first, last = (parse_instant((h["detail"] or {})[k]) for k in ("first_nominal_utc", "last_nominal_utc"))
            except (KeyError, AttributeError, TypeError, ValueError):
                continue  # `processor-history` judges an unreadable range
            ranges.setdefault((h["schedule_id"], h.get("generation")), []).append((h["recorded_at_utc"], first, last))
    rows = 0
    for d in state.definitions:
        schedule = d["schedule_id"]
        generations = sorted((g for g in state.generations if g["schedule_id"] == schedule),
                             key=lambda g: g["generation"])
        unattributed = ranges.get((schedule, None), [])  # a skipped range whose row names no generation
        started, decided_before = None, []
        for g in generations:
            own = ranges.get((schedule, g["generation"]), [])
            rows += len(own)
            accepted = g["accepted_at_utc"]
            started = max([t for t in (started, accepted) if t is not None] + decided_before)
            if g["generation"] == d["active_generation"]:
                end = d["cursor_utc"]
            else:
                end = max([at for at, _, _ in own] + [last for _, _, last in own], default=None)
            decided_before += [at for at, _, _ in own]
            if end is None or started is None or end <= started:
                continue
            covering = own + unattributed
            missed = [t for t in _grid_between(g, started, end)
                      if not any(first <= t <= last for _, first, last in covering)]
            if missed:
                evidence.append({"instants_passed_over": [instant_text(t) for t in missed[:5]],
                                 "count": len(missed), "schedule_id": schedule, "generation": g["generation"],
                                 "cursor_started_at": instant_text(started), "decided_up_to": instant_text(end)})
    return evidence, rows


MAX_GRID = 10_000  # instants judged per generation; a grid walked further proves nothing more


def _grid_between(g: dict, start: datetime, end: datetime) -> list[datetime]:
    """The generation's nominal instants t with start < t <= end, by arithmetic on whole microseconds (the grid
    anchor + n·every for every integer n, docs/protocol-notes.md 6), independent of any implementation."""
    if g["schedule_kind"] != "every":
        single = g["at_utc"] if g["schedule_kind"] == "at" else g["accepted_at_utc"] + timedelta(
            microseconds=g["after_us"])
        return [single] if start < single <= end else []
    step, anchor = g["every_us"], g["anchor_utc"]

    def us(t: datetime) -> int:
        return (t - anchor) // timedelta(microseconds=1)
    n = us(start) // step + 1
    last = us(end) // step
    return [anchor + timedelta(microseconds=k * step) for k in range(n, min(last, n + MAX_GRID - 1) + 1)]


def _before_acceptance(state: StoreState, schedule_id, number: int, first: datetime, row: dict,
                       evidence: list) -> None:
    """A decision of a generation whose range starts at or before that generation's acceptance."""
    g = state.generation(schedule_id, number)
    if g is not None and g["accepted_at_utc"] is not None and first <= g["accepted_at_utc"]:
        evidence.append({"decided_at_or_before_its_generations_acceptance": row,
                         "accepted_at_utc": instant_text(g["accepted_at_utc"]), "generation": number})
