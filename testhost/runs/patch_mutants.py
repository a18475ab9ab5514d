"""Planted bugs as patches to any implementation's source, for `crashproof mutants --impl CMD --mutants DIR`.

Each `*.patch` in DIR is a unified diff (`patch -p1`) against the implementation's root (by default the parent
of DIR), preceded by a preamble naming what it breaks:

    Rule: <the spec sentence, or the name of the check, that must catch it>
    Description: <one line>
    Slice: <case-id globs where it should be caught first, comma-separated> (optional)

A patch touching `migrations/` changes the schema: it applies to the root's own migrations, or to a copy of
the normative ones, and that mutant's stores are built from the patched copy.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from testhost.errors import TestHostError
from testhost.impl.implementation import TIMEOUT

BUILD_TIMEOUT_S = TIMEOUT["build"]  # the first start of a patched copy may build it: the build stage's timeout


class PatchMutantError(TestHostError):
    """A patch mutant is malformed, does not apply, or cannot change what the command runs."""


@dataclass(frozen=True)
class PatchMutant:
    name: str
    rule: str
    description: str
    slice: tuple[str, ...]
    command: str
    migrations: str | None = None

    @property
    def changes_schema(self) -> bool:
        return self.migrations is not None


def preamble(path: Path) -> dict[str, str]:
    """The `Key: value` lines before the diff itself, keys lower-cased."""
    fields: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line.startswith(("--- ", "diff ", "Index: ")):
            break
        match = re.match(r"^([A-Za-z-]+):\s*(.*)$", line)
        if match:
            fields[match.group(1).lower()] = match.group(2).strip()
    return fields


def touched(path: Path) -> list[str]:
    """The files a patch changes, relative to the root (`patch -p1` strips the first component)."""
    return [line[4:].split("\t")[0].split("/", 1)[-1] for line in path.read_text().splitlines()
            if line.startswith("+++ ")]


def _inside(token: str, root: Path) -> bool:
    candidate = Path(token)
    return candidate.exists() and candidate.resolve().is_relative_to(root)


def _warm_up(command: str, cwd: Path) -> None:
    """Start the patched copy once outside any case, so a launcher that builds on first start has built before a
    case's hello timeout runs. What it answers does not matter here: the cases judge it."""
    env = {**os.environ, "CRASHPROOF_RUNTIME_DSN": "host=127.0.0.1 port=1",
           "CRASHPROOF_DISPATCHER_DSN": "host=127.0.0.1 port=1"}
    try:
        subprocess.run(shlex.split(command), input='{"type": "shutdown"}\n', capture_output=True, text=True,
                       timeout=BUILD_TIMEOUT_S, env=env, cwd=cwd)
    except subprocess.TimeoutExpired:
        raise PatchMutantError(f"{command} did not start within {BUILD_TIMEOUT_S:.0f} s") from None


def _normative_migrations() -> Path:
    return Path(str(resources.files("reference").joinpath("migrations")))


def load(impl: str, mutants_dir: Path, root: Path | None, names: str | None, work: Path) -> list[PatchMutant]:
    """Copy the root once per patch into `work` (the caller removes it), apply it, and point the command at the
    copy."""
    mutants_dir = mutants_dir.resolve()
    if not mutants_dir.is_dir():
        raise PatchMutantError(f"--mutants {mutants_dir}: not a directory of *.patch files")
    root = (root or mutants_dir.parent).resolve()
    patches = [p for p in sorted(mutants_dir.glob("*.patch"))
               if names is None or any(fnmatch.fnmatch(p.stem, n) for n in names.split(","))]
    if not patches:
        raise PatchMutantError(f"no *.patch in {mutants_dir}" + (f" matches {names!r}" if names else ""))
    tokens = shlex.split(impl)
    rewritten = [i for i, token in enumerate(tokens) if _inside(token, root)]
    if not rewritten:
        raise PatchMutantError(f"the implementation command {impl!r} names no file inside {root}: a patch to that "
                               f"folder could not change what runs; pass --root or a command under it")
    found = []
    for patch in patches:
        fields = preamble(patch)
        if not fields.get("rule"):
            raise PatchMutantError(f"{patch}: the preamble names no `Rule:` (the spec sentence or check that must "
                                   f"catch it)")
        copy = work / patch.stem
        shutil.copytree(root, copy, symlinks=True,
                        ignore=shutil.ignore_patterns(".git", "__pycache__", *([mutants_dir.name]
                                                                               if mutants_dir.parent == root else [])))
        schema = any(p.startswith("migrations/") for p in touched(patch))
        if schema and not (copy / "migrations").is_dir():
            shutil.copytree(_normative_migrations(), copy / "migrations")
        applied = subprocess.run(["patch", "-p1", "--forward", "--batch", "-d", str(copy), "-i", str(patch)],
                                 capture_output=True, text=True)
        if applied.returncode != 0:
            raise PatchMutantError(f"{patch} does not apply to {root}: {(applied.stdout + applied.stderr).strip()}")
        command = shlex.join([str(copy / Path(tokens[i]).resolve().relative_to(root)) if i in rewritten else t
                              for i, t in enumerate(tokens)])
        _warm_up(command, copy)
        found.append(PatchMutant(patch.stem, fields["rule"], fields.get("description", ""),
                                 tuple(s.strip() for s in fields.get("slice", "").split(",") if s.strip()),
                                 command, str(copy / "migrations") if schema else None))
    return found
