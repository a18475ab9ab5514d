"""`python -m variants NAME`: run a legal variant's copy of the reference through the adapter protocol.

`python -m variants --list` prints the catalog. The copy is put first on sys.path, ahead of the installed
`reference`, and its adapter runs exactly as `python -m reference.adapter` would. Being `-m variants`, it is forked
from the TestHost's fork server, which never imports the reference before the copy (as for `-m mutants`).
"""

from __future__ import annotations

import sys

from mutants.__main__ import launch

from . import BY_NAME, VARIANTS, materialize


def main(argv: list[str]) -> int:
    return launch(argv, "variant", [(v.name, v.differs) for v in VARIANTS], BY_NAME, materialize, "NAME | --list")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
