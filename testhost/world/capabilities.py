"""What a world can do (its clock, its database crash, its network), named, and the reasons it cannot."""

from __future__ import annotations

from dataclasses import dataclass, field

CLOCK, DB_CRASH, NETWORK = "clock", "db-crash", "network"


@dataclass
class Capabilities:
    """What this world can do; each missing capability carries the reason it is missing."""

    missing: dict[str, str] = field(default_factory=dict)

    def has(self, name: str) -> bool:
        return name not in self.missing

    def reason(self, name: str) -> str | None:
        return self.missing.get(name)
