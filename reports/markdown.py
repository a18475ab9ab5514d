"""report.md: a pull-request comment with the verdict, counts per fault and per barrier, and each failing case."""

from __future__ import annotations

from . import counted, diagnosis, matrix_view
from .report import Loaded, clock_skew, outcome, standing, which_code

MAX_LISTED = 100  # a comment stays readable (and under the hosts' size limits) on a badly broken run
# The verdict's mark: a certification, a selection whose cases all passed (no failure, not a certification), a run
# that did not pass.
MARK = {"certified": "✅", "selection-passed": "☑️", "not-certified": "❌"}


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _counts_table(title: str, groups: dict) -> list[str]:
    lines = [f"| {title} | passed | failed | error | not run |", "|---|---:|---:|---:|---:|"]
    for key, counts in groups.items():
        lines.append(f"| {_cell(key)} | {counts['pass']} | {counts['fail']} | {counts['error']} | "
                     f"{counts['not-run']} |")
    return lines


def _diagnosis(report: dict) -> list[str]:
    """The failing cases by first failing check, each group's likely cause and what to read (reports/diagnosis.py)."""
    found = diagnosis.groups(report)
    if not found:
        return []
    lines = [f"### {diagnosis.headline(report, found)}", ""]
    for group in found:
        size = f"{len(group.cases)} case{'s' * (len(group.cases) != 1)}"
        if group.diagnosis is not None:
            lines.append(f"- **{size}**, first failing check `{group.check}`: **{group.diagnosis.name}**. "
                         f"Likely cause: {_cell(group.cause)}. Read `{group.diagnosis.reading()}`. "
                         f"Cases: {_cell(group.ids())}")
        else:
            lines.append(f"- **{size}**, first failing check `{group.check}`: no diagnosis. Rule: "
                         f"{_cell(group.rule)}. Cases: {_cell(group.ids())}")
    return lines + [""]


class Markdown:
    name, filename = "md", "report.md"

    def render(self, loaded: Loaded, html_name: str = "report.html") -> str:
        report = loaded.report
        cases = report["cases"]
        _, sentence = outcome(report)
        impl = report.get("implementation", {})
        run = report.get("run", {})
        lines = [f"## crashproof: {MARK[standing(report)]} {sentence}", "",
                 f"`{_cell(impl.get('identity') or '?')}` (`{_cell(impl.get('command', '?'))}`), suite "
                 f"`{report.get('suite_version', '?')}`, {counted(len(cases), 'case')} in {run.get('duration_s', '?')} s, "
                 f"started {run.get('started_at', '?')}", ""]
        if impl.get("code"):  # which code ran: the command alone cannot tell
            lines += ["Implementation: " + "; ".join(f"{label} `{_cell(text)}`" for label, text in which_code(impl)),
                      ""]
        skew = clock_skew(cases)
        if skew["cases"]:
            lines += [f"OS clock skew: {_cell(skew['note'])}"
                      + (f" (not in effect: {', '.join(f'`{i}`' for i in skew['not_in_effect_cases'][:10])}"
                         f"{' …' if len(skew['not_in_effect_cases']) > 10 else ''})" if skew["not_in_effect_cases"]
                         else ""), ""]
        lines += _diagnosis(report)
        for problem in run.get("problems") or []:
            lines.append(f"- run problem: {_cell(problem)}")
        if matrix_view.uncompared_sentence(cases):
            lines.append(f"- {_cell(matrix_view.uncompared_sentence(cases))}")
        lines += ["", *_counts_table("fault", matrix_view.counts_by(cases, lambda c: c.get("fault") or "fault-free")), ""]
        lines += [*_counts_table("barrier", matrix_view.counts_by(cases, lambda c: c.get("barrier") or "fault-free")), ""]
        bad = [c for c in cases if c.get("verdict") != "pass"]
        if bad:
            lines.append(f"### Cases that did not pass ({len(bad)})")
            lines.append("")
            for case in bad[:MAX_LISTED]:
                check = matrix_view.first_failed_check(case)
                why = (f"`{check.get('name')}`: {check.get('rule', '')}" if check else case.get("reason", ""))
                if check and check.get("changed"):
                    why += f" ({check['changed']})"
                lines.append(f"- **{case.get('verdict')}** [`{case.get('id')}`]({html_name}#"
                             f"{matrix_view.anchor(str(case.get('id')))}): {_cell(why)}")
            if len(bad) > MAX_LISTED:
                lines.append(f"- … and {len(bad) - MAX_LISTED} more: see {html_name}")
        return "\n".join(lines) + "\n"
