"""Legal variants: copies of the reference that each take another way the contract allows, and must certify.

They are the converse of the mutants (mutants/): a mutant breaks one rule and the matrix must catch it; a variant
keeps every rule and differs from the reference in one way the spec, PROTOCOL.md or a protocol note leaves open,
and the whole matrix must pass it. A variant that fails is a harness defect: some check holds implementations to
the reference's own habit instead of the contract.

A variant is made as a mutant is: exact text edits to a copy of `reference/` (mutants.Edit, each matching once).
`python -m variants NAME` runs the copy through the adapter protocol, as `python -m reference.adapter` would;
`crashproof variants` certifies each on the whole matrix (docs/variants.md).
"""

from .variant import Edit, Variant, VariantError, apply_edits, base_dir, materialize  # noqa: F401
from .catalog import BY_NAME, VARIANTS

__all__ = ["BY_NAME", "VARIANTS", "Edit", "Variant", "VariantError", "apply_edits", "materialize"]
