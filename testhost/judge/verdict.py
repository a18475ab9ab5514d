"""Which judges a faulted case answers to: the fault-free run and the scenario's expectations only where the
independent model says the faulted timeline (as it ran, on its real clock) must end as the fault-free one did."""

from __future__ import annotations

from typing import Any

from .expectations import EQUIVALENCE, SCENARIO, equivalence, expectations
from .invariants import vacuity
from .pictures import picture_differences
from .rules import CheckResult

# Why a check was not applied, as report.json's `skipped` says it.
NO_BASELINE = "not compared: the scenario's fault-free run left no baseline (it did not finish)"
SCENARIO_OPTS_OUT = ("not compared: the scenario says equivalence = false (its faulted runs are judged by the "
                     "invariants and the model)")
TIMELINES_DIFFER = ("not compared: the model's picture of this timeline differs from its picture of the fault-free "
                    "one (evidence), so the two outcomes are both right and need not agree: the fault and its "
                    "recovery moved the server clock by {shift:g} s{left}, and on that clock a step or a drain falls "
                    "on the other side of a nominal instant, or the recovery drains early what a pass left "
                    "(`crashproof scenarios --lint` names the step); model-agreement judges this timeline")
LEFT = ", the faulted pass left {names} to the recovery"


def baseline(picture: dict | None, model_picture: dict | None) -> dict | None:
    """What a fault-free run hands its scenario's faulted cases: the database's picture and the model's."""
    return None if picture is None else {"picture": picture, "model": model_picture}


def timeline_differences(faulted_model: dict, fault_free_model: dict) -> list[dict]:
    """Where the model's pictures of two timelines differ (each run's own reference instants left out)."""
    return picture_differences(faulted_model, fault_free_model, ("this_timeline", "fault_free_timeline"))


def decide(faulted: bool, scenario_equivalence: bool, base: dict | None, model_picture: dict,
           shift_s: float = 0.0, left: frozenset = frozenset()) -> tuple[str | None, list[dict]]:
    """(None, []) when the fault-free run's judges apply to this case; else why not, with the model's
    differences between the two timelines as evidence."""
    if not faulted:
        return None, []
    if not scenario_equivalence:
        return SCENARIO_OPTS_OUT, []
    if base is None or base.get("model") is None:
        return NO_BASELINE, []
    differences = timeline_differences(model_picture, base["model"])
    if not differences:
        return None, []
    return TIMELINES_DIFFER.format(shift=shift_s, left=LEFT.format(names=", ".join(sorted(left))) if left else ""), \
        differences


def not_compared(name: str, rule: str, why: str, evidence: list | None = None) -> CheckResult:
    """A check that was not applied: it neither passed nor failed, and says why."""
    return CheckResult(name, rule, True, evidence or [], 0, skipped=why)


def model_promise(model_picture: dict) -> dict[str, dict]:
    """The model's picture in the shape of expectations, for no-vacuous-checks on a faulted timeline whose own
    expectations were not applied: the rows the model says exist are promised instead."""
    return {name: {"occurrences": [{"state": o[4]} for o in entry["occurrences"]],
                   "works": sum(o[4] == "materialized" for o in entry["occurrences"])}
            for name, entry in model_picture.items() if entry is not None}


def fault_free_judges(checks: list[CheckResult], *, faulted: bool, scenario: Any, base: dict | None,
                      model_picture: dict, picture: dict, state: Any, schedule_ids: dict, resolve,
                      shift_s: float = 0.0, left: frozenset = frozenset()) -> list[CheckResult]:
    """scenario-expectations, no-vacuous-checks and (faulted) crash-equivalence for one case: applied, or the
    first and last not compared with the reason (no-vacuous-checks then holds to what the model promises)."""
    why, differences = decide(faulted, scenario.equivalence, base, model_picture, shift_s, left)
    if why is None:
        found = [expectations(state, scenario.expect, schedule_ids, resolve, exact_cursor=not faulted)]
        found.append(vacuity(checks + found, scenario.expect))
        if faulted:
            found.append(equivalence(picture, base["picture"]))
        return found
    return [not_compared("scenario-expectations", SCENARIO, why, differences),
            vacuity(checks, model_promise(model_picture)),
            not_compared("crash-equivalence", EQUIVALENCE, why, differences)]
