"""Mutants: copies of the reference, each with exactly one rule of the spec broken, that the matrix must catch.

A mutant is a list of source edits (text replaced exactly once in a file of `reference/`, Python or SQL)
plus the spec sentence it breaks. `materialize` writes the edited copy of the package; `python -m mutants
NAME` runs it through the same adapter protocol as the reference. An edit to a migration changes the
schema, so the harness builds that mutant's stores from its copy's migrations.
"""

from .edits import Edit, Mutant, MutantError, apply_edits, materialize, migrations_dir, reference_root  # noqa: F401
from .catalog import BY_NAME, MUTANTS

__all__ = ["BY_NAME", "MUTANTS", "Edit", "Mutant", "MutantError", "apply_edits", "materialize", "migrations_dir"]
