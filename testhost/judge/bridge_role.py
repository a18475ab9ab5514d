"""The bridge's role: a pass whose runtime login is only a member of the runtime role, or whose runtime role lacks a
privilege every scoped transaction needs, commits nothing scoped and answers a failure that is not retriable. What the
host does to the roles is testhost/case/role_changes.py's; here, the rules and how the rows read around it are judged."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from barriers.schema import RUNTIME

from .rules import CheckResult, Rules

RULES = Rules()
rule_of = RULES.declare

# A login that holds the runtime role's privileges (INHERIT) without being it: current_user is never the runtime
# role in its sessions, so only a bridge that proves current_user refuses it. Cluster-wide, made once per world.
MEMBER = "crashproof_runtime_member"
# A login whose sessions begin as the runtime role: the runtime role is its default role in the case's store (ALTER
# ROLE ... IN DATABASE ... SET role), so current_user is the runtime role in every session it opens while that holds,
# and the login itself, a member holding the runtime role's privileges as MEMBER does, once the host resets it. The
# host takes it away between a pass's committed decision and its bridge (`demote_after_decision`). Cluster-wide,
# made once per world; the default is the store's, set when the copy starts and reset when the case ends.
DEFAULT_ROLE_LOGIN = "crashproof_runtime_by_default"
LOGIN_ROLES = {"member": MEMBER, "default-role": DEFAULT_ROLE_LOGIN}
DEMOTED_AT = "schedule-decision-after-commit"
# Scoped tables: nothing of a denied pass may change them. The queue's two tables may change as a claim does.
SCOPED = ("schedule_commands", "schedule_definitions", "schedule_generations", "schedule_occurrences",
          "schedule_history", "work_items")

PROVEN = rule_of(
    "bridge-role-proven",
    "A bridge must prove the connection's current_user is the configured runtime role before it sets local scope "
    "state. (A pass whose runtime login, the user of CRASHPROOF_RUNTIME_DSN, is only a member of "
    f"{RUNTIME}, holding its privileges without being it, commits no scoped transaction: no "
    "occurrence, cursor move, Work, link, history row, definition change or lease release; only its claim may "
    "commit.)")
NOT_RETRIABLE = rule_of(
    "bridge-failure-not-retriable",
    "Access-denied and non-runtime bridge-role failures are not retriable. (A pass with something due, under a "
    "runtime login that is only a member of the runtime role or with EXECUTE on set_local_scope revoked from it, "
    "answers `fail`, or `unknown` once its claim committed, with `error.retriable` false; never `ok`. It does not "
    "retry the refused statement either: the server logs at most one such refusal per schedule the pass claimed.)")


def claims(before: dict[str, list[dict]], after: dict[str, list[dict]]) -> int:
    """How many claims committed between the two readings (each moves a lease generation by one)."""
    was = {r["dispatch_id"]: r["lease_generation"] for r in before["schedule_dispatch"]}
    return sum(r["lease_generation"] - was.get(r["dispatch_id"], 0) for r in after["schedule_dispatch"])


def scoped_changes(before: dict[str, list[dict]], after: dict[str, list[dict]]) -> dict[str, dict]:
    """What a denied pass changed beyond a claim: every scoped table's added and removed rows, and a dispatch row
    changed other than by a claim (now leased, its lease generation one more) with its timing row."""
    def texts(table, side):
        return {json.dumps(r, sort_keys=True) for r in side[table]}

    out = {}
    for table in SCOPED:
        added, removed = texts(table, after) - texts(table, before), texts(table, before) - texts(table, after)
        if added or removed:
            out[table] = {"added": [json.loads(r) for r in sorted(added)],
                          "removed": [json.loads(r) for r in sorted(removed)]}
    old = {r["dispatch_id"]: r for r in before["schedule_dispatch"]}
    claimed = {r["dispatch_id"] for r in after["schedule_dispatch"]
               if r["dispatch_id"] in old and r["lease_state"] == "leased"
               and r["lease_generation"] == old[r["dispatch_id"]]["lease_generation"] + 1}
    for table in ("schedule_dispatch", "schedule_dispatch_timing"):
        was = {r["dispatch_id"]: r for r in before[table]}
        moved = [{"before": was.get(r["dispatch_id"]), "after": r} for r in after[table]
                 if was.get(r["dispatch_id"]) != r and r["dispatch_id"] not in claimed]
        if moved:
            out[table] = {"changed_other_than_by_a_claim": moved}
    return out


def judge(denied: list[dict]) -> list[CheckResult]:
    """The denied passes of a case: nothing scoped committed under a member-only login; every answer a failure
    that is not retriable. A denial that was not in effect, or a pass with nothing due, tested nothing: it fails."""
    if not denied:
        return []
    proven, answers = [], []
    denied = [d for d in denied if not d.get("faulted")]  # a fault's answer is not the refusal's
    if not denied:
        return []
    for d in denied:
        where = {"step": d["step"], "instance": d["instance"], "denial": d["denial"]}
        vacuous = d["not_in_effect"] or (None if d["due"] else "nothing was due: no bridge had anything to refuse")
        if vacuous:
            answers.append({**where, "tested_nothing": vacuous})
            continue
        error = d.get("error") or {}
        if d["outcome"] not in ("fail", "unknown") or error.get("retriable") is not False:
            answers.append({**where, "outcome": d["outcome"], "error": d.get("error"), "value": d.get("value"),
                            "expected": "fail, or unknown once the claim committed, with error.retriable false"})
        if d.get("denied_statements") is not None and d["denied_statements"] > max(d["claims"], 1):
            answers.append({**where, "denied_statements": d["denied_statements"], "claims": d["claims"],
                            "expected": "no retry of the access-denied failure: at most one refused statement per "
                                        "schedule claimed (the server's log)"})
        if d["denial"] == "member" and d["changed"]:
            proven.append({**where, "committed_beyond_the_claim": d["changed"], "outcome": d["outcome"]})
    checks = [CheckResult("bridge-failure-not-retriable", NOT_RETRIABLE, not answers, answers, len(denied))]
    members = [d for d in denied if d["denial"] == "member"]
    if members:
        checks.append(CheckResult("bridge-role-proven", PROVEN, not proven, proven, len(members)))
    return checks


# -- the runtime role taken away between a committed decision and its bridge ------------------------------------

PROVEN_AFTER_DECISION = rule_of(
    "bridge-role-proven-after-decision",
    "A bridge must prove the connection's current_user is the configured runtime role before it sets local scope "
    "state. (A pass whose decision committed under the runtime role loses it before its bridge: its copy's runtime "
    "login has the runtime role as its default role (`runtime_login = \"default-role\"`), and at the pass's "
    "`schedule-decision-after-commit` the host resets that default, so a session of the login is the login itself, "
    "a member holding every privilege of the runtime role, and ends the login's sessions. From that barrier until "
    "the pass answered nothing scoped commits: no Work, link, materialized occurrence, history row, definition "
    "change or lease release. The pass must reach that barrier, and the change must hold on the server.)")


@dataclass
class Demotion:
    """One `process` step's `demote_after_decision`: the rows read before the pass, at its first committed decision
    (where the host takes the runtime role from the login) and once it answered (when the host gives it back)."""

    step: int
    label: str
    dbname: str
    armed: bool = False
    not_in_effect: list[str] = field(default_factory=list)  # why the case tested nothing
    before: dict | None = None
    at_decision: dict | None = None
    after: dict | None = None
    context: dict | None = None
    outcome: str | None = None
    error: dict | None = None
    faulted: bool = False

    def judged(self) -> tuple[dict | None, bool]:
        """What fails the check for this pass (None: nothing), and whether it was judged at all."""
        where = {"step": self.step, "instance": self.label}
        if self.faulted:
            return None, False  # a fault's answer and commits are the fault's checks'
        if self.at_decision is None:
            found = {**where, "tested_nothing": f"the pass never reached {DEMOTED_AT}: no decision committed under "
                                                "the runtime role for a bridge to follow", "outcome": self.outcome,
                     "error": self.error}
            if self.outcome in ("fail", "unknown"):
                found["likely_cause"] = (f"a session of {DEFAULT_ROLE_LOGIN} has current_user {RUNTIME} (its "
                                         "default role; session_user is the login) and must be let through: is "
                                         "session_user compared instead of current_user?")
            return found, True
        if self.not_in_effect:
            return {**where, "tested_nothing": "; ".join(self.not_in_effect)}, True
        schedule_id = str((self.context or {}).get("schedule_id"))
        if not any(str(o["schedule_id"]) == schedule_id and o["state"] == "pending"
                   for o in self.at_decision["schedule_occurrences"]):
            return {**where, "schedule_id": schedule_id, "tested_nothing": "the decision left no pending occurrence "
                                                                           "of its schedule: no bridge had work"}, True
        changed = scoped_changes(self.at_decision, self.after) if self.after is not None else {}
        if changed:
            return {**where, "schedule_id": schedule_id,
                    "committed_after_the_role_was_taken": changed, "outcome": self.outcome,
                    "likely_cause": "a scoped transaction after the decision (its bridge) did not prove current_user "
                                    "on its own connection"}, True
        return None, True


def judge_demotions(demotions: list[Demotion]) -> list[CheckResult]:
    """The passes whose runtime role was taken after their decision: nothing scoped committed from then on."""
    evidence, judged = [], 0
    for demotion in demotions:
        found, counted = demotion.judged()
        judged += counted
        if found is not None:
            evidence.append(found)
    if not judged:
        return []
    return [CheckResult("bridge-role-proven-after-decision", PROVEN_AFTER_DECISION, not evidence, evidence, judged)]
