"""Scenarios as data: TOML files of timeline steps and expectations, loaded and checked here."""

from __future__ import annotations

import re
import tomllib
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Any

from .instances import Instance, parse_instances

# Every case starts with the server clock set here, so explicit instants are the same in every run.
T0 = datetime.fromisoformat("2031-03-03T00:00:00+00:00")
SCHEDULE_NAMESPACE = uuid.UUID("6b1d3f4e-2b7c-4e0e-9a55-0c7f3e1d2a90")

STEP_FIELDS: dict[str, dict[str, tuple[type, ...]]] = {
    # op -> {field: accepted types}; `schedule` names a schedule of the scenario
    # `expect` and `problem`: the answer the step must get; `rule`: the spec sentence that answer pins
    "create": {"schedule": (str,), "spec": (dict,), "expect": (str,), "problem": (str,), "rule": (str,)},
    "update": {"schedule": (str,), "spec": (dict,), "expect": (str,), "problem": (str,), "rule": (str,)},
    "delete": {"schedule": (str,), "expect": (str,), "problem": (str,), "rule": (str,)},
    "release": {"schedule": (str,), "expect": (str,), "problem": (str,), "rule": (str,)},
    "advance": {"seconds": (int, float)},
    "process": {"maximum_schedules": (int,), "processor": (str,), "cancel_after": (int,),
                "lease_seconds": (int, float), "lease_owner": (str,), "expect": (str,), "rule": (str,)},
    "race": {"maximum_schedules": (int,)},
    "drain": {},
    "complete-work": {"schedule": (str,), "nth": (int,), "state": (str,)},
    # a plain Work caller takes the idempotency key of the occurrence (generation, kind, first) for other Work
    "plant-work": {"schedule": (str,), "first": (str,), "kind": (str,), "generation": (int,)},
    "advance-epoch": {},
    "advance-scope-generation": {},
}
REQUIRED = {"create": {"schedule", "spec"}, "update": {"schedule", "spec"}, "delete": {"schedule"},
            "release": {"schedule"}, "advance": {"seconds"}, "complete-work": {"schedule", "state"},
            "plant-work": {"schedule", "first"}}
_RELATIVE = re.compile(r"^(accepted)?([+-]\d+(?:\.\d+)?)s$")


class ScenarioError(ValueError):
    """A scenario file is malformed; the message names the file, the step and the field."""


@dataclass(frozen=True)
class Step:
    op: str
    args: dict[str, Any]
    index: int

    @property
    def schedule(self) -> str | None:
        return self.args.get("schedule")

    @property
    def expected_outcome(self) -> str:
        """What a client step must answer: ok unless the scenario says the call is refused."""
        return self.args.get("expect", "ok")

    def describe(self) -> str:
        shown = {k: v for k, v in self.args.items() if k != "spec"}
        return f"{self.op} {shown}" if shown else self.op


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    covers: tuple[str, ...]
    steps: tuple[Step, ...]
    expect: dict[str, dict[str, Any]]
    equivalence: bool = True
    lease_seconds: float = 2.0
    source: str = ""
    origin: str = ""  # the file it was read from
    instances: dict[str, Instance] = field(default_factory=dict)  # [instances.LABEL]: scenarios/instances.py

    def schedule_id(self, name: str) -> uuid.UUID:
        return uuid.uuid5(SCHEDULE_NAMESPACE, f"{self.name}/{name}")

    @property
    def schedules(self) -> list[str]:
        return sorted({s.schedule for s in self.steps if s.op == "create"})


def relative(value: str, accepted_at: datetime | None = None) -> datetime:
    """"+90s" is T0 + 90 s; "accepted+5s" is the generation's acceptance + 5 s."""
    match = _RELATIVE.match(value)
    if not match:
        raise ScenarioError(f"time {value!r} must look like +90s, -5s or accepted+5s")
    base = accepted_at if match.group(1) else T0
    if base is None:
        raise ScenarioError(f"time {value!r} is relative to an acceptance time that is not known here")
    return base + timedelta(seconds=float(match.group(2)))


def spec_to_wire(spec: dict[str, Any]) -> dict[str, Any]:
    """A scenario spec in adapter-protocol form: relative times resolved against T0."""
    wire = dict(spec)
    for key in ("at", "anchor"):
        if key in wire:
            wire[key] = relative(wire[key]).isoformat()
    return wire


def parse(name: str, text: str, origin: str | None = None) -> Scenario:
    """A scenario from its TOML text; errors name `origin` (the file's path) when given, else the name."""
    label = origin or name
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:  # its message ends with "(at line L, column C)"
        raise ScenarioError(f"{label}: not valid TOML: {exc}") from None
    steps = []
    created: set[str] = set()
    for index, raw in enumerate(data.get("steps", [])):
        where = f"{label}: step {index + 1}"
        op = raw.get("op")
        if op not in STEP_FIELDS:
            raise ScenarioError(f"{where}: op {op!r} is not one of {', '.join(STEP_FIELDS)}")
        args = {k: v for k, v in raw.items() if k != "op"}
        unknown = set(args) - set(STEP_FIELDS[op])
        if unknown:
            raise ScenarioError(f"{where}: {op} takes no {', '.join(sorted(unknown))}")
        missing = REQUIRED.get(op, set()) - set(args)
        if missing:
            raise ScenarioError(f"{where}: {op} needs {', '.join(sorted(missing))}")
        for key, value in args.items():
            if not isinstance(value, STEP_FIELDS[op][key]):
                raise ScenarioError(f"{where}: {key} has the wrong type ({type(value).__name__})")
        if args.get("expect", "ok") not in ("ok", "fail"):
            raise ScenarioError(f"{where}: expect must be ok or fail")
        if "rule" in args and "expect" not in args:
            raise ScenarioError(f"{where}: a rule is cited only for a step with an expected answer (expect)")
        if "problem" in args and args.get("expect") != "fail":
            raise ScenarioError(f"{where}: a problem type is expected only with expect = \"fail\"")
        if op == "create":
            created.add(args["schedule"])
        elif "schedule" in args and args["schedule"] not in created:
            raise ScenarioError(f"{where}: schedule {args['schedule']!r} is used before it is created")
        if "spec" in args:
            for key in ("at", "anchor"):
                if key in args["spec"]:
                    try:
                        relative(args["spec"][key])
                    except ScenarioError as exc:
                        raise ScenarioError(f"{where}: spec.{key}: {exc}") from None
        steps.append(Step(op, args, index))
    if not steps:
        raise ScenarioError(f"{label}: no steps")
    expect = data.get("expect", {})
    for schedule in expect:
        if schedule not in created:
            raise ScenarioError(f"{label}: expectations for {schedule!r}, which no step creates")
    return Scenario(name=name, description=data.get("description", ""), covers=tuple(data.get("covers", [])),
                    steps=tuple(steps), expect=expect, equivalence=data.get("equivalence", True),
                    lease_seconds=float(data.get("lease_seconds", 2.0)), source=text, origin=origin or "",
                    instances=parse_instances(data.get("instances"), label, text, origin))


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
