"""Scenario programs drawn by Hypothesis from the step registry: every drawn step is a scenario step, so a
drawn program is a scenario file (`crashproof explore`, testhost/runs/explore.py)."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from hypothesis import Phase, find, settings, strategies as st
from hypothesis.errors import NoSuchExample

from .steps import BESIDE_AFTER_DECISION, BESIDE_BARRIERS, LEASE_CANCEL_BARRIERS, STEPS

NAMES = ("s1", "s2", "s3")
CLAIM_LIMITS = ("The function rejects blank or control-character lease owners and lease durations that are null, "
                "non-positive, or longer than ten minutes before it changes a row, so an untrusted dispatcher call "
                "cannot strand a Schedule in a non-expiring or excessively long lease.")
DELETED_TERMINAL = "Deletion is terminal for that Schedule identity; a later update cannot revive it"
MAX_LEASE_S = 600
# Clock moves: small and large, forward and back; 4000 s is past the default safety window of 3600 s.
ADVANCES = (61, 1, 31, 90, 150, 400, 4000, -30, -300)
WORK_STATES = ("succeeded", "failed", "canceled", "running", "retrying", "suspended")
HELD_STATES = ("running", "retrying", "suspended")  # non-terminal: the Work keeps its QueueOne slot
TERMINAL_STATES = ("succeeded", "failed", "canceled")
# Why a release is refused wherever no runtime epoch advanced before it (docs/protocol-notes.md, 31h): these
# sentences together say a release applies to a stale-runtime-epoch fence only, whatever else suspended the schedule.
RELEASE_REFUSED = ("Recovery release applies only to admitted stale-runtime-epoch fences. ReleaseAfterRecovery can "
                   "release an old runtime epoch only; it cannot move the cursor or clear an evaluator/clock "
                   "suspension. An old runtime epoch can use ReleaseAfterRecovery, which rebinds the current scope "
                   "generation; a scope-generation-only mismatch requires a public update or delete/recreate to "
                   "establish a new generation.")
REFUSED_CREATE = "dup"  # the schedule name of a create that repeats a command ID: refused, no later step names it

# Swarm testing (Groce et al., "Swarm Testing", ISSTA 2012): each program draws which of these features it may use,
# so some programs are dense in one feature where a fixed distribution would dilute it, and shrinking drops the
# features a failure does not need (a feature off is the simpler program). `create`, `advance` and `process` are
# always on. Step kinds of GENERATORS are features by their op; the rest are fields of steps:
PASS_FEATURES = ("cancel-after", "refused-lease", "during", "many-schedules")
STEP_FEATURES = ("stale-revision", "repeat-command", "exact-anchor", "held-work", "plant-early", "quiet",
                 "cancel-at", "revoke", "member-login", "covers-deadline", "intervals")
# Features that make the program fault-free (`fault_free = true`: its point is a fault-free property, as in the
# catalog's bridge-role and cancel-after-decision), or cost wall time there: each program takes one in ten.
# `covers-deadline` tags the program `client-deadline`: its lost COMMIT replies are held past the deadline.
RARE_FEATURES = ("quiet", "cancel-at", "revoke", "member-login", "set-clock", "covers-deadline")
FAULT_FREE_FEATURES = ("cancel-at", "revoke", "member-login", "set-clock")

# Step kinds explore does not draw, with the reason; a kind in neither table fails tests/test_explore.py, so a
# new step kind is either generated or excluded on purpose.
NOT_GENERATED = {
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
    swarm: frozenset = frozenset()  # the features this program may use (all when empty)
    epoch_advanced: bool = False  # a runtime epoch advanced before this point: a release's answer hangs on passes
    commands: list[str] = field(default_factory=list)  # command names the creates gave (repeat-command)
    held: set[str] = field(default_factory=set)  # schedules whose first Work was moved to a non-terminal state
    grids: dict[str, tuple[int, int]] = field(default_factory=dict)  # an anchored Every: (anchor s, interval s)
    header: dict = field(default_factory=dict)  # the scenario file's own fields the program needs
    planted: set = field(default_factory=set)  # (schedule, At seconds) whose key a planted foreign Work holds
    every: dict[str, int] = field(default_factory=dict)  # an Every schedule -> its interval in seconds

    def live(self) -> list[str]:
        return [name for name in self.created if name not in self.deleted]

    def on(self, feature: str) -> bool:
        return not self.swarm or feature in self.swarm


def _time(seconds: int) -> str:
    """A scenario time, seconds from T0."""
    return f"+{seconds}s" if seconds >= 0 else f"-{-seconds}s"


def _spec(draw, name: str, drawn: Drawn, version: int, kind: str | None = None, anchored: bool | None = None) -> dict:
    kind = kind or draw(st.sampled_from(("every", "at", "after")))
    if drawn.on("intervals") and version == 1 and not drawn.every:
        kind = "every"  # the program's clock moves tick on an Every's grid: it has one
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
        drawn.every[name] = spec["every_s"]
        anchor = draw(st.sampled_from(("+0s", None, "+7s"))) if anchored is not False else None
        anchor = "+0s" if anchored and anchor is None else anchor
        if anchor is not None and drawn.on("exact-anchor") and draw(st.booleans()):
            # Persisted to the microsecond, never cut to the second; one microsecond past the second, so its instants
            # lie where whole-second ones do against a clock that runs a little past each move (a fraction such as
            # .123456 puts them within the wall time a program has used by then, and a pass may or may not meet them).
            anchor = "+7.000001s"
        if anchor is not None:
            spec["anchor"] = anchor
            if "." not in anchor:
                drawn.grids[name] = (int(anchor[1:-1]), spec["every_s"])
        else:
            drawn.grids.pop(name, None)
    misfire = draw(st.sampled_from((None, "skip", "run-once")))
    if misfire is not None:
        spec["misfire_policy"] = misfire
    if draw(st.booleans()):
        spec["safety_window_s"] = draw(st.sampled_from((7200, 120)))
    spec["target"] = {"command": f"{name}-v{version}"}
    return spec


def _create(draw, drawn: Drawn, kind: str | None = None) -> dict | None:
    free = [name for name in NAMES if name not in drawn.created]
    if kind is None and drawn.on("repeat-command") and drawn.commands and (not free or draw(st.integers(0, 2)) == 0):
        # A command ID already accepted for another schedule: refused as a conflict, nothing created.
        spec = _spec(draw, REFUSED_CREATE, Drawn(now=drawn.now), 1)
        return {"schedule": REFUSED_CREATE, "spec": spec, "command": draw(st.sampled_from(drawn.commands)),
                "expect": "fail", "problem": "command-conflict"}
    if not free:
        return None
    name = free[0]
    drawn.created.append(name)
    step = {"schedule": name, "spec": _spec(draw, name, drawn, 1, kind)}
    if drawn.on("repeat-command"):
        step["command"] = f"create-{name}"
        drawn.commands.append(step["command"])
    return step


def _update(draw, drawn: Drawn) -> dict | None:
    if not drawn.created:
        return None
    name = draw(st.sampled_from(drawn.created))
    if name not in drawn.deleted and drawn.on("stale-revision") and draw(st.integers(0, 2)) == 0:
        # Refused as stale: the schedule keeps its generation (the spec is drawn on a scratch copy).
        return {"schedule": name, "spec": _spec(draw, name, Drawn(now=drawn.now), 2), "stale_revision": True,
                "expect": "fail"}
    step = {"schedule": name, "spec": _spec(draw, name, drawn, 2)}
    drawn.held.discard(name)
    if name in drawn.deleted:
        step.update(expect="fail", rule=DELETED_TERMINAL)
    return step


def _delete(draw, drawn: Drawn) -> dict | None:
    live = drawn.live()
    if not live:
        return None
    name = draw(st.sampled_from(live))
    if drawn.on("stale-revision") and draw(st.integers(0, 2)) == 0:
        return {"schedule": name, "stale_revision": True, "expect": "fail"}  # refused: the schedule lives on
    drawn.deleted.add(name)
    return {"schedule": name}


def _release(draw, drawn: Drawn, name: str | None = None) -> dict | None:
    live = drawn.live()
    if not live:
        return None
    step = {"schedule": name if name in live else draw(st.sampled_from(live))}
    if not drawn.epoch_advanced:
        # No runtime epoch advanced: no fence a release applies to exists in any run of the program, faulted or not.
        step.update(expect="fail", rule=RELEASE_REFUSED)
        if drawn.on("stale-revision") and draw(st.integers(0, 2)) == 0:
            step["stale_revision"] = True
        return step
    # Refused unless a pass fenced the schedule for an old runtime epoch, which a fault's recovery may do or not.
    return {**step, "expect": "any"}


def _advance_epoch(draw, drawn: Drawn) -> dict:
    drawn.epoch_advanced = True
    return {}


def _advance(draw, drawn: Drawn) -> dict:
    ticking = sorted(name for name in drawn.live() if name in drawn.every)
    if drawn.on("intervals") and ticking and draw(st.booleans()):
        # One interval of an Every (and a second): each pass after it meets one new instant, so instants fall due
        # one by one while a Work runs, and coalesce behind it.
        seconds = drawn.every[draw(st.sampled_from(ticking))] + 1
        drawn.now += seconds
        return {"seconds": seconds, "tick": True}  # a pass follows each tick ("tick" is not written)
    seconds = draw(st.sampled_from(ADVANCES))
    drawn.now += seconds
    step = {"seconds": seconds}
    if seconds > 0 and drawn.on("quiet") and draw(st.integers(0, 2)) == 0:
        step["quiet_s"] = 1.5  # fault-free run only: a passive processor does nothing while nobody asks
    return step


def _set_clock(draw, drawn: Drawn) -> dict | None:
    """The clock frozen exactly on the next instant of an anchored Every's grid (the cutoff equals an instant)."""
    grids = sorted(name for name in drawn.live() if name in drawn.grids)
    if not grids:
        return None
    anchor, every = drawn.grids[draw(st.sampled_from(grids))]
    ahead = drawn.now + 30  # past the wall time the steps before took: the clock is set forward, never back
    instant = anchor + max(0, -(-(ahead - anchor) // every)) * every
    drawn.now = instant
    return {"at": _time(instant), "freeze": True}


def _pass_fields(draw, drawn: Drawn, racing: bool, after_advance: bool = False) -> dict:
    step: dict[str, Any] = {}
    alone = len(drawn.live()) == 1  # a step beside the pass: only where it has one schedule to claim
    maximum = draw(st.sampled_from((2, 1, 3)))  # passes over several schedules are where combinations live
    if maximum != 1:
        step["maximum_schedules"] = maximum
    if drawn.on("cancel-after") and draw(st.integers(0, 2)) == 0:
        step["cancel_after"] = 1
    # A denied or cancelled pass tests something only with something due: drawn where time has just passed.
    if after_advance and drawn.on("revoke") and draw(st.integers(0, 2)) == 0:
        step["revoke"] = "set-local-scope"  # judged by the bridge-role checks: no during, expect or cancel_at
        return step
    if after_advance and drawn.on("member-login") and draw(st.booleans()):
        step["processor"] = "B"  # copy B logs in as a mere member of the runtime role: its bridge must refuse
        drawn.header.setdefault("instances", {"B": {"runtime_login": "member"}})
        return step
    if after_advance and drawn.on("cancel-at") and "cancel_after" not in step and draw(st.booleans()):
        # A lease's own barriers only: a drawn program may not bridge every lease (a bridge's barrier is the catalog's).
        step["cancel_at"] = {"barrier": draw(st.sampled_from(LEASE_CANCEL_BARRIERS)),
                             "hit": draw(st.integers(1, maximum))}
        return step
    if not racing and drawn.on("refused-lease") and draw(st.integers(0, 3)) == 0:
        # A lease the claim function must refuse: the generator knows the answer the spec requires.
        refused = draw(st.sampled_from(("lease_seconds", "lease_owner")))
        if refused == "lease_seconds":
            step["lease_seconds"] = draw(st.sampled_from((0, -5, MAX_LEASE_S + 1, 1800)))
        else:
            step["lease_owner"] = draw(st.sampled_from((" ", "owner\u0007", "\t")))
        step.update(expect="fail", rule=CLAIM_LIMITS)
    elif after_advance and drawn.on("intervals") and drawn.on("during") and drawn.every and alone \
            and set(drawn.every) & set(drawn.live()) and draw(st.integers(0, 2)) == 0:
        # The first Work finishing between a tick's decision and the rest of its pass: its terminal transaction
        # requeues the schedule for the coalesced instants behind it, and the pass must leave that requeue in place.
        step.pop("maximum_schedules", None)
        name = draw(st.sampled_from(sorted(set(drawn.every) & set(drawn.live()))))
        drawn.held.discard(name)
        step["during"] = {"barrier": BESIDE_AFTER_DECISION[0], "op": "complete-work", "schedule": name, "nth": 1,
                          "state": draw(st.sampled_from(TERMINAL_STATES))}
    elif drawn.on("during") and alone and draw(st.integers(0, 2)) == 0:
        # Beside a pass over one schedule, as the catalog's are: in a pass over two, a change that waited for the
        # held decision may commit before the pass's next decision, an order the model does not take (31m). With
        # one schedule live, too: of two due at one instant a pass bounded to one may claim either (31p), and the
        # model cannot follow the claims of a pass a step ran beside.
        step.pop("maximum_schedules", None)
        # `complete-work` beside a held barrier only in the requeue shape above (31n).
        beside = draw(st.sampled_from(("update", "advance-scope-generation", "delete")))
        barrier = draw(st.sampled_from(BESIDE_BARRIERS))
        name = None
        if beside != "advance-scope-generation":
            if not drawn.live():
                return step
            name = draw(st.sampled_from(drawn.live()))
        step["during"] = _change_beside(draw, drawn, beside, barrier, name)
    return step


def _change_beside(draw, drawn: Drawn, op: str, barrier: str, name: str | None) -> dict:
    """A pass's `during`: a scope generation advanced, or an update or delete of `name`, beside `barrier`."""
    during: dict[str, Any] = {"barrier": barrier, "op": op}
    if op == "update":
        during.update(schedule=name, spec=_spec(draw, name, drawn, 3))
    elif op == "delete":
        during["schedule"] = name
        drawn.deleted.add(name)
    return during


def _process(draw, drawn: Drawn) -> dict:
    return _pass_fields(draw, drawn, racing=False)


def _race(draw, drawn: Drawn) -> dict | None:
    if drawn.on("member-login"):
        return None  # copy B logs in as a mere member there: its half of a race would be refused
    return _pass_fields(draw, drawn, racing=True)


def _complete_work(draw, drawn: Drawn) -> dict | None:
    if not drawn.created:
        return None
    name = draw(st.sampled_from(drawn.created))
    if drawn.on("held-work") and draw(st.booleans()):
        # The first Work held non-terminal across intervals (its slot kept, instants coalescing behind it), then
        # made terminal: the requeue that follows is where coalesced ranges and the slot's rules live.
        state = draw(st.sampled_from(TERMINAL_STATES if name in drawn.held else HELD_STATES))
        (drawn.held.discard if state in TERMINAL_STATES else drawn.held.add)(name)
        return {"schedule": name, "state": state, "nth": 1}
    step = {"schedule": name, "state": draw(st.sampled_from(WORK_STATES))}
    if draw(st.booleans()):
        step["nth"] = 1
    return step


def _plant_work(draw, drawn: Drawn, name: str | None = None) -> dict | None:
    # Only while its instant is ahead: the key of an occurrence already materialized is the occurrence's own.
    # Once per key: the Work store refuses a second Work under a key a Work holds.
    planted = [name for name in drawn.live() if name in drawn.at and drawn.at[name] > drawn.now
               and (name, drawn.at[name]) not in drawn.planted]
    if not planted:
        return None
    name = name if name in planted else draw(st.sampled_from(planted))
    drawn.planted.add((name, drawn.at[name]))
    return {"schedule": name, "first": _time(drawn.at[name])}


def _nothing(draw, drawn: Drawn) -> dict:
    return {}


# -- motifs: protocol situations drawn whole ------------------------------------------------------------------
# Some situations the spec writes rules for take several steps in one order (a fence, the pass that meets it, the
# release that follows), which independent draws of eight steps rarely line up. A motif draws such a situation as
# one unit: the steps that set it up (a schedule created when none fits), the clock moved just past a due instant,
# and the steps that act on it; each is a swarm feature, and each step it writes is an ordinary scenario step.

def _every(draw, drawn: Drawn, steps: list[dict], fresh: bool = False) -> str | None:
    """A live Every to act on (created when none is live, or when `fresh` asks for a second one)."""
    live = sorted(name for name in drawn.live() if name in drawn.every)
    if live and not fresh:
        return draw(st.sampled_from(live))
    created = _create(draw, drawn, kind="every")
    if created is None:
        return live[0] if live else None
    steps.append({"op": "create", **created})
    return created["schedule"]


def _due(drawn: Drawn, names: list[str], steps: list[dict]) -> None:
    """The clock moved just past the next instant of each named Every (its interval, plus an anchor's seven seconds
    and one), inside the 120 s window."""
    seconds = max(drawn.every[name] for name in names) + 8
    drawn.now += seconds
    steps.append({"op": "advance", "seconds": seconds})


ANOMALOUS_S = 8000  # past every safety window the generator draws (7,200 s the longest)


def _motif_fence_then_release(draw, drawn: Drawn) -> list[dict] | None:
    """An operator fences the runtime (a runtime epoch, a scope generation or both), a pass meets the fence on a due
    schedule, and an operator releases it; the schedule's next instant after that."""
    steps: list[dict] = []
    name = _every(draw, drawn, steps)
    if name is None:
        return None
    # Both fences first (Hypothesis draws small integers most): the release must rebind the scope generation too.
    fences = (("advance-epoch", "advance-scope-generation"), ("advance-scope-generation",), ("advance-epoch",))
    for op in fences[draw(st.integers(0, 2))]:
        steps.append({"op": op})
        drawn.epoch_advanced |= op == "advance-epoch"
    _due(drawn, [name], steps)
    return steps + _released(draw, drawn, name)


def _released(draw, drawn: Drawn, name: str) -> list[dict]:
    """The pass that meets what the steps before set up, an operator's release of the schedule, its next instant."""
    steps = [{"op": "process"}, {"op": "release", **_release(draw, drawn, name)}]
    _due(drawn, [name], steps)
    return steps + [{"op": "process"}]


def _motif_anomaly_then_release(draw, drawn: Drawn) -> list[dict] | None:
    """The clock jumps past every safety window, a pass suspends the due schedule for the clock anomaly, and an
    operator's release, which cannot clear that suspension (it applies to a runtime epoch's fence only)."""
    steps: list[dict] = []
    name = _every(draw, drawn, steps)
    if name is None:
        return None
    drawn.now += ANOMALOUS_S
    steps.append({"op": "advance", "seconds": ANOMALOUS_S})
    return steps + _released(draw, drawn, name)


BEHIND_S = 300  # a clock set back past the instants a held-slot motif decided
HOLDING = ("suspended", "running", "retrying")  # the held-slot motif's states; a retry keeps the slot too


def _motif_held_slot(draw, drawn: Drawn) -> list[dict] | None:
    """A new Every's first Work held non-terminal (running, retrying or suspended: none releases the slot) while one
    or two instants fall due and coalesce behind it, mostly a generation update then (which supersedes them), then
    that Work terminal, the pass its requeue asks for and, after an update, the new generation's first instant's."""
    steps: list[dict] = []
    name = _every(draw, drawn, steps, fresh=True)  # its first Work is the one the pass after its create accepts
    if name is None:
        return None
    # Each pass over every live schedule: bounded to one, a pass would claim another due one first (longer due, or
    # the requeue's claimable time later), and the slot this motif holds would meet no pass.
    over = {"op": "process", **({"maximum_schedules": len(drawn.live())} if len(drawn.live()) > 1 else {})}
    _due(drawn, [name], steps)
    steps.append(dict(over))
    steps.append({"op": "complete-work", "schedule": name, "state": draw(st.sampled_from(HOLDING)), "nth": 1})
    for _ in range(draw(st.integers(1, 2))):
        _due(drawn, [name], steps)
        steps.append(dict(over))
    # Then one of: an update (which supersedes what coalesced, so the terminal transition requeues nothing); the
    # clock set back before the terminal transition, so the requeue's pass claims with a cutoff behind the cursor,
    # which decides nothing (and must not suspend; the clock comes forward again after that pass, 31d); or neither.
    # One draw: the update on two of its four values, the clock set back on one, neither on the last (Hypothesis
    # draws some values far more than others; over seed 0's 400 programs the first two come out about even). Set
    # back after an update, the clock would meet no pass: nothing is requeued.
    variant = draw(st.integers(0, 3))
    update = None
    if variant in (0, 2):
        update = {"op": "update", "schedule": name, "spec": _spec(draw, name, drawn, 2)}
        steps.append(update)
    behind = -BEHIND_S if variant == 1 else 0
    if behind:
        steps.append({"op": "advance", "seconds": behind})
    steps.append({"op": "complete-work", "schedule": name, "state": draw(st.sampled_from(TERMINAL_STATES)),
                  "nth": 1})
    drawn.held.discard(name)
    steps.append(dict(over))
    if behind:
        steps.append({"op": "advance", "seconds": -behind})
    if update is not None:
        # The new generation's first instant's pass: it decides that generation's occurrence, and its bridge must
        # take none the update superseded.
        spec = update["spec"]
        seconds = {"every": lambda: spec["every_s"] + 8, "after": lambda: spec["after_s"] + 1,
                   "at": lambda: drawn.at[name] - drawn.now + 1}[spec["kind"]]()
        if seconds > 0:
            drawn.now += seconds
            steps += [{"op": "advance", "seconds": seconds}, dict(over)]
    return steps


def _motif_cancel_in_flight(draw, drawn: Drawn) -> list[dict] | None:
    """A pass over two due schedules cancelled in flight at a drawn barrier of its first lease (fault-free only)."""
    steps: list[dict] = []
    first = _every(draw, drawn, steps)
    live = sorted(name for name in drawn.live() if name in drawn.every and name != first)
    second = draw(st.sampled_from(live)) if live else _every(draw, drawn, steps, fresh=True)
    if first is None or second is None or second == first:
        return steps  # a schedule it created stays in the program
    _due(drawn, [first, second], steps)
    # The decision's commit first: a cancel there must keep the decision and stop before the second lease.
    steps.append({"op": "process", "maximum_schedules": 2,
                  "cancel_at": {"barrier": draw(st.sampled_from(LEASE_CANCEL_BARRIERS[::-1])), "hit": 1}})
    return steps


def _motif_conflict_release(draw, drawn: Drawn) -> list[dict] | None:
    """A foreign Work planted under an At occurrence's key, the pass that meets it (an idempotency conflict), and an
    operator's release of that schedule."""
    steps: list[dict] = []
    planted = _plant_work(draw, drawn)
    if planted is None:
        created = _create(draw, drawn, kind="at")
        if created is None:
            return None
        steps.append({"op": "create", **created})
        planted = _plant_work(draw, drawn, created["schedule"])
        if planted is None:
            return steps
    name = planted["schedule"]
    steps.append({"op": "plant-work", **planted})
    seconds = drawn.at[name] - drawn.now + 1
    drawn.now += seconds
    steps.append({"op": "advance", "seconds": seconds})
    steps.append({"op": "process"})
    steps.append({"op": "release", **_release(draw, drawn, name)})
    return steps


def _motif_reanchor(draw, drawn: Drawn) -> list[dict] | None:
    """An update to an Every that gives no anchor (the new generation is anchored on the update's acceptance), and
    that generation's next instant."""
    live = drawn.live()
    if not live:
        return None
    name = draw(st.sampled_from(live))
    steps = [{"op": "update", "schedule": name, "spec": _spec(draw, name, drawn, 2, kind="every", anchored=False)}]
    drawn.held.discard(name)
    _due(drawn, [name], steps)
    steps.append({"op": "process"})
    return steps


def _motif_late_in_window(draw, drawn: Drawn) -> list[dict] | None:
    """A schedule whose configured safety window is longer than the default processed later than the default
    allows but inside its own window (a recovery range, no anomaly)."""
    created = _create(draw, drawn, kind="every")
    if created is None:
        return None
    created["spec"]["safety_window_s"] = 7200
    steps = [{"op": "create", **created}]
    drawn.now += 4000
    steps += [{"op": "advance", "seconds": 4000}, {"op": "process"}]
    return steps


def _motif_past_frozen_instant(draw, drawn: Drawn) -> list[dict] | None:
    """The clock frozen exactly on an anchored Every's instant for a pass (the range (cursor, cutoff] includes its
    end: note 26d), then frozen on the next instant for another (the cursor stands exactly on the first, which the
    range excludes: 29f), then let run on."""
    steps: list[dict] = []
    grids = sorted(name for name in drawn.live() if name in drawn.grids)
    if not grids:
        created = _create(draw, drawn, kind="every")
        if created is None:
            return None
        steps.append({"op": "create", **created})
    name = draw(st.sampled_from(sorted(n for n in drawn.live() if n in drawn.grids) or [None]))
    if name is None:
        return steps  # the Every it created drew no anchor: no grid to freeze on
    anchor, every = drawn.grids[name]
    ahead = drawn.now + 30  # past the wall time the steps before took: the clock is set forward, never back
    first = anchor + max(0, -(-(ahead - anchor) // every)) * every
    drawn.now = first + every + 1
    steps += [{"op": "set-clock", "at": _time(first), "freeze": True}, {"op": "process"},
              {"op": "set-clock", "at": _time(first + every), "freeze": True}, {"op": "process"},
              {"op": "advance", "seconds": 1}]
    return steps


# -- motifs on the edges the protocol notes declare (testhost/runs/edges.py names each with its note) -----------------
EDGE_AHEAD_S = 600  # an anchor this far past the nominal clock lies past the wall time the steps before took too


def _on_grid(draw, drawn: Drawn, every: int, ahead: int, **fields) -> dict | None:
    """A new Every anchored `ahead` seconds past the nominal clock, with its grid recorded (set-clock can freeze on
    it); None when no name is left."""
    created = _create(draw, drawn, kind="every")
    if created is None:
        return None
    name, anchor = created["schedule"], drawn.now + ahead
    created["spec"].update(every_s=every, anchor=_time(anchor), **fields)
    drawn.every[name], drawn.grids[name] = every, (anchor, every)
    return created


def _motif_lateness_on_window(draw, drawn: Drawn) -> list[dict] | None:
    """Note 3's edge, from both sides: a pass whose lateness (its cutoff less the first instant due after the
    cursor) is exactly the schedule's safety window, the clock frozen there, decides a recovery range; one a
    microsecond later (the anchor a microsecond earlier: a frozen clock stands on whole seconds) or a second later
    suspends for the clock anomaly. The first instant due is the anchor, which lies past the acceptance and less
    than an interval after it."""
    every, window = draw(st.sampled_from(((900, 7200), (60, 120))))
    # Less than an interval ahead, or the grid's instants before the anchor (n < 0) would be the first due.
    ahead = min(EDGE_AHEAD_S, every // 2)
    created = _on_grid(draw, drawn, every, ahead, safety_window_s=window)
    if created is None:
        return None
    past = draw(st.sampled_from(("on", "microsecond", "second")))  # on the edge first: shrinking goes there
    anchor = drawn.now + ahead
    if past == "microsecond":
        created["spec"]["anchor"] = f"+{anchor - 1}.999999s"
        drawn.grids.pop(created["schedule"])  # not on whole seconds: set-clock cannot freeze on it
    frozen = anchor + window + (past == "second")
    drawn.now = frozen + 1
    return [{"op": "create", **created}, {"op": "set-clock", "at": _time(frozen), "freeze": True},
            {"op": "process"}, {"op": "advance", "seconds": 1}]


def _motif_single_instant_on_cutoff(draw, drawn: Drawn) -> list[dict] | None:
    """Note 26d's edge for the single instants: an At (or an After) whose instant a pass frozen exactly on it
    decides, then the clock let run on."""
    created = _create(draw, drawn, kind="at")
    if created is None:
        return None
    name = created["schedule"]
    drawn.every.pop(name, None)  # a first create may have been drawn an Every (the intervals feature): not here
    drawn.grids.pop(name, None)
    spec = created["spec"] = {"kind": draw(st.sampled_from(("at", "after"))), "target": {"command": f"{name}-v1"}}
    ahead = EDGE_AHEAD_S
    if spec["kind"] == "at":
        instant = drawn.now + ahead
        spec["at"] = _time(instant)
        drawn.at[name] = instant
    else:
        # The After instant is its acceptance plus the delay: on a clock frozen for the create, exactly known.
        spec["after_s"] = ahead
        instant = drawn.now + 30 + ahead
    steps = [] if spec["kind"] == "at" else [{"op": "set-clock", "at": _time(drawn.now + 30), "freeze": True}]
    drawn.now = instant + 1
    return steps + [{"op": "create", **created}, {"op": "set-clock", "at": _time(instant), "freeze": True},
                    {"op": "process"}, {"op": "advance", "seconds": 1}]


def _motif_update_behind_cursor(draw, drawn: Drawn) -> list[dict] | None:
    """Note 8's edge: a new Every's first instants skipped as a recovery range (its cursor at the pass's cutoff,
    nothing materialized), the clock set back behind the cursor, an update accepted there (the cursor stays:
    max(cursor, accepted_at_utc)), and the pass after it, which must not decide the instants behind the cursor for
    the new generation. Nothing is materialized before the update: `nothing-materialized-for-superseded-or-
    suspended` orders a materialization and an acceptance by server time, which a clock set back would invert
    (31d)."""
    every = draw(st.sampled_from((60, 90)))
    created = _on_grid(draw, drawn, every, 0, misfire_policy="skip")
    if created is None:
        return None
    name = created["schedule"]
    due = 2 * every + 8  # two instants: a recovery range, skipped
    back = draw(st.sampled_from((BEHIND_S, 30)))
    forward = back + every + 8
    drawn.now += due - back + forward
    spec = {k: v for k, v in created["spec"].items() if k != "target"} | {"target": {"command": f"{name}-v2"}}
    spec.pop("anchor")  # anchored on the update's acceptance, behind the cursor
    drawn.grids.pop(name, None)
    return [{"op": "create", **created}, {"op": "advance", "seconds": due}, {"op": "process"},
            {"op": "advance", "seconds": -back}, {"op": "update", "schedule": name, "spec": spec},
            {"op": "advance", "seconds": forward}, {"op": "process"}]


def _motif_update_on_cursor(draw, drawn: Drawn) -> list[dict] | None:
    """Note 8's other edge: a new anchored Every whose first instants a pass frozen on its grid skips as one range
    (the cursor stands exactly on an instant, nothing materialized), an update accepted on the same frozen instant
    (its acceptance equals the cursor) keeping the grid, and the pass an interval on, which decides only the
    instant after it (37b)."""
    every = draw(st.sampled_from((60, 90)))
    created = _on_grid(draw, drawn, every, 0, misfire_policy="skip")
    if created is None:
        return None
    name = created["schedule"]
    frozen = drawn.now + 2 * every  # two instants: a range, skipped
    drawn.now = frozen + every + 1
    spec = {**created["spec"], "target": {"command": f"{name}-v2"}}
    spec.pop("misfire_policy")
    clock = {"op": "set-clock", "at": _time(frozen), "freeze": True}
    return [{"op": "create", **created}, clock, {"op": "process"}, dict(clock),
            {"op": "update", "schedule": name, "spec": spec}, {"op": "advance", "seconds": every + 1},
            {"op": "process"}]


def _motif_future_anchor(draw, drawn: Drawn) -> list[dict] | None:
    """Note 6's edge (39e): an Every anchored well after its acceptance takes every integer n, so the instants
    before the anchor (n < 0) fall due and are decided before the anchor is reached."""
    every = draw(st.sampled_from((60, 90)))
    created = _on_grid(draw, drawn, every, EDGE_AHEAD_S + every * draw(st.integers(2, 4)))
    if created is None:
        return None
    drawn.now += 2 * every + 1
    return [{"op": "create", **created}, {"op": "advance", "seconds": 2 * every + 1}, {"op": "process"}]


CHANGES_BESIDE = tuple((op, barrier) for barrier in BESIDE_BARRIERS[::-1]
                       for op in ("advance-scope-generation", "update", "delete"))


def _motif_change_beside_decision(draw, drawn: Drawn) -> list[dict] | None:
    """With one schedule live (the others deleted), a change beside its due pass's held barrier (a scope generation
    advanced, an update or a delete, mostly beside the decision before its commit, which must lock the fence it
    read), then the next instant's pass, which meets whatever the change left."""
    steps: list[dict] = []
    # Of two due at one instant a pass bounded to one may claim either (31p), and the model cannot follow the claims
    # of a pass a step ran beside: the other schedules are deleted first, the first live Every kept.
    live = drawn.live()
    kept = next((name for name in live if name in drawn.every), None)
    for other in live:
        if other != kept:
            drawn.deleted.add(other)
            steps.append({"op": "delete", "schedule": other})
    name = kept or _every(draw, drawn, steps)
    if name is None:
        return steps  # the deletes stay: the schedules they delete are deleted in what the generator draws next
    _due(drawn, [name], steps)
    # A scope generation beside the decision first (Hypothesis draws False most), the other pairs in one draw.
    op, barrier = CHANGES_BESIDE[0] if not draw(st.booleans()) else \
        CHANGES_BESIDE[draw(st.integers(1, len(CHANGES_BESIDE) - 1))]
    steps.append({"op": "process", "during": _change_beside(draw, drawn, op, barrier, name)})
    _due(drawn, [name], steps)
    steps.append({"op": "process"})
    return steps


def _motif_terminal_beside_decision(draw, drawn: Drawn) -> list[dict] | None:
    """A new Every, alone live (the others deleted), its first Work accepted (or held running, retrying or
    suspended); at its next instant that Work turns terminal between the decision that coalesced the instant behind
    it and the rest of the pass, and the pass after claims the requeue that transition wrote (29i)."""
    steps: list[dict] = []
    fresh = _create(draw, drawn, kind="every")
    if fresh is None:
        return None  # no name left for a new Every: an older one's first Work may hold anything (31n)
    name = fresh["schedule"]
    steps.append({"op": "create", **fresh})
    # Beside a pass over two, the model cannot tell which decision the step came after (31m).
    for other in drawn.live():
        if other != name:
            drawn.deleted.add(other)
            steps.append({"op": "delete", "schedule": other})
    _due(drawn, [name], steps)
    steps.append({"op": "process"})  # its first Work accepted: a Work not yet terminal holds the slot
    if draw(st.booleans()):
        steps.append({"op": "complete-work", "schedule": name, "state": draw(st.sampled_from(HOLDING)), "nth": 1})
    _due(drawn, [name], steps)
    steps.append({"op": "process", "during": {"barrier": BESIDE_AFTER_DECISION[0], "op": "complete-work",
                                              "schedule": name, "nth": 1,
                                              "state": draw(st.sampled_from(TERMINAL_STATES))}})
    steps.append({"op": "process"})
    return steps


# motif -> how its steps are drawn; each is a swarm feature, drawn as the pseudo-op "motif".
MOTIFS: dict[str, Callable[..., list[dict] | None]] = {
    "fence-then-release": _motif_fence_then_release,
    "anomaly-then-release": _motif_anomaly_then_release,
    "change-beside-decision": _motif_change_beside_decision,
    "held-slot": _motif_held_slot,
    "cancel-in-flight": _motif_cancel_in_flight,
    "conflict-release": _motif_conflict_release,
    "reanchor": _motif_reanchor,
    "late-in-window": _motif_late_in_window,
    "past-frozen-instant": _motif_past_frozen_instant,
    "terminal-beside-decision": _motif_terminal_beside_decision,
    "lateness-on-window": _motif_lateness_on_window,
    "single-instant-on-cutoff": _motif_single_instant_on_cutoff,
    "update-behind-cursor": _motif_update_behind_cursor,
    "update-on-cursor": _motif_update_on_cursor,
    "future-anchor": _motif_future_anchor,
}
MOTIF_WEIGHT = 6
# The motifs aimed at an edge a note declares (testhost/runs/edges.py) are one swarm feature, `edges`, and one choice
# among the motifs, which then draws one of them: six more features would thin every other situation's share.
EDGE_MOTIFS = ("lateness-on-window", "single-instant-on-cutoff", "update-behind-cursor", "update-on-cursor",
               "future-anchor")
EDGES_FEATURE = "edges"


TIMING = ("kind", "at", "after_s", "every_s", "anchor", "safety_window_s")


def _timing(step: dict) -> dict:
    """A step as far as where it stands in time: two programs alike in this are one way onto an edge."""
    spec = step.get("spec") or {}
    return {"op": step["op"], "at": step.get("at"), "seconds": step.get("seconds"),
            "spec": {k: spec[k] for k in TIMING if k in spec}}


def motif_programs(name: str, examples: int = 12) -> list[tuple[list[dict], dict]]:
    """The programs a motif writes from a fresh start, one per way it stands in time (its steps' clock moves and
    timings), each with a pass (a motif that could not set its situation up writes none), in the order drawn: for
    an edge motif, each way it stands on its edge or beside it."""
    @st.composite
    def alone(draw):
        drawn = Drawn()
        return MOTIFS[name](draw, drawn), drawn.header

    seen: dict[str, tuple[list[dict], dict]] = {}

    def keep(program) -> bool:
        if any(step["op"] == "process" for step in program[0]):
            seen.setdefault(json.dumps([_timing(step) for step in program[0]], sort_keys=True), program)
        return False
    try:
        find(alone(), keep, settings=settings(max_examples=examples, database=None, deadline=None, derandomize=True,
                                              phases=(Phase.generate,)))
    except NoSuchExample:
        pass
    return list(seen.values())


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
    "advance-epoch": (1, _advance_epoch),
    "advance-scope-generation": (1, _nothing),
    "plant-work": (1, _plant_work),
    "set-clock": (3, _set_clock),  # always followed by a pass, on the frozen instant (a rare feature: see swarms)
}
_WEIGHTED = tuple(op for op, (weight, _) in GENERATORS.items() for _ in range(weight))
ALWAYS_ON = ("create", "advance", "process")
SWARM = (tuple(op for op in GENERATORS if op not in ALWAYS_ON) + PASS_FEATURES + STEP_FEATURES
         + tuple(name for name in MOTIFS if name not in EDGE_MOTIFS) + (EDGES_FEATURE,))


@st.composite
def swarms(draw) -> frozenset:
    """The features one program may use: each common one with even odds, each rare one in eight."""
    return frozenset(f for f in SWARM if (draw(st.sampled_from(RARE_ODDS)) if f in RARE_FEATURES else draw(st.booleans())))


RARE_ODDS = (False,) * 9 + (True,)  # one in ten, and shrinking goes to False (a plain index, not a biased integer)


@st.composite
def programs(draw, max_steps: int = 8) -> list[dict]:
    """A scenario's steps: a create first, then up to max_steps - 1 drawn steps, each valid where it stands."""
    return draw(scenario_programs(max_steps))[0]


@st.composite
def scenario_programs(draw, max_steps: int = 8) -> tuple[list[dict], dict]:
    """A program and the scenario file's own fields it needs (`header`): its swarm of features drawn first."""
    drawn = Drawn(swarm=draw(swarms()) | frozenset(ALWAYS_ON))
    weighted = tuple(op for op in _WEIGHTED if drawn.on(op)) + (("advance",) * 5 if drawn.on("intervals") else ())
    steps = [{"op": "create", **_create(draw, drawn)} for _ in range(draw(st.integers(1, 2)))]
    if drawn.on("many-schedules") and draw(st.booleans()):
        steps.append({"op": "create", **_create(draw, drawn)})  # passes over several schedules: combinations
    for create in list(steps):
        _plant_early(draw, drawn, create, steps)
    # Half the programs are as long as allowed: short ones rarely let time pass and process what fell due.
    motifs = tuple(name for name in MOTIFS if name not in EDGE_MOTIFS and drawn.on(name))
    motifs += (EDGES_FEATURE,) * len(EDGE_MOTIFS) if drawn.on(EDGES_FEATURE) else ()  # each edge a motif's share
    weighted += ("motif",) * MOTIF_WEIGHT if motifs else ()
    for _ in range(draw(st.integers(0, max_steps - 1) | st.just(max_steps - 1))):
        op = draw(st.sampled_from(weighted))
        if op == "motif":
            motif = draw(st.sampled_from(motifs))
            motif = draw(st.sampled_from(EDGE_MOTIFS)) if motif == EDGES_FEATURE else motif
            steps += MOTIFS[motif](draw, drawn) or []
            continue
        args = GENERATORS[op][1](draw, drawn)
        if args is not None:
            steps.append({"op": op, **{k: v for k, v in args.items() if k != "tick"}})
        if op == "create" and args is not None:
            _plant_early(draw, drawn, {"op": op, **args}, steps)
        if op == "set-clock" and args is not None:
            steps.append({"op": "process", **_plain_pass(draw, drawn)})  # the frozen instant is the cutoff
            continue
        if op == "advance" and args["seconds"] < 0:
            # Set back, the clock gets a pass and comes forward again at once: checks that order server timestamps
            # across steps (an update's acceptance after a materialization) read them on a clock that never went back.
            if drawn.on("complete-work") and drawn.created and draw(st.booleans()):
                # A Work made terminal while the clock is behind requeues its schedule: the pass then claims it with
                # a cutoff behind the cursor, which decides nothing (and must not suspend).
                steps.append({"op": "complete-work", "schedule": draw(st.sampled_from(drawn.created)),
                              "state": draw(st.sampled_from(TERMINAL_STATES)), "nth": 1})
            steps.append({"op": "process"})
            steps.append({"op": "advance", "seconds": -args["seconds"]})
            drawn.now -= args["seconds"]
        elif op == "advance" and (args.get("tick") or draw(st.integers(0, 3)) != 3):
            steps.append({"op": "process", **_pass_fields(draw, drawn, racing=False, after_advance=True)})  # mostly
            if "revoke" in steps[-1] or steps[-1].get("processor") == "B":
                # A denied pass leaves the leases it claimed: they expire (2 s) before the next pass or the final drain.
                steps.append({"op": "advance", "seconds": 3})
                drawn.now += 3
            if drawn.on("release") and draw(st.integers(0, 2)) == 0:
                # An operator's release right after a pass, which may have suspended the schedule it names.
                released = _release(draw, drawn)
                if released is not None:
                    steps.append({"op": "release", **released})
    if any(op in FAULT_FREE_FEATURES for op in _used(steps)):
        drawn.header["fault_free"] = True
    if drawn.on("covers-deadline"):
        drawn.header["covers"] = ["explore", "client-deadline"]
    return steps, drawn.header


def _plant_early(draw, drawn: Drawn, create: dict, steps: list[dict]) -> None:
    """A foreign Work under a new At occurrence's key, before any pass could materialize it."""
    if create["schedule"] in drawn.at and drawn.on("plant-early") and drawn.on("plant-work") and draw(st.booleans()):
        planted = _plant_work(draw, drawn, create["schedule"])
        if planted is not None:
            steps.append({"op": "plant-work", **planted})


def _used(steps: list[dict]) -> set[str]:
    """The fault-free-only features a program's steps use."""
    used = set()
    for step in steps:
        used |= {"cancel-at"} if "cancel_at" in step else set()
        used |= {"revoke"} if "revoke" in step else set()
        used |= {"member-login"} if step.get("processor") == "B" else set()
        used |= {"set-clock"} if step["op"] == "set-clock" else set()
    return used


def _plain_pass(draw, drawn: Drawn) -> dict:
    maximum = draw(st.sampled_from((2, 1, 3)))
    return {"maximum_schedules": maximum} if maximum != 1 else {}


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


def program_name(steps: list[dict], header: dict | None = None) -> str:
    """A program's scenario name, from its steps and header alone (the same program always gets the same name)."""
    text = (json.dumps(header, sort_keys=True) if header else "") + steps_toml(steps)
    return "explore-" + hashlib.sha256(text.encode()).hexdigest()[:10]


def header_toml(header: dict | None) -> str:
    """The scenario file's own fields a program needs besides its steps (`fault_free`, `covers`, `instances`)."""
    header = header or {}
    lines = [f"fault_free = {toml_value(header['fault_free'])}"] if "fault_free" in header else []
    tables = [f"\n[instances.{toml_key(label)}]\n" + "".join(f"{toml_key(k)} = {toml_value(v)}\n"
                                                            for k, v in fields.items())
              for label, fields in header.get("instances", {}).items()]
    return "".join(line + "\n" for line in lines) + "".join(tables)


def scenario_toml(steps: list[dict], description: str, comments: tuple[str, ...] = (),
                  header: dict | None = None) -> str:
    """The whole scenario file of a program."""
    head = "".join(f"# {' '.join(line.split())}\n" for line in comments)
    covers = toml_value((header or {}).get("covers", ["explore"]))
    return (f"{head}description = {toml_value(description)}\ncovers = {covers}\n{header_toml(header)}\n"
            f"{steps_toml(steps)}")


assert set(GENERATORS) <= set(STEPS), sorted(set(GENERATORS) - set(STEPS))
