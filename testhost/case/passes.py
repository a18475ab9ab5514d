"""A case's passes: `process-due` asked of one copy or of several at once, a pass whose bridge is refused, a pass
whose login loses the runtime role after its decision, each with the model's pass beside it."""

from __future__ import annotations

import copy
import threading
from datetime import datetime

from barriers.schema import REVOCABLE
from scenarios.scenario import Step
from scenarios.steps import during_step, pass_denial, pass_limit

from testhost.faults.cancel_pass import CancelPlan
from testhost.judge import bridge_role

from . import role_changes


class Passes:
    """How a case runs a pass step, and what the model takes from it."""

    def __init__(self, case) -> None:  # the case (runner.py CaseRun) this part of it serves
        self.case = case

    def run(self, step: Step, labels: list[str], request: dict) -> None:
        """A process-due request to each labelled copy (at once when several), with the model's pass; a pass
        with `during` runs that step beside its held barrier and orders the model by what the step did."""
        case = self.case
        for label in labels:
            if label not in case.impls:
                case.impls[label] = case.start_implementation(label)
        denial = pass_denial(case.scenario, step)
        if denial is not None:
            self.denied(step, labels[0], request, denial)
            return
        if step.args.get("demote_after_decision"):
            self.demoted(step, labels[0], request)
            return
        cutoff = case.world.clock.now()
        model_limit = min(request["maximum_schedules"], request.get("cancel_after", 1 << 30)) * len(labels)
        if "cancel_at" in step.args:
            model_limit = pass_limit(step.args) * len(labels)
            case.facts.cancel_plans.append(CancelPlan(
                step.index, labels[0], step.args["cancel_at"]["barrier"], step.args["cancel_at"].get("hit", 1),
                any(s.op in ("update", "delete") for s in case.scenario.steps[step.index:])))
        beside = during_step(step)
        try:
            if "expect" in step.args:  # a pass the scenario expects an answer of, e.g. a refused lease
                before = case.reads.dispatch_rows()
                case.requests.expecting = True
                try:
                    response = case.requests.ask(case.impls[labels[0]], "process-due", request)
                finally:
                    case.requests.expecting = False
                case.requests.note_response(response, "process-due", labels[0])
                after = case.reads.dispatch_rows()
                refused_but_changed = ({"before": before, "after": after}
                                       if response.outcome == "fail" and before != after else {})
                case.facts.client_outcomes.append((step, response, refused_but_changed))
                if step.expected_outcome == "ok":
                    case.model.pass_(cutoff, request["maximum_schedules"])
            else:
                if beside is not None:  # the model as it stood before the pass, should the step beside it come first
                    case.beside.current = {"barrier": beside[0], "hit": beside[1], "step": beside[2], "seen": 0,
                                           "outcome": None, "model_before": copy.deepcopy(case.model),
                                           "cutoff": cutoff, "limit": model_limit}
                # The model first: a fault inside the pass branches it there, and its recovery drains on top.
                # More schedules due than the pass may claim: which it claims is the store's to say (31p).
                choosing = beside is None and len(labels) == 1 and len(case.model.schedules) > model_limit \
                    and case.model.due_count(cutoff) > model_limit
                if choosing:
                    leases_before, fired_before = case.reads.lease_generations(), case.injection is not None
                case.model.pass_(cutoff, model_limit)
                fault_before_pass = case.injection is not None
                if len(labels) == 1:
                    if "cancel_at" in step.args:
                        case.facts.cancel_plans[-1].armed = True
                    case.requests.respond(case.impls[labels[0]], "process-due", request)
                    if "cancel_at" in step.args:
                        case.facts.cancel_plans[-1].armed = False
                        answers = case.facts.answers
                        case.facts.cancel_plans[-1].after_answer(case, answers[-1] if answers else None)
                    if choosing and fired_before == (case.injection is not None):  # no fault fired in this pass
                        self.claims_seen(leases_before)
                    if "cancel_at" not in step.args and fault_before_pass == (case.injection is not None):
                        # An instant that fell due as it ran (38e); a step beside it that ran while it was held is
                        # in case.model already, and one that waited runs after this (after_pass).
                        case.model.ran_until(case.world.clock.now())
                else:
                    threads = [threading.Thread(target=case.requests.respond,
                                                args=(case.impls[label], "process-due", request)) for label in labels]
                    case.racers = dict(zip(labels, threads))
                    case.concurrent = True
                    for thread in threads:
                        thread.start()
                    for thread in threads:
                        thread.join()
                    case.concurrent = False
                if beside is not None:
                    case.judge_late_writes()  # before the step beside runs again: its writes are no late writes
                    case.beside.after_pass()
        finally:
            case.beside.current = None

    def denied(self, step: Step, label: str, request: dict, denial: str) -> None:
        """A pass whose bridge must be refused: its privilege revoked for it alone (granted back however it ends),
        the scoped rows read around it; the model takes nothing from it."""
        case = self.case
        revoked = denial in REVOCABLE
        try:
            with case.owner() as conn:
                if revoked:
                    role_changes.set_privilege(conn, denial, granted=False)
                not_in_effect = role_changes.denial_in_effect(conn, denial)
                due = conn.execute("select exists (select 1 from appsurface_durable.schedule_dispatch_timing "
                                   "where claimable_at_utc <= clock_timestamp()) as due").fetchone()["due"]
                before = role_changes.rows(conn)
            offset = role_changes.log_offset(case.world) if revoked else None
            fired_before = case.injection is not None
            case.requests.expecting = True
            try:
                response = case.requests.ask(case.impls[label], "process-due", request)
            finally:
                case.requests.expecting = False
            with case.owner() as conn:
                after = role_changes.rows(conn)
            refused = role_changes.denials_logged(case.world, offset, denial) if revoked else None
        finally:
            if revoked:
                with case.owner() as conn:
                    role_changes.set_privilege(conn, denial, granted=True)
        case.requests.note_response(response, "process-due", label)
        self.leases_left(before, after)
        case.note("denied-pass", denial=denial, due=due, not_in_effect=not_in_effect, denied_statements=refused)
        case.facts.denied_passes.append({"step": step.index + 1, "instance": label, "denial": denial, "due": due,
                                   "not_in_effect": not_in_effect, "outcome": response.outcome,
                                   "error": response.error, "value": response.value,
                                   "changed": bridge_role.scoped_changes(before, after),
                                   "claims": bridge_role.claims(before, after), "denied_statements": refused,
                                   "faulted": not fired_before and case.injection is not None})

    def demoted(self, step: Step, label: str, request: dict) -> None:
        """A pass whose copy's login loses the runtime role between its committed decision and its bridge (given
        back however the pass ends); the model takes its decision, no bridge, and the lease the store shows left."""
        case = self.case
        demotion = bridge_role.Demotion(step.index + 1, label, case.store.dbname)
        case.facts.demotions.append(demotion)
        role_changes.start_demotion(demotion, case)
        case.model.pass_(case.world.clock.now(), 1, bridges=False)
        fired_before, response = case.injection is not None, None
        # an answer that may be a refusal: its window is not a clean pass's
        case.requests.expecting = demotion.armed = True
        try:
            response = case.requests.ask(case.impls[label], "process-due", request)
        finally:
            case.requests.expecting = demotion.armed = False
            role_changes.end_demotion(demotion, case, response, faulted=not fired_before and case.injection is not None)
        case.requests.note_response(response, "process-due", label)
        if demotion.after is not None:
            self.leases_left(demotion.before, demotion.after)

    def claims_seen(self, leases_before: dict[str, int]) -> None:
        """A pass bounded below the schedules due may claim any of them (a pass a fault fired in is left to the
        model's branches): the claim function orders by claimable time, which ties among schedules due at one
        instant and which requeues and expired leases move, and the spec orders nothing. The model predicted its
        claims; where the store shows the pass claimed others, the model takes the pass again with the claims seen,
        as many as it predicted (docs/protocol-notes.md, 31p)."""
        case = self.case
        after = case.reads.lease_generations()
        seen = sorted(case.schedule_names[i] for i, generation in after.items()
                      if i in case.schedule_names and generation > leases_before.get(i, 0))
        predicted = sorted(case.model.last_pass_claims())
        if len(seen) != len(predicted) or predicted == seen:
            return  # as predicted; or another number of claims, which the model's verdicts judge as they stand
        case.model.redo_last_pass(seen)
        case.note("model-claims", predicted=predicted, seen=seen)

    def leases_left(self, before: dict, after: dict) -> None:
        """The leases a refused pass claimed and left to expire, as the store shows them, for the model: the claim
        function takes those schedules again only at their expiry, so a later pass bounded below the schedules due
        claims the others first. Read from the store, since how many schedules a refused pass claims before it
        answers is the implementation's (PROTOCOL.md, `bridge-failure-not-retriable`)."""
        case = self.case
        was = {r["dispatch_id"]: r["lease_generation"] for r in before["schedule_dispatch"]}
        timing = {r["dispatch_id"]: r for r in after["schedule_dispatch_timing"]}
        for row in after["schedule_dispatch"]:
            name = case.schedule_names.get(str(row["schedule_id"]))
            claimable = (timing.get(row["dispatch_id"]) or {}).get("claimable_at_utc")
            if name in case.model.schedules and claimable and row["lease_generation"] > was.get(row["dispatch_id"], 0):
                case.model.lease_left(name, datetime.fromisoformat(claimable))
