"""The pages say what is true now, not who did what when: no line of docs/*.md or README.md speaks of work sessions
("the eleventh session", "this session", "a later session"), of a lead, engineers or helpers, or of "yesterday".
Measurements over time belong in docs/performance.md, keyed by commit and date. Pure: no database.

"Session" is also a database word ("a second session and a lock wait", "one session per part", "the session's plan
cache"): only an ordinal used as a name for a stretch of work is flagged, not "a second session" the server opens.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

ORDINALS = ("first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|thirteenth|"
            "fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|twentieth|twenty-\\w+|thirtieth")
# Whitespace includes a line break, so a phrase wrapped across two lines is found too.
DIARY = re.compile(
    # "the eleventh session('s)", "(fourth session;", "since the fifteenth session": an ordinal naming a stretch of
    # work. "a second session" (another database session) is the database's word and is left alone.
    rf"(?<![Aa] )(?<![Aa]n )(?<![Oo]ne )(?<!another )\b(?:{ORDINALS})\s+sessions?\b"
    # "this session's figures", "a later session", "two sessions earlier"
    r"|\bthis\s+session\b"
    r"|\b(?:a|an|the)\s+(?:later|earlier|previous|past|last)\s+session\b"
    r"|\b(?:one|two|three|four|five|several|a\s+few)\s+sessions\s+(?:earlier|later|ago|before)\b"
    # a lead as a person: "the lead's", "the lead removes"; not the verb ("its links lead to") nor "lead time"
    r"|\blead's\b"
    r"|\b(?:the|a|our|your|their|project's)\s+lead\b(?!-|\s+(?:to|time|times|in|of|into)\b)"
    # people: "five other engineers' worlds", "a helper"; not a helper function, module or script
    r"|\bengineers?(?:'s|s')?\b"
    r"|(?<!fault )(?<!test )\bhelpers?(?:'s|s')?\b(?!\s+(?:functions?|modules?|scripts?|class(?:es)?|methods?|"
    r"process(?:es)?|threads?|programs?)\b)"
    r"|\byesterday\b",
    re.IGNORECASE)


def pages(root: Path = ROOT) -> list[Path]:
    return sorted((root / "docs").glob("*.md")) + [root / "README.md"]


def diary_lines(root: Path = ROOT) -> list[str]:
    """Every diary phrase in the pages under `root`, as `path:line: phrase`."""
    found = []
    for path in pages(root):
        text = path.read_text(encoding="utf-8")
        for match in DIARY.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append(f"{path.relative_to(root).as_posix()}:{line}: {' '.join(match.group(0).split())}")
    return found


def test_no_page_reads_as_a_diary():
    found = diary_lines()
    assert found == [], ("say what is true now, and key a measurement by commit and date in docs/performance.md:\n"
                         + "\n".join(found))


def test_the_pattern_finds_diary_wording_and_leaves_the_database_words_alone():
    diary = ["the eleventh session planned less", "In the fifth session: the slot query", "(fourth session; same-day",
             "the ninth\nsession's scenarios", "with this session's generator", "in a later session",
             "two sessions earlier", "the idle full matrix is the lead's to measure", "until the lead removes the line",
             "with five other engineers' worlds", "an engineer measured", "a helper ran it", "the helpers' runs",
             "since the fifteenth session", "as we found yesterday"]
    legit = ["needs a second session and a lock wait per case", "one session per part", "a database session",
             "the session's plan cache", "a runtime session for its three parts", "its links lead to the part's logs",
             "the lead time of a pass", "one superuser session for the fault helpers", "a test helper",
             "the helper functions of faults.py", "engineering", "leads to", "in its own session", "the sessions of a world",
             "`one-session-per-part`", "a session of its own", "every new runtime session before it is used"]
    assert [text for text in diary if not DIARY.search(text)] == []
    assert [text for text in legit if DIARY.search(text)] == []


def test_performance_md_is_a_listed_page():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "## Pages" in readme and "(docs/performance.md)" in readme.split("## Pages", 1)[1]
    assert (ROOT / "docs" / "performance.md").is_file()
