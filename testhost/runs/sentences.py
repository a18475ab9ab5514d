"""The normative spec cut into sentences by one fixed rule, and the `- > ` entries of a page that quotes them.

One source for docs/traceability.md, docs/certification.md, their tests and `crashproof coverage`: a sentence cut
differently in two places would let one page quote what the other cannot find.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# A copy of the normative spec is kept in docs/spec/ so a bare clone can test itself (tests compare it with the
# shared one where that lies beside the checkout).
SPEC = Path(os.environ.get("CRASHPROOF_SPEC", REPO / "docs" / "spec" / "durable-schedule-protocol-v1.txt"))
SHARED_SPEC = REPO.parent / "shared" / "spec" / "durable-schedule-protocol-v1.txt"

SENTENCE_BREAK = re.compile(r"(?<=[.:])\s+(?=[A-Z(0-9])")
LIST_NUMBER = re.compile(r"\d+\.")
ENTRY = "- > "


def is_heading(line: str) -> bool:
    """A section heading: a non-empty line that does not end with '.' or ':' and is shorter than 80 characters."""
    text = line.strip()
    return bool(text) and not text.endswith((".", ":")) and len(text) < 80


def split_spec(text: str) -> list[tuple[str, list[str]]]:
    """[(section heading, [sentence, ...]), ...]: the title line and the headings dropped from the text, the
    remaining paragraphs joined, each split at SENTENCE_BREAK, stripped, list numbers ("1.") dropped, internal
    whitespace normalized to single spaces."""
    sections: list[tuple[str, list[str]]] = [("", [])]
    paragraph: list[str] = []

    def flush() -> None:
        if paragraph:
            for piece in SENTENCE_BREAK.split(" ".join(paragraph)):
                sentence = " ".join(piece.split())
                if sentence and not LIST_NUMBER.fullmatch(sentence):
                    sections[-1][1].append(sentence)
            paragraph.clear()

    for line in text.splitlines()[1:]:  # the first line is the title
        if not line.strip():
            flush()
        elif is_heading(line):
            flush()
            sections.append((line.strip(), []))
        else:
            paragraph.append(line.strip())
    flush()
    return [(heading, sentences) for heading, sentences in sections if sentences or heading]


def spec_sections(spec: Path = SPEC) -> list[tuple[str, list[str]]]:
    """The spec's sections and their sentences, in order."""
    if not spec.is_file():
        raise FileNotFoundError(f"the normative spec is not at {spec} (set CRASHPROOF_SPEC to its path)")
    return split_spec(spec.read_text(encoding="utf-8"))


def spec_sentences(spec: Path = SPEC) -> tuple[str, ...]:
    """Every sentence of the spec, in order."""
    return tuple(s for _, sentences in spec_sections(spec) for s in sentences)


def page_entries(page: Path) -> tuple[tuple[int, str, tuple[str, ...]], ...]:
    """(line number, quoted sentence, (sub-bullet lines, ...)) for every `- > ` entry of a page."""
    entries: list[tuple[int, str, list[str]]] = []
    current: list[str] | None = None  # the sub-bullets of the entry being read, None outside an entry
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith(ENTRY):
            current = []
            entries.append((number, line[len(ENTRY):], current))
        elif line.startswith("  ") and current is not None:
            current.append(line)
        elif line.strip():
            current = None  # a heading or prose ends the entry; only lines right below it belong to it
    return tuple((n, s, tuple(subs)) for n, s, subs in entries)
