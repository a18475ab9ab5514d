"""Scenarios as data: TOML files of timeline steps and expectations, loaded and checked here."""

from __future__ import annotations

import tomllib
import uuid
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from .errors import ScenarioError, StepError
from .instances import Instance, parse_instances
from .steps import SCENARIO, SCENARIO_FIELDS, Context, Step, check_expectation, check_step, check_table, spec_to_wire, step_lines
from .times import T0, relative

__all__ = ["T0", "Scenario", "ScenarioError", "Step", "load_catalog", "parse", "relative", "spec_to_wire"]

SCHEDULE_NAMESPACE = uuid.UUID("6b1d3f4e-2b7c-4e0e-9a55-0c7f3e1d2a90")


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    covers: tuple[str, ...]
    steps: tuple[Step, ...]
    expect: dict[str, dict[str, Any]]
    # False opts every faulted run out of the fault-free run's judges (reported not compared). The model decides
    # that per case anyway (testhost/judge/verdict.py); the field stays for catalogs that already say it.
    equivalence: bool = True
    lease_seconds: float = 2.0
    # Move the server clock forward this many seconds inside the first bridge transaction (docs/crash-matrix.md).
    bridge_clock_shift_s: float | None = None
    source: str = ""
    origin: str = ""  # the file it was read from
    instances: dict[str, Instance] = field(default_factory=dict)  # [instances.LABEL]: scenarios/instances.py
    fault_free: bool = False  # the matrix plans its fault-free run only (scenarios/matrix.py)

    def schedule_id(self, name: str) -> uuid.UUID:
        return uuid.uuid5(SCHEDULE_NAMESPACE, f"{self.name}/{name}")

    @property
    def schedules(self) -> list[str]:
        return sorted({s.schedule for s in self.steps if s.op == "create"})


def parse(name: str, text: str, origin: str | None = None) -> Scenario:
    """A scenario from its TOML text, validated against the step registry (scenarios/steps.py); an error is one
    line naming `origin` (the file's path, else the name), the line and step, and the field."""
    label = origin or name
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:  # its message ends with "(at line L, column C)"
        raise ScenarioError(f"{label}: not valid TOML: {exc}") from None
    if not data.get("steps"):
        raise ScenarioError(f"{label}: no steps")
    try:
        check_table(SCENARIO, SCENARIO_FIELDS, data)
    except StepError as exc:
        raise ScenarioError(f"{label}: {exc}") from None
    lines = step_lines(text)
    raw_steps = data.get("steps", [])
    steps = []
    context = Context()
    for index, raw in enumerate(raw_steps):
        line = f":{lines[index]}" if len(lines) == len(raw_steps) else ""
        where = f"{label}{line}: step {index + 1}"
        if not isinstance(raw, dict):
            raise ScenarioError(f"{where}: a step must be a table with an op")
        try:
            op, args = check_step(raw, context)
        except StepError as exc:
            raise ScenarioError(f"{where}: {exc}") from None
        steps.append(Step(op, args, index))
    expect = data.get("expect", {})
    for schedule, want in expect.items():
        if schedule not in context.created:
            raise ScenarioError(f"{label}: expectations for {schedule!r}, which no step creates")
        try:
            check_expectation(schedule, want)
        except StepError as exc:
            raise ScenarioError(f"{label}: {exc}") from None
    shift = data.get("bridge_clock_shift_s")
    if shift is not None and (isinstance(shift, bool) or not isinstance(shift, (int, float)) or shift <= 0):
        raise ScenarioError(f"{label}: bridge_clock_shift_s must be a positive number of seconds")
    instances = parse_instances(data.get("instances"), label, text, origin)
    for step in steps:
        copy = step.args.get("processor", "A")
        if step.args.get("demote_after_decision") and \
                getattr(instances.get(copy), "runtime_login", None) != "default-role":
            line = f":{lines[step.index]}" if len(lines) == len(raw_steps) else ""
            raise ScenarioError(f"{label}{line}: step {step.index + 1}: demote_after_decision takes the runtime role "
                                f"from a login whose default role it is: run it on copy B with [instances.B] "
                                f"runtime_login = \"default-role\" (processor = \"B\")")
    return Scenario(name=name, description=data.get("description", ""), covers=tuple(data.get("covers", [])),
                    steps=tuple(steps), expect=expect, equivalence=data.get("equivalence", True),
                    lease_seconds=float(data.get("lease_seconds", 2.0)),
                    bridge_clock_shift_s=float(shift) if shift is not None else None, source=text,
                    origin=origin or "", instances=instances, fault_free=data.get("fault_free", False))


def is_builtin(scenario: Scenario) -> bool:
    """Whether the scenario was read from the built-in catalog (not a team's own file, nor a generated program)."""
    if not scenario.origin:
        return False
    return Path(scenario.origin).parent == Path(str(resources.files("scenarios").joinpath("catalog")))


def _load_folder(folder) -> list[Scenario]:
    found = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".toml"):
            try:
                text = entry.read_text()
            except (OSError, UnicodeDecodeError) as exc:
                raise ScenarioError(f"{entry}: cannot be read ({getattr(exc, 'strerror', None) or exc})") from None
            found.append(parse(entry.name.removesuffix(".toml"), text, str(entry)))
    return found


def load_catalog(folders: "list[str | Path]" = (), with_builtin: bool = False) -> list[Scenario]:
    """The built-in scenarios; or, given folders, the scenario files (*.toml) in them (with the built-in ones
    too when with_builtin). A name defined twice is an error naming both files."""
    found = _load_folder(resources.files("scenarios").joinpath("catalog")) if with_builtin or not folders else []
    for folder in map(Path, folders):
        if not folder.is_dir():
            raise ScenarioError(f"--catalog {folder}: not a folder")
        scenarios = _load_folder(folder)
        if not scenarios:
            raise ScenarioError(f"--catalog {folder}: holds no scenario files (*.toml)")
        found.extend(scenarios)
    seen: dict[str, Scenario] = {}
    for scenario in found:
        if scenario.name in seen:
            raise ScenarioError(f"scenario {scenario.name!r} is defined twice: {seen[scenario.name].origin} and "
                                f"{scenario.origin}")
        seen[scenario.name] = scenario
    return found
