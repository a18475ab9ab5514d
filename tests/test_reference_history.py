"""Audit transcripts of a month of schedule history against a real PostgreSQL, and detach, archive and
prune, each refused in one line (nothing changed) unless a transcript of exactly that partition verifies."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

import reference
from protocol_helpers import every, server_now
from reference.identity import canonical_instant
from reference.roles import validate
from reference.db import Session

pytestmark = pytest.mark.world

REPO = Path(__file__).resolve().parents[1]
SCHEMAS = ("appsurface_durable", "appsurface_durable_detached", "appsurface_durable_archive")


def history(store, action: str, month: str, directory: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "reference", "history", action, "--dsn", store.owner_dsn,
                           "--month", month, str(directory)], capture_output=True, text=True, cwd=REPO, timeout=60)


def refused(out: subprocess.CompletedProcess, reason: str) -> None:
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and reason in lines[0], out.stderr


def where(store, table: str) -> tuple[str, bool] | None:
    with store.owner() as conn:
        row = conn.execute("select n.nspname, c.relispartition from pg_class c join pg_namespace n "
                           "on n.oid = c.relnamespace where c.relname = %s and n.nspname = any(%s)",
                           (table, list(SCHEMAS))).fetchone()
    return (row["nspname"], row["relispartition"]) if row else None


def month_rows(store, schema: str, table: str) -> list[dict]:
    with store.owner() as conn:
        return conn.execute(f"select * from {schema}.{table} order by recorded_at_utc, event").fetchall()


@pytest.fixture
def past_month(store, world):
    """A month of history that is over: schedules of two scopes created and updated now, then the server's
    clock two months on (with its partitions). Yields (month, table)."""
    store.create_scope("tenant-b")
    for scope in ("tenant-a", "tenant-a", "tenant-b"):
        with reference.ScheduleClient(store.runtime_dsn, scope) as client:
            view = client.create(every(60))
            client.update(view.schedule_id, every(90), expected_revision=view.revision)
    month = server_now(store).strftime("%Y-%m")
    world.clock.shift(timedelta(days=62))
    store.ensure_partitions()
    try:
        yield month, "schedule_history_" + month.replace("-", "")
    finally:
        world.clock.reset()


def test_a_transcript_round_trips_and_detach_archive_prune_follow_it(store, past_month, tmp_path):
    month, table = past_month
    rows = month_rows(store, "appsurface_durable", table)
    assert len(rows) == 6

    out = history(store, "transcript", month, tmp_path)
    assert out.returncode == 0, out.stderr
    manifest = json.loads((tmp_path / f"{table}.manifest.json").read_text())
    data = (tmp_path / f"{table}.jsonl").read_bytes()
    assert manifest["partition"] == table and manifest["rows"] == len(rows)
    assert manifest["rows_sha256"] == hashlib.sha256(data).hexdigest()
    assert manifest["per_scope"] == {"tenant-a": 4, "tenant-b": 2}
    assert manifest["first_recorded_at_utc"] == canonical_instant(rows[0]["recorded_at_utc"])
    assert manifest["last_recorded_at_utc"] == canonical_instant(rows[-1]["recorded_at_utc"])
    transcribed = [json.loads(line) for line in data.decode().splitlines()]
    assert sorted((r["scope_id"], r["schedule_id"], r["event"], r["generation"], json.dumps(r["detail"], sort_keys=True))
                  for r in transcribed) == sorted(
        (r["scope_id"], str(r["schedule_id"]), r["event"], r["generation"], json.dumps(r["detail"], sort_keys=True))
        for r in rows)

    out = history(store, "detach", month, tmp_path)
    assert out.returncode == 0 and where(store, table) == ("appsurface_durable_detached", False), out.stderr
    assert month_rows(store, "appsurface_durable_detached", table) == rows
    session = Session(store.owner_dsn)
    try:
        assert validate(session) == []  # the live schema's shape is exact without the month
    finally:
        session.close()
    with reference.ScheduleClient(store.runtime_dsn, "tenant-a") as client:  # the runtime records on
        assert isinstance(client.create(every(60)), reference.ScheduleView)

    out = history(store, "archive", month, tmp_path)
    assert out.returncode == 0 and where(store, table) == ("appsurface_durable_archive", False), out.stderr
    out = history(store, "prune", month, tmp_path)
    assert out.returncode == 0 and where(store, table) is None, out.stderr


def test_without_a_transcript_every_step_is_refused_and_the_partition_is_untouched(store, past_month, tmp_path):
    month, table = past_month
    before = month_rows(store, "appsurface_durable", table)
    refused(history(store, "detach", month, tmp_path), f"no audit transcript of {table} in {tmp_path}")
    refused(history(store, "archive", month, tmp_path), f"{table} is still attached; detach it first")
    refused(history(store, "prune", month, tmp_path), f"{table} is still attached; detach it first")
    refused(history(store, "detach", "2026-13", tmp_path), "must look like YYYY-MM")

    # A transcript of another month does not stand in for this one.
    current = server_now(store).strftime("%Y-%m")
    assert history(store, "transcript", current, tmp_path).returncode == 0
    for path in tmp_path.iterdir():
        path.rename(tmp_path / path.name.replace(current.replace("-", ""), month.replace("-", "")))
    refused(history(store, "detach", month, tmp_path), f"the transcript in {tmp_path} is not of {table}")
    # The server's own month is never detached, transcript or not.
    other = tmp_path / "current"
    assert history(store, "transcript", current, other).returncode == 0
    refused(history(store, "detach", current, other), f"month {current} is not over")

    assert where(store, table) == ("appsurface_durable", True)
    assert month_rows(store, "appsurface_durable", table) == before


def _edit_a_row(rows: Path, manifest: Path) -> None:
    rows.write_text(rows.read_text().replace('"event":"updated"', '"event":"created"', 1))


def _edit_a_row_and_rehash(rows: Path, manifest: Path) -> None:
    _edit_a_row(rows, manifest)
    data = json.loads(manifest.read_text())
    data["rows_sha256"] = hashlib.sha256(rows.read_bytes()).hexdigest()
    manifest.write_text(json.dumps(data))


def _drop_a_row_and_rehash(rows: Path, manifest: Path) -> None:
    rows.write_text("".join(rows.read_text().splitlines(keepends=True)[1:]))
    data = json.loads(manifest.read_text())
    data["rows_sha256"] = hashlib.sha256(rows.read_bytes()).hexdigest()
    manifest.write_text(json.dumps(data))


def _change_a_count(rows: Path, manifest: Path) -> None:
    data = json.loads(manifest.read_text())
    data["per_scope"]["tenant-b"] += 1
    manifest.write_text(json.dumps(data))


TAMPERS = {
    "a row edited": (_edit_a_row, "does not match its manifest's SHA-256"),
    "a row edited and the manifest re-hashed": (_edit_a_row_and_rehash, "no longer matches its transcript"),
    "a row dropped and everything re-hashed": (_drop_a_row_and_rehash, "does not describe its rows file"),
    "a per-scope count changed": (_change_a_count, "does not describe its rows file (per_scope differ)"),
}


@pytest.mark.parametrize("tamper", list(TAMPERS))
def test_a_tampered_transcript_is_refused_and_the_partition_is_untouched(store, past_month, tmp_path, tamper):
    month, table = past_month
    before = month_rows(store, "appsurface_durable", table)
    assert history(store, "transcript", month, tmp_path).returncode == 0
    change, reason = TAMPERS[tamper]
    change(tmp_path / f"{table}.jsonl", tmp_path / f"{table}.manifest.json")
    refused(history(store, "detach", month, tmp_path), reason)
    assert where(store, table) == ("appsurface_durable", True)
    assert month_rows(store, "appsurface_durable", table) == before

    # Once detached with a good transcript, archive and prune meet the same verification.
    assert history(store, "transcript", month, tmp_path).returncode == 0
    assert history(store, "detach", month, tmp_path).returncode == 0
    change(tmp_path / f"{table}.jsonl", tmp_path / f"{table}.manifest.json")
    refused(history(store, "prune", month, tmp_path), reason)
    refused(history(store, "archive", month, tmp_path), reason)
    assert where(store, table) == ("appsurface_durable_detached", False)
