"""What one case ended in: its verdict, checks, timeline and the facts a report reads (no world needed to hold one)."""

from __future__ import annotations

from dataclasses import dataclass, field

from scenarios.matrix import CasePlan

from testhost.judge.rules import CheckResult
from testhost.judge.verdict import baseline as make_baseline


@dataclass
class CaseOutcome:
    plan: CasePlan
    verdict: str  # pass, fail, error, not-run
    reason: str = ""
    checks: list[CheckResult] = field(default_factory=list)
    timeline: list[dict] = field(default_factory=list)
    duration_s: float = 0.0
    hits: dict[str, int] = field(default_factory=dict)
    picture: dict | None = None  # the database's final state, run-independent (checks.normalize)
    model_picture: dict | None = None  # what the model says this timeline must end in
    fallbacks: list[str] = field(default_factory=list)
    implementation: str = ""
    operations: list[str] = field(default_factory=list)  # what the implementation's hello declared
    contract: int | None = None  # the contract major version the hello targets, if it named one
    logs: dict[str, str] = field(default_factory=dict)  # instance -> its stderr log
    cause: str = ""  # of an `error` verdict: "implementation" (it broke the protocol) or "harness"
    clock_skew: dict[str, dict] = field(default_factory=dict)  # instance -> its OS clock's skew, as verified
    measurements: dict = field(default_factory=dict)  # figures a case reports beside its verdict (`restore-drills`)
    facts: dict = field(default_factory=dict)  # what the run's diagnosis reads of the implementation (diagnosis_facts.py)
    placements_missed: list[dict] = field(default_factory=list)  # earlier runs that never reached the planned hit

    @property
    def baseline(self) -> dict | None:
        """What this run hands its scenario's faulted cases when it is the fault-free run."""
        return make_baseline(self.picture, self.model_picture)

    def to_json(self) -> dict:
        found = {"id": self.plan.id, "scenario": self.plan.scenario, "barrier": self.plan.barrier,
                 "fault": self.plan.fault, "hit": self.plan.hit, "verdict": self.verdict, "reason": self.reason,
                 "checks": [c.to_json() for c in self.checks], "timeline": self.timeline,
                 "duration_s": round(self.duration_s, 3), "barrier_hits": self.hits, "fallbacks": self.fallbacks,
                 "operations": self.operations, "logs": self.logs}
        if self.contract is not None:
            found["contract"] = self.contract
        if self.measurements:
            found["measurements"] = self.measurements
        if self.verdict == "error":
            found["cause"] = self.cause or "harness"
        if self.clock_skew:
            found["clock_skew"] = self.clock_skew
        if self.facts:
            found["facts"] = self.facts
        if self.placements_missed:
            found["placements_missed"] = self.placements_missed
        return found


def planned_hit_not_reached(outcome: CaseOutcome) -> bool:
    """A faulted run that tested nothing: its planned hit never came, and every other check passed."""
    failed = {c.name for c in outcome.checks if not c.ok}
    return outcome.plan.fault is not None and outcome.verdict == "fail" and failed == {"planned-fault-fired"}
