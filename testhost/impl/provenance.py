"""Which code an implementation's command runs: its working directory, its executable (argv[0] through PATH and
symlinks) and that file's SHA-256, the script a shell or interpreter runs, and for `PYTHON -m MODULE` where that
interpreter loads the module from and a digest of the module's package. Resolved once per run, in the working
directory and environment the implementation is started in (docs/report-format.md, `implementation.code`).

The same command line run from another folder, or with another PYTHONPATH, runs other code; the command string
alone cannot tell them apart, so the report, the finds explore writes and certify's choice of whether the
reference's own census can stand for the implementation's all go by what is resolved here."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

# Variables of the environment that change which code a command runs (beside PATH, which the resolved executable
# already shows): the report names those that are set.
ENVIRONMENT = ("PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH", "PYTHONNOUSERSITE", "PYTHONUSERBASE", "LD_PRELOAD",
               "LD_LIBRARY_PATH")
# Interpreters whose first argument that is no option names the script they run (`sh run.sh`, `python x.py`).
_INTERPRETERS = re.compile(r"^(sh|bash|dash|zsh|ksh|python[0-9.]*|pypy[0-9.]*|node|ruby|perl)$")
_PYTHON = re.compile(r"^(python|pypy)[0-9.]*$")
# A package larger than this is not digested (its origin is still recorded): a run's cost stays negligible.
MAX_DIGEST_FILES = 5000
MAX_DIGEST_BYTES = 200 << 20
PROBE_TIMEOUT_S = 30.0
# The fields whose difference means other code ran (the working directory counts through what it resolves).
CODE_FIELDS = ("executable", "executable_via", "executable_sha256", "script", "script_sha256", "module",
               "module_origin", "module_sha256", "environment")

# Run by the implementation's own interpreter with `-c`, in its working directory and environment: where it would
# load the module from, found as `-m` finds it, without running any of the module's code (a dotted name's parent
# packages are searched, not imported).
_PROBE = """
import importlib.machinery, importlib.util, json, sys
name = sys.argv[1]
parts = name.split(".")
spec = importlib.util.find_spec(parts[0])
top = spec
for i in range(1, len(parts)):
    if spec is None or not spec.submodule_search_locations:
        spec = None
        break
    spec = importlib.machinery.PathFinder.find_spec(".".join(parts[:i + 1]), list(spec.submodule_search_locations))
if spec is not None and spec.submodule_search_locations:
    main = importlib.machinery.PathFinder.find_spec(name + ".__main__", list(spec.submodule_search_locations))
    spec = main or spec
if spec is None:
    print(json.dumps({"error": "no module named " + repr(name)}))
else:
    roots = list(top.submodule_search_locations) if top.submodule_search_locations else [top.origin]
    print(json.dumps({"origin": spec.origin, "package": [r for r in roots if r]}))
"""


def file_sha256(path: str | Path | None) -> str | None:
    """The SHA-256 of a file's bytes (None when it cannot be read)."""
    if not path:
        return None
    try:
        with open(path, "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except OSError:
        return None


def found_program(program: str, cwd: str, env: dict[str, str]) -> str | None:
    """argv[0] as the implementation's start finds it (through PATH when it holds no slash), as an absolute path
    whose symlinks are kept (a virtual environment's `bin/python` is one)."""
    if "/" in program:
        found = os.path.join(cwd, program)
    else:
        found = shutil.which(program, path=env.get("PATH", os.defpath))
        found = os.path.join(cwd, found) if found else None
    return os.path.abspath(found) if found and os.path.isfile(found) else None


def package_sha256(roots: list[str]) -> str | None:
    """One digest over a package's files (each relative path and its bytes, in path order; __pycache__ and
    compiled files left out), or over the module's own file; None when larger than the limits."""
    files: list[tuple[str, Path]] = []
    for index, root in enumerate(roots):
        path = Path(root)
        if path.is_file():
            files.append((f"{index}/{path.name}", path))
            continue
        for found in path.rglob("*"):
            if "__pycache__" in found.parts or found.suffix in (".pyc", ".pyo") or not found.is_file():
                continue
            files.append((f"{index}/{found.relative_to(path)}", found))
            if len(files) > MAX_DIGEST_FILES:
                return None
    digest, size = hashlib.sha256(), 0
    for name, path in sorted(files):
        try:
            data = path.read_bytes()
        except OSError:
            continue
        size += len(data)
        if size > MAX_DIGEST_BYTES:
            return None
        digest.update(name.encode() + b"\0" + len(data).to_bytes(8, "big") + data)
    return digest.hexdigest() if files else None


def python_module(argv: list[str]) -> tuple[list[str], str] | None:
    """(the interpreter's options before -m, MODULE) when argv is `PYTHON [OPTIONS] -m MODULE ...`."""
    if not argv or not _PYTHON.match(os.path.basename(argv[0])):
        return None
    for i, word in enumerate(argv[1:], start=1):
        if word == "-m" and i + 1 < len(argv):
            return argv[1:i], argv[i + 1]
        if not word.startswith("-") or word in ("-c", "-"):
            return None
    return None


def locate_module(argv: list[str], options: list[str], module: str, cwd: str, env: dict[str, str]) -> dict:
    """Where that interpreter, started as the implementation is, loads MODULE from (one short subprocess)."""
    try:
        done = subprocess.run([argv[0], *options, "-c", _PROBE, module], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL)
        found = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 and done.stdout.strip() \
            else {"error": (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]}
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        found = {"error": f"{type(exc).__name__}: {exc}"}
    if "error" in found:
        return {"module": module, "module_origin": None, "module_sha256": None,
                "module_error": f"not resolved: {found['error']}"}
    package = [os.path.realpath(p) for p in found.get("package") or []]
    origin = found.get("origin")
    return {"module": module, "module_origin": os.path.realpath(origin) if origin and os.path.isabs(origin) else origin,
            "module_package": package[0] if len(package) == 1 else package,
            "module_sha256": package_sha256(package) if package else None}


def _script(argv: list[str], cwd: str) -> str | None:
    """The script file an interpreter is given (`sh run.sh`, `python adapter.py`), None for anything else."""
    if not argv or not _INTERPRETERS.match(os.path.basename(argv[0])):
        return None
    for word in argv[1:]:
        if word in ("-c", "-m", "-e", "-"):
            return None
        if not word.startswith("-"):
            path = os.path.join(cwd, word)
            return os.path.realpath(path) if os.path.isfile(path) else None
    return None


def resolve(command: str, cwd: str | None = None, env: dict[str, str] | None = None) -> dict:
    """Which code `command` runs when started in `cwd` with `env` (default: this process's): the report's
    `implementation.code`. Never raises: what cannot be resolved is null, with the reason."""
    cwd = os.path.realpath(cwd or os.getcwd())
    env = dict(os.environ if env is None else env)
    try:
        argv = shlex.split(command)
    except ValueError:
        argv = []
    found_as = found_program(argv[0], cwd, env) if argv else None
    program = os.path.realpath(found_as) if found_as else None
    found: dict = {"cwd": cwd, "executable": program, "executable_sha256": file_sha256(program)}
    if found_as != program:
        found["executable_via"] = found_as  # the path found, before its symlinks were resolved
    script = _script(argv, cwd)
    if script:
        found.update(script=script, script_sha256=file_sha256(script))
    module = python_module(argv)
    if module is not None:
        found.update(locate_module(argv, module[0], module[1], cwd, env))
    found["environment"] = {name: env[name] for name in ENVIRONMENT if env.get(name)}
    return found


def same_code(one: dict | None, other: dict | None) -> bool:
    """Whether two resolutions run the same code: the same executable, script and module, each with the same
    digest, under the same environment (a digest that could not be taken is never the same)."""
    if not one or not other:
        return False
    if any(one.get(k) != other.get(k) for k in CODE_FIELDS):
        return False
    return all(one.get(k) is not None for k in ("executable_sha256",)) and (
        "module" not in one or one.get("module_sha256") is not None)


def differences(recorded: dict, now: dict, label: str = "recorded") -> list[str]:
    """What differs between the code a find recorded (or the reference runs) and the code run now, one phrase
    each (empty: the same code); the working directories are named when anything else differs."""
    found = []
    for key in CODE_FIELDS:
        if (key in recorded or key in now) and recorded.get(key) != now.get(key):
            found.append(f"{key} {_short(now.get(key))} ({label}: {_short(recorded.get(key))})")
    if found and recorded.get("cwd") != now.get("cwd"):
        found.append(f"cwd {now.get('cwd')} ({label}: {recorded.get('cwd')})")
    return found


def _short(value) -> str:
    if isinstance(value, str) and re.fullmatch(r"[0-9a-f]{64}", value):
        return value[:16]
    return json.dumps(value) if isinstance(value, (dict, list)) or value is None else str(value)


# The comment line explore writes into a find's scenario file: which code it was found with, for the command given.
_COMMENT = "found with code: "
_RECORDED = re.compile(r"^#\s*found with code:\s*(\{.*\})\s*$", re.MULTILINE)


def code_comment(command: str, code: dict) -> str:
    """A find's comment line (without its `# `): the command and which code it ran, as one line of JSON."""
    return _COMMENT + json.dumps({"impl": command, **code}, separators=(",", ":"))


def recorded(source: str) -> dict | None:
    """The code a scenario file says it was found with (explore's comment line), None when it says none."""
    match = _RECORDED.search(source or "")
    if not match:
        return None
    try:
        found = json.loads(match.group(1))
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def replay_notes(scenarios, command: str, code: dict) -> list[dict]:
    """For each scenario explore found with this very command: what differs between the code it was found with
    and the code this run resolves (only those whose code differs). The same command run elsewhere, or after an
    edit, replays other code: a pass then does not say the find is fixed in the code that had it."""
    notes = []
    for scenario in scenarios:
        found = recorded(getattr(scenario, "source", ""))
        if found is None or found.get("impl") != command:
            continue
        differs = differences(found, code)
        if differs:
            notes.append({"scenario": scenario.name, "differences": differs})
    return notes
