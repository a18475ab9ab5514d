"""The diagnosis of a failed run (reports/diagnosis.py): its registry and grouping without a database, and each
diagnosis named by the summary of a real run of a variant that plants its cause (tests/diagnosis_plants.py), on
its slice: the CLI's output, report.md and the top of report.html, the last opened in real headless Chromium."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from barriers.contract import CHANGES
from mutants import materialize, reference_root
from reports import diagnosis
from reports.markdown import Markdown
from reports.report import load

from diagnosis_plants import BY_DIAGNOSIS, PLANTS

ROOT = Path(__file__).parent.parent


# -- the registry, without a database -----------------------------------------------------------------------------

def test_every_diagnosis_has_its_plant_and_every_plant_its_diagnosis():
    assert [d.name for d in diagnosis.DIAGNOSES] == [p.diagnosis for p in PLANTS]
    assert len(set(BY_DIAGNOSIS)) == len(PLANTS)


def test_each_diagnosis_points_at_a_protocol_section_and_notes_that_exist():
    headings = [re.sub(r"^#+ ", "", line) for line in (ROOT / "barriers" / "PROTOCOL.md").read_text().splitlines()
                if line.startswith("#")]
    notes = (ROOT / "docs" / "protocol-notes.md").read_text()
    for d in diagnosis.DIAGNOSES:
        assert d.section in headings, d.name
        assert d.anchor == f"barriers/PROTOCOL.md#{diagnosis.slug(d.section)}"
        for number, title in d.notes:
            assert f"\n{number}. **{title}" in notes, (d.name, number)
        assert set(d.changes) <= {change.slug for change in CHANGES}, d.name
    assert diagnosis.slug("`barrier-reply` (host → implementation)") == "barrier-reply-host--implementation"
    assert diagnosis.slug("Time: instants, lateness, recovery") == "time-instants-lateness-recovery"
    assert diagnosis.BY_NAME["no-scoped-commit"].notes[0][0] == "24j"
    assert "docs/contract-changes.md `scope-through-set-local-scope` (contract 2.0)" in \
        diagnosis.BY_NAME["no-scoped-commit"].reading()


def test_the_scope_diagnosis_names_set_local_scope_the_transaction_local_set_config_and_the_role_proof():
    cause = diagnosis.BY_NAME["no-scoped-commit"].cause(_case(scoped_asked=2, scoped_commits=0, claims_reported=2))
    for words in ("appsurface_durable.set_local_scope(scope_id)", "transaction-local `set_config(",
                  "current_user", "appsurface_durable_runtime", "role not proven"):
        assert words in cause


@pytest.mark.parametrize("plant", PLANTS, ids=lambda p: p.diagnosis)
def test_each_plant_applies_to_the_reference_exactly_once(plant, tmp_path):
    root = materialize(plant.mutant, tmp_path)
    reference = reference_root()
    changed = sorted(str(p.relative_to(root / "reference")) for p in (root / "reference").rglob("*")
                     if p.is_file() and (reference / p.relative_to(root / "reference")).read_bytes() != p.read_bytes())
    assert changed == sorted({e.path for e in plant.mutant.edits})


def _case(case_id="s", verdict="fail", checks=None, **facts) -> dict:
    base = {"asked": {"process-due": 2}, "passes_refused": 0, "last_pass_error": None, "last_refusal": None,
            "claims_reported": 1, "scoped_asked": 1, "scoped_commits": 2, "dispatcher_sessions": 1,
            "runtime_sessions": 1,
            "stderr_error": None, "cancels": [], "future_anchors": []}
    return {"id": case_id, "verdict": verdict, "reason": "", "facts": {**base, **facts},
            "checks": checks if checks is not None else [
                {"name": "model-agreement", "rule": "the model's rule", "ok": False, "evidence": []}]}


def test_a_reference_like_case_and_a_report_without_facts_have_no_diagnosis():
    assert diagnosis.diagnose(_case()) is None
    older = _case()
    del older["facts"]
    assert diagnosis.diagnose(older) is None
    assert diagnosis.diagnose({**older, "facts": "not a dict"}) is None


def test_each_predicate_holds_on_its_facts_and_the_registry_takes_the_first():
    stderr = {"instance": "A", "line": "error: unknown-scope: the scope is not registered"}
    assert diagnosis.diagnose(_case(dispatcher_sessions=0, scoped_commits=0)).name == "never-connected"
    never = diagnosis.BY_NAME["never-connected"]
    assert "where CRASHPROOF_RUNTIME_DSN points:" in never.cause(_case(runtime_sessions=0))
    assert "where CRASHPROOF_DISPATCHER_DSN and CRASHPROOF_RUNTIME_DSN point:" in never.cause(
        _case(runtime_sessions=0, dispatcher_sessions=0))
    assert diagnosis.diagnose(_case(runtime_sessions=0, asked={"create": 1})) is None  # no pass asked
    assert diagnosis.diagnose(_case(dispatcher_sessions=None, scoped_commits=0)).name == "no-scoped-commit"
    scope = _case(scoped_commits=0, stderr_error=stderr, passes_refused=2)
    assert diagnosis.diagnose(scope).name == "no-scoped-commit"
    assert "«error: unknown-scope: the scope is not registered»" in diagnosis.BY_NAME["no-scoped-commit"].cause(scope)
    ignored = _case(cancels=[{"instance": "A", "barrier": "schedule-claim-after-commit", "claims_after": 1}])
    assert diagnosis.diagnose(ignored).name == "barrier-reply-ignored"
    assert diagnosis.diagnose(_case(cancels=[{"instance": "A", "barrier": "x", "claims_after": 0}])) is None
    refused = _case(passes_refused=1, last_pass_error="DatabaseError: boom")
    assert diagnosis.diagnose(refused).name == "passes-refused"
    assert "«DatabaseError: boom»" in diagnosis.BY_NAME["passes-refused"].cause(refused)


def test_the_grid_diagnosis_needs_a_failure_before_the_future_anchor():
    anchor = {"schedule": "warmup", "schedule_id": "id-1", "generation": 1, "anchor": "2031-03-03T00:16:40.000000Z",
              "accepted_at_utc": "2031-03-03T00:00:00.100000Z"}

    def passed_over(*instants):
        return [{"name": "no-instant-passed-over", "rule": "r", "ok": False, "evidence": [
            {"instants_passed_over": list(instants), "schedule_id": "id-1", "generation": 1}]}]

    def agreement(database, model):
        def side(firsts):
            return {"occurrences": [{"generation": 1, "kind": "nominal", "first_nominal_utc": f} for f in firsts]}
        return [{"name": "model-agreement", "rule": "r", "ok": False,
                 "evidence": [{"schedule": "warmup", "database": side(database), "model": side(model)}]}]

    before, after = "2031-03-03T00:00:40.000000Z", "2031-03-03T00:17:40.000000Z"
    assert diagnosis.diagnose(_case(checks=passed_over(before), future_anchors=[anchor])).name == \
        "grid-before-future-anchor"
    assert diagnosis.diagnose(_case(checks=passed_over(after), future_anchors=[anchor])) is None
    assert diagnosis.diagnose(_case(checks=passed_over(before))) is None  # no future anchor in the case
    assert diagnosis.diagnose(_case(checks=agreement([after], [before, after]), future_anchors=[anchor])).name == \
        "grid-before-future-anchor"
    assert diagnosis.diagnose(_case(checks=agreement([before], [before, after]), future_anchors=[anchor])) is None


def test_groups_go_by_first_failing_check_largest_first_and_the_undiagnosed_keep_their_rule():
    first = {"name": "idle-pass-keeps-cursor", "rule": "the idle rule", "ok": False, "evidence": []}
    later = {"name": "model-agreement", "rule": "the model's rule", "ok": False, "evidence": []}
    report = {"cases": [
        _case("a", checks=[first, later]),
        _case("b", checks=[later], scoped_commits=0),
        _case("c", checks=[first]),
        _case("d", checks=[{**first, "ok": True}, later], scoped_commits=0),
        _case("e", checks=[later], scoped_commits=0),
        _case("f", verdict="error", checks=[], scoped_commits=0) | {"reason": "adapter protocol: no hello"},
        _case("g", verdict="pass", checks=[{**later, "ok": True}]),
        _case("h", verdict="not-run", checks=[]),
    ]}
    found = diagnosis.groups(report)
    assert [(g.check, g.diagnosis.name if g.diagnosis else None, [c["id"] for c in g.cases]) for g in found] == [
        ("model-agreement", "no-scoped-commit", ["b", "d", "e"]),
        ("idle-pass-keeps-cursor", None, ["a", "c"]),
        ("error", "no-scoped-commit", ["f"])]
    assert found[1].rule == "the idle rule" and found[1].cause == ""
    assert "adapter protocol: no hello" in found[2].rule
    lines = diagnosis.text(report)
    assert lines[0] == "Diagnosis: 6 failing cases in 3 groups, by first failing check"
    assert "  3 cases, first failing check model-agreement: no-scoped-commit" in lines
    assert "  2 cases, first failing check idle-pass-keeps-cursor: no diagnosis" in lines
    assert "    rule: the idle rule" in lines
    assert diagnosis.text({"cases": [report["cases"][6]]}) == []  # nothing failed, nothing said


# -- each plant on its slice, a real run ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """Runs a plant on its slice once (`crashproof certify ... --jobs 1`): its stdout and its report folder."""
    runs: dict[str, tuple[str, Path]] = {}

    def run(name: str) -> tuple[str, Path]:
        if name not in runs:
            plant = BY_DIAGNOSIS[name]
            root = materialize(plant.mutant, tmp_path_factory.mktemp("plants"))
            report = tmp_path_factory.mktemp(f"plant-{name}")
            done = subprocess.run([sys.executable, "-m", "testhost.cli", "certify", "--impl",
                                   f"{sys.executable} -m mutants --root {root}", "--scenario", plant.scenario,
                                   "--case", plant.scenario, "--jobs", "1", "--report-dir", str(report)],
                                  capture_output=True, text=True, timeout=300)
            assert done.returncode == 1, done.stdout + done.stderr
            runs[name] = (done.stdout, report)
        return runs[name]
    return run


# What each plant's summary must also say of its cause: a fact of the run, quoted.
SAYS = {"never-connected": ["where CRASHPROOF_DISPATCHER_DSN and CRASHPROOF_RUNTIME_DSN point", "Connection refused"],
        "no-scoped-commit": ["set_local_scope", "set_config('appsurface_durable.scope_id', ..., true)"],
        "barrier-reply-ignored": ["`schedule-decision-after-commit`", "`cancel-pass`"],
        "grid-before-future-anchor": ["schedule `warmup`", "negative included"],
        "passes-refused": ['«error: DatabaseError:', 'column "work_payload" of relation "work_items" does not exist']}


@pytest.mark.world
@pytest.mark.parametrize("plant", PLANTS, ids=lambda p: p.diagnosis)
def test_a_planted_cause_is_named_by_the_runs_summary(plant, planted):
    stdout, report = planted(plant.diagnosis)
    d = diagnosis.BY_NAME[plant.diagnosis]
    block = stdout[stdout.index("Diagnosis: "):]  # the CLI's last lines
    assert block.splitlines()[1].endswith(f": {plant.diagnosis}"), block
    assert f"read: {d.reading()}" in block
    for words in SAYS[plant.diagnosis]:
        assert words in block, (words, block)
    markdown = (report / "report.md").read_text()
    assert f"**{plant.diagnosis}**" in markdown and d.anchor in markdown
    assert markdown.index("### Diagnosis") < markdown.index("| fault |")  # before the tables
    page = (report / "report.html").read_text()
    assert f"data-diagnosis='{plant.diagnosis}'" in page
    assert page.index("id=diagnosis") < page.index("<table class=facts>")  # under the verdict, above the facts
    # the report alone says it again
    assert Markdown().render(load(report)) == markdown
    assert diagnosis.diagnose(load(report).report["cases"][0]).name == plant.diagnosis


@pytest.mark.world
def test_the_diagnosis_stands_at_the_top_of_report_html_with_cause_and_section(planted):
    from selenium.webdriver.common.by import By

    from reports.browser import chromium, requests_made

    _, report = planted("no-scoped-commit")
    d = diagnosis.BY_NAME["no-scoped-commit"]
    with chromium(height=900) as browser:
        browser.get((report / "report.html").as_uri())
        block = browser.find_element(By.ID, "diagnosis")
        verdict = browser.find_element(By.ID, "verdict")
        facts = browser.find_element(By.CSS_SELECTOR, "table.facts")
        assert block.is_displayed()
        assert verdict.location["y"] < block.location["y"] < facts.location["y"]
        assert block.location["y"] + 40 < 900  # in the first screen, unscrolled
        text = block.text
        assert "no-scoped-commit" in text and "first failing check" in text
        assert "Likely cause: no scoped transaction of the implementation ever committed" in text
        assert "set_local_scope" in text and f"Read: {d.reading()}" in text
        assert requests_made(browser) == [(report / "report.html").as_uri()]
        assert browser.get_log("browser") == []


@pytest.mark.world
def test_a_merged_report_ends_with_its_diagnosis_too(planted, tmp_path):
    _, report = planted("passes-refused")
    done = subprocess.run([sys.executable, "-m", "testhost.cli", "report", "merge", str(tmp_path / "merged"),
                           str(report)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1] == "Diagnosis: 1 failing case in 1 group, by first failing check"
    assert lines[2].endswith(": passes-refused") and "work_payload" in lines[3]
