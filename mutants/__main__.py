"""`python -m mutants NAME`: run a mutant's copy of the reference through the adapter protocol.

`python -m mutants --list` prints the catalog. The copy is put first on sys.path, ahead of the installed
`reference`, and its adapter runs exactly as `python -m reference.adapter` would.
"""

from __future__ import annotations

import runpy
import sys

from . import BY_NAME, MUTANTS, MutantError, materialize


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        print("usage: python -m mutants NAME | --list", file=sys.stderr)
        return 2
    if argv[0] == "--list":
        for mutant in MUTANTS:
            print(f"{mutant.name}: {mutant.description}")
        return 0
    mutant = BY_NAME.get(argv[0])
    if mutant is None:
        print(f"no mutant named {argv[0]!r}; `python -m mutants --list` shows the catalog", file=sys.stderr)
        return 2
    try:
        root = materialize(mutant)
    except MutantError as exc:
        print(exc, file=sys.stderr)
        return 2
    if "reference" in sys.modules:
        raise RuntimeError("the installed reference was imported before the mutant's copy")
    sys.path.insert(0, str(root))
    sys.argv = ["reference.adapter"]
    runpy.run_module("reference.adapter", run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
