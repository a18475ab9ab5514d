"""Problem results in the RFC 9457 shape: what a refused call returns instead of changing anything."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

BASE = "urn:appsurface-durable:problem:"


@dataclass(frozen=True)
class Problem:
    type: str
    title: str
    status: int
    detail: str
    errors: dict[str, list[str]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, "title": self.title, "status": self.status, "detail": self.detail,
                "errors": self.errors}


def validation(errors: dict[str, list[str]]) -> Problem:
    fields = ", ".join(sorted(errors))
    return Problem(BASE + "validation", "The schedule definition is invalid", 400,
                   f"fix these fields: {fields}", errors)


def not_admitted(what: str, detail: str) -> Problem:
    return Problem(BASE + "not-admitted", f"{what} is not admitted in Gate A", 422, detail)


def not_found(schedule_id: Any) -> Problem:
    return Problem(BASE + "not-found", "No such schedule", 404, f"schedule {schedule_id} does not exist in this scope")


def scope_not_found(scope_id: str) -> Problem:
    return Problem(BASE + "scope-not-found", "No such scope", 404, f"scope {scope_id} is not registered")


def revision_conflict(schedule_id: Any, expected: int, actual: int) -> Problem:
    return Problem(BASE + "revision-conflict", "The schedule changed since it was read", 409,
                   f"schedule {schedule_id} is at revision {actual}, not {expected}; read it again and retry")


def deleted(schedule_id: Any) -> Problem:
    return Problem(BASE + "schedule-deleted", "The schedule is deleted", 409,
                   f"schedule {schedule_id} is deleted and cannot be revived; create a new schedule identity")


def release_refused(schedule_id: Any, reason: str) -> Problem:
    return Problem(BASE + "release-refused", "ReleaseAfterRecovery does not apply", 409,
                   f"schedule {schedule_id}: {reason}")


def command_conflict(command_id: Any) -> Problem:
    return Problem(BASE + "command-conflict", "The command ID was already used for another command", 409,
                   f"command {command_id} was accepted before with a different kind or schedule")


def invalid_state(detail: str) -> Problem:
    return Problem(BASE + "invalid-state", "The call does not apply in the current state", 409, detail)
