"""The passive processor: one bounded pass over at most `maximum_schedules` due schedules.

Per schedule: (1) the dispatcher claims a payload-free dispatch row under a lease and commits;
(2) a scoped decision transaction checks fences, evaluates (cursor, cutoff] with the cutoff from
PostgreSQL, records the occurrence disposition and moves the cursor together; (3) when an occurrence
may take the free slot, a scoped bridge transaction accepts its Work through the Work transaction
writer and writes the link compare-or-return. The last transaction of the pass releases the lease.

Each scoped transaction reads everything with BEGIN (one round trip), decides in Python, and sends its
writes together with COMMIT, right after its before-commit barrier (docs/protocol-notes.md, 24e).
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta

from psycopg.types.json import Jsonb

import barriers

from . import due
from .db import Session
from .errors import (BridgeRoleError, CommitOutcomeUnknown, DurableError, IdempotencyConflict, LeaseLost,
                     PassInterrupted, RetriableError)
from .evaluator import Anomaly, Due, NoOp, evaluate, next_after
from .identity import OccurrenceIdentity, canonical_instant, work_identity
from .migrations import require_schedule_protocol
from .model import Generation
from .roles import RUNTIME
from .sql import query
from .work import TERMINAL, WorkRequest, WorkTransactionWriter

RETRIES = 3


@dataclass(frozen=True)
class ProcessRequest:
    maximum_schedules: int = 1
    lease_duration: timedelta = timedelta(seconds=30)
    lease_owner: str | None = None


@dataclass
class ProcessCounts:
    """What one pass did. All zero for an empty pass."""

    claimed: int = 0
    noops: int = 0
    occurrences: int = 0
    coalesced: int = 0
    recovery_skipped: int = 0
    materialized: int = 0
    suspended: int = 0
    fenced: int = 0
    aborted: int = 0
    errors: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)

    def add(self, committed: "ProcessCounts") -> None:
        """Take in what one transaction counted, once its COMMIT has succeeded."""
        for name, value in asdict(committed).items():
            if isinstance(value, int):
                setattr(self, name, getattr(self, name) + value)


class CancellationToken:
    """Set it to stop a pass before its next lease; committed facts stay committed."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()


@dataclass(frozen=True)
class State:
    """What a scoped transaction read with BEGIN: the locked dispatch row and definition (one row, so the same
    dict), the active generation (None unless the definition is active), the fences with the cutoff, the
    pending occurrences (locked), and whether a nonterminal Work holds the slot."""

    dispatch: dict
    definition: dict
    generation: Generation | None
    fences: dict | None
    waiting: list[dict]
    slot_busy: bool


@dataclass(frozen=True)
class Claim:
    scope_routing_id: int
    schedule_id: uuid.UUID
    dispatch_revision: int


class ScheduleProcessor:
    """Provider-specific and passive: the caller's own trigger calls process_due."""

    def __init__(self, runtime_dsn: str, dispatcher_dsn: str, *, runtime_role: str = RUNTIME,
                 runtime_version: int = 4, deadline: float = 30.0):
        self.runtime_dsn = runtime_dsn
        self.dispatcher_dsn = dispatcher_dsn
        self.runtime_role = runtime_role
        self.deadline = deadline
        self.writer = WorkTransactionWriter()
        self._runtime: Session | None = None
        self._dispatcher: Session | None = None
        require_schedule_protocol(self.runtime, runtime_version)

    # Sessions are reopened after a lost connection; a retry happens only after the rollback.
    # A new runtime session proves its current_user before anything uses it, so a pass under another login refuses
    # before it claims (a clean `fail`, no lease stranded); every scoped transaction proves it again
    # (docs/protocol-notes.md, 33c).
    @property
    def runtime(self) -> Session:
        if self._runtime is None or self._runtime.broken:
            session = Session(self.runtime_dsn, deadline=self.deadline, application_name="appsurface-durable-runtime")
            try:
                user = session.one("select current_user as user")["user"]
            except BaseException:
                session.close()
                raise
            if user != self.runtime_role:
                session.close()
                raise BridgeRoleError(f"the runtime connection's current_user is {user}, not the configured runtime "
                                      f"role {self.runtime_role}; refusing to process")
            self._runtime = session
        return self._runtime

    @property
    def dispatcher(self) -> Session:
        if self._dispatcher is None or self._dispatcher.broken:
            self._dispatcher = Session(self.dispatcher_dsn, deadline=self.deadline,
                                       application_name="appsurface-durable-dispatcher")
        return self._dispatcher

    def close(self) -> None:
        for session in (self._runtime, self._dispatcher):
            if session is not None:
                session.close()

    def process_due(self, request: ProcessRequest = ProcessRequest(), cancel: CancellationToken | None = None) -> ProcessCounts:
        if request.maximum_schedules < 1:
            raise ValueError(f"maximum_schedules must be at least 1, not {request.maximum_schedules}")
        counts = ProcessCounts()
        owner = request.lease_owner or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        try:
            self._retrying(lambda: self.runtime, retry_unknown=False)
        except RetriableError as exc:
            counts.aborted += 1
            counts.errors.append(f"runtime session: {exc}")
            return counts
        for _ in range(request.maximum_schedules):
            if cancel is not None and cancel.cancelled:
                break
            try:
                claim = self._retrying(lambda: self._claim(owner, request.lease_duration), retry_unknown=False)
            except RetriableError as exc:
                counts.aborted += 1
                counts.errors.append(f"claim: {exc}")
                break
            except DurableError as exc:
                if counts.claimed:  # an earlier claim of this pass committed: the pass is partly applied
                    raise PassInterrupted(exc) from exc
                raise
            if claim is None:
                break
            counts.claimed += 1
            try:
                self._retrying(lambda: self._process(claim, counts), retry_unknown=True)
            except LeaseLost:
                counts.fenced += 1
            except RetriableError as exc:
                counts.aborted += 1
                counts.errors.append(f"{claim.schedule_id}: {exc}")
            except DurableError as exc:
                # Access denied, a bridge role refused, a definite SQLSTATE: no retry helps, and the claim committed.
                raise PassInterrupted(exc) from exc
        return counts

    def _retrying(self, attempt, *, retry_unknown: bool):
        """A bounded retry after rollback: a lost connection is often found only on first use after a fault.
        The fence makes a repeated scoped transaction safe; a claim whose commit outcome is unknown is not
        repeated (its lease simply expires)."""
        for remaining in range(RETRIES - 1, -1, -1):
            try:
                return attempt()
            except CommitOutcomeUnknown:
                if not retry_unknown or remaining == 0:
                    raise
            except RetriableError:
                if remaining == 0:
                    raise

    # -- 1. dispatcher claim ------------------------------------------------------------------------

    def _claim(self, owner: str, duration: timedelta) -> Claim | None:
        claim_read = (query("schedule", "claim"), {"lease_owner": owner, "lease_duration": duration})
        with self.dispatcher.transaction(reads=(claim_read,)) as s:
            row = s.read_rows[0][0] if s.read_rows[0] else None
            if row is not None:
                barriers.hit("schedule-claim-before-commit", schedule_id=str(row["schedule_id"]),
                             dispatch_revision=row["dispatch_revision"])
        if row is None:
            return None
        claim = Claim(row["scope_routing_id"], row["schedule_id"], row["dispatch_revision"])
        barriers.hit("schedule-claim-after-commit", schedule_id=str(claim.schedule_id),
                     dispatch_revision=claim.dispatch_revision)
        return claim

    # -- 2 and 3. scoped transactions -----------------------------------------------------------------

    @staticmethod
    def _state_reads(claim: Claim) -> tuple[tuple[str, dict | None], ...]:
        """What a scoped transaction reads, in lock order (dispatch row, definition, scope, pending occurrences),
        sent with BEGIN and the scope in one round trip."""
        key = {"schedule_id": claim.schedule_id}
        return ((query("schedule", "lock_schedule"), key), (query("schedule", "fences_and_cutoff"), {}),
                (query("schedule", "pending_of_active_generation"), key), (query("schedule", "slot_busy"), key))

    def _process(self, claim: Claim, counts: ProcessCounts) -> None:
        """The decision, then the bridge if one may. Each transaction counts into its own ProcessCounts, added
        to the pass's only after its COMMIT succeeded: a transaction rolled back (and retried) or whose
        outcome is unknown reports nothing (docs/protocol-notes.md, 24k)."""
        context = {"schedule_id": str(claim.schedule_id), "dispatch_revision": claim.dispatch_revision}
        decided = ProcessCounts()
        with self.runtime.scoped(None, self.runtime_role, routing_id=claim.scope_routing_id,
                                 reads=self._state_reads(claim)) as s:
            scope_id = s.current_scope
            if not scope_id:
                raise LeaseLost(f"routing id {claim.scope_routing_id} names no scope")
            bridge = self._decide(s, claim, decided)
            barriers.hit("schedule-decision-before-commit", **context)
        counts.add(decided)
        barriers.hit("schedule-decision-after-commit", **context)
        if not bridge:
            return
        bridged = ProcessCounts()
        with self.runtime.scoped(scope_id, self.runtime_role, reads=self._state_reads(claim)) as s:
            self._bridge(s, claim, scope_id, bridged, context)
            barriers.hit("schedule-bridge-before-commit", **context)
        counts.add(bridged)
        barriers.hit("schedule-link-after-commit", **context)

    def _load(self, s: Session, claim: Claim) -> State:
        """The rows read with BEGIN. The lease must still be ours (same dispatch revision) or nothing is written."""
        schedules, fences, waiting, busy = s.read_rows
        # One row holds the dispatch row, the definition and the active generation (each column named once).
        dispatch = definition = schedules[0] if schedules else None
        if dispatch is None or dispatch["dispatch_revision"] != claim.dispatch_revision or dispatch["lease_state"] != "leased":
            raise LeaseLost(f"schedule {claim.schedule_id}: dispatch revision is no longer {claim.dispatch_revision}")
        generation = Generation.from_row(definition) if definition["lifecycle_state"] == "active" else None
        return State(dispatch, definition, generation, fences[0] if fences else None, waiting, busy[0]["busy"])

    def _check_fences(self, s: Session, state: State, counts: ProcessCounts) -> bool:
        """Runtime epoch, then scope generation. A mismatch suspends before the cursor or any Work moves."""
        definition, fences = state.definition, state.fences
        if definition["runtime_epoch"] != fences["runtime_epoch"]:
            reason, evidence = "runtime-epoch", {"persisted": definition["runtime_epoch"], "store": fences["runtime_epoch"]}
        elif definition["scope_generation"] != fences["scope_generation"]:
            reason, evidence = "scope-generation", {"persisted": definition["scope_generation"],
                                                    "scope": fences["scope_generation"]}
        else:
            return True
        self._suspend(s, definition, reason, evidence, counts)
        return False

    def _suspend(self, s: Session, definition: dict, reason: str, evidence: dict, counts: ProcessCounts) -> None:
        s.defer(query("schedule", "advance_definition"), {
            "schedule_id": definition["schedule_id"], "lifecycle_state": "suspended", "suspension_reason": reason,
            "active_generation": definition["active_generation"], "runtime_epoch": definition["runtime_epoch"],
            "scope_generation": definition["scope_generation"], "cursor_utc": definition["cursor_utc"]})
        self._history(s, definition, "suspended", {"reason": reason, **evidence})
        counts.suspended += 1

    def _decide(self, s: Session, claim: Claim, counts: ProcessCounts) -> bool:
        """The decision transaction. Returns whether an occurrence may now bridge."""
        state = self._load(s, claim)
        dispatch, definition, generation = state.dispatch, state.definition, state.generation
        if generation is None or not self._check_fences(s, state, counts):
            self._release(s, dispatch, None)
            return False
        schedule_id = claim.schedule_id
        cutoff = state.fences["cutoff_utc"]
        cursor = definition["cursor_utc"]
        evaluation = evaluate(generation.timing, cursor, cutoff, generation.safety_window)
        if isinstance(evaluation, Anomaly):
            self._suspend(s, definition, "clock-anomaly", {
                "cursor_utc": canonical_instant(cursor), "cutoff_utc": canonical_instant(cutoff),
                "expected_due_utc": canonical_instant(evaluation.expected_due_utc),
                "lateness_s": evaluation.lateness.total_seconds(),
                "safety_window_s": evaluation.safety_window.total_seconds()}, counts)
            self._release(s, dispatch, None)
            return False
        opened = False
        if isinstance(evaluation, NoOp):
            counts.noops += 1
        else:
            opened = self._dispose(s, definition, generation, evaluation, state, counts)
            s.defer(query("schedule", "move_cursor"), {"schedule_id": schedule_id, "cursor_utc": cutoff})
            cursor = cutoff
        # The disposition adds pending occurrences only; it changes no Work, so the slot is as it was read.
        may_bridge = not state.slot_busy and (bool(state.waiting) or opened)
        if not may_bridge:
            self._release(s, dispatch, next_after(generation.timing, cursor))
        return may_bridge

    def _dispose(self, s: Session, definition: dict, generation: Generation, ev: Due, state: State,
                 counts: ProcessCounts) -> bool:
        """Record what the due instants become: nominal, recovery, coalesced into the waiting slot, or skipped.
        Returns whether it opened a new (non-coalesced) pending occurrence."""
        schedule_id, gen = definition["schedule_id"], generation.generation
        if ev.kind == "recovery" and generation.misfire_policy == "skip":
            self._history(s, definition, "recovery-skipped", {
                "first_nominal_utc": canonical_instant(ev.first_utc), "last_nominal_utc": canonical_instant(ev.last_utc),
                "instants": ev.count})
            counts.recovery_skipped += 1
            return False
        if ev.kind == "recovery":
            self._history(s, definition, "recovery-declared", {
                "first_nominal_utc": canonical_instant(ev.first_utc), "last_nominal_utc": canonical_instant(ev.last_utc),
                "instants": ev.count, "misfire_policy": generation.misfire_policy})
        waiting = state.waiting
        if state.slot_busy or waiting:
            coalesced = next((o for o in waiting if o["occurrence_kind"] == "coalesced"), None)
            if coalesced is None:
                s.defer(query("schedule", "insert_occurrence"), {
                    "schedule_id": schedule_id, "generation": gen, "occurrence_kind": "coalesced",
                    "first_nominal_utc": ev.first_utc, "last_nominal_utc": ev.last_utc})
            elif ev.last_utc > coalesced["last_nominal_utc"]:
                s.defer(query("schedule", "extend_coalesced"), {
                    "schedule_id": schedule_id, "generation": gen, "first_nominal_utc": coalesced["first_nominal_utc"],
                    "last_nominal_utc": ev.last_utc})
            counts.coalesced += 1
            return False
        s.defer(query("schedule", "insert_occurrence"), {
            "schedule_id": schedule_id, "generation": gen, "occurrence_kind": ev.kind,
            "first_nominal_utc": ev.first_utc, "last_nominal_utc": ev.last_utc})
        counts.occurrences += 1
        return True

    def _bridge(self, s: Session, claim: Claim, scope_id: str, counts: ProcessCounts, context: dict) -> None:
        """The bridge transaction: Work accepted through the writer, link compare-or-return, lease released."""
        state = self._load(s, claim)
        dispatch, definition, generation = state.dispatch, state.definition, state.generation
        if generation is None or not self._check_fences(s, state, counts):
            self._release(s, dispatch, None)
            return
        schedule_id, gen = claim.schedule_id, generation.generation
        cursor = definition["cursor_utc"]
        occurrence = due.candidate(state.slot_busy, state.waiting)
        if occurrence is None:
            self._release(s, dispatch, next_after(generation.timing, cursor))
            return
        identity = OccurrenceIdentity(scope_id, schedule_id, gen, occurrence["occurrence_kind"],
                                      occurrence["first_nominal_utc"])
        work = work_identity(identity, generation.target.command)
        payload = {"target": generation.target.payload, "occurrence": {
            "schedule_id": str(schedule_id), "generation": gen, "kind": occurrence["occurrence_kind"],
            "first_nominal_utc": canonical_instant(occurrence["first_nominal_utc"]),
            "last_nominal_utc": canonical_instant(occurrence["last_nominal_utc"])}}
        accepted = self.writer.enqueue(s, WorkRequest(work.work_id, work.idempotency_key, work.command,
                                                      work.activity, payload), compare=False)
        barriers.hit("schedule-work-after-acceptance", **context, work_id=str(accepted.work_id))
        under_key = {"work_id": str(accepted.work_id), "command": accepted.command, "activity": accepted.activity}
        derived = {"work_id": str(work.work_id), "command": work.command, "activity": work.activity}
        if under_key != derived:
            # Another caller's Work holds this occurrence's idempotency key: linking either would lie.
            # Nothing was written under the key, so suspend with the conflict as durable evidence.
            self._suspend(s, definition, "idempotency-conflict", {
                "occurrence": identity.canonical, "idempotency_key": work.idempotency_key,
                "stored": under_key, "derived": derived}, counts)
            self._release(s, dispatch, None)
            return
        # What is due once this occurrence holds the slot: the slot was free (all other Work terminal, and
        # terminal is final) and the pending rows are locked, so the Work's own state and the occurrences
        # still waiting decide it. Due now (the transaction's timestamp) when that Work is already terminal
        # and another occurrence waits, else at the next instant on the grid.
        still_waiting = [o for o in state.waiting if o is not occurrence]
        due_at = state.fences["cutoff_utc"]
        if due.candidate(accepted.state not in TERMINAL, still_waiting) is None:
            due_at = next_after(generation.timing, cursor)
        self._release(s, dispatch, due_at)
        self._link(s, identity, work)  # sends the release with it; a mismatch rolls both back
        counts.materialized += 1

    def _link(self, s: Session, identity: OccurrenceIdentity, work) -> None:
        """Compare-or-return: write the exact accepted identity where no link exists (one round trip, with any
        deferred writes); where one exists, demand that the stored tuple matches exactly."""
        key = {"schedule_id": identity.schedule_id, "generation": identity.generation,
               "occurrence_kind": identity.kind, "first_nominal_utc": identity.first_nominal_utc}
        link = {"work_id": work.work_id, "work_idempotency_key": work.idempotency_key,
                "work_command": work.command, "work_activity": work.activity}
        [written] = s.batch((query("schedule", "link_occurrence"), {**key, **link}))
        if written:
            return  # the row now holds exactly `link`
        [stored] = s.batch((query("schedule", "stored_link"), key))
        if not stored or stored[0] != link:
            raise IdempotencyConflict(f"occurrence {identity.canonical} is linked to {stored[0] if stored else None}, "
                                      f"not {link}")

    def _release(self, s: Session, dispatch: dict, due_at: datetime | None) -> None:
        s.defer(query("schedule", "release_lease"), {"dispatch_id": dispatch["dispatch_id"], "due_at_utc": due_at})

    @staticmethod
    def _history(s: Session, definition: dict, event: str, detail: dict) -> None:
        s.defer(query("schedule", "record_history"), {"schedule_id": definition["schedule_id"], "event": event,
                                                      "generation": definition["active_generation"],
                                                      "detail": Jsonb(detail)})
