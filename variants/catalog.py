"""The legal variants: each another way the contract allows, named by the sentence or note that allows it."""

from __future__ import annotations

from mutants.edits import Edit

from .variant import Variant

# What each variant exercises: a verbatim sentence of the spec or PROTOCOL.md, or a protocol note by number.
HIGH_WATER = "The cursor is a durable UTC high-water mark."
SQLSTATE_RETRY = ("Database timeouts, disconnects, and SQLSTATE failures abort the transaction and require a bounded "
                  "retry only after rollback.")
THREE_COMMITS = ("docs/protocol-notes.md 13: three commits per materialized occurrence (claim, decision, bridge); "
                 "the spec names the transactions, not the connections they run on")
CLAIM_LIMITS = ("The function rejects blank or control-character lease owners and lease durations that are null, "
                "non-positive, or longer than ten minutes before it changes a row, so an untrusted dispatcher call "
                "cannot strand a Schedule in a non-expiring or excessively long lease.")
CLAIM_ONE = ("A trusted dispatcher claims one payload-free dispatch queue row under a lease and commits before "
             "accessing scoped data.")
OPTIONAL_COMMANDS = "`create`, `update`, `delete` and `release-after-recovery` are optional."
LOCK_FIRST = ("Every scoped transaction locks the schedule's dispatch row first and writes nothing unless the revision "
              "is still the claimed one and the row is `leased`.")


def _after_fault(case: dict, barrier: str) -> list[dict]:
    """The barrier events after the case's fault at `barrier`, of the faulted instance and schedule."""
    timeline = case.get("timeline") or []
    at = next((i for i, e in enumerate(timeline) if e["event"] == "fault" and e.get("barrier") == barrier), None)
    if at is None:
        return []
    fault = timeline[at]
    schedule = next((e["context"].get("schedule_id") for e in reversed(timeline[:at])
                     if e["event"] == "barrier" and e["name"] == barrier), None)
    return [e for e in timeline[at:] if e["event"] == "barrier" and e.get("instance") == fault.get("instance")
            and (e.get("context") or {}).get("schedule_id") == schedule]


def shows_idle_cursor(case: dict) -> str | None:
    for check in case.get("checks", []):
        if check["name"] == "idle-pass-keeps-cursor" and check.get("evidence"):
            seen = check["evidence"][0]
            return (f"the cursor moved on a pass with nothing due: {seen.get('cursor_before')} -> "
                    f"{seen.get('cursor_after')} (step {seen.get('at_step')})")
    return None


def shows_bridge_alone(case: dict) -> str | None:
    """After the connection was lost at a committed decision, the bridge came next: no decision was redone."""
    after = [e["name"] for e in _after_fault(case, "schedule-decision-after-commit")]
    nxt = next((n for n in after if n in ("schedule-decision-before-commit", "schedule-work-after-acceptance",
                                          "schedule-bridge-before-commit")), None)
    if nxt in ("schedule-work-after-acceptance", "schedule-bridge-before-commit"):
        return f"after the lost connection the next barrier was {nxt}: the bridge was retried alone, no decision redone"
    return None


def shows_backoff(case: dict) -> str | None:
    """The retry after a lost connection came a backoff after the fault (the reference retries at once)."""
    timeline = case.get("timeline") or []
    at = next((i for i, e in enumerate(timeline) if e["event"] == "fault-injected"), None)
    if at is None or not any(e["event"] == "fault" and e.get("fault") == "disconnect" for e in timeline):
        return None
    nxt = next((e for e in timeline[at + 1:] if e["event"] == "barrier"), None)
    if nxt is not None and nxt["t"] - timeline[at]["t"] >= 0.1:
        return f"the first barrier after the lost connection came {nxt['t'] - timeline[at]['t']:.2f} s after it"
    return None


def shows_claims_ahead(case: dict) -> str | None:
    """A pass claimed two or more schedules before its first decision."""
    claimed = 0
    for e in case.get("timeline") or []:
        if e["event"] in ("step", "final-drain", "response"):
            claimed = 0
        elif e["event"] == "barrier" and e["name"] == "schedule-claim-after-commit":
            claimed += 1
        elif e["event"] == "barrier" and e["name"] == "schedule-decision-before-commit":
            if claimed >= 2:
                return f"a pass claimed {claimed} schedules before its first decision"
            claimed = 0
    return None


def shows_fallbacks(case: dict) -> str | None:
    if case.get("operations") == ["process-due"] and case.get("fallbacks"):
        return f"the hello offered process-due only; the host's fallbacks ran {', '.join(case['fallbacks'])}"
    return None


VARIANTS: tuple[Variant, ...] = (
    Variant(
        "idle-cursor-to-cutoff", HIGH_WATER,
        "A decision with nothing due moves the cursor to its cutoff as well (the reference leaves it; note 2).",
        (Edit("processor.py",
              "        if isinstance(evaluation, NoOp):\n            counts.noops += 1\n        else:\n",
              "        if isinstance(evaluation, NoOp):\n            counts.noops += 1\n"
              "            if cutoff > cursor:\n"
              '                s.defer(query("schedule", "move_cursor"), {"schedule_id": schedule_id, '
              '"cursor_utc": cutoff})\n'
              "                cursor = cutoff\n"
              "        else:\n"),),
        slice=("coalesce-terminal-callback",), shows=shows_idle_cursor),
    Variant(
        "bridge-on-new-session", SQLSTATE_RETRY,
        "After a lost connection the bridge alone is retried, on a new session, instead of the decision and the "
        "bridge together.",
        (Edit("processor.py",
              "        bridged = ProcessCounts()\n"
              "        with self.runtime.scoped(scope_id, self.runtime_role, reads=self._state_reads(claim)) as s:\n"
              "            self._bridge(s, claim, scope_id, bridged, context)\n"
              '            barriers.hit("schedule-bridge-before-commit", **context)\n',
              "        for remaining in range(RETRIES - 1, -1, -1):\n"
              "            bridged = ProcessCounts()\n"
              "            try:\n"
              "                with self.runtime.scoped(scope_id, self.runtime_role, "
              "reads=self._state_reads(claim)) as s:\n"
              "                    self._bridge(s, claim, scope_id, bridged, context)\n"
              '                    barriers.hit("schedule-bridge-before-commit", **context)\n'
              "                break\n"
              "            except CommitOutcomeUnknown:\n"
              "                raise\n"
              "            except RetriableError:\n"
              "                if remaining == 0 or self._runtime is None or not self._runtime.broken:\n"
              "                    raise\n"),),
        slice=("work-own-clock/schedule-decision-after-commit/disconnect/1",), shows=shows_bridge_alone),
    Variant(
        "one-session-per-part", THREE_COMMITS,
        "Every transaction of a pass (each claim, decision and bridge) runs on a session of its own, opened for it; "
        "the reference keeps one dispatcher and one runtime session.",
        (Edit("processor.py",
              "    def close(self) -> None:\n",
              "    def _fresh(self, which: str) -> Session:\n"
              "        old = getattr(self, which)\n"
              "        if old is not None:\n"
              "            old.close()\n"
              "        setattr(self, which, None)\n"
              '        return self.runtime if which == "_runtime" else self.dispatcher\n\n'
              "    def close(self) -> None:\n"),
         Edit("processor.py", "        with self.dispatcher.transaction(reads=(claim_read,)) as s:\n",
              '        with self._fresh("_dispatcher").transaction(reads=(claim_read,)) as s:\n'),
         Edit("processor.py", "        with self.runtime.scoped(None, self.runtime_role, routing_id=",
              '        with self._fresh("_runtime").scoped(None, self.runtime_role, routing_id='),
         Edit("processor.py", "        with self.runtime.scoped(scope_id, self.runtime_role, reads=",
              '        with self._fresh("_runtime").scoped(scope_id, self.runtime_role, reads=')),
        slice=("work-own-clock/schedule-decision-after-commit/disconnect/1",),
        probe="the backend pid of each transaction in the server's statement log: the claim, the decision and the "
              "bridge of one pass each on a session of its own"),
    Variant(
        "other-lease-and-owner", CLAIM_LIMITS,
        "The default lease owner is one Unicode string per process with spaces inside (not one per pass), and the "
        "default lease the cap's ten minutes instead of 30 s; a lease_seconds or lease_owner asked for is honoured.",
        (Edit("processor.py",
              '        owner = request.lease_owner or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"\n',
              '        owner = request.lease_owner or f"vériant wörker · {socket.gethostname()} · pid {os.getpid()}"\n'),
         Edit("processor.py", "    lease_duration: timedelta = timedelta(seconds=30)\n",
              "    lease_duration: timedelta = timedelta(minutes=10)\n"),
         Edit("adapter.py", 'lease_duration=timedelta(seconds=a.get("lease_seconds", 30)),',
              'lease_duration=timedelta(seconds=a.get("lease_seconds", 600)),')),
        slice=("at-single/schedule-claim-after-commit/pause/1",),
        probe="the claim function's arguments in the server's statement log: the owner string, and ten minutes for "
              "a pass that names no lease_seconds"),
    Variant(
        "other-retry-backoff", SQLSTATE_RETRY,
        "A retry after a rollback waits an exponential backoff with jitter first (0.15 s, then 0.3 s, plus up to a "
        "third); the reference retries at once.",
        (Edit("processor.py", "import os\nimport socket\n", "import os\nimport random\nimport socket\nimport time\n"),
         Edit("processor.py",
              "        for remaining in range(RETRIES - 1, -1, -1):\n            try:\n                return attempt()\n",
              "        for remaining in range(RETRIES - 1, -1, -1):\n"
              "            if remaining < RETRIES - 1:\n"
              "                time.sleep(0.15 * 2 ** (RETRIES - 2 - remaining) * (1 + random.random() / 3))\n"
              "            try:\n                return attempt()\n")),
        slice=("at-single/schedule-decision-before-commit/disconnect/1",), shows=shows_backoff),
    Variant(
        "claim-ahead", CLAIM_ONE,
        "A pass claims all its leases first (one claim transaction each, up to maximum_schedules, the cancellation "
        "looked at before each) and then decides and bridges each; the reference finishes a schedule before its next "
        "claim.",
        (Edit("processor.py", "        for _ in range(request.maximum_schedules):\n",
              "        claims = []\n        for _ in range(request.maximum_schedules):\n"),
         Edit("processor.py",
              "            counts.claimed += 1\n            try:\n",
              "            counts.claimed += 1\n            claims.append(claim)\n"
              "        for claim in claims:\n            try:\n")),
        slice=("cancel-between-leases",), shows=shows_claims_ahead),
    Variant(
        "process-due-only", OPTIONAL_COMMANDS,
        "The hello offers process-due alone: the host's fallbacks run every client command and Work transition.",
        (Edit("adapter.py",
              'OPERATIONS = ("process-due", "create", "update", "delete", "get", "release-after-recovery", '
              '"complete-work")\n',
              'OPERATIONS = ("process-due",)\n'),),
        slice=("generation-update-supersedes",), shows=shows_fallbacks),
    Variant(
        "other-read-order", LOCK_FIRST,
        "A scoped transaction locks the dispatch row first as the contract asks, then reads the slot, the pending "
        "occurrences and only then the fences with the cutoff (the reference reads the fences second).",
        (Edit("processor.py",
              '        return ((query("schedule", "lock_schedule"), key), (query("schedule", "fences_and_cutoff"), {}),\n'
              '                (query("schedule", "pending_of_active_generation"), key), '
              '(query("schedule", "slot_busy"), key))\n',
              '        return ((query("schedule", "lock_schedule"), key), (query("schedule", "slot_busy"), key),\n'
              '                (query("schedule", "pending_of_active_generation"), key), '
              '(query("schedule", "fences_and_cutoff"), {}))\n'),
         Edit("processor.py", "        schedules, fences, waiting, busy = s.read_rows\n",
              "        schedules, busy, waiting, fences = s.read_rows\n")),
        slice=("fence-beside-decision",),
        probe="the order of the statements of one decision in the server's statement log"),
)

BY_NAME = {v.name: v for v in VARIANTS}
