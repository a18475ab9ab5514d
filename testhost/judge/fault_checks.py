"""The checks on a fault and what it left: that it fired, the fate of the transaction open at it, late writes
fenced, a stall's takeover, a crash's committed rows, honest `fail`s, the client deadline, and a retried cancel."""

from __future__ import annotations

from .rules import CheckResult, Rules

RULES = Rules()
rule_of = RULES.declare


PLANNED_FAULT_FIRED = rule_of("planned-fault-fired", "harness: a planned barrier or fault that never fired makes the "
                              "run fail (report every barrier your code reaches, with its exact name). A faulted run "
                              "whose timeline never reached the planned hit, every other check passing, is run again, "
                              "three runs in all, before it fails: how often a pass claims can depend on when its "
                              "decisions cut off")
FATE_ABORTED = ("Database timeouts, disconnects, and SQLSTATE failures abort the transaction and require a bounded "
                "retry only after rollback.")
FATE_COMMITTED = ("A rollback leaves neither durable fact; a retry sees the same occurrence identity and must return "
                  "the original target link rather than enqueue another Work.")
rule_of("transaction-fate", f"{FATE_ABORTED} / {FATE_COMMITTED} (After kill, disconnect or stall at a before-commit "
        "barrier the server aborted the open transaction; after lost-commit-reply or pause it committed it: the "
        "verifier reads the fate of its xid.)")


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
