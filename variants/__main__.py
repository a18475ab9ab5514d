"""`python -m variants NAME`: run a legal variant's copy of the reference through the adapter protocol.

`python -m variants --list` prints the catalog. The copy is put first on sys.path, ahead of the installed
`reference`, and its adapter runs exactly as `python -m reference.adapter` would. Being `-m variants`, it is forked
from the TestHost's fork server, which never imports the reference before the copy (as for `-m mutants`).
"""

from __future__ import annotations

import sys

from . import BY_NAME, VARIANTS, VariantError, materialize


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        print("usage: python -m variants NAME | --list", file=sys.stderr)
        return 2
    if argv[0] == "--list":
        for variant in VARIANTS:
            print(f"{variant.name}: {variant.differs}")
        return 0
    variant = BY_NAME.get(argv[0])
    if variant is None:
        print(f"no variant named {argv[0]!r}; `python -m variants --list` shows the catalog", file=sys.stderr)
        return 2
    try:
        root = materialize(variant)
    except VariantError as exc:
        print(exc, file=sys.stderr)
        return 2
    from mutants.__main__ import _run
    return _run(root)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
