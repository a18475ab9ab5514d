"""Writes barriers/PROTOCOL.md and docs/contract-changes.md, and prints the contract's fingerprints, as testhost's
registries hold them now: barriers/ renders, and this module passes in the checks, the faults, the rules, the
reference's migrations and the catalog's scenarios (barriers/ imports nothing of the project).

    python -m testhost.runs.protocol_page protocol       # barriers/PROTOCOL.md
    python -m testhost.runs.protocol_page contract       # docs/contract-changes.md
    python -m testhost.runs.protocol_page fingerprints   # FINGERPRINTS for barriers/contract.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from barriers import contract, render as page
from reference.sql import migrations
from scenarios.scenario import load_catalog

from testhost.faults.catalog import DEADLINE_COVER, DEADLINE_MARGIN_S, FAULTS
from testhost.judge.registry import CHECKS, registered_rules


def render() -> str:
    """barriers/PROTOCOL.md as it must read."""
    catalog = load_catalog()
    return page.render(CHECKS, FAULTS, migrations=[m.name for m in migrations()],
                       deadline_scenarios=[s.name for s in catalog if DEADLINE_COVER in s.covers],
                       deadline_margin_s=DEADLINE_MARGIN_S,
                       bridge_clock_scenarios=[s.name for s in catalog if s.bridge_clock_shift_s])


def write_protocol() -> int:
    page.PAGE.write_text(render())
    print(f"wrote {page.PAGE}")
    return 0


def write_contract() -> int:
    target = Path(contract.__file__).resolve().parent.parent / contract.CHANGES_PAGE
    target.write_text(contract.render() + "\n")
    print(f"wrote {target}")
    return 0


def fingerprints() -> int:
    """Print FINGERPRINTS as it must read for the rules registered now (barriers/contract.py)."""
    return contract.print_fingerprints(registered_rules())


COMMANDS = {"protocol": write_protocol, "contract": write_contract, "fingerprints": fingerprints}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testhost.runs.protocol_page",
                                     description="Write the pages rendered from the registries.")
    parser.add_argument("command", choices=COMMANDS,
                        help="protocol: barriers/PROTOCOL.md; contract: docs/contract-changes.md; fingerprints: "
                             "print FINGERPRINTS for barriers/contract.py")
    return COMMANDS[parser.parse_args(argv).command]()


if __name__ == "__main__":
    sys.exit(main())
