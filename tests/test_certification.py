"""docs/certification.md maps every spec sentence to what fails an implementation that breaks it in certification,
or why none can; `crashproof coverage` counts it and the README states the count. Pure: no database."""

from __future__ import annotations

import re

from mutants.catalog import MUTANTS
from testhost.runs import coverage
from testhost.judge.registry import CHECKS
from testhost.runs.edges import EDGES, Edge
from testhost.cli import main
from testhost.runs.patch_mutants import preamble
from testhost.runs.sentences import REPO

SAMPLE_SPEC = "Title\n\nA heading\n\nFirst rule here. Second rule here. Third rule here. Fourth rule here.\n"


def _write(tmp_path, page: str):
    spec, doc = tmp_path / "spec.txt", tmp_path / "certification.md"
    spec.write_text(SAMPLE_SPEC)
    doc.write_text(page)
    return doc, spec


def test_every_spec_sentence_is_an_entry_exactly_once_and_no_entry_is_stale():
    found = coverage.sentence_problems()
    assert not found, "docs/certification.md must quote every spec sentence exactly once:\n" + "\n".join(found)


def test_every_entry_cites_what_exists_or_says_why_none_can():
    found = coverage.entry_problems()
    assert not found, "docs/certification.md entries that cite nothing, or what does not exist:\n" + "\n".join(found)


def test_the_checker_names_each_way_a_page_can_be_untrue(tmp_path):
    doc, spec = _write(tmp_path, "\n".join([
        "- > First rule here.",
        "  - checks: `no-such-check`, `model-agreement`",
        "  - scenarios: `no-such-scenario`",
        "  - mutants: `no-such-mutant`, `examples/go/mutants/no-such.patch`",
        "- > First rule here.",
        "  - schema: `schema-nothing`",
        "- > Second rule here.",
        "  - shapes: only sometimes",
        "- > Third rule here.",
        "  - gap (group nobody): a hole",
        "  - pytest: tests/test_x.py::test_y",
        "- > Not in the spec.",
        "  - not behaviour: a stale quote",
        "- > Fourth rule here.",
        "  - checks: the words but no name",
    ]) + "\n")
    found = "\n".join(coverage.problems(doc, spec))
    for expected in ("repeated: First rule here.", "stale (not a spec sentence): Not in the spec.",
                     "no such check: no-such-check", "no such scenario: no-such-scenario",
                     "no such mutant: no-such-mutant", "no such mutant: examples/go/mutants/no-such.patch",
                     "no such schema-stage rule or migration: schema-nothing",
                     "neither enforcement nor a reason: Second rule here.",
                     "a shapes or mutants line without the checks or scenarios it qualifies",
                     "gap of an unknown group 'nobody'", "malformed line '  - pytest: tests/test_x.py::test_y'",
                     "a checks line that names nothing in backticks"):
        assert expected in found, f"{expected!r} not reported in:\n{found}"
    assert "model-agreement" not in found
    doc.write_text("- > First rule here.\n  - checks: `model-agreement`\n")
    assert [p for p in coverage.problems(doc, spec) if p.startswith("missing")] == [
        "missing: Second rule here.", "missing: Third rule here.", "missing: Fourth rule here."]


def test_a_gap_is_never_counted_as_enforced_and_each_class_is_counted_once(tmp_path):
    doc, spec = _write(tmp_path, "\n".join([
        "- > First rule here.",
        "  - checks: `model-agreement`",
        "  - schema: `schema-tables`",
        "- > Second rule here.",
        "  - checks: `queue-one-slot`",
        "  - shapes: only with two schedules",
        "- > Third rule here.",
        "  - checks: `queue-one-slot`",
        "  - gap (group pass): the other side",
        "- > Fourth rule here.",
        "  - schema: `reference/migrations/0004_schedule_protocol.sql` — a check constraint",
    ]) + "\n")
    assert coverage.problems(doc, spec) == []
    found = coverage.summary(doc, spec)
    # The first cites a check but no mutant that breaks it: checked, not proven.
    assert found["counts"] == {"enforced": 0, "unproven": 1, "shapes-only": 1, "schema": 1, "not behaviour": 0,
                               "gap": 1}
    assert found["gaps"] == [("Third rule here.", "pass", "the other side")]
    assert found["unproven"] == [("First rule here.", ["no cited mutant breaks this sentence"])]
    assert coverage.headline(found).startswith("certification enforces 0 of 4 spec sentences")


def test_enforced_means_a_cited_mutant_breaks_the_sentence_or_one_of_its_clauses():
    entry = coverage.Entry(1, "First rule here, and a second clause.",
                           (("checks", "`model-agreement`", None), ("mutants", "`m`", None)))
    assert entry.klass({"m": ("First rule here, and a second clause.",)}) == "enforced"
    assert entry.klass({"m": ("a second clause",)}) == "enforced"  # a clause, as `crashproof mutants` names it
    assert entry.klass({"m": ("Another rule.",)}) == "unproven"
    assert entry.klass({"other": ("First rule here, and a second clause.",)}) == "unproven"  # proven only if cited
    assert entry.unproven_by({}) == ["no cited mutant breaks this sentence"]


def test_every_edge_a_note_declares_has_its_note_scenario_draw_and_mutant():
    found = {name: missing for name, missing in coverage.summary()["edges"]}
    assert not found, "edges of testhost/runs/edges.py without their proof:\n" + "\n".join(
        f"{name}: {'; '.join(missing)}" for name, missing in found.items())
    assert {e.sentence for e in EDGES} <= set(coverage.spec_sentences())


def test_an_edge_without_its_proof_is_reported_part_by_part_and_leaves_its_sentence_unproven():
    edge = Edge("nowhere", "99z", "No such note", EDGES[0].sentence, "nothing", ("no-such-scenario",),
                ("no-such-motif",), ("no-such-mutant", "at-single-never-fires"))
    found = coverage.edge_problems(edge, {"at-single-never-fires": ("Another rule.",)})
    assert found == ["no note 99z titled 'No such note' in docs/protocol-notes.md", "no scenario no-such-scenario",
                     "no explore draw no-such-motif", "mutant no-such-mutant is not in the catalog",
                     "mutant at-single-never-fires does not break the sentence",
                     "mutant at-single-never-fires is not cited under its sentence in docs/certification.md"]
    assert coverage.edge_problems(Edge("bare", "3", "Safety window", EDGES[0].sentence, "", (), (), ()), {}) == [
        "note 3 does not declare it: edge `bare`", "no scenario of the matrix stands on it",
        "explore draws it only by chance", "no mutant breaks it at the edge"]


def test_a_note_declaring_an_edge_the_registry_lacks_is_reported(tmp_path):
    page = tmp_path / "notes.md"
    page.write_text("# Notes\n\n3. **Safety window.** Equal is inside (edge `lateness-equal-window`).\n\n"
                    "7. **At after acceptance.** An At equal to its acceptance is refused (edge `at-on-acceptance`).\n"
                    "## Next\n\n8. **Update.** Nothing here.\n")
    assert coverage.marker_problems(page) == [
        ("note 7", ["declares edge at-on-acceptance, which testhost/runs/edges.py does not register"])]
    assert set(coverage.notes(page)) == {("3", "Safety window."), ("7", "At after acceptance."), ("8", "Update.")}


def test_every_cited_mutant_breaks_the_sentence_or_the_rule_of_a_check_the_entry_cites():
    """A mutant listed under a sentence demonstrates it only if certification catches it naming that sentence, or a
    rule of the checks the entry cites (the mutant's own rule is what `crashproof mutants` requires it be caught by)."""
    rules = {m.name: m.rule for m in MUTANTS}
    rules |= {f"examples/go/mutants/{p.name}": preamble(p)["rule"] for p in coverage.GO_MUTANTS.glob("*.patch")}
    wrong, judged = [], 0
    for entry in coverage.entries():
        judged += len(entry.names("mutants"))
        named = [entry.sentence] + [CHECKS[c] for c in entry.names("checks") if c in CHECKS]
        wrong += [f"line {entry.line}: {m} breaks {rules[m]!r}" for m in entry.names("mutants")
                  if m in rules and not any(rules[m] in text for text in named)]
    assert judged >= len(rules) and not wrong, "mutants cited under a sentence they do not break:\n" + "\n".join(wrong)


def test_the_page_cites_every_mutant_somewhere():
    cited = {m for entry in coverage.entries() for m in entry.names("mutants")}
    every = {m.name for m in MUTANTS} | {f"examples/go/mutants/{p.name}" for p in coverage.GO_MUTANTS.glob("*.patch")}
    assert every - cited == set(), "mutants docs/certification.md does not cite under the sentence they demonstrate"


def test_the_coverage_command_prints_the_page_counts_and_every_gap(capsys):
    assert main(["coverage"]) == 0
    out = capsys.readouterr().out
    found = coverage.summary()
    assert out.splitlines()[0] == coverage.headline(found)
    printed = {m.group(1): int(m.group(2)) for m in re.finditer(r"^  ([a-z][a-z -]*?) +(\d+)$", out, re.M)}
    assert printed == found["counts"] and sum(printed.values()) == found["sentences"] == 78
    for sentence, group, _ in found["gaps"]:
        assert f"[{group}] {sentence}" in out


def test_the_coverage_command_refuses_an_untrue_page(tmp_path, monkeypatch, capsys):
    doc, _ = _write(tmp_path, "- > First rule here.\n  - checks: `no-such-check`\n")
    monkeypatch.setattr(coverage, "PAGE", doc)
    assert main(["coverage"]) == 2
    assert "docs/certification.md is not true" in capsys.readouterr().err


def test_the_readme_states_the_count_the_command_prints():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    headline = coverage.headline(coverage.summary())
    assert headline in " ".join(readme.split()), f"README.md must state: {headline}"


def test_the_coverage_command_lists_the_sentences_caught_only_in_some_shapes_when_asked(capsys):
    assert main(["coverage", "--shapes"]) == 0
    out = capsys.readouterr().out
    found = coverage.summary()
    assert found["shapes"] and "caught only in some shapes:" in out
    for sentence, text in found["shapes"]:
        assert f"  {sentence}\n      {text}" in out
    main(["coverage"])
    assert "caught only in some shapes:" not in capsys.readouterr().out
