"""Each edge a protocol note declares is drawn by explore on purpose: the programs its motif writes (each way the
motif can stand on the edge, or beside it) pass the reference, and some of them fail every mutant that breaks the
edge's sentence there, naming that sentence. Real worlds: the programs run fault-free through `crashproof
certify`, once for the reference and once per mutant."""

from __future__ import annotations

import json

import pytest
from mutants import BY_NAME, migrations_dir
from scenarios.generate import MOTIFS, motif_programs, scenario_toml
from testhost.cli import main
from testhost.runs.edges import EDGES

DRAWN = [(edge, draw) for edge in EDGES for draw in edge.draws if draw in MOTIFS]
MOTIF_NAMES = sorted({draw for _, draw in DRAWN})
VARIANTS = 12  # programs drawn per motif: its choices on or beside the edge are few


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    """Every motif's programs as fault-free scenario files, one folder per motif."""
    root = tmp_path_factory.mktemp("edges")
    for motif in MOTIF_NAMES:
        folder = root / motif
        folder.mkdir()
        for i, (steps, header) in enumerate(motif_programs(motif, VARIANTS)):
            text = scenario_toml(steps, f"the motif {motif}, drawn on or beside its edge",
                                 header={**header, "fault_free": True})
            (folder / f"edge-{motif}-{i}.toml").write_text(text)
    return root


def _certify(catalog, motif: str, report, impl: list[str]) -> tuple[int, list[dict]]:
    code = main(["certify", "--catalog", str(catalog / motif), "--jobs", "1", "--report-dir", str(report), *impl])
    cases = json.loads((report / "report.json").read_text())["cases"]
    return code, [c for case in cases for c in case["checks"] if not c["ok"]]


def test_every_edge_with_a_motif_is_drawn_here():
    assert {edge.name for edge, _ in DRAWN} >= {"lateness-equal-window", "lateness-past-window", "update-on-cursor",
                                                 "update-behind-cursor", "grid-before-anchor", "cutoff-end-included"}


@pytest.mark.parametrize("motif", MOTIF_NAMES)
def test_each_motif_on_its_edge_passes_the_reference(motif, catalog, tmp_path):
    assert len(list((catalog / motif).glob("*.toml"))) >= 1
    code, failed = _certify(catalog, motif, tmp_path, [])
    assert code == 0 and not failed, failed


EDGE_MUTANTS = [(e, name) for e in EDGES if any(d in MOTIFS for d in e.draws) for name in e.mutants]


@pytest.mark.parametrize(("edge", "mutant"), EDGE_MUTANTS, ids=[f"{e.name}:{name}" for e, name in EDGE_MUTANTS])
def test_a_motif_on_its_edge_catches_each_mutant_of_the_edge_naming_its_sentence(edge, mutant, catalog, tmp_path):
    """Some motif the edge names catches the mutant (an At's end is not an Every's): the first that does."""
    schema = migrations_dir(BY_NAME[mutant])  # a mutant that drops a guard of the schema runs on its own
    impl = ["--impl", BY_NAME[mutant].command] + (["--migrations", str(schema)] if schema else [])
    named = {}
    for motif in (d for d in edge.draws if d in MOTIFS):
        code, failed = _certify(catalog, motif, tmp_path / motif, impl)
        named[motif] = sorted({c["name"] for c in failed})
        if code == 1 and any(BY_NAME[mutant].rule in check["rule"] for check in failed):
            return
    pytest.fail(f"{mutant} certified, or failed naming other rules, on every program of {edge.draws}: {named}")


def test_explore_meets_each_edge_before_any_drawn_program(tmp_path):
    """The edge sweep runs every edge motif's programs first: a mutant off by one at the safety window's edge is
    found with no program drawn at all, and the find replays like any other."""
    from testhost.runs.explore import Options, explore
    mutant = BY_NAME["window-equal-suspends"]
    code, report = explore(Options(command=mutant.command, max_examples=1, hostile=0, out=tmp_path / "found",
                                   report_dir=tmp_path / "report", progress=lambda line: None))
    assert code == 1
    run = report["run"]["explore"]
    assert run["edge_programs"] >= 1 and run["examples"] == 0
    [found] = run["found"]
    assert found["examples_to_failure"] == 0
    assert any(mutant.rule in check["rule"] for check in found["checks"]), found["checks"]
    assert found["replayed"]["reproduced"] == 2
