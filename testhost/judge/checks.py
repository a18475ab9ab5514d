"""The checks: universal invariants of Gate A over the normative tables, each naming the spec rule it
guards, plus the scenario's own expectations and crash equivalence. Independent of any implementation."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Callable

from barriers.protocol import problem_name

from .identity import expected_work, instant_text
from .state import StoreState

TERMINAL = {"succeeded", "failed", "canceled"}
GATE_A_STATES = {"pending", "materialized", "superseded"}


@dataclass
class CheckResult:
    name: str
    rule: str
    ok: bool
    evidence: list[Any] = field(default_factory=list)
    rows: int = 0  # how many rows the check examined
    # Why the check was not applied to this case (it then neither passed nor failed; `ok` stays true so that
    # no verdict counts it as a failure, and every renderer shows it as "not compared").
    skipped: str | None = None
    # A reference-choice rule the implementation does otherwise: `ok` is true and this says how it differs.
    differs: str | None = None
    # A failure of a rule changed after the contract the implementation targets: which change, what to do.
    changed: str | None = None

    def to_json(self) -> dict:
        found = {"name": self.name, "rule": self.rule, "ok": self.ok, "rows": self.rows,
                 "evidence": [_jsonable(e) for e in self.evidence]}
        for key in ("skipped", "differs", "changed"):
            if getattr(self, key) is not None:
                found[key] = getattr(self, key)
        return found


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def _occurrence_key(o: dict) -> tuple:
    return (o["scope_id"], o["schedule_id"], o["generation"], o["occurrence_kind"], o["first_nominal_utc"])


# Every check by the name its results carry, with the rule its failure names: PROTOCOL.md renders this registry,
# so an outside team reads what certification enforces, and a test keeps every name used here on that page.
CHECKS: dict[str, str] = {}
# The modules that register rules, in the order PROTOCOL.md lists them: whichever of them is imported first, the
# registry keeps this order (and, within a module, the order of its registrations).
RULE_MODULES = ("testhost.judge.checks", "testhost.judge.commands", "testhost.case.barrier_facts",
                "testhost.faults.cancel_pass", "testhost.judge.bridge_role")
_RULE_PLACES: dict[str, tuple[int, int]] = {}


def rule_of(name: str, rule: str) -> str:
    """Register a check's rule under its name; returns the rule."""
    module = sys._getframe(1).f_globals.get("__name__", "")
    rank = RULE_MODULES.index(module) if module in RULE_MODULES else len(RULE_MODULES)
    _RULE_PLACES.setdefault(name, (rank, len(_RULE_PLACES)))
    CHECKS[name] = rule
    ordered = sorted(CHECKS.items(), key=lambda item: _RULE_PLACES[item[0]])
    CHECKS.clear()
    CHECKS.update(ordered)
    return rule


Check = Callable[[StoreState], CheckResult]
INVARIANTS: list[tuple[str, str, Check]] = []
# What rows each invariant examines, so a run can tell a vacuous pass: a check over zero rows where the
# scenario promised some. Checks that apply only to some timelines (suspensions, fences) examine None.
EXAMINES: dict[str, str | None] = {}


def invariant(name: str, rule: str, examines: str | None = None):
    def register(fn: Callable[[StoreState], tuple[list, int]]) -> Callable:
        def run(state: StoreState) -> CheckResult:
            evidence, rows = fn(state)
            return CheckResult(name, rule, not evidence, evidence, rows)
        INVARIANTS.append((name, rule_of(name, rule), run))
        EXAMINES[name] = examines
        return fn
    return register


@invariant("one-occurrence-per-identity",
           "An occurrence identity is stable across processor retries: (scope_id, schedule_id, generation, kind, "
           "first_nominal_utc).", examines="occurrences")
def _one_occurrence(state: StoreState):
    seen: dict[tuple, dict] = {}
    evidence = []
    for o in state.occurrences:
        if _occurrence_key(o) in seen:
            evidence.append({"duplicate": o, "first": seen[_occurrence_key(o)]})
        seen[_occurrence_key(o)] = o
    return evidence, len(state.occurrences)


@invariant("instant-decided-once",
           "It writes the occurrence disposition and cursor movement in one scoped transaction. (So no nominal "
           "instant of a generation is decided twice: occurrence ranges never overlap.)", examines="occurrences")
def _decided_once(state: StoreState):
    evidence = []
    by_generation: dict = {}
    for o in state.occurrences:
        by_generation.setdefault((o["schedule_id"], o["generation"]), []).append(o)
    for occs in by_generation.values():
        ordered = sorted(occs, key=lambda o: (o["first_nominal_utc"], o["last_nominal_utc"]))
        for a, b in zip(ordered, ordered[1:]):
            if b["first_nominal_utc"] <= a["last_nominal_utc"]:
                evidence.append({"overlapping_ranges": [a, b]})
    return evidence, len(state.occurrences)


@invariant("one-work-per-materialized-occurrence",
           "A future proof must show that recovery produces one occurrence and one accepted Work identity.",
           examines="occurrences")
def _one_work(state: StoreState):
    work = state.work_by_id()
    evidence = []
    linked: dict = {}
    for o in state.occurrences:
        if o["state"] == "materialized":
            if o["work_id"] not in work:
                evidence.append({"materialized_without_work": o})
            if o["work_id"] in linked:
                evidence.append({"work_linked_twice": [linked[o["work_id"]], o]})
            linked[o["work_id"]] = o
        elif o["work_id"] is not None:
            evidence.append({"unmaterialized_with_link": o})
    for w in state.work:
        if (w["idempotency_key"].startswith("schedule-occurrence/") and w["work_id"] not in linked
                and w["work_id"] not in state.planted):
            evidence.append({"orphan_work": w})
    return evidence, len(state.occurrences) + len(state.work)


@invariant("deterministic-work-identity",
           "It uses a deterministic target command, activity, Work ID, and idempotency identity derived from the "
           "immutable occurrence.", examines="materialized")
def _deterministic(state: StoreState):
    work = state.work_by_id()
    evidence = []
    rows = 0
    for o in state.occurrences:
        if o["state"] != "materialized":
            continue
        rows += 1
        generation = state.generation(o["schedule_id"], o["generation"])
        want = expected_work(o["scope_id"], o["schedule_id"], o["generation"], o["occurrence_kind"],
                             o["first_nominal_utc"], generation["target_command"])
        have = work.get(o["work_id"])
        got = {k: (have or {}).get(k) for k in want}
        if got != want:
            evidence.append({"occurrence": _occurrence_key(o), "expected": want, "work_row": got})
    return evidence, rows


@invariant("link-compare-or-return",
           "The occurrence link is compare-or-return: if no link exists, write the exact accepted Work identity and "
           "materialized state; otherwise return the stored tuple only when it matches exactly. (The link, the Work "
           "under its key and the occurrence's own identity agree; a foreign Work is never linked.)",
           examines="materialized")
def _links(state: StoreState):
    work = state.work_by_id()
    evidence = []
    rows = 0
    for o in state.occurrences:
        if o["work_id"] is None:
            continue
        rows += 1
        w = work.get(o["work_id"], {})
        link = (o["work_id"], o["work_idempotency_key"], o["work_command"], o["work_activity"])
        row = (w.get("work_id"), w.get("idempotency_key"), w.get("command"), w.get("activity"))
        under_key = next(((x["work_id"], x["idempotency_key"], x["command"], x["activity"]) for x in state.work
                          if x["scope_id"] == o["scope_id"] and x["idempotency_key"] == o["work_idempotency_key"]),
                         None)
        if link != row or link != under_key or o["state"] != "materialized" or o["work_id"] in state.planted:
            evidence.append({"occurrence": _occurrence_key(o), "link": link, "work_row": row,
                             "work_under_its_key": under_key, "state": o["state"]})
    return evidence, rows


@invariant("cursor-within-decisions-and-server-time",
           "The cursor is a durable UTC high-water mark.", examines="definitions")
def _cursor(state: StoreState):
    evidence = []
    for d in state.definitions:
        decided = [o["last_nominal_utc"] for o in state.occurrences_of(d["schedule_id"])]
        if decided and d["cursor_utc"] < max(decided):
            evidence.append({"cursor_behind_a_decision": d, "latest_decided_instant": max(decided)})
        if d["cursor_utc"] > state.now:
            evidence.append({"cursor_past_server_time": d, "server_now": state.now})
    return evidence, len(state.definitions)


@invariant("at-most-one-pending-coalesced",
           "Subsequent overlapping nominal instants are represented by at most one pending coalesced occurrence.",
           examines="occurrences")
def _one_coalesced(state: StoreState):
    pending: dict = {}
    for o in state.occurrences:
        if o["occurrence_kind"] == "coalesced" and o["state"] == "pending":
            pending.setdefault(o["schedule_id"], []).append(o)
    return [{"pending_coalesced": occs} for occs in pending.values() if len(occs) > 1], len(state.occurrences)


@invariant("queue-one-slot",
           "For the default QueueOne plus RunOnce policy, a nonterminal target occupies the Schedule-wide slot. "
           "Retries, suspended Work, and any still-nonterminal Work do not release the slot.", examines="materialized")
def _slot(state: StoreState):
    work = state.work_by_id()
    evidence = []
    by_schedule: dict = {}
    for o in state.occurrences:
        if o["state"] == "materialized":
            by_schedule.setdefault(o["schedule_id"], []).append(o)
    for occs in by_schedule.values():
        # Slot order is bridge order (generation, then first instant), not the server clock, which may go back.
        occs.sort(key=lambda o: (o["generation"], o["first_nominal_utc"]))
        open_ = [o for o in occs if work.get(o["work_id"], {}).get("state") not in TERMINAL]
        if len(open_) > 1:
            evidence.append({"nonterminal_work_in_one_slot": open_})
        for earlier, later in zip(occs, occs[1:]):
            done = work.get(earlier["work_id"], {}).get("terminal_at_utc")
            if done is None or later["materialized_at_utc"] < done:
                evidence.append({"materialized_while_slot_held": later, "slot_holder": earlier,
                                 "holder_terminal_at": done})
    return evidence, sum(len(v) for v in by_schedule.values())


@invariant("nothing-materialized-for-superseded-or-suspended",
           "A generation update supersedes old unstarted occurrences, but an already started old-generation target "
           "remains durable history and continues to occupy its slot.", examines="materialized")
def _superseded(state: StoreState):
    evidence = []
    rows = 0
    for o in state.occurrences:
        if o["state"] != "materialized":
            continue
        rows += 1
        newer = state.generation(o["schedule_id"], o["generation"] + 1)
        if newer is not None and o["materialized_at_utc"] >= newer["accepted_at_utc"]:
            evidence.append({"materialized_after_its_generation_was_replaced": o,
                             "next_generation_accepted_at": newer["accepted_at_utc"]})
    for d in state.definitions:
        if d["lifecycle_state"] != "suspended":
            continue
        since = max((h["recorded_at_utc"] for h in state.history
                     if h["schedule_id"] == d["schedule_id"] and h["event"] == "suspended"), default=None)
        late = [o for o in state.occurrences_of(d["schedule_id"])
                if since and o["materialized_at_utc"] and o["materialized_at_utc"] > since]
        if late:
            evidence.append({"materialized_while_suspended": late, "suspended_at": since})
    return evidence, rows


@invariant("gate-a-writes-three-states",
           "Gate A writes only pending, materialized, and superseded; it does not claim individual occurrence rows.",
           examines="occurrences")
def _states(state: StoreState):
    return [{"state_outside_gate_a": o} for o in state.occurrences if o["state"] not in GATE_A_STATES], \
        len(state.occurrences)


@invariant("suspension-keeps-the-cursor",
           "An anomalously large forward cutoff suspends the Schedule without moving its cursor.")
def _suspension_cursor(state: StoreState):
    evidence = []
    rows = 0
    # Only a schedule's latest suspension stands: an update repairs an anomaly and moves the cursor lawfully, and a
    # later suspension (found by explore: anomaly, update, then a scope-generation fence) records a cursor of its own.
    latest = {h["schedule_id"]: h for h in state.history if h["event"] == "suspended"}
    for h in latest.values():
        if h["detail"].get("reason") == "clock-anomaly":
            rows += 1
            d = state.definition(h["schedule_id"])
            try:
                recorded = datetime.fromisoformat(h["detail"]["cursor_utc"].replace("Z", "+00:00"))
            except (KeyError, AttributeError, TypeError, ValueError):
                continue  # evidence without its cursor: `processor-history` names it
            if d["lifecycle_state"] == "suspended" and d["cursor_utc"] != recorded:
                evidence.append({"cursor_moved_while_suspended": d, "cursor_at_suspension": recorded})
    return evidence, rows


@invariant("due-instants-decided",
           "A processor evaluates nominal instants in (cursor_utc, cutoff_utc], where the cutoff comes from "
           "PostgreSQL. (After the final passes no instant at or before their server time is left undecided.)")
def _due_decided(state: StoreState):
    if state.drained_at is None:
        return [], 0
    evidence = []
    rows = 0
    for d in state.definitions:
        if d["lifecycle_state"] != "active":
            continue
        rows += 1
        g = state.generation(d["schedule_id"], d["active_generation"])
        left = model_timing(g).instants_between(d["cursor_utc"], state.drained_at)
        if left:
            evidence.append({"undecided_instants": [str(t) for t in left[:5]], "count": len(left),
                             "cursor_utc": d["cursor_utc"], "server_time_of_final_passes": state.drained_at,
                             "schedule_id": d["schedule_id"]})
    return evidence, rows


@invariant("anomaly-suspends",
           "An anomalously large forward cutoff suspends the Schedule without moving its cursor. (No occurrence "
           "or skipped recovery is decided later than its generation's safety window after its first instant.)",
           examines="occurrences")
def _anomaly(state: StoreState):
    evidence = []
    decided = [(o, o["first_nominal_utc"], o["decided_at_utc"]) for o in state.occurrences]
    decided += [(h, _instant(h["detail"]["first_nominal_utc"]), h["recorded_at_utc"]) for h in state.history
                if h["event"] == "recovery-skipped" and "first_nominal_utc" in (h["detail"] or {})]
    for row, first, at in decided:
        g = state.generation(row["schedule_id"], row["generation"])
        window = timedelta(microseconds=g["safety_window_us"])
        if at - first > window:
            evidence.append({"decided_past_the_safety_window": row, "lateness_s": (at - first).total_seconds(),
                             "safety_window_s": window.total_seconds()})
    return evidence, len(decided)


@invariant("fence-before-cursor",
           "A mismatch suspends the Schedule before it moves the cursor or accepts Work. (Nothing is decided in "
           "the transaction that suspends for a fence.)")
def _fence_first(state: StoreState):
    evidence = []
    rows = 0
    for h in state.history:
        if h["event"] != "suspended" or (h["detail"] or {}).get("reason") not in ("runtime-epoch", "scope-generation"):
            continue
        rows += 1
        same = [o for o in state.occurrences_of(h["schedule_id"])
                if o["decided_at_utc"] == h["recorded_at_utc"] or o["materialized_at_utc"] == h["recorded_at_utc"]]
        if same:
            evidence.append({"suspension": h, "decided_in_the_suspending_transaction": same})
    return evidence, rows


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def model_timing(g: dict):
    """The generation as the independent model's time rule (no implementation code)."""
    from .model import Generation
    return Generation(g["generation"], g["schedule_kind"], g["accepted_at_utc"], at=g["at_utc"],
                      after=timedelta(microseconds=g["after_us"]) if g["after_us"] is not None else None,
                      every=timedelta(microseconds=g["every_us"]) if g["every_us"] is not None else None,
                      anchor=g["anchor_utc"])


@invariant("recovered-nothing-due",
           "The next bounded Schedule pass materializes the coalesced occurrence without waiting for another "
           "interval. (After recovery, fault-free passes ran until nothing is due.)")
def _nothing_due(state: StoreState):
    evidence = []
    for row in state.dispatch:
        if row["lease_state"] != "ready":
            evidence.append({"lease_still_held": row})
        elif row["claimable_at_utc"] is not None and row["claimable_at_utc"] <= state.now:
            evidence.append({"still_due": row, "server_now": state.now})
    return evidence, len(state.dispatch)


def universal(state: StoreState) -> list[CheckResult]:
    return [run(state) for _, _, run in INVARIANTS]


def promised(expect: dict[str, dict]) -> set[str]:
    """What rows a scenario's expectations promise the final state holds."""
    kinds = {"definitions"} if expect else set()
    for want in expect.values():
        occurrences = want.get("occurrences", [])
        if occurrences:
            kinds.add("occurrences")
        if want.get("works", 0) > 0 or any(o.get("state") == "materialized" for o in occurrences):
            kinds.add("materialized")
    return kinds


NO_VACUOUS = rule_of("no-vacuous-checks", "harness: a check that ran over zero rows where the scenario promised "
                     "some makes the run fail")
PLANNED_FAULT_FIRED = rule_of("planned-fault-fired", "harness: a planned barrier or fault that never fired makes the "
                              "run fail (report every barrier your code reaches, with its exact name)")
FATE_ABORTED = ("Database timeouts, disconnects, and SQLSTATE failures abort the transaction and require a bounded "
                "retry only after rollback.")
FATE_COMMITTED = ("A rollback leaves neither durable fact; a retry sees the same occurrence identity and must return "
                  "the original target link rather than enqueue another Work.")
rule_of("transaction-fate", f"{FATE_ABORTED} / {FATE_COMMITTED} (After kill, disconnect or stall at a before-commit "
        "barrier the server aborted the open transaction; after lost-commit-reply or pause it committed it: the "
        "verifier reads the fate of its xid.)")


def vacuity(checks: list[CheckResult], expect: dict[str, dict]) -> CheckResult:
    """A check that examined zero rows of a kind the scenario promised proves nothing: the run fails."""
    kinds = promised(expect)
    evidence = [{"check": c.name, "examined_rows": c.rows, "scenario_promised": EXAMINES[c.name]}
                for c in checks if EXAMINES.get(c.name) in kinds and c.rows == 0]
    return CheckResult("no-vacuous-checks", NO_VACUOUS, not evidence, evidence, len(checks))


# -- scenario expectations and crash equivalence --------------------------------------------------------

def _reference_instant(generation: dict) -> datetime:
    kind = generation["schedule_kind"]
    return {"every": generation["anchor_utc"], "at": generation["at_utc"],
            "after": generation["accepted_at_utc"]}[kind]


def normalize(state: StoreState, schedule_ids: dict[str, Any]) -> dict[str, Any]:
    """A run-independent picture per schedule name: times relative to each generation's own reference, and
    the cursor as the last instant at or before it."""
    from .model import cursor_instant
    picture = {}
    work = state.work_by_id()
    for name, schedule_id in sorted(schedule_ids.items()):
        d = state.definition(schedule_id)
        if d is None:
            picture[name] = None
            continue
        occs = []
        for o in state.occurrences_of(schedule_id):
            ref = _reference_instant(state.generation(schedule_id, o["generation"]))
            occs.append((o["generation"], o["occurrence_kind"], (o["first_nominal_utc"] - ref) // timedelta(microseconds=1),
                         (o["last_nominal_utc"] - ref) // timedelta(microseconds=1), o["state"],
                         work.get(o["work_id"], {}).get("state")))
        active = state.generation(schedule_id, d["active_generation"])
        references = {g["generation"]: instant_text(_reference_instant(g)) for g in state.generations
                      if g["schedule_id"] == schedule_id}
        picture[name] = {"lifecycle": d["lifecycle_state"], "suspension": d["suspension_reason"],
                         "generation": d["active_generation"],
                         "cursor_instant": cursor_instant(model_timing(active), d["cursor_utc"]),
                         "occurrences": sorted(occs), "references": references}
    return picture


def comparable(entry: dict | None) -> dict | None:
    """A picture entry without its run's own reference instants (which differ from run to run for After)."""
    return None if entry is None else {k: v for k, v in entry.items() if k != "references"}


def readable(entry: dict | None) -> dict | None:
    """A picture entry in the protocol's own units: instants as RFC 3339 times, from the entry's own run's
    generation references (an offset from the reference where that is unknown)."""
    if entry is None:
        return None
    references = {int(g): _instant(t) for g, t in (entry.get("references") or {}).items()}

    def at(generation: int, offset_us: int | None) -> str | None:
        if offset_us is None:
            return None
        if generation not in references:
            return f"{offset_us / 1e6:+g}s from generation {generation}'s reference"
        return instant_text(references[generation] + timedelta(microseconds=offset_us))

    return {"lifecycle": entry["lifecycle"], "suspension": entry["suspension"], "generation": entry["generation"],
            "cursor_at_or_after": at(entry["generation"], entry["cursor_instant"]),
            "occurrences": [{"generation": g, "kind": kind, "first_nominal_utc": at(g, first),
                             "last_nominal_utc": at(g, last), "state": state, "work": work}
                            for g, kind, first, last, state, work in entry["occurrences"]]}


def _differences(a: dict | None, b: dict | None) -> list[str]:
    a, b = comparable(a) or {}, comparable(b) or {}
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


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
            got = sorted((h["generation"], _instant(h["detail"]["first_nominal_utc"]),
                          _instant(h["detail"]["last_nominal_utc"]), h["detail"]["instants"])
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


def picture_differences(ours: dict, theirs: dict, labels: tuple[str, str]) -> list[dict]:
    """Per schedule whose entries differ: which fields, and both entries in the protocol's units."""
    return [{"schedule": name, "differs_in": _differences(ours.get(name), theirs.get(name)),
             labels[0]: readable(ours.get(name)), labels[1]: readable(theirs.get(name))}
            for name in sorted(set(ours) | set(theirs)) if comparable(ours.get(name)) != comparable(theirs.get(name))]


def equivalence(picture: dict, baseline: dict) -> CheckResult:
    evidence = picture_differences(picture, baseline, ("faulted", "fault_free"))
    return CheckResult("crash-equivalence", EQUIVALENCE, not evidence, evidence, len(picture))


MODEL_AGREEMENT = rule_of("model-agreement", "Gate A as docs/protocol-notes.md reads the spec, replayed by "
                          "testhost/judge/model.py over the same timeline (occurrences with kind, range and state, Work "
                          "states, lifecycle, suspension reason, generation, and where the cursor stands on the "
                          "active generation's grid)")


def model_agreement(picture: dict, model) -> CheckResult:
    """The final state against the independent model of Gate A run over the same timeline."""
    from .model import picture as model_picture
    expected = model_picture(model)
    evidence = picture_differences(picture, expected, ("database", "model"))
    return CheckResult("model-agreement", MODEL_AGREEMENT, not evidence, evidence, len(expected))


CLIENT_RULE = rule_of("client-outcomes", "Schedule API validation and domain conflicts return durable problem "
                      "results. (A client step the scenario expects refused answers `fail` with a problem whose "
                      "type ends, as its last segment, in the expected name of PROTOCOL.md's problem types, and "
                      "changes no row of the tables a command writes, schedule_commands included; any other client "
                      "step answers `ok`.)")
rule_of("step-outcomes", "the spec sentence the scenario step cites (a step that expects an answer: a refused lease, "
        "a refused release): the answer the step expects, and a refusal changes nothing")


def client_outcomes(outcomes: list) -> list[CheckResult]:
    """Every step with an expected answer answered as the scenario says: ok, or refused with the expected
    problem type, changing no row where the step says a refusal must change nothing. Steps that cite a spec
    rule are judged under it; the rest under the problem-result rule."""
    groups: dict[str, tuple[list, int]] = {}
    for step, response, changed in outcomes:
        rule = step.args.get("rule", CLIENT_RULE)
        evidence, rows = groups.get(rule, ([], 0))
        wanted = step.expected_outcome
        if wanted == "any" and not changed:
            continue  # either answer is lawful; the model took the step only if it was applied
        problem_type = (response.problem or {}).get("type", "")
        if response.outcome != wanted or ("problem" in step.args and problem_name(problem_type) != step.args["problem"]):
            evidence.append({"step": step.index + 1, "op": step.op, "expected": wanted,
                             "expected_problem": step.args.get("problem"), "outcome": response.outcome,
                             "problem": response.problem, "error": response.error})
        if changed:
            evidence.append({"step": step.index + 1, "op": step.op, "refused_but_changed": changed})
        groups[rule] = (evidence, rows + 1)
    return [CheckResult("client-outcomes" if rule == CLIENT_RULE else "step-outcomes", rule, not evidence, evidence,
                        rows) for rule, (evidence, rows) in groups.items()]


def _consecutive(observations: list[tuple[int, dict]]):
    """Pairs of states seen after consecutive steps, but none across a restore: a backup that comes back puts
    older rows back, which is no move of the timeline the checks judge."""
    return [(a, b) for a, b in zip(observations, observations[1:]) if not b[1].get("restored")]


COALESCED_FORWARD = rule_of("coalesced-range-forward", "A pending coalesced row may only move its last nominal "
                            "instant forward.")


def coalesced_forward(observations: list[tuple[int, dict]]) -> CheckResult:
    """Across the states seen after each step, a pending coalesced row keeps its first instant and its last
    instant never moves back, until it is materialized or superseded."""
    evidence = []
    rows = 0
    for (step_a, seen_a), (step_b, seen_b) in _consecutive(observations):
        for key, row in seen_a["pending"].items():
            rows += 1
            later = seen_b["all"].get(key)
            if later is None:
                evidence.append({"after_step": step_a + 1, "pending_coalesced": row, "at_step": step_b + 1,
                                 "gone": True, "pending_coalesced_now": list(seen_b["pending"].values())})
            elif later["last_nominal_utc"] < row["last_nominal_utc"]:
                evidence.append({"after_step": step_a + 1, "pending_coalesced": row, "at_step": step_b + 1,
                                 "moved_back_to": later})
    return CheckResult("coalesced-range-forward", COALESCED_FORWARD, not evidence, evidence, rows)


ONE_COALESCED_SEEN = rule_of("at-most-one-pending-coalesced-at-every-step", "Subsequent overlapping nominal instants "
                             "are represented by at most one pending coalesced occurrence.")


def one_pending_coalesced_seen(observations: list[tuple[int, dict]]) -> CheckResult:
    """In the state seen after every step (not only the final one), at most one pending coalesced occurrence
    per schedule and generation."""
    evidence = []
    rows = 0
    for step, seen in observations:
        by_generation: dict = {}
        for key, row in seen["pending"].items():
            rows += 1
            by_generation.setdefault(key[:2], []).append(row)
        evidence += [{"after_step": step + 1, "pending_coalesced": occs}
                     for occs in by_generation.values() if len(occs) > 1]
    return CheckResult("at-most-one-pending-coalesced-at-every-step", ONE_COALESCED_SEEN, not evidence, evidence, rows)


LATE_WRITES = rule_of("late-writes-fenced", "A trusted dispatcher claims one payload-free dispatch queue row under a "
                      "lease and commits before accessing scoped data. (A lease that expired and was taken over "
                      "fences every later write of its holder.)")


def late_writes(before: dict, after: dict, context: dict) -> CheckResult:
    """A processor resumed after another took its expired lease over writes nothing more for that schedule."""
    changed = {table: {"before": before[table], "after": after[table]} for table in before
               if before[table] != after[table]}
    evidence = [{"schedule_id": context.get("schedule_id"), "barrier": context.get("barrier"),
                 "instance": context.get("instance"), "changed": changed}] if changed else []
    # rows: the schedule's rows held still (definition, dispatch rows, occurrences, the history count)
    return CheckResult("late-writes-fenced", LATE_WRITES, not evidence, evidence,
                       sum(len(rows) for rows in before.values()))


STALL_TOOK_OVER = rule_of(
    "stall-took-over",
    "harness: a planned stall happens or the case fails. (At the barrier the transaction holding the schedule's "
    "dispatch row has its server session ended, and another processor then takes the lease over: the dispatch "
    "row's lease generation advances. A barrier whose context names no schedule_id, or where no transaction "
    "holds that row, cannot be stalled.)")


def stall_took_over(details: dict) -> CheckResult | None:
    """Whether a planned stall really ended the open transaction's session and saw the lease taken over (None: the
    fault was not a stall)."""
    stall = details.get("stall")
    if stall is None:
        return None
    evidence = []
    if stall.get("ended_backend") is None:
        evidence.append({"session_not_ended": stall.get("why_not", "pg_terminate_backend found no such backend")})
    elif not stall.get("took_over"):
        evidence.append({"lease_not_taken_over": stall.get("lease_generation"),
                         "takeover_passes": details.get("takeover_passes")})
    return CheckResult("stall-took-over", STALL_TOOK_OVER, not evidence, [{**e, **{"stall": stall}} for e in evidence], 1)


CRASH_DURABILITY = rule_of(
    "committed-survives-crash",
    "What was committed before the crash stays. (db-crash: every row of the protocol's tables the host read just "
    "before PostgreSQL was killed, while you waited at the barrier, is there after the restart, unchanged, and no "
    "row is new: a commit made asynchronously, synchronous_commit off, is lost here. Not compared while another "
    "processor runs beside the crashed one.)")


def crash_durability(details: dict) -> CheckResult | None:
    """Whether every committed row survived the db-crash (None: the fault was not a db-crash)."""
    durability = details.get("crash_durability")
    if durability is None:
        return None
    if "not_compared" in durability:
        return CheckResult("committed-survives-crash", CRASH_DURABILITY, True, [durability], 0)
    changed = durability["changed"]
    evidence = [{"table": table, **rows} for table, rows in changed.items()]
    return CheckResult("committed-survives-crash", CRASH_DURABILITY, not evidence, evidence, durability["rows"])


OUTCOME_HONESTY = rule_of("outcome-honesty", "`fail` tells the host nothing was applied: an operation answers `fail` "
                          "only when none of its transactions committed. (Seen by the verifier: an after-commit barrier "
                          "the implementation reported while the request ran, or the server's fate `committed` of the "
                          "transaction open at the faulted barrier.)")


def outcome_honesty(answers: list[dict], fate: str | None) -> CheckResult:
    """Every answer of the implementation against the transaction fates the verifier knows: a `fail` for a request
    that committed anything (the claim's lease included) is a wrong `fail`."""
    evidence = []
    for answer in answers:
        if answer["outcome"] != "fail":
            continue
        committed = list(answer["committed"])
        if answer["faulted"] and fate == "committed":
            committed.append(f"{answer['faulted']} (the server committed the transaction open there)")
        if committed:
            evidence.append({"request": answer["op"], "instance": answer["instance"], "outcome": "fail",
                             "committed_during_the_request": committed, "error": answer.get("error"),
                             "problem": answer.get("problem")})
    return CheckResult("outcome-honesty", OUTCOME_HONESTY, not evidence, evidence, len(answers))


CLIENT_DEADLINE = rule_of(
    "client-deadline",
    "A lost COMMIT reply must turn into an error within it, not a hang. (Within CRASHPROOF_DEADLINE_S the "
    "implementation gives up on the round trip and closes its connection; the host holds the lost reply "
    "for the deadline plus a margin, and a connection still open then is a missing deadline.)")


def client_deadline(details: dict) -> CheckResult | None:
    """Whether the implementation abandoned a connection whose COMMIT reply was held lost (None: not held)."""
    if "deadline_s" not in details:
        return None
    kept = details.get("connection_kept_past_deadline_s")
    evidence = [] if kept is None else [{"reply_lost_for_s": kept, "connection_still_open": True,
                                         "deadline_s": details["deadline_s"],
                                         "margin_s": details["deadline_margin_s"]}]
    return CheckResult("client-deadline", CLIENT_DEADLINE, not evidence, evidence, 1)


IDLE_CURSOR = rule_of(
    "idle-pass-keeps-cursor",
    "reference: a pass with no instant due in (cursor_utc, cutoff_utc] leaves the cursor where it is; the cursor "
    "moves only in a decision that disposes of at least one due instant, to that decision's cutoff (protocol note "
    "24k: the contract also allows moving it to the cutoff, so a difference is reported and never fails. Seen on "
    "the raw cursor after every step.)")


def idle_cursor(observations: list[tuple[int, dict]]) -> CheckResult:
    """Between the states seen after consecutive steps, a cursor that moved while nothing was decided for its
    schedule (no occurrence added or extended, no recovery skipped, no new generation) moved on an idle pass."""
    evidence = []
    rows = 0
    for (step_a, seen_a), (step_b, seen_b) in _consecutive(observations):
        for schedule_id, before in seen_a.get("cursors", {}).items():
            after = seen_b.get("cursors", {}).get(schedule_id)
            if after is None:
                continue
            rows += 1
            decided = any(before[k] != after[k] for k in ("active_generation", "occurrences", "last_decided", "skipped"))
            if after["cursor_utc"] != before["cursor_utc"] and not decided:
                evidence.append({"schedule_id": schedule_id, "after_step": step_a + 1, "at_step": step_b + 1,
                                 "cursor_before": instant_text(before["cursor_utc"]),
                                 "cursor_after": instant_text(after["cursor_utc"]), "decided_meanwhile": "nothing"})
    return CheckResult("idle-pass-keeps-cursor", IDLE_CURSOR, not evidence, evidence, rows)


HIGH_WATER = rule_of(
    "cursor-never-moves-back",
    "The cursor is a durable UTC high-water mark. (Every read of a schedule's cursor_utc in a case, in the state "
    "after each step, at each processor barrier the host reads and in the final state, is at or after the highest "
    "read before it: no pass, update, release or recovery moves it back, not an update that commits while the server "
    "clock stands behind the cursor (docs/protocol-notes.md, 8: it moves the cursor to max(cursor, accepted_at_utc)) "
    "nor one that commits exactly on it. A restore drill, which puts an older backup back, starts the reads afresh.)")


def cursor_high_water(reads: list[dict]) -> CheckResult:
    """Across every read of the cursors, in the order made ({"at", "cursors": {schedule_id: cursor}, "restored"}):
    a cursor read lower than the highest read of it before."""
    evidence = []
    rows = 0
    highest: dict[str, tuple[datetime, str]] = {}
    for read in reads:
        if read.get("restored"):
            highest = {}
        for schedule_id, cursor in read["cursors"].items():
            if cursor is None:
                continue
            rows += 1
            mark = highest.get(schedule_id)
            if mark is not None and cursor < mark[0]:
                evidence.append({"schedule_id": schedule_id, "read": read["at"], "cursor_utc": instant_text(cursor),
                                 "highest_read_before": instant_text(mark[0]), "read_there": mark[1],
                                 "moved_back_by_s": (mark[0] - cursor).total_seconds()})
            elif mark is None or cursor > mark[0]:
                highest[schedule_id] = (cursor, read["at"])
    return CheckResult("cursor-never-moves-back", HIGH_WATER, not evidence, evidence, rows)


DUE_AT_PASS = rule_of(
    "pass-decides-what-was-due",
    "A processor evaluates nominal instants in (cursor_utc, cutoff_utc], where the cutoff comes from PostgreSQL. "
    "(A pass decides what is due when it runs, the end of its range included: once a `process` or `race` step is "
    "over, with no fault in the case yet, every schedule whose dispatch row it claimed and that is still active in "
    "the same generation has no nominal instant left in (cursor_utc, T], T the server time read after the step "
    "before. The cutoff is at or after T; on a clock frozen for the step it is T, so an instant exactly at the "
    "cutoff is that pass's to decide, not a later one's.)")


def pass_decides_due(observations: list[tuple[int, dict]], generations: dict) -> CheckResult:
    """Per clean pass step: the schedules it claimed (their lease generation moved) against the instants due at the
    server time seen after the step before. `generations`: (schedule_id text, number) -> generation row."""
    evidence = []
    rows = 0
    for (step_a, seen_a), (step_b, seen_b) in _consecutive(observations):
        began = (seen_a.get("processor") or {}).get("server_now")
        if not seen_b.get("clean_pass") or began is None:
            continue
        for schedule_id, before in seen_a.get("cursors", {}).items():
            after = seen_b.get("cursors", {}).get(schedule_id)
            if after is None or after.get("lease_generation") == before.get("lease_generation") \
                    or after["lifecycle_state"] != "active" or after["active_generation"] != before["active_generation"]:
                continue
            g = generations.get((schedule_id, after["active_generation"]))
            if g is None:
                continue
            rows += 1
            left = model_timing(g).instants_between(after["cursor_utc"], began)
            if left:
                evidence.append({"schedule_id": schedule_id, "step": step_b + 1, "claimed_by_the_pass": True,
                                 "server_time_before_the_pass": instant_text(began),
                                 "cursor_after_the_pass": instant_text(after["cursor_utc"]),
                                 "left_undecided": [instant_text(t) for t in left[:5]], "count": len(left)})
    return CheckResult("pass-decides-what-was-due", DUE_AT_PASS, not evidence, evidence, rows)


NEVER_REWRITTEN = rule_of(
    "generations-never-rewritten",
    "Updating an active or suspended definition creates a new generation and never rewrites its target snapshot. "
    "(Every schedule_generations row, its target snapshot and the rest of the definition it froze, reads the same in "
    "the state after every step and in the final state as when it was first read, and is never gone: an update only "
    "adds a row. A restore drill, which puts an older backup back, starts the reads afresh.)")


def generations_unchanged(observations: list[tuple[int, dict]], final: StoreState | None = None) -> CheckResult:
    """Each generation row against its first read, in the states seen after each step and the final state."""
    reads = [(step + 1, seen.get("generations"), seen.get("restored")) for step, seen in observations]
    if final is not None:
        reads.append(("final", {(str(g["schedule_id"]), g["generation"]): dict(g) for g in final.generations}, False))
    first: dict[tuple[str, int], tuple[Any, dict]] = {}
    evidence = []
    rows = 0
    for step, generations, restored in reads:
        if generations is None:
            continue
        if restored:
            first = {}
        for key, (seen_at, row) in first.items():
            rows += 1
            now = generations.get(key)
            if now is None:
                evidence.append({"schedule_id": key[0], "generation": key[1], "first_read_after_step": seen_at,
                                 "at_step": step, "gone": True})
            elif now != row:
                evidence.append({"schedule_id": key[0], "generation": key[1], "first_read_after_step": seen_at,
                                 "at_step": step, "rewritten": {c: [_seen_text(row.get(c)), _seen_text(now.get(c))]
                                                                for c in sorted(set(row) | set(now))
                                                                if row.get(c) != now.get(c)}})
        for key, row in generations.items():
            first.setdefault(key, (step, row))
    # Report each rewrite once: the first step that showed it.
    seen: set = set()
    evidence = [e for e in evidence if (e["schedule_id"], e["generation"]) not in seen
                and not seen.add((e["schedule_id"], e["generation"]))]
    return CheckResult("generations-never-rewritten", NEVER_REWRITTEN, not evidence, evidence, rows)


FENCE_SEEN = rule_of(
    "fence-before-cursor-at-every-step",
    "A mismatch suspends the Schedule before it moves the cursor or accepts Work. (Seen after every step: while "
    "the model holds a schedule suspended for a runtime-epoch or scope-generation fence, nothing is decided or "
    "linked for it and its cursor stays where it was.)")
FENCE_REASONS = ("runtime-epoch", "scope-generation")


def fence_seen(observations: list[tuple[int, dict]]) -> CheckResult:
    """Between the states seen after consecutive steps, a schedule the model holds fenced at the later one whose
    cursor, occurrences, skipped ranges or links changed acted past its fence (a missing suspension alone is
    `processor-history`'s and the model's to judge: a fault may delay the pass that suspends)."""
    evidence, rows = _acted_past_fences(_consecutive(observations))
    return CheckResult("fence-before-cursor-at-every-step", FENCE_SEEN, not evidence, evidence, rows)


def _acted_past_fences(pairs) -> tuple[list, int]:
    evidence = []
    rows = 0
    for (step_a, seen_a), (step_b, seen_b) in pairs:
        for schedule_id, reason in seen_b.get("fenced", {}).items():
            before = seen_a.get("cursors", {}).get(schedule_id)
            after = seen_b.get("cursors", {}).get(schedule_id)
            if before is None or after is None:
                continue
            rows += 1
            changed = [k for k in ("cursor_utc", "occurrences", "last_decided", "skipped", "linked")
                       if before.get(k) != after.get(k)]
            if changed:
                evidence.append({"schedule_id": schedule_id, "fence": reason, "after_step": step_a + 1,
                                 "at_step": step_b + 1, "changed": {k: [_seen_text(before.get(k)),
                                                                        _seen_text(after.get(k))] for k in changed}})
    return evidence, rows


def _seen_text(value: Any) -> Any:
    return instant_text(value) if isinstance(value, datetime) else value


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
        return instant_text(_instant(value))
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
                     if _history_event(h) == ("suspended", "clock-anomaly") and not _readable_cursor(h)]
    return CheckResult("processor-history", HISTORY_ROWS, not evidence, evidence, rows)


def _readable_cursor(row: dict) -> bool:
    """Whether a clock-anomaly suspension's detail holds the unchanged cursor as an RFC 3339 instant."""
    try:
        _instant((row["detail"] or {})["cursor_utc"])
        return True
    except (KeyError, AttributeError, TypeError, ValueError):
        return False


BESIDE_BARRIER = rule_of(
    "beside-barrier-reached",
    "harness: a step planned beside a held barrier (`during`) ran while the implementation was held there; in the "
    "fault-free run the barrier must be reached at the planned hit (a fault may stop the pass before it: the step "
    "then runs after the pass)")


def beside_barrier_reached(outcomes: list[dict], *, faulted: bool) -> CheckResult:
    """Every `during` step of the fault-free run met its barrier: otherwise it proved nothing about the order."""
    evidence = [] if faulted else [o for o in outcomes if o["outcome"] == "barrier-not-reached"]
    return CheckResult("beside-barrier-reached", BESIDE_BARRIER, not evidence, evidence, len(outcomes))


LOCKED_FENCE = rule_of(
    "fence-locked-beside-decision",
    "Before evaluating a due Schedule, the scoped processor compares its persisted runtime epoch and scope "
    "generation with the active store epoch and locked scope generation. (A scope-generation change that "
    "committed while a decision was held before its commit fences that decision: in that step nothing is "
    "decided or linked for a schedule the change fenced, and no cursor moves.)")


def fence_locked_beside(observations: list[tuple[int, dict]], outcomes: list[dict]) -> CheckResult | None:
    """For each `during` step that changed the scope generation while a decision was held: the state seen after
    that step against the one before it, for every schedule the model holds fenced (None: no such step)."""
    steps = {o["step"] - 1 for o in outcomes if o["op"] == "advance-scope-generation" and o["outcome"] == "committed"}
    if not steps:
        return None
    evidence, rows = _acted_past_fences([(a, b) for a, b in _consecutive(observations) if b[0] in steps])
    return CheckResult("fence-locked-beside-decision", LOCKED_FENCE, not evidence, evidence, rows)
PROCESS_COUNTS = rule_of(
    "process-counts",
    "An `ok` answer of `process-due` counts what its pass committed: each count it reports under a name of "
    "*Counts of a pass* equals what the verifier saw commit while the pass ran. (Read in the normative tables "
    "before and after each request; two racing processors' counts summed; a request during which a lost COMMIT "
    "reply or a pause fired, or any fault while two processors raced, is not compared.)")
# How the verifier sees each count of barriers/protocol.py COUNTS: a fact that only grows, so what committed in a
# window is after − before. A test keeps these names and the registry's the same.
COUNT_FACTS: dict[str, str] = {
    "claimed": "select coalesce(sum(lease_generation), 0) from appsurface_durable.schedule_dispatch",
    "occurrences": "select count(*) from appsurface_durable.schedule_occurrences "
                   "where occurrence_kind in ('nominal', 'recovery')",
    "materialized": "select count(*) from appsurface_durable.schedule_occurrences where work_id is not null",
    "suspended": "select count(*) from appsurface_durable.schedule_history where event = 'suspended'",
    "recovery_skipped": "select count(*) from appsurface_durable.schedule_history where event = 'recovery-skipped'",
}
# Faults after which the implementation cannot know what its pass committed (a COMMIT whose reply was lost), or
# after which another processor worked inside the window (the takeover during a pause).
UNCOUNTABLE_FAULTS = ("lost-commit-reply", "pause")


def counts_not_compared(window: dict) -> str | None:
    """Why a window's counts cannot be held to the facts, or None when they must agree."""
    if window.get("after") is None:
        return f"the verifier could not read the tables after the request: {window.get('unread')}"
    others = sorted({a["outcome"] for a in window["answers"] if a["outcome"] != "ok"})
    if others:
        return f"an answer was {', '.join(others)}, not ok"
    faults = sorted(set(window["faults"]) & set(UNCOUNTABLE_FAULTS))
    if faults:
        return f"a {', '.join(faults)} fault fired during the request"
    if window["faults"] and len(window["answers"]) > 1:
        # The fault waits for one processor at its barrier; the other may be inside a COMMIT the fault cut, whose
        # outcome it cannot know (and so, rightly, does not count).
        return f"a {', '.join(sorted(set(window['faults'])))} fault fired while two processors ran"
    return None


def process_counts(windows: list[dict]) -> CheckResult:
    """Each compared window: every registered count the answers reported (summed over racing processors) against
    what the facts moved by. A name no answer reports is not read; one that is not an integer is wrong."""
    evidence = []
    rows = 0
    for window in windows:
        if counts_not_compared(window):
            continue
        values = [a["value"] if isinstance(a["value"], dict) else {} for a in window["answers"]]
        rows += any(name in v for v in values for name in COUNT_FACTS)  # a window with nothing reported held nothing
        wrong = {}
        for name in COUNT_FACTS:
            reported = [v[name] for v in values if name in v]
            if not reported:
                continue
            seen = window["after"][name] - window["before"][name]
            if any(isinstance(r, bool) or not isinstance(r, int) for r in reported):
                wrong[name] = {"reported": reported, "seen": seen, "not_an_integer": True}
            elif len(reported) < len(values):
                wrong[name] = {"reported": reported, "seen": seen, "reported_by_only_some_of_the_racers": True}
            elif sum(reported) != seen:
                wrong[name] = {"reported": sum(reported), "seen": seen}
        if wrong:
            evidence.append({"during": window["during"], "instances": [a["instance"] for a in window["answers"]],
                             "counts": wrong, "answers": values, "faults_during_it": window["faults"]})
    return CheckResult("process-counts", PROCESS_COUNTS, not evidence, evidence, rows)


WORK_CLOCK = rule_of(
    "work-own-clock",
    "The later Work acceptance timestamp is deliberately not used: the Work protocol owns a separate "
    "clock_timestamp() sample. (A linked Work's accepted_at_utc is later than the bridge's transaction_timestamp(), "
    "its occurrence's materialized_at_utc; where the host moved the server clock while the bridge waited for its "
    "dispatch row, the Work accepted there carries a sample at or after the moved clock.)")


def work_own_clock(state: StoreState, moves: list[dict], *, planned: bool = False, promised: bool = False,
                   holds: list[dict] = (), frozen: frozenset = frozenset()) -> CheckResult:
    """Every linked Work against its bridge's transaction time, and the Work of a bridge the host held against the
    clock it moved meanwhile. `planned`: the scenario moves the clock in a bridge, so a run where it never moved
    fails, unless a fault left the host no hold to offer (then that half is not compared); `promised`: the held
    bridge must also have committed its Work (the fault-free run). `holds`: every hold the host offered
    (testhost/faults/bridge_clock.py), with what came of it."""
    work = state.work_by_id()
    evidence = []
    rows = held = 0
    for o in state.occurrences:
        w = work.get(o["work_id"]) if o["work_id"] is not None else None
        if w is None or o["work_id"] in state.planted or o["materialized_at_utc"] is None \
                or w["idempotency_key"] != o["work_idempotency_key"]:
            continue  # no link, or one the link checks judge
        rows += 1
        accepted, bridge = w["accepted_at_utc"], o["materialized_at_utc"]
        if bridge in frozen:  # the clock stood still: every sample of that bridge reads the same instant
            continue
        if accepted <= bridge:
            evidence.append({"occurrence": _occurrence_key(o), "work_id": o["work_id"],
                             "work_accepted_at_utc": instant_text(accepted),
                             "bridge_transaction_time (materialized_at_utc)": instant_text(bridge),
                             "expected": "a clock_timestamp() sample later than the bridge's transaction time"})
        for move in moves:
            if move["schedule_id"] not in (None, str(o["schedule_id"])) \
                    or not move["held_from"] <= bridge <= move["moved_at"]:
                continue
            held += 1
            at_least = move["moved_at"] + timedelta(seconds=move["shift_s"])
            if accepted < at_least:
                evidence.append({"occurrence": _occurrence_key(o), "work_id": o["work_id"],
                                 "bridge_began_before": instant_text(move["moved_at"]),
                                 "clock_moved_by_s": move["shift_s"], "work_accepted_at_utc": instant_text(accepted),
                                 "expected_at_or_after": instant_text(at_least)})
    skipped = None
    offered = [h for h in holds if h.get("taken")]
    if planned and not moves and not offered and not promised:
        skipped = ("the host could offer no hold of the dispatch row before a bridge: the fault left no committed "
                   "schedule-decision-after-commit of a live process to hold it at (the fault-free run compares the "
                   "Work's clock against a moved one)")
    elif planned and not moves:
        evidence.append({"planned": "a server clock move inside a bridge transaction", "happened": False,
                         "holds": [_hold_text(h) for h in holds] or "none offered", "why": _no_move_why(offered)})
    elif promised and not held:
        evidence.append({"planned": "a Work accepted in the bridge the host held", "happened": False, "moves": moves})
    return CheckResult("work-own-clock", WORK_CLOCK, not evidence, evidence, rows, skipped=skipped if not evidence
                       else None)


def _hold_text(hold: dict) -> str:
    where = f"after the {hold['after_fault']} fault there" if hold.get("after_fault") else "before its reply"
    seen = f"; the instance reported {', '.join(hold['barriers_meanwhile'])} meanwhile" \
        if hold.get("barriers_meanwhile") else ""
    return f"at {hold['at']} of {hold['instance']} ({where}): {hold['outcome']}{seen}"


def _no_move_why(offered: list[dict]) -> str:
    """What was missing, in the implementation's terms: a bridge that ran while its row was held without waiting for
    it did not lock the row first; otherwise no transaction came for the row while it was held."""
    if not offered:
        return ("no committed schedule-decision-after-commit was reported while a request ran, so the host never held "
                "the dispatch row: the barrier fires after every committed decision (PROTOCOL.md, Barriers)")
    ran = sorted({b for h in offered for b in h.get("barriers_meanwhile", []) if b in (
        "schedule-work-after-acceptance", "schedule-bridge-before-commit", "schedule-link-after-commit")})
    if ran:
        return (f"a bridge of the schedule ran while the host held its dispatch row (it reported {', '.join(ran)}) "
                "without waiting for the row: its transaction accepted Work before it locked the schedule's dispatch "
                "row (every scoped transaction locks it first, after the role proof and the scope)")
    return ("no transaction of the implementation waited for the schedule's dispatch row while the host held it, and "
            "no bridge of the schedule ran meanwhile: the bridge the committed decision opened did not come before "
            "each hold ended (see the holds)")


BOUNDED_PASS = rule_of(
    "pass-bounded",
    "Its ProcessDueAsync(PostgreSqlDurableScheduleProcessRequest, CancellationToken) call processes at most "
    "MaximumSchedules schedules (default 1), returns zero counts for an empty pass, and observes cancellation "
    "before starting the next lease. (A `process-due` request claims at most `maximum_schedules` dispatch rows, "
    "and at most `cancel_after` when it is cancelled after that many, or as many as it had claimed when the host "
    "answered a barrier `cancel-pass`: seen as the lease generations that moved while it ran; racing requests are "
    "held to their sum.)")


def _limit(request: dict) -> int:
    return min(request.get("maximum_schedules", 1), request.get("cancel_after", 1 << 30))


def pass_bounded(windows: list[dict]) -> CheckResult:
    """Each window whose facts the verifier could read, and in which no takeover worked beside it: the claims
    that committed against what its requests allowed."""
    evidence = []
    rows = 0
    for window in windows:
        if window.get("after") is None or set(window["faults"]) & set(UNCOUNTABLE_FAULTS):
            continue  # unread, or a takeover processor claimed inside the window
        rows += 1
        claimed = window["after"]["claimed"] - window["before"]["claimed"]
        allowed = sum(_limit(r) for r in window.get("requests", [{}]))
        if "cancelled_after_claims" in window:  # a `cancel-pass` reply: no lease after those already taken
            allowed = min(allowed, window["cancelled_after_claims"])
        if claimed > allowed:
            evidence.append({"during": window["during"], "claims_committed": claimed, "allowed": allowed,
                             "requests": window.get("requests"), "answers": window["answers"]})
    return CheckResult("pass-bounded", BOUNDED_PASS, not evidence, evidence, rows)


EMPTY_PASS = rule_of(
    "empty-pass-ok",
    "Its ProcessDueAsync(PostgreSqlDurableScheduleProcessRequest, CancellationToken) call processes at most "
    "MaximumSchedules schedules (default 1), returns zero counts for an empty pass, and observes cancellation "
    "before starting the next lease. (A pass that claimed nothing, before any fault of the case and not asked to "
    "be refused, answers `ok`; every count it reports is then zero, which `process-counts` holds it to.)")


def empty_pass(windows: list[dict]) -> CheckResult:
    """Every clean window in which no lease generation moved: each answer must be `ok`."""
    evidence = []
    rows = 0
    for window in windows:
        if not window.get("clean") or window.get("after") is None:
            continue
        if window["after"]["claimed"] != window["before"]["claimed"]:
            continue
        rows += 1
        wrong = [a for a in window["answers"] if a["outcome"] != "ok"]
        if wrong:
            evidence.append({"during": window["during"], "claims_committed": 0, "answers": wrong,
                             "expected": "ok with zero counts"})
    return CheckResult("empty-pass-ok", EMPTY_PASS, not evidence, evidence, rows)


LEASE_LEFT = rule_of(
    "pass-leaves-no-lease",
    "Its ProcessDueAsync(PostgreSqlDurableScheduleProcessRequest, CancellationToken) call processes at most "
    "MaximumSchedules schedules (default 1), returns zero counts for an empty pass, and observes cancellation "
    "before starting the next lease. (Before any fault of the case, a pass that answered leaves no lease it took "
    "still held: every dispatch row whose lease generation moved while it ran is `ready` again once it answered, "
    "so a cancelled pass abandons no lease it started.)")


def pass_leaves_no_lease(windows: list[dict]) -> CheckResult:
    """Every clean window: the dispatch rows claimed in it that are still leased after its last answer."""
    evidence = []
    rows = 0
    for window in windows:
        after, before = window.get("leases_after"), window.get("leases_before") or {}
        if not window.get("clean") or after is None or window.get("after") is None:
            continue
        if any(a["outcome"] not in ("ok", "fail") for a in window["answers"]):
            continue  # an unknown answer or a request that broke: its leases are the recovery's
        taken = {d: s for d, s in after.items() if s[1] != before.get(d, (None, 0))[1]}
        rows += len(taken)
        held = sorted(d for d, (state, _) in taken.items() if state == "leased")
        if held:
            evidence.append({"during": window["during"], "leases_left_held": held, "requests": window.get("requests"),
                             "answers": window["answers"]})
    return CheckResult("pass-leaves-no-lease", LEASE_LEFT, not evidence, evidence, rows)


@invariant("anomaly-only-past-the-window",
           "A forward cutoff inside the configured safety window creates one declared recovery range and follows "
           "the persisted misfire policy. (A `clock-anomaly` suspension is right only where its lateness, the "
           "suspending transaction's time minus the first instant after the cursor, exceeds the safety window of the "
           "generation it suspended, as configured; lateness equal to the window is inside it.)")
def _anomaly_past_window(state: StoreState):
    evidence = []
    rows = 0
    for h in state.history:
        detail = h["detail"] or {}
        if h["event"] != "suspended" or detail.get("reason") != "clock-anomaly":
            continue
        rows += 1
        d = state.definition(h["schedule_id"])
        g = state.generation(h["schedule_id"], h["generation"] if h.get("generation") is not None
                             else d["active_generation"])
        try:
            cursor = _instant(detail["cursor_utc"])
        except (KeyError, AttributeError, TypeError, ValueError):
            cursor = d["cursor_utc"]  # PROTOCOL.md asks for detail.cursor_utc; the cursor stayed put regardless
        if g is None or h["recorded_at_utc"] <= cursor:
            continue  # a cutoff at or behind the cursor: `behind-cursor-no-op` judges it
        first = model_timing(g).instants_between(cursor, h["recorded_at_utc"])[:1]
        window = timedelta(microseconds=g["safety_window_us"])
        if not first or h["recorded_at_utc"] - first[0] <= window:
            evidence.append({"suspended_inside_the_window": h, "cursor_utc": instant_text(cursor),
                             "first_due_instant": instant_text(first[0]) if first else None,
                             "lateness_s": (h["recorded_at_utc"] - first[0]).total_seconds() if first else None,
                             "safety_window_s": window.total_seconds()})
    return evidence, rows


@invariant("behind-cursor-no-op",
           "A cutoff at or behind the cursor is a no-op. (No decision acts on a cutoff at or behind the cursor: no "
           "`clock-anomaly` suspension is written at a transaction time at or before the cursor it records, and no "
           "occurrence or skipped range starts after the time of the transaction that decided it.)")
def _behind_cursor(state: StoreState):
    evidence = []
    rows = 0
    for h in state.history:
        detail = h["detail"] or {}
        if h["event"] == "suspended" and detail.get("reason") == "clock-anomaly":
            rows += 1
            try:
                cursor = _instant(detail["cursor_utc"])
            except (KeyError, AttributeError, TypeError, ValueError):
                cursor = state.definition(h["schedule_id"])["cursor_utc"]
            if h["recorded_at_utc"] <= cursor:
                evidence.append({"suspended_with_cutoff_behind_cursor": h, "cursor_utc": instant_text(cursor)})
        elif h["event"] == "recovery-skipped" and "first_nominal_utc" in detail:
            rows += 1
            try:
                early = _instant(detail["first_nominal_utc"]) > h["recorded_at_utc"]
            except (AttributeError, TypeError, ValueError):
                early = False  # an unreadable instant is `processor-history`'s to judge
            if early:
                evidence.append({"skipped_before_it_was_due": h})
    for o in state.occurrences:
        rows += 1
        if o["decided_at_utc"] is not None and o["first_nominal_utc"] > o["decided_at_utc"]:
            evidence.append({"decided_before_it_was_due": o})
    return evidence, rows


@invariant("range-opens-after-the-cursor",
           "A processor evaluates nominal instants in (cursor_utc, cutoff_utc], where the cutoff comes from "
           "PostgreSQL. (The range is open at the cursor: a decision moves the cursor to its cutoff, so the "
           "schedule's next decision decides no instant at or before the time of the one before it; seen on its "
           "occurrences and skipped ranges in the order of their decision times. A generation's cursor starts at "
           "or after its acceptance (docs/protocol-notes.md, 6 and 8), so none of its decisions decides an instant "
           "at or before its accepted_at_utc: the instant an Every without anchor is anchored on is not its first.)",
           examines="occurrences")
def _open_at_cursor(state: StoreState):
    evidence = []
    decisions: dict = {}
    for o in state.occurrences:
        if o["decided_at_utc"] is not None:
            decisions.setdefault(o["schedule_id"], []).append((o["decided_at_utc"], o["first_nominal_utc"], o))
            _before_acceptance(state, o["schedule_id"], o["generation"], o["first_nominal_utc"], o, evidence)
    for h in state.history:
        if h["event"] == "recovery-skipped":
            try:
                first = _instant((h["detail"] or {})["first_nominal_utc"])
            except (KeyError, AttributeError, TypeError, ValueError):
                continue  # `processor-history` judges an unreadable range
            decisions.setdefault(h["schedule_id"], []).append((h["recorded_at_utc"], first, h))
            if h.get("generation") is not None:
                _before_acceptance(state, h["schedule_id"], h["generation"], first, h, evidence)
    for rows in decisions.values():
        rows.sort(key=lambda r: (r[0], r[1]))
        for (at_a, _, a), (at_b, first_b, b) in zip(rows, rows[1:]):
            if at_b > at_a and first_b <= at_a:
                evidence.append({"decided_again_at_or_before_the_cursor": b, "cursor_from_the_decision_before": a,
                                 "cursor_utc": instant_text(at_a)})
    return evidence, sum(len(r) for r in decisions.values())


@invariant("no-instant-passed-over",
           "A processor evaluates nominal instants in (cursor_utc, cutoff_utc], where the cutoff comes from "
           "PostgreSQL. (No instant is passed over: every instant of a generation's grid after where its cursor "
           "started (its acceptance, or the cursor the update found, docs/protocol-notes.md 8) up to its last "
           "decision (the cursor, for the active generation) lies in a range that generation decided, an "
           "occurrence's or a skipped one; the instants before a future anchor included (24m).)",
           examines="occurrences")
def _none_passed_over(state: StoreState):
    evidence = []
    ranges: dict = {}  # (schedule, generation or None) -> [(decided at, first, last)]
    for o in state.occurrences:
        if o["decided_at_utc"] is not None:
            ranges.setdefault((o["schedule_id"], o["generation"]), []).append(
                (o["decided_at_utc"], o["first_nominal_utc"], o["last_nominal_utc"]))
    for h in state.history:
        if h["event"] == "recovery-skipped":
            try:
                first, last = (_instant((h["detail"] or {})[k]) for k in ("first_nominal_utc", "last_nominal_utc"))
            except (KeyError, AttributeError, TypeError, ValueError):
                continue  # `processor-history` judges an unreadable range
            ranges.setdefault((h["schedule_id"], h.get("generation")), []).append((h["recorded_at_utc"], first, last))
    rows = 0
    for d in state.definitions:
        schedule = d["schedule_id"]
        generations = sorted((g for g in state.generations if g["schedule_id"] == schedule),
                             key=lambda g: g["generation"])
        unattributed = ranges.get((schedule, None), [])  # a skipped range whose row names no generation
        started, decided_before = None, []
        for g in generations:
            own = ranges.get((schedule, g["generation"]), [])
            rows += len(own)
            accepted = g["accepted_at_utc"]
            started = max([t for t in (started, accepted) if t is not None] + decided_before)
            if g["generation"] == d["active_generation"]:
                end = d["cursor_utc"]
            else:
                end = max([at for at, _, _ in own] + [last for _, _, last in own], default=None)
            decided_before += [at for at, _, _ in own]
            if end is None or started is None or end <= started:
                continue
            covering = own + unattributed
            missed = [t for t in _grid_between(g, started, end)
                      if not any(first <= t <= last for _, first, last in covering)]
            if missed:
                evidence.append({"instants_passed_over": [instant_text(t) for t in missed[:5]],
                                 "count": len(missed), "schedule_id": schedule, "generation": g["generation"],
                                 "cursor_started_at": instant_text(started), "decided_up_to": instant_text(end)})
    return evidence, rows


MAX_GRID = 10_000  # instants judged per generation; a grid walked further proves nothing more


def _grid_between(g: dict, start: datetime, end: datetime) -> list[datetime]:
    """The generation's nominal instants t with start < t <= end, by arithmetic on whole microseconds (the grid
    anchor + n·every for every integer n, docs/protocol-notes.md 6), independent of any implementation."""
    if g["schedule_kind"] != "every":
        single = g["at_utc"] if g["schedule_kind"] == "at" else g["accepted_at_utc"] + timedelta(
            microseconds=g["after_us"])
        return [single] if start < single <= end else []
    step, anchor = g["every_us"], g["anchor_utc"]

    def us(t: datetime) -> int:
        return (t - anchor) // timedelta(microseconds=1)
    n = us(start) // step + 1
    last = us(end) // step
    return [anchor + timedelta(microseconds=k * step) for k in range(n, min(last, n + MAX_GRID - 1) + 1)]


def _before_acceptance(state: StoreState, schedule_id, number: int, first: datetime, row: dict,
                       evidence: list) -> None:
    """A decision of a generation whose range starts at or before that generation's acceptance."""
    g = state.generation(schedule_id, number)
    if g is not None and g["accepted_at_utc"] is not None and first <= g["accepted_at_utc"]:
        evidence.append({"decided_at_or_before_its_generations_acceptance": row,
                         "accepted_at_utc": instant_text(g["accepted_at_utc"]), "generation": number})


PASSIVE = rule_of(
    "passive-processor",
    "PostgreSqlDurableScheduleProcessor is provider-specific and passive. (Nothing happens without a request: no "
    "barrier is reported while no request is in flight or after its answer, and across the steps in which the "
    "host asked for no "
    "`process-due` pass nothing only a processor writes changes: no claim, no occurrence decided or linked, no "
    "skipped range, no suspension. A quiet stretch (`advance` with `quiet_s`) gives a processor that runs on its "
    "own the time to show it.)")
PROCESSOR_KEYS = ("occurrences", "last_decided", "skipped", "linked")


def passive_processor(observations: list[tuple[int, dict]], impls: list) -> CheckResult:
    """Barriers every started copy reported outside a request, and the processor's facts between consecutive
    observed states with no `process-due` asked in between (a restore, which puts rows back, excepted)."""
    evidence = [{"instance": impl.label, "barrier_without_request": hit} for impl in impls for hit in impl.unsolicited]
    rows = sum(len(impl.unsolicited) for impl in impls)
    for (step_a, seen_a), (step_b, seen_b) in _consecutive(observations):
        if seen_a.get("passes_asked") is None or seen_a["passes_asked"] != seen_b.get("passes_asked"):
            continue
        rows += 1
        changed = {k: [v, seen_b["processor"].get(k)] for k, v in seen_a["processor"].items()
                   if k != "server_now" and seen_b["processor"].get(k) != v}
        for schedule_id, before in seen_a["cursors"].items():
            after = seen_b["cursors"].get(schedule_id) or {}
            moved = {k: [_seen_text(before.get(k)), _seen_text(after.get(k))] for k in PROCESSOR_KEYS
                     if before.get(k) != after.get(k)}
            if moved:
                changed[schedule_id] = moved
        if changed:
            evidence.append({"after_step": step_a + 1, "at_step": step_b + 1, "passes_asked_meanwhile": 0,
                             "changed": changed})
    return CheckResult("passive-processor", PASSIVE, not evidence, evidence, rows)


REQUEUE_KEPT = rule_of(
    "requeue-kept",
    "If one exists, it requeues the Schedule dispatch row in that same transaction. The next bounded Schedule "
    "pass materializes the coalesced occurrence without waiting for another interval. (Seen after every step: an "
    "active schedule whose active generation has a pending coalesced occurrence, while no nonterminal Work holds "
    "its slot and no lease is held, is claimable at once, so the next pass can claim it; a lease release that wrote a later due time over the "
    "requeue leaves it waiting for another interval. Not judged while the server clock stands behind a time it "
    "already reached.)")


def requeue_kept(observations: list[tuple[int, dict]]) -> CheckResult:
    """In the state seen after every step: each schedule a requeue must have made claimable, against its timing."""
    evidence = []
    rows = 0
    latest = None  # the server clock's high-water mark over the states seen
    for step, seen in observations:
        now = (seen.get("processor") or {}).get("server_now")
        if now is not None:
            went_back = latest is not None and now < latest
            latest = now if latest is None else max(latest, now)
            if went_back:
                continue  # the clock moved back past a requeue: it is due again once the clock gets there
        for schedule_id, row in (seen.get("requeued") or {}).items():
            rows += 1
            if row["claimable_at_utc"] is None or row["claimable_at_utc"] > row["server_now"]:
                evidence.append({"after_step": step + 1, "schedule_id": schedule_id,
                                 "claimable_at_utc": _seen_text(row["claimable_at_utc"]),
                                 "server_now": _seen_text(row["server_now"]),
                                 "waiting": "a pending coalesced occurrence with its slot free"})
    return CheckResult("requeue-kept", REQUEUE_KEPT, not evidence, evidence, rows)
DEFINITION_REVISION = rule_of(
    "definition-revision",
    "The active schedule_definition row records lifecycle state, revision, active generation, runtime epoch, scope "
    "generation, and the materialization cursor. (The revision records every change of the others but the cursor: "
    "seen after every step and in the final state, it never moves back, and it moves forward whenever the lifecycle "
    "state, suspension reason, active generation, runtime epoch or scope generation on the row changed, so an "
    "expected_revision read before a suspension, update, delete or release is stale after it.)")
# What a new revision must record; the cursor moves on every pass and is the one field that does not.
REVISED = ("lifecycle_state", "suspension_reason", "active_generation", "runtime_epoch", "scope_generation")


def definition_revision(observations: list[tuple[int, dict]], final: StoreState | None = None) -> CheckResult:
    """Between the definitions seen after consecutive steps (and the last step and the final state), a row whose
    recorded lifecycle, generation or fences changed without a later revision, or whose revision moved back."""
    pairs = _consecutive(observations)
    if final is not None and observations:
        pairs.append((observations[-1], ("final", {"cursors": {str(d["schedule_id"]): d for d in final.definitions}})))
    evidence = []
    rows = 0
    for (step_a, seen_a), (step_b, seen_b) in pairs:
        for schedule_id, before in seen_a.get("cursors", {}).items():
            after = seen_b.get("cursors", {}).get(schedule_id)
            if after is None or "revision" not in before or "revision" not in after:
                continue
            rows += 1
            changed = {k: [before.get(k), after.get(k)] for k in REVISED if before.get(k) != after.get(k)}
            if after["revision"] < before["revision"] or (changed and after["revision"] == before["revision"]):
                evidence.append({"schedule_id": schedule_id, "after_step": step_a + 1,
                                 "at_step": step_b if step_b == "final" else step_b + 1,
                                 "revision": [before["revision"], after["revision"]], "changed": changed})
    return CheckResult("definition-revision", DEFINITION_REVISION, not evidence, evidence, rows)


ACCEPTANCE_ANCHOR = rule_of(
    "acceptance-anchor",
    "It is the only anchor for After, and the anchor for an Every schedule when the caller did not supply one. "
    "(Every generation of an Every whose create or update command gave no anchor stores as anchor_utc exactly its "
    "own accepted_at_utc, to the microsecond, a later generation included. The other checks judge instants "
    "relative to the stored anchor, so only this one sees an anchor taken from elsewhere.)")


def acceptance_anchor(state: StoreState, schedule_ids: dict[str, Any], model) -> CheckResult:
    """The stored anchor of each Every generation the scenario created or updated without one (the model's
    generation is then anchored on the acceptance time it read back) against that generation's accepted_at_utc."""
    evidence = []
    rows = 0
    for name, schedule in sorted(model.schedules.items()):
        for g in schedule.generations:
            if g.kind != "every" or g.anchor != g.accepted_at or name not in schedule_ids:
                continue
            stored = state.generation(schedule_ids[name], g.number)
            if stored is None:
                continue  # a generation the database lacks: model-agreement judges it
            rows += 1
            if stored["anchor_utc"] != stored["accepted_at_utc"]:
                evidence.append({"schedule": name, "generation": g.number,
                                 "anchor_utc": instant_text(stored["anchor_utc"]) if stored["anchor_utc"] else None,
                                 "accepted_at_utc": instant_text(stored["accepted_at_utc"]),
                                 "expected": "the command gave no anchor: the generation's own acceptance time"})
    return CheckResult("acceptance-anchor", ACCEPTANCE_ANCHOR, not evidence, evidence, rows)


# The schema-version stage's check (testhost/runs/schema_version.py), run once per certify on a store migrated only to 0003.
SCHEMA_VERSION_REFUSED = rule_of(
    "schema-version-refused",
    "Runtime version 4 requires it before Schedule operations run. (It: migration 0004_schedule_protocol.sql. "
    "On a store migrated only to 0003, every schedule operation the implementation declares, process-due at least, answers "
    "`fail` with an error whose message says why and `retriable: false`, reports no barrier and changes no row.)")

CANCEL_RETRIED = rule_of(
    "cancel-retried",
    "Database timeouts, disconnects, and SQLSTATE failures abort the transaction and require a bounded retry only "
    "after rollback. (After the `cancel` fault, whose statement cancel is SQLSTATE 57014, the request answers `ok` "
    "after its retry, or `fail`/`unknown` with `retriable: true`; a cancel that found no statement waiting fails it.)")


def cancel_retried(details: dict, answers: list[dict]) -> CheckResult | None:
    """Whether a planned cancel reached a waiting statement, and the request it hit answered as a retriable
    failure or retried (None: the fault was not a cancel)."""
    cancel = details.get("cancel")
    if cancel is None:
        return None
    evidence: list = []
    if cancel.get("cancelled_backend") is None:
        evidence.append({"nothing_cancelled": cancel.get("why_not", "no statement waited for the held row")})
    hit = [a for a in answers if a.get("faulted")]
    for answer in hit:
        error = answer.get("error") or {}
        if answer["outcome"] in ("fail", "unknown") and error.get("retriable") is not True:
            evidence.append({"instance": answer["instance"], "op": answer["op"], "outcome": answer["outcome"],
                             "error": answer.get("error"), "problem": answer.get("problem"),
                             "expected": "ok after a retry, or fail/unknown with retriable: true"})
    return CheckResult("cancel-retried", CANCEL_RETRIED, not evidence, evidence, 1 + len(hit))

# The hostile phase of `crashproof explore` (testhost/runs/hostile_phase.py) judges under these.
HOSTILE_CLIENT = rule_of(
    "hostile-client-inputs",
    "Schedule API validation and domain conflicts return durable problem results. (A client operation given one "
    "hostile argument (control or format characters, an empty or 1 MB string, a naive or out-of-range instant, a "
    "zero, negative, huge or mistyped duration, an unknown kind or schedule, a wrong JSON type, a missing or unknown "
    "field) answers `fail` with a problem of PROTOCOL.md's types, one the input allows, whose `detail` is not empty "
    "and which names the argument (a key of `errors` or a word of `detail`) when it is `validation`, and changes no "
    "row of any table of the schema; a crash, a protocol error, `ok`, `unknown` or a retriable error fails it; "
    "`crashproof explore`, hostile phase.)")
HOSTILE_CLAIM = rule_of(
    "hostile-claim-inputs",
    "The function rejects blank or control-character lease owners and lease durations that are null, non-positive, "
    "or longer than ten minutes before it changes a row, so an untrusted dispatcher call cannot strand a Schedule in "
    "a non-expiring or excessively long lease. (`claim_schedule_dispatch` called as the dispatcher, with a schedule "
    "claimable, and one hostile argument (an owner blank by White_Space and Default_Ignorable code points, holding a "
    "Cc, Cf, Zl or Zp code point, or over-long; a null, zero, negative, over-ten-minute or out-of-range duration, or "
    "a mixed-sign one ending outside (0, 10 minutes] at the claim, whatever its parts compare as: protocol notes "
    "24i, 24m) raises an error of SQLSTATE class 22 whose "
    "message names the argument (`lease owner` or `lease duration`), and changes no row of any table of the schema; "
    "`crashproof explore`, hostile phase.)")

# The client-command checks live in their own module; importing it here registers their rules with the rest.
from . import commands  # noqa: E402,F401
# The checks read at the barriers live in a module of their own and register here like every other, so every
# reader of CHECKS (PROTOCOL.md, the coverage page) sees them. Imported last: it uses the names above.
from testhost.case import barrier_facts  # noqa: E402,F401
# The bridge-role checks (testhost/judge/bridge_role.py) register here too, for PROTOCOL.md and the coverage page.
from . import bridge_role  # noqa: E402,F401
