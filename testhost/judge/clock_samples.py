"""Which clock a row's time was sampled from: a Work's own clock_timestamp() against its bridge's transaction time,
and an Every's anchor against its generation's acceptance."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from .identity import instant_text, occurrence_key
from .rules import CheckResult, Rules
from .state import StoreState

RULES = Rules()
rule_of = RULES.declare


WORK_CLOCK = rule_of(
    "work-own-clock",
    "The later Work acceptance timestamp is deliberately not used: the Work protocol owns a separate "
    "clock_timestamp() sample. (A linked Work's accepted_at_utc is later than the bridge's transaction_timestamp(), "
    "its occurrence's materialized_at_utc; where the host moved the server clock while the bridge waited for its "
    "dispatch row, the Work accepted there carries a sample at or after the moved clock.)")


def work_own_clock(state: StoreState, moves: list[dict], *, planned: bool = False, promised: bool = False,
                   holds: list[dict] = (), frozen: frozenset = frozenset()) -> CheckResult:
    """Every linked Work against its bridge's transaction time, and the Work of a bridge the host held against the
    clock it moved meanwhile. `planned`: the scenario moves the clock in a bridge, so a run where it never moved
    fails, unless a fault left the host no hold to offer (then that half is not compared); `promised`: the held
    bridge must also have committed its Work (the fault-free run). `holds`: every hold the host offered
    (testhost/faults/bridge_clock.py), with what came of it."""
    work = state.work_by_id()
    evidence = []
    rows = held = 0
    for o in state.occurrences:
        w = work.get(o["work_id"]) if o["work_id"] is not None else None
        if w is None or o["work_id"] in state.planted or o["materialized_at_utc"] is None \
                or w["idempotency_key"] != o["work_idempotency_key"]:
            continue  # no link, or one the link checks judge
        rows += 1
        accepted, bridge = w["accepted_at_utc"], o["materialized_at_utc"]
        if bridge in frozen:  # the clock stood still: every sample of that bridge reads the same instant
            continue
        if accepted <= bridge:
            evidence.append({"occurrence": occurrence_key(o), "work_id": o["work_id"],
                             "work_accepted_at_utc": instant_text(accepted),
                             "bridge_transaction_time (materialized_at_utc)": instant_text(bridge),
                             "expected": "a clock_timestamp() sample later than the bridge's transaction time"})
        for move in moves:
            if move["schedule_id"] not in (None, str(o["schedule_id"])) \
                    or not move["held_from"] <= bridge <= move["moved_at"]:
                continue
            held += 1
            at_least = move["moved_at"] + timedelta(seconds=move["shift_s"])
            if accepted < at_least:
                evidence.append({"occurrence": occurrence_key(o), "work_id": o["work_id"],
                                 "bridge_began_before": instant_text(move["moved_at"]),
                                 "clock_moved_by_s": move["shift_s"], "work_accepted_at_utc": instant_text(accepted),
                                 "expected_at_or_after": instant_text(at_least)})
    skipped = None
    offered = [h for h in holds if h.get("taken")]
    if planned and not moves and not offered and not promised:
        skipped = ("the host could offer no hold of the dispatch row before a bridge: the fault left no committed "
                   "schedule-decision-after-commit of a live process to hold it at (the fault-free run compares the "
                   "Work's clock against a moved one)")
    elif planned and not moves:
        evidence.append({"planned": "a server clock move inside a bridge transaction", "happened": False,
                         "holds": [_hold_text(h) for h in holds] or "none offered", "why": _no_move_why(offered)})
    elif promised and not held:
        evidence.append({"planned": "a Work accepted in the bridge the host held", "happened": False, "moves": moves})
    return CheckResult("work-own-clock", WORK_CLOCK, not evidence, evidence, rows, skipped=skipped if not evidence
                       else None)


def _hold_text(hold: dict) -> str:
    where = f"after the {hold['after_fault']} fault there" if hold.get("after_fault") else "before its reply"
    seen = f"; the instance reported {', '.join(hold['barriers_meanwhile'])} meanwhile" \
        if hold.get("barriers_meanwhile") else ""
    return f"at {hold['at']} of {hold['instance']} ({where}): {hold['outcome']}{seen}"


def _no_move_why(offered: list[dict]) -> str:
    """What was missing, in the implementation's terms: a bridge that ran while its row was held without waiting for
    it did not lock the row first; otherwise no transaction came for the row while it was held."""
    if not offered:
        return ("no committed schedule-decision-after-commit was reported while a request ran, so the host never held "
                "the dispatch row: the barrier fires after every committed decision (PROTOCOL.md, Barriers)")
    ran = sorted({b for h in offered for b in h.get("barriers_meanwhile", []) if b in (
        "schedule-work-after-acceptance", "schedule-bridge-before-commit", "schedule-link-after-commit")})
    if ran:
        return (f"a bridge of the schedule ran while the host held its dispatch row (it reported {', '.join(ran)}) "
                "without waiting for the row: its transaction accepted Work before it locked the schedule's dispatch "
                "row (every scoped transaction locks it first, after the role proof and the scope)")
    return ("no transaction of the implementation waited for the schedule's dispatch row while the host held it, and "
            "no bridge of the schedule ran meanwhile: the bridge the committed decision opened did not come before "
            "each hold ended (see the holds)")


ACCEPTANCE_ANCHOR = rule_of(
    "acceptance-anchor",
    "It is the only anchor for After, and the anchor for an Every schedule when the caller did not supply one. "
    "(Every generation of an Every whose create or update command gave no anchor stores as anchor_utc exactly its "
    "own accepted_at_utc, to the microsecond, a later generation included. The other checks judge instants "
    "relative to the stored anchor, so only this one sees an anchor taken from elsewhere.)")


def acceptance_anchor(state: StoreState, schedule_ids: dict[str, Any], model) -> CheckResult:
    """The stored anchor of each Every generation the scenario created or updated without one (the model's
    generation is then anchored on the acceptance time it read back) against that generation's accepted_at_utc."""
    evidence = []
    rows = 0
    for name, schedule in sorted(model.schedules.items()):
        for g in schedule.generations:
            if g.kind != "every" or g.anchor != g.accepted_at or name not in schedule_ids:
                continue
            stored = state.generation(schedule_ids[name], g.number)
            if stored is None:
                continue  # a generation the database lacks: model-agreement judges it
            rows += 1
            if stored["anchor_utc"] != stored["accepted_at_utc"]:
                evidence.append({"schedule": name, "generation": g.number,
                                 "anchor_utc": instant_text(stored["anchor_utc"]) if stored["anchor_utc"] else None,
                                 "accepted_at_utc": instant_text(stored["accepted_at_utc"]),
                                 "expected": "the command gave no anchor: the generation's own acceptance time"})
    return CheckResult("acceptance-anchor", ACCEPTANCE_ANCHOR, not evidence, evidence, rows)
