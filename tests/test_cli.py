"""The command line: world up|status|down for people with psql, and certify's world report."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg
import pytest

from testhost.processes import pids_with_cwd_or_arg


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
    assert sorted(p.name for p in report_dir.iterdir() if p.is_file()) == [
        "certificate.json", "junit.xml", "report.html", "report.json", "report.md"]
    assert pids_with_cwd_or_arg(str(home)) == []


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
    assert result.stderr.count("\n") == 1


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
    assert "case anomaly-suspends/schedule-decision-after-commit/pause/1" in result.stdout
    assert ("skip anomaly-suspends/schedule-link-after-commit/*: the fault-free run of anomaly-suspends never "
            "reaches schedule-link-after-commit") in result.stdout
    assert ("skip anomaly-suspends/schedule-decision-after-commit/lost-commit-reply: only a before-commit barrier "
            "has a commit to lose") in result.stdout


def test_certify_refuses_unknown_selections_in_one_line(home):
    for args, needle in ((["--scenario", "nope*"], "no scenario matches"), (["--barrier", "nope"], "no barrier named"),
                         (["--fault", "flood"], "no fault named")):
        result = _run(home, "certify", *args)
        assert result.returncode == 2 and needle in result.stderr and result.stderr.count("\n") == 1


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
