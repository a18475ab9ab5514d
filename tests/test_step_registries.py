"""The step language and its two halves in testhost name the same kinds, and each half has what its caller calls:
the runner a kind's `run` (and `run_beside` for a kind allowed beside a held barrier), the replay its `replay`,
and a client kind's run the `apply` of its replay."""

import subprocess
import sys

from scenarios.steps import STEPS, ClientStep
from testhost.case.step_runs import RUNS, ClientRun, StepRun
from testhost.judge.step_replays import REPLAYS, ClientReplay, StepReplay


def test_the_language_the_runs_and_the_replays_name_the_same_kinds():
    assert set(RUNS) == set(STEPS) == set(REPLAYS)


def test_every_kind_runs_and_a_kind_allowed_beside_a_held_barrier_runs_there_too():
    for op, run in RUNS.items():
        assert run.op == op and run.kind is STEPS[op]
        assert type(run).run is not StepRun.run, f"{op} has no run"
        if STEPS[op].beside_barrier:
            assert type(run).run_beside is not StepRun.run_beside, f"{op} may run beside a held barrier but cannot"


def test_every_kind_replays_and_a_client_kind_applies_its_command_in_the_model():
    for op, replay in REPLAYS.items():
        assert replay.op == op
        assert type(replay).replay is not StepReplay.replay, f"{op} has no replay"
        if isinstance(STEPS[op], ClientStep):
            assert isinstance(replay, ClientReplay) and type(replay).apply is not ClientReplay.apply, op
            assert isinstance(RUNS[op], ClientRun) and type(RUNS[op]).model is not ClientRun.model, op
            assert RUNS[op].operation == STEPS[op].operation


def test_the_language_is_read_without_testhost():
    """scenarios/ sits below testhost: loading the language and the matrix loads nothing of it."""
    probe = ("import sys, scenarios.steps, scenarios.scenario, scenarios.matrix, scenarios.render; "
             "print([m for m in sys.modules if m.split('.')[0] == 'testhost'])")
    found = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert found.strip() == "[]"
