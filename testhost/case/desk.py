"""The barrier desk: every barrier an implementation reports comes here while it waits for the reply. The desk
counts the hits, fires the planned fault at the planned one, and lets what watches barriers (the step beside a held
pass, the barrier reads, a bridge's clock, a demotion, a planned cancel) act before the implementation goes on."""

from __future__ import annotations

import threading

from barriers import BY_NAME
from barriers.catalog import PROCESSOR_TRANSACTIONS

from testhost.faults.catalog import FAULTS, Injection
from testhost.impl.implementation import TIMEOUT, Implementation

from . import role_changes

# Barriers reached only once a schedule's decision has committed in this pass.
DECIDED_AT = {"schedule-decision-after-commit", "schedule-work-after-acceptance", "schedule-bridge-before-commit",
              "schedule-link-after-commit"}


class BarrierDesk:
    """Where a case's implementations report their barriers."""

    def __init__(self, case) -> None:  # the case (runner.py CaseRun) this part of it serves
        self.case = case
        self.lock = threading.Lock()

    def at_barrier(self, impl: Implementation, name: str, context: dict) -> str | None:
        """A barrier an implementation reported: the reply it gets (None: go on; a planned cancel may ride on it)."""
        case = self.case
        case.beside.at_barrier(impl, name)
        with self.lock:
            armed = case.injection is None and case.plan.fault is not None
            if armed:
                case.facts.hits[name] = case.facts.hits.get(name, 0) + 1
                fire = name == case.plan.barrier and case.facts.hits[name] == case.plan.hit
            else:
                if case.plan.fault is None:
                    case.facts.hits[name] = case.facts.hits.get(name, 0) + 1
                fire = False
            if fire:
                case.injection = Injection(case.plan.fault, name, context=dict(context))
        case.note("barrier", instance=impl.label, name=name, context=context)
        asked = case.requests.asking.get(impl.label)
        if asked is not None:
            if BY_NAME[name].position == "after-commit":
                asked["committed"].append(name)
            if fire:
                asked["faulted"] = name
        self._watch(impl, name, context, fire)
        if fire:
            case.note("fault", fault=case.plan.fault, barrier=name, hit=case.plan.hit, instance=impl.label)
            if BY_NAME[name].transaction in PROCESSOR_TRANSACTIONS:
                case.model.fork(self.decided_in_pass())  # what it claimed may be left to the recovery's clock
            try:
                FAULTS[case.plan.fault].inject(case, impl, BY_NAME[name], case.injection)
            except Exception as exc:  # noqa: BLE001 - a fault that could not be injected is a harness error
                case.fault_error = f"{type(exc).__name__}: {exc}"
                raise
            case.note("fault-injected", details=case.injection.details, open_xid=case.injection.open_xid)
            if case.bridge_clock is not None:  # a process that lived on may bridge without redoing its decision
                case.bridge_clock.after_fault(impl, name, context, case.plan.fault)
        demotions, cancels = case.facts.demotions, case.facts.cancel_plans
        if demotions:  # the runtime role taken from the login after a committed decision, before the reply
            role_changes.demote_at_barrier(demotions[-1], case, impl, name, context)
        # After any fault at this barrier: a cancel rides on the reply the implementation gets once it goes on.
        return cancels[-1].at_barrier(case, impl, name, context) if cancels else None

    def wait_for_other_racers(self, label: str, timeout: float | None = None) -> list[str]:
        """While two processors race, let every racer but `label` finish its pass (a fault calls this from the
        faulted processor's thread); the racers waited for."""
        case = self.case
        if not case.concurrent:
            return []
        waited = []
        for other, thread in case.racers.items():
            if other != label and thread is not threading.current_thread():
                thread.join(TIMEOUT["operation"] if timeout is None else timeout)
                waited.append(other)
        case.note("racers-finished", instances=waited)
        return waited

    def _watch(self, impl: Implementation, name: str, context: dict, fire: bool) -> None:
        """What the counts and the Work clock need from a barrier: a fault inside a counting window, and the
        committed decision at which the bridge's clock move starts."""
        case = self.case
        case.barrier_facts.at_barrier(case, impl, name, context, fire)
        window = case.requests.window
        if fire and window is not None:
            window["faults"].append(case.plan.fault)
        if case.bridge_clock is not None:
            case.bridge_clock.at_barrier(impl, name, context, faulted=fire)

    def decided_in_pass(self) -> set[str]:
        """The schedules whose decision the verifier saw commit since the step began (the barrier that fired
        included): a fault in that pass cannot leave them undecided. Only what the barriers' context names."""
        case = self.case
        names = case.schedule_names
        start = max((i for i, e in enumerate(case.facts.timeline) if e["event"] in ("step", "final-drain")), default=0)
        return {names[e["context"]["schedule_id"]] for e in case.facts.timeline[start:]
                if e["event"] == "barrier" and e["name"] in DECIDED_AT
                and str((e.get("context") or {}).get("schedule_id")) in names}
