"""An implementation of the previous contract, certified today: it fails only rules changed since, and each of its
failures, and the verdict, say which change moved the rule."""

from __future__ import annotations

import sys

import pytest

from barriers.contract import VERSION
from mutants import Edit, Mutant, materialize
from mutants.catalog import CANCEL_PASS_REPLY
from reports.report import outcome
from testhost.runs.certify import certify
from testhost.runs.options import Options

pytestmark = pytest.mark.world

LINK = "schedule-link-after-commit"


def _contract_5(targets: int) -> Mutant:
    """The reference as contract 5 had it: `cancel-pass` honoured after a claim or a decision, not after a link
    (contract 6.0, `cancel-at-link`), with a hello naming the contract given."""
    return Mutant(f"contract-5-targets-{targets}", "", "an implementation of contract 5",
                  (Edit("adapter.py", CANCEL_PASS_REPLY, CANCEL_PASS_REPLY.replace(":\n", f" and name != {LINK!r}:\n")),
                   Edit("adapter.py", "CONTRACT = 6 ", f"CONTRACT = {targets} ")))


def _run(tmp_path, targets: int) -> dict:
    root = materialize(_contract_5(targets), tmp_path / "copies")
    _, report = certify(Options(command=f"{sys.executable} -m mutants --root {root}",
                                scenario="cancel-at-each-barrier", report_dir=tmp_path / f"r{targets}",
                                progress=lambda line: None))
    return report


def test_a_contract_5_implementation_fails_only_rules_changed_in_6_and_is_told_so(tmp_path):
    report = _run(tmp_path, targets=5)
    failing = [check for case in report["cases"] for check in case["checks"] if not check["ok"]]
    assert failing, "the link's cancel went unheeded and nothing failed"
    assert {c["name"] for c in failing} <= {"pass-bounded", "cancel-keeps-committed"}
    assert all(c["changed"].startswith("rule changed in contract 6.0: `cancel-pass` may arrive at every after-commit")
               and "docs/contract-changes.md#contract-60" in c["changed"] for c in failing), failing
    assert report["contract"] == {"version": VERSION, "targeted": 5}
    verdict = outcome(report)[1]
    assert verdict.startswith("NOT CERTIFIED") and "fails rules changed since the contract 5 the hello targets" \
        in verdict, verdict


def test_the_same_failure_of_an_implementation_that_targets_6_carries_no_note(tmp_path):
    report = _run(tmp_path, targets=6)
    failing = [check for case in report["cases"] for check in case["checks"] if not check["ok"]]
    assert failing and not any(c.get("changed") for c in failing)
    assert "rules changed since" not in outcome(report)[1]
