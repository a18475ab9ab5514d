"""A pass cancelled in flight: the barrier-reply `cancel-pass` at a pass's planned barrier, and what it must keep.

The host answers the planned hit of a `process` step's `cancel_at` barrier with `cancel-pass` instead of `continue`:
the pass's cancellation signalled at that moment, as a CancellationToken firing there (docs/protocol-notes.md, 34a).
While the implementation waits for that reply the verifier reads the schedule's committed facts; it reads them again
once the pass answered and at the end of the case, and every fact committed before the cancel must still be there.
"""

from __future__ import annotations

import threading

import psycopg

from testhost.impl.implementation import Implementation

from .run import FaultedRun

CANCEL_PASS = "cancel-pass"  # the barrier-reply action; `cancel` is the statement-cancel fault's name
CLAIMED = "schedule-claim-after-commit"


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

    def at_barrier(self, run: FaultedRun, impl: Implementation, name: str, context: dict) -> str | None:
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

    def after_answer(self, run: FaultedRun, answer: dict | None) -> None:
        if self.delivered is None:
            self.fault_first = run.injection is not None
            return
        self.answered = {"answer": answer, "faulted": run.injection is not None,
                         "facts": self._read(run, self.delivered["schedule_id"], "answer")}

    def at_end(self, run: FaultedRun) -> None:
        if self.delivered is not None:
            self.final = {"facts": self._read(run, self.delivered["schedule_id"], "end")}

    def _read(self, run: FaultedRun, schedule_id: str, when: str) -> dict | None:
        if not schedule_id:
            self.unread.append(f"{when}: the barrier's context names no schedule_id")
            return None
        try:
            return run.barrier_facts.read(run, schedule_id)
        except psycopg.Error as exc:
            self.unread.append(f"{when}: {type(exc).__name__}: {exc}")
            return None
