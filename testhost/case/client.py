"""The host as a client of the case's store: a client step through the implementation when it offers the operation,
else through the reference over the normative schema (a fallback), with bounded retries like any caller; and Work
planted as a plain Work caller."""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timezone
from typing import Any

from scenarios.scenario import relative

from testhost.errors import FallbackFailed
from testhost.faults.catalog import DEADLINE_S
from testhost.impl.implementation import Response
from testhost.judge.identity import expected_work

SCOPE = "tenant-a"  # the one scope every case's schedules and Work live in
# A fallback retries like any client; its attempts are spaced so a restarted server has time to accept.
FALLBACK_ATTEMPTS = 5
FALLBACK_PAUSE_S = 0.3


class HostClient:
    """The client steps a case runs, and the reference client and Work store it falls back on."""

    def __init__(self, case) -> None:  # the case (runner.py CaseRun) this part of it serves
        self.case = case
        self.schedule_client = None  # the reference's ScheduleClient, once a fallback needed it
        self.work_store = None  # the reference's WorkStore, once a fallback needed it

    def op(self, op: str, args: dict, attempts: int = 3) -> Response:
        """Through the implementation when it offers the operation, else the reference over the normative schema.

        Like any caller, the harness retries (bounded) an outcome that is unknown or a retriable failure; a
        Work transition already applied by an attempt whose reply was lost counts as done. Every attempt of one
        step carries the same command ID, so a repeated schedule command whose first reply was lost returns the
        schedule as it stands instead of applying twice. A fallback that cannot complete the step is a harness
        error (FallbackFailed), never charged to the implementation.
        """
        command_id = uuid.UUID(args["command_id"]) if "command_id" in args else uuid.uuid4()
        for attempt in range(attempts):
            impl = self.case.impls["A"]
            if impl.supports(op):
                response = self.case.requests.ask(impl, op, args)
            else:
                self.case.fallbacks.add(op)
                response = self._with_retry(op, args, command_id)
            retriable = response.outcome == "unknown" or (response.outcome == "fail" and (response.error or {}).get("retriable"))
            if not retriable or attempt == attempts - 1:
                return response
            self.case.requests.note_response(response, f"{op} (will retry)")
            if response.died:
                self.case.impls["A"] = self.case.start_implementation("A")
            if op == "complete-work" and self.case.reads.work_state(args["work_id"]) == args["state"]:
                return Response("ok", value=self.case.reads.work_row(args["work_id"]))  # applied by an earlier attempt
        return response

    def _with_retry(self, op: str, args: dict, command_id: uuid.UUID) -> Response:
        """The fallback, reconnecting and retrying after a rollback or a lost reply like any client (a fault may
        have killed its connection or restarted the server); what still fails is the harness's error."""
        last = None
        for attempt in range(FALLBACK_ATTEMPTS):
            response, error = self._attempt(op, args, command_id)
            if error is None:
                return response
            last = error
            self.case.note("fallback-retry", op=op, attempt=attempt + 1, error=error)
            if op == "complete-work" and self.case.reads.work_state(args["work_id"]) == args["state"]:
                return Response("ok", value=self.case.reads.work_row(args["work_id"]))
            time.sleep(FALLBACK_PAUSE_S)
        raise FallbackFailed(f"harness fallback (reference {'Work store' if op == 'complete-work' else 'client'}) "
                             f"could not run {op} after {FALLBACK_ATTEMPTS} attempts: {last}; the implementation "
                             f"does not offer {op}, so this is not its failure")

    def _attempt(self, op: str, args: dict, command_id: uuid.UUID) -> tuple[Response | None, str | None]:
        """One attempt: (the response, None), or (None, why it failed) after which the connection is renewed."""
        import psycopg

        from reference.errors import DurableError

        try:
            return self.call(op, args, command_id), None
        except (DurableError, psycopg.Error) as exc:
            self.close()
            return None, f"{type(exc).__name__}: {exc}"

    def call(self, op: str, args: dict, command_id: uuid.UUID) -> Response:
        """One attempt through the reference client (a schedule command) or Work store (`complete-work`), each
        connected anew once its session broke."""
        from reference import ScheduleClient, WorkStore
        from reference.adapter import run_command
        from reference.problems import Problem

        if op == "complete-work":
            if self.work_store is None or self.work_store.session.broken:
                self.close()
                self.work_store = WorkStore(self.case.store.runtime_dsn, SCOPE, deadline=DEADLINE_S)
            result = self.work_store.transition(uuid.UUID(args["work_id"]), args["state"])
        else:
            if self.schedule_client is None or self.schedule_client.session.broken:
                self.close()
                self.schedule_client = ScheduleClient(self.case.store.runtime_dsn, SCOPE, deadline=DEADLINE_S)
            result = run_command(self.schedule_client, op, args, command_id)
        if isinstance(result, Problem):
            return Response("fail", problem=result.to_json())
        return Response("ok", value=protocol_json(result.to_json() if hasattr(result, "to_json") else result))

    def close(self) -> None:
        """Close the reference client and Work store (a dead connection is dropped either way)."""
        for name in ("schedule_client", "work_store"):
            resource = getattr(self, name)
            setattr(self, name, None)
            if resource is not None:
                try:
                    resource.close()
                except Exception:  # noqa: BLE001 - a dead connection may fail to close; it is dropped either way
                    pass

    def plant_work(self, args: dict) -> None:
        """As a plain Work caller (straight into the Work store), take an occurrence's idempotency key for a
        Work that is not the occurrence's: the bridge must find the mismatch and link nothing."""
        generation, kind, first = args.get("generation", 1), args.get("kind", "nominal"), relative(args["first"])
        key = expected_work(SCOPE, self.case.schedule_ids[args["schedule"]], generation, kind, first, "")["idempotency_key"]
        work_id = uuid.uuid5(uuid.NAMESPACE_URL, "crashproof/planted/" + key)
        with self.case.owner() as conn:
            conn.execute("insert into appsurface_durable.work_items (scope_id, work_id, idempotency_key, command, "
                         "activity, payload) values (%s, %s, %s, 'plain-caller', 'plain-caller/activity', '{}')",
                         (SCOPE, work_id, key))
        self.case.facts.planted.add(work_id)
        self.case.model.plant(args["schedule"], generation, kind, first)
        self.case.note("planted-work", work_id=str(work_id), idempotency_key=key)


def protocol_json(value: Any) -> Any:
    """A value as the adapter protocol's JSON: instants in RFC 3339 UTC, UUIDs and other scalars as text."""
    if isinstance(value, dict):
        return {str(k): protocol_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [protocol_json(v) for v in value]
    if isinstance(value, datetime):
        return value.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)
