"""Deterministic Work identity derived from the immutable occurrence identity.

occurrence identity = (scope_id, schedule_id, generation, kind, first_nominal_utc)
canonical text      = "<scope_id>|<schedule_id>|<generation>|<kind>|<first_nominal_utc as YYYY-MM-DDTHH:MM:SS.ffffffZ>"
Work ID             = UUIDv8 of the first 16 bytes of SHA-256("appsurface-durable/schedule-work/v1|" + canonical)
idempotency key     = "schedule-occurrence/v1|" + canonical
activity            = "schedule/<schedule_id>/g<generation>/<kind>"
target command      = the generation's target command, unchanged
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone

WORK_ID_NAMESPACE = "appsurface-durable/schedule-work/v1|"
IDEMPOTENCY_PREFIX = "schedule-occurrence/v1|"


def canonical_instant(when: datetime) -> str:
    """YYYY-MM-DDTHH:MM:SS.ffffffZ in UTC; the year always four digits (strftime's %Y is not, before 1000)."""
    if when.tzinfo is None:
        raise ValueError(f"{when!r} has no time zone; occurrence instants are UTC-aware")
    utc = when.astimezone(timezone.utc)
    return f"{utc.year:04d}-" + utc.strftime("%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class OccurrenceIdentity:
    scope_id: str
    schedule_id: uuid.UUID
    generation: int
    kind: str
    first_nominal_utc: datetime

    @property
    def canonical(self) -> str:
        return (f"{self.scope_id}|{self.schedule_id}|{self.generation}|{self.kind}|"
                f"{canonical_instant(self.first_nominal_utc)}")


@dataclass(frozen=True)
class WorkIdentity:
    work_id: uuid.UUID
    idempotency_key: str
    command: str
    activity: str


def uuid8(digest: bytes) -> uuid.UUID:
    raw = bytearray(digest[:16])
    raw[6] = (raw[6] & 0x0F) | 0x80  # version 8
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 9562 variant
    return uuid.UUID(bytes=bytes(raw))


def work_identity(occurrence: OccurrenceIdentity, target_command: str) -> WorkIdentity:
    canonical = occurrence.canonical
    return WorkIdentity(
        work_id=uuid8(hashlib.sha256((WORK_ID_NAMESPACE + canonical).encode()).digest()),
        idempotency_key=IDEMPOTENCY_PREFIX + canonical,
        command=target_command,
        activity=f"schedule/{occurrence.schedule_id}/g{occurrence.generation}/{occurrence.kind}",
    )
