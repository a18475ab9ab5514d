"""The checks on each `process-due` request's window: what its pass committed, as the verifier read it before and
after, against the counts it answered, the schedules it was allowed to claim and the leases it left held."""

from __future__ import annotations

from typing import Iterator

from .rules import CheckResult, Rules

RULES = Rules()
rule_of = RULES.declare

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
# The spec sentence of a bounded pass, which three checks read three ways.
BOUNDED_SENTENCE = ("Its ProcessDueAsync(PostgreSqlDurableScheduleProcessRequest, CancellationToken) call processes "
                    "at most MaximumSchedules schedules (default 1), returns zero counts for an empty pass, and "
                    "observes cancellation before starting the next lease.")


def judged(windows: list[dict], *, clean: bool = False, countable: bool = False) -> Iterator[dict]:
    """The windows whose facts the verifier read after the request; `clean`: only those before any fault of the
    case and not of a pass asked to be refused; `countable`: none during which a fault let a takeover processor
    claim inside the window or left the pass unable to know what it committed (UNCOUNTABLE_FAULTS)."""
    for window in windows:
        if window.get("after") is None or (clean and not window.get("clean")):
            continue
        if countable and set(window["faults"]) & set(UNCOUNTABLE_FAULTS):
            continue
        yield window


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


BOUNDED_PASS = rule_of(
    "pass-bounded",
    f"{BOUNDED_SENTENCE} (A `process-due` request claims at most `maximum_schedules` dispatch rows, "
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
    for window in judged(windows, countable=True):
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
    f"{BOUNDED_SENTENCE} (A pass that claimed nothing, before any fault of the case and not asked to "
    "be refused, answers `ok`; every count it reports is then zero, which `process-counts` holds it to.)")


def empty_pass(windows: list[dict]) -> CheckResult:
    """Every clean window in which no lease generation moved: each answer must be `ok`."""
    evidence = []
    rows = 0
    for window in judged(windows, clean=True):
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
    f"{BOUNDED_SENTENCE} (Before any fault of the case, a pass that answered leaves no lease it took "
    "still held: every dispatch row whose lease generation moved while it ran is `ready` again once it answered, "
    "so a cancelled pass abandons no lease it started.)")


def pass_leaves_no_lease(windows: list[dict]) -> CheckResult:
    """Every clean window: the dispatch rows claimed in it that are still leased after its last answer."""
    evidence = []
    rows = 0
    for window in judged(windows, clean=True):
        after, before = window.get("leases_after"), window.get("leases_before") or {}
        if after is None:
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
