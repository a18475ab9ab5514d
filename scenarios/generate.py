"""Scenario programs drawn by Hypothesis from the step registry: every drawn step is a scenario step, so a
drawn program is a scenario file (`crashproof explore`, testhost/explore.py)."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from hypothesis import strategies as st

from .steps import BESIDE_BARRIERS, STEPS

NAMES = ("s1", "s2", "s3")
CLAIM_LIMITS = ("The function rejects blank or control-character lease owners and lease durations that are null, "
                "non-positive, or longer than ten minutes before it changes a row, so an untrusted dispatcher call "
                "cannot strand a Schedule in a non-expiring or excessively long lease.")
DELETED_TERMINAL = "Deletion is terminal for that Schedule identity; a later update cannot revive it"
MAX_LEASE_S = 600
# Clock moves: small and large, forward and back; 4000 s is past the default safety window of 3600 s.
ADVANCES = (61, 1, 31, 90, 150, 400, 4000, -30, -300)
WORK_STATES = ("succeeded", "failed", "canceled", "running", "retrying", "suspended")

# Step kinds explore does not draw, with the reason; a kind in neither table fails tests/test_explore.py, so a
# new step kind is either generated or excluded on purpose.
NOT_GENERATED = {
    "set-clock": "`advance` draws the clock moves; a frozen clock needs a step after it that reads it",
    "snapshot": "a backup alone changes nothing; a restore drill is a scenario of its own (restore-drill)",
    "restore": "needs a snapshot before it, and rewinds the model wholesale: left to the written restore drill",
}


@dataclass
class Drawn:
    """What the steps drawn so far left: the schedules created and deleted, and their At instants."""

    created: list[str] = field(default_factory=list)
    deleted: set[str] = field(default_factory=set)
    at: dict[str, int] = field(default_factory=dict)  # schedule -> the seconds of its At instant (plant-work)
    now: int = 0  # where the scenario's clock stands, in seconds from T0

    def live(self) -> list[str]:
        return [name for name in self.created if name not in self.deleted]


def _time(seconds: int) -> str:
    """A scenario time, seconds from T0."""
    return f"+{seconds}s" if seconds >= 0 else f"-{-seconds}s"


def _spec(draw, name: str, drawn: Drawn, version: int) -> dict:
    kind = draw(st.sampled_from(("every", "at", "after")))
    spec: dict[str, Any] = {"kind": kind}
    if kind == "at":
        # After the acceptance, which a fault's recovery before this step may have moved a few seconds on.
        seconds = drawn.now + draw(st.sampled_from((60, 30, 120, 600)))
        spec["at"] = _time(seconds)
        drawn.at[name] = seconds
    elif kind == "after":
        spec["after_s"] = draw(st.sampled_from((60, 10, 300)))
    else:
        spec["every_s"] = draw(st.sampled_from((60, 30, 90)))
        anchor = draw(st.sampled_from(("+0s", None, "+7s")))
        if anchor is not None:
            spec["anchor"] = anchor
    misfire = draw(st.sampled_from((None, "skip", "run-once")))
    if misfire is not None:
        spec["misfire_policy"] = misfire
    if draw(st.booleans()):
        spec["safety_window_s"] = draw(st.sampled_from((120, 7200)))
    spec["target"] = {"command": f"{name}-v{version}"}
    return spec


def _create(draw, drawn: Drawn) -> dict | None:
    free = [name for name in NAMES if name not in drawn.created]
    if not free:
        return None
    name = free[0]
    drawn.created.append(name)
    return {"schedule": name, "spec": _spec(draw, name, drawn, 1)}


def _update(draw, drawn: Drawn) -> dict | None:
    if not drawn.created:
        return None
    name = draw(st.sampled_from(drawn.created))
    step = {"schedule": name, "spec": _spec(draw, name, drawn, 2)}
    if name in drawn.deleted:
        step.update(expect="fail", rule=DELETED_TERMINAL)
    return step


def _delete(draw, drawn: Drawn) -> dict | None:
    live = drawn.live()
    if not live:
        return None
    name = draw(st.sampled_from(live))
    drawn.deleted.add(name)
    return {"schedule": name}


def _release(draw, drawn: Drawn) -> dict | None:
    live = drawn.live()
    # Refused unless a pass fenced the schedule for an old runtime epoch, which a fault's recovery may do or not.
    return {"schedule": draw(st.sampled_from(live)), "expect": "any"} if live else None


def _advance(draw, drawn: Drawn) -> dict:
    seconds = draw(st.sampled_from(ADVANCES))
    drawn.now += seconds
    return {"seconds": seconds}


def _pass_fields(draw, drawn: Drawn, racing: bool) -> dict:
    step: dict[str, Any] = {}
    maximum = draw(st.sampled_from((2, 1, 3)))  # passes over several schedules are where combinations live
    if maximum != 1:
        step["maximum_schedules"] = maximum
    if draw(st.integers(0, 4)) == 0:
        step["cancel_after"] = 1
    if not racing and draw(st.integers(0, 9)) == 0:
        # A lease the claim function must refuse: the generator knows the answer the spec requires.
        refused = draw(st.sampled_from(("lease_seconds", "lease_owner")))
        if refused == "lease_seconds":
            step["lease_seconds"] = draw(st.sampled_from((0, -5, MAX_LEASE_S + 1, 1800)))
        else:
            step["lease_owner"] = draw(st.sampled_from((" ", "owner\u0007", "\t")))
        step.update(expect="fail", rule=CLAIM_LIMITS)
    elif draw(st.integers(0, 9)) == 0 and drawn.created:
        beside = draw(st.sampled_from(("update", "advance-scope-generation", "delete")))
        during: dict[str, Any] = {"barrier": draw(st.sampled_from(BESIDE_BARRIERS)), "op": beside}
        if beside == "update":
            if not drawn.live():
                return step
            name = draw(st.sampled_from(drawn.live()))
            during.update(schedule=name, spec=_spec(draw, name, drawn, 3))
        elif beside == "delete":
            live = drawn.live()
            if not live:
                return step
            during["schedule"] = draw(st.sampled_from(live))
            drawn.deleted.add(during["schedule"])
        step["during"] = during
    return step


def _process(draw, drawn: Drawn) -> dict:
    return _pass_fields(draw, drawn, racing=False)


def _race(draw, drawn: Drawn) -> dict:
    return _pass_fields(draw, drawn, racing=True)


def _complete_work(draw, drawn: Drawn) -> dict | None:
    if not drawn.created:
        return None
    step = {"schedule": draw(st.sampled_from(drawn.created)), "state": draw(st.sampled_from(WORK_STATES))}
    if draw(st.booleans()):
        step["nth"] = 1
    return step


def _plant_work(draw, drawn: Drawn) -> dict | None:
    # Only while its instant is ahead: the key of an occurrence already materialized is the occurrence's own.
    planted = [name for name in drawn.live() if name in drawn.at and drawn.at[name] > drawn.now]
    if not planted:
        return None
    name = draw(st.sampled_from(planted))
    return {"schedule": name, "first": _time(drawn.at[name])}


def _nothing(draw, drawn: Drawn) -> dict:
    return {}


# op -> (weight, how its fields are drawn); shrinking moves towards the first kinds.
GENERATORS: dict[str, tuple[int, Callable[..., dict | None]]] = {
    "advance": (5, _advance),
    "process": (5, _process),
    "create": (4, _create),
    "update": (3, _update),
    "delete": (1, _delete),
    "complete-work": (2, _complete_work),
    "race": (1, _race),
    "drain": (1, _nothing),
    "release": (1, _release),
    "advance-epoch": (1, _nothing),
    "advance-scope-generation": (1, _nothing),
    "plant-work": (1, _plant_work),
}
_WEIGHTED = tuple(op for op, (weight, _) in GENERATORS.items() for _ in range(weight))


@st.composite
def programs(draw, max_steps: int = 8) -> list[dict]:
    """A scenario's steps: a create first, then up to max_steps - 1 drawn steps, each valid where it stands."""
    drawn = Drawn()
    steps = [{"op": "create", **_create(draw, drawn)} for _ in range(draw(st.integers(1, 2)))]
    # Half the programs are as long as allowed: short ones rarely let time pass and process what fell due.
    for _ in range(draw(st.integers(0, max_steps - 1) | st.just(max_steps - 1))):
        op = draw(st.sampled_from(_WEIGHTED))
        args = GENERATORS[op][1](draw, drawn)
        if args is not None:
            steps.append({"op": op, **args})
        if op == "advance" and args["seconds"] < 0:
            # Set back, the clock gets a pass and comes forward again at once: checks that order server timestamps
            # across steps (an update's acceptance after a materialization) read them on a clock that never went back.
            steps.append({"op": "process"})
            steps.append({"op": "advance", "seconds": -args["seconds"]})
            drawn.now -= args["seconds"]
        elif op == "advance" and draw(st.integers(0, 3)) != 3:
            steps.append({"op": "process", **_pass_fields(draw, drawn, racing=False)})  # time passed: a pass, mostly
    return steps


# -- a program as a scenario file -------------------------------------------------------------------------

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def toml_value(value: Any) -> str:
    """A value in TOML (strings escaped as JSON does, which TOML reads alike; DEL escaped too)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {type(value).__name__}")


def toml_key(key: str) -> str:
    return key if _BARE_KEY.match(key) else toml_value(key)


def steps_toml(steps: list[dict]) -> str:
    """The `[[steps]]` tables of a program."""
    blocks = []
    for step in steps:
        lines = ["[[steps]]"] + [f"{toml_key(k)} = {toml_value(v)}" for k, v in step.items()]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def program_name(steps: list[dict]) -> str:
    """A program's scenario name, from its steps alone (the same program always gets the same name)."""
    return "explore-" + hashlib.sha256(steps_toml(steps).encode()).hexdigest()[:10]


def scenario_toml(steps: list[dict], description: str, comments: tuple[str, ...] = ()) -> str:
    """The whole scenario file of a program."""
    head = "".join(f"# {' '.join(line.split())}\n" for line in comments)
    return f"{head}description = {toml_value(description)}\ncovers = [\"explore\"]\n\n{steps_toml(steps)}"


def generated_ops() -> set[str]:
    return set(GENERATORS)


assert set(GENERATORS) <= set(STEPS), sorted(set(GENERATORS) - set(STEPS))
