"""`crashproof variants`: certify every legal variant of the reference (variants/) and report each as certified or
as a harness defect.

A legal variant takes another way the contract allows, so the whole matrix must pass it (and `crashproof explore`
at its ci profile must find nothing): a variant that fails shows a check that holds implementations to the
reference's own habit, a defect of the harness, not of the variant. Each variant also says where its difference
shows (variants.Variant.shows, read over the cases of its run): a run in which it never showed proved nothing, and
says so. docs/variants.md tells what each variant exercises.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import json
import sys
import time
from pathlib import Path

from reports import counted
from variants import VARIANTS, Variant

from . import explore as explore_module
from .certify import certify
from .options import Options


def select_variants(names: str | None) -> list[Variant]:
    chosen = [v for v in VARIANTS if names is None or any(fnmatch.fnmatch(v.name, n) for n in names.split(","))]
    if not chosen:
        raise ValueError(f"no variant matches {names!r}; `python -m variants --list` shows the catalog")
    return chosen


def _failures(report: dict) -> list[dict]:
    """Every case that did not pass: its id, verdict and failing checks (an error's reason stands for them)."""
    found = []
    for case in report.get("cases", []):
        if case["verdict"] in ("pass", "not-run"):
            continue
        checks = [c["name"] for c in case.get("checks", []) if not c.get("ok", True)]
        found.append({"id": case["id"], "verdict": case["verdict"], "checks": checks or [case.get("reason", "")]})
    return found


def judge(variant: Variant, code: int, report: dict, explored: dict | None = None) -> dict:
    """One variant's verdict from its certify run (and its explore run): certified, or a harness defect; and whether
    its difference showed."""
    failures = _failures(report)
    problems = list(report.get("run", {}).get("problems", []))
    shown = []
    if variant.shows is not None:
        for case in report.get("cases", []):
            seen = variant.shows(case)
            if seen:
                shown.append({"id": case["id"], "seen": seen})
    explore_failed = explored is not None and explored["code"] != 0
    certified = code == 0 and not failures and not problems and not explore_failed
    vacuous = variant.shows is not None and not shown
    checks = sorted({name for f in failures for name in f["checks"]})
    # Reference-choice rules the variant does otherwise: notes, never failures (barriers/contract.py)
    noted = sorted({c["name"] for case in report.get("cases", []) for c in case.get("checks", []) if c.get("differs")})
    return {"variant": variant.name, "exercises": variant.exercises, "differs": variant.differs,
            "certified": certified, "exit_code": code, "cases": len(report.get("cases", [])),
            "failed": failures, "failed_checks": checks, "run_problems": problems,
            "difference_seen_in": shown, "vacuous": vacuous, "probe": variant.probe, "differs_from_reference": noted,
            "explore": explored}


def line(verdict: dict) -> str:
    """The one line `crashproof variants` prints for a variant."""
    name = verdict["variant"]
    if verdict["certified"]:
        cases = verdict["cases"]
        head = f"certified: legal variant {name} passed " + ("its 1 case" if cases == 1 else f"all {counted(cases, 'case')}")
    else:
        what = []
        if verdict["failed"]:
            first = verdict["failed"][0]
            what.append(f"{len(verdict['failed'])} of {counted(verdict['cases'], 'case')} (checks {', '.join(verdict['failed_checks'])}; "
                        f"first {first['id']})")
        what += [f"run problem: {p}" for p in verdict["run_problems"]]
        if verdict["explore"] is not None and verdict["explore"]["code"] != 0:
            what.append(f"explore {verdict['explore']['profile']} found {verdict['explore']['found'] or 'a failure'}")
        if not what:
            what.append(f"exit code {verdict['exit_code']}")
        head = f"harness defect: legal variant {name} failed {'; '.join(what)}"
    if verdict["difference_seen_in"]:
        seen = verdict["difference_seen_in"]
        head += f"; difference seen in {len(seen)} case{'s' * (len(seen) != 1)} ({seen[0]['id']}: {seen[0]['seen']})"
    elif verdict["vacuous"]:
        head += "; VACUOUS: its difference showed in no case, so the run proved nothing about it"
    else:
        head += f"; difference seen by tests/test_variants.py: {verdict['probe']}"
    if verdict["differs_from_reference"]:
        head += f"; noted as differing from the reference (a reference choice): {', '.join(verdict['differs_from_reference'])}"
    if verdict["explore"] is not None and verdict["explore"]["code"] == 0:
        head += f"; explore {verdict['explore']['profile']}: nothing found"
    return head


def run_variants(options: Options, names: str | None = None, *, slice_only: bool = False,
                 explore: bool = False, profile: str = "ci") -> tuple[int, dict]:
    """Certify each chosen variant (its slice only, or the whole matrix), explore it when asked; print a line each.
    Exit 0 when every one certified and showed its difference; 1 otherwise; 128+N when a signal stopped a run."""
    chosen = select_variants(names)
    report_dir = options.report_dir.absolute()
    report_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    verdicts = []
    stopped = None
    for variant in chosen:
        folder = report_dir / variant.name
        folder.mkdir(parents=True, exist_ok=True)
        progress = lambda text, name=variant.name: options.progress(f"{name}: {text}")  # noqa: E731
        selection = {"scenario": variant.scenarios, "cases": list(variant.slice)} if slice_only else {}
        run_options = dataclasses.replace(options, command=variant.command, report_dir=folder / "certify",
                                          progress=progress, **selection)
        with open(folder / "certify.txt", "w") as out, contextlib.redirect_stdout(out):
            code, report = certify(run_options)
        explored = None
        if code < 128 and explore:
            explored = _explore(variant, options, folder, profile, progress)
            if explored["code"] >= 128:
                code = explored["code"]
        verdict = judge(variant, code, report, explored)
        verdicts.append(verdict)
        print(line(verdict), flush=True)
        if code >= 128:
            stopped = code
            break
    elapsed = time.monotonic() - started
    ok = stopped is None and all(v["certified"] and not v["vacuous"] for v in verdicts)
    summary = {"schema_version": 1, "duration_s": round(elapsed, 1), "slice_only": slice_only, "explore": explore,
               "jobs": options.jobs, "variants": verdicts,
               "certified": sum(v["certified"] for v in verdicts), "total": len(verdicts),
               "interrupted": stopped is not None}
    path = report_dir / "variants.json"
    path.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    print(f"legal variants certified: {summary['certified']}/{len(chosen)}"
          + (" (slices only)" if slice_only else "") + f"; time: {elapsed:.0f}s; report: {path}")
    if stopped is not None:
        return stopped, summary
    return (0 if ok else 1), summary


def _explore(variant: Variant, options, folder: Path, profile: str, progress) -> dict:
    """`crashproof explore --profile PROFILE` on the variant: a find is a harness defect as a failed case is."""
    explore_options = explore_module.Options(command=variant.command, profile=profile, jobs=options.jobs,
                                             out=folder / "explore-found", report_dir=folder / "explore",
                                             dsn=options.dsn, docker=options.docker, launcher=options.launcher,
                                             progress=progress)
    with open(folder / "explore.txt", "w") as out, contextlib.redirect_stdout(out):
        code, report = explore_module.explore(explore_options)
    explored = (report or {}).get("run", {}).get("explore", {})
    found = [item["case"] for item in explored.get("found", [])]
    found += [f"a hostile {item['op']} call" for item in explored.get("hostile", {}).get("found", [])]
    return {"profile": profile, "code": code, "found": ", ".join(str(f) for f in found if f),
            "report": str(folder / "explore")}


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run `crashproof variants`")
