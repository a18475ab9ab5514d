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


def test_certify_prints_components_and_versions(home):
    result = _run(home, "certify")
    assert result.returncode == 0, result.stderr
    assert "postgres" in result.stdout and "toxiproxy    2.12.0" in result.stdout
    assert pids_with_cwd_or_arg(str(home)) == []


def test_certify_with_dsn_reports_what_it_cannot_do(home, world):
    result = _run(home, "certify", "--dsn", world.admin_dsn())
    assert result.returncode == 0, result.stderr
    assert "clock        not-run: external server (--dsn)" in result.stdout
    assert "db-crash     not-run: external server (--dsn)" in result.stdout


def test_certify_with_unreachable_dsn_is_one_line(home):
    result = _run(home, "certify", "--dsn", "host=127.0.0.1 port=1 user=postgres connect_timeout=2")
    assert result.returncode == 2
    assert result.stderr.startswith("crashproof: error: cannot connect to --dsn server")
    assert result.stderr.count("\n") == 1


def test_certify_with_docker_and_no_engine_is_one_line(home):
    result = _run(home, "certify", "--docker", DOCKER_HOST=f"unix://{home}/none.sock")
    assert result.returncode == 2
    assert "no Docker engine answers" in result.stderr and result.stderr.count("\n") == 1
