"""Every check certification runs, by the name its results carry, with the rule its failure names: gathered from the
modules that declare them, which this lists. PROTOCOL.md renders CHECKS, so an outside team reads what certification
enforces, and a test keeps every name used here on that page."""

from __future__ import annotations

from barriers.contract import CLASSES
from barriers.schema import SCHEMA_RULES

from . import (barrier_checks, bridge_role, cancelled_pass, clock_samples, commands, expectations, fault_checks,
               invariants, observations, pass_windows, ranges, stage_rules)

# The modules that declare rules, each in a Rules of its own; importing one registers nothing anywhere.
RULE_MODULES = (invariants, fault_checks, expectations, commands, observations, pass_windows, clock_samples, ranges,
                stage_rules, barrier_checks, cancelled_pass, bridge_role)


def _gathered() -> dict[str, str]:
    """Every module's rules, in the contract's order (barriers/contract.py CLASSES, which classes every rule and so
    orders PROTOCOL.md's table of checks); a rule not classed yet follows, in module order, until it is."""
    declared: dict[str, str] = {}
    for module in RULE_MODULES:
        for name, rule in module.RULES.checks.items():
            if name in declared:
                raise ValueError(f"the check {name} is declared twice: in {module.__name__} and before it")
            declared[name] = rule
    place = {name: index for index, name in enumerate(CLASSES)}
    return dict(sorted(declared.items(), key=lambda item: place.get(item[0], len(place))))


CHECKS: dict[str, str] = _gathered()


def registered_rules() -> dict[str, str]:
    """Every rule certification enforces, by name: the checks, then the schema rules."""
    return {**CHECKS, **{r.name: r.rule for r in SCHEMA_RULES}}
