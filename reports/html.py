"""report.html: one self-contained page. The summary, the matrix and the failures are plain HTML (readable
with JavaScript off); each case's detail is drawn on demand from compact JSON embedded in the page."""

from __future__ import annotations

import json
import re
from html import escape
from importlib import resources

from . import counted, diagnosis, matrix_view, timeline
from .report import Loaded, clock_skew, outcome, standing, which_code
from .text import evidence_columns

# Nothing may leave the page: no fetch, no image, no font, no frame (the page opens from disk, offline).
CSP = ("default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:; "
       "form-action 'none'; base-uri 'none'")
FAULT_MODEL = {
    "kill": "kill (SIGKILL of the implementation's process at the barrier)",
    "disconnect": "disconnect (Toxiproxy cuts the implementation's database connections)",
    "lost-commit-reply": "lost-commit-reply (the COMMIT reaches PostgreSQL, its reply never comes back)",
    "db-crash": "db-crash (PostgreSQL is killed and restarted through crash recovery)",
    "pause": "pause (SIGSTOP past the lease while a second processor takes over, then SIGCONT)",
    "stall": "stall (SIGSTOP inside the open transaction, its server session ended, a second processor takes the "
             "lease over, then SIGCONT)",
}
FAULT_SHORT = {"kill": "kill", "disconnect": "disc", "lost-commit-reply": "lost", "db-crash": "crash", "pause": "pause",
               "stall": "stall"}
STATIC_EVIDENCE_ROWS = 20
# The verdict's box: green for a certification, its own blue for a selection whose cases all passed (no failure,
# and no certification either), red for a run that did not pass.
VERDICT_CLASS = {"certified": "ok", "selection-passed": "selection", "not-certified": "bad"}


def _asset(name: str) -> str:
    return resources.files("reports").joinpath("assets", name).read_text()


def _show(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def fault_model(report: dict) -> str:
    faults = sorted({c.get("fault") for c in report["cases"] if c.get("fault")})
    barriers = sorted({c.get("barrier") for c in report["cases"] if c.get("barrier")})
    scenarios = {matrix_view.row(c) for c in report["cases"]}
    described = "; ".join(FAULT_MODEL.get(f, f) for f in faults) or "none (fault-free runs only)"
    return (f"Each case runs one scenario's timeline through the implementation against a real PostgreSQL behind a "
            f"real Toxiproxy, with the server clock moved by the harness through libfaketime. A faulted case injects "
            f"exactly one fault at one hit of one named barrier (a point just before or after a commit of the "
            f"implementation's transaction), lets the implementation recover, runs it until nothing is due, and "
            f"judges the durable tables: every check names the sentence of the spec it guards, and a failed check "
            f"shows the rows that break it. Each scenario also runs once without a fault, as the baseline its "
            f"faulted cases are compared with. This run: {counted(len(scenarios), 'scenario')}, "
            f"{counted(len(barriers), 'barrier')}, "
            f"faults: {described}.")


def _facts(rows: list[tuple[str, str]]) -> str:
    return "<table class=facts>" + "".join(f"<tr><th>{escape(k)}</th><td>{v}</td></tr>" for k, v in rows) + "</table>"


def _header(report: dict) -> str:
    _, sentence = outcome(report)
    impl, run, env = report.get("implementation", {}), report.get("run", {}), report.get("environment", {})
    facts = [("implementation", f"<b>{escape(str(impl.get('identity') or '?'))}</b>")]
    # Which code ran, whole digests: the command, its working directory, executable, module origin, environment.
    facts += [(label, f"<code>{escape(text)}</code>") for label, text in which_code(impl, digits=None)]
    facts.append(("launcher", escape(str(impl.get("launcher", "?")))))
    if impl.get("fallback_note"):
        facts.append(("fallbacks", escape(impl["fallback_note"])))
    skew = clock_skew(report.get("cases", []))
    if skew["cases"]:
        facts.append(("OS clock skew", escape(skew["note"]) + "".join(
            f"<br>not in effect: <code>{escape(case_id)}</code>" for case_id in skew["not_in_effect_cases"][:20])))
    facts += [("suite version", f"<code>{escape(str(report.get('suite_version', '?')))}</code>"),
              ("date", escape(str(run.get("started_at", "?")))),
              ("duration", f"{escape(str(run.get('duration_s', '?')))} s"),
              ("selection", f"<code>{escape(_show(run.get('selection', {})))}</code>")]
    environment = [(str(k), escape(_show(v))) for k, v in env.items()]
    problems = "".join(f"<li>{escape(str(p))}</li>" for p in run.get("problems") or [])
    s = report.get("summary", {})
    counts = (f"{counted(s.get('cases', 0), 'case')}: {s.get('passed', 0)} passed, {s.get('failed', 0)} failed, "
              f"{s.get('error', 0)} error, {s.get('not_run', 0)} not run")
    uncompared = matrix_view.uncompared_sentence(report.get("cases", []))
    return (f"<h1>crashproof certification report</h1>"
            f"<div class='verdict {VERDICT_CLASS[standing(report)]}' id=verdict>{escape(sentence)}</div>"
            f"<p>{escape(counts)}</p>"
            + _diagnosis(report)
            + (f"<p class=not-compared id=not-compared>{escape(uncompared)}</p>" if uncompared else "")
            + (f"<h2>Run problems</h2><ul>{problems}</ul>" if problems else "")
            + _facts(facts)
            + f"<h2>Fault model</h2><p class=model>{escape(fault_model(report))}</p>"
            + f"<details><summary>Environment</summary>{_facts(environment)}</details>")


def _code_spans(text: str) -> str:
    """Plain text with its `backticked` spans as code."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escape(text))


def _diagnosis(report: dict) -> str:
    """The failing cases by first failing check, each group's likely cause and what to read (reports/diagnosis.py),
    right under the verdict."""
    found = diagnosis.groups(report)
    if not found:
        return ""
    items = []
    for group in found:
        size = f"{len(group.cases)} case{'s' * (len(group.cases) != 1)}"
        cases = ", ".join(f"<a href='#{escape(matrix_view.anchor(str(c.get('id'))))}'><code>{escape(str(c.get('id')))}"
                          f"</code></a>" for c in group.cases[:diagnosis.SHOWN_CASES])
        left = len(group.cases) - diagnosis.SHOWN_CASES
        more = f" and {left} more" if left > 0 else ""
        if group.diagnosis is not None:
            body = (f"<b class=diagnosis-name>{escape(group.diagnosis.name)}</b>"
                    f"<p class=cause>Likely cause: {_code_spans(group.cause)}</p>"
                    f"<p class=read>Read: <code>{escape(group.diagnosis.reading())}</code></p>")
        else:
            body = f"<b class=diagnosis-name>no diagnosis</b><p class=rule>Rule: {escape(group.rule)}</p>"
        items.append(f"<li data-diagnosis='{escape(group.diagnosis.name if group.diagnosis else '')}'>"
                     f"<b>{size}</b>, first failing check <code>{escape(group.check)}</code>: {body}"
                     f"<p class=cases>Cases: {cases}{more}</p></li>")
    return (f"<section id=diagnosis><h2>{escape(diagnosis.headline(report, found))}</h2>"
            f"<ul>{''.join(items)}</ul></section>")


def _matrix(m: matrix_view.Matrix) -> str:
    groups: list[tuple[str, int]] = []
    for barrier, _ in m.columns:
        if groups and groups[-1][0] == barrier:
            groups[-1] = (barrier, groups[-1][1] + 1)
        else:
            groups.append((barrier, 1))
    top = "".join(f"<th class=barrier colspan={n}>{escape(b)}</th>" for b, n in groups)
    faults = "".join(f"<th class=fault title='{escape(f)}'>{escape(FAULT_SHORT.get(f, f) or '–')}</th>"
                     for _, f in m.columns)
    body = []
    for r in m.rows:
        cells = []
        for col in m.columns:
            cell = m.cells.get((r, col))
            if cell is None:
                cells.append("<td class=none></td>")
                continue
            counts = cell.counts
            bad = counts["fail"] + counts["error"]
            shown = f"{bad}/{len(cell.cases)}" if bad else str(len(cell.cases))
            title = f"{r} × {col[0]} {col[1]}: " + ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
            cells.append(f"<td class='v-{cell.verdict}'><a href='#cell-{cell.index}' data-cell={cell.index} "
                         f"title='{escape(title)}'>{shown}</a></td>")
        body.append(f"<tr><th class=scenario>{escape(r)}</th>{''.join(cells)}</tr>")
    legend = ("<p class=legend>" + "".join(f"<span class='badge v-{v}'>{v}</span>" for v in matrix_view.SEVERITY) +
              " a cell shows its case count, or failed/cases; click a cell for its cases</p>")
    return (f"<h2>Matrix: scenarios × (barrier, fault)</h2>{legend}<div class=matrix-wrap><table class=matrix>"
            f"<thead><tr><th rowspan=2>scenario</th>{top}</tr><tr>{faults}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table></div><div id=detail></div>")


def _evidence_table(rows: list) -> str:
    columns = evidence_columns(rows)
    if not columns:
        return "<table class=evidence><tr><th>value</th></tr>" + "".join(
            f"<tr><td class=mono>{escape(_show(r))}</td></tr>" for r in rows) + "</table>"
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td class=mono>{escape(_show(r.get(c, '')) if isinstance(r, dict) else '')}</td>"
                                    for c in columns) + "</tr>" for r in rows)
    return f"<table class=evidence><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _failures(report: dict) -> str:
    bad = [c for c in report["cases"] if c.get("verdict") != "pass"]
    if not bad:
        return "<h2>Cases that did not pass</h2><p>None.</p>"
    parts = [f"<h2>Cases that did not pass ({len(bad)})</h2>"]
    for case in bad:
        case_id = str(case.get("id"))
        checks = []
        for check in case.get("checks", []):
            if check.get("ok", True):
                continue
            evidence = check.get("evidence") or []
            more = (f"<p class=muted>{counted(len(evidence) - STATIC_EVIDENCE_ROWS, 'more row')} in the case's "
                    "detail</p>"
                    if len(evidence) > STATIC_EVIDENCE_ROWS else "")
            changed = (f"<p class='muted changed'>{escape(str(check['changed']))}</p>" if check.get("changed")
                       else "")
            checks.append(f"<p><code>{escape(str(check.get('name')))}</code>: {escape(str(check.get('rule', '')))}</p>"
                          + changed + (_evidence_table(evidence[:STATIC_EVIDENCE_ROWS]) if evidence else "") + more)
        parts.append(f"<section class=case-static id='{escape(matrix_view.anchor(case_id))}'>"
                     f"<h3><span class='badge v-{escape(str(case.get('verdict')))}'>{escape(str(case.get('verdict')))}"
                     f"</span> <a href='#{escape(matrix_view.anchor(case_id))}' data-case='{escape(case_id)}'>"
                     f"<code>{escape(case_id)}</code></a></h3><p>{escape(str(case.get('reason', '')))}</p>"
                     f"{_skew_line(case)}{''.join(checks)}</section>")
    return "".join(parts)


def _skew_line(case: dict) -> str:
    """The OS clock skew each instance of the case ran with, as verified."""
    skews = case.get("clock_skew") or {}
    return ("<p>OS clock skew: " + ", ".join(f"{escape(label)} {escape(str(r.get('offset')))} "
                                            f"({escape(str(r.get('in_effect')))})" for label, r in skews.items())
            + "</p>") if skews else ""


class _Strings:
    def __init__(self):
        self.index: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        return self.index.setdefault(text, len(self.index))


def compact(report: dict, m: matrix_view.Matrix) -> dict:
    """The page's data: strings interned, passing cases without event details (their evidence is empty)."""
    strings = _Strings()
    check_refs: dict[tuple[int, int], int] = {}
    cases = []
    position = {id(c): i for i, c in enumerate(report["cases"])}
    for case in report["cases"]:
        case_id = str(case.get("id"))
        checks = []
        for check in case.get("checks", []):
            ref = check_refs.setdefault((strings(str(check.get("name"))), strings(str(check.get("rule", "")))),
                                        len(check_refs))
            # 1 passed, 0 failed, 2 not compared, 3 differs from the reference (a reference choice); then its
            # evidence (possibly empty) and the note's string: why not compared, how it differs, or for a failure
            # the contract change that moved its rule
            status = 2 if check.get("skipped") else 3 if check.get("differs") else 1 if check.get("ok", True) else 0
            note = check.get("skipped") or check.get("differs") or (None if status else check.get("changed"))
            entry = [ref, status, check.get("rows", len(check.get("evidence") or []))]
            if check.get("evidence") or note:
                entry.append(check.get("evidence") or [])
            if note:
                entry.append(strings(str(note)))
            checks.append(entry)
        events = []
        for event in case.get("timeline") or []:
            row = [round(float(event.get("t", 0)), 3), strings(str(event.get("event", "?"))),
                   strings(timeline.lane(event)), strings(timeline.label(event))]
            if event.get("event") == "clock":
                row.append(float(event.get("shift_s", 0) or 0))
            events.append(row)
        entry = {"i": case_id, "a": matrix_view.anchor(case_id), "v": case.get("verdict"), "r": case.get("reason", ""),
                 "d": case.get("duration_s"), "k": m.cell_of[case_id], "c": checks, "e": events}
        if case.get("verdict") != "pass":
            entry["x"] = [{k: v for k, v in e.items() if k not in ("t", "event")} for e in case.get("timeline") or []]
        if case.get("logs"):
            entry["l"] = case["logs"]
        cases.append(entry)
    cells = [[cell.row, f"{cell.column[0]} {cell.column[1]}".strip(), [position[id(c)] for c in cell.cases]]
             for cell in sorted(m.cells.values(), key=lambda c: c.index)]
    return {"strings": list(strings.index), "checks": [list(k) for k in check_refs], "cells": cells, "cases": cases}


def _embed(data: dict) -> str:
    # Inside <script> only "</" can end the element early; JSON allows "<\/" for it.
    return json.dumps(data, separators=(",", ":"), default=str, ensure_ascii=False).replace("</", "<\\/")


class Html:
    name, filename = "html", "report.html"

    def render(self, loaded: Loaded) -> str:
        report = loaded.report
        m = matrix_view.build(report["cases"])
        _, sentence = outcome(report)
        return (f"<!doctype html><html lang=en><head><meta charset=utf-8>"
                f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\">"
                f"<meta name=viewport content='width=device-width, initial-scale=1'>"
                f"<title>crashproof: {escape(sentence)}</title><style>{_asset('report.css')}</style></head><body>"
                f"{_header(report)}{_matrix(m)}{_failures(report)}"
                f"<script type='application/json' id=report-data>{_embed(compact(report, m))}</script>"
                f"<script>{_asset('report.js')}</script></body></html>\n")
