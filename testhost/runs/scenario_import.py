"""`crashproof scenarios import FILE`: a scenario file (one explore wrote) joins a catalog once it replays: its case
passes on the reference, and fails on --impl when one is named (the implementation whose bug it found)."""

from __future__ import annotations

import re
import shutil
import tempfile
from importlib import resources
from pathlib import Path

from scenarios.scenario import ScenarioError, parse

from testhost.errors import TestHostError

CASE_LINE = re.compile(r"^# case = (\S+)$", re.MULTILINE)


def case_of(text: str, name: str) -> str:
    """The case a scenario file names in its `# case = ID` line (explore writes it), else its fault-free run."""
    match = CASE_LINE.search(text)
    return match.group(1) if match else name


def builtin_catalog() -> Path:
    return Path(str(resources.files("scenarios").joinpath("catalog")))


def import_scenario(file: Path, catalog: Path | None = None, impl: str | None = None,
                    progress=lambda line: None) -> Path:
    """Check that FILE replays, then copy it into `catalog` (default: the built-in one); its new path."""
    from .certify import certify
    from .options import Options

    try:
        text = file.read_text()
    except OSError as exc:
        raise TestHostError(f"{file}: cannot be read ({exc.strerror or exc})") from None
    name = file.name.removesuffix(".toml")
    try:
        parse(name, text, str(file))
    except ScenarioError as exc:
        raise TestHostError(str(exc)) from None
    target = (catalog or builtin_catalog()) / f"{name}.toml"
    if target.exists():
        raise TestHostError(f"{target} exists already: the catalog holds a scenario named {name!r}")
    case_id = case_of(text, name)
    with tempfile.TemporaryDirectory(prefix="crashproof-import-") as scratch:
        folder = Path(scratch) / "catalog"
        folder.mkdir()
        shutil.copy(file, folder / file.name)
        runs = [("the reference", Options.command, 0)] + ([("--impl", impl, 1)] if impl else [])
        for label, command, wanted in runs:
            code, _ = certify(Options(command=command, catalog=[folder], cases=[case_id], jobs=1,
                                      report_dir=Path(scratch) / f"report-{wanted}", progress=progress))
            if code != wanted:
                verb = "pass" if wanted == 0 else "fail"
                raise TestHostError(f"{file}: case {case_id} does not replay: it must {verb} on {label} "
                                    f"(certify exited {code}); nothing imported")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(file, target)
    return target
