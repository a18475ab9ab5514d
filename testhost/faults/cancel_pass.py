"""A pass cancelled in flight: the barrier-reply `cancel-pass` at a pass's planned barrier, and what it must keep.

The host answers the planned hit of a `process` step's `cancel_at` barrier with `cancel-pass` instead of `continue`:
the pass's cancellation signalled at that moment, as a CancellationToken firing there (docs/protocol-notes.md, 34a).
While the implementation waits for that reply the verifier reads the schedule's committed facts; it reads them again
once the pass answered and at the end of the case, and every fact committed before the cancel must still be there.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import psycopg

from testhost.judge.checks import CheckResult, rule_of

if TYPE_CHECKING:
    from testhost.impl.implementation import Implementation
    from testhost.case.runner import CaseRun

CANCEL_PASS = "cancel-pass"  # the barrier-reply action; `cancel` is the statement-cancel fault's name
CLAIMED = "schedule-claim-after-commit"

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


class CancelPlan:
    """One `process` step's `cancel_at`: counted per hit, delivered once, with the facts read around it."""

    def __init__(self, step_index: int, label: str, barrier: str, hit: int, superseding_later: bool):
        self.step, self.label, self.barrier, self.hit = step_index + 1, label, barrier, hit
        self.superseding_later = superseding_later  # an update or delete follows the step in the scenario
        self.seen = 0
        self.claims_before = 0  # leases the pass reported committed when the cancel was delivered
        self.delivered: dict | None = None  # {"context", "facts"} at the barrier
        self.answered: dict | None = None  # facts once the pass answered, and the answer
        self.final: dict | None = None
        self.fault_first = False  # a fault fired in the case before the pass answered without the cancel
        self.armed = False  # the step's own request is in flight (not the recovery's or the final drain's)
        self.unread: list[str] = []
        self._lock = threading.Lock()

    def at_barrier(self, run: "CaseRun", impl: "Implementation", name: str, context: dict) -> str | None:
        """The reply's action at this barrier: `cancel-pass` at the planned hit while the pass is in flight."""
        if not self.armed or impl.label != self.label or run.asking.get(impl.label) is None or not impl.alive:
            return None
        with self._lock:
            if self.delivered is not None:
                return None
            if name == CLAIMED:
                self.claims_before += 1
            if name != self.barrier:
                return None
            self.seen += 1
            if self.seen != self.hit:
                return None
            schedule_id = str((context or {}).get("schedule_id") or "")
            self.delivered = {"context": dict(context or {}), "schedule_id": schedule_id,
                              "facts": self._read(run, schedule_id, "barrier")}
        if run.window is not None:
            run.window["cancelled_after_claims"] = self.claims_before
        run.note("cancel-pass", instance=impl.label, barrier=name, hit=self.hit, claims_before=self.claims_before,
                 schedule_id=schedule_id)
        return CANCEL_PASS

    def after_answer(self, run: "CaseRun", answer: dict | None) -> None:
        if self.delivered is None:
            self.fault_first = run.injection is not None
            return
        self.answered = {"answer": answer, "faulted": run.injection is not None,
                         "facts": self._read(run, self.delivered["schedule_id"], "answer")}

    def at_end(self, run: "CaseRun") -> None:
        if self.delivered is not None:
            self.final = {"facts": self._read(run, self.delivered["schedule_id"], "end")}

    def _read(self, run: "CaseRun", schedule_id: str, when: str) -> dict | None:
        if not schedule_id:
            self.unread.append(f"{when}: the barrier's context names no schedule_id")
            return None
        try:
            return run.barrier_facts.read(run, schedule_id)
        except psycopg.Error as exc:
            self.unread.append(f"{when}: {type(exc).__name__}: {exc}")
            return None


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


def keeps_committed(plans: list[CancelPlan], faulted: bool) -> CheckResult | None:
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


def _judge(plan: CancelPlan, faulted: bool) -> tuple[list, int]:
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
