"""What a pass cancelled in flight must keep: the schedule's facts read at the cancel against those read once the
pass answered and at the end of the case (testhost/faults/cancel_pass.py delivers the cancel and reads them)."""

from __future__ import annotations

from typing import Any, Protocol

from .rules import CheckResult, Rules

RULES = Rules()
rule_of = RULES.declare

KEEPS_COMMITTED = rule_of(
    "cancel-keeps-committed",
    "Cancellation does not roll back a committed Schedule fact. (A pass whose barrier the host answered "
    "`cancel-pass` (scenario step `cancel_at`) answers `ok`, and what it had committed for that barrier's schedule "
    "is all still there when it answers and at the end: every occurrence with its range, a pending one pending or "
    "materialized, a linked one with its Work; the cursor not behind; its history and Work rows; the barrier's "
    "context names the schedule_id; a planned cancel whose barrier was never reached fails, unless a fault fired "
    "before the pass answered, which may leave it nothing to cancel.)")

# Where an occurrence may go from each state without undoing what committed (at the end also a later update's or
# delete's supersession).
FORWARD = {"pending": {"pending", "materialized"}, "materialized": {"materialized"}, "superseded": {"superseded"}}


class Cancelled(Protocol):
    """What one planned cancel recorded (testhost/faults/cancel_pass.py CancelPlan)."""

    step: int  # the `process` step, counted from 1
    barrier: str
    hit: int
    seen: int  # the planned barrier's hits counted before the cancel was delivered
    superseding_later: bool  # an update or delete follows the step in the scenario
    delivered: dict | None  # {"context", "schedule_id", "facts"} at the barrier
    answered: dict | None  # {"answer", "faulted", "facts"} once the pass answered
    final: dict | None  # {"facts"} at the end of the case
    fault_first: bool  # a fault fired in the case before the pass answered without the cancel
    unread: list[str]


def lost(before: dict, after: dict, superseding: bool) -> list[dict]:
    """What of `before`'s committed facts `after` no longer shows, or shows undone."""
    found = []
    occurrences = {o["key"]: o for o in after["occurrences"]}
    for o in before["occurrences"]:
        now = occurrences.get(o["key"])
        allowed = FORWARD.get(o["state"], {o["state"]}) | ({"superseded"} if superseding else set())
        if now is None:
            found.append({"occurrence": o["key"], "was": o, "now": None})
        elif now["state"] not in allowed or now["last_nominal_utc"] < o["last_nominal_utc"] \
                or (o["work_id"] and now["work_id"] != o["work_id"]):
            found.append({"occurrence": o["key"], "was": o, "now": now})
    was, now = before.get("definition") or {}, after.get("definition") or {}
    if was.get("cursor_utc") and (not now.get("cursor_utc") or now["cursor_utc"] < was["cursor_utc"]):
        found.append({"cursor_utc": {"was": was["cursor_utc"], "now": now.get("cursor_utc")}})
    for table in ("history", "work"):
        kept = {str(r["key"]) for r in after[table]}
        found += [{table: r["key"], "now": None} for r in before[table] if str(r["key"]) not in kept]
    return found


def keeps_committed(plans: list[Cancelled], faulted: bool) -> CheckResult | None:
    """Every cancelled step's facts at the cancel against those at its answer and at the end; a cancel planned and
    never delivered. None when no step cancels a pass."""
    if not plans:
        return None
    evidence: list[Any] = []
    rows = 0
    unread = []
    for plan in plans:
        found, examined = _judge(plan, faulted)
        evidence += found
        rows += examined
        if plan.delivered is not None and plan.delivered["facts"] is None and not found:
            unread += plan.unread
    result = CheckResult("cancel-keeps-committed", KEEPS_COMMITTED, not evidence, evidence, rows)
    if unread and not rows:  # the server was not there to read at the cancel (a crash)
        result.skipped = "the facts at the cancel could not be read: " + "; ".join(unread)
    return result


def _judge(plan: Cancelled, faulted: bool) -> tuple[list, int]:
    """One plan's findings and how many facts it held to the sentence."""
    evidence: list[Any] = []
    if plan.delivered is None:
        if not (faulted and plan.fault_first):
            evidence.append({"step": plan.step, "planned": {"barrier": plan.barrier, "hit": plan.hit},
                             "delivered": False, "hits_seen": plan.seen,
                             "why": "the pass answered without reaching the barrier that was to carry the cancel"})
        return evidence, 1
    before = plan.delivered["facts"]
    if not plan.delivered["schedule_id"]:  # nothing to read: the barrier must say whose decision it is
        evidence.append({"step": plan.step, "cancelled_at": plan.barrier, "context": plan.delivered["context"],
                         "why": "the barrier's context names no schedule_id, so what it committed cannot be read"})
    rows = 0
    if before is not None:
        rows = len(before["occurrences"]) + len(before["history"]) + len(before["work"]) + 1
    answered = plan.answered or {}
    answer = answered.get("answer") or {}
    if not answered.get("faulted") and answer.get("outcome") != "ok":
        evidence.append({"step": plan.step, "answer": answer, "expected": "ok: a cancelled pass answers with the "
                                                                          "counts of what it did"})
    for when, facts, superseding in (("answer", answered.get("facts"), False),
                                     ("end", (plan.final or {}).get("facts"), plan.superseding_later)):
        if before is None or facts is None:
            continue
        gone = lost(before, facts, superseding)
        if gone:
            evidence.append({"step": plan.step, "schedule_id": plan.delivered["schedule_id"],
                             "cancelled_at": plan.barrier, "seen_at": when, "rolled_back": gone})
    return evidence, rows
