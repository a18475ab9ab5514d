"""What a check gives (CheckResult) and how a module declares the rules its checks name (Rules), for the registry."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from .state import StoreState


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


Check = Callable[[StoreState], CheckResult]


class Rules:
    """The rules one module declares, by check name in the order declared, and its invariants over the final state.
    Declaring registers nothing anywhere else: testhost/judge/registry.py gathers every module's Rules."""

    def __init__(self) -> None:
        self.checks: dict[str, str] = {}
        self.invariants: list[tuple[str, str, Check]] = []
        # What rows each invariant examines, so a run can tell a vacuous pass: a check over zero rows where the
        # scenario promised some. Checks that apply only to some timelines (suspensions, fences) examine None.
        self.examines: dict[str, str | None] = {}

    def declare(self, name: str, rule: str) -> str:
        """The rule a check's failure names, under the check's name; returns the rule."""
        if name in self.checks:
            raise ValueError(f"the check {name} is declared twice")
        self.checks[name] = rule
        return rule

    def invariant(self, name: str, rule: str, examines: str | None = None):
        """Declare an invariant: the decorated function returns (evidence, rows examined) for a final state."""
        def register(fn: Callable[[StoreState], tuple[list, int]]) -> Callable:
            self.declare(name, rule)

            def run(state: StoreState) -> CheckResult:
                evidence, rows = fn(state)
                return CheckResult(name, rule, not evidence, evidence, rows)
            self.invariants.append((name, rule, run))
            self.examines[name] = examines
            return fn
        return register
