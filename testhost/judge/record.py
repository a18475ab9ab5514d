"""What one case recorded as it ran, in one record: the history the judge reads once the case is over (the judge
never reads the live case, as a Jepsen checker reads a history, not the test)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .barrier_checks import BarrierJudgement
from .rules import CheckResult
from .timelines import Timelines


@dataclass(frozen=True)
class StartedCopy:
    """A copy of the implementation the case started, as the record keeps it: its label and the barriers it reported
    outside any request."""

    label: str
    unsolicited: tuple = ()


@dataclass
class CaseRecord:
    """A case's facts, written by testhost/case/ while it runs and read by testhost/judge/case_judge.py after it."""

    timeline: list[dict] = field(default_factory=list)  # every event, in order, with its time since the case began
    hits: dict[str, int] = field(default_factory=dict)  # barrier -> hits counted toward the planned one
    model: Timelines = field(default_factory=Timelines)  # what Gate A says this timeline must produce, step by step
    # The store after every step: pending coalesced rows, cursors, processor facts and generations (case/reads.py).
    coalesced_seen: list[tuple[int, dict]] = field(default_factory=list)
    # Per stretch of time with a `process-due` request in flight (two when processors race): the counts the answers
    # reported and the committed facts the verifier read before and after, for `process-counts`.
    count_windows: list[dict] = field(default_factory=list)
    # Per request to an implementation: its outcome, the after-commit barriers it reported meanwhile and the barrier
    # where the fault fired during it, to judge a `fail` against what the verifier knows committed.
    answers: list[dict] = field(default_factory=list)
    client_outcomes: list[tuple] = field(default_factory=list)  # (step, response, what a refusal changed)
    command_facts: dict[str, list] = field(default_factory=dict)  # per client check, what each client step showed it
    beside_outcomes: list[dict] = field(default_factory=list)  # each step run beside a held barrier, and how it went
    late_probe: tuple[dict, dict] | None = None  # a paused processor's schedule rows before it resumed
    late_check: CheckResult | None = None  # `late-writes-fenced`, judged once the paused processor finished its step
    cancel_plans: list = field(default_factory=list)  # each `process` step's `cancel_at` that has run, in order
    denied_passes: list[dict] = field(default_factory=list)  # passes whose bridge must be refused (judge/bridge_role.py)
    demotions: list = field(default_factory=list)  # passes whose runtime role is taken after their decision
    restores: list[dict] = field(default_factory=list)  # each restore drill: the snapshot and the identities before it
    frozen_instants: set[datetime] = field(default_factory=set)  # where the server clock stood still in this case
    planted: set = field(default_factory=set)  # Work IDs a plain caller planted under an occurrence's key
    drained_at: datetime | None = None  # the server clock at the last drain
    barrier_facts: BarrierJudgement = field(default_factory=BarrierJudgement)  # reads at the processor barriers
    injection: Any = None  # the fault injected, once it fired (testhost/faults/catalog.py Injection)
    # Taken once the case is over: the clock moves of a bridge (faults/bridge_clock.py), every copy started with the
    # barriers it reported outside a request, and what the server did with the transaction open at the faulted
    # barrier. The first copy's hello is taken when it starts (it names the contract the copy targets).
    clock_moves: list = field(default_factory=list)
    clock_holds: list = field(default_factory=list)
    bridge_clock_planned: bool = False
    started: list[StartedCopy] = field(default_factory=list)  # every copy started, in order
    transaction_fate: str | None = None
    hello: dict | None = None
