"""Counts agree with their nouns wherever they are printed: `1 case`, `2 cases` (reports.counted), never
`1 cases`."""

from __future__ import annotations

import re
from pathlib import Path

from reports import counted

ROOT = Path(__file__).resolve().parent.parent
NOUNS = ("cases|scenarios|barriers|programs|steps|failures|calls|problems|reports|warnings|combinations|rows|jobs|"
         "times|examples|shards|cores|processors|schedules|occurrences|checks|mutants|findings|seconds|attempts|"
         "characters|statements")
# `{COUNT} nouns` in an f-string: a plural noun glued to a count, whatever the count is (a rate's `/s` aside).
GLUED = re.compile(r"\{([^{}]+)\} (" + NOUNS + r")\b(?!/)")
# `{COUNT} noun(s)`: a count that hedges instead of agreeing.
HEDGED = re.compile(r"\{[^{}]+\} (?:more )?[a-z]+\(s\)")
# Counts that are never 1, each with why.
ALWAYS_PLURAL = {
    ("testhost/runs/hostile_phase.py", "len(value)"): "a string cut for being over its limit of 300 characters",
    ("testhost/case/runner.py", "len(self.started)"): "said once MAX_STARTS (8) starts were made",
    ("bench/case_cost.py", "top"): "the profile's top statements, --top at least 1 and defaulting to 15",
    ("variants/catalog.py", "claimed"): "said only when a pass claimed two or more",
}


def test_counted_puts_a_count_and_its_noun_in_agreement():
    assert [counted(n, "case") for n in (0, 1, 2)] == ["0 cases", "1 case", "2 cases"]
    assert counted(1, "match", "matches") == "1 match" and counted(3, "match", "matches") == "3 matches"


def test_no_printed_count_is_glued_to_a_plural_noun_or_hedged():
    glued = []
    for folder in ("reports", "testhost", "scenarios", "barriers", "mutants", "variants", "reference", "bench"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            where = path.relative_to(ROOT).as_posix()
            for number, line in enumerate(path.read_text().splitlines(), 1):
                for expression, noun in GLUED.findall(line):
                    count, _, spec = expression.partition(":")
                    count = count.split("!")[0].strip()
                    if re.fullmatch(r"[A-Z][A-Z0-9_.]*", count) or (where, count) in ALWAYS_PLURAL or \
                            re.search(r"\.[1-9]f$", spec):
                        continue  # a constant (never 1 where printed), a count listed above, a decimal (1.0 calls)
                    glued.append(f"{where}:{number}: {{{count}}} {noun}")
                if HEDGED.search(line):
                    glued.append(f"{where}:{number}: {HEDGED.search(line).group(0)}")
    assert glued == [], "use reports.counted(COUNT, NOUN): " + "; ".join(glued)
