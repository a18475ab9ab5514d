"""What commits between a pass's barriers, judged from the schedule's facts the verifier reads at each of them
(testhost/case/barrier_facts.py reads them): one transaction per bracket, nothing between, Gate A's states at every
barrier, and the role of the one transaction open at a before-commit barrier."""

from __future__ import annotations

from typing import Any

from barriers.schema import DISPATCHER as DISPATCHER_ROLE, RUNTIME as RUNTIME_ROLE

from .bridge_role import LOGIN_ROLES
from .invariants import GATE_A_STATES
from .rules import CheckResult, Rules

RULES = Rules()
rule_of = RULES.declare

# The barriers read, and which pairs (previous barrier of the same schedule and instance, this one) are judged.
READ_AT = ("schedule-claim-before-commit", "schedule-claim-after-commit", "schedule-decision-before-commit",
           "schedule-decision-after-commit", "schedule-bridge-before-commit", "schedule-link-after-commit")
GAPS = {("schedule-claim-after-commit", "schedule-decision-before-commit"),
        ("schedule-decision-after-commit", "schedule-bridge-before-commit")}
BRACKETS = {("schedule-claim-before-commit", "schedule-claim-after-commit"): "claim",
            ("schedule-decision-before-commit", "schedule-decision-after-commit"): "decision",
            ("schedule-bridge-before-commit", "schedule-link-after-commit"): "bridge"}
OPEN_AT = {"schedule-claim-before-commit": DISPATCHER_ROLE, "schedule-decision-before-commit": RUNTIME_ROLE}


def runtime_logins() -> tuple[str, ...]:
    """What a copy's runtime DSN may log in as (testhost/judge/bridge_role.py): its sessions count as the runtime
    role's."""
    return (RUNTIME_ROLE, *LOGIN_ROLES.values())


TOGETHER = rule_of(
    "decision-commits-together",
    "It writes the occurrence disposition and cursor movement in one scoped transaction. (Read at every processor "
    "barrier of a schedule in the fault-free run: nothing of it commits between an after-commit barrier and the "
    "next transaction's before-commit barrier; what commits between a transaction's before- and after-commit "
    "barriers is one transaction, one `xmin` on every row it wrote; a decision that records a disposition moves the "
    "cursor in it.)")
WORK_INSIDE = rule_of(
    "work-inside-link-transaction",
    "The Work bridge calls the existing PostgreSqlDurableWorkTransactionWriter.EnqueueAsync(NpgsqlTransaction, "
    "DurableWorkRequest) inside the occurrence-link transaction. (Read at the bridge's barriers in the fault-free "
    "run: an occurrence linked between `schedule-bridge-before-commit` and `schedule-link-after-commit` links a "
    "Work accepted by that same transaction, its row's `xmin` the link's, and no Work of the schedule commits "
    "outside a bridge.)")
STATES_SEEN = rule_of(
    "gate-a-states-at-every-barrier",
    "Gate A writes only pending, materialized, and superseded; it does not claim individual occurrence rows. (Read "
    "at every processor barrier of a schedule in the fault-free run and, in a faulted case, from the barrier where "
    "the fault fires on, not only at the end, so a state written and left again, a transient `claimed`, is seen.)")
ROLES = rule_of(
    "transaction-roles-at-barriers",
    "There are two non-overlapping transaction forms: A trusted dispatcher claims one payload-free dispatch queue "
    "row under a lease and commits before accessing scoped data. (With one processor running and no fault yet: at "
    "`schedule-claim-before-commit` exactly one session of the implementation holds a transaction ID, the "
    "dispatcher role's; at `schedule-decision-before-commit` exactly one, the runtime role's; the claim advances "
    "the schedule's `lease_generation` by exactly one.)")


class BarrierJudgement:
    """What the reads at a case's barriers showed wrong, per check, and how many each examined."""

    def __init__(self) -> None:
        self.evidence: dict[str, list] = {TOGETHER: [], WORK_INSIDE: [], STATES_SEEN: [], ROLES: []}
        self.rows: dict[str, int] = {TOGETHER: 0, WORK_INSIDE: 0, STATES_SEEN: 0, ROLES: 0}

    def _states(self, name: str, schedule_id: str, facts: dict) -> None:
        self.rows[STATES_SEEN] += len(facts["occurrences"])
        wrong = [o for o in facts["occurrences"] if o["state"] not in GATE_A_STATES]
        if wrong:
            self.evidence[STATES_SEEN].append({"barrier": name, "schedule_id": schedule_id,
                                               "occurrences_outside_gate_a": wrong})

    def _sessions(self, name: str, schedule_id: str, sessions: list) -> None:
        self.rows[ROLES] += 1
        logins = runtime_logins()
        if [RUNTIME_ROLE if row["role"] in logins else row["role"] for row in sessions] != [OPEN_AT[name]]:
            self.evidence[ROLES].append({"barrier": name, "schedule_id": schedule_id,
                                         "sessions_holding_a_transaction_id": sessions,
                                         "expected": f"exactly one, {OPEN_AT[name]}'s"})

    def _gap(self, pair: tuple, schedule_id: str, before: dict, after: dict) -> None:
        changed = changes(before, after)
        self.rows[TOGETHER] += 1
        work = [c for c in changed if c["table"] == "work"]
        rest = [c for c in changed if c["table"] != "work"]
        if rest:
            self.evidence[TOGETHER].append({"schedule_id": schedule_id, "between": list(pair),
                                            "committed_outside_a_barrier_transaction": rest})
        if work:
            self.rows[WORK_INSIDE] += 1
            self.evidence[WORK_INSIDE].append({"schedule_id": schedule_id, "between": list(pair),
                                               "work_committed_outside_the_bridge": work})

    def _bracket(self, kind: str, pair: tuple, schedule_id: str, before: dict, after: dict) -> None:
        changed = changes(before, after)
        if kind == "claim":
            self.rows[ROLES] += 1
            was = (before["dispatch"] or {}).get("lease_generation")
            now = (after["dispatch"] or {}).get("lease_generation")
            if was is None or now != was + 1:
                self.evidence[ROLES].append({"schedule_id": schedule_id, "between": list(pair),
                                             "lease_generation": [was, now], "expected": "advanced by exactly one"})
            return
        self.rows[TOGETHER] += 1
        xmins = sorted({c["xmin"] for c in changed})
        if len(xmins) > 1:
            self.evidence[TOGETHER].append({"schedule_id": schedule_id, "between": list(pair),
                                            "transactions": xmins, "rows": changed})
        if kind == "decision":
            disposed = [c for c in changed if c["table"] == "history" or (
                c["table"] == "occurrences" and (c["was"] is None or c["was"]["last_nominal_utc"]
                                                 != c["now"]["last_nominal_utc"]))]
            disposed = [c for c in disposed if c["table"] != "history" or c["key"].startswith("recovery-skipped|")]
            cursor = [c for c in changed if c["table"] == "definition"
                      and c["was"] and c["now"] and c["was"]["cursor_utc"] != c["now"]["cursor_utc"]]
            if disposed and not cursor:
                self.evidence[TOGETHER].append({"schedule_id": schedule_id, "between": list(pair),
                                                "disposition": disposed, "cursor_moved": False})
            return
        work = {c["key"]: c for c in changed if c["table"] == "work"}
        for c in changed:
            if c["table"] != "occurrences" or not c["now"]["work_id"] or (c["was"] or {}).get("work_id"):
                continue
            self.rows[WORK_INSIDE] += 1
            accepted = work.get(c["now"]["work_id"])
            if accepted is None or accepted["xmin"] != c["xmin"]:
                self.evidence[WORK_INSIDE].append({
                    "schedule_id": schedule_id, "between": list(pair), "linked": c["key"], "link_xmin": c["xmin"],
                    "work_id": c["now"]["work_id"],
                    "work_xmin": accepted["xmin"] if accepted else _xmin_of(after, c["now"]["work_id"]),
                    "work_accepted_in_this_transaction": accepted is not None})

    def checks(self) -> list[CheckResult]:
        """One result per check; a case whose barriers could not all be read says so in the evidence."""
        names = {TOGETHER: "decision-commits-together", WORK_INSIDE: "work-inside-link-transaction",
                 STATES_SEEN: "gate-a-states-at-every-barrier", ROLES: "transaction-roles-at-barriers"}
        return [CheckResult(names[rule], rule, not self.evidence[rule], self.evidence[rule], self.rows[rule])
                for rule in names]


def _rows(facts: dict, table: str) -> dict[str, dict]:
    if table in ("definition", "dispatch"):
        return {table: facts[table]} if facts[table] else {}
    return {str(r["key"]): r for r in facts[table]}


def _xmin_of(facts: dict, work_id: str) -> Any:
    return next((r["xmin"] for r in facts["work"] if str(r["key"]) == str(work_id)), None)


def changes(before: dict, after: dict) -> list[dict]:
    """Every row new or different in `after`, with its writer's xmin (a row gone is no write a pass may make)."""
    found = []
    for table in ("definition", "dispatch", "occurrences", "history", "work"):
        was, now = _rows(before, table), _rows(after, table)
        for key, row in now.items():
            old = was.get(key)
            if old != row:
                found.append({"table": table, "key": key, "xmin": row["xmin"], "was": old, "now": row})
    return found
