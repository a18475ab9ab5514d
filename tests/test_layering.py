"""The project's rooms and the one way their imports run, read from the source with `ast` (no import is executed).

testhost's rooms, top to bottom: the CLI and the pytest plugin, then runs/ (whole runs), case/ (one case), faults/
(what the host does to an implementation), impl/ (the implementation's process), world/ (the cluster, clock,
Toxiproxy and store); case/ and the rooms above it also use judge/ (pure judging over recorded facts), which imports
only scenarios/ and barriers/. scenarios/ imports only barriers/; barriers/ imports nothing of the project. An import
inside a function or under TYPE_CHECKING counts like any other: it is a dependency all the same."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("testhost", "scenarios", "barriers", "reports", "reference", "mutants", "variants", "bench")
TOP = "top"
FLOOR = "floor"  # testhost's package and its errors: every room may raise them
# What each room may import (its own modules always).
ALLOWED = {
    "world": {FLOOR, "barriers", "reference"},
    "impl": {"world", FLOOR, "barriers", "scenarios"},
    "faults": {"impl", "world", FLOOR, "barriers", "scenarios"},
    "judge": {FLOOR, "barriers", "scenarios"},
    "case": {"judge", "faults", "impl", "world", FLOOR, "barriers", "scenarios", "reference"},
    "runs": {"case", "judge", "faults", "impl", "world", FLOOR, "barriers", "scenarios", "reference", "reports",
             "mutants", "variants"},
    FLOOR: set(),
    "barriers": set(),
    "scenarios": {"barriers"},
    "reports": {"barriers"},
    "reference": {"barriers"},
    "mutants": {"barriers", "reference"},
    "variants": {"mutants", "barriers", "reference"},
}
# Imports that still run against the rooms' direction, each to be removed (the test fails when one is gone, so the
# list only shrinks).
REMAINING: set[str] = set()
# Circles within a room that remain once REMAINING's imports are set aside, each to be broken.
CIRCLES: list[list[str]] = []
# Sizes still over the limits (lines of a testhost module, lines of a class), each to be split.
MODULE_LINES, CLASS_LINES = 800, 400
OVERSIZED: set[str] = set()


def modules() -> dict[str, Path]:
    """Every module of the project's packages by its dotted name."""
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the project modules it imports (a name imported from a package counts as its module if it is one)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                for alias in node.names:
                    target = alias.name
                    while target and target not in mods:
                        target = target.rpartition(".")[0]
                    targets += [target] if target else []
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    parts = parts[:len(parts) - (node.level - 1)]
                    base = ".".join(parts + ([base] if base else []))
                submodules = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in mods]
                targets += submodules
                if base in mods and len(submodules) < len(node.names):
                    targets.append(base)
            graph[name].update(t for t in targets if t != name)
    return graph


def room(module: str) -> str:
    parts = module.split(".")
    if parts[0] != "testhost":
        return parts[0]
    if len(parts) == 1 or parts[1] == "errors":
        return FLOOR
    if parts[1] in ("cli", "pytest_plugin"):
        return TOP
    return parts[1]


def against_the_rooms(graph: dict[str, set[str]]) -> set[str]:
    found = set()
    for module, targets in graph.items():
        allowed = ALLOWED.get(room(module))
        if allowed is None:  # the top and bench may import any room
            continue
        found |= {f"{module} -> {t}" for t in targets if room(t) != room(module) and room(t) not in allowed}
    return found


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import graph's strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_rooms_import_one_way():
    found = against_the_rooms(imports(modules()))
    new, gone = found - REMAINING, REMAINING - found
    assert not new, ("imports against the rooms' direction (tests/test_layering.py says which room may import "
                     f"which): {sorted(new)}")
    assert not gone, f"these imports are gone: take them off REMAINING in tests/test_layering.py: {sorted(gone)}"


def test_no_import_circle_beyond_the_remaining_imports():
    graph = imports(modules())
    for edge in REMAINING:
        source, _, target = edge.partition(" -> ")
        graph[source].discard(target)
    found = circles(graph)
    new, gone = [c for c in found if c not in CIRCLES], [c for c in CIRCLES if c not in found]
    assert not new, f"an import circle: break it (a module of its own for what both sides need): {new}"
    assert not gone, f"these circles are broken: take them off CIRCLES in tests/test_layering.py: {gone}"


def test_modules_and_classes_within_their_sizes():
    found = set()
    for path in sorted((ROOT / "testhost").rglob("*.py")):
        text = path.read_text()
        if text.count("\n") > MODULE_LINES:
            found.add(str(path.relative_to(ROOT)))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > CLASS_LINES:
                found.add(f"class {node.name}")
    new, gone = found - OVERSIZED, OVERSIZED - found
    assert not new, f"over {MODULE_LINES} lines a module or {CLASS_LINES} a class: split by responsibility: {sorted(new)}"
    assert not gone, f"within the limits now: take them off OVERSIZED in tests/test_layering.py: {sorted(gone)}"


def test_the_layering_reading_catches_a_planted_import(tmp_path):
    """The reader is not vacuous: an import against the direction, inside a function, is found."""
    mods = modules()
    planted = tmp_path / "planted.py"
    planted.write_text("def f():\n    from testhost.case import runner\n")
    mods["testhost.world.planted"] = planted
    assert "testhost.world.planted -> testhost.case.runner" in against_the_rooms(imports(mods))
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_cli_and_a_worker_start_without_hypothesis():
    """Every CLI start and every spawned worker imports these; Hypothesis (about a third of a second of CPU each time,
    measured with `python -X importtime`) is imported only where something is drawn: explore, the schema stage's
    probes, the hostile phase."""
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, testhost.cli, testhost.runs.certify, testhost.runs.workers; "
                               "print(sorted(m for m in sys.modules if m.split('.')[0] == 'hypothesis'))"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    assert loaded == "[]"
