"""A pass whose decision cuts off past the next nominal instant is judged right, a step beside its held barrier or
not (docs/protocol-notes.md 38e): a copy of the reference that waits between its claim and its decision crosses
the instant every time; the reference, fast, does not on an idle machine. Both are correct, so both pass."""

from __future__ import annotations

import shlex
import sys

import pytest

from mutants import Edit, Mutant, materialize
from scenarios.matrix import CasePlan
from scenarios.scenario import parse
from testhost.case.runner import REFERENCE_COMMAND, run_case

# Legal: a lease is held for lease_seconds (30 by default), and nothing bounds how long a pass takes to decide
# what it claimed. The decision's cutoff is its own transaction's time (protocol note 1).
SLOW_DECISION = Mutant(
    "slow-decision", "", "A second between each claim and its decision.",
    (Edit("processor.py", "import os\n", "import os\nimport time\n"),
     Edit("processor.py",
          "        context = {\"schedule_id\": str(claim.schedule_id), \"dispatch_revision\": claim.dispatch_revision}\n",
          "        context = {\"schedule_id\": str(claim.schedule_id), \"dispatch_revision\": claim.dispatch_revision}\n"
          "        time.sleep(1.0)\n"),))

# Every 90 s from T0+7s, misfire skip. The second pass starts 0.4 s before T0+187s with T0+97s due and Work 1 still
# running; held at its committed decision, Work 1 succeeds beside it. Decided at the pass's start, T0+97s waits as a
# coalesced occurrence; decided after T0+187s, the two instants are one recovery range, skipped.
SCENARIO = """
description = "A pass held for a Work transition beside it, whose decision may cut off past the next instant."

[[steps]]
op = "create"
schedule = "s1"
spec = { kind = "every", every_s = 90, anchor = "+7s", misfire_policy = "skip", target = { command = "s1-v1" } }

[[steps]]
op = "set-clock"
at = "+50s"

[[steps]]
op = "process"

[[steps]]
op = "set-clock"
at = "+186.6s"

[[steps]]
op = "process"
during = { barrier = "schedule-decision-after-commit", op = "complete-work", schedule = "s1", nth = 1, state = "succeeded" }
"""


def _held_pass(outcome) -> dict:
    """The answer of the pass held for the step beside it (the scenario's second pass)."""
    answers = [e["value"] for e in outcome.timeline if e.get("event") == "response" and e.get("op") == "process-due"]
    return answers[1]


@pytest.mark.world
@pytest.mark.parametrize("slow", [False, True], ids=["reference", "slow-decision"])
def test_a_pass_held_beside_a_step_that_decides_past_the_next_instant_passes(world, tmp_path, slow):
    command = REFERENCE_COMMAND
    if slow:
        root = materialize(SLOW_DECISION, tmp_path / "copies")
        command = f"{shlex.quote(sys.executable)} -m mutants --root {shlex.quote(str(root))}"
    scenario = parse("pass-past-an-instant", SCENARIO)
    outcome = run_case(world, scenario, CasePlan(scenario.name), command, tmp_path / "logs")
    beside = [e for e in outcome.timeline if e.get("event") == "beside-barrier"]
    assert [e["outcome"] for e in beside] == ["committed"], beside  # the Work succeeded while the pass was held
    if slow:  # the premise: the copy's decision cut off past T0+187s, and skipped the two instants as one range
        assert _held_pass(outcome)["recovery_skipped"] == 1, _held_pass(outcome)
    # The reference decides at once (T0+97s coalesced), unless the machine is slow enough to cross as the copy does:
    # either way the verdict is a pass.
    assert outcome.verdict == "pass", (outcome.reason, [(c.name, c.evidence) for c in outcome.checks if not c.ok])
