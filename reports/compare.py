"""Reports side by side: `diff` (cases whose verdict changed) and `merge` (reports of disjoint selections)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from . import ReportError, counted
from .matrix_view import BAD, not_compared
from .report import Loaded, build, clock_skew, fallbacks


@dataclass
class Diff:
    changed: list[tuple[str, str, str]] = field(default_factory=list)  # (id, old verdict, new verdict)
    added: list[tuple[str, str]] = field(default_factory=list)
    removed: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # (id, checks compared in OLD and not in NEW, checks not compared in OLD and compared in NEW)
    comparison: list[tuple[str, list[str], list[str]]] = field(default_factory=list)

    @property
    def new_failures(self) -> list[str]:
        """Cases failing (or erring) now that did not before, including cases the old run did not have."""
        return ([i for i, old, new in self.changed if new in BAD and old not in BAD] +
                [i for i, new in self.added if new in BAD])

    def lines(self) -> list[str]:
        out = list(self.notes)
        out += [f"{'NEW FAILURE' if new in BAD and old not in BAD else 'changed':11} {i}: {old} -> {new}"
                for i, old, new in self.changed]
        out += [f"{'NEW FAILURE' if new in BAD else 'added':11} {i}: {new} (not in the old run)"
                for i, new in self.added]
        out += [f"{'removed':11} {i}: was {old} (not in the new run)" for i, old in self.removed]
        for i, dropped, regained in self.comparison:
            out += [f"{'not compared now' if names is dropped else 'compared now'} {i}: {', '.join(names)}"
                    for names in (dropped, regained) if names]
        out.append(f"{len(self.changed)} changed, {len(self.added)} added, {len(self.removed)} removed; "
                   f"{len(self.new_failures)} new failure{'s' * (len(self.new_failures) != 1)}")
        return out


def diff(old: Loaded, new: Loaded) -> Diff:
    result = Diff()
    for key in ("suite_version",):
        if old.report.get(key) != new.report.get(key):
            result.notes.append(f"note: {key} differs: {old.report.get(key)} -> {new.report.get(key)}")
    before = {str(c.get("id")): c.get("verdict") for c in old.report["cases"]}
    after = {str(c.get("id")): c.get("verdict") for c in new.report["cases"]}
    for case_id, verdict in after.items():
        if case_id not in before:
            result.added.append((case_id, verdict))
        elif before[case_id] != verdict:
            result.changed.append((case_id, before[case_id], verdict))
    result.removed = [(i, v) for i, v in before.items() if i not in after]
    skipped = lambda case: {c.get("name") for c in not_compared(case)}  # noqa: E731
    old_skipped = {str(c.get("id")): skipped(c) for c in old.report["cases"]}
    for case in new.report["cases"]:
        case_id = str(case.get("id"))
        if case_id in old_skipped and old_skipped[case_id] != skipped(case):
            result.comparison.append((case_id, sorted(skipped(case) - old_skipped[case_id]),
                                      sorted(old_skipped[case_id] - skipped(case))))
    return result


def _same(loaded: list[Loaded], what: str, value) -> None:
    seen = {}
    for item in loaded:
        seen.setdefault(repr(value(item.report)), item.directory)
    if len(seen) > 1:
        raise ReportError(f"cannot merge reports of different {what}: " +
                          "; ".join(f"{d}: {v}" for v, d in seen.items()))


def _ends(report: dict) -> tuple[datetime, datetime] | None:
    run = report.get("run", {})
    try:
        start = datetime.fromisoformat(run["started_at"])
        return start, start.fromtimestamp(start.timestamp() + float(run.get("duration_s") or 0), start.tzinfo)
    except (KeyError, TypeError, ValueError):
        return None


def _relocated(case: dict, part: Path, out: Path | None) -> dict:
    """The case with its log paths relative to the merged report's folder instead of its part's."""
    if out is None or not case.get("logs"):
        return case
    return {**case, "logs": {label: os.path.relpath(Path(part).absolute() / path, Path(out).absolute())
                             for label, path in case["logs"].items()}}


def merge(loaded: list[Loaded], out: Path | None = None) -> dict:
    """One report of the union of the cases of reports of disjoint selections of the same suite and
    implementation; refuses anything else. With `out` (the folder the merged report goes to), each case's log
    paths are rewritten to stay valid from there."""
    if not loaded:
        raise ReportError("nothing to merge: name the report directories")
    _same(loaded, "suite versions", lambda r: r.get("suite_version"))
    _same(loaded, "implementations", lambda r: (r.get("implementation", {}).get("command"),
                                                r.get("implementation", {}).get("identity")))
    _same(loaded, "code (the implementation's executable, script or module digests)",
          lambda r: {k: v for k, v in (r.get("implementation", {}).get("code") or {}).items() if k.endswith("_sha256")})
    _same(loaded, "migrations (the schema certified)",
          lambda r: r.get("implementation", {}).get("migrations_sha256"))
    _same(loaded, "implementation clock offsets (--impl-clock-offset)",
          lambda r: r.get("implementation", {}).get("clock_offset"))
    shards = _shards(loaded)
    if shards:
        _same(loaded, "plans (the shards planned different matrices, so their union may miss a case)",
              lambda r: {k: (r.get("run", {}).get("selection") or {}).get(k) for k in ("plan_count", "plan_digest")})
    owner: dict[str, object] = {}
    for item in loaded:
        for case in item.report["cases"]:
            case_id = str(case.get("id"))
            if case_id in owner:
                raise ReportError(f"case {case_id} is in both {owner[case_id]} and {item.directory}: merge reports "
                                  "of disjoint selections")
            owner[case_id] = item.directory
    cases = [_relocated(c, item.directory, out) for item in loaded for c in item.report["cases"]]
    # As certify orders them: the fault-free runs first, then the faulted cases by id.
    cases = [c for c in cases if c.get("fault") is None] + sorted((c for c in cases if c.get("fault") is not None),
                                                                  key=lambda c: str(c.get("id")))
    first = loaded[0].report
    implementation = dict(first.get("implementation", {}))
    barriers = sorted({b for item in loaded for b in item.report.get("implementation", {}).get("fallback_barriers")
                       or []})
    implementation.update(fallbacks(cases, barriers))
    if "clock_skew" in implementation:
        implementation["clock_skew"] = clock_skew(cases)
    launchers = {p.strip() for item in loaded for p in
                 str(item.report.get("implementation", {}).get("launcher") or "").split(",") if p.strip()}
    if launchers:
        implementation["launcher"] = ", ".join(sorted(launchers))
    spans = [e for e in (_ends(item.report) for item in loaded) if e]
    run = {"started_at": min(s for s, _ in spans).isoformat() if spans else None,
           "duration_s": round(max(e for _, e in spans).timestamp() - min(s for s, _ in spans).timestamp(), 2)
           if spans else None,
           "seed": first.get("run", {}).get("seed"),
           "selection": dict(first.get("run", {}).get("selection") or {}, shard=None) if shards else
           {"merged": f"merged from {counted(len(loaded), 'report')} that are not the shards of one run"},
           "skipped": _union(item.report.get("run", {}).get("skipped") or [] for item in loaded),
           "problems": _union(item.report.get("run", {}).get("problems") or [] for item in loaded),
           "merged_from": [{"directory": str(item.directory),
                            "started_at": item.report.get("run", {}).get("started_at"),
                            "selection": item.report.get("run", {}).get("selection"),
                            "cases": len(item.report["cases"])} for item in loaded]}
    merged = build(suite_version=first.get("suite_version"), implementation=implementation,
                   environment=first.get("environment", {}), run=run, cases=cases, contract=first.get("contract"))
    if any(item.report.get("partial") or item.report.get("interrupted") for item in loaded):
        merged["partial"] = True
    return merged


def _shards(loaded: list[Loaded]) -> int:
    """N when the reports are the shards of one sharded run (`certify --shard I/N`), all of them once; else 0."""
    named = [(item.directory, (item.report.get("run", {}).get("selection") or {}).get("shard")) for item in loaded]
    if not any(label for _, label in named):
        return 0
    if not all(label for _, label in named):
        raise ReportError("cannot merge shards with reports that are not shards: " +
                          ", ".join(str(d) for d, label in named if not label))
    counts = {int(str(label).split("/")[1]) for _, label in named}
    if len(counts) > 1:
        raise ReportError(f"cannot merge shards of different splits: {', '.join(sorted(str(x) for _, x in named))}")
    count = counts.pop()
    seen: dict[int, object] = {}
    for directory, label in named:
        index = int(str(label).split("/")[0])
        if index in seen:
            raise ReportError(f"shard {label} twice: {seen[index]} and {directory}")
        seen[index] = directory
    missing = [f"{i}/{count}" for i in range(1, count + 1) if i not in seen]
    if missing:
        raise ReportError(f"shard {', '.join(missing)} missing: merge all {counted(count, 'shard')} of the run")
    return count


def _union(lists) -> list:
    seen, out = set(), []
    for items in lists:
        for item in items:
            key = repr(item)
            if key not in seen:
                seen.add(key)
                out.append(item)
    return out
