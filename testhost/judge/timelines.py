"""The model over every timeline a faulted case may have run. A fault in a pass can stop it before it decided some
of the schedules it claimed; the recovery then decides them on a clock moved by lease_seconds + 1, which may lie
past a nominal instant. Both are correct, so the model keeps one branch per set of schedules the interrupted pass
may have left, and the final state is judged against the branch it matches."""

from __future__ import annotations

import copy
from datetime import datetime
from itertools import combinations

from .pictures import comparable
from .gate_model import Model, picture

# Beyond this many schedules claimed by the interrupted pass, only the tails of its claim order are branched (a
# pass decides in claim order, so a fault leaves a tail of it); the catalog's passes claim at most a few.
MAX_SUBSETS_OF = 6
# Beyond this many choices of which due schedules a bounded interrupted pass claimed, only the model's is branched.
MAX_CLAIM_CHOICES = 20


class Timelines:
    """Model, branched at a fault: every operation goes to every branch; reads go to the first (no fault)."""

    def __init__(self) -> None:
        self.branches: list[Model] = [Model()]
        self.left: list[frozenset] = [frozenset()]  # per branch, what the interrupted pass left to the recovery
        # The last pass (or drain), the models before it and the schedules it claimed first; then what the case
        # applied since (a step beside the pass's held barrier), so a branch of the pass can take it too.
        self._before: tuple[list[Model], str, datetime, int, tuple[str, ...]] | None = None
        self._since: list[tuple[str, tuple]] = []

    @property
    def primary(self) -> Model:
        return self.branches[0]

    @property
    def schedules(self):
        return self.primary.schedules

    def _each(self, name: str, *args) -> None:
        for model in self.branches:
            getattr(model, name)(*args)
        self._since.append((name, args))

    def create(self, *args) -> None:
        self._each("create", *args)

    def update(self, *args) -> None:
        self._each("update", *args)

    def delete(self, *args) -> None:
        self._each("delete", *args)

    def release(self, *args) -> None:
        self._each("release", *args)

    def plant(self, *args) -> None:
        self._each("plant", *args)

    def advance_epoch(self) -> None:
        self._each("advance_epoch")

    def advance_scope_generation(self) -> None:
        self._each("advance_scope_generation")

    def work(self, *args) -> None:
        self._each("work", *args)

    def lease_left(self, *args) -> None:
        self._each("lease_left", *args)

    def pass_(self, now: datetime, maximum: int = 64, first: list[str] = (), bridges: bool = True) -> None:
        self._before = ([copy.deepcopy(m) for m in self.branches], "pass", now, maximum, tuple(first))
        self._each("pass_", now, maximum, frozenset(), first, bridges)
        self._since = []

    def claimed(self, now: datetime, maximum: int = 64) -> list[str]:
        return self.primary.claimed(now, maximum)

    def due_count(self, now: datetime) -> int:
        return sum(1 for s in self.primary.schedules.values() if self.primary.due(s, now))

    def last_pass_claims(self) -> list[str]:
        """The schedules the model had the last pass claim."""
        befores, _, now, maximum, _ = self._before
        return befores[0].claimed(now, maximum)

    def redo_last_pass(self, claims: list[str]) -> None:
        """The last pass again from the models before it, with the schedules the store shows it claimed."""
        befores, _, now, _, _ = self._before
        self.branches = [copy.deepcopy(before) for before in befores]
        self._each("pass_", now, len(claims), frozenset(), claims)
        self._since = []

    def drain(self, now: datetime) -> None:
        self._before = ([copy.deepcopy(m) for m in self.branches], "drain", now, 64, ())
        self._each("drain", now)
        self._since = []

    def ran_until(self, end: datetime) -> None:
        """The last pass or drain answered at server time `end`. Each of its decisions cut off at its own
        transaction's time (note 1), so an instant that fell due while it ran is decided by a decision that came
        after it, or by a later claim of a schedule it made due again: keep a branch for the whole pass at its end,
        and one for the pass at its start followed by what it claims again at its end (protocol note 38e). A step
        run beside the pass's held barrier since (`_since`) is taken by both, where the case put it: after the
        pass's decisions, before what it claims again."""
        if self._before is None:
            return
        befores, kind, now, maximum, first = self._before
        if end <= now or not any(s.lifecycle == "active" and s.active.instants_between(now, end)
                                 for model in befores for s in model.schedules.values()):
            return
        seen = {_key(m) for m in self.branches}
        for before in befores:
            late, again = copy.deepcopy(before), copy.deepcopy(before)
            if kind == "drain":
                late.drain(end)
                again.drain(now)
                self._replay_since(again)
                again.drain(end)
            else:
                late.pass_(end, maximum, frozenset(), first)
                claims = list(first) + [name for name in again.claimed(now, maximum) if name not in first]
                rest = maximum - min(len(claims), maximum)
                again.pass_(now, maximum, frozenset(), first)
                self._replay_since(again)
                if rest > 0:
                    again.pass_(end, rest)
            self._replay_since(late)
            for branch in (late, again):
                if _key(branch) not in seen:
                    seen.add(_key(branch))
                    self.branches.append(branch)
                    self.left.append(frozenset())

    def _replay_since(self, model: Model) -> None:
        for name, args in self._since:
            getattr(model, name)(*args)

    def step_started(self) -> None:
        """A new step: a fault from here on did not interrupt an earlier step's pass."""
        self._before, self._since = None, []

    def fork(self, decided: set[str] = frozenset()) -> None:
        """A fault fired inside the last pass (or drain): add a branch for each set of the schedules it claimed
        that it may have left undecided (none of those `decided`, whose decision was seen to commit)."""
        if self._before is None:
            return
        befores, kind, now, maximum, _ = self._before
        self._before = None
        seen = {_key(m) for m in self.branches}
        for before in befores:
            for claims in (claim_choices(before, now, maximum, decided) if kind == "pass" else [None]):
                if claims is None:
                    skips = left_undecided([s.name for s in before.schedules.values()
                                            if before.due(s, now) and s.name not in decided])
                else:
                    skips = [frozenset()] + left_undecided([name for name in claims if name not in decided])
                for skip in skips:
                    branch = copy.deepcopy(before)
                    if claims is None:
                        branch.drain(now, skip=skip)
                    else:
                        branch.pass_(now, maximum, skip=skip, first=claims)
                    if _key(branch) not in seen:
                        seen.add(_key(branch))
                        self.branches.append(branch)
                        self.left.append(skip)

    def matching(self, database_picture: dict) -> Model:
        """The branch whose picture the database's final state shows (the first branch when none does), compared as
        model-agreement compares: a schedule absent from one picture is one with no entry (a refused create)."""
        for model in self.branches:
            ours = picture(model)
            if all(comparable(ours.get(name)) == comparable(database_picture.get(name))
                   for name in set(ours) | set(database_picture)):
                return model
        return self.primary


def claim_choices(before: Model, now: datetime, maximum: int, decided: set[str]) -> list[list[str]]:
    """The schedules an interrupted pass bounded to `maximum` may have claimed. Where more are due than the bound:
    any `maximum` of them that hold every schedule seen `decided` (the claim function ties schedules due at one
    instant and the spec orders nothing, docs/protocol-notes.md 31p), the model's order first when it is one of them;
    the model's order alone where there are more choices than MAX_CLAIM_CHOICES."""
    predicted = before.claimed(now, maximum)
    due = [s.name for s in before.schedules.values() if before.due(s, now)]
    if len(due) <= maximum:
        return [predicted]
    choices = [list(c) for c in combinations(due, maximum) if set(decided) & set(due) <= set(c)]
    if not choices or len(choices) > MAX_CLAIM_CHOICES:
        return [predicted]
    ordered = [predicted] if any(set(c) == set(predicted) for c in choices) else []
    return ordered + [c for c in choices if set(c) != set(predicted)]


def left_undecided(claimed: list[str]) -> list[frozenset]:
    """The sets of claimed schedules an interrupted pass may have left: any non-empty subset (two processors
    racing, or a retry after a disconnect, decide out of order), or its tails when it claimed many."""
    if len(claimed) > MAX_SUBSETS_OF:
        return [frozenset(claimed[i:]) for i in range(len(claimed))]
    return [frozenset(c) for n in range(1, len(claimed) + 1) for c in combinations(claimed, n)]


def _key(model: Model) -> str:
    return repr((model.schedules, model.epoch, model.scope_generation))
