"""The final state against what it should be: the scenario's own expectations, the fault-free run of the same
scenario, and the independent model of Gate A (its final picture and the processor's history rows)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Callable

from .identity import instant_text, parse_instant
from .gate_model import picture as model_picture
from .pictures import picture_differences
from .rules import CheckResult, Rules
from .state import StoreState, is_clock_anomaly, recorded_cursor

RULES = Rules()
rule_of = RULES.declare


SCENARIO = rule_of("scenario-expectations", "scenario: the occurrences, Work count, lifecycle and cursor the "
                   "scenario file states for its fault-free run (and for each faulted run whose timeline, as it ran "
                   "on its real clock, the model ends as it ends the fault-free one; any other faulted run reports "
                   "it not compared, with the model's differences)")


def expectations(state: StoreState, expect: dict[str, dict], schedule_ids: dict[str, Any],
                 resolve: Callable[[str, dict], datetime], *, exact_cursor: bool = True) -> CheckResult:
    """The scenario's own expectations (exact occurrence lists, Work counts, lifecycle, cursor)."""
    evidence = []
    rows = 0
    for name, want in expect.items():
        schedule_id = schedule_ids[name]
        d = state.definition(schedule_id)
        if d is None:
            evidence.append({"schedule": name, "missing": True})
            continue
        if "lifecycle" in want and d["lifecycle_state"] != want["lifecycle"]:
            evidence.append({"schedule": name, "lifecycle": d["lifecycle_state"], "expected": want["lifecycle"]})
        if "suspension" in want and d["suspension_reason"] != want["suspension"]:
            evidence.append({"schedule": name, "suspension": d["suspension_reason"], "expected": want["suspension"]})
        occs = state.occurrences_of(schedule_id)
        rows += len(occs)
        if "occurrences" in want:
            got = sorted((o["generation"], o["occurrence_kind"], o["first_nominal_utc"], o["last_nominal_utc"],
                          o["state"]) for o in occs)
            expected = []
            for e in want["occurrences"]:
                generation = state.generation(schedule_id, e["generation"]) or {}
                expected.append((e["generation"], e["kind"], resolve(e["first"], generation),
                                 resolve(e["last"], generation), e["state"]))
            if got != sorted(expected):
                evidence.append({"schedule": name, "occurrences": got, "expected": sorted(expected)})
        if "works" in want:
            linked = [o for o in occs if o["work_id"] is not None]
            if len(linked) != want["works"]:
                evidence.append({"schedule": name, "works": len(linked), "expected": want["works"]})
        if "dropped" in want:
            # Due instants an update or delete left undecided, as its history records them (protocol-notes 24n).
            got = sorted((h["generation"], parse_instant(h["detail"]["first_nominal_utc"]),
                          parse_instant(h["detail"]["last_nominal_utc"]), h["detail"]["instants"])
                         for h in state.history
                         if h["schedule_id"] == schedule_id and h["event"] == "due-instants-superseded")
            rows += len(got)
            expected = sorted((e["generation"], resolve(e["first"], state.generation(schedule_id, e["generation"]) or {}),
                               resolve(e["last"], state.generation(schedule_id, e["generation"]) or {}), e["instants"])
                              for e in want["dropped"])
            if got != expected:
                evidence.append({"schedule": name, "dropped": got, "expected": expected})
        if "cursor" in want and exact_cursor:  # a fault's recovery moves the clock: a raw cutoff differs by design
            generation = state.generation(schedule_id, d["active_generation"]) or {}
            if d["cursor_utc"] != resolve(want["cursor"], generation):
                evidence.append({"schedule": name, "cursor": d["cursor_utc"],
                                 "expected": resolve(want["cursor"], generation)})
    return CheckResult("scenario-expectations", SCENARIO, not evidence, evidence, rows)


EQUIVALENCE = rule_of("crash-equivalence", "A future proof must show that recovery produces one occurrence and one "
                      "accepted Work identity. (Same final state as the fault-free run of the same scenario, "
                      "required exactly when the model ends both timelines alike: a fault's recovery moves the server "
                      "clock by lease_seconds + 1, and where that carries a later step past a nominal instant both "
                      "outcomes are right; the case then reports it not compared, and model-agreement judges it.)")


def equivalence(picture: dict, baseline: dict) -> CheckResult:
    evidence = picture_differences(picture, baseline, ("faulted", "fault_free"))
    return CheckResult("crash-equivalence", EQUIVALENCE, not evidence, evidence, len(picture))


MODEL_AGREEMENT = rule_of("model-agreement", "Gate A as docs/protocol-notes.md reads the spec, replayed by "
                          "testhost/judge/gate_model.py over the same timeline (occurrences with kind, range and "
                          "state, Work states, lifecycle, suspension reason, generation, and where the cursor stands "
                          "on the active generation's grid)")


def model_agreement(picture: dict, model) -> CheckResult:
    """The final state against the independent model of Gate A run over the same timeline."""
    expected = model_picture(model)
    evidence = picture_differences(picture, expected, ("database", "model"))
    return CheckResult("model-agreement", MODEL_AGREEMENT, not evidence, evidence, len(expected))


HISTORY_ROWS = rule_of(
    "processor-history",
    "Clock or evaluator mismatches suspend before target acceptance; preserve their durable evidence and "
    "create a new Schedule identity after resolving the cause. (The processor writes one schedule_history "
    "row `suspended` with detail.reason in the transaction that suspends, and one `recovery-skipped` with "
    "detail.first_nominal_utc and detail.last_nominal_utc in the transaction that skips a recovery range; "
    "other history rows are free. A `clock-anomaly` suspension's detail also holds cursor_utc, the unchanged "
    "cursor as an RFC 3339 instant.)")
PROCESSOR_EVENTS = ("suspended", "recovery-skipped")


def _history_event(row: dict) -> tuple:
    detail = row["detail"] or {}
    if row["event"] == "suspended":
        return "suspended", detail.get("reason")
    return "recovery-skipped", _instant_or_text(detail.get("first_nominal_utc")), \
        _instant_or_text(detail.get("last_nominal_utc"))


def _instant_or_text(value: Any) -> Any:
    try:
        return instant_text(parse_instant(value))
    except (AttributeError, TypeError, ValueError):
        return value


def history_agreement(state: StoreState, schedule_ids: dict[str, Any], model) -> CheckResult:
    """The processor's history rows per schedule, in order, against the events the model says it must write."""
    evidence = []
    rows = 0
    for name, schedule_id in sorted(schedule_ids.items()):
        schedule = model.schedules.get(name)
        expected = [e if e[0] == "suspended" else (e[0], instant_text(e[1]), instant_text(e[2]))
                    for e in (schedule.events if schedule else [])]
        written = sorted((h for h in state.history if h["schedule_id"] == schedule_id and h["event"] in PROCESSOR_EVENTS),
                         key=lambda h: h["recorded_at_utc"])
        rows += len(written)
        got = [_history_event(h) for h in written]
        if got != expected:
            evidence.append({"schedule": name, "history": got, "model": expected})
        evidence += [{"schedule": name, "clock_anomaly_evidence_without_cursor_utc": h} for h in written
                     if is_clock_anomaly(h) and recorded_cursor(h) is None]
    return CheckResult("processor-history", HISTORY_ROWS, not evidence, evidence, rows)
