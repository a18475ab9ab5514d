"""docs/certification.md read as data: per spec sentence, what in certification fails an implementation that
breaks it (checks, catalog scenarios, mutants that prove it), or why none can; the counts `crashproof coverage`
prints and the README states."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from .sentences import REPO, page_entries, spec_sentences

PAGE = REPO / "docs" / "certification.md"
GO_MUTANTS = REPO / "examples" / "go" / "mutants"
# A `schema:` line cites a schema-stage rule, or the migration whose constraint or trigger holds the sentence.
MIGRATIONS = REPO / "reference" / "migrations"
# The groups of issue #18 closing escapes, and `unassigned` for a known hole no one is closing yet.
GAP_GROUPS = ("client", "pass", "facts", "unassigned")
LINE = re.compile(r"^  - (checks|scenarios|mutants|shapes|schema|not behaviour|gap \((?:group )?([a-z]+)\)): (.+)$")
NAMED = ("checks", "scenarios", "mutants", "schema")  # lines whose backticked names must exist
NAME = re.compile(r"`([^`]+)`")
KIND_NOUN = {"checks": "check", "scenarios": "scenario", "mutants": "mutant",
             "schema": "schema-stage rule or migration"}
# The classes a sentence falls in, exclusive (Entry.klass tries a gap first), in the order they are printed.
CLASSES = ("enforced", "shapes-only", "schema", "not behaviour", "gap")


@dataclass(frozen=True)
class Entry:
    line: int
    sentence: str
    lines: tuple[tuple[str, str, str | None], ...]  # (kind, text, gap group)

    def of(self, kind: str) -> list[str]:
        return [text for k, text, _ in self.lines if k == kind]

    def names(self, kind: str) -> list[str]:
        """The backticked names a line of that kind cites, before any ' — ' explanation."""
        return [name for text in self.of(kind) for name in NAME.findall(text.split(" — ", 1)[0])]

    @property
    def gaps(self) -> list[tuple[str, str]]:
        return [(group, text) for k, text, group in self.lines if k == "gap"]

    @property
    def klass(self) -> str:
        """The sentence's class: a gap is never counted as enforced, whatever else it cites."""
        if self.gaps:
            return "gap"
        if self.of("checks") or self.of("scenarios"):
            return "shapes-only" if self.of("shapes") else "enforced"
        if self.of("schema"):
            return "schema"
        return "not behaviour"


def _parse(subs: tuple[str, ...]) -> tuple[tuple[tuple[str, str, str | None], ...], list[str]]:
    parsed, malformed = [], []
    for line in subs:
        m = LINE.match(line)
        if m is None:
            malformed.append(line)
            continue
        kind = "gap" if m.group(1).startswith("gap") else m.group(1)
        parsed.append((kind, m.group(3), m.group(2)))
    return tuple(parsed), malformed


def entries(page: Path | None = None) -> list[Entry]:
    """Every `- > ` entry of the page with its parsed lines (malformed lines dropped: `problems` names them)."""
    return [Entry(n, s, _parse(subs)[0]) for n, s, subs in page_entries(page or PAGE)]


def known_names() -> dict[str, set[str]]:
    """What a line may cite, per kind: registered checks, catalog scenarios, mutants, schema-stage rules (or a
    reference migration)."""
    from barriers.schema import SCHEMA_RULE
    from mutants.catalog import MUTANTS
    from scenarios.model import load_catalog

    from .checks import CHECKS
    go = {f"examples/go/mutants/{p.name}" for p in GO_MUTANTS.glob("*.patch")}
    migrations = {f"reference/migrations/{p.name}" for p in MIGRATIONS.glob("*.sql")}
    from .schema_version import CASE_ID as SCHEMA_VERSION
    return {"checks": set(CHECKS), "scenarios": {s.name for s in load_catalog()} | {SCHEMA_VERSION},
            "mutants": {m.name for m in MUTANTS} | go, "schema": set(SCHEMA_RULE) | migrations}


def sentence_problems(page: Path | None = None, spec: Path | None = None) -> list[str]:
    """Sentences of the spec the page does not quote exactly once, and quotes that are no spec sentence."""
    sentences = spec_sentences(*([spec] if spec else []))
    raw = page_entries(page or PAGE)
    quoted = Counter(s for _, s, _ in raw)
    return ([f"missing: {s}" for s in sentences if quoted[s] == 0]
            + [f"repeated: {s}" for s in sentences if quoted[s] > 1]
            + [f"line {n}: stale (not a spec sentence): {s}" for n, s, _ in raw if s not in set(sentences)])


def entry_problems(page: Path | None = None) -> list[str]:
    """Malformed lines, entries with neither enforcement nor a reason, names that do not exist, unknown groups."""
    found = []
    names = known_names()
    for n, sentence, subs in page_entries(page or PAGE):
        lines, malformed = _parse(subs)
        found += [f"line {n}: malformed line {line!r}" for line in malformed]
        entry = Entry(n, sentence, lines)
        if not any(entry.of(k) for k in ("checks", "scenarios", "schema", "not behaviour", "gap")):
            found.append(f"line {n}: neither enforcement nor a reason: {sentence}")
        if (entry.of("shapes") or entry.of("mutants")) and not (entry.of("checks") or entry.of("scenarios")):
            found.append(f"line {n}: a shapes or mutants line without the checks or scenarios it qualifies")
        for kind in NAMED:
            found += [f"line {n}: a {kind} line that names nothing in backticks: {text!r}"
                      for text in entry.of(kind) if not NAME.findall(text.split(" — ", 1)[0])]
            found += [f"line {n}: no such {KIND_NOUN[kind]}: {name}" for name in entry.names(kind)
                      if name not in names[kind]]
        found += [f"line {n}: gap of an unknown group {group!r} (one of {', '.join(GAP_GROUPS)})"
                  for group, _ in entry.gaps if group not in GAP_GROUPS]
    return found


def problems(page: Path | None = None, spec: Path | None = None) -> list[str]:
    """Everything that makes the page untrue."""
    return sentence_problems(page, spec) + entry_problems(page)


def summary(page: Path | None = None, spec: Path | None = None) -> dict:
    """Counts per class over the spec's sentences, and the gaps with their groups."""
    by_sentence = {e.sentence: e for e in entries(page)}
    sentences = spec_sentences(*([spec] if spec else []))
    counts = Counter(by_sentence[s].klass for s in sentences if s in by_sentence)
    return {"sentences": len(sentences), "counts": {c: counts.get(c, 0) for c in CLASSES},
            "gaps": [(s, group, text) for s in sentences if s in by_sentence
                     for group, text in by_sentence[s].gaps],
            "shapes": [(s, text) for s in sentences if s in by_sentence and by_sentence[s].klass == "shapes-only"
                       for text in by_sentence[s].of("shapes")]}


def headline(found: dict) -> str:
    """The one line the README states: how many sentences certification enforces."""
    counts = found["counts"]
    return (f"certification enforces {counts['enforced']} of {found['sentences']} spec sentences in every shape, "
            f"{counts['shapes-only']} more only in some shapes; {counts['schema']} are the schema the harness "
            f"installs, {counts['not behaviour']} are not behaviour, and {counts['gap']} are known gaps")
