"""Scenario times: every case starts with the server clock at T0, and a scenario names instants relative to it."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from .errors import TimeError

# Every case starts with the server clock set here, so explicit instants are the same in every run.
T0 = datetime.fromisoformat("2031-03-03T00:00:00+00:00")
_RELATIVE = re.compile(r"^(accepted)?([+-]\d+(?:\.\d+)?)s$")


def relative(value: str, accepted_at: datetime | None = None) -> datetime:
    """"+90s" is T0 + 90 s; "accepted+5s" is the generation's acceptance + 5 s."""
    match = _RELATIVE.match(value) if isinstance(value, str) else None
    if not match:
        raise TimeError(f"time {value!r} must look like +90s, -5s or accepted+5s")
    base = accepted_at if match.group(1) else T0
    if base is None:
        raise TimeError(f"time {value!r} is relative to an acceptance time that is not known here")
    return base + timedelta(seconds=float(match.group(2)))
