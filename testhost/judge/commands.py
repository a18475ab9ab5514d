"""The checks on client commands: each step answered as the scenario expects and a refusal changed no row, one
acceptance time on command and generation, the definition persisted as sent, and what an accepted release rebinds.
Observed by the scenario steps as they run (the rows a command may write: testhost/world/table_rows.py)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from barriers.protocol import problem_name

from .rules import CheckResult, Rules

RULES = Rules()
rule_of = RULES.declare

# The host's reading of the server clock (its offset) and the server's own can differ by its settling.
CLOCK_SLACK = timedelta(seconds=2)

ACCEPTED_AT = rule_of(
    "command-accepted-at",
    "Schedule create and update commands capture one PostgreSQL transaction_timestamp() value. It is persisted on "
    "the command and immutable generation as accepted_at_utc. (After every create or update the generation it made "
    "and its schedule_commands row, the one of that schedule, generation and command kind, carry the same "
    "accepted_at_utc, which lies within the server's time while the command ran.)")
PERSISTED = rule_of(
    "definition-persisted",
    "At and explicitly anchored Every schedules persist their UTC value unchanged. (The generation a create or "
    "update made holds the definition as sent, to the microsecond: at_utc, anchor_utc, every_us, after_us, "
    "safety_window_us when sent, target_command.)")
REBINDS = rule_of(
    "release-rebinds",
    "An old runtime epoch can use ReleaseAfterRecovery, which rebinds the current scope generation; a "
    "scope-generation-only mismatch requires a public update or delete/recreate to establish a new generation. "
    "(After an `ok` release-after-recovery the definition is active, carries the store's current runtime epoch "
    "and the scope's current generation, both rebound when both had advanced, and its cursor stands where it "
    "stood before the release.)")


GENERATION_SQL = (
    "select g.*, c.accepted_at_utc as command_accepted_at_utc, c.command_kind "
    "from appsurface_durable.schedule_generations g "
    "left join appsurface_durable.schedule_commands c on c.scope_id = g.scope_id and c.schedule_id = g.schedule_id "
    "and c.generation = g.generation and c.command_kind in ('create', 'update') "
    "where g.schedule_id = %s order by g.generation desc, c.accepted_at_utc limit 1")

FENCES_SQL = (
    "select d.lifecycle_state, d.runtime_epoch, d.scope_generation, d.cursor_utc, "
    "(select runtime_epoch from appsurface_durable.store_runtime) as store_runtime_epoch, "
    "(select generation from appsurface_durable.scopes s where s.scope_id = d.scope_id) as scope_current_generation "
    "from appsurface_durable.schedule_definitions d where d.schedule_id = %s")


def accepted_at(step: int, op: str, generation: dict, window: tuple[datetime, datetime]) -> list[dict]:
    """What is wrong with a generation's acceptance time as its command recorded it ([] when nothing)."""
    found = {"step": step, "op": op, "generation": generation["generation"],
             "generation_accepted_at_utc": generation["accepted_at_utc"],
             "command_accepted_at_utc": generation.get("command_accepted_at_utc"),
             "server_time_during_command": [window[0], window[1]]}
    wrong = []
    if generation.get("command_kind") is None:
        wrong.append("no schedule_commands row of this schedule, generation and kind create/update")
    elif generation["command_accepted_at_utc"] != generation["accepted_at_utc"]:
        wrong.append("the command and the generation carry different accepted_at_utc")
    if not window[0] - CLOCK_SLACK <= generation["accepted_at_utc"] <= window[1] + CLOCK_SLACK:
        wrong.append("accepted_at_utc is not the server's time while the command ran")
    return [{**found, "wrong": wrong}] if wrong else []


def persisted(step: int, op: str, sent: dict[str, Any], generation: dict) -> list[dict]:
    """The generation's columns against the definition sent (wire form, instants resolved): [] when equal."""
    micros = lambda seconds: round(seconds * 1_000_000)  # noqa: E731
    wanted = {"at_utc": sent.get("at"), "anchor_utc": sent.get("anchor"),
              "every_us": micros(sent["every_s"]) if "every_s" in sent else None,
              "after_us": micros(sent["after_s"]) if "after_s" in sent else None,
              "target_command": sent["target"]["command"]}
    if "safety_window_s" in sent:
        wanted["safety_window_us"] = micros(sent["safety_window_s"])
    if sent.get("anchor") is None:
        wanted.pop("anchor_utc")  # an Every without one is anchored on its acceptance, an At or After on nothing
    differences = {column: {"sent": want, "stored": generation.get(column)} for column, want in wanted.items()
                   if _stored(generation.get(column)) != _stored(want)}
    return [{"step": step, "op": op, "generation": generation["generation"], "differences": differences}] \
        if differences else []


def _stored(value: Any) -> Any:
    return datetime.fromisoformat(value) if isinstance(value, str) and value[:1].isdigit() else value


def rebinds(step: int, before: dict, after: dict) -> list[dict]:
    """An accepted release's definition against the store's fences and its own cursor before it."""
    if before is None or after is None:
        return [{"step": step, "op": "release", "wrong": ["answered ok, but there is no definition"]}]
    wrong = []
    if after["lifecycle_state"] != "active":
        wrong.append("the definition is not active")
    if after["runtime_epoch"] != after["store_runtime_epoch"]:
        wrong.append("the runtime epoch is not the store's")
    if after["scope_generation"] != after["scope_current_generation"]:
        wrong.append("the scope generation is not the scope's current one")
    if after["cursor_utc"] != before["cursor_utc"]:
        wrong.append("the cursor moved")
    return [{"step": step, "op": "release", "wrong": wrong, "before": before, "after": after}] if wrong else []


def results(facts: dict[str, list]) -> list[CheckResult]:
    """One result per check that had something to examine: `facts` maps a check to its (evidence, rows) pairs."""
    out = []
    for name, rule in (("command-accepted-at", ACCEPTED_AT), ("definition-persisted", PERSISTED),
                       ("release-rebinds", REBINDS)):
        seen = facts.get(name, [])
        if seen:
            evidence = [e for found in seen for e in found]
            out.append(CheckResult(name, rule, not evidence, evidence, len(seen)))
    return out


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
