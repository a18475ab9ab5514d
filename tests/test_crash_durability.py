"""db-crash: what was committed before the crash stays (`committed-survives-crash`), and where the crash is
planned: at every barrier of the scenarios that meet every transaction kind, and everywhere in a team's own."""

import shlex
import shutil
import sys

from barriers import CATALOG
from scenarios.matrix import expand
from scenarios.scenario import is_builtin, load_catalog
from testhost.runs.certify import certify
from testhost.runs.options import Options
from testhost.runs.stages import census
from testhost.judge.fault_checks import CRASH_DURABILITY, crash_durability
from testhost.faults.catalog import DB_CRASH_SCENARIOS, FAULTS

CASE = "at-single/schedule-decision-after-commit/db-crash/1"


def _durability(case: dict) -> dict:
    found = [c for c in case["checks"] if c["name"] == "committed-survives-crash"]
    assert len(found) == 1, [c["name"] for c in case["checks"]]
    return found[0]


def test_a_row_lost_or_new_after_the_restart_fails_and_an_uncompared_race_says_why():
    assert crash_durability({}) is None  # not a db-crash
    kept = crash_durability({"crash_durability": {"rows": 7, "changed": {}}})
    assert kept.ok and kept.rows == 7 and kept.rule == CRASH_DURABILITY
    lost = crash_durability({"crash_durability": {"rows": 7, "changed": {
        "schedule_occurrences": {"added": [], "removed": [{"state": "pending"}]}}}})
    assert not lost.ok and lost.evidence == [{"table": "schedule_occurrences", "added": [],
                                              "removed": [{"state": "pending"}]}]
    raced = crash_durability({"crash_durability": {"not_compared": "another processor was running"}})
    assert raced.ok and raced.rows == 0 and "another processor" in raced.evidence[0]["not_compared"]


def test_the_builtin_catalog_plans_the_crash_in_its_named_scenarios_and_a_teams_own_catalog_everywhere(tmp_path):
    catalog = load_catalog()
    names = {s.name for s in catalog}
    assert set(DB_CRASH_SCENARIOS) <= names, set(DB_CRASH_SCENARIOS) - names  # a renamed scenario would drop out
    every_barrier = {s.name: {b.name: 1 for b in CATALOG} for s in catalog}
    plans, skipped = expand(catalog, every_barrier, FAULTS, fault="db-crash")
    assert {p.scenario for p in plans} == set(DB_CRASH_SCENARIOS)
    reasons = {s.reason for s in skipped if s.scenario not in DB_CRASH_SCENARIOS and "fault-free only" not in s.reason}
    assert len(reasons) == 1 and "db-crash is planned in at-single" in reasons.pop()

    shutil.copy(next(s.origin for s in catalog if s.name == "after-single"), tmp_path / "after-single.toml")
    own = load_catalog([tmp_path])
    assert not is_builtin(own[0]) and is_builtin(catalog[0])
    plans, _ = expand(own, {"after-single": {b.name: 1 for b in CATALOG}}, FAULTS, fault="db-crash")
    assert {p.barrier for p in plans} == {b.name for b in CATALOG}


def test_the_named_scenarios_meet_every_barrier_the_catalog_reaches(tmp_path):
    plans, _ = census(Options(fault="db-crash", jobs=2, report_dir=tmp_path, progress=lambda line: None))
    everywhere, _ = census(Options(fault="disconnect", jobs=2, report_dir=tmp_path, progress=lambda line: None))
    assert {p.barrier for p in plans} == {p.barrier for p in everywhere}
    assert {(p.barrier, p.hit > 1) for p in plans} == {(p.barrier, p.hit > 1) for p in everywhere}


def test_an_asynchronous_commit_loses_a_reported_fact_and_fails_naming_the_rule_the_reference_keeps_it(tmp_path):
    code, report = certify(Options(cases=[CASE], jobs=2, report_dir=tmp_path / "reference",
                                   progress=lambda line: None))
    case = next(c for c in report["cases"] if c["id"] == CASE)
    assert code == 0 and case["verdict"] == "pass", case["reason"]
    kept = _durability(case)
    assert kept["ok"] and kept["rows"] > 0  # the rows were read and compared

    mutant = f"{shlex.quote(sys.executable)} -m mutants asynchronous-commit"
    code, report = certify(Options(command=mutant, cases=[CASE], jobs=2, report_dir=tmp_path / "mutant",
                                   progress=lambda line: None))
    case = next(c for c in report["cases"] if c["id"] == CASE)
    lost = _durability(case)
    assert code == 1 and case["verdict"] == "fail" and not lost["ok"]
    assert "What was committed before the crash stays." in lost["rule"]
    assert {e["table"] for e in lost["evidence"]}, lost["evidence"]


def test_a_crash_while_two_processors_race_is_not_compared_and_says_why(tmp_path):
    raced = "two-processors-race/schedule-decision-after-commit/db-crash/1"
    code, report = certify(Options(cases=[raced], jobs=2, report_dir=tmp_path, progress=lambda line: None))
    case = next(c for c in report["cases"] if c["id"] == raced)
    assert code == 0 and case["verdict"] == "pass", case["reason"]
    check = _durability(case)
    assert check["ok"] and check["rows"] == 0
    assert check["evidence"] == [{"not_compared": "another processor was running beside the crashed one"}]
