"""`certify --shard I/N`: a deterministic slice of the planned cases, balanced by the fault-free census's cost.

Every shard runs the whole fault-free census (each faulted case needs its scenario's baseline) and plans the
same matrix, then keeps its own slice; only shard 1 reports the fault-free cases, so the N shard reports
merge (`crashproof report merge`) into the unsharded run case for case. The cost of a case is what its
scenario's fault-free run did: its barrier hits. Durations would balance better on one machine but differ
between the shards' machines, and the shards must agree on the split without talking to each other.
"""

from __future__ import annotations

import hashlib

from testhost.errors import TestHostError


def parse(text: str) -> tuple[int, int]:
    """`I/N` with 1 <= I <= N."""
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise TestHostError(f"--shard takes I/N (for example 2/3), not {text!r}") from None
    if not 1 <= index <= count:
        raise TestHostError(f"--shard {text}: I must be between 1 and N")
    return index, count


def cost(plan, census: dict[str, dict[str, int]]) -> int:
    return 1 + sum(census.get(plan.scenario, {}).values())


def split(plans: list, census: dict[str, dict[str, int]], count: int) -> list[list]:
    """The plans dealt to `count` shards: heaviest first, each to the lightest shard so far (lowest index on a
    tie). Depends only on the plans and the census's barrier hits, never on their order or on timing."""
    shards: list[list] = [[] for _ in range(count)]
    loads = [0] * count
    for plan in sorted(plans, key=lambda p: (-cost(p, census), p.id)):
        lightest = min(range(count), key=lambda i: (loads[i], i))
        shards[lightest].append(plan)
        loads[lightest] += cost(plan, census)
    return shards


def select(plans: list, census: dict[str, dict[str, int]], shard: tuple[int, int] | None) -> list:
    if shard is None:
        return plans
    index, count = shard
    return split(plans, census, count)[index - 1]


def plan_digest(ids: list[str]) -> dict:
    """The count and SHA-256 of a run's whole planned id list (before slicing): shards of one run agree on it,
    so a merge can tell shards planned from different matrices (whose union may miss a case no shard ran)."""
    ordered = sorted(set(ids))
    return {"plan_count": len(ordered), "plan_digest": hashlib.sha256("\n".join(ordered).encode()).hexdigest()}
