"""report.json: the versioned machine-readable transcript of a certification run (see docs/report-format.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
VERDICTS = ("pass", "fail", "error", "not-run")


def summary(cases: list[dict]) -> dict[str, int]:
    counts = {v: sum(1 for c in cases if c["verdict"] == v) for v in VERDICTS}
    return {"cases": len(cases), "passed": counts["pass"], "failed": counts["fail"], "error": counts["error"],
            "not_run": counts["not-run"]}


def build(*, suite_version: str, implementation: dict, environment: dict, run: dict, cases: list[dict]) -> dict[str, Any]:
    return {"schema_version": SCHEMA_VERSION, "suite_version": suite_version, "implementation": implementation,
            "environment": environment, "run": run, "summary": summary(cases), "cases": cases}


def write(report: dict, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "report.json"
    path.write_text(json.dumps(report, indent=1, default=str) + "\n")
    return path


def validate(report: dict) -> list[str]:
    """Structural problems with a report (what a reader may rely on); empty means well-formed."""
    problems = []
    for key in ("schema_version", "suite_version", "implementation", "environment", "summary", "cases"):
        if key not in report:
            problems.append(f"missing {key}")
    if report.get("schema_version") != SCHEMA_VERSION:
        problems.append(f"schema_version is {report.get('schema_version')}, expected {SCHEMA_VERSION}")
    for case in report.get("cases", []):
        for key in ("id", "scenario", "barrier", "fault", "hit", "verdict", "checks", "timeline", "duration_s"):
            if key not in case:
                problems.append(f"case {case.get('id')}: missing {key}")
        if case.get("verdict") not in VERDICTS:
            problems.append(f"case {case.get('id')}: verdict {case.get('verdict')!r}")
        for check in case.get("checks", []):
            if set(check) < {"name", "rule", "ok", "evidence"}:
                problems.append(f"case {case.get('id')}: check without name/rule/ok/evidence")
    if report.get("summary") != summary(report.get("cases", [])):
        problems.append("summary does not add up to the cases")
    return problems
