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
NOTES = REPO / "docs" / "protocol-notes.md"
GO_MUTANTS = REPO / "examples" / "go" / "mutants"
# A `schema:` line cites a schema-stage rule, or the migration whose constraint or trigger holds the sentence.
MIGRATIONS = REPO / "reference" / "migrations"
# The groups of issue #18 closing escapes, and `unassigned` for a known hole no one is closing yet.
GAP_GROUPS = ("client", "pass", "facts", "unassigned")
LINE = re.compile(r"^  - (checks|scenarios|mutants|variants|shapes|schema|not behaviour|gap \((?:group )?([a-z]+)\)): (.+)$")
NAMED = ("checks", "scenarios", "mutants", "variants", "schema")  # lines whose backticked names must exist
NAME = re.compile(r"`([^`]+)`")
KIND_NOUN = {"checks": "check", "scenarios": "scenario", "mutants": "mutant", "variants": "legal variant",
             "schema": "schema-stage rule or migration"}
# The classes a sentence falls in, exclusive (Entry.klass tries a gap first), in the order they are printed.
# `enforced` is earned by evidence: a cited mutant that breaks the sentence (and one per edge the sentence has,
# testhost/runs/edges.py), each caught by certification naming it; checks and scenarios without that are `unproven`.
CLASSES = ("enforced", "unproven", "shapes-only", "schema", "not behaviour", "gap")


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

    def klass(self, proofs: dict[str, tuple[str, ...]] | None = None) -> str:
        """The sentence's class: a gap is never counted as enforced, whatever else it cites, and checks or
        scenarios count as enforced only with the proof `unproven_by` finds nothing missing from."""
        if self.gaps:
            return "gap"
        if self.of("checks") or self.of("scenarios"):
            if self.of("shapes"):
                return "shapes-only"
            return "unproven" if self.unproven_by(proofs if proofs is not None else mutant_rules()) else "enforced"
        if self.of("schema"):
            return "schema"
        return "not behaviour"

    def unproven_by(self, proofs: dict[str, tuple[str, ...]]) -> list[str]:
        """What the sentence lacks to count as enforced: a cited mutant breaking it (`proofs`: mutant -> the
        sentences it breaks), and for each of its edges the edge's scenario, draw and mutant."""
        from .edges import EDGES
        missing = [] if any(breaks(proofs.get(m, ()), self.sentence) for m in self.names("mutants")) else \
            ["no cited mutant breaks this sentence"]
        return missing + [f"edge {e.name}: {why}" for e in EDGES if e.sentence == self.sentence
                          for why in edge_problems(e, proofs)]


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


def mutant_rules() -> dict[str, tuple[str, ...]]:
    """Every catalog mutant (and Go patch) with the sentences it breaks: its rule and its `also`."""
    from mutants.catalog import MUTANTS

    from .patch_mutants import preamble
    rules = {mutant.name: mutant.rules for mutant in MUTANTS}
    return rules | {f"examples/go/mutants/{p.name}": (preamble(p)["rule"],) for p in GO_MUTANTS.glob("*.patch")}


def breaks(rules: tuple[str, ...], sentence: str) -> bool:
    """A mutant breaks a sentence when one of its rules is the sentence or a clause of it ("processes at most
    MaximumSchedules schedules (default 1)" of the ProcessDueAsync sentence): `crashproof mutants` calls it caught
    when a failing check's rule holds that text."""
    return any(rule in sentence for rule in rules)


NOTE = re.compile(r"^\s*(\d+[a-z]?)\. \*\*(.+?)\*\*", re.MULTILINE)


MARKER = re.compile(r"\bedge\s+`([a-z0-9-]+)`")


def notes(page: Path | None = None) -> dict[tuple[str, str], str]:
    """(label, bold title) -> text, for every numbered note of docs/protocol-notes.md (up to the next note or
    heading)."""
    text = (page or NOTES).read_text(encoding="utf-8")
    starts = list(NOTE.finditer(text))
    found = {}
    for m, after in zip(starts, starts[1:] + [None]):
        body = text[m.start():after.start() if after else len(text)]
        found[(m.group(1), m.group(2))] = body.split("\n#", 1)[0]
    return found


def marker_problems(page: Path | None = None) -> list[tuple[str, list[str]]]:
    """Edges a note declares ("edge `name`") that testhost/runs/edges.py does not register."""
    from .edges import BY_NAME
    return [(f"note {label}", [f"declares edge {name}, which testhost/runs/edges.py does not register"])
            for (label, _), body in notes(page).items() for name in MARKER.findall(body) if name not in BY_NAME]


def edge_problems(edge, proofs: dict[str, tuple[str, ...]] | None = None) -> list[str]:
    """What an edge of testhost/runs/edges.py lacks: its note, a scenario standing on it, a draw of explore aimed at
    it, a mutant breaking its sentence there (and certification.md citing that mutant under the sentence)."""
    from scenarios.generate import MOTIFS, SWARM
    from scenarios.hostile import sweep
    from scenarios.scenario import load_catalog

    from .edges import HOSTILE, SCHEMA_STAGE
    proofs = proofs if proofs is not None else mutant_rules()
    found = []
    bodies = [body for (label, title), body in notes().items() if label == edge.note and title.startswith(edge.title)]
    if not bodies:
        found.append(f"no note {edge.note} titled {edge.title!r} in docs/protocol-notes.md")
    elif not any(edge.name in MARKER.findall(body) for body in bodies):
        found.append(f"note {edge.note} does not declare it: edge `{edge.name}`")
    scenarios = {s.name for s in load_catalog()} | {SCHEMA_STAGE}
    found += [f"no scenario {name}" for name in edge.scenarios if name not in scenarios]
    if not edge.scenarios:
        found.append("no scenario of the matrix stands on it")
    hostile = {HOSTILE + h.field for h in sweep("00000000-0000-0000-0000-000000000000", 1)}
    found += [f"no explore draw {name}" for name in edge.draws if name not in set(SWARM) | set(MOTIFS) | hostile]
    if not edge.draws:
        found.append("explore draws it only by chance")
    found += [f"mutant {name} is not in the catalog" for name in edge.mutants if name not in proofs]
    found += [f"mutant {name} does not break the sentence" for name in edge.mutants
              if name in proofs and not breaks(proofs[name], edge.sentence)]
    if not edge.mutants:
        found.append("no mutant breaks it at the edge")
    cited = {name for e in entries() if e.sentence == edge.sentence for name in e.names("mutants")}
    found += [f"mutant {name} is not cited under its sentence in docs/certification.md" for name in edge.mutants
              if name in proofs and name not in cited]
    return found


def known_names() -> dict[str, set[str]]:
    """What a line may cite, per kind: registered checks, catalog scenarios, mutants, legal variants, schema-stage
    rules (or a reference migration)."""
    from barriers.schema import SCHEMA_RULE
    from mutants.catalog import MUTANTS
    from scenarios.scenario import load_catalog
    from variants.catalog import VARIANTS

    from testhost.judge.registry import CHECKS
    go = {f"examples/go/mutants/{p.name}" for p in GO_MUTANTS.glob("*.patch")}
    migrations = {f"reference/migrations/{p.name}" for p in MIGRATIONS.glob("*.sql")}
    from .schema_version import CASE_ID as SCHEMA_VERSION
    return {"checks": set(CHECKS), "scenarios": {s.name for s in load_catalog()} | {SCHEMA_VERSION},
            "mutants": {m.name for m in MUTANTS} | go, "schema": set(SCHEMA_RULE) | migrations,
            "variants": {v.name for v in VARIANTS}}


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
        if (entry.of("shapes") or entry.of("mutants")) and not (entry.of("checks") or entry.of("scenarios")) \
                and not (entry.of("mutants") and not entry.of("shapes") and entry.of("schema")):
            found.append(f"line {n}: a shapes or mutants line without the checks or scenarios it qualifies "
                         "(or, for mutants, the schema-stage rules)")
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
    proofs = mutant_rules()
    klass = {s: by_sentence[s].klass(proofs) for s in sentences if s in by_sentence}
    counts = Counter(klass.values())
    return {"sentences": len(sentences), "counts": {c: counts.get(c, 0) for c in CLASSES},
            "unproven": [(s, by_sentence[s].unproven_by(proofs)) for s in sentences if klass.get(s) == "unproven"],
            "edges": [(name, missing) for name, missing in ((e.name, edge_problems(e, proofs)) for e in _edges())
                      if missing] + marker_problems(),
            "gaps": [(s, group, text) for s in sentences if s in by_sentence
                     for group, text in by_sentence[s].gaps],
            "shapes": [(s, text) for s in sentences if klass.get(s) == "shapes-only"
                       for text in by_sentence[s].of("shapes")]}


def _edges():
    from .edges import EDGES
    return EDGES


def headline(found: dict) -> str:
    """The one line the README states: how many sentences certification enforces."""
    counts = found["counts"]
    return (f"certification enforces {counts['enforced']} of {found['sentences']} spec sentences in every shape, "
            f"each proven by a mutant it catches; {counts['unproven']} more are checked without that proof, "
            f"{counts['shapes-only']} only in some shapes; {counts['schema']} are the schema the harness "
            f"installs, {counts['not behaviour']} are not behaviour, and {counts['gap']} are known gaps")
