"""Each edge a protocol note declares is drawn by explore on purpose: the simplest program its motif writes (the
edge itself, where shrinking goes) passes the reference and fails every mutant that breaks the edge's sentence
there, naming that sentence. Real worlds: each program runs fault-free through `crashproof certify`."""

from __future__ import annotations

import json

import pytest
from hypothesis import Phase, find, settings, strategies as st

from mutants import BY_NAME
from scenarios.generate import MOTIFS, Drawn, scenario_toml
from testhost.cli import main
from testhost.edges import EDGES

DRAWN = [(edge, draw) for edge in EDGES for draw in edge.draws if draw in MOTIFS]


@st.composite
def _motif(draw, name: str):
    drawn = Drawn()
    steps = MOTIFS[name](draw, drawn)
    return steps, drawn.header


def _program(motif: str, folder) -> str:
    """The motif's simplest program written as a scenario file in `folder`; its fault-free case id."""
    # A motif that could not set its situation up (no anchored grid to freeze on) writes no pass: not its edge.
    steps, header = find(_motif(motif), lambda program: any(step["op"] == "process" for step in program[0]),
                         settings=settings(database=None, deadline=None, phases=(Phase.generate, Phase.shrink)))
    name = f"edge-{motif}"
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.toml").write_text(scenario_toml(steps, f"the motif {motif}, drawn on its edge",
                                                       header=header))
    return name


def _certify(tmp_path, case: str, impl: list[str]) -> tuple[int, list[dict]]:
    code = main(["certify", "--catalog", str(tmp_path / "catalog"), "--case", case, "--jobs", "1",
                 "--report-dir", str(tmp_path / "report"), *impl])
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    return code, [c for case in report["cases"] for c in case["checks"] if not c["ok"]]


def test_every_edge_with_a_motif_is_drawn_here():
    assert {edge.name for edge, _ in DRAWN} >= {"lateness-equal-window", "update-behind-cursor",
                                                 "grid-before-anchor", "cutoff-end-included"}


@pytest.mark.parametrize(("edge", "motif"), DRAWN, ids=[f"{e.name}:{m}" for e, m in DRAWN])
def test_the_motif_on_its_edge_passes_the_reference(edge, motif, tmp_path):
    case = _program(motif, tmp_path / "catalog")
    code, failed = _certify(tmp_path, case, [])
    assert code == 0 and not failed, failed


@pytest.mark.parametrize(("edge", "motif", "mutant"), [(e, m, name) for e, m in DRAWN for name in e.mutants],
                         ids=[f"{e.name}:{name}" for e, m in DRAWN for name in e.mutants])
def test_the_motif_on_its_edge_catches_each_mutant_of_the_edge_naming_its_sentence(edge, motif, mutant, tmp_path):
    case = _program(motif, tmp_path / "catalog")
    code, failed = _certify(tmp_path, case, ["--impl", BY_NAME[mutant].command])
    assert code == 1, f"{mutant} certified on the {motif} motif's program"
    assert any(BY_NAME[mutant].rule in check["rule"] for check in failed), [c["name"] for c in failed]
