"""The command line: world up|status|down for people with psql, and certify's world report."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg
import pytest

from testhost.world.processes import pids_with_cwd_or_arg


@pytest.fixture
def home():
    root = Path(tempfile.mkdtemp(prefix="crashproof-cli-", dir="/tmp"))
    os.chmod(root, 0o755)
    yield root
    subprocess.run(_cli("world", "down", "--name", "cli"), env=_env(root), capture_output=True)
    assert pids_with_cwd_or_arg(str(root)) == []
    shutil.rmtree(root, ignore_errors=True)


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "testhost.cli", *args]


def _env(root: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "CRASHPROOF_HOME": str(root), **extra}


def _run(root: Path, *args: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(_cli(*args), env=_env(root, **extra), capture_output=True, text=True, timeout=120)


def test_world_up_outlives_the_command_then_down_removes_it(home):
    up = _run(home, "world", "up", "--name", "cli")
    assert up.returncode == 0, up.stderr
    assert "proxied: psql" in up.stdout
    status = json.loads(_run(home, "world", "status", "--name", "cli").stdout)
    assert status["alive"] == {"postgres": True, "toxiproxy": True}
    with psycopg.connect(status["toxiproxy"]["proxied_dsn"]) as conn:
        assert conn.execute("select 1").fetchone() == (1,)
    again = _run(home, "world", "up", "--name", "cli")
    assert again.returncode == 2 and "already up" in again.stderr
    down = _run(home, "world", "down", "--name", "cli")
    assert down.returncode == 0, down.stderr
    assert pids_with_cwd_or_arg(str(home)) == []
    missing = _run(home, "world", "status", "--name", "cli")
    assert missing.returncode == 2 and "no world named cli" in missing.stderr


def test_certify_writes_a_report_with_components_and_versions(home):
    report_dir = home / "report"
    result = _run(home, "certify", "--scenario", "at-single", "--barrier", "schedule-link-after-commit",
                  "--fault", "kill", "--report-dir", str(report_dir))
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((report_dir / "report.json").read_text())
    assert report["summary"] == {"cases": 2, "passed": 2, "failed": 0, "error": 0, "not_run": 0}
    assert report["environment"]["toxiproxy"].startswith("2.12.0")
    assert report["implementation"]["identity"] == "crashproof-reference"
    assert "2 cases: 2 passed" in result.stdout
    # The verdict follows the counts, as every rendering shows it: a selection passed, not a certification.
    lines = result.stdout.splitlines()
    verdict = lines[next(i for i, line in enumerate(lines) if line.startswith("2 cases: ")) + 1]
    assert verdict.startswith("PASSED (a selection: --scenario at-single; --barrier schedule-link-after-commit; "
                              "--fault kill): all 2 cases passed; not a certification"), verdict
    assert report["run"]["selection"]["plan_count"] == len(report["cases"])
    assert sorted(p.name for p in report_dir.iterdir() if p.is_file()) == [
        "certificate.json", "junit.xml", "report.html", "report.json", "report.md"]
    assert pids_with_cwd_or_arg(str(home)) == []


def test_a_named_case_runs_as_often_as_repeat_says(home):
    report_dir = home / "report"
    case = "at-single/schedule-link-after-commit/kill/1"
    result = _run(home, "certify", "--case", case, "--repeat", "3", "--report-dir", str(report_dir))
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((report_dir / "report.json").read_text())
    assert [c["id"] for c in report["cases"]] == ["at-single", case, f"{case}#2", f"{case}#3"]
    assert report["run"]["selection"]["repeat"] == 3 and report["run"]["selection"]["plan_count"] == 4
    # A fault-free run is the baseline and runs once: repeating it alone is refused, not silently run once.
    _refused(_run(home, "certify", "--case", "at-single", "--repeat", "3", "--report-dir", str(report_dir)),
             "--repeat 3 repeats faulted cases, and every --case here is a fault-free run")


def test_certify_with_dsn_reports_cases_needing_the_clock_as_not_run(home, world):
    report_dir = home / "report"
    result = _run(home, "certify", "--dsn", world.admin_dsn(), "--scenario", "at-single", "--fault", "kill",
                  "--report-dir", str(report_dir))
    assert result.returncode == 1
    report = json.loads((report_dir / "report.json").read_text())
    assert report["summary"]["not_run"] == report["summary"]["cases"] == 1
    assert "external server (--dsn): the harness cannot move its clock" in report["cases"][0]["reason"]


def test_certify_with_unreachable_dsn_is_one_line(home):
    result = _run(home, "certify", "--dsn", "host=127.0.0.1 port=1 user=postgres connect_timeout=2")
    assert result.returncode == 2
    assert result.stderr.startswith("crashproof: error: cannot connect to --dsn server")
    assert '"127.0.0.1", port 1 failed' in result.stderr  # libpq's line naming host and port is kept
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_certify_with_docker_and_no_engine_is_one_line(home):
    result = _run(home, "certify", "--docker", DOCKER_HOST=f"unix://{home}/none.sock")
    assert result.returncode == 2
    assert "no Docker engine answers" in result.stderr and result.stderr.count("\n") == 1


def test_barriers_and_scenarios_list_the_catalogs(home):
    barriers_out = _run(home, "barriers")
    assert barriers_out.returncode == 0
    for name in ("schedule-decision-before-commit", "schedule-decision-after-commit", "schedule-bridge-before-commit",
                 "schedule-link-after-commit", "schedule-work-after-acceptance"):
        assert name in barriers_out.stdout
    listing = _run(home, "scenarios")
    assert listing.returncode == 0 and "coalesce-terminal-callback" in listing.stdout


def test_scenarios_matrix_lists_cases_and_every_skip_with_its_reason(home):
    result = _run(home, "scenarios", "--matrix", "--scenario", "anomaly-suspends")
    assert result.returncode == 0, result.stderr
    assert "case anomaly-suspends/schedule-claim-after-commit/pause/1" in result.stdout
    # its decision suspends the schedule and the pass answers: a pause there has no lease left to take over
    assert ("skip anomaly-suspends/schedule-decision-after-commit/pause: hit 1: after this commit the fault-free run "
            "wrote nothing more under the lease") in result.stdout
    assert ("skip anomaly-suspends/schedule-link-after-commit/*: the fault-free run of anomaly-suspends never "
            "reaches schedule-link-after-commit") in result.stdout
    assert ("skip anomaly-suspends/schedule-decision-after-commit/lost-commit-reply: only a before-commit barrier "
            "has a commit to lose") in result.stdout


def test_scenarios_matrix_names_each_fault_free_case_that_did_not_pass(home):
    wrapper = Path(__file__).parent / "adapters" / "wrapper.sh"
    result = _run(home, "scenarios", "--matrix", "--scenario", "at-single", "--launcher", "spawn",
                  "--impl", f"sh {wrapper} tests.adapters.broken hello-then-exit", PYTHON=sys.executable)
    assert result.returncode == 1, result.stdout + result.stderr
    [line] = [line for line in result.stdout.splitlines() if line.startswith("fault-free ")]
    assert line.startswith("fault-free at-single: error: ") and "exit" in line, line
    assert " cases planned" in result.stdout


def test_scenarios_matrix_checks_what_certify_checks_before_any_world(home, tmp_path):
    _refused(_run(home, "scenarios", "--matrix", "--impl", "no-such-adapter"), "--impl program 'no-such-adapter'")
    _refused(_run(home, "scenarios", "--matrix", "--migrations", str(tmp_path / "nowhere")),
             f"--migrations {tmp_path / 'nowhere'}: no such directory")
    _refused(_run(home, "scenarios", "--matrix", "--dsn", "x", "--docker"), "--dsn and --docker exclude each other")


def test_certify_refuses_unknown_selections_in_one_line(home):
    for args, needle in ((["--scenario", "nope*"], "no scenario matches"), (["--barrier", "nope"], "no barrier named"),
                         (["--fault", "flood"], "no fault named")):
        result = _run(home, "certify", *args)
        assert result.returncode == 2 and needle in result.stderr and result.stderr.count("\n") == 1


def _refused(result: subprocess.CompletedProcess, needle: str) -> None:
    """A refusal: exit 2, one line on stderr naming what to fix, no traceback."""
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith("crashproof: error: ") and result.stderr.count("\n") == 1, result.stderr
    assert needle in result.stderr and "Traceback" not in result.stderr


def test_certify_refuses_a_dsn_that_is_not_a_connection_string_in_one_line(home):
    _refused(_run(home, "certify", "--dsn", "not a dsn"), "--dsn 'not a dsn' is not a libpq connection string")


def test_an_unwritable_report_dir_is_refused_before_any_world_starts(home):
    blocker = home / "a-file"
    blocker.write_text("not a folder")
    started = time.monotonic()
    result = _run(home, "certify", "--report-dir", str(blocker / "report"))
    _refused(result, f"--report-dir {blocker / 'report'} cannot be written (Not a directory)")
    assert time.monotonic() - started < 30
    assert list((home / "worlds").iterdir()) == [] if (home / "worlds").exists() else True


def test_an_impl_program_that_is_missing_or_not_executable_is_refused(home):
    _refused(_run(home, "certify", "--impl", "no-such-adapter --flag"), "--impl program 'no-such-adapter' is not on PATH")
    _refused(_run(home, "certify", "--impl", f"{home}/missing"), f"--impl program {home}/missing does not exist")
    script = home / "adapter.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o644)
    _refused(_run(home, "certify", "--impl", str(script)), f"--impl program {script} is not executable")
    _refused(_run(home, "certify", "--impl", "'unclosed"), "cannot be split into words")


def test_a_malformed_scenario_file_is_one_line_naming_the_file_and_line(home):
    catalog = home / "catalog"
    catalog.mkdir()
    bad = catalog / "bad.toml"
    bad.write_text('description = "x"\n\n[[steps]\nop = "drain"\n')
    for command in (["scenarios"], ["certify"], ["scenarios", "--matrix"]):
        _refused(_run(home, *command, "--catalog", str(catalog)), f"{bad}: not valid TOML:")
        assert "line 3" in _run(home, *command, "--catalog", str(catalog)).stderr
    bad.write_text('[[steps]]\nop = "fly"\n')
    _refused(_run(home, "scenarios", "--catalog", str(catalog)), f"{bad}:1: step 1: op 'fly' is not one of")
    _refused(_run(home, "scenarios", "--catalog", str(home / "nowhere")), "not a folder")


def test_jobs_below_one_and_bad_selections_are_refused(home):
    _refused(_run(home, "certify", "--jobs", "0"), "--jobs must be at least 1, not 0")
    _refused(_run(home, "certify", "--case", "at-single/kill"), "is not a case id")
    _refused(_run(home, "certify", "--case", "nope/schedule-link-after-commit/kill/1"), "no scenario named 'nope'")
    _refused(_run(home, "certify", "--rerun-failed", str(home / "missing.json")), "--rerun-failed: cannot read")
    _refused(_run(home, "certify", "--fault", "kill,flood"), "no fault named 'flood'")
    _refused(_run(home, "certify", "--with-builtin"), "--with-builtin adds the built-in scenarios to a --catalog")
    for value in ("0", "two", "-1"):
        _refused(_run(home, "certify", CRASHPROOF_JOBS=value), f"CRASHPROOF_JOBS={value!r}: the default number of jobs")


def test_crashproof_jobs_sets_the_default_and_jobs_given_still_wins(monkeypatch):
    from testhost.cli import _jobs
    from testhost.runs.options import default_jobs
    monkeypatch.delenv("CRASHPROOF_JOBS", raising=False)
    assert default_jobs() == (os.cpu_count() or 1) + 1
    monkeypatch.setenv("CRASHPROOF_JOBS", "1")
    assert default_jobs() == 1 and _jobs(None) == 1 and _jobs(4) == 4
    monkeypatch.setenv("CRASHPROOF_JOBS", " ")  # set but empty, as a CI template may leave it: the usual default
    assert default_jobs() == (os.cpu_count() or 1) + 1


def test_filters_take_several_values_comma_separated_and_repeated(home):
    from scenarios.scenario import load_catalog
    result = _run(home, "scenarios", "--scenario", "at-*,every-*", "--scenario", "after-single")
    names = [line.split()[0] for line in result.stdout.splitlines() if line and not line.startswith(" ")]
    expected = sorted(s.name for s in load_catalog() if s.name.startswith(("at-", "every-")) or s.name == "after-single")
    assert result.returncode == 0 and names == expected and len(expected) >= 4 and "after-single" in names


def test_world_down_is_idempotent(home):
    first = _run(home, "world", "down", "--name", "never-up")
    assert first.returncode == 0 and "not up; nothing to do" in first.stdout
    assert _run(home, "world", "down", "--name", "never-up").returncode == 0


def test_version_and_help_name_versions_and_exit_codes(home):
    version = _run(home, "--version")
    assert version.returncode == 0
    assert version.stdout.startswith("crashproof 0.1.0; suite crashproof-barrier-suite-1+")
    for args in (["--help"], ["certify", "--help"]):
        text = _run(home, *args).stdout
        for code in ("0    every planned case passed", "2    usage or configuration error", "3    the harness",
                     "130  interrupted by SIGINT, 143 by SIGTERM"):
            assert code in text


def test_report_render_writes_the_formats_asked_for_and_refuses_unknown_ones(mutant_report, tmp_path):
    shutil.copy(mutant_report / "report.json", tmp_path / "report.json")
    done = subprocess.run(_cli("report", "render", str(tmp_path), "--format", "md,junit"), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["junit.xml", "report.json", "report.md"]
    wrong = subprocess.run(_cli("report", "render", str(tmp_path), "--format", "html,pdf"), capture_output=True,
                           text=True, timeout=120)
    assert wrong.returncode == 2
    assert "no report format named pdf; choose from html, md, junit, certificate" in wrong.stderr
    assert not (tmp_path / "report.html").exists()


def test_report_show_prints_a_cases_timeline_checks_and_evidence(mutant_report):
    case = "at-single/schedule-decision-after-commit/kill/1"
    done = subprocess.run(_cli("report", "show", str(mutant_report), case), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"case {case}: fail")
    assert "fault           kill at schedule-decision-after-commit hit 1" in done.stdout
    assert "recovery" in done.stdout and "clock moves" in done.stdout
    assert "FAIL instant-decided-once" in done.stdout and "overlapping_ranges" in done.stdout
    typo = subprocess.run(_cli("report", "show", str(mutant_report), case[:-1] + "2"), capture_output=True, text=True,
                          timeout=120)
    assert typo.returncode == 2 and f"did you mean {case}" in typo.stderr
