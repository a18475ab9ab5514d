"""Explore targets: `crashproof explore --profile ci` on 2 cores in 5 minutes, its examples, steps and faulted
steps per second beside the matrix's cases per second in the same run; and the mutant sweep (`mutants`)."""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from reports import counted
from testhost.runs.certify import certify
from testhost.runs.options import Options as CertifyOptions

from .figures import Figure

LIMIT_S = 300.0
MATRIX_SLICE = "at-*,every-*"  # a slice of the matrix, run right after explore on the same machine


def explore_ci() -> list[Figure]:
    from testhost.runs.explore import Options, explore, programs_text

    scratch = Path(tempfile.mkdtemp(prefix="bench-explore-"))
    started = time.monotonic()
    code, report = explore(Options(jobs=2, out=scratch / "found", report_dir=scratch / "report",
                                   progress=lambda line: None))
    elapsed = time.monotonic() - started
    ran = report["run"]["explore"]
    begun = time.monotonic()
    _, matrix = certify(CertifyOptions(jobs=2, scenario=MATRIX_SLICE, report_dir=scratch / "matrix",
                                       progress=lambda line: None))
    matrix_s = time.monotonic() - begun
    cases_per_s = matrix["summary"]["cases"] / matrix_s
    return [
        Figure(f"explore --profile ci, 2 jobs ({programs_text(ran)}, {counted(ran['steps'], 'step')}, "
               f"{ran['faulted']} faulted cases, {len(ran['found'])} found)", elapsed, "s", "<= 300 s",
               elapsed <= LIMIT_S and code == 0),
        Figure("explore programs drawn per second", ran["examples"] / elapsed, "/s", "reported", True, cases_per_s,
               f"matrix ({MATRIX_SLICE}) cases/s"),
        Figure("explore steps per second", ran["steps"] / elapsed, "/s", "reported", True, cases_per_s,
               "matrix cases/s"),
        Figure("explore faulted cases per second", ran["faulted"] / elapsed, "/s", "reported", True, cases_per_s,
               "matrix cases/s"),
    ]


def mutants(names: list[str] | None = None) -> list[dict]:
    """`explore --profile ci` (no slice named) against each catalog mutant: found?, after how many steps, which
    checks, whether one names the mutant's rule, how often the written failure failed again in explore's own fresh
    runs of it, and whether its file passes on the reference (a find the reference fails too is no find); one JSON
    line each."""
    from mutants import MUTANTS, migrations_dir
    from testhost.runs.explore import Options, explore

    rows = []
    by_name = {m.name: m for m in MUTANTS}
    for mutant in [by_name[name] for name in names] if names else MUTANTS:  # in the order asked (misses first)
        out = Path(tempfile.mkdtemp(prefix=f"bench-explore-{mutant.name}-"))
        started = time.monotonic()
        code, report = explore(Options(command=mutant.command, jobs=2, out=out / "found", report_dir=out / "report",
                                    migrations=migrations_dir(mutant), progress=lambda line: None))
        if "run" not in report:  # the harness failed (a world that did not come up): a row that says so, and on
            row = {"mutant": mutant.name, "found": None, "rule_named": None,
                   "error": f"explore exited {code} with no report (its stderr says why)",
                   "seconds": round(time.monotonic() - started, 1)}
            rows.append(row)
            print(json.dumps(row), flush=True)
            continue
        found = report["run"]["explore"]["found"]
        # A find counts only where its written scenario passes on the reference: one the reference fails too is
        # the harness's (a model that disagrees with every correct implementation), not the mutant's.
        for item in found:
            item["reference"] = reference_verdict(out / "found", item["case"])
        # Its own rule, or another sentence its catalog entry shows it breaks (`also`, each failing in its slice).
        naming = [f for f in found if _names(mutant.rules, f["checks"]) and f["reference"] == "pass"]
        # The hostile phase's finds count too: a call not refused, judged under its check's rule.
        hostile = report["run"]["explore"]["hostile"]["found"]
        hostile_naming = [h for h in hostile if _names(mutant.rules, [h])]
        first = (naming or found or [{}])[0]  # each job shrinks its own first failure
        verdicts = {c["id"]: c for c in report["cases"]}
        why = verdicts.get(first.get("case"), {})
        real = [f for f in found if f["reference"] == "pass"]
        own = [f for f in naming if _names((mutant.rule,), f["checks"])] + \
            [h for h in hostile_naming if _names((mutant.rule,), [h])]
        row = {"mutant": mutant.name, "found": bool(real or hostile), "rule_named": bool(naming or hostile_naming),
               "own_rule_named": bool(own),
               "verdict": why.get("verdict"), "reason": (why.get("reason") or "")[:160],
               "hostile": [h["check"] for h in hostile],
               "steps_to_failure": first.get("steps_to_failure"), "examples": first.get("examples_to_failure"),
               "shrunk_to": first.get("steps"), "checks": [c["name"] for c in first.get("checks", [])],
               "reproduced": (first.get("replayed") or {}).get("reproduced"),
               "reference": first.get("reference"), "false_finds": [f["case"] for f in found if f["reference"] != "pass"],
               "replays": (first.get("replayed") or {}).get("runs"),
               "case": first.get("case"), "seconds": round(time.monotonic() - started, 1)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def _names(rules: tuple[str, ...], checks: list[dict]) -> bool:
    """Some check names one of the rules: its sentence in the check's rule, or the check's own name."""
    return any(rule in check["rule"] or rule == check.get("name") for check in checks for rule in rules)


def reference_verdict(catalog: Path, case_id: str) -> str:
    """The written scenario's case replayed on the reference with certify, as its file says (its verdict)."""
    _, report = certify(CertifyOptions(jobs=1, catalog=[catalog], cases=[case_id], report_dir=catalog.parent / "on-reference",
                                       progress=lambda line: None))
    verdicts = [c["verdict"] for c in report.get("cases", []) if c["id"] == case_id]
    return verdicts[0] if verdicts else "not-run"


BENCHMARKS = [explore_ci]

if __name__ == "__main__":
    mutants(sys.argv[1:] or None)
