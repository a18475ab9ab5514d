"""SQL lives in .sql files: numbered migrations, and named queries loaded with importlib.resources."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

_NAME = re.compile(r"^-- name: ([a-z0-9_]+)\s*$", re.MULTILINE)
MIGRATION_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    """One forward-only migration file."""

    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


@cache
def migrations() -> tuple[Migration, ...]:
    found = []
    for entry in resources.files("reference").joinpath("migrations").iterdir():
        match = MIGRATION_FILE.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), entry.name, entry.read_text()))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise RuntimeError(f"migration versions must run 1..N without gaps, found {versions}")
    return tuple(found)


@cache
def queries(module: str) -> dict[str, str]:
    """The named queries of reference/queries/<module>.sql (blocks introduced by `-- name: x`)."""
    text = resources.files("reference").joinpath("queries", f"{module}.sql").read_text()
    parts = _NAME.split(text)
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2])}


def query(module: str, name: str) -> str:
    return queries(module)[name]


def resource_text(*path: str) -> str:
    return resources.files("reference").joinpath(*path).read_text()


def _load_every_query_file() -> None:
    """Read the named queries at import: a process forked from one that imported the package (the TestHost's
    fork server) then starts with them in memory instead of opening and parsing each file again."""
    for entry in resources.files("reference").joinpath("queries").iterdir():
        if entry.name.endswith(".sql"):
            queries(entry.name[:-len(".sql")])


_load_every_query_file()
