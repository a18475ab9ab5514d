"""report.html of a run with planted failures, opened in real headless Chromium (Selenium, Debian's chromedriver)."""

from __future__ import annotations

import json
import shutil

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as seen
from selenium.webdriver.support.ui import WebDriverWait

from reports.browser import chromium, requests_made
from reports.matrix_view import anchor

pytestmark = pytest.mark.world
FAILING = "at-single/schedule-decision-after-commit/kill/1"


@pytest.fixture
def page(mutant_report, tmp_path):
    shutil.copytree(mutant_report, tmp_path / "r")
    return tmp_path / "r" / "report.html"


def test_the_page_shows_the_verdict_and_a_failing_cells_timeline_and_evidence_without_any_request(page, tmp_path):
    report = json.loads((page.parent / "report.json").read_text())
    with chromium() as browser:
        browser.get(page.as_uri())
        browser.save_screenshot(str(tmp_path / "summary.png"))
        assert browser.find_element(By.ID, "verdict").text.startswith("NOT CERTIFIED")
        header = browser.find_element(By.TAG_NAME, "body").text
        for fact in (report["implementation"]["command"], report["suite_version"], report["run"]["started_at"],
                     "Fault model", "at-single"):
            assert fact in header
        # Which code ran: the folder it started in, the executable and its whole digest, where the module came from.
        code = report["implementation"]["code"]
        facts = browser.find_element(By.CSS_SELECTOR, "table.facts").text
        assert f"cwd {code['cwd']}" in facts and code["executable_sha256"] in facts
        assert f"mutants from {code['module_origin']}" in facts and code["module_sha256"] in facts
        failing = browser.find_elements(By.CSS_SELECTOR, "table.matrix td.v-fail a")
        passing = browser.find_elements(By.CSS_SELECTOR, "table.matrix td.v-pass a")
        assert len(failing) == report["summary"]["failed"] and len(passing) == 1  # one case per cell here
        kill = next(a for a in failing if "kill" in a.get_attribute("title"))
        assert kill.text == "1/1"
        kill.click()
        case = WebDriverWait(browser, 10).until(seen.visibility_of_element_located((By.ID, f"d-{anchor(FAILING)}")))
        svg = case.find_element(By.CSS_SELECTOR, "svg.timeline")
        assert svg.find_elements(By.CSS_SELECTOR, "line[stroke='#d0301f']"), "no fault drawn"
        assert "recovery" in svg.text and "harness" in svg.text and "server clock" in svg.text
        titles = [t.get_attribute("textContent") for t in svg.find_elements(By.TAG_NAME, "title")]
        assert any("schedule-decision-after-commit" in t for t in titles)  # the barrier hits are drawn
        evidence = case.find_elements(By.CSS_SELECTOR, "table.checks tr.failed")
        names = {row.find_elements(By.TAG_NAME, "td")[1].text for row in evidence}
        assert "instant-decided-once" in names
        rows = case.find_elements(By.CSS_SELECTOR, "table.evidence td")
        assert any("coalesced" in r.text for r in rows)  # the overlapping occurrence rows themselves
        browser.execute_script("arguments[0].scrollIntoView()", case)
        browser.save_screenshot(str(tmp_path / "case.png"))
        assert requests_made(browser) == [page.as_uri()]  # the page itself and nothing else
        assert browser.get_log("browser") == []  # no script error, no CSP violation


def test_a_link_from_report_md_opens_its_case(page):
    with chromium() as browser:
        browser.get(page.as_uri() + "#" + anchor(FAILING))
        case = WebDriverWait(browser, 10).until(seen.visibility_of_element_located((By.ID, f"d-{anchor(FAILING)}")))
        assert case.get_attribute("open") is not None and case.find_elements(By.CSS_SELECTOR, "svg.timeline")


def test_the_summary_and_failures_read_with_javascript_off(page):
    with chromium(javascript=False) as browser:
        browser.get(page.as_uri())
        assert browser.find_element(By.ID, "verdict").text.startswith("NOT CERTIFIED")
        assert browser.find_elements(By.CSS_SELECTOR, "table.matrix td.v-fail")
        static = browser.find_element(By.ID, anchor(FAILING))
        assert "instant-decided-once" in static.text
        assert static.find_elements(By.CSS_SELECTOR, "table.evidence td")
        assert browser.find_elements(By.ID, "detail")[0].text == ""  # nothing drawn: the script did not run


def test_a_rule_changed_since_the_targeted_contract_and_a_reference_choice_read_as_such(page):
    """A failure of a rule changed after the contract the hello targets carries the change, with JavaScript and
    without; a reference-choice difference is drawn as a difference (≠), not a failure, with its note."""
    from barriers.contract import changed_note
    from reports.render import render
    from reports.report import summary
    from testhost.judge.contract_notes import DIFFERS

    path = page.parent / "report.json"
    report = json.loads(path.read_text())
    failing = next(c for c in report["cases"] if c["id"] == FAILING)
    check = next(c for c in failing["checks"] if not c["ok"])
    check["changed"] = changed_note("cancel-keeps-committed", 4)
    passing = next(c for c in report["cases"] if c["verdict"] == "pass")
    passing["checks"].append({"name": "idle-pass-keeps-cursor", "rule": "reference: ...", "ok": True, "rows": 2,
                              "evidence": [{"schedule_id": "s", "decided_meanwhile": "nothing"}],
                              "differs": DIFFERS.format(name="idle-pass-keeps-cursor")})
    report["contract"] = {"version": "6.1", "targeted": 4}
    report["summary"] = summary(report["cases"])
    path.write_text(json.dumps(report))
    render(page.parent, ["html"])
    with chromium() as browser:
        browser.get(page.as_uri())
        verdict = browser.find_element(By.ID, "verdict").text
        assert "contract 6.1" in verdict and "rules changed since the contract 4 the hello targets" in verdict
        assert "1 case differs from the reference" in verdict
        browser.get(page.as_uri() + "#" + anchor(FAILING))
        case = WebDriverWait(browser, 10).until(seen.visibility_of_element_located((By.ID, f"d-{anchor(FAILING)}")))
        failed = case.find_element(By.CSS_SELECTOR, "table.checks tr.failed")
        assert "rule changed in contract 6.0" in failed.text
        browser.get(page.as_uri() + "#" + anchor(passing["id"]))
        case = WebDriverWait(browser, 10).until(
            seen.visibility_of_element_located((By.ID, f"d-{anchor(passing['id'])}")))
        differs = case.find_element(By.CSS_SELECTOR, "table.checks tr.differs")
        assert differs.find_elements(By.TAG_NAME, "td")[0].text == "≠"
        assert "differs from the reference" in differs.text and "idle-pass-keeps-cursor" in differs.text
        assert browser.get_log("browser") == []
    with chromium(javascript=False) as browser:
        browser.get(page.as_uri())
        assert "rule changed in contract 6.0" in browser.find_element(By.ID, anchor(FAILING)).text


def test_a_passing_selection_has_a_look_of_its_own_neither_a_failure_nor_a_certification(reference_report,
                                                                                          mutant_report, tmp_path):
    """Three verdicts, three boxes: a failure red, a selection whose cases all passed blue, a certification green."""
    from reports import render
    from reports.report import load, summary, write

    selection = tmp_path / "selection"
    shutil.copytree(reference_report, selection)
    whole = tmp_path / "whole"
    shutil.copytree(reference_report, whole)
    report = load(whole).report
    report["run"]["selection"].update(scenario=None, barrier=None, fault=None, cases=[], shard=None)
    report["summary"] = summary(report["cases"])
    write(report, whole)
    render.render(whole, ["html"])
    boxes = {}
    with chromium() as browser:
        for name, directory in (("failure", mutant_report), ("selection", selection), ("certified", whole)):
            browser.get((directory / "report.html").as_uri())
            verdict = browser.find_element(By.ID, "verdict")
            boxes[name] = (verdict.text, verdict.get_attribute("class"), verdict.value_of_css_property("background-color"))
    assert boxes["failure"][0].startswith("NOT CERTIFIED") and boxes["failure"][1] == "verdict bad"
    assert boxes["selection"][0].startswith("PASSED (a selection: ") and boxes["selection"][1] == "verdict selection"
    assert boxes["certified"][0].startswith("CERTIFIED: all ") and boxes["certified"][1] == "verdict ok"
    assert len({color for _, _, color in boxes.values()}) == 3, boxes  # each drawn in a color of its own
    assert "1 scenario, 1 barrier" in (selection / "report.html").read_text()  # counts agree with their nouns
    assert (selection / "report.md").read_text().startswith("## crashproof: ☑️ PASSED (a selection: ")
