"""A run-independent picture of the final state per schedule name, to hold one run's outcome against another's or
the model's: times relative to each generation's own reference, the cursor as the last instant at or before it."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from .identity import instant_text, parse_instant
from .gate_model import cursor_instant, generation_of
from .state import StoreState


def _reference_instant(generation: dict) -> datetime:
    kind = generation["schedule_kind"]
    return {"every": generation["anchor_utc"], "at": generation["at_utc"],
            "after": generation["accepted_at_utc"]}[kind]


def normalize(state: StoreState, schedule_ids: dict[str, Any]) -> dict[str, Any]:
    """A run-independent picture per schedule name: times relative to each generation's own reference, and
    the cursor as the last instant at or before it."""
    picture = {}
    work = state.work_by_id()
    for name, schedule_id in sorted(schedule_ids.items()):
        d = state.definition(schedule_id)
        if d is None:
            picture[name] = None
            continue
        occs = []
        for o in state.occurrences_of(schedule_id):
            ref = _reference_instant(state.generation(schedule_id, o["generation"]))
            occs.append((o["generation"], o["occurrence_kind"], (o["first_nominal_utc"] - ref) // timedelta(microseconds=1),
                         (o["last_nominal_utc"] - ref) // timedelta(microseconds=1), o["state"],
                         work.get(o["work_id"], {}).get("state")))
        active = state.generation(schedule_id, d["active_generation"])
        references = {g["generation"]: instant_text(_reference_instant(g)) for g in state.generations
                      if g["schedule_id"] == schedule_id}
        picture[name] = {"lifecycle": d["lifecycle_state"], "suspension": d["suspension_reason"],
                         "generation": d["active_generation"],
                         "cursor_instant": cursor_instant(generation_of(active), d["cursor_utc"]),
                         "occurrences": sorted(occs), "references": references}
    return picture


def comparable(entry: dict | None) -> dict | None:
    """A picture entry without its run's own reference instants (which differ from run to run for After)."""
    return None if entry is None else {k: v for k, v in entry.items() if k != "references"}


def readable(entry: dict | None) -> dict | None:
    """A picture entry in the protocol's own units: instants as RFC 3339 times, from the entry's own run's
    generation references (an offset from the reference where that is unknown)."""
    if entry is None:
        return None
    references = {int(g): parse_instant(t) for g, t in (entry.get("references") or {}).items()}

    def at(generation: int, offset_us: int | None) -> str | None:
        if offset_us is None:
            return None
        if generation not in references:
            return f"{offset_us / 1e6:+g}s from generation {generation}'s reference"
        return instant_text(references[generation] + timedelta(microseconds=offset_us))

    return {"lifecycle": entry["lifecycle"], "suspension": entry["suspension"], "generation": entry["generation"],
            "cursor_at_or_after": at(entry["generation"], entry["cursor_instant"]),
            "occurrences": [{"generation": g, "kind": kind, "first_nominal_utc": at(g, first),
                             "last_nominal_utc": at(g, last), "state": state, "work": work}
                            for g, kind, first, last, state, work in entry["occurrences"]]}


def _differences(a: dict | None, b: dict | None) -> list[str]:
    a, b = comparable(a) or {}, comparable(b) or {}
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def picture_differences(ours: dict, theirs: dict, labels: tuple[str, str]) -> list[dict]:
    """Per schedule whose entries differ: which fields, and both entries in the protocol's units."""
    return [{"schedule": name, "differs_in": _differences(ours.get(name), theirs.get(name)),
             labels[0]: readable(ours.get(name)), labels[1]: readable(theirs.get(name))}
            for name in sorted(set(ours) | set(theirs)) if comparable(ours.get(name)) != comparable(theirs.get(name))]
