"""Audit transcripts of one month's schedule history, and detach, archive or prune only after one verifies.

A transcript is two files in a directory: `schedule_history_YYYYMM.jsonl` (every row of the month, one JSON
object a line, in a total order) and `schedule_history_YYYYMM.manifest.json` (row count, first and last
recorded time, per-scope counts and the SHA-256 of the rows file). Detach, archive and prune each verify it
against the table in the same transaction that moves the table, with the table locked, and refuse in one
line, changing nothing, unless it describes exactly that table as it stands.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from pathlib import Path

from psycopg import sql

from .db import Session
from .errors import DurableError
from .identity import canonical_instant
from .sql import query

MONTH = re.compile(r"^(\d{4})-(0[1-9]|1[0-2])$")
LIVE, DETACHED, ARCHIVED = "appsurface_durable", "appsurface_durable_detached", "appsurface_durable_archive"


class HistoryRefused(DurableError):
    """A history operation was refused before it changed anything; the message says why."""


def table_name(month: str) -> str:
    match = MONTH.match(month)
    if not match:
        raise HistoryRefused(f"month {month!r} must look like YYYY-MM")
    return f"schedule_history_{match.group(1)}{match.group(2)}"


def files(directory: Path, table: str) -> tuple[Path, Path]:
    return directory / f"{table}.jsonl", directory / f"{table}.manifest.json"


def _named(name: str, schema: str, table: str) -> sql.Composed:
    return sql.SQL(query("history", name)).format(table=sql.Identifier(schema, table))


def _locate(session: Session, table: str) -> tuple[str, bool] | None:
    found = session.all(query("history", "locate"), {"table": table})
    return (found[0]["schema"], found[0]["attached"]) if found else None


def _serialized(session: Session, schema: str, table: str) -> bytes:
    lines = []
    for row in session.all(_named("rows", schema, table)):
        lines.append(json.dumps({"scope_id": row["scope_id"], "schedule_id": str(row["schedule_id"]),
                                 "recorded_at_utc": canonical_instant(row["recorded_at_utc"]),
                                 "event": row["event"], "generation": row["generation"], "detail": row["detail"]},
                                sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n")
    return "".join(lines).encode()


def _summary(table: str, rows: bytes) -> dict:
    """The manifest of a rows file, computed from the file alone."""
    parsed = [json.loads(line) for line in rows.decode().splitlines()]
    times = [r["recorded_at_utc"] for r in parsed]
    return {"partition": table, "rows": len(parsed), "first_recorded_at_utc": min(times, default=None),
            "last_recorded_at_utc": max(times, default=None),
            "per_scope": dict(sorted(Counter(r["scope_id"] for r in parsed).items())),
            "rows_file": f"{table}.jsonl", "rows_sha256": hashlib.sha256(rows).hexdigest()}


def transcript(session: Session, month: str, directory: Path) -> Path:
    """Write the month's rows and manifest into `directory` (as the migration owner, who reads every scope)."""
    table = table_name(month)
    with session.transaction():
        where = _locate(session, table)
        if where is None:
            raise HistoryRefused(f"no history table {table} exists (attached, detached or archived)")
        rows = _serialized(session, where[0], table)
    directory.mkdir(parents=True, exist_ok=True)
    rows_path, manifest_path = files(directory, table)
    rows_path.write_bytes(rows)
    manifest_path.write_text(json.dumps(_summary(table, rows), indent=2, sort_keys=True) + "\n")
    return manifest_path


def _verify(session: Session, table: str, schema: str, directory: Path) -> None:
    """Refuse unless `directory` holds a transcript of exactly this table, untampered and current."""
    rows_path, manifest_path = files(directory, table)
    again = f"run `python -m reference history transcript --month <month> {directory}` first"
    if not manifest_path.is_file() or not rows_path.is_file():
        raise HistoryRefused(f"no audit transcript of {table} in {directory}; {again}")
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError) as exc:
        raise HistoryRefused(f"the transcript manifest {manifest_path} is unreadable ({exc}); {again}") from None
    if not isinstance(manifest, dict) or manifest.get("partition") != table:
        raise HistoryRefused(f"the transcript in {directory} is not of {table}; {again}")
    rows = rows_path.read_bytes()
    try:
        summary = _summary(table, rows)
    except (UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise HistoryRefused(f"the transcript rows file {rows_path} is not JSON Lines of history ({exc})") from None
    if summary["rows_sha256"] != manifest.get("rows_sha256"):
        raise HistoryRefused(f"the transcript rows file {rows_path} does not match its manifest's SHA-256: "
                             "it was changed after the transcript")
    differs = sorted(k for k in summary if summary[k] != manifest.get(k))
    if differs:
        raise HistoryRefused(f"the transcript manifest {manifest_path} does not describe its rows file "
                             f"({', '.join(differs)} differ)")
    now = _serialized(session, schema, table)
    if now != rows:
        count = now.count(b"\n")
        raise HistoryRefused(f"{table} no longer matches its transcript ({count} row{'s' * (count != 1)} now, "
                             f"{summary['rows']} transcribed); {again}")


def detach(session: Session, month: str, directory: Path) -> str:
    """Detach a past month's partition into appsurface_durable_detached, after its transcript verifies."""
    table = table_name(month)
    with session.transaction():
        current = session.one(query("history", "server_month"))["month"]
        if month >= current:
            raise HistoryRefused(f"month {month} is not over (the server's month is {current}); "
                                 "only a past month's partition may be detached")
        where = _locate(session, table)
        if where is None or not where[1]:
            raise HistoryRefused(f"{table} is not an attached partition of schedule_history")
        session.execute(_named("lock", LIVE, table))
        _verify(session, table, LIVE, directory)
        session.execute(_named("detach", LIVE, table))
    return f"{DETACHED}.{table}"


def _detached(session: Session, month: str, directory: Path, verb: str) -> str:
    """Lock the month's detached (or archived) table, verify its transcript and `verb` it; returns where it was."""
    table = table_name(month)
    with session.transaction():
        where = _locate(session, table)
        if where is None:
            raise HistoryRefused(f"no history table {table} exists to {verb}")
        if where[1] or where[0] == LIVE:
            raise HistoryRefused(f"{table} is still attached; detach it first (history detach --month)")
        if verb == "archive" and where[0] == ARCHIVED:
            raise HistoryRefused(f"{table} is already archived")
        session.execute(_named("lock_detached", where[0], table))
        _verify(session, table, where[0], directory)
        session.execute(_named(verb, where[0], table))
    return f"{where[0]}.{table}"


def archive(session: Session, month: str, directory: Path) -> str:
    """Move a detached month into appsurface_durable_archive, after its transcript verifies."""
    return _detached(session, month, directory, "archive").replace(DETACHED, ARCHIVED, 1)


def prune(session: Session, month: str, directory: Path) -> str:
    """Drop a detached (or archived) month, after its transcript verifies."""
    return _detached(session, month, directory, "prune")
