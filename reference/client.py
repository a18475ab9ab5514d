"""The schedule client (the IDurableScheduleClient preview contract): create, update, delete, get, list,
release-after-recovery. Refusals are problem results and change nothing durable."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from . import problems
from .db import Session
from .due import next_due
from .evaluator import MICROSECOND, count_between, last_at_or_before, next_after
from .migrations import require_schedule_protocol
from .identity import canonical_instant
from .model import Generation, ScheduleSpec, ScheduleView, check
from .roles import RUNTIME
from .sql import query

Result = ScheduleView | problems.Problem


def _generation_params(schedule_id: uuid.UUID, generation: int, spec: ScheduleSpec, accepted_at: datetime,
                       command_id: uuid.UUID) -> dict[str, Any]:
    us = lambda d: d // MICROSECOND if d is not None else None  # noqa: E731
    anchor = spec.anchor if spec.anchor is not None else (accepted_at if spec.kind == "every" else None)
    return {
        "schedule_id": schedule_id, "generation": generation, "schedule_kind": spec.kind, "at_utc": spec.at,
        "after_us": us(spec.after), "every_us": us(spec.every), "anchor_utc": anchor,
        "anchor_explicit": spec.anchor is not None, "misfire_policy": spec.misfire_policy,
        "overlap_policy": spec.overlap_policy, "run_policy": spec.run_policy,
        "safety_window_us": us(spec.safety_window), "target_kind": spec.target.kind,
        "target_command": spec.target.command, "target_payload": Jsonb(spec.target.payload),
        "accepted_at_utc": accepted_at, "command_id": command_id,
    }


class ScheduleClient:
    """Schedule commands in one scope, over a connection as the runtime role."""

    def __init__(self, dsn: str | None, scope_id: str, *, runtime_role: str = RUNTIME, runtime_version: int = 4,
                 deadline: float = 30.0, session: Session | None = None):
        """Connects to `dsn`, or borrows `session`, an open runtime-role session (one process may share one
        between its client, its Work store and its processor: every call is a whole transaction)."""
        self.scope_id = scope_id
        self.runtime_role = runtime_role
        self._owns_session = session is None
        self.session = session or Session(dsn, deadline=deadline, application_name="appsurface-durable-client")
        require_schedule_protocol(self.session, runtime_version)

    def close(self) -> None:
        if self._owns_session:
            self.session.close()

    def __enter__(self) -> "ScheduleClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- reads ---------------------------------------------------------------------------------------

    def _view(self, s: Session, row: dict) -> ScheduleView:
        gen = s.one(query("schedule", "get_generation"),
                    {"schedule_id": row["schedule_id"], "generation": row["active_generation"]})
        return self._view_of(row, gen)

    @staticmethod
    def _view_of(row: dict, gen: dict) -> ScheduleView:
        return ScheduleView(row["schedule_id"], row["lifecycle_state"], row["suspension_reason"], row["revision"],
                            row["active_generation"], row["cursor_utc"], Generation.from_row(gen))

    def get(self, schedule_id: uuid.UUID) -> Result:
        with self.session.scoped(self.scope_id, self.runtime_role) as s:
            row = s.one(query("schedule", "get_definition"), {"schedule_id": schedule_id})
            return self._view(s, row) if row else problems.not_found(schedule_id)

    def list(self, *, include_deleted: bool = False) -> list[ScheduleView]:
        with self.session.scoped(self.scope_id, self.runtime_role) as s:
            return [self._view(s, row) for row in
                    s.all(query("schedule", "list_definitions"), {"include_deleted": include_deleted})]

    # -- commands ------------------------------------------------------------------------------------

    @staticmethod
    def _command_reads(command_id: uuid.UUID) -> tuple[tuple[str, dict], ...]:
        """What a command reads first, with BEGIN: the acceptance time and an earlier use of its command ID."""
        return (query("schedule", "accepted_at"), {}), (query("schedule", "find_command"), {"command_id": command_id})

    def _begin_command(self, s: Session, command_id: uuid.UUID, kind: str,
                       schedule_id: uuid.UUID) -> tuple[datetime, dict | None, problems.Problem | None]:
        """Capture accepted_at_utc; a repeated command ID returns the schedule as it stands (idempotent retry).
        The transaction began with `_command_reads`."""
        (accepted,), found = s.read_rows[:2]
        accepted_at, seen = accepted["accepted_at_utc"], (found[0] if found else None)
        if seen is not None:
            if (seen["command_kind"], seen["schedule_id"]) != (kind, schedule_id):
                return accepted_at, seen, problems.command_conflict(command_id)
            return accepted_at, seen, None
        return accepted_at, None, None

    def _begin_change(self, s: Session, command_id: uuid.UUID, kind: str, schedule_id: uuid.UUID,
                      expected_revision: int) -> tuple[datetime, dict | None, dict | None, Result | None]:
        """The common start of update, delete and release: acceptance time, an idempotent repeat, the locks
        and the refusals. The last item, when not None, is the result to return at once."""
        accepted_at, seen, conflict = self._begin_command(s, command_id, kind, schedule_id)
        if conflict or seen:
            return accepted_at, None, None, conflict or self._current_view(s, schedule_id)
        dispatch, current = self._lock(s, schedule_id)
        return accepted_at, dispatch, current, self._refuse_change(schedule_id, current, expected_revision)

    def _current_view(self, s: Session, schedule_id: uuid.UUID) -> ScheduleView:
        return self._view(s, s.one(query("schedule", "get_definition"), {"schedule_id": schedule_id}))

    @staticmethod
    def _advance(s: Session, current: dict, **changes: Any) -> int:
        """Write the definition row's next revision: the current values with `changes` applied."""
        row = {key: current[key] for key in ("schedule_id", "lifecycle_state", "suspension_reason",
                                             "active_generation", "runtime_epoch", "scope_generation", "cursor_utc")}
        return s.one(query("schedule", "advance_definition"), {**row, **changes})["revision"]

    @staticmethod
    def _record_command(s: Session, command_id: uuid.UUID, schedule_id: uuid.UUID, kind: str, accepted_at: datetime,
                        generation: int | None, revision: int) -> None:
        s.defer(query("schedule", "insert_command"),
                  {"command_id": command_id, "schedule_id": schedule_id, "command_kind": kind,
                   "accepted_at_utc": accepted_at, "generation": generation, "revision": revision})

    def _fences(self, s: Session) -> dict | None:
        return s.one(query("schedule", "fences"))

    def create(self, spec: ScheduleSpec, *, schedule_id: uuid.UUID | None = None,
               command_id: uuid.UUID | None = None) -> Result:
        refused = check(spec)
        if refused:
            return refused
        schedule_id = schedule_id or uuid.uuid4()
        command_id = command_id or uuid.uuid4()
        # Reads travel with BEGIN; the writes and the view read back go in one more round trip.
        reads = (*self._command_reads(command_id), (query("schedule", "fences"), {}),
                 (query("schedule", "get_definition"), {"schedule_id": schedule_id}))
        with self.session.scoped(self.scope_id, self.runtime_role, reads=reads) as s:
            accepted_at, seen, conflict = self._begin_command(s, command_id, "create", schedule_id)
            if conflict:
                return conflict
            if seen:
                return self._current_view(s, schedule_id)
            fences, existing = (rows[0] if rows else None for rows in s.read_rows[2:4])
            if fences is None:
                return problems.scope_not_found(self.scope_id)
            if existing:
                return problems.invalid_state(f"schedule {schedule_id} already exists; use update")
            if spec.kind == "at" and spec.at <= accepted_at:
                return problems.validation({"at": [f"must be after the acceptance time {accepted_at.isoformat()}"]})
            params = _generation_params(schedule_id, 1, spec, accepted_at, command_id)
            s.defer(query("schedule", "insert_definition"),
                    {"schedule_id": schedule_id, "accepted_at_utc": accepted_at, **fences})
            s.defer(query("schedule", "insert_generation"), params)
            self._record_command(s, command_id, schedule_id, "create", accepted_at, 1, 1)
            s.defer(query("schedule", "insert_dispatch"),
                    {"schedule_id": schedule_id, "routing_id": fences["routing_id"]})
            s.defer(query("schedule", "insert_timing_of_schedule"), {
                "schedule_id": schedule_id,
                "due_at_utc": next_after(Generation.from_row({**params, "generation": 1}).timing, accepted_at)})
            self._history(s, schedule_id, "created", 1, {"command_id": str(command_id)})
            row, gen = s.batch((query("schedule", "get_definition"), {"schedule_id": schedule_id}),
                               (query("schedule", "get_generation"), {"schedule_id": schedule_id, "generation": 1}))
            return self._view_of(row[0], gen[0])

    def update(self, schedule_id: uuid.UUID, spec: ScheduleSpec, *, expected_revision: int,
               command_id: uuid.UUID | None = None) -> Result:
        """A new generation; the old ones stay as they were. Also the repair for a suspended schedule."""
        refused = check(spec)
        if refused:
            return refused
        command_id = command_id or uuid.uuid4()
        with self.session.scoped(self.scope_id, self.runtime_role,
                                 reads=self._command_reads(command_id)) as s:
            accepted_at, dispatch, current, early = self._begin_change(s, command_id, "update", schedule_id,
                                                                        expected_revision)
            if early:
                return early
            if spec.kind == "at" and spec.at <= accepted_at:
                return problems.validation({"at": [f"must be after the acceptance time {accepted_at.isoformat()}"]})
            fences = self._fences(s)
            self._record_dropped_instants(s, current, accepted_at, command_id)
            generation = current["active_generation"] + 1
            s.execute(query("schedule", "insert_generation"),
                      _generation_params(schedule_id, generation, spec, accepted_at, command_id))
            superseded = s.all(query("schedule", "supersede_pending"),
                               {"schedule_id": schedule_id, "keep_generation": generation})
            # The new generation starts at its acceptance: instants before it belong to no generation.
            cursor = max(current["cursor_utc"], accepted_at)
            revision = self._advance(s, current, lifecycle_state="active", suspension_reason=None,
                                     active_generation=generation, runtime_epoch=fences["runtime_epoch"],
                                     scope_generation=fences["scope_generation"], cursor_utc=cursor)
            self._record_command(s, command_id, schedule_id, "update", accepted_at, generation, revision)
            view = self._current_view(s, schedule_id)
            self._reschedule(s, dispatch, next_due(s, schedule_id, generation, view.definition.timing, cursor))
            self._history(s, schedule_id, "updated", generation,
                          {"command_id": str(command_id), "superseded": len(superseded),
                           "previous_state": current["lifecycle_state"],
                           "previous_suspension": current["suspension_reason"]})
            return view

    def delete(self, schedule_id: uuid.UUID, *, expected_revision: int,
               command_id: uuid.UUID | None = None) -> Result:
        """Terminal for this identity: pending occurrences are superseded, the dispatch row is retired."""
        command_id = command_id or uuid.uuid4()
        with self.session.scoped(self.scope_id, self.runtime_role,
                                 reads=self._command_reads(command_id)) as s:
            accepted_at, dispatch, current, early = self._begin_change(s, command_id, "delete", schedule_id,
                                                                        expected_revision)
            if early:
                return early
            self._record_dropped_instants(s, current, accepted_at, command_id)
            superseded = s.all(query("schedule", "supersede_pending"), {"schedule_id": schedule_id, "keep_generation": None})
            revision = self._advance(s, current, lifecycle_state="deleted", suspension_reason=None)
            self._record_command(s, command_id, schedule_id, "delete", accepted_at, None, revision)
            # The dispatch row stays (the runtime never deletes one): released for good, never claimable
            # again, and its new revision fences a processor holding the lease.
            s.execute(query("schedule", "release_lease"), {"dispatch_id": dispatch["dispatch_id"], "due_at_utc": None})
            self._history(s, schedule_id, "deleted", current["active_generation"],
                          {"command_id": str(command_id), "superseded": len(superseded)})
            return self._current_view(s, schedule_id)

    def release_after_recovery(self, schedule_id: uuid.UUID, *, expected_revision: int,
                               command_id: uuid.UUID | None = None) -> Result:
        """Release a stale-runtime-epoch suspension only; rebinds the current scope generation, cursor unchanged."""
        command_id = command_id or uuid.uuid4()
        with self.session.scoped(self.scope_id, self.runtime_role,
                                 reads=self._command_reads(command_id)) as s:
            accepted_at, dispatch, current, early = self._begin_change(s, command_id, "release-after-recovery",
                                                                        schedule_id, expected_revision)
            if early:
                return early
            if current["lifecycle_state"] != "suspended":
                return problems.release_refused(schedule_id, "it is not suspended")
            if current["suspension_reason"] != "runtime-epoch":
                return problems.release_refused(
                    schedule_id, f"it is suspended for {current['suspension_reason']}, and release applies only to a "
                    "stale runtime epoch; repair with an update (a new generation) or delete and recreate")
            fences = self._fences(s)
            revision = self._advance(s, current, lifecycle_state="active", suspension_reason=None,
                                     runtime_epoch=fences["runtime_epoch"], scope_generation=fences["scope_generation"])
            self._record_command(s, command_id, schedule_id, "release-after-recovery", accepted_at,
                                 current["active_generation"], revision)
            view = self._current_view(s, schedule_id)
            self._reschedule(s, dispatch, next_due(s, schedule_id, current["active_generation"], view.definition.timing,
                                                  current["cursor_utc"]))
            self._history(s, schedule_id, "released-after-recovery", current["active_generation"],
                          {"command_id": str(command_id), "runtime_epoch": [current["runtime_epoch"], fences["runtime_epoch"]],
                           "scope_generation": [current["scope_generation"], fences["scope_generation"]]})
            return view

    # -- helpers -------------------------------------------------------------------------------------

    @staticmethod
    def _refuse_change(schedule_id: uuid.UUID, current: dict | None, expected_revision: int) -> problems.Problem | None:
        if current is None:
            return problems.not_found(schedule_id)
        if current["lifecycle_state"] == "deleted":
            return problems.deleted(schedule_id)
        if current["revision"] != expected_revision:
            return problems.revision_conflict(schedule_id, expected_revision, current["revision"])
        return None

    @staticmethod
    def _lock(s: Session, schedule_id: uuid.UUID) -> tuple[dict | None, dict | None]:
        """Lock in the processor's order, dispatch row then definition, so the two never deadlock."""
        dispatch = s.one(query("schedule", "lock_dispatch"), {"schedule_id": schedule_id})
        return dispatch, s.one(query("schedule", "lock_definition"), {"schedule_id": schedule_id})

    @staticmethod
    def _reschedule(s: Session, dispatch: dict, due_at: datetime | None) -> None:
        s.execute(query("schedule", "set_due"), {"dispatch_id": dispatch["dispatch_id"], "due_at_utc": due_at})

    def _record_dropped_instants(self, s: Session, current: dict, accepted_at: datetime, command_id: uuid.UUID) -> None:
        """Instants of the active generation that fell due after the cursor, up to this command's acceptance,
        were never decided, and after this update or delete never will be: the history says so, so no due
        instant vanishes silently (docs/protocol-notes.md, 24n)."""
        schedule_id, old = current["schedule_id"], current["active_generation"]
        [row] = s.batch((query("schedule", "get_generation"), {"schedule_id": schedule_id, "generation": old}))
        timing = Generation.from_row(row[0]).timing
        instants = count_between(timing, current["cursor_utc"], accepted_at)
        if instants:
            self._history(s, schedule_id, "due-instants-superseded", old, {
                "command_id": str(command_id), "instants": instants,
                "first_nominal_utc": canonical_instant(next_after(timing, current["cursor_utc"])),
                "last_nominal_utc": canonical_instant(last_at_or_before(timing, accepted_at))})

    @staticmethod
    def _history(s: Session, schedule_id: uuid.UUID, event: str, generation: int | None, detail: dict) -> None:
        s.defer(query("schedule", "record_history"),
                  {"schedule_id": schedule_id, "event": event, "generation": generation, "detail": Jsonb(detail)})
