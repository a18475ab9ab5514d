"""Issue 17, item 1, on real components. A pass 2 s before an Every-60 s instant, then an update: before, the
faulted cases of the pass failed scenario-expectations and crash-equivalence although both timelines were
right; now they pass, those two checks reported as not compared and why, model-agreement judging them, while
the faulted cases of the last pass are still held to the fault-free run. The reports render it. And a pass
2 s before an instant of the schedule it decides: a fault that stops it leaves the decision to the recovery,
past the instant, which failed model-agreement too; the model now follows that timeline."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from reports import compare
from reports.report import load, validate, write
from reports.text import case_text

pytestmark = pytest.mark.world

CATALOG = Path(__file__).parent / "scenarios"
SCENARIO = "shift-crosses-instant"
BARRIER = "schedule-decision-after-commit"


@pytest.fixture(scope="module")
def shifted_report(tmp_path_factory):
    directory = tmp_path_factory.mktemp("shifted")
    done = subprocess.run([sys.executable, "-m", "testhost.cli", "certify", "--jobs", "2", "--catalog", str(CATALOG),
                           "--scenario", SCENARIO, "--barrier", BARRIER, "--fault", "kill,pause",
                           "--report-dir", str(directory)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return directory


def _cases(directory: Path) -> dict[str, dict]:
    return {c["id"]: c for c in json.loads((directory / "report.json").read_text())["cases"]}


def _checks(case: dict) -> dict[str, dict]:
    return {c["name"]: c for c in case["checks"]}


def test_faulted_cases_of_the_pass_before_the_instant_pass_with_the_fault_free_judges_not_compared(shifted_report):
    cases = _cases(shifted_report)
    for fault, shift in (("kill", 3), ("pause", 6)):
        case = cases[f"{SCENARIO}/{BARRIER}/{fault}/1"]
        checks = _checks(case)
        assert case["verdict"] == "pass", case["reason"]
        for name in ("crash-equivalence", "scenario-expectations"):
            assert checks[name]["ok"] is True and checks[name]["skipped"].startswith("not compared: ")
            assert f"by {shift} s" in checks[name]["skipped"]
            [difference] = checks[name]["evidence"]
            assert difference["schedule"] == "export"
            assert [o["kind"] for o in difference["fault_free_timeline"]["occurrences"]] == ["recovery"]
            assert [(o["generation"], o["kind"]) for o in difference["this_timeline"]["occurrences"]] == [
                (1, "nominal"), (2, "coalesced")]
        assert checks["model-agreement"]["ok"] and "skipped" not in checks["model-agreement"]
        assert checks["no-vacuous-checks"]["ok"] and checks["no-vacuous-checks"]["rows"] > 0


def test_faulted_cases_of_the_last_pass_and_the_fault_free_run_are_still_compared(shifted_report):
    cases = _cases(shifted_report)
    for case_id in (f"{SCENARIO}/{BARRIER}/kill/2", f"{SCENARIO}/{BARRIER}/pause/2"):
        checks = _checks(cases[case_id])
        assert cases[case_id]["verdict"] == "pass"
        assert checks["crash-equivalence"]["ok"] and "skipped" not in checks["crash-equivalence"]
        assert checks["crash-equivalence"]["rows"] == 2
        assert checks["scenario-expectations"]["ok"] and "skipped" not in checks["scenario-expectations"]
    fault_free = _checks(cases[SCENARIO])
    assert "skipped" not in fault_free["scenario-expectations"] and "crash-equivalence" not in fault_free


def test_the_lint_names_the_step_whose_faulted_cases_were_not_compared(shifted_report):
    done = subprocess.run([sys.executable, "-m", "testhost.cli", "scenarios", "--lint", "--catalog", str(CATALOG)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    lines = [line for line in done.stdout.splitlines() if line.startswith("warning: ")]
    [line] = [line for line in lines if "shift-crosses-instant.toml" in line]
    assert "shift-crosses-instant.toml: step 4 (process)" in line and "+60s" in line
    [other] = [line for line in lines if "interrupted-before-instant.toml" in line]
    assert "step 3 (process)" in other and "before it decides x leaves it to the recovery" in other
    # The step the lint names is the pass whose barrier hits are the first ones (hit 1); the last pass is hit 2.
    timeline = _cases(shifted_report)[f"{SCENARIO}/{BARRIER}/kill/1"]["timeline"]
    fault_at = next(i for i, e in enumerate(timeline) if e["event"] == "fault")
    assert [e["index"] for e in timeline[:fault_at] if e["event"] == "step"][-1] == 3


def test_the_reports_show_the_checks_not_compared_and_merge_keeps_them(shifted_report, tmp_path):
    loaded = load(shifted_report)
    assert validate(loaded.report) == []
    assert loaded.report["summary"]["not_compared"] == 2 and loaded.report["summary"]["passed"] == 5
    markdown = (shifted_report / "report.md").read_text()
    assert "2 cases not compared with the fault-free run" in markdown and "shift-crosses-instant (2)" in markdown
    page = (shifted_report / "report.html").read_text()
    assert "id=not-compared>2 cases not compared" in page
    junit = (shifted_report / "junit.xml").read_text()
    assert junit.count("not compared: crash-equivalence: not compared: the model") == 2
    shown = case_text(_cases(shifted_report)[f"{SCENARIO}/{BARRIER}/kill/1"])
    assert "  n/c  crash-equivalence (0 rows)" in shown and "  n/c  scenario-expectations (0 rows)" in shown
    # Merge: two disjoint halves give back both cases not compared; diff sees a comparison that changed.
    cases = loaded.report["cases"]
    halves = []
    for index, part in enumerate((cases[:3], cases[3:])):
        directory = tmp_path / f"part{index}"
        write({**loaded.report, "cases": part, "summary": None}, directory)
        halves.append(load(directory))
    merged = compare.merge(halves, tmp_path / "merged")
    assert merged["summary"]["not_compared"] == 2 and validate(merged) == []
    compared_everywhere = json.loads(json.dumps(loaded.report))
    for case in compared_everywhere["cases"]:
        for check in case["checks"]:
            check.pop("skipped", None)
    write(compared_everywhere, tmp_path / "old")
    changes = compare.diff(load(tmp_path / "old"), loaded)
    assert sorted(i for i, _, _ in changes.comparison) == [f"{SCENARIO}/{BARRIER}/kill/1",
                                                           f"{SCENARIO}/{BARRIER}/pause/1"]
    assert any(line.startswith("not compared now ") for line in changes.lines()) and not changes.new_failures


def test_a_fault_that_stops_the_pass_before_its_decision_is_judged_by_the_timeline_it_left(tmp_path):
    done = subprocess.run([sys.executable, "-m", "testhost.cli", "certify", "--jobs", "2", "--catalog", str(CATALOG),
                           "--scenario", "interrupted-before-instant", "--barrier", "schedule-decision-before-commit",
                           "--fault", "kill", "--report-dir", str(tmp_path)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    cases = _cases(tmp_path)
    interrupted = _checks(cases["interrupted-before-instant/schedule-decision-before-commit/kill/1"])
    [chosen] = [e for e in cases["interrupted-before-instant/schedule-decision-before-commit/kill/1"]["timeline"]
                if e["event"] == "model-timeline"]
    assert chosen["left_to_recovery"] == ["x"]
    assert not [e for e in cases["interrupted-before-instant"]["timeline"] if e["event"] == "model-timeline"]
    assert interrupted["model-agreement"]["ok"] and "skipped" not in interrupted["model-agreement"]
    assert interrupted["crash-equivalence"]["skipped"].startswith("not compared: ")
    assert "the faulted pass left x to the recovery" in interrupted["crash-equivalence"]["skipped"]
    [difference] = interrupted["crash-equivalence"]["evidence"]
    assert sorted((o["kind"], o["first_nominal_utc"], o["last_nominal_utc"])
                  for o in difference["this_timeline"]["occurrences"]) == [
        ("coalesced", "2031-03-03T00:01:30.000000Z", "2031-03-03T00:01:30.000000Z"),
        ("recovery", "2031-03-03T00:00:30.000000Z", "2031-03-03T00:01:00.000000Z")]
    last = _checks(cases["interrupted-before-instant/schedule-decision-before-commit/kill/2"])
    assert last["crash-equivalence"]["ok"] and "skipped" not in last["crash-equivalence"]


def test_report_html_draws_a_check_not_compared_as_such_with_its_reason_and_evidence(shifted_report):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as seen
    from selenium.webdriver.support.ui import WebDriverWait

    from reports.browser import chromium, requests_made
    from reports.matrix_view import anchor

    page = shifted_report / "report.html"
    case_id = f"{SCENARIO}/{BARRIER}/kill/1"
    with chromium() as browser:
        browser.get(page.as_uri() + "#" + anchor(case_id))
        case = WebDriverWait(browser, 10).until(seen.visibility_of_element_located((By.ID, f"d-{anchor(case_id)}")))
        rows = case.find_elements(By.CSS_SELECTOR, "table.checks tr.not-compared")
        assert sorted(r.find_elements(By.TAG_NAME, "td")[1].text for r in rows) == ["crash-equivalence",
                                                                                    "scenario-expectations"]
        assert all(r.find_elements(By.TAG_NAME, "td")[0].text == "–" for r in rows)
        assert all("not compared: the model's picture" in r.text for r in rows)
        assert not case.find_elements(By.CSS_SELECTOR, "table.checks tr.failed")
        evidence = " ".join(td.text for td in case.find_elements(By.CSS_SELECTOR, "table.evidence td"))
        assert "fault_free_timeline" in " ".join(th.text for th in case.find_elements(By.CSS_SELECTOR,
                                                                                      "table.evidence th"))
        assert "recovery" in evidence
        assert browser.find_element(By.ID, "not-compared").text.startswith("2 cases not compared")
        assert requests_made(browser) == [page.as_uri()]  # the page itself and nothing else
        assert browser.get_log("browser") == []
