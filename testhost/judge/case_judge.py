"""One case's verdict: the case checks, in order, over the final state and the case's record (judge/record.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Iterable

from scenarios.matrix import CasePlan
from scenarios.scenario import Scenario, relative

from . import bridge_role
from .cancelled_pass import keeps_committed
from .clock_samples import acceptance_anchor, work_own_clock
from .commands import client_outcomes, results as command_results
from .contract_notes import settle, targeted as targeted_contract
from .expectations import history_agreement, model_agreement
from .fault_checks import (FATE_ABORTED, FATE_COMMITTED, PLANNED_FAULT_FIRED, cancel_retried, client_deadline,
                           crash_durability, outcome_honesty, stall_took_over)
from .gate_model import picture as model_picture
from .invariants import universal
from .observations import (beside_barrier_reached, coalesced_forward, cursor_high_water, definition_revision,
                           fence_locked_beside, fence_seen, generations_unchanged, idle_cursor,
                           one_pending_coalesced_seen, pass_decides_due, passive_processor, requeue_kept)
from .pass_windows import empty_pass, pass_bounded, pass_leaves_no_lease, process_counts
from .pictures import normalize
from .record import CaseRecord
from .rules import CheckResult
from .state import StoreState
from .verdict import fault_free_judges


@dataclass
class Judging:
    """One case being judged: what it recorded, and what the judging has found so far (each check may read the
    checks before it, as `no-vacuous-checks` does)."""

    state: StoreState
    facts: CaseRecord
    plan: CasePlan
    scenario: Scenario
    baseline: dict | None
    schedule_ids: dict[str, Any]
    checks: list[CheckResult] = field(default_factory=list)
    picture: dict | None = None  # the store's final state, run-independent
    model: Any = None  # the model's timeline that ran, where a fault left two possible
    left: frozenset = frozenset()  # what that timeline left to the recovery's clock
    predicted: dict | None = None  # what that timeline must end in
    judges: list[CheckResult] = field(default_factory=list)  # the fault-free run's judges, applied or not compared

    @property
    def faulted(self) -> bool:
        return self.plan.fault is not None

    @property
    def fired(self) -> bool:
        return self.facts.injection is not None


@dataclass
class Judgement:
    """What a case's judging found: its checks in order, the store's picture and the model's, and what the model's
    timeline left to the recovery (noted on the case's timeline)."""

    checks: list[CheckResult]
    picture: dict
    model_picture: dict
    left: frozenset


CaseCheck = Callable[[Judging], Iterable[CheckResult]]


def fault_shift_s(timeline: list[dict], scenario: Scenario) -> float:
    """How far the fault, its recovery and the settling moved the server clock beyond the scenario's own advances
    (a pause moves it twice: for the takeover and for the recovery)."""
    moved = sum(e["shift_s"] for e in timeline if e["event"] == "clock")
    return moved - sum(s.args["seconds"] for s in scenario.steps if s.op == "advance")


def transaction_fate(plan: CasePlan, injection: Any, fate: str | None) -> CheckResult | None:
    """What the server did with the transaction open at the barrier: the verifier confirms what committed."""
    if fate is None:
        return None
    expected = "committed" if plan.fault in ("lost-commit-reply", "pause") else "aborted"
    rule = FATE_ABORTED if expected == "aborted" else FATE_COMMITTED
    return CheckResult("transaction-fate", rule, fate == expected,
                       [] if fate == expected else [{"xid": injection.open_xid, "fate": fate, "expected": expected}], 1)


def _resolve(value: str, generation: dict) -> datetime:
    return relative(value, generation.get("accepted_at_utc"))


def _invariants(j: Judging) -> Iterable[CheckResult]:
    return universal(j.state)


def _observed(j: Judging) -> Iterable[CheckResult]:
    seen = j.facts.coalesced_seen
    generations = {(str(g["schedule_id"]), g["generation"]): g for g in j.state.generations}
    return [coalesced_forward(seen), one_pending_coalesced_seen(seen), idle_cursor(seen), fence_seen(seen),
            passive_processor(seen, j.facts.started), requeue_kept(seen), definition_revision(seen, j.state),
            generations_unchanged(seen, j.state), pass_decides_due(seen, generations),
            cursor_high_water(j.facts.barrier_facts.cursor_reads)]


def _late_writes(j: Judging) -> Iterable[CheckResult]:
    return [j.facts.late_check] if j.facts.late_check is not None else []


def _fault_free_judges(j: Judging) -> Iterable[CheckResult]:
    """The model's timeline that ran, and the fault-free run's judges where the model says this timeline, on its
    real clock, must end as the fault-free one did; elsewhere the report says why they were not compared.
    Crash-equivalence among them comes last (`_crash_equivalence`)."""
    j.picture = normalize(j.state, j.schedule_ids)
    model = j.facts.model
    j.model = model.matching(j.picture)
    j.left = model.left[model.branches.index(j.model)]
    j.predicted = model_picture(j.model)
    j.judges = fault_free_judges(j.checks, faulted=j.faulted, scenario=j.scenario, base=j.baseline,
                                 model_picture=j.predicted, picture=j.picture, state=j.state,
                                 schedule_ids=j.schedule_ids, resolve=_resolve,
                                 shift_s=fault_shift_s(j.facts.timeline, j.scenario), left=j.left)
    return [c for c in j.judges if c.name != "crash-equivalence"]


def _model(j: Judging) -> Iterable[CheckResult]:
    return [model_agreement(j.picture, j.model), history_agreement(j.state, j.schedule_ids, j.model),
            acceptance_anchor(j.state, j.schedule_ids, j.model)]


def _client(j: Judging) -> Iterable[CheckResult]:
    return [*client_outcomes(j.facts.client_outcomes), *command_results(j.facts.command_facts),
            outcome_honesty(j.facts.answers, j.facts.transaction_fate)]


def _beside(j: Judging) -> Iterable[CheckResult]:
    if not j.facts.beside_outcomes:
        return []
    locked = fence_locked_beside(j.facts.coalesced_seen, j.facts.beside_outcomes)
    return [beside_barrier_reached(j.facts.beside_outcomes, faulted=j.faulted),
            *([locked] if locked is not None else [])]


def _counts_and_clock(j: Judging) -> Iterable[CheckResult]:
    """The counts every `ok` pass reported against the committed facts, and the Work's own clock."""
    windows, facts = j.facts.count_windows, j.facts
    return [process_counts(windows), pass_bounded(windows), empty_pass(windows), pass_leaves_no_lease(windows),
            work_own_clock(j.state, facts.clock_moves, planned=facts.bridge_clock_planned,
                           promised=facts.bridge_clock_planned and not j.faulted, holds=facts.clock_holds,
                           frozen=frozenset(facts.frozen_instants))]


def _bridge_role(j: Judging) -> Iterable[CheckResult]:
    return [*bridge_role.judge(j.facts.denied_passes), *bridge_role.judge_demotions(j.facts.demotions)]


def _barrier_reads(j: Judging) -> Iterable[CheckResult]:
    return j.facts.barrier_facts.checks()


def _cancelled_pass(j: Judging) -> Iterable[CheckResult]:
    cancelled = keeps_committed(j.facts.cancel_plans, faulted=j.faulted)
    return [cancelled] if cancelled is not None else []


def _fault(j: Judging) -> Iterable[CheckResult]:
    """The planned fault fired, and what each fault promises of the transaction, the client and the recovery."""
    if not j.faulted:
        return []
    injection = j.facts.injection
    found = [CheckResult("planned-fault-fired", PLANNED_FAULT_FIRED, j.fired,
                         [] if j.fired else [{"barrier": j.plan.barrier, "hit": j.plan.hit,
                                              "hits_seen": j.facts.hits}], 1),
             transaction_fate(j.plan, injection, j.facts.transaction_fate)]
    if j.fired:
        found += [client_deadline(injection.details), stall_took_over(injection.details),
                  cancel_retried(injection.details, j.facts.answers), crash_durability(injection.details)]
    return [c for c in found if c is not None]


def _crash_equivalence(j: Judging) -> Iterable[CheckResult]:
    return [c for c in j.judges if c.name == "crash-equivalence"]


# The case checks, in the order the report lists them.
CASE_CHECKS: tuple[CaseCheck, ...] = (_invariants, _observed, _late_writes, _fault_free_judges, _model, _client,
                                      _beside, _counts_and_clock, _bridge_role, _barrier_reads, _cancelled_pass,
                                      _fault, _crash_equivalence)


def judge(state: StoreState, facts: CaseRecord, plan: CasePlan, scenario: Scenario,
          baseline: dict | None) -> Judgement:
    """Every case check over the case's final state and record, each failed reference choice settled into a note."""
    schedule_ids = {name: scenario.schedule_id(name) for name in scenario.schedules}
    judging = Judging(state, facts, plan, scenario, baseline, schedule_ids)
    for check in CASE_CHECKS:
        judging.checks.extend(check(judging))
    checks = settle(judging.checks, targeted_contract(facts.hello))
    return Judgement(checks, judging.picture, judging.predicted, judging.left)
