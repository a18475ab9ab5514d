"""The diagnosis of a failed run: its failing cases grouped by their first failing check, each group with its likely
cause and what to read, from a registry of diagnoses over one case's facts as report.json records them (`facts`,
testhost/case/diagnosis_facts.py; checks and their evidence). The CLI's end of a run, report.md and the top of report.html
show it. A diagnosis explains; it never changes a verdict.

Each diagnosis is proved by a variant of the reference that plants its cause (tests/diagnosis_plants.py), run on a
small slice: the run's summary must name it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Callable

from barriers.contract import CHANGES, CHANGES_PAGE
from barriers.schema import RUNTIME

from . import counted, matrix_view

PROTOCOL = "barriers/PROTOCOL.md"
NOTES = "docs/protocol-notes.md"
FAILING = ("fail", "error")
QUOTE_LIMIT = 240
SHOWN_CASES = 3


def slug(heading: str) -> str:
    """A Markdown heading's anchor as GitHub makes it: lower case, punctuation dropped, each space a hyphen."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@dataclass(frozen=True)
class Diagnosis:
    name: str
    applies: Callable[[dict], bool]  # over one case of report.json
    cause: Callable[[dict], str]  # the likely cause in plain words, quoting the case's facts
    section: str  # the heading of PROTOCOL.md to read
    notes: tuple[tuple[str, str], ...]  # protocol notes to read: (number, title as the note's bold text begins)
    changes: tuple[str, ...] = ()  # the contract changes (barriers/contract.py slugs) that made the rule it meets

    def contract(self) -> str:
        """The contract changes to read, each with the version that carried it."""
        versions = {change.slug: change.version for change in CHANGES}
        return ", ".join(f"`{slug}` (contract {versions.get(slug, '?')})" for slug in self.changes)

    @property
    def anchor(self) -> str:
        return f"{PROTOCOL}#{slug(self.section)}"

    def reading(self) -> str:
        """Where to read, in one line."""
        notes = "; ".join(f"{NOTES} {number} ({title})" for number, title in self.notes)
        return (f"{self.anchor} ({self.section})" + (f"; {notes}" if notes else "")
                + (f"; {CHANGES_PAGE} {self.contract()}" if self.changes else ""))


def _facts(case: dict) -> dict:
    facts = case.get("facts")
    return facts if isinstance(facts, dict) else {}


def _quote(text: str) -> str:
    text = " ".join(str(text).split())
    return "«" + (text if len(text) <= QUOTE_LIMIT else text[:QUOTE_LIMIT - 1] + "…") + "»"


def last_error(case: dict) -> str:
    """The implementation's own last words on what went wrong: its last stderr error line, else its last refusal."""
    facts = _facts(case)
    line = (facts.get("stderr_error") or {}).get("line")
    if line:
        return f"its last stderr error line: {_quote(line)}"
    refusal = facts.get("last_refusal")
    if refusal:
        return f"its last `{refusal.get('op')}` answered {refusal.get('outcome')}: {_quote(refusal.get('error'))}"
    return "it wrote no error line to stderr"


def _asked_passes(case: dict) -> int:
    return int((_facts(case).get("asked") or {}).get("process-due", 0))


# -- the diagnoses ------------------------------------------------------------------------------------------------

def _unreached(case: dict) -> list[str]:
    """The DSN variables where no session of the implementation arrived (as far as the server's log tells)."""
    facts = _facts(case)
    return [variable for variable, key in (("CRASHPROOF_DISPATCHER_DSN", "dispatcher_sessions"),
                                           ("CRASHPROOF_RUNTIME_DSN", "runtime_sessions")) if facts.get(key) == 0]


def _never_connected(case: dict) -> bool:
    return bool(_unreached(case)) and _asked_passes(case) > 0


def _never_connected_cause(case: dict) -> str:
    return (f"the implementation never logged in where {' and '.join(_unreached(case))} "
            f"point{'s' * (len(_unreached(case)) == 1)}: the server let none of its sessions into the case's database "
            f"as that login while {_asked_passes(case)} passes were asked. Connect with the DSNs the host passes in "
            "the environment, as given (host, port, database, user), not a default, a PG* variable or a DSN of your "
            f"own; {last_error(case)}")


def _no_scoped_commit(case: dict) -> bool:
    facts = _facts(case)
    return facts.get("scoped_commits") == 0 and (facts.get("scoped_asked") or 0) > 0


def _no_scoped_commit_cause(case: dict) -> str:
    facts = _facts(case)
    claimed = facts.get("claims_reported") or 0
    asked = (facts.get("scoped_asked") or 0) - claimed
    return (f"no scoped transaction of the implementation ever committed: {counted(claimed, 'schedule')} it claimed "
            f"and {counted(asked, 'client command')} asked of it led to no committed decision, "
            "bridge or command. The scope is not honoured or the role not proven. The "
            "store honours a scope only when the transaction sets it with `select "
            "appsurface_durable.set_local_scope(scope_id)`; a transaction-local `set_config("
            "'appsurface_durable.scope_id', ..., true)` (or SET LOCAL, or a value left at session level) authorizes "
            "nothing, so every scoped row reads as absent (`unknown-scope`, `scope-not-found`). Before it, the "
            f"transaction proves `current_user` is `{RUNTIME}` on the connection as it logged in "
            f"(never by SET ROLE); {last_error(case)}")


def _ignored_cancels(case: dict) -> list[dict]:
    return [c for c in _facts(case).get("cancels") or [] if c.get("claims_after")]


def _barrier_reply_ignored_cause(case: dict) -> str:
    cancel = _ignored_cancels(case)[0]
    return (f"the host answered `{cancel.get('barrier')}` with the barrier-reply action `cancel-pass` and the pass "
            f"still committed {counted(cancel.get('claims_after') or 0, 'more claim')} before it answered: the reply's `action` "
            "was taken for `continue`. `cancel-pass` is mandatory: finish the lease in hand (its bridge too) and "
            "start no other lease in that pass")


def _instant(text) -> datetime | None:
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None


def _shows_before(check: str, row: dict, anchor: dict, at: datetime) -> bool:
    """Whether one evidence row of a failing check shows the grid before `anchor` (at `at`) decided otherwise than
    the model has it: an instant passed over there (`no-instant-passed-over`), or the occurrences starting there
    differing between the store and the model (`model-agreement`)."""
    def before(text) -> bool:
        return (_instant(text) or at) < at

    if check == "no-instant-passed-over":
        return (row.get("schedule_id"), row.get("generation")) == (anchor.get("schedule_id"), anchor.get(
            "generation")) and any(before(i) for i in row.get("instants_passed_over") or [])
    if check == "model-agreement" and row.get("schedule") == anchor.get("schedule"):
        database, model = ({(o.get("kind"), o.get("first_nominal_utc"))
                            for o in (row.get(side) or {}).get("occurrences") or []
                            if o.get("generation") == anchor.get("generation") and before(o.get("first_nominal_utc"))}
                           for side in ("database", "model"))
        return database != model
    return False


def _before_anchor(case: dict) -> list[dict]:
    """The future anchors (facts) before which a failing check shows the grid decided otherwise than the model."""
    found = []
    for anchor in _facts(case).get("future_anchors") or []:
        at = _instant(anchor.get("anchor"))
        if at is not None and any(_shows_before(str(check.get("name")), row, anchor, at)
                                  for check in case.get("checks", []) if not check.get("ok", True)
                                  for row in check.get("evidence") or [] if isinstance(row, dict)):
            found.append(anchor)
    return found


def _grid_cause(case: dict) -> str:
    anchor = _before_anchor(case)[0]
    return (f"schedule `{anchor.get('schedule')}` is an Every anchored in the future ({anchor.get('anchor')}, "
            f"accepted {anchor.get('accepted_at_utc')}) and its instants before the anchor were not decided as the "
            "grid has them: the grid is `anchor + n·every` for every integer n, negative included, so instants "
            "before a future anchor are due as they pass; the first decided is not the anchor itself")


def _passes_refused_cause(case: dict) -> str:
    facts = _facts(case)
    return (f"{facts.get('passes_refused')} of {_asked_passes(case)} passes answered `fail` or `unknown` with "
            "nothing to refuse them (no fault in them, none expected refused); the implementation's own error: "
            + (last_error(case) if (facts.get("stderr_error") or {}).get("line") else
               f"its last pass answered {_quote(facts.get('last_pass_error'))}"))


DIAGNOSES: tuple[Diagnosis, ...] = (
    Diagnosis("never-connected", _never_connected, _never_connected_cause,
              "How the TestHost runs your implementation", ()),
    Diagnosis("no-scoped-commit", _no_scoped_commit, _no_scoped_commit_cause, "Transactions of a pass",
              (("24j", "The scope authorizes only the transaction that set it"),
               ("24f", "Proof and scope in one statement")), ("scope-through-set-local-scope", "bridge-role-proof")),
    Diagnosis("barrier-reply-ignored", lambda case: bool(_ignored_cancels(case)), _barrier_reply_ignored_cause,
              "`barrier-reply` (host → implementation)",
              (("34a", "A cancel rides on a barrier-reply: the action `cancel-pass`"),
               ("34c", "Honouring it is mandatory for every implementation of `process-due`"),
               ("34d", "The lease in hand is finished")), ("cancel-pass", "cancel-at-link")),
    Diagnosis("grid-before-future-anchor", lambda case: bool(_before_anchor(case)), _grid_cause,
              "Time: instants, lateness, recovery",
              (("6", "Grid"), ("39e", "Every grid before a future anchor")), ("grid-before-anchor",)),
    Diagnosis("passes-refused", lambda case: (_facts(case).get("passes_refused") or 0) > 0, _passes_refused_cause,
              "Answers", (("24a", "Bounded retry of a claimed schedule"), ("39a", "An honest `fail`"))),
)
BY_NAME = {d.name: d for d in DIAGNOSES}


def diagnose(case: dict) -> Diagnosis | None:
    """The first diagnosis of the registry whose predicate holds for the case (the registry runs specific first)."""
    return next((d for d in DIAGNOSES if d.applies(case)), None)


# -- groups -------------------------------------------------------------------------------------------------------

@dataclass
class Group:
    check: str  # the first failing check's name, or `error` for a case that ended before its checks
    rule: str  # that check's rule, or the first case's reason
    diagnosis: Diagnosis | None
    cases: list[dict]

    @property
    def cause(self) -> str:
        return self.diagnosis.cause(self.cases[0]) if self.diagnosis else ""

    def ids(self, limit: int = SHOWN_CASES) -> str:
        shown = ", ".join(str(c.get("id")) for c in self.cases[:limit])
        return shown + (f" (+{len(self.cases) - limit} more)" if len(self.cases) > limit else "")


def first_failing(case: dict) -> tuple[str, str]:
    check = matrix_view.first_failed_check(case)
    if check is not None:
        return str(check.get("name")), str(check.get("rule", ""))
    return str(case.get("verdict")), f"the case ended {case.get('verdict')} before its checks: {case.get('reason', '')}"


def groups(report: dict) -> list[Group]:
    """The failing cases (fail, error) by their first failing check and diagnosis, largest group first."""
    found: dict[tuple[str, str], Group] = {}
    for case in report.get("cases", []):
        if case.get("verdict") not in FAILING:
            continue
        check, rule = first_failing(case)
        diagnosis = diagnose(case)
        key = (check, diagnosis.name if diagnosis else "")
        if key not in found:
            found[key] = Group(check, rule, diagnosis, [])
        found[key].cases.append(case)
    order = {key: i for i, key in enumerate(found)}
    return sorted(found.values(), key=lambda g: (-len(g.cases), order[(g.check, g.diagnosis.name if g.diagnosis
                                                                          else "")]))


def headline(report: dict, found: list[Group]) -> str:
    failing = sum(len(g.cases) for g in found)
    return (f"Diagnosis: {failing} failing case{'s' * (failing != 1)} in {len(found)} group"
            f"{'s' * (len(found) != 1)}, by first failing check")


def text(report: dict) -> list[str]:
    """The block a terminal shows at the end of a failed run (nothing when no case failed)."""
    found = groups(report)
    if not found:
        return []
    lines = [headline(report, found)]
    for group in found:
        size = f"{len(group.cases)} case{'s' * (len(group.cases) != 1)}"
        if group.diagnosis is not None:
            lines += [f"  {size}, first failing check {group.check}: {group.diagnosis.name}",
                      f"    likely cause: {group.cause}",
                      f"    read: {group.diagnosis.reading()}"]
        else:
            lines += [f"  {size}, first failing check {group.check}: no diagnosis",
                      f"    rule: {group.rule}"]
        lines.append(f"    cases: {group.ids()}")
    return lines
