"""The matrix view of a report: scenario rows × (barrier, fault) columns, failures first."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

FAULT_FREE = ("fault-free", "")
BAD = ("fail", "error")
# A cell takes the colour of its worst case.
SEVERITY = {"fail": 0, "error": 1, "not-run": 2, "pass": 3}


def column(case: dict) -> tuple[str, str]:
    if case.get("fault") is None:
        return FAULT_FREE
    return str(case.get("barrier")), str(case.get("fault"))


def row(case: dict) -> str:
    return str(case.get("scenario") or case.get("id"))


def worst(verdicts) -> str:
    return min(verdicts, key=lambda v: SEVERITY.get(v, 0), default="pass")


@dataclass
class Cell:
    index: int
    row: str
    column: tuple[str, str]
    cases: list[dict] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        return worst(c.get("verdict") for c in self.cases)

    @property
    def counts(self) -> Counter:
        return Counter(c.get("verdict") for c in self.cases)


@dataclass
class Matrix:
    rows: list[str]
    columns: list[tuple[str, str]]
    cells: dict[tuple[str, tuple[str, str]], Cell]
    cell_of: dict[str, int]  # case id -> cell index


def _bad(cases) -> int:
    return sum(c.get("verdict") in BAD for c in cases)


def build(cases: list[dict]) -> Matrix:
    by_row: dict[str, list[dict]] = {}
    by_column: dict[tuple[str, str], list[dict]] = {}
    for case in cases:
        by_row.setdefault(row(case), []).append(case)
        by_column.setdefault(column(case), []).append(case)
    rows = sorted(by_row, key=lambda r: (-_bad(by_row[r]), r))
    # Columns stay grouped by barrier: barriers with failures first, faults in order of first appearance.
    barrier_bad = Counter()
    fault_order: dict[str, int] = {}
    for (barrier, fault), members in by_column.items():
        barrier_bad[barrier] += _bad(members)
        fault_order.setdefault(fault, len(fault_order))
    columns = sorted(by_column, key=lambda c: (c != FAULT_FREE, -barrier_bad[c[0]], c[0], fault_order[c[1]]))
    cells: dict[tuple[str, tuple[str, str]], Cell] = {}
    cell_of: dict[str, int] = {}
    for r in rows:
        for case in by_row[r]:
            key = (r, column(case))
            if key not in cells:
                cells[key] = Cell(len(cells), r, key[1])
            cells[key].cases.append(case)
    for cell in cells.values():
        cell.cases.sort(key=lambda c: (SEVERITY.get(c.get("verdict"), 0), str(c.get("id"))))
        for case in cell.cases:
            cell_of[str(case.get("id"))] = cell.index
    return Matrix(rows, columns, cells, cell_of)


def counts_by(cases: list[dict], key) -> dict[str, Counter]:
    """Verdict counts grouped by key(case), keys with failures first."""
    groups: dict[str, Counter] = {}
    for case in cases:
        groups.setdefault(key(case), Counter())[case.get("verdict")] += 1
    return dict(sorted(groups.items(), key=lambda kv: (-(kv[1]["fail"] + kv[1]["error"]), kv[0])))


def first_failed_check(case: dict) -> dict | None:
    return next((c for c in case.get("checks", []) if not c.get("ok", True)), None)


def not_compared(case: dict) -> list[dict]:
    """The case's checks that were not applied (`skipped` says why): neither passed nor failed."""
    return [c for c in case.get("checks", []) if c.get("skipped")]


def uncompared(cases: list[dict]) -> dict[str, list[dict]]:
    """Per scenario, its cases in which some check was not compared (fault-free run's judges left out)."""
    found: dict[str, list[dict]] = {}
    for case in cases:
        if not_compared(case):
            found.setdefault(row(case), []).append(case)
    return found


def uncompared_sentence(cases: list[dict]) -> str:
    """One sentence on the cases judged without their fault-free run, or "" when there are none."""
    found = uncompared(cases)
    if not found:
        return ""
    total = sum(len(v) for v in found.values())
    checks = sorted({c["name"] for members in found.values() for case in members for c in not_compared(case)})
    return (f"{total} case{'s' * (total != 1)} not compared with the fault-free run ({', '.join(checks)} not "
            "applied; the model says the faulted timeline ends differently, each case's check says why; "
            "model-agreement judged them): " + ", ".join(f"{name} ({len(v)})" for name, v in sorted(found.items())))


def anchor(case_id: str) -> str:
    """The fragment naming a case in report.html (the same in report.md's links)."""
    return "case-" + "".join("~" if ch == "#" else "_" if ch.isspace() else ch for ch in case_id)
