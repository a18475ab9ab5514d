"""Report targets: the full matrix's report.html (about 1,200 cases) is at most 4 MB and renders in headless
Chromium in under 2 s, each beside a plain json.load of the report.json it was rendered from."""

from __future__ import annotations

import copy
import json
import statistics
import tempfile
import time
from pathlib import Path

from reports import counted
from reports.browser import chromium
from reports.html import Html
from reports.report import load, summary, write
from testhost.runs.certify import certify
from testhost.runs.options import Options

from .figures import Figure, median_of

FULL_MATRIX_CASES = 1200
SAMPLES = 3


def _real_run(directory: Path) -> dict:
    """Every barrier and fault of one scenario, against the reference: real cases to replicate."""
    certify(Options(scenario="at-single", jobs=2, report_dir=directory, progress=lambda line: None))
    return json.loads((directory / "report.json").read_text())


def full_matrix(run: dict, size: int = FULL_MATRIX_CASES) -> dict:
    """A report the size of the full matrix: the run's cases again and again under scenario names of their own
    (as many rows as the real matrix has scenarios, give or take)."""
    cases, copy_number = [], 0
    while len(cases) < size:
        for case in run["cases"]:
            if len(cases) == size:
                break
            twin = copy.deepcopy(case)
            scenario = f"{case['scenario']}-{copy_number}"
            twin["id"] = scenario + twin["id"][len(case["scenario"]):]
            twin["scenario"] = scenario
            cases.append(twin)
        copy_number += 1
    report = dict(run, cases=[c for c in cases if c["fault"] is None] + [c for c in cases if c["fault"] is not None])
    report["summary"] = summary(report["cases"])
    return report


def _page_load_s(browser, uri: str) -> float:
    browser.get("about:blank")
    browser.get(uri)
    return browser.execute_script("var n = performance.getEntriesByType('navigation')[0];"
                                  "return n.loadEventEnd - n.startTime;") / 1000


def full_matrix_page() -> list[Figure]:
    root = Path(tempfile.mkdtemp(prefix="bench-report-"))
    report = full_matrix(_real_run(root / "run"))
    directory = write(report, root / "full").parent
    raw_path = directory / "report.json"
    parse_s = median_of(SAMPLES, lambda: json.loads(raw_path.read_bytes()))
    loaded = load(directory)
    started = time.perf_counter()
    page = Html().render(loaded)
    render_s = time.perf_counter() - started
    (directory / "report.html").write_text(page)
    size_mb = (directory / "report.html").stat().st_size / 1e6
    with chromium() as browser:
        loads = [_page_load_s(browser, (directory / "report.html").as_uri()) for _ in range(SAMPLES)]
        # The first cell opened parses the embedded data; a failing run opens its first failure this way.
        open_s = browser.execute_script("var t = performance.now(); window.crashproofReport.showCell(0);"
                                        "return performance.now() - t;") / 1000
        drawn = browser.execute_script("return document.querySelectorAll('#detail details.case').length")
    load_s = statistics.median(loads)
    cases = len(report["cases"])
    return [
        Figure(f"report.html size ({counted(cases, 'case')})", size_mb, "MB", "<= 4", size_mb <= 4,
               raw_path.stat().st_size / 1e6, "report.json"),
        Figure(f"report.html load in headless Chromium ({cases})", load_s, "s", "< 2", load_s < 2, parse_s,
               "json.load of report.json"),
        Figure("report.html rendered from report.json", render_s, "s", "< 10", render_s < 10, parse_s,
               "json.load of report.json"),
        Figure(f"first cell opened ({counted(drawn, 'case')} drawn)", open_s, "s", "< 1", open_s < 1 and drawn > 0, parse_s,
               "json.load of report.json"),
    ]


BENCHMARKS = [full_matrix_page]
