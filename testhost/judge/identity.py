"""The Work identity formula of the adapter protocol, written here from the protocol page, not imported
from any implementation: the checks recompute it to judge what an implementation linked. Also an occurrence's
identity and the protocol's text form of an instant, both ways."""

from __future__ import annotations

import hashlib
import uuid
from datetime import datetime, timezone


def instant_text(when: datetime) -> str:
    """An instant in the protocol's text form: RFC 3339 UTC with six fractional digits and `Z`."""
    utc = when.astimezone(timezone.utc)
    return f"{utc.year:04d}-" + utc.strftime("%m-%dT%H:%M:%S.%fZ")


def parse_instant(text: str) -> datetime:
    """An RFC 3339 instant as the store's JSON writes it (`Z` or an offset)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def occurrence_key(o: dict) -> tuple:
    """An occurrence's identity, stable across processor retries."""
    return (o["scope_id"], o["schedule_id"], o["generation"], o["occurrence_kind"], o["first_nominal_utc"])


def canonical(scope_id: str, schedule_id: uuid.UUID, generation: int, kind: str, first_nominal_utc: datetime) -> str:
    return f"{scope_id}|{schedule_id}|{generation}|{kind}|{instant_text(first_nominal_utc)}"


def expected_work(scope_id: str, schedule_id: uuid.UUID, generation: int, kind: str, first_nominal_utc: datetime,
                  command: str) -> dict:
    text = canonical(scope_id, schedule_id, generation, kind, first_nominal_utc)
    digest = bytearray(hashlib.sha256(("appsurface-durable/schedule-work/v1|" + text).encode()).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x80
    digest[8] = (digest[8] & 0x3F) | 0x80
    return {"work_id": uuid.UUID(bytes=bytes(digest)), "idempotency_key": "schedule-occurrence/v1|" + text,
            "command": command, "activity": f"schedule/{schedule_id}/g{generation}/{kind}"}
