"""The reference's adapter: newline-delimited JSON on stdin/stdout, as the TestHost speaks it.

Start: `python -m reference.adapter`. Environment: CRASHPROOF_RUNTIME_DSN, CRASHPROOF_DISPATCHER_DSN,
CRASHPROOF_SCOPE (default "tenant-a"), CRASHPROOF_DEADLINE_S (default 30) and CRASHPROOF_BARRIERS ("stdio"
to report barriers on this channel and wait for the host's reply; unset: barriers are off); see
barriers/PROTOCOL.md. Every response's outcome is "ok", "fail"
(definitely not applied) or "unknown" (may or may not have been applied).
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, TextIO

import barriers

from . import ScheduleClient, ScheduleProcessor, WorkStore, wire
from .errors import CommitOutcomeUnknown, DurableError, PassInterrupted
from .model import ScheduleView
from .problems import Problem
from .processor import CancellationToken, ProcessRequest

PROTOCOL_VERSION = 1
CONTRACT = 6  # the contract major version this adapter implements (docs/contract-changes.md)
OPERATIONS = ("process-due", "create", "update", "delete", "get", "release-after-recovery", "complete-work")


def run_command(client: ScheduleClient, op: str, args: Any, command_id: uuid.UUID | None = None) -> Any:
    """create, update, delete or release-after-recovery from the wire's arguments, on `client`; `command_id`
    stands in when the arguments name none (the host's fallback keeps one per step across its retries)."""
    read = wire.command(op, args)
    if isinstance(read, Problem):
        return read
    command_id = read.command_id or command_id
    if op == "create":
        return client.create(read.spec, schedule_id=read.schedule_id, command_id=command_id)
    if op == "update":
        return client.update(read.schedule_id, read.spec, expected_revision=read.expected_revision,
                             command_id=command_id)
    if op == "delete":
        return client.delete(read.schedule_id, expected_revision=read.expected_revision, command_id=command_id)
    return client.release_after_recovery(read.schedule_id, expected_revision=read.expected_revision,
                                         command_id=command_id)


class _CancelledAfter(CancellationToken):
    """Cancelled once the pass has looked at it `n` times, i.e. after n schedules, before the next lease."""

    def __init__(self, n: int):
        super().__init__()
        self._left = n

    @property
    def cancelled(self) -> bool:
        if super().cancelled or self._left <= 0:
            return True
        self._left -= 1
        return False


def _cancel_after(n: int | None) -> CancellationToken:
    """The pass's token: after n schedules when asked, and whenever a barrier-reply says `cancel-pass`."""
    return CancellationToken() if n is None else _CancelledAfter(n)


class Adapter:
    """Reads requests, runs them against the reference, writes responses (and barrier hits) as JSON lines."""

    def __init__(self, stdin: TextIO, stdout: TextIO, env: dict[str, str]):
        self.stdin, self.stdout = stdin, stdout
        self.scope = env.get("CRASHPROOF_SCOPE", "tenant-a")
        self.runtime_dsn = env["CRASHPROOF_RUNTIME_DSN"]
        self.dispatcher_dsn = env["CRASHPROOF_DISPATCHER_DSN"]
        self.deadline = float(env.get("CRASHPROOF_DEADLINE_S", "30"))
        self._client: ScheduleClient | None = None
        self._processor: ScheduleProcessor | None = None
        self._work: WorkStore | None = None
        self._pass_token: CancellationToken | None = None  # the pass in flight's, for a `cancel-pass` reply
        if env.get("CRASHPROOF_BARRIERS") == "stdio":
            barriers.enable(self._barrier)

    def send(self, message: dict[str, Any]) -> None:
        self.stdout.write(json.dumps(message, default=str) + "\n")
        self.stdout.flush()

    def _barrier(self, name: str, context: dict[str, Any]) -> None:
        """Report the hit and block until the host answers; the host may kill us meanwhile."""
        self.send({"type": "barrier", "name": name, "context": context})
        line = self.stdin.readline()
        if not line:
            raise SystemExit(0)
        reply = json.loads(line)
        if reply.get("type") != "barrier-reply":
            raise SystemExit(f"expected a barrier-reply, got {reply!r}")
        if reply.get("action") == "cancel-pass" and self._pass_token is not None:
            self._pass_token.cancel()  # as a caller's CancellationToken firing now: seen before the next lease

    # The client and the Work store borrow the processor's runtime session: one adapter, one runtime
    # connection, used by one request at a time. A broken one is replaced on the next use.
    @property
    def client(self) -> ScheduleClient:
        if self._client is None or self._client.session.broken:
            self._client = ScheduleClient(None, self.scope, deadline=self.deadline, session=self.processor.runtime)
        return self._client

    @property
    def processor(self) -> ScheduleProcessor:
        if self._processor is None:
            self._processor = ScheduleProcessor(self.runtime_dsn, self.dispatcher_dsn, deadline=self.deadline)
        return self._processor

    @property
    def work(self) -> WorkStore:
        if self._work is None or self._work.session.broken:
            self._work = WorkStore(None, self.scope, deadline=self.deadline, session=self.processor.runtime)
        return self._work

    def handle(self, op: str, args: dict[str, Any]) -> Any:
        handlers: dict[str, Callable[[dict[str, Any]], Any]] = {
            "process-due": self._process_due,
            "create": lambda a: self._command("create", a),
            "update": lambda a: self._command("update", a),
            "delete": lambda a: self._command("delete", a),
            "get": lambda a: self.client.get(uuid.UUID(a["schedule_id"])),
            "release-after-recovery": lambda a: self._command("release-after-recovery", a),
            "complete-work": lambda a: self.work.transition(uuid.UUID(a["work_id"]), a["state"]),
        }
        if op not in handlers:
            raise KeyError(op)
        return handlers[op](args)

    def _process_due(self, a: dict[str, Any]) -> dict:
        self._pass_token = _cancel_after(a.get("cancel_after"))
        try:
            return self.processor.process_due(ProcessRequest(
                maximum_schedules=a.get("maximum_schedules", 1),
                lease_duration=timedelta(seconds=a.get("lease_seconds", 30)),
                lease_owner=a.get("lease_owner")), self._pass_token).to_json()
        finally:
            self._pass_token = None

    def _command(self, op: str, args: dict[str, Any]) -> Any:
        """A client command, its arguments read first: what cannot be read is a validation problem."""
        return run_command(self.client, op, args)

    def respond(self, request: dict[str, Any]) -> dict[str, Any]:
        request_id = request.get("id")
        try:
            value = self.handle(request.get("op", ""), request.get("args") or {})
        except KeyError as exc:
            return {"type": "response", "id": request_id, "outcome": "fail",
                    "error": {"kind": "unknown-operation", "message": f"no operation or argument {exc}"}}
        except PassInterrupted as exc:  # something of the pass committed: neither ok nor a clean fail
            return {"type": "response", "id": request_id, "outcome": "unknown",
                    "error": {"kind": type(exc.cause).__name__, "message": str(exc), "retriable": exc.retriable}}
        except CommitOutcomeUnknown as exc:
            return {"type": "response", "id": request_id, "outcome": "unknown",
                    "error": {"kind": type(exc).__name__, "message": str(exc), "retriable": True}}
        except DurableError as exc:  # the transaction was rolled back: definitely not applied
            return {"type": "response", "id": request_id, "outcome": "fail",
                    "error": {"kind": type(exc).__name__, "message": str(exc), "retriable": exc.retriable}}
        except (ValueError, TypeError) as exc:
            return {"type": "response", "id": request_id, "outcome": "fail",
                    "error": {"kind": "bad-arguments", "message": str(exc)}}
        if isinstance(value, Problem):
            return {"type": "response", "id": request_id, "outcome": "fail", "problem": value.to_json()}
        if isinstance(value, ScheduleView):
            value = value.to_json()
        return {"type": "response", "id": request_id, "outcome": "ok", "value": value}

    def run(self) -> int:
        # clock_utc: this process's own wall clock, which the host compares with its own to see a skew it asked
        # for took effect; the processor never reads it (cutoffs and leases come from PostgreSQL).
        self.send({"type": "hello", "protocol": PROTOCOL_VERSION, "contract": CONTRACT,
                   "implementation": "crashproof-reference", "operations": list(OPERATIONS),
                   "clock_utc": datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")})
        for line in self.stdin:
            if not line.strip():
                continue
            try:
                request = json.loads(line)
            except json.JSONDecodeError as exc:
                self.send({"type": "response", "id": None, "outcome": "fail",
                           "error": {"kind": "bad-json", "message": str(exc)}})
                continue
            if request.get("type") == "shutdown":
                break
            self.send(self.respond(request))
        return 0


def main() -> int:
    return Adapter(sys.stdin, sys.stdout, dict(os.environ)).run()


if __name__ == "__main__":
    sys.exit(main())
