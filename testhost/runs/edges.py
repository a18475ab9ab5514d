"""The boundaries the protocol notes declare, each with what stands on it: a case of the matrix (or the schema
stage), a draw of explore aimed at it, and the mutants that break its sentence there and nowhere else.

A rule with an edge (a range's end, a window's equality, a cap measured where a lease ends, a class of characters)
is proven only edge by edge: a mutant that breaks it far from the edge says nothing of an implementation that is
off by one at it. `crashproof coverage` reads this registry: a sentence with an edge lacking its scenario, its draw
or its mutant is unproven, and the missing part is reported by name. A note declares each of its edges in its own
text ("edge `lateness-equal-window`"), so a note and the registry cannot drift apart: a declared edge the registry
lacks is reported too.
"""

from __future__ import annotations

from dataclasses import dataclass

from mutants import catalog as m

SCHEMA_STAGE = "schema-stage"  # the stage `certify --migrations DIR` runs; it probes the claim function's edges
HIGH_WATER = "The cursor is a durable UTC high-water mark."
PROCESS_DUE = ("Its ProcessDueAsync(PostgreSqlDurableScheduleProcessRequest, CancellationToken) call processes at "
               "most MaximumSchedules schedules (default 1), returns zero counts for an empty pass, and observes "
               "cancellation before starting the next lease.")
HOSTILE = "hostile:"  # a draw of explore's hostile phase, by the argument it aims at: hostile:lease_owner


@dataclass(frozen=True)
class Edge:
    """One boundary a note declares, and what proves certification holds an implementation to it."""

    name: str
    note: str  # the note's label in docs/protocol-notes.md ("3", "24i", "26d")
    title: str  # how the note's bold title begins (labels repeat across the page's sections)
    sentence: str  # the spec sentence (verbatim) the boundary belongs to
    boundary: str  # what lies on which side, in the note's words
    scenarios: tuple[str, ...]  # catalog scenarios (or the schema stage) with cases standing on the edge
    draws: tuple[str, ...]  # explore's motifs or swarm features (scenarios.generate.SWARM), or hostile arguments
    mutants: tuple[str, ...]  # catalog mutants breaking the sentence at this edge


EDGES: tuple[Edge, ...] = (
    Edge("cutoff-end-included", "26d", "The range (cursor_utc, cutoff_utc] includes its end", m.CUTOFF,
         "an instant equal to the cutoff is decided in that pass",
         ("cutoff-on-instant", "single-instant-on-cutoff"), ("past-frozen-instant", "single-instant-on-cutoff"),
         ("cutoff-end-excluded", "cutoff-end-deferred", "single-instant-end-excluded")),
    Edge("cursor-start-excluded", "29f", "The cursor's end of (cursor_utc, cutoff_utc]", m.CUTOFF,
         "an instant equal to the cursor was decided before and is not decided again",
         ("cutoff-on-instant",), ("past-frozen-instant",), ("cursor-end-included",)),
    Edge("grid-before-anchor", "39e", "Every grid before a future anchor", m.CUTOFF,
         "the instants anchor + n·every with n < 0 lie on the grid: an anchor in the future does not delay the "
         "first instant to it",
         ("every-future-anchor",), ("future-anchor",), ("grid-from-anchor",)),
    Edge("lateness-equal-window", "3", "Safety window and \"anomalously large\"", m.SAFETY_WINDOW,
         "lateness exactly equal to the safety window is inside it: a recovery range, no suspension",
         ("lateness-on-window",), ("lateness-on-window",), ("window-equal-suspends",)),
    Edge("lateness-past-window", "3", "Safety window and \"anomalously large\"", m.ANOMALY,
         "lateness a microsecond past the safety window is an anomaly: the schedule suspends, its cursor kept",
         ("lateness-on-window",), ("lateness-on-window",), ("lateness-whole-seconds",)),
    Edge("update-behind-cursor", "8", "Update moves the cursor to `max(cursor, accepted_at_utc)`", HIGH_WATER,
         "an update accepted while the server clock is behind the cursor leaves the cursor where it was",
         ("update-behind-cursor",), ("update-behind-cursor",), ("update-moves-cursor-back",)),
    Edge("pass-bound-exact", "29a", "\"Processes at most MaximumSchedules schedules\" counts claims", PROCESS_DUE,
         "a pass over more due schedules than its maximum_schedules claims exactly that many, not one more",
         ("safety-window-sides", "max-schedules-crash-middle"), ("many-schedules",),
         ("maximum-schedules-plus-one",)),
    Edge("update-on-cursor", "8", "Update moves the cursor to `max(cursor, accepted_at_utc)`", HIGH_WATER,
         "an update accepted exactly on the cursor leaves it there: the instant it stands on is not decided again "
         "by the new generation",
         ("update-on-cursor",), ("update-on-cursor",), ("update-range-from-acceptance",)),
    Edge("duration-bounds", "35e", "A duration is a finite JSON number of seconds", m.PROBLEM_RESULTS,
         "a duration of one microsecond and one of 10^10 s are lawful; 1e-7 s (zero at PostgreSQL's resolution) and "
         "10^10 + 1 s are refused with the validation problem",
         ("duration-edges",), (HOSTILE + "spec.after_s", HOSTILE + "spec.every_s"),
         ("duration-cap-admits-one-more", "duration-under-a-microsecond-rounded-up")),
    Edge("lease-cap-at-end", "24i", "The lease cap is checked where the lease ends", m.CLAIM_LIMITS,
         "a lease ending exactly ten minutes after the claim is granted, one ending later or not after it is "
         "refused, whatever months, days and time of mixed signs the interval holds",
         (SCHEMA_STAGE,), (HOSTILE + "lease_duration",), ("claim-cap-on-epoch", "claim-cap-at-whole-seconds", "claim-admits-zero-end", "claim-refuses-ten-minutes")),
    Edge("owner-blank-unicode", "24m", "Blank and control-character lease owners, for Unicode", m.CLAIM_LIMITS,
         "an owner of nothing but Unicode white space and default-ignorable code points is blank; a control, "
         "format or line/paragraph separator code point anywhere in it is refused",
         (SCHEMA_STAGE,), (HOSTILE + "lease_owner",), ("owner-blank-by-ascii-only", "owner-format-characters-admitted")),
)

BY_NAME = {edge.name: edge for edge in EDGES}
