"""The contract: every rule classed, every change of a rule recorded with its version, the page rendered from the
registry, and the notes a run gives: a reference choice's difference, a rule changed since the targeted contract."""

from pathlib import Path

import pytest

from barriers import contract
from barriers.contract import (ADAPTER, CHANGES, CLASSES, FINGERPRINTS, MAJOR, MINOR, PINNED, REFERENCE, SPEC,
                               changed_note, current_fingerprints, render, version_key)
from reference.adapter import CONTRACT as REFERENCE_TARGETS
from testhost.judge.registry import registered_rules
from testhost.judge.rules import CheckResult
from testhost.judge.contract_notes import DIFFERS, settle, targeted

ROOT = Path(__file__).resolve().parent.parent
NOTES = (ROOT / "docs" / "protocol-notes.md").read_text()


def test_every_rule_certification_enforces_has_a_class():
    rules = registered_rules()
    assert set(CLASSES) == set(rules), {"unclassed": sorted(set(rules) - set(CLASSES)),
                                        "classed but not registered": sorted(set(CLASSES) - set(rules))}
    assert {c.kind for c in CLASSES.values()} <= {SPEC, PINNED, ADAPTER, REFERENCE}


def test_a_pinned_reading_cites_notes_that_exist():
    cited = [(name, note) for name, rule_class in CLASSES.items() for note in rule_class.notes]
    cited += [(change.slug, note) for change in CHANGES for note in change.notes]
    assert all(rule_class.notes for rule_class in CLASSES.values() if rule_class.kind == PINNED)
    missing = [(who, note) for who, note in cited
               if f"{note.split(' ', 1)[0]}. **{note.split(' ', 1)[1]}" not in NOTES]
    assert missing == [], "cite a note as 'NUMBER Title prefix', as docs/protocol-notes.md writes it"


def test_no_rule_changes_without_a_fingerprint_and_a_change_of_its_version():
    """A rule whose text or class moved fails here until FINGERPRINTS holds its new digest under a version whose
    Change names it (so docs/contract-changes.md tells implementations what moved)."""
    now = current_fingerprints(registered_rules())
    moved = {name: {"recorded": FINGERPRINTS.get(name), "now": now[name]} for name in now
             if FINGERPRINTS.get(name) != now[name]}
    assert moved == {}, ("rules changed without a contract entry: add a Change to barriers/contract.py naming each "
                         "(major if it can fail an implementation that conformed before), then paste "
                         "`python -m testhost.runs.protocol_page fingerprints` into FINGERPRINTS")
    assert set(FINGERPRINTS) == set(now), "FINGERPRINTS names a rule no longer registered"


def test_every_change_names_registered_checks_and_its_version_is_in_order():
    rules = registered_rules()
    assert [n for c in CHANGES for n in c.checks if n not in rules] == []
    versions = [version_key(c.version) for c in CHANGES]
    assert versions == sorted(versions), "CHANGES are listed oldest first"
    for version, changes in contract.releases():
        major, minor = version_key(version)
        has_major = any(c.kind == MAJOR for c in changes)
        assert (minor == 0) == has_major or version == "1.0", (version, "a major change opens a major version")
        assert all(c.kind in (MAJOR, MINOR) and c.must_change for c in changes)
    assert len({c.slug for c in CHANGES}) == len(CHANGES)


def test_the_changes_the_contract_must_record_are_there():
    """Scope function, cancel-pass, clock_utc, the bridge's role proof, the idle cursor, the Every grid before its
    anchor and the lease cap as computed: each with the version that brought it."""
    by_slug = {c.slug: c for c in CHANGES}
    expected = {"scope-through-set-local-scope": ("2.0", MAJOR), "cancel-pass": ("5.0", MAJOR),
                "clock-utc": ("3.0", MINOR), "bridge-role-proof": ("5.0", MAJOR), "idle-cursor": ("2.0", MAJOR),
                "idle-cursor-free": ("6.1", MINOR), "grid-before-anchor": ("2.0", MAJOR),
                "lease-cap-where-it-ends": ("2.0", MAJOR), "cancel-at-link": ("6.0", MAJOR)}
    assert {slug: (by_slug[slug].version, by_slug[slug].kind) for slug in expected} == expected


def test_the_page_is_rendered_from_the_registry():
    page = (ROOT / contract.CHANGES_PAGE).read_text()
    assert page == render() + "\n", "run `python -m testhost.runs.protocol_page contract`"
    assert f"version **{contract.VERSION}**" in page


def test_the_reference_targets_the_current_major_version():
    assert REFERENCE_TARGETS == contract.MAJOR_VERSION


def test_a_changed_rule_says_so_only_after_the_targeted_contract():
    # cancel-keeps-committed: brought in 5.0, widened in 6.0 (the link's barrier)
    assert "contract 6.0" in changed_note("cancel-keeps-committed", 4)
    assert "contract 6.0" in changed_note("cancel-keeps-committed", 5)
    assert changed_note("cancel-keeps-committed", 6) is None
    assert "docs/contract-changes.md#contract-60" in changed_note("cancel-keeps-committed", None)
    assert changed_note("schema-version-refused", 3).startswith("rule changed in contract 4.0")
    assert changed_note("schema-version-refused", None) is None  # not changed in the current major
    assert changed_note("one-occurrence-per-identity", 1) is None  # never changed
    assert changed_note("idle-pass-keeps-cursor", 5) is None  # loosened in 6.1 (minor): nothing to annotate


def _failed(name: str) -> CheckResult:
    return CheckResult(name, "rule", False, [{"seen": 1}], 1)


def test_a_reference_choice_difference_is_a_note_never_a_failure():
    checks = settle([_failed("idle-pass-keeps-cursor"), _failed("cancel-keeps-committed"),
                     CheckResult("queue-one-slot", "rule", True, [], 3)], targeted=4)
    idle, cancel, slot = checks
    assert idle.ok and idle.differs == DIFFERS.format(name="idle-pass-keeps-cursor") and idle.evidence
    assert idle.to_json()["differs"].startswith("differs from the reference")
    assert not cancel.ok and cancel.changed.startswith("rule changed in contract 6.0")
    assert cancel.to_json()["changed"] == cancel.changed
    assert slot.ok and slot.differs is None and slot.changed is None and "changed" not in slot.to_json()


@pytest.mark.parametrize("hello, expected", [({"contract": 5}, 5), ({}, None), (None, None),
                                             ({"contract": "5"}, None), ({"contract": True}, None)])
def test_the_targeted_contract_is_the_hellos_integer(hello, expected):
    assert targeted(hello) == expected
