"""`python -m mutants NAME`: run a mutant's copy of the reference through the adapter protocol.

`python -m mutants --list` prints the catalog; `python -m mutants --root DIR` runs a copy made already (a mutant
of one's own, materialized by `mutants.materialize`). The copy is put first on sys.path, ahead of the installed
`reference`, and its adapter runs exactly as `python -m reference.adapter` would. Being `-m mutants`, every form
is forked from the TestHost's fork server, which never imports the reference before the copy.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

from . import BY_NAME, MUTANTS, MutantError, materialize


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--root":
        root = Path(argv[1]).absolute()
        if not (root / "reference" / "adapter.py").is_file():
            print(f"--root {root}: no reference/adapter.py there (a copy made by mutants.materialize)",
                  file=sys.stderr)
            return 2
        return _run(root)
    return launch(argv, "mutant", [(m.name, m.description) for m in MUTANTS], BY_NAME, materialize,
                  "NAME | --root DIR | --list")


def launch(argv: list[str], noun: str, listing: list[tuple[str, str]], by_name: dict, make, usage: str) -> int:
    """`python -m {noun}s NAME` or `--list`: the named copy of the reference, made by `make`, run as its adapter.
    Shared with `python -m variants`."""
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        print(f"usage: python -m {noun}s {usage}", file=sys.stderr)
        return 2
    if argv[0] == "--list":
        for name, text in listing:
            print(f"{name}: {text}")
        return 0
    chosen = by_name.get(argv[0])
    if chosen is None:
        print(f"no {noun} named {argv[0]!r}; `python -m {noun}s --list` shows the catalog", file=sys.stderr)
        return 2
    try:
        root = make(chosen)
    except MutantError as exc:
        print(exc, file=sys.stderr)
        return 2
    return _run(root)


def _run(root: Path) -> int:
    if "reference" in sys.modules:
        raise RuntimeError("the installed reference was imported before the mutant's copy")
    sys.path.insert(0, str(root))
    sys.argv = ["reference.adapter"]
    runpy.run_module("reference.adapter", run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
