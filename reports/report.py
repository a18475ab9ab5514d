"""report.json: the versioned machine-readable transcript of a certification run (see docs/report-format.md)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from barriers.contract import VERSION as CONTRACT_VERSION

from . import ReportError, counted

SCHEMA_VERSION = 1
VERDICTS = ("pass", "fail", "error", "not-run")


def summary(cases: list[dict]) -> dict[str, int]:
    counts = {v: sum(1 for c in cases if c["verdict"] == v) for v in VERDICTS}
    found = {"cases": len(cases), "passed": counts["pass"], "failed": counts["fail"], "error": counts["error"],
             "not_run": counts["not-run"]}
    # Only when there are any, so a report without them reads (and validates) as before.
    uncompared = sum(1 for c in cases if any(check.get("skipped") for check in c.get("checks", [])))
    if uncompared:
        found["not_compared"] = uncompared
    differs = sum(1 for c in cases if any(check.get("differs") for check in c.get("checks", [])))
    if differs:
        found["differs_from_reference"] = differs
    changed = sum(1 for c in cases if any(check.get("changed") for check in c.get("checks", []) if not check["ok"]))
    if changed:
        found["failed_on_changed_rules"] = changed
    return found


def fallback_note(fallback_cases: dict[str, list[str]], fallback_barriers: list[str]) -> str:
    """The certificate's sentence on what the harness's fallbacks did instead of the implementation."""
    if not fallback_cases:
        return ""
    note = ("steps the implementation does not offer ran through the reference client or Work store over the "
            "normative schema: " + ", ".join(f"{op} (in {counted(len(ids), 'case')})" for op, ids in fallback_cases.items()))
    if fallback_barriers:
        note += ("; their barriers (" + ", ".join(fallback_barriers) + ") are the fallback's, so they were neither "
                 "required of the implementation nor planned as its cases")
    return note


def fallbacks(cases: list[dict], fallback_barriers: list[str]) -> dict:
    """The implementation's fallback fields as the cases say: which operations fell back, in which cases, and
    the certificate's sentence on it."""
    used = sorted({f for c in cases for f in c.get("fallbacks", [])})
    fallback_cases = {op: sorted(str(c["id"]) for c in cases if op in c.get("fallbacks", [])) for op in used}
    return {"fallbacks": used, "fallback_cases": fallback_cases, "fallback_barriers": fallback_barriers,
            "fallback_note": fallback_note(fallback_cases, fallback_barriers)}


SKEW_VERDICTS = ("in-effect", "unverified", "not-in-effect")  # testhost/impl/skew.py, best first


def clock_skew(cases: list[dict]) -> dict:
    """What the cases say of the implementation's skewed OS clock: each skewed case counted by the least
    verified of its instances, and the sentence the certificate states (never a skew that was not in effect)."""
    verdicts: dict[str, list[str]] = {v: [] for v in SKEW_VERDICTS}
    offsets = set()
    for case in cases:
        records = (case.get("clock_skew") or {}).values()
        if not records:
            continue
        offsets.update(r.get("offset") for r in records)
        verdicts[max((r.get("in_effect", "unverified") for r in records), key=SKEW_VERDICTS.index)].append(
            str(case["id"]))
    skewed = sum(map(len, verdicts.values()))
    note = ""
    if skewed:
        note = (f"the implementation's OS clock was skewed ({', '.join(sorted(offsets))}) in {counted(skewed, 'case')}: "
                f"the skew was in effect in {len(verdicts['in-effect'])} (its hello reported the skewed clock), "
                f"unverified in {len(verdicts['unverified'])}, not in effect in {len(verdicts['not-in-effect'])}; "
                "a case whose skew was not in effect ran with the OS clock as it was")
    return {"cases": skewed, "offsets": sorted(offsets), "in_effect": len(verdicts["in-effect"]),
            "unverified_cases": sorted(verdicts["unverified"]), "not_in_effect_cases": sorted(verdicts["not-in-effect"]),
            "note": note}


def _digest(value: str | None, digits: int | None) -> str:
    return "not taken" if not value else value[:digits] if digits else value


def which_code(implementation: dict, digits: int | None = 16) -> list[tuple[str, str]]:
    """Which code ran, as every renderer shows it (label, text): the command, the working directory, the
    executable and its SHA-256, the script an interpreter ran, where the module came from and its package's
    digest, and the environment that changes which code runs (`implementation.code`; a report without it shows
    the command alone). `digits` cuts each digest for a terminal (None: whole)."""
    code = implementation.get("code") or {}
    rows = [("command", str(implementation.get("command") or "?"))]
    if not code:
        return rows
    rows.append(("cwd", str(code.get("cwd") or "?")))
    via = f" (via {code['executable_via']})" if code.get("executable_via") else ""
    rows.append(("executable", f"{code.get('executable') or 'not found'}{via}, sha256 "
                               f"{_digest(code.get('executable_sha256'), digits)}"))
    if code.get("script"):
        rows.append(("script", f"{code['script']}, sha256 {_digest(code.get('script_sha256'), digits)}"))
    if code.get("module"):
        origin = code.get("module_origin") or code.get("module_error") or "not resolved"
        rows.append(("module", f"{code['module']} from {origin}" + (
            f", package sha256 {_digest(code['module_sha256'], digits)}" if code.get("module_sha256") else "")))
    if code.get("environment"):
        rows.append(("environment", " ".join(f"{k}={v}" for k, v in code["environment"].items())))
    return rows


def which_code_text(implementation: dict) -> list[str]:
    """The block a terminal shows: `Implementation: IDENTITY (declares OPERATIONS)`, as its hello said (before
    any hello: `Implementation:` alone), and which code ran."""
    operations = implementation.get("operations") or []
    head = "Implementation:" + (f" {implementation['identity']}" if implementation.get("identity") else "") + (
        f" (declares {', '.join(operations)})" if operations else "")
    rows = which_code(implementation)
    width = max(len(label) for label, _ in rows)
    return [head] + [f"  {label:{width}}  {text}" for label, text in rows]


def build(*, suite_version: str, implementation: dict, environment: dict, run: dict, cases: list[dict],
          contract: dict | None = None) -> dict[str, Any]:
    return {"schema_version": SCHEMA_VERSION, "suite_version": suite_version,
            "contract": contract or contract_block(cases), "implementation": implementation,
            "environment": environment, "run": run, "summary": summary(cases), "cases": cases}


def contract_block(cases: list[dict]) -> dict:
    """The contract this run certified against, and the one the implementation's hello targets (None: unnamed)."""
    targeted = next((c["contract"] for c in cases if c.get("contract") is not None), None)
    return {"version": CONTRACT_VERSION, "targeted": targeted}


def encode(report: dict) -> str:
    """The report as JSON text: one top-level field per line, and one case per line of `cases`, so a case reads
    (and greps, and diffs) as a line while the whole encodes at the C encoder's speed (an indented dump of a full
    matrix's report took a second of the run's end, this a fifth of it)."""
    fields = []
    for key, value in report.items():
        if key == "cases" and isinstance(value, list) and value:
            body = ",\n".join(json.dumps(case, default=str) for case in value)
            fields.append(f"{json.dumps(key)}: [\n{body}\n]")
        else:
            fields.append(f"{json.dumps(key)}: {json.dumps(value, default=str)}")
    return "{\n" + ",\n".join(fields) + "\n}\n"


def write(report: dict, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "report.json"
    path.write_text(encode(report))
    return path


@dataclass(frozen=True)
class Loaded:
    """A report as read from its directory: the parsed JSON and the exact bytes (which a certificate hashes)."""

    directory: Path
    report: dict[str, Any]
    raw: bytes


def load(directory: Path) -> Loaded:
    """Read DIR/report.json; a missing, unreadable or foreign file is a one-line ReportError."""
    directory = Path(directory)
    path = directory / "report.json"
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ReportError(f"no report.json in {directory}; run `crashproof certify --report-dir {directory}` "
                          "first") from None
    except OSError as exc:
        raise ReportError(f"cannot read {path}: {exc.strerror}") from None
    try:
        report = json.loads(raw)
    except ValueError as exc:
        raise ReportError(f"{path} is not JSON ({exc}); it was cut short or edited") from None
    if not isinstance(report, dict) or not isinstance(report.get("cases"), list):
        raise ReportError(f"{path} is not a crashproof report (no list of cases)")
    if report.get("schema_version") != SCHEMA_VERSION:
        raise ReportError(f"{path} has schema_version {report.get('schema_version')!r}; this crashproof reads "
                          f"{SCHEMA_VERSION}")
    return Loaded(directory, report, raw)


def outcome(report: dict) -> tuple[bool, str]:
    """Whether the run certifies its implementation, and the sentence that says so (or why not), with what the
    contract says of it."""
    ok, sentence = _outcome(report)
    return ok, sentence + contract_clause(report)


def contract_clause(report: dict) -> str:
    """`; contract 6.1` and, where there are any, the failing cases whose failures are rules changed since the
    contract the hello targets and the cases that differ from the reference in one of its choices."""
    block = report.get("contract") or {}
    if not block.get("version"):
        return ""  # a report written before contracts were versioned
    s = report.get("summary") or summary(report.get("cases", []))
    clause = f"; contract {block['version']}"
    changed = s.get("failed_on_changed_rules", 0)
    if changed:
        since = (f"the contract {block['targeted']} the hello targets" if block.get("targeted") is not None
                 else f"contract {block['version'].split('.')[0]}.0")
        clause += (f"; {changed} failing case{'s' * (changed != 1)} fail{'s' * (changed == 1)} rules changed since "
                   f"{since} (docs/contract-changes.md)")
    differs = s.get("differs_from_reference", 0)
    if differs:
        clause += (f"; {differs} case{'s' * (differs != 1)} differ{'s' * (differs == 1)} from the reference in a "
                   "reference choice (a note, not a failure)")
    return clause


def _outcome(report: dict) -> tuple[bool, str]:
    s = report.get("summary") or summary(report.get("cases", []))
    why = _why_not(report)
    if why:
        return False, f"NOT CERTIFIED: {s.get('passed', 0)} of {counted(s.get('cases', 0), 'case')} passed; " + \
            ", ".join(why)
    narrowed = narrowing(report.get("run", {}).get("selection"))
    if narrowed:
        return False, (f"PASSED (a selection: {'; '.join(narrowed)}): {_all_passed(s['cases'])}; "
                       "not a certification")
    return True, f"CERTIFIED: {_all_passed(s['cases'])}"


def _all_passed(cases: int) -> str:
    return "its 1 case passed" if cases == 1 else f"all {counted(cases, 'case')} passed"


def _why_not(report: dict) -> list[str]:
    """What keeps a run from passing at all: failed, error and not-run cases, run problems, an early stop, no case."""
    s = report.get("summary") or summary(report.get("cases", []))
    problems = report.get("run", {}).get("problems") or []
    why = [f"{s.get(k, 0)} {label}" for k, label in (("failed", "failed"), ("error", "error"),
                                                       ("not_run", "not run")) if s.get(k)]
    if problems:
        why.append(counted(len(problems), "run problem"))
    if report.get("interrupted") or report.get("partial"):
        stopped = report.get("run", {}).get("stopped_by")
        why.append("the run stopped early" + (f" ({stopped})" if stopped else "") + ": a partial report")
    empty_slice = report.get("run", {}).get("empty_slice")
    if not s.get("cases") and not empty_slice:
        why.append("no case ran")
    return why


STANDINGS = ("certified", "selection-passed", "not-certified")


def standing(report: dict) -> str:
    """How every rendering shows the verdict: `certified` (the whole matrix passed), `selection-passed` (every
    case of a selection passed: no failure, and no certification either), `not-certified` (something failed)."""
    if _why_not(report):
        return "not-certified"
    return "selection-passed" if narrowing(report.get("run", {}).get("selection")) else "certified"


def narrowing(selection: dict | None) -> list[str]:
    """What keeps a run from being the whole matrix of its catalog (a filter, named cases, one shard of several,
    a merge of reports that are not one run's shards); empty: the whole matrix."""
    if selection is None:
        return ["the report records no selection"]
    found = [f"--{key} {','.join(map(str, selection[key]))}" for key in ("scenario", "barrier", "fault")
             if selection.get(key)]
    if selection.get("cases"):
        found.append(counted(len(selection["cases"]), "named case"))
    if selection.get("shard"):
        found.append(f"shard {selection['shard']}")
    if selection.get("merged"):
        found.append(str(selection["merged"]))
    if selection.get("explore"):
        found.append(f"explore's generated programs, profile {selection['explore']}")
    return found


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
            if "skipped" in check and not (isinstance(check["skipped"], str) and check["skipped"]
                                           and check.get("ok") is True):
                problems.append(f"case {case.get('id')}: check {check.get('name')} not compared needs a reason "
                                "and ok true")
    if report.get("summary") != summary(report.get("cases", [])):
        problems.append("summary does not add up to the cases")
    return problems
