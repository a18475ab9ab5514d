"""barriers/PROTOCOL.md and the contract's fingerprints as testhost's registries hold them now: barriers/ renders
both, and testhost passes in its checks, its faults and its rules (`python -m barriers.render` and `python -m
barriers.contract --fingerprints` come here)."""

from __future__ import annotations

from barriers import contract, render as page

from testhost.faults.catalog import DEADLINE_COVER, DEADLINE_MARGIN_S, FAULTS
from testhost.judge.registry import CHECKS, registered_rules


def render() -> str:
    """barriers/PROTOCOL.md as it must read."""
    return page.render(CHECKS, FAULTS, deadline_cover=DEADLINE_COVER, deadline_margin_s=DEADLINE_MARGIN_S)


def main() -> int:
    page.PAGE.write_text(render())
    print(f"wrote {page.PAGE}")
    return 0


def fingerprints() -> int:
    """Print FINGERPRINTS as it must read for the rules registered now (barriers/contract.py)."""
    return contract.print_fingerprints(registered_rules())
