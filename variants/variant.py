"""What a legal variant is: edits to a copy of the reference that keep every rule, and the copy they make."""

from __future__ import annotations

import os
import shlex
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from mutants.edits import Edit, MutantError, apply_edits, materialize as _materialize

VariantError = MutantError  # an unknown variant, or an edit that no longer applies to the reference exactly once


@dataclass(frozen=True)
class Variant:
    name: str
    # What the contract says that allows it: a verbatim sentence of the spec or of PROTOCOL.md, or a protocol note
    # ("docs/protocol-notes.md 24a: ...").
    exercises: str
    differs: str  # one line: how it differs from the reference
    edits: tuple[Edit, ...]
    # Case ids (exact) where its difference shows: tests/test_variants.py certifies the variant there and requires
    # `shows` to find the difference in at least one of them.
    slice: tuple[str, ...]
    # Over one case of a report (report.json's `cases`): the difference seen there, in words, or None. None as the
    # function itself: the difference cannot be read from a report; `probe` says where the tests see it.
    shows: Callable[[dict], str | None] | None = None
    probe: str | None = None  # what tests/test_variants.py reads to see the difference outside a report

    @property
    def changes_schema(self) -> bool:
        return False  # a variant never edits the normative schema: it must certify on the store as it is

    @property
    def command(self) -> str:
        return f"{shlex.quote(sys.executable)} -m variants {self.name}"

    @property
    def scenarios(self) -> list[str]:
        """The scenarios its slice's cases belong to, in order."""
        return list(dict.fromkeys(case.split("/")[0] for case in self.slice))


def base_dir() -> Path:
    return Path(os.environ.get("CRASHPROOF_VARIANTS_DIR", Path(tempfile.gettempdir()) / "crashproof-variants"))


def materialize(variant: Variant, base: Path | None = None) -> Path:
    """A directory holding the variant's copy of the `reference` package (made once per content)."""
    if any(e.path.startswith("migrations/") for e in variant.edits):
        raise VariantError(f"variant {variant.name}: a variant may not edit the normative schema")
    return _materialize(variant, base or base_dir())  # type: ignore[arg-type]  (the same fields a Mutant has)
