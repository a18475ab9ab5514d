"""The checks over the states seen after every step, in order: what only a sequence shows (a cursor moving back, a
generation rewritten, a processor acting unasked, a fence acted past), where the final state looks right."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .identity import instant_text
from .gate_model import generation_of
from .rules import CheckResult, Rules
from .state import StoreState

RULES = Rules()
rule_of = RULES.declare


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


IDLE_CURSOR = rule_of(
    "idle-pass-keeps-cursor",
    "reference: a pass with no instant due in (cursor_utc, cutoff_utc] leaves the cursor where it is; the cursor "
    "moves only in a decision that disposes of at least one due instant, to that decision's cutoff (protocol note "
    "39c: the contract also allows moving it to the cutoff, so a difference is reported and never fails. Seen on "
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
            left = generation_of(g).instants_between(after["cursor_utc"], began)
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
