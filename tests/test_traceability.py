"""docs/traceability.md maps every sentence of the normative spec to the tests that pin it. Pure: no database.

The spec is split into sentences by one fixed rule (testhost/runs/sentences.py); the page must quote each sentence exactly once as a
`- > ` entry, each entry must cite at least one test id (`tests/<file>.py::<function>`) or say why it is
`outside Gate A:`, every cited test must exist, and no entry may quote text that is no longer a spec sentence.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from functools import cache

import pytest

from testhost.runs import sentences
from testhost.runs.sentences import ENTRY, REPO, SHARED_SPEC, SPEC, split_spec

PAGE = REPO / "docs" / "traceability.md"
TEST_ID = re.compile(r"^  - (tests/[\w/]+\.py)::(\w+)$")
OUTSIDE = re.compile(r"^  - outside Gate A: .+, see docs/protocol-notes\.md$")


@cache
def spec_sentences() -> tuple[str, ...]:
    return sentences.spec_sentences()


@cache
def page_entries() -> tuple[tuple[int, str, tuple[str, ...]], ...]:
    return sentences.page_entries(PAGE)


@cache
def defined_functions(path: str) -> frozenset[str]:
    """Names of module-level functions and of methods of module-level classes in a test file."""
    tree = ast.parse((REPO / path).read_text(encoding="utf-8"), filename=path)
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names.update(n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
    return frozenset(names)


def test_the_splitting_rule_on_a_sample():
    sample = ("Title\n\nA heading\n\nFirst one. nominal stays. Second (with x): Third line.\ncontinued:\n\n"
              "1. Listed item.\n2. Another item.\n\n(a, b).\n")
    assert split_spec(sample) == [("A heading", ["First one. nominal stays.", "Second (with x):",
                                                 "Third line. continued:", "Listed item.", "Another item.",
                                                 "(a, b)."])]


def test_every_spec_sentence_is_an_entry_exactly_once():
    quoted = Counter(sentence for _, sentence, _ in page_entries())
    missing = [s for s in spec_sentences() if quoted[s] == 0]
    repeated = [s for s in spec_sentences() if quoted[s] > 1]
    assert not missing and not repeated, (
        f"docs/traceability.md must quote every spec sentence exactly once as '{ENTRY}<sentence>'.\n"
        + "".join(f"missing: {s}\n" for s in missing) + "".join(f"repeated: {s}\n" for s in repeated))


def test_no_entry_quotes_text_that_is_not_a_spec_sentence():
    known = set(spec_sentences())
    stale = [f"line {n}: {s}" for n, s, _ in page_entries() if s not in known]
    assert not stale, "entries quoting text that is not a sentence of the spec (stale after a spec change?):\n" + \
        "\n".join(stale)


def test_every_entry_cites_a_test_or_says_why_it_is_outside_gate_a():
    bare, malformed = [], []
    for n, sentence, subs in page_entries():
        if not any(TEST_ID.match(line) or OUTSIDE.match(line) for line in subs):
            bare.append(f"line {n}: {sentence}")
        malformed += [f"line {n}: {line!r} (under: {sentence})" for line in subs
                      if not (TEST_ID.match(line) or OUTSIDE.match(line))]
    assert not bare, "entries without a test id or an 'outside Gate A:' line:\n" + "\n".join(bare)
    assert not malformed, ("lines under an entry must be '  - tests/<file>.py::<function>' or "
                           "'  - outside Gate A: <reason>, see docs/protocol-notes.md':\n" + "\n".join(malformed))


def test_every_cited_test_exists():
    cited = [(n, m.group(1), m.group(2)) for n, _, subs in page_entries() for line in subs
             if (m := TEST_ID.match(line))]
    assert cited, "docs/traceability.md cites no test at all"
    absent = []
    for n, path, name in cited:
        if not (REPO / path).is_file():
            absent.append(f"line {n}: {path}::{name} (no such file)")
        elif name not in defined_functions(path):
            absent.append(f"line {n}: {path}::{name} (no such function in {path})")
    assert not absent, "cited test ids that do not exist:\n" + "\n".join(absent)


def test_the_copy_of_the_spec_is_the_normative_one():
    if not SHARED_SPEC.is_file():
        pytest.skip(f"no {SHARED_SPEC} beside this bare clone to compare with (CI and our machines have one)")
    assert SPEC.read_text() == SHARED_SPEC.read_text(), (
        f"{SPEC} differs from {SHARED_SPEC}: the spec changed; copy it and update docs/traceability.md")
