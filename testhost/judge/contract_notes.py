"""What the contract says of each check result: a reference choice's difference is a note, and a failure of a rule
changed after the contract an implementation targets says so."""

from __future__ import annotations

from barriers.contract import CLASSES, REFERENCE, changed_note

from .rules import CheckResult

DIFFERS = ("differs from the reference: this rule is the reference's choice (`{name}`, class reference-choice in "
           "PROTOCOL.md), not the contract's, so the difference never fails a run")


def settle(checks: list[CheckResult], targeted: int | None) -> list[CheckResult]:
    """Turn each failed reference-choice check into a passed one carrying `differs`, and give every other failed
    check the `changed` note of the major changes to it after `targeted` (None: the current major's)."""
    for check in checks:
        if check.ok:
            continue
        rule_class = CLASSES.get(check.name)
        if rule_class is not None and rule_class.kind == REFERENCE:
            check.ok, check.differs = True, DIFFERS.format(name=check.name)
        else:
            check.changed = changed_note(check.name, targeted)
    return checks


def targeted(hello: dict | None) -> int | None:
    """The contract major version a hello names (`contract`), or None."""
    value = (hello or {}).get("contract")
    return value if isinstance(value, int) and not isinstance(value, bool) else None
