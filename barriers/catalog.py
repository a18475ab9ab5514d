"""The barrier catalog: every point where the TestHost may stop, kill or cut an implementation.

The five names the spec gives are kept exactly; the others sit at every other commit boundary of a
pass and of the Work terminal transaction, so the crash matrix has no blind spot.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Barrier:
    """One named point, the transaction it sits in, and what must be durable if the process dies there."""

    name: str
    transaction: str
    position: str  # "before-commit", "after-commit" or "inside" (before the commit, after a write)
    commit: str
    durable_if_killed_here: str
    from_spec: bool = False
    # The adapter operation whose code reaches it. An implementation that does not offer that operation
    # never runs this transaction: the host's fallback does, so the barrier is not required of it.
    operation: str = "process-due"

    @property
    def before_commit(self) -> bool:
        return self.position in ("before-commit", "inside")


CATALOG: tuple[Barrier, ...] = (
    Barrier("schedule-claim-before-commit", "dispatcher claim", "before-commit", "claim",
            "nothing new: the lease is not committed; the dispatch row is claimable as before"),
    Barrier("schedule-claim-after-commit", "dispatcher claim", "after-commit", "claim",
            "the lease (lease_state leased, lease generation and dispatch revision advanced); nothing scoped"),
    Barrier("schedule-decision-before-commit", "scoped decision", "before-commit", "decision",
            "nothing of this decision: no occurrence disposition, no cursor move, no suspension", True),
    Barrier("schedule-decision-after-commit", "scoped decision", "after-commit", "decision",
            "the occurrence disposition and the cursor move together (or the suspension); no Work yet", True),
    Barrier("schedule-work-after-acceptance", "scoped bridge", "inside", "bridge",
            "as after the decision: the Work accepted inside this transaction is not durable", True),
    Barrier("schedule-bridge-before-commit", "scoped bridge", "before-commit", "bridge",
            "as after the decision: neither the Work nor the link nor the materialized state", True),
    Barrier("schedule-link-after-commit", "scoped bridge", "after-commit", "bridge",
            "the accepted Work, the link with its exact identity, the materialized state and the lease release", True),
    Barrier("work-terminal-before-commit", "Work terminal", "before-commit", "work-terminal",
            "the Work is still nonterminal and no dispatch row was requeued", operation="complete-work"),
    Barrier("work-terminal-after-commit", "Work terminal", "after-commit", "work-terminal",
            "the terminal Work state and, if a pending coalesced occurrence waits, the requeued dispatch row",
            operation="complete-work"),
)

BY_NAME = {barrier.name: barrier for barrier in CATALOG}
# The transactions of a processor's pass (`process-due`): a claim, a decision, a bridge.
PROCESSOR_TRANSACTIONS = frozenset({"dispatcher claim", "scoped decision", "scoped bridge"})


def required_of(operations) -> set[str]:
    """The barriers an implementation offering these operations must reach where the reference does."""
    return {b.name for b in CATALOG if b.operation in operations}


# Where a pass's cancellation may be delivered (the barrier-reply `cancel-pass`): after every commit of a
# `process-due` pass, where nothing is in flight, so the cancel comes between two transactions and the pass's next
# step is decided by it alone. Before a commit the COMMIT in flight would race it, which the spec leaves open.
CANCEL_BARRIERS = tuple(b.name for b in CATALOG if b.operation == "process-due" and b.position == "after-commit")

SPEC_NAMES = ("schedule-decision-before-commit", "schedule-decision-after-commit", "schedule-bridge-before-commit",
              "schedule-link-after-commit", "schedule-work-after-acceptance")
