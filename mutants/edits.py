"""What a mutant is: source edits to a copy of the reference, and the copy they make."""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import sys
import tempfile
from dataclasses import dataclass
import importlib.util
from pathlib import Path


class MutantError(Exception):
    """A mutant is unknown, or one of its edits no longer applies to the reference exactly once."""


@dataclass(frozen=True)
class Edit:
    path: str  # inside reference/, e.g. "processor.py" or "queries/schedule.sql"
    old: str
    new: str


@dataclass(frozen=True)
class Mutant:
    name: str
    rule: str  # the spec sentence (verbatim) the mutant breaks; a diagnosis must name it
    description: str
    edits: tuple[Edit, ...]
    slice: tuple[str, ...] = ()  # case-id patterns where the matrix is expected to catch it first
    # Other spec sentences (verbatim) the edit breaks by its construction, each shown failing in its slice (a test
    # holds it to that): a find that names one of them names the mutant too.
    also: tuple[str, ...] = ()

    @property
    def rules(self) -> tuple[str, ...]:
        return (self.rule,) + self.also

    @property
    def changes_schema(self) -> bool:
        return any(e.path.startswith("migrations/") for e in self.edits)

    @property
    def command(self) -> str:
        return f"{shlex.quote(sys.executable)} -m mutants {self.name}"


def reference_root() -> Path:
    """Where the installed reference lives, found without importing it (the launcher imports the copy)."""
    spec = importlib.util.find_spec("reference")
    if spec is None or not spec.submodule_search_locations:
        raise MutantError("the reference package is not installed")
    return Path(list(spec.submodule_search_locations)[0])


def apply_edits(mutant: Mutant, read) -> dict[str, str]:
    """The edited text of every file the mutant touches; each edit must match exactly once."""
    texts: dict[str, str] = {}
    for edit in mutant.edits:
        text = texts.get(edit.path) if edit.path in texts else read(edit.path)
        count = text.count(edit.old)
        if count != 1:
            raise MutantError(f"mutant {mutant.name}: the text to replace in reference/{edit.path} occurs {count} "
                              f"times, not once; update the mutant to the reference: {edit.old[:80]!r}")
        texts[edit.path] = text.replace(edit.old, edit.new)
    return texts


def materialize(mutant: Mutant, base: Path | None = None) -> Path:
    """A directory holding the mutant's copy of the `reference` package (made once per content)."""
    root = reference_root()
    texts = apply_edits(mutant, lambda p: (root / p).read_text())
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(root)).encode())
            digest.update(texts.get(str(path.relative_to(root)), path.read_text(errors="replace")).encode())
    base = base or Path(os.environ.get("CRASHPROOF_MUTANTS_DIR", Path(tempfile.gettempdir()) / "crashproof-mutants"))
    target = base / f"{mutant.name}-{digest.hexdigest()[:12]}"
    if (target / "reference" / "__init__.py").exists():
        return target
    staging = Path(tempfile.mkdtemp(prefix=f".{mutant.name}-", dir=_ensure(base)))
    shutil.copytree(root, staging / "reference", ignore=shutil.ignore_patterns("__pycache__"))
    for path, text in texts.items():
        (staging / "reference" / path).write_text(text)
    try:
        staging.rename(target)
    except OSError:  # another process made it first: theirs is identical
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _ensure(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def migrations_dir(mutant: Mutant) -> Path | None:
    """Where the harness finds this mutant's migrations (None: the reference's normative schema)."""
    return materialize(mutant) / "reference" / "migrations" if mutant.changes_schema else None
