"""junit.xml: one testcase per matrix case (classname = scenario, name = barrier/fault/hit) for CI systems."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

from . import counted, timeline
from .matrix_view import not_compared
from .report import Loaded

# Characters XML 1.0 cannot carry at all (an implementation's stderr or evidence may hold them).
_NOT_XML = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
MAX_EVIDENCE_ROWS = 50


def _xml(text: object) -> str:
    return _NOT_XML.sub("\ufffd", str(text))


def case_name(case: dict) -> str:
    """barrier/fault/hit[#repeat] (the id without its scenario), or `fault-free` for a scenario's own run."""
    case_id, scenario = str(case.get("id")), str(case.get("scenario") or "")
    if scenario and case_id.startswith(scenario + "/"):
        return case_id[len(scenario) + 1:]
    return "fault-free" if case_id == scenario else case_id


def _failure_text(case: dict) -> str:
    parts = []
    for check in case.get("checks", []):
        if check.get("ok", True):
            continue
        parts.append(f"{check.get('name')}: {check.get('rule', '')}")
        if check.get("changed"):
            parts.append(f"  {check['changed']}")
        evidence = check.get("evidence") or []
        parts += [f"  {json.dumps(row, default=str)}" for row in evidence[:MAX_EVIDENCE_ROWS]]
        if len(evidence) > MAX_EVIDENCE_ROWS:
            parts.append(f"  … {counted(len(evidence) - MAX_EVIDENCE_ROWS, 'more row')} in report.json")
    return "\n".join(parts) or str(case.get("reason", ""))


class JUnit:
    name, filename = "junit", "junit.xml"

    def render(self, loaded: Loaded) -> str:
        report = loaded.report
        suites: dict[str, list[dict]] = {}
        for case in report["cases"]:
            suites.setdefault(str(case.get("scenario") or case.get("id")), []).append(case)
        contract = (report.get("contract") or {}).get("version")
        root = ET.Element("testsuites", name=f"crashproof {report.get('suite_version', '')}".strip()
                          + (f" contract {contract}" if contract else ""))
        totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0, "time": 0.0}
        for scenario, cases in suites.items():
            suite = ET.SubElement(root, "testsuite", name=_xml(scenario))
            counts = {"tests": len(cases), "failures": 0, "errors": 0, "skipped": 0, "time": 0.0}
            for case in cases:
                duration = float(case.get("duration_s") or 0)
                counts["time"] += duration
                element = ET.SubElement(suite, "testcase", classname=_xml(scenario), name=_xml(case_name(case)),
                                        time=f"{duration:.3f}")
                verdict, reason = case.get("verdict"), _xml(case.get("reason", ""))
                if verdict == "fail":
                    counts["failures"] += 1
                    ET.SubElement(element, "failure", message=reason, type="check").text = _xml(_failure_text(case))
                elif verdict == "error":
                    counts["errors"] += 1
                    ET.SubElement(element, "error", message=reason, type="harness").text = reason
                elif verdict != "pass":
                    counts["skipped"] += 1
                    ET.SubElement(element, "skipped", message=reason or str(verdict))
                notes = [f"not compared: {c.get('name')}: {c['skipped']}" for c in not_compared(case)]
                notes += [f"{c.get('name')}: {c['differs']}" for c in case.get("checks", []) if c.get("differs")]
                if case.get("timeline") or notes:
                    ET.SubElement(element, "system-out").text = _xml("\n".join(
                        notes + ([timeline.text(case["timeline"])] if case.get("timeline") else [])))
            for key, value in counts.items():
                suite.set(key, f"{value:.3f}" if key == "time" else str(value))
                totals[key] += value
        for key, value in totals.items():
            root.set(key, f"{value:.3f}" if key == "time" else str(value))
        ET.indent(root, space=" ")
        return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
