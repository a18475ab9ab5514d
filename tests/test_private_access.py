"""No module reaches into another module's private names: `module._name`, `from x import _name`, `obj._attr` of
a class defined elsewhere, or `getattr(obj, "_attr")` (a class's `self._attr`, inherited or not, is its own). Pure:
the project's sources read as syntax trees, tests/ aside."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SKIPPED = {"tests", ".venv", ".git"}

# Underscored, yet documented for callers: sys._getframe and os._exit, a namedtuple's _replace and _asdict.
DOCUMENTED = {("sys", "_getframe"), ("os", "_exit")}
NAMEDTUPLE = {"_replace", "_asdict"}
# Held by the library's own class with no public way to them; each is named with the module that needs it.
NO_PUBLIC_WAY = {
    # The worker processes of a ProcessPoolExecutor (to signal them) and its manager thread (to join it).
    ("testhost/runs/pool.py", "_processes"),
    ("testhost/runs/pool.py", "_executor_manager_thread"),
    # How a multiprocessing context's Process starts its child (each of multiprocessing's contexts overrides it):
    # the spawn with SIGINT blocked.
    ("testhost/runs/pool.py", "_Popen"),
    # pytest's cache of ini values: setting cache_dir from a plugin (tests/test_pytest_plugin.py guards it).
    ("testhost/pytest_plugin.py", "_inicache"),
}


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def sources() -> list[Path]:
    return sorted(p for p in ROOT.rglob("*.py") if not SKIPPED & set(p.relative_to(ROOT).parts))


def own_attributes(tree: ast.Module) -> set[str]:
    """The private attributes this module's classes define: in a class body, or assigned as self._x / cls._x."""
    own = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    own.add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    own.add(item.target.id)
                elif isinstance(item, ast.Assign):
                    own |= {t.id for t in item.targets if isinstance(t, ast.Name)}
        elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and isinstance(node.value, ast.Name)
              and node.value.id in ("self", "cls")):
            own.add(node.attr)
    return {name for name in own if private(name)}


def module_names(tree: ast.Module) -> set[str]:
    """The names this module binds to imported modules (`import x`, `import x as y`, `from pkg import module`)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.asname or alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            names |= {alias.asname or alias.name for alias in node.names}  # a module or not: a private one counts
    return names


def reaches(text: str, rel: str) -> list[str]:
    """Each private name of another module that the module `rel` (its source `text`) reaches, with its line."""
    tree = ast.parse(text, filename=rel)
    own, modules = own_attributes(tree), module_names(tree)
    allowed = {name for where, name in NO_PUBLIC_WAY if where == rel}
    found = []
    for node in ast.walk(tree):
        where = f"{rel}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.ImportFrom):
            found += [f"{where}: from {'.' * node.level}{node.module or ''} import {alias.name}"
                      for alias in node.names if private(alias.name)]
        elif isinstance(node, ast.Import):
            found += [f"{where}: import {alias.name}" for alias in node.names
                      if any(private(part) for part in alias.name.split("."))]
        elif isinstance(node, ast.Attribute) and private(node.attr):
            base = node.value.id if isinstance(node.value, ast.Name) else None
            if base in ("self", "cls") or (base, node.attr) in DOCUMENTED:
                continue  # a class's own members, inherited ones too
            if node.attr in NAMEDTUPLE or node.attr in allowed:
                continue
            if base in modules or node.attr not in own:
                found.append(f"{where}: {ast.unparse(node)}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "setattr", "hasattr", "delattr") and len(node.args) >= 2
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
              and private(node.args[1].value) and node.args[1].value not in own | allowed):
            found.append(f"{where}: {ast.unparse(node)}")
    return found


def test_no_module_reaches_into_another_modules_private_names():
    found = [reach for path in sources() for reach in reaches(path.read_text(), path.relative_to(ROOT).as_posix())]
    assert found == [], "make the name public where it is defined (or give its module a public way to it)"


def test_each_exception_is_still_needed():
    stale = [(where, name) for where, name in NO_PUBLIC_WAY if f'"{name}"' not in (ROOT / where).read_text()
             and f".{name}" not in (ROOT / where).read_text()]
    assert stale == []


def test_the_scan_sees_each_kind_of_reach():
    """The scan itself: each kind of reach is found, and a class's own private attributes are not."""
    probe = ("import os\nfrom testhost.runs import certify\nfrom reference.db import _CONTROL\n\n"
                     "class Own:\n    def __init__(self):\n        self._mine = 1\n\n"
                     "    def same(self, other):\n        return other._mine + self._mine\n\n"
                     "def reach(thing):\n    os._exit(0)\n    return certify._world, thing._theirs, "
                     "getattr(thing, '_hidden'), thing._replace()\n")
    found = [line.split(": ", 1)[1] for line in reaches(probe, "testhost/probe.py")]
    assert found == ["from reference.db import _CONTROL", "certify._world", "thing._theirs",
                     "getattr(thing, '_hidden')"]
