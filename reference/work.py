"""The Work store: the transaction writer the Schedule bridge calls, and Work state transitions."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

import barriers

from . import problems
from .db import Session
from .errors import IdempotencyConflict
from .roles import RUNTIME
from .sql import query

TERMINAL = ("succeeded", "failed", "canceled")
STATES = ("pending", "running", "retrying", "suspended", *TERMINAL)


@dataclass(frozen=True)
class WorkRequest:
    work_id: uuid.UUID
    idempotency_key: str
    command: str
    activity: str
    payload: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AcceptedWork:
    work_id: uuid.UUID
    idempotency_key: str
    command: str
    activity: str
    accepted_at_utc: datetime
    created: bool
    state: str  # as it stands now: a Work found under the key may have moved on since it was accepted


class WorkTransactionWriter:
    """Accepts Work inside the caller's open scoped transaction; compare-or-return on the idempotency key."""

    def enqueue(self, session: Session, request: WorkRequest, *, compare: bool = True) -> AcceptedWork:
        """Insert, or return the Work already accepted under the idempotency key. With compare (a plain Work
        caller) a stored Work that differs is a conflict; without it (the Schedule bridge, which compares at
        its occurrence link) the stored Work is returned as it is."""
        if session.conn.info.transaction_status.name != "INTRANS":
            raise RuntimeError("the Work transaction writer needs the caller's open transaction")
        params = {"work_id": request.work_id, "idempotency_key": request.idempotency_key, "command": request.command,
                  "activity": request.activity, "payload": Jsonb(request.payload)}
        found = session.batch((query("work", "enqueue"), params))[0]
        row = found[0] if found else session.one(query("work", "by_idempotency_key"), params)
        if not row["created"]:
            stored = (row["work_id"], row["command"], row["activity"], row["payload"])
            wanted = (request.work_id, request.command, request.activity, request.payload)
            if compare and stored != wanted:
                raise IdempotencyConflict(f"Work under idempotency key {request.idempotency_key!r} is {stored}, "
                                          f"not {wanted}")
        return AcceptedWork(row["work_id"], row["idempotency_key"], row["command"], row["activity"],
                            row["accepted_at_utc"], row["created"], row["state"])


class WorkStore:
    """Work reads and state transitions in one scope. Runtime version 3 is enough: Work needs no Schedule."""

    def __init__(self, dsn: str | None, scope_id: str, *, runtime_role: str = RUNTIME, deadline: float = 30.0,
                 session: Session | None = None):
        """Connects to `dsn`, or borrows `session`, an open runtime-role session it will not close."""
        self.scope_id = scope_id
        self.runtime_role = runtime_role
        self._owns_session = session is None
        self.session = session or Session(dsn, deadline=deadline, application_name="appsurface-durable-work")

    def close(self) -> None:
        if self._owns_session:
            self.session.close()

    def get(self, work_id: uuid.UUID) -> dict | None:
        with self.session.scoped(self.scope_id, self.runtime_role) as s:
            return s.one(query("work", "get_work"), {"work_id": work_id})

    def list(self) -> list[dict]:
        with self.session.scoped(self.scope_id, self.runtime_role) as s:
            return s.all(query("work", "list_work"))

    def enqueue(self, request: WorkRequest) -> AcceptedWork:
        """Accept Work on its own (a plain Work caller, not the Schedule bridge)."""
        with self.session.scoped(self.scope_id, self.runtime_role) as s:
            return WorkTransactionWriter().enqueue(s, request)

    def transition(self, work_id: uuid.UUID, state: str) -> dict | problems.Problem:
        """Move Work to state. Reaching a terminal state also requeues a waiting Schedule (same transaction)."""
        if state not in STATES or state == "pending":
            return problems.validation({"state": [f"must be one of {', '.join(s for s in STATES if s != 'pending')}"]})
        terminal = state in TERMINAL
        with self.session.scoped(self.scope_id, self.runtime_role) as s:
            current = s.one(query("work", "lock_work"), {"work_id": work_id})
            if current is None:
                return problems.Problem(problems.BASE + "not-found", "No such Work", 404, f"Work {work_id} does not exist")
            if current["state"] in TERMINAL:
                return problems.invalid_state(f"Work {work_id} is already {current['state']}; terminal states are final")
            row = s.one(query("work", "transition"), {"work_id": work_id, "state": state})
            if terminal:
                barriers.hit("work-terminal-before-commit", work_id=str(work_id), state=state)
        if terminal:
            barriers.hit("work-terminal-after-commit", work_id=str(work_id), state=state)
        return row
