"""`crashproof report show`: one case in the terminal (its timeline, checks and evidence rows)."""

from __future__ import annotations

import difflib
import json

from . import ReportError, timeline

CELL_WIDTH = 48


def _show(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= CELL_WIDTH else text[:CELL_WIDTH - 1] + "…"


def evidence_columns(rows: list) -> list[str]:
    """The keys of every evidence row, in order of first appearance."""
    columns: list[str] = []
    for row in rows:
        for key in row if isinstance(row, dict) else ():
            if key not in columns:
                columns.append(key)
    return columns


def table(rows: list) -> list[str]:
    """Evidence rows as aligned columns (the keys of every row, in order of first appearance)."""
    columns = evidence_columns(rows)
    if not columns:
        return [_show(r) for r in rows]
    cells = [[_show(r.get(c, "")) if isinstance(r, dict) else "" for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    line = lambda values: "  ".join(v.ljust(w) for v, w in zip(values, widths)).rstrip()  # noqa: E731
    return [line(columns), line(["-" * w for w in widths]), *(line(row) for row in cells)]


def find(report: dict, case_id: str) -> dict:
    for case in report["cases"]:
        if str(case.get("id")) == case_id:
            return case
    close = difflib.get_close_matches(case_id, [str(c.get("id")) for c in report["cases"]], n=3)
    raise ReportError(f"no case {case_id!r} in the report" + (f"; did you mean {', '.join(close)}?" if close else
                                                             "; report.md and report.html list the case ids"))


def case_text(case: dict) -> str:
    reason = f" ({case.get('reason')})" if case.get("reason") else ""
    lines = [f"case {case.get('id')}: {case.get('verdict')}{reason}",
             f"duration {case.get('duration_s')} s"]
    for label, path in (case.get("logs") or {}).items():
        lines.append(f"log {label}: {path}")
    lines += ["", "timeline (case time, server-clock shift, lane, event):",
              timeline.text(case.get("timeline") or []) or "  none recorded in this report for this case",
              "", "checks:"]
    for check in sorted(case.get("checks", []), key=lambda c: (bool(c.get("ok", True)), not c.get("skipped"))):
        mark = ("n/c " if check.get("skipped") else "diff" if check.get("differs") else
                "ok  " if check.get("ok", True) else "FAIL")
        rows = check.get("rows", "?")
        lines.append(f"  {mark} {check.get('name')} ({rows} row{'' if rows == 1 else 's'}): {check.get('rule', '')}")
        for note in ("skipped", "differs", "changed"):
            if check.get(note):
                lines.append(f"         {check[note]}")
        if check.get("evidence"):
            lines += [f"         {row}" for row in table(check["evidence"])]
    return "\n".join(lines)
