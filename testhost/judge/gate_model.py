"""An independent model of Gate A, written from the spec and docs/protocol-notes.md alone (no import from
reference/): given a timeline of client operations, passes and Work outcomes with their server times, it
says which occurrences must exist, with which kind, range and state, where each cursor stands, and which
schedules are suspended. Plain and brute force: instants are enumerated one by one."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from .identity import instant_text

TERMINAL = {"succeeded", "failed", "canceled"}
MAX_INSTANTS = 100_000  # a brute-force enumeration bound; an anomaly is found long before


@dataclass
class Generation:
    number: int
    kind: str  # at, after, every
    accepted_at: datetime
    at: datetime | None = None
    after: timedelta | None = None
    every: timedelta | None = None
    anchor: datetime | None = None
    misfire: str = "run-once"
    window: timedelta = timedelta(hours=1)

    def instants_between(self, start: datetime, end: datetime) -> list[datetime]:
        """Every nominal instant t with start < t <= end, by walking the grid one step at a time."""
        if self.kind == "at":
            return [self.at] if start < self.at <= end else []
        if self.kind == "after":
            t = self.accepted_at + self.after
            return [t] if start < t <= end else []
        t = self.anchor
        while t > start:  # walk back to at or before start
            t -= self.every
        found = []
        while t <= end and len(found) < MAX_INSTANTS:
            if t > start:
                found.append(t)
            t += self.every
        return found

    def last_at_or_before(self, t: datetime) -> datetime | None:
        """The last nominal instant at or before t (None: there is none), walking the grid one step at a time."""
        if self.kind != "every":
            single = self.at if self.kind == "at" else self.accepted_at + self.after
            return single if single <= t else None
        step = self.anchor
        while step > t:
            step -= self.every
        while step + self.every <= t:
            step += self.every
        return step

    @property
    def reference(self) -> datetime:
        """What its instants are measured from: the anchor of an Every, the acceptance of an After."""
        return {"every": self.anchor, "at": self.at, "after": self.accepted_at}[self.kind]


def generation_of(row: dict) -> Generation:
    """A schedule_generations row as the model's time rule (no implementation code)."""
    return Generation(row["generation"], row["schedule_kind"], row["accepted_at_utc"], at=row["at_utc"],
                      after=timedelta(microseconds=row["after_us"]) if row["after_us"] is not None else None,
                      every=timedelta(microseconds=row["every_us"]) if row["every_us"] is not None else None,
                      anchor=row["anchor_utc"])


@dataclass
class Occurrence:
    generation: int
    kind: str  # nominal, recovery, coalesced
    first: datetime
    last: datetime
    state: str  # pending, materialized, superseded
    work: str | None = None  # the Work state once materialized


@dataclass
class Schedule:
    name: str
    generations: list[Generation]
    cursor: datetime
    epoch: int
    scope_generation: int
    lifecycle: str = "active"
    suspension: str | None = None
    occurrences: list[Occurrence] = field(default_factory=list)
    # The schedule_history rows the processor must write: ("suspended", reason), ("recovery-skipped", first, last).
    events: list[tuple] = field(default_factory=list)
    # A lease a pass claimed and left to expire (a refused bridge, protocol-notes 33b): the dispatch row is claimable
    # again only at its expiry, and the claim function orders by that time (protocol-notes 17), not the due time.
    claimable_at: datetime | None = None

    def suspend(self, reason: str) -> None:
        self.lifecycle, self.suspension = "suspended", reason
        self.events.append(("suspended", reason))

    @property
    def active(self) -> Generation:
        return self.generations[-1]

    def started(self) -> bool:
        """A materialized target (of any generation) that is not terminal yet."""
        return any(o.state == "materialized" and o.work not in TERMINAL for o in self.occurrences)

    def waiting(self) -> list[Occurrence]:
        return [o for o in self.occurrences if o.state == "pending" and o.generation == self.active.number]

    def slot_held(self) -> bool:
        """New instants coalesce while a target runs or an occurrence waits for its bridge."""
        return self.started() or bool(self.waiting())

    def pending_coalesced(self) -> Occurrence | None:
        return next((o for o in self.occurrences if o.kind == "coalesced" and o.state == "pending"
                     and o.generation == self.active.number), None)


class Model:
    """Gate A as a state machine over a timeline. Each method takes the server time of the event."""

    def __init__(self) -> None:
        self.schedules: dict[str, Schedule] = {}
        self.epoch = 1
        self.scope_generation = 1
        self.planted: set[tuple] = set()  # occurrence identities whose idempotency key another caller holds

    def __deepcopy__(self, memo: dict) -> "Model":
        """A copy that shares the generations (never changed once a schedule holds them): the harness copies a
        model before every pass in case a fault branches it, and a generic deepcopy was a sixth of its CPU."""
        clone = Model.__new__(Model)
        clone.epoch, clone.scope_generation, clone.planted = self.epoch, self.scope_generation, set(self.planted)
        clone.schedules = {
            name: Schedule(s.name, list(s.generations), s.cursor, s.epoch, s.scope_generation, s.lifecycle,
                           s.suspension, [Occurrence(o.generation, o.kind, o.first, o.last, o.state, o.work)
                                          for o in s.occurrences], list(s.events), s.claimable_at)
            for name, s in self.schedules.items()}
        return clone

    # -- client operations ------------------------------------------------------------------------------

    def create(self, name: str, generation: Generation) -> None:
        self.schedules[name] = Schedule(name, [generation], generation.accepted_at, self.epoch, self.scope_generation)

    def update(self, name: str, generation: Generation) -> None:
        s = self.schedules[name]
        if s.lifecycle == "deleted":
            return  # refused: deletion is terminal
        generation.number = s.active.number + 1
        for o in s.occurrences:
            if o.state == "pending":
                o.state = "superseded"
        s.generations.append(generation)
        s.cursor = max(s.cursor, generation.accepted_at)
        s.lifecycle, s.suspension = "active", None
        s.epoch, s.scope_generation = self.epoch, self.scope_generation

    def delete(self, name: str) -> None:
        s = self.schedules[name]
        if s.lifecycle == "deleted":
            return
        for o in s.occurrences:
            if o.state == "pending":
                o.state = "superseded"
        s.lifecycle, s.suspension = "deleted", None

    def release(self, name: str) -> None:
        s = self.schedules[name]
        if s.lifecycle == "suspended" and s.suspension == "runtime-epoch":
            s.lifecycle, s.suspension = "active", None
            s.epoch, s.scope_generation = self.epoch, self.scope_generation

    def plant(self, name: str, generation: int, kind: str, first: datetime) -> None:
        """A plain Work caller takes the idempotency key of that occurrence for a Work of its own."""
        self.planted.add((name, generation, kind, first))

    def advance_epoch(self) -> None:
        self.epoch += 1

    def advance_scope_generation(self) -> None:
        self.scope_generation += 1

    def work(self, name: str, nth: int, state: str, now: datetime | None = None) -> None:
        """A Work transition at `now`. A terminal one with a coalesced occurrence waiting requeues the dispatch row
        claimable at the transition's time, so a pass on a clock set back before it claims nothing (docs/protocol-
        notes.md 31q)."""
        s = self.schedules[name]
        started = [o for o in s.occurrences if o.state == "materialized"]
        index = nth - 1 if nth > 0 else nth
        if not -len(started) <= index < len(started):
            return  # no such Work in this timeline (a branch where a fault left its pass undecided): nothing moves
        target = started[index]
        if target.work not in TERMINAL:
            target.work = state
            if state in TERMINAL and now is not None and s.pending_coalesced() is not None:
                s.claimable_at = now

    # -- processing -----------------------------------------------------------------------------------

    def due(self, s: Schedule, now: datetime) -> bool:
        if s.lifecycle != "active" or (s.claimable_at is not None and now < s.claimable_at):
            return False
        if not s.started() and s.waiting():
            return True
        return bool(s.active.instants_between(s.cursor, now)[:1])

    def due_at(self, s: Schedule, now: datetime) -> datetime:
        """When a due schedule became due: at once for a waiting bridge, else its first instant after the cursor."""
        if not s.started() and s.waiting():
            return datetime.min.replace(tzinfo=now.tzinfo)
        first = s.active.instants_between(s.cursor, now)[0]
        return max(first, s.claimable_at) if s.claimable_at is not None else first

    def lease_left(self, name: str, claimable_at: datetime) -> None:
        """A pass claimed this schedule and left its lease to expire at `claimable_at`."""
        self.schedules[name].claimable_at = claimable_at

    def claimed(self, now: datetime, maximum: int = 64) -> list[str]:
        """The schedules a pass at `now` claims: up to `maximum` due ones, the longest due first (as claims go)."""
        due = sorted((s for s in self.schedules.values() if self.due(s, now)), key=lambda s: self.due_at(s, now))
        return [s.name for s in due[:maximum]]

    def pass_(self, now: datetime, maximum: int = 64, skip: frozenset = frozenset(),
              first: list[str] = (), bridges: bool = True) -> None:
        """The claimed schedules are processed once each; those in `skip` were claimed by a pass a fault
        interrupted before it decided them, and wait for a later pass. `first` were claimed already, before a change
        beside the pass committed: they are its first leases whatever the change did to them (a schedule no longer
        active is then decided as nothing), and the rest of the pass claims among what is due now. Without
        `bridges` each is decided only: its bridge was refused (an occurrence it opened waits for a later pass)."""
        names = list(first)
        names += [name for name in self.claimed(now, maximum) if name not in names][:max(0, maximum - len(names))]
        for name in names:
            s = self.schedules.get(name)
            if name not in skip and s is not None and s.lifecycle == "active":
                self._process(s, now, bridges)

    def drain(self, now: datetime, skip: frozenset = frozenset()) -> None:
        for _ in range(10):
            if not any(self.due(s, now) for s in self.schedules.values() if s.name not in skip):
                return
            self.pass_(now, skip=skip)

    def _process(self, s: Schedule, cutoff: datetime, bridges: bool = True) -> None:
        s.claimable_at = None  # this pass's lease is released with the schedule's next due time
        if s.epoch != self.epoch:
            s.suspend("runtime-epoch")
            return
        if s.scope_generation != self.scope_generation:
            s.suspend("scope-generation")
            return
        instants = s.active.instants_between(s.cursor, cutoff) if cutoff > s.cursor else []
        if instants:
            if cutoff - instants[0] > s.active.window:
                s.suspend("clock-anomaly")
                return
            self._dispose(s, instants)
            s.cursor = cutoff
        if bridges:
            self._bridge(s)

    def _dispose(self, s: Schedule, instants: list[datetime]) -> None:
        kind = "nominal" if len(instants) == 1 else "recovery"
        if kind == "recovery" and s.active.misfire == "skip":
            s.events.append(("recovery-skipped", instants[0], instants[-1]))
            return
        if s.slot_held():
            waiting = s.pending_coalesced()
            if waiting is None:
                s.occurrences.append(Occurrence(s.active.number, "coalesced", instants[0], instants[-1], "pending"))
            else:
                waiting.last = max(waiting.last, instants[-1])
            return
        s.occurrences.append(Occurrence(s.active.number, kind, instants[0], instants[-1], "pending"))

    def _bridge(self, s: Schedule) -> None:
        if s.started():
            return
        waiting = sorted(s.waiting(), key=lambda o: (o.kind == "coalesced", o.first))
        if not waiting:
            return
        if (s.name, waiting[0].generation, waiting[0].kind, waiting[0].first) in self.planted:
            s.suspend("idempotency-conflict")  # a mismatch links nothing
            return
        waiting[0].state, waiting[0].work = "materialized", "pending"


def cursor_instant(generation: Generation, cursor: datetime) -> int | None:
    """Where a cursor stands, run-independently: the last nominal instant of the active generation at or
    before it, in microseconds from the generation's reference (the exact cutoff differs from run to run)."""
    last = generation.last_at_or_before(cursor)
    return None if last is None else (last - generation.reference) // timedelta(microseconds=1)


def picture(model: Model) -> dict:
    """The model's final state in the shape testhost.judge.pictures.normalize gives the database's."""
    out = {}
    for name, s in sorted(model.schedules.items()):
        occs = []
        for o in s.occurrences:
            ref = s.generations[o.generation - 1].reference
            occs.append((o.generation, o.kind, (o.first - ref) // timedelta(microseconds=1),
                         (o.last - ref) // timedelta(microseconds=1), o.state,
                         o.work if o.state == "materialized" else None))
        out[name] = {"lifecycle": s.lifecycle, "suspension": s.suspension, "generation": s.active.number,
                     "cursor_instant": cursor_instant(s.active, s.cursor), "occurrences": sorted(occs),
                     "references": {g.number: instant_text(g.reference) for g in s.generations}}
    return out
