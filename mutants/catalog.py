"""The mutant catalog: one broken rule each, named by the spec sentence it breaks."""

from __future__ import annotations

from barriers.catalog import CANCEL_BARRIERS

from .edits import Edit, Mutant

ONE_TRANSACTION = "It writes the occurrence disposition and cursor movement in one scoped transaction."
DETERMINISTIC = ("It uses a deterministic target command, activity, Work ID, and idempotency identity derived from "
                 "the immutable occurrence.")
COMPARE_OR_RETURN = ("The occurrence link is compare-or-return: if no link exists, write the exact accepted Work "
                     "identity and materialized state; otherwise return the stored tuple only when it matches exactly.")
LEASE = ("A trusted dispatcher claims one payload-free dispatch queue row under a lease and commits before "
         "accessing scoped data.")
CUTOFF = "A processor evaluates nominal instants in (cursor_utc, cutoff_utc], where the cutoff comes from PostgreSQL."
COALESCED_FORWARD = "A pending coalesced row may only move its last nominal instant forward."
FENCE_FIRST = "A mismatch suspends the Schedule before it moves the cursor or accepts Work."
ONE_COALESCED = ("Subsequent overlapping nominal instants are represented by at most one pending coalesced "
                 "occurrence.")
RETRY_KEEPS_SLOT = "Retries, suspended Work, and any still-nonterminal Work do not release the slot."
QUEUE_ONE = "For the default QueueOne plus RunOnce policy, a nonterminal target occupies the Schedule-wide slot."
EXACT_GRANTS = "The role recipe validates exact role grants after child creation"
NEXT_PASS = "The next bounded Schedule pass materializes the coalesced occurrence without waiting for another interval."
ONE_CAPTURE = "Schedule create and update commands capture one PostgreSQL transaction_timestamp() value."
SUPERSEDE = ("A generation update supersedes old unstarted occurrences, but an already started old-generation "
             "target remains durable history and continues to occupy its slot.")
ANOMALY = "An anomalously large forward cutoff suspends the Schedule without moving its cursor."
CLAIM_LIMITS = ("The function rejects blank or control-character lease owners and lease durations that are null, "
                "non-positive, or longer than ten minutes before it changes a row, so an untrusted dispatcher call "
                "cannot strand a Schedule in a non-expiring or excessively long lease.")
LOCAL_SCOPE = ("A scoped runtime transaction sets the existing local scope setting, validates "
               "store/runtime/scope/generation fences, records Schedule facts, and bridges a pending occurrence.")
# Adapter-protocol rules (barriers/PROTOCOL.md), which an implementation can break as well as a spec sentence.
HONEST_FAIL = "`fail` tells the host nothing was applied"
CLIENT_DEADLINE = "A lost COMMIT reply must turn into an error within it, not a hang."
EVIDENCE = ("Clock or evaluator mismatches suspend before target acceptance; preserve their durable evidence and "
            "create a new Schedule identity after resolving the cause.")
LOCKED_FENCE = ("Before evaluating a due Schedule, the scoped processor compares its persisted runtime epoch and scope "
                "generation with the active store epoch and locked scope generation.")
WORK_CLOCK = ("The later Work acceptance timestamp is deliberately not used: the Work protocol owns a separate "
              "clock_timestamp() sample.")
PASS_COUNTS = "An `ok` answer of `process-due` counts what its pass committed"
SAFETY_WINDOW = ("A forward cutoff inside the configured safety window creates one declared recovery range and "
                 "follows the persisted misfire policy.")
BOUNDED = "processes at most MaximumSchedules schedules (default 1)"
EMPTY_PASS = "returns zero counts for an empty pass"
BEHIND_CURSOR = "A cutoff at or behind the cursor is a no-op."
PASSIVE = "PostgreSqlDurableScheduleProcessor is provider-specific and passive."
REQUEUE = "If one exists, it requeues the Schedule dispatch row in that same transaction."
CANCEL_LEASE = "observes cancellation before starting the next lease"
# Where the reference's adapter takes a barrier-reply `cancel-pass` (reference/adapter.py `_barrier`).
CANCEL_PASS_REPLY = '        if reply.get("action") == "cancel-pass" and self._pass_token is not None:\n'


def _short(barrier: str) -> str:
    """schedule-claim-after-commit -> claim."""
    return barrier.removeprefix("schedule-").removesuffix("-after-commit")


WORK_INSIDE_LINK = ("The Work bridge calls the existing PostgreSqlDurableWorkTransactionWriter.EnqueueAsync("
                    "NpgsqlTransaction, DurableWorkRequest) inside the occurrence-link transaction.")
GATE_A_STATES = ("Gate A writes only pending, materialized, and superseded; it does not claim individual occurrence "
                 "rows.")
DEFINITION_ROW = ("The active schedule_definition row records lifecycle state, revision, active generation, runtime "
                  "epoch, scope generation, and the materialization cursor.")
ACCEPTANCE_ANCHOR = ("It is the only anchor for After, and the anchor for an Every schedule when the caller did not "
                     "supply one.")
RELEASE_ONLY_EPOCH = ("ReleaseAfterRecovery can release an old runtime epoch only; it cannot move the cursor or clear "
                      "an evaluator/clock suspension.")
SCOPE_ONLY_NEEDS_UPDATE = ("a scope-generation-only mismatch requires a public update or delete/recreate to "
                           "establish a new generation.")
PROBLEM_RESULTS = "Schedule API validation and domain conflicts return durable problem results."
RELEASE_ADMITTED = "Recovery release applies only to admitted stale-runtime-epoch fences."
RELEASE_REBINDS = "An old runtime epoch can use ReleaseAfterRecovery, which rebinds the current scope generation"
ONE_ACCEPTANCE = "It is persisted on the command and immutable generation as accepted_at_utc."
CRASH_SURVIVES = "What was committed before the crash stays."
UTC_UNCHANGED = "At and explicitly anchored Every schedules persist their UTC value unchanged."
SCHEMA_VERSION = "Runtime version 4 requires it before Schedule operations run."
CANCEL_KEEPS = "Cancellation does not roll back a committed Schedule fact."
BRIDGE_PROOF = ("A bridge must prove the connection's current_user is the configured runtime role before it sets "
                "local scope state.")
BRIDGE_NOT_RETRIABLE = "Access-denied and non-runtime bridge-role failures are not retriable."
HIGH_WATER = "The cursor is a durable UTC high-water mark."
NEVER_REWRITES = ("Updating an active or suspended definition creates a new generation and never rewrites its target "
                  "snapshot.")
# An implementation's own migrations (`--migrations`) without the schema's guard triggers: the behaviour is then seen
# only in what the implementation writes.
NO_CURSOR_TRIGGER = Edit("migrations/0004_schedule_protocol.sql",
                         "create trigger cursor_never_moves_backwards before update on "
                         "appsurface_durable.schedule_definitions\n"
                         "    for each row execute function appsurface_durable.cursor_never_moves_backwards();\n", "")
SQLSTATE_RETRY = ("Database timeouts, disconnects, and SQLSTATE failures abort the transaction and require a bounded "
                  "retry only after rollback.")

MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "cursor-own-transaction", ONE_TRANSACTION,
        "The decision transaction records the occurrence; the cursor moves later, in a transaction of its own.",
        (Edit("processor.py",
              '            s.defer(query("schedule", "move_cursor"), {"schedule_id": schedule_id, "cursor_utc": cutoff})\n',
              '            self._cursor_later = {"schedule_id": schedule_id, "cursor_utc": cutoff}\n'),
         Edit("processor.py",
              "            bridge = self._decide(s, claim, decided)\n",
              "            self._cursor_later = None\n            bridge = self._decide(s, claim, decided)\n"),
         Edit("processor.py",
              '        barriers.hit("schedule-decision-after-commit", **context)\n',
              '        barriers.hit("schedule-decision-after-commit", **context)\n'
              '        if self._cursor_later is not None:\n'
              '            with self.runtime.scoped(scope_id, self.runtime_role) as s:\n'
              '                s.execute(query("schedule", "move_cursor"), self._cursor_later)\n')),
        slice=("*/schedule-decision-after-commit/kill/*",)),
    Mutant(
        "random-work-id", DETERMINISTIC,
        "The bridge accepts Work under a random Work ID instead of the one derived from the occurrence.",
        (Edit("processor.py",
              "        work = work_identity(identity, generation.target.command)\n",
              "        work = work_identity(identity, generation.target.command)\n"
              "        work = type(work)(uuid.uuid4(), work.idempotency_key, work.command, work.activity)\n"),),
        slice=("at-single",)),
    Mutant(
        "link-without-compare", COMPARE_OR_RETURN,
        "The bridge writes the occurrence link without comparing it with the Work the writer returned under the "
        "occurrence's idempotency key, so another caller's Work there goes unnoticed.",
        (Edit("processor.py", "        if under_key != derived:\n", "        if False:\n"),),
        slice=("link-conflict",)),
    Mutant(
        "no-lease-fence", LEASE,
        "A processor whose lease expired and was taken over keeps writing: the dispatch revision is not compared.",
        (Edit("processor.py",
              'if dispatch is None or dispatch["dispatch_revision"] != claim.dispatch_revision '
              'or dispatch["lease_state"] != "leased":',
              "if dispatch is None:"),),
        slice=("*/schedule-claim-after-commit/pause/*",)),
    Mutant(
        "retry-skips-lease-fence", LEASE,
        "A scoped transaction retried after a rollback trusts the lease it held before: the retry does not compare "
        "the dispatch revision, so a processor whose session was ended while another took its lease over writes "
        "again when it retries.",
        (Edit("processor.py",
              "            try:\n                return attempt()\n",
              "            self._retried = remaining < RETRIES - 1\n            try:\n                return attempt()\n"),
         Edit("processor.py",
              'if dispatch is None or dispatch["dispatch_revision"] != claim.dispatch_revision '
              'or dispatch["lease_state"] != "leased":',
              'if dispatch is None or (not getattr(self, "_retried", False) and (dispatch["dispatch_revision"] '
              '!= claim.dispatch_revision or dispatch["lease_state"] != "leased")):')),
        slice=("*/schedule-decision-before-commit/stall/*",)),
    Mutant(
        "processor-clock-cutoff", CUTOFF,
        "The cutoff is the processor's own OS clock (Python's datetime.now) instead of PostgreSQL's transaction "
        "time.",
        (Edit("processor.py",
              '        cutoff = state.fences["cutoff_utc"]\n',
              "        cutoff = datetime.now().astimezone()\n"),),
        # The skewed slice: processors whose OS clock is a day ahead or behind (the fault-free runs).
        slice=("every-skewed-ahead", "race-skewed-clocks")),
    Mutant(
        "coalesced-range-moved", COALESCED_FORWARD,
        "Extending a pending coalesced occurrence moves its whole range forward (its first instant too) instead "
        "of moving only its last instant.",
        (Edit("queries/schedule.sql",
              "update appsurface_durable.schedule_occurrences set last_nominal_utc = %(last_nominal_utc)s\n",
              "update appsurface_durable.schedule_occurrences\n"
              "   set first_nominal_utc = first_nominal_utc + (%(last_nominal_utc)s - last_nominal_utc),\n"
              "       last_nominal_utc = %(last_nominal_utc)s\n"),),
        slice=("coalesce-terminal-callback",)),
    Mutant(
        "fences-after-cursor", FENCE_FIRST,
        "The decision records occurrences and moves the cursor first, and compares the fences afterwards.",
        (Edit("processor.py",
              "        dispatch, definition, generation = state.dispatch, state.definition, state.generation\n"
              "        if generation is None or not self._check_fences(s, state, counts):\n"
              "            self._release(s, dispatch, None)\n"
              "            return False\n"
              "        schedule_id = claim.schedule_id\n",
              "        dispatch, definition, generation = state.dispatch, state.definition, state.generation\n"
              "        if generation is None:\n"
              "            self._release(s, dispatch, None)\n"
              "            return False\n"
              "        schedule_id = claim.schedule_id\n"),
         Edit("processor.py",
              "            cursor = cutoff\n        # The disposition adds",
              "            cursor = cutoff\n"
              # The suspension keeps the moved cursor: the schema refuses a backwards move outright.
              "        definition[\"cursor_utc\"] = cursor\n"
              "        if not self._check_fences(s, state, counts):\n"
              "            self._release(s, dispatch, None)\n"
              "            return False\n"
              "        # The disposition adds")),
        slice=("epoch-release", "scope-generation-repair")),
    Mutant(
        "coalesced-added-twice", ONE_COALESCED,
        "Overlapping instants add a new pending coalesced occurrence each pass instead of extending the one "
        "waiting (and the schema's one-pending-coalesced index is gone).",
        (Edit("processor.py",
              '            coalesced = next((o for o in waiting if o["occurrence_kind"] == "coalesced"), None)\n',
              "            coalesced = None\n"),
         Edit("migrations/0004_schedule_protocol.sql",
              "create unique index schedule_occurrences_one_pending_coalesced\n"
              "    on appsurface_durable.schedule_occurrences (scope_id, schedule_id, generation)\n"
              "    where occurrence_kind = 'coalesced' and state = 'pending';\n", "")),
        slice=("coalesce-terminal-callback",)),
    Mutant(
        "retry-releases-slot", RETRY_KEEPS_SLOT,
        "Work in retry no longer occupies the QueueOne slot.",
        (Edit("queries/schedule.sql",
              "          not in ('succeeded', 'failed', 'canceled')\n) as busy;",
              "          not in ('succeeded', 'failed', 'canceled', 'retrying')\n) as busy;"),),
        slice=("held-slot",), also=(QUEUE_ONE,)),
    Mutant(
        "superseded-materialized", SUPERSEDE,
        "The bridge still takes a superseded occurrence of an old generation as its candidate and materializes it.",
        (Edit("processor.py", "        occurrence = due.candidate(state.slot_busy, state.waiting)\n",
              "        superseded = s.all(\"select * from appsurface_durable.schedule_occurrences where schedule_id = \"\n"
              "                           \"%(schedule_id)s and state = 'superseded'\", {\"schedule_id\": schedule_id})\n"
              "        occurrence = due.candidate(state.slot_busy, superseded + state.waiting)\n"),
         Edit("processor.py", "identity = OccurrenceIdentity(scope_id, schedule_id, gen, ",
              'identity = OccurrenceIdentity(scope_id, schedule_id, occurrence["generation"], ')),
        slice=("generation-update-supersedes",)),
    Mutant(
        "anomaly-processed", ANOMALY,
        "A forward cutoff far past the safety window is processed as a recovery range instead of suspending.",
        (Edit("evaluator.py", "    if lateness > safety_window:\n", "    if lateness > safety_window * 1_000_000:\n"),),
        slice=("anomaly-suspends",)),
    Mutant(
        "claim-long-lease", CLAIM_LIMITS,
        "claim_schedule_dispatch accepts leases up to an hour, so a 30-minute lease is granted.",
        (Edit("migrations/0004_schedule_protocol.sql", "expires_utc > p_claimed_at + interval '10 minutes'",
              "expires_utc > p_claimed_at + interval '1 hour'"),),
        slice=("claim-refusals",)),
    # The claim's limits and the local scope as an implementation's own schema can break them: the schema stage
    # (case `schema-stage`, testhost/runs/schema_probes.py) builds the mutant's stores from its migrations and probes them.
    Mutant(
        "claim-cap-on-epoch", CLAIM_LIMITS,
        "The ten-minute cap is checked on the duration's extract(epoch), which counts a month as 30 days, not where "
        "the lease ends: '1 mon -30 days 00:05:00' claimed on 15 January is granted, a lease of a day and five "
        "minutes.",
        (Edit("migrations/0004_schedule_protocol.sql",
              "    if expires_utc is null or expires_utc <= p_claimed_at or expires_utc > p_claimed_at + "
              "interval '10 minutes' then\n",
              "    if expires_utc is null or extract(epoch from p_lease_duration) <= 0\n"
              "       or extract(epoch from p_lease_duration) > 600 then\n"),),
        slice=("schema-stage",)),
    Mutant(
        "claim-cap-at-whole-seconds", CLAIM_LIMITS,
        "The cap compares the lease's end at whole seconds, so a lease of ten minutes and one microsecond is "
        "granted.",
        (Edit("migrations/0004_schedule_protocol.sql", "expires_utc > p_claimed_at + interval '10 minutes'",
              "date_trunc('second', expires_utc) > p_claimed_at + interval '10 minutes'"),),
        slice=("schema-stage",)),
    Mutant(
        "claim-admits-zero-end", CLAIM_LIMITS,
        "A lease ending at the claim itself is granted ('0 seconds', '1 day -24:00:00'): a non-positive duration.",
        (Edit("migrations/0004_schedule_protocol.sql", "expires_utc <= p_claimed_at or",
              "expires_utc < p_claimed_at or"),),
        slice=("schema-stage",)),
    Mutant(
        "claim-refuses-ten-minutes", CLAIM_LIMITS,
        "A lease of exactly ten minutes is refused, though it is not longer than ten minutes.",
        (Edit("migrations/0004_schedule_protocol.sql", "expires_utc > p_claimed_at + interval '10 minutes'",
              "expires_utc >= p_claimed_at + interval '10 minutes'"),),
        slice=("schema-stage",)),
    Mutant(
        "owner-blank-by-ascii-only", CLAIM_LIMITS,
        "A lease owner is judged blank by ASCII white space alone, so an owner of only a no-break space, an "
        "ideographic space or a Hangul filler is granted.",
        (Edit("migrations/0004_schedule_protocol.sql",
              "regexp_replace(p_lease_owner, appsurface_durable.blank_code_points(), '', 'g') = ''",
              "btrim(p_lease_owner, E' \\t\\n\\r') = ''"),),
        slice=("schema-stage",)),
    Mutant(
        "owner-format-characters-admitted", CLAIM_LIMITS,
        "A lease owner is checked for C0 and C1 controls only, so one holding a format character or a line "
        "separator (a zero width joiner, a right-to-left override, U+2028) is granted.",
        (Edit("migrations/0004_schedule_protocol.sql", "p_lease_owner ~ appsurface_durable.control_code_points()",
              "p_lease_owner ~ '[\\u0001-\\u001F\\u007F-\\u009F]'"),),
        slice=("schema-stage",)),
    Mutant(
        "scope-honoured-at-session-level", LOCAL_SCOPE,
        "current_scope() takes the scope from the setting whatever transaction bound it, so a value left at "
        "session level on a pooled connection (set_config(..., false)) authorizes every later transaction there.",
        (Edit("migrations/0002_scopes.sql", "                     = pg_current_xact_id_if_assigned()::text\n",
              "                     is not null\n"),),
        slice=("schema-stage",)),
    Mutant(
        "scope-bound-to-the-session", LOCAL_SCOPE,
        "set_local_scope binds the scope to the connection's backend, at session level, instead of to its "
        "transaction, so the scope one transaction set still authorizes the next transaction on that connection.",
        (Edit("migrations/0002_scopes.sql", "pg_current_xact_id()::text || '/' || coalesce(p_scope_id, ''), true)",
              "pg_backend_pid()::text || '/' || coalesce(p_scope_id, ''), false)"),
         Edit("migrations/0002_scopes.sql", "                     = pg_current_xact_id_if_assigned()::text\n",
              "                     = pg_backend_pid()::text\n")),
        slice=("schema-stage",)),
    Mutant(
        "release-clears-clock-suspension", RELEASE_ONLY_EPOCH,
        "ReleaseAfterRecovery also clears a clock-anomaly suspension.",
        (Edit("client.py", 'if current["suspension_reason"] != "runtime-epoch":',
              'if current["suspension_reason"] not in ("runtime-epoch", "clock-anomaly"):'),),
        slice=("release-refuses-clock-suspension",)),
    Mutant(
        "fail-after-lost-commit", HONEST_FAIL,
        "A COMMIT whose reply was lost is taken for a rollback: the pass gives up and answers `fail`, though the "
        "server committed.",
        (Edit("processor.py",
              "            except CommitOutcomeUnknown:\n"
              "                if not retry_unknown or remaining == 0:\n"
              "                    raise\n",
              "            except CommitOutcomeUnknown as exc:\n"
              "                raise IdempotencyConflict(f\"taken for a rollback: {exc}\") from exc\n"),
         # ... and answered as a definite failure, not as a pass that committed its claim first.
         Edit("processor.py",
              "            except DurableError as exc:\n                # Access denied, a bridge role refused",
              "            except IdempotencyConflict:\n                raise\n"
              "            except DurableError as exc:\n                # Access denied, a bridge role refused")),
        slice=("at-single/schedule-decision-before-commit/lost-commit-reply/*",
               "at-single/schedule-claim-before-commit/lost-commit-reply/*")),
    Mutant(
        "no-client-deadline", CLIENT_DEADLINE,
        "CRASHPROOF_DEADLINE_S is ignored: a round trip whose reply never comes waits for an hour.",
        (Edit("adapter.py", 'self.deadline = float(env.get("CRASHPROOF_DEADLINE_S", "30"))',
              "self.deadline = 3600.0"),),
        slice=("at-single/schedule-decision-before-commit/lost-commit-reply/*",)),
    Mutant(
        "no-processor-history", EVIDENCE,
        "The processor writes no schedule_history rows: suspensions and skipped recovery ranges leave no evidence.",
        (Edit("processor.py",
              '        s.defer(query("schedule", "record_history"), {"schedule_id": definition["schedule_id"], '
              '"event": event,\n',
              '        return\n'
              '        s.defer(query("schedule", "record_history"), {"schedule_id": definition["schedule_id"], '
              '"event": event,\n'),),
        slice=("skip-misfire", "anomaly-suspends")),
    Mutant(
        "scope-generation-unlocked", LOCKED_FENCE,
        "The decision reads the scope generation without locking the scope row, so an operator's change commits "
        "while the decision is open and the decision then commits on the stale generation.",
        (Edit("queries/schedule.sql",
              "select f.*, transaction_timestamp() as cutoff_utc from appsurface_durable.locked_scope_fences() f;",
              "select (select r.runtime_epoch from appsurface_durable.store_runtime r) as runtime_epoch, "
              "s.generation as scope_generation, s.routing_id, transaction_timestamp() as cutoff_utc "
              "from appsurface_durable.scopes s where s.scope_id = appsurface_durable.current_scope();"),),
        slice=("fence-beside-decision",)),
    Mutant(
        "work-accepted-at-transaction-time", WORK_CLOCK,
        "The Work store stamps acceptance with the bridge's transaction_timestamp() instead of sampling its own "
        "clock_timestamp().",
        (Edit("queries/work.sql",
              "    insert into appsurface_durable.work_items (scope_id, work_id, idempotency_key, command, activity, "
              "payload)\n    values (appsurface_durable.current_scope(), %(work_id)s, %(idempotency_key)s, %(command)s, "
              "%(activity)s,\n            %(payload)s)\n",
              "    insert into appsurface_durable.work_items (scope_id, work_id, idempotency_key, command, activity, "
              "payload,\n                                           accepted_at_utc)\n"
              "    values (appsurface_durable.current_scope(), %(work_id)s, %(idempotency_key)s, %(command)s, "
              "%(activity)s,\n            %(payload)s, transaction_timestamp())\n"),),
        slice=("work-own-clock",)),
    Mutant(
        "decision-counted-before-commit", PASS_COUNTS,
        "The decision counts straight into the pass's tally before its COMMIT, so a decision rolled back by a "
        "fault and retried is counted twice.",
        (Edit("processor.py", "            bridge = self._decide(s, claim, decided)\n",
              "            bridge = self._decide(s, claim, counts)\n"),
         Edit("processor.py", "        counts.add(decided)\n        barriers.hit(\"schedule-decision-after-commit\"",
              "        barriers.hit(\"schedule-decision-after-commit\"")),
        slice=("at-single/schedule-decision-before-commit/disconnect/*",)),
    Mutant(
        "safety-window-ignored", SAFETY_WINDOW,
        "The decision judges lateness against the default window of 3,600 s, not the generation's configured one.",
        (Edit("processor.py", "evaluation = evaluate(generation.timing, cursor, cutoff, generation.safety_window)",
              "evaluation = evaluate(generation.timing, cursor, cutoff, timedelta(seconds=3600))"),),
        # Both sides of the configured window: past a window shorter than the default it decides a recovery range
        # where the spec suspends (safety-window-sides' 120 s schedule shows it).
        slice=("safety-window-sides",), also=(ANOMALY,)),
    Mutant(
        "maximum-schedules-ignored", BOUNDED,
        "A pass claims every due schedule, whatever maximum_schedules it was asked for.",
        (Edit("processor.py", "        for _ in range(request.maximum_schedules):\n",
              "        for _ in range(max(request.maximum_schedules, 64)):\n"),),
        slice=("safety-window-sides",)),
    Mutant(
        "maximum-schedules-plus-one", BOUNDED,
        "A pass claims one schedule more than the maximum_schedules it was asked for (off by one at the bound).",
        (Edit("processor.py", "        for _ in range(request.maximum_schedules):\n",
              "        for _ in range(request.maximum_schedules + 1):\n"),),
        slice=("safety-window-sides",)),
    Mutant(
        "empty-pass-fails", EMPTY_PASS,
        "A pass whose claim finds nothing due answers `fail` (nothing to do) instead of `ok` with zero counts.",
        (Edit("processor.py", "            if claim is None:\n                break\n",
              "            if claim is None:\n                if counts.claimed == 0:\n"
              "                    raise LeaseLost(\"nothing is due\")\n                break\n"),),
        slice=("safety-window-sides", "clock-behind-cursor")),
    Mutant(
        "cancel-after-claim", CANCEL_LEASE,
        "A cancelled pass claims the next lease before it looks at the cancellation, then stops and leaves that "
        "lease held until it expires.",
        (Edit("processor.py", "            if cancel is not None and cancel.cancelled:\n                break\n"
              "            try:\n                claim = self._retrying(",
              "            try:\n                claim = self._retrying("),
         Edit("processor.py", "            if claim is None:\n                break\n            counts.claimed += 1\n",
              "            if claim is None:\n                break\n            counts.claimed += 1\n"
              "            if cancel is not None and cancel.cancelled:\n                break\n")),
        slice=("cancel-between-leases",)),
    Mutant(
        "behind-cursor-suspends", BEHIND_CURSOR,
        "A cutoff behind the cursor (the server clock went back) is taken for a clock anomaly and suspends the "
        "schedule instead of being a no-op.",
        (Edit("evaluator.py", '    if cutoff <= cursor:\n        return NoOp("cutoff-not-after-cursor")\n',
              '    if cutoff < cursor:\n        return Anomaly(cursor, cutoff, cursor - cutoff, safety_window)\n'
              '    if cutoff == cursor:\n        return NoOp("cutoff-not-after-cursor")\n'),),
        slice=("clock-behind-cursor",)),
    Mutant(
        "cursor-end-included", CUTOFF,
        "The decision evaluates [cursor_utc, cutoff_utc]: an instant the cursor stands exactly on is due again.",
        (Edit("evaluator.py", "    first = next_after(timing, cursor)\n    if first is None or first > cutoff:\n",
              "    cursor = cursor - MICROSECOND\n    first = next_after(timing, cursor)\n"
              "    if first is None or first > cutoff:\n"),),
        slice=("cutoff-on-instant",)),
    Mutant(
        "cutoff-end-excluded", CUTOFF,
        "The decision evaluates (cursor_utc, cutoff_utc): an instant exactly at the cutoff is left out, and the cursor "
        "still moves to the cutoff, so that instant is never decided.",
        (Edit("evaluator.py", "    if first is None or first > cutoff:\n        return NoOp(\"nothing-due\")\n",
              "    if first is None or first >= cutoff:\n        return NoOp(\"nothing-due\")\n"
              "    cutoff = cutoff - MICROSECOND  # the range's end is open\n"),),
        slice=("cutoff-on-instant",)),
    Mutant(
        "cutoff-end-deferred", CUTOFF,
        "The decision evaluates (cursor_utc, cutoff_utc) and moves the cursor a microsecond short of the cutoff: an "
        "instant exactly at the cutoff is left to a later pass, which decides it late.",
        (Edit("processor.py", '        cutoff = state.fences["cutoff_utc"]\n',
              '        cutoff = state.fences["cutoff_utc"] - timedelta(microseconds=1)  # the range\'s end is open\n'),),
        slice=("cutoff-on-instant",)),
    Mutant(
        "single-instant-end-excluded", CUTOFF,
        "An At or After instant is due only once the cutoff is past it (cursor_utc < instant < cutoff_utc): a pass whose "
        "cutoff is exactly the instant decides nothing, and a later pass decides it late.",
        (Edit("evaluator.py", "    if first is None or first > cutoff:\n",
              "    if first is None or first > cutoff or (timing.kind != \"every\" and first == cutoff):\n"),),
        slice=("single-instant-on-cutoff",)),
    Mutant(
        "update-moves-cursor-back", HIGH_WATER,
        "An update sets the cursor to its accepted_at_utc instead of max(cursor, accepted_at_utc), so an update "
        "committed while the server clock stands behind the cursor moves it back (its own migrations carry no trigger "
        "that refuses a backward move).",
        (Edit("client.py", '            cursor = max(current["cursor_utc"], accepted_at)\n',
              '            cursor = accepted_at\n'), NO_CURSOR_TRIGGER),
        slice=("update-behind-cursor",)),
    Mutant(
        "update-range-from-acceptance", HIGH_WATER,
        "An update starts the new generation's range at its acceptance, inclusive, whenever the acceptance is not "
        "behind the cursor: the cursor is set a microsecond before accepted_at_utc. An update committed exactly on the "
        "cursor moves it back that microsecond, and the instant there is decided again by the new generation (its own "
        "migrations carry no trigger that refuses a backward move).",
        (Edit("client.py", '            cursor = max(current["cursor_utc"], accepted_at)\n',
              '            cursor = (accepted_at - MICROSECOND if accepted_at >= current["cursor_utc"]\n'
              '                      else current["cursor_utc"])\n'), NO_CURSOR_TRIGGER),
        slice=("update-on-cursor",)),
    Mutant(
        "older-generations-retargeted", NEVER_REWRITES,
        "An update also writes its new target (command and payload) into the older generations' rows, as a definition "
        "kept in one place would (its own migrations grant the runtime UPDATE on the generations and carry no trigger "
        "that refuses a rewrite).",
        (Edit("client.py",
              "            superseded = s.all(query(\"schedule\", \"supersede_pending\"),\n",
              "            s.execute(\"update appsurface_durable.schedule_generations set target_command = %(command)s, \"\n"
              "                      \"target_payload = %(payload)s where scope_id = appsurface_durable.current_scope() \"\n"
              "                      \"and schedule_id = %(schedule_id)s and generation < %(generation)s\",\n"
              "                      {\"command\": spec.target.command, \"payload\": Jsonb(spec.target.payload),\n"
              "                       \"schedule_id\": schedule_id, \"generation\": generation})\n"
              "            superseded = s.all(query(\"schedule\", \"supersede_pending\"),\n"),
         Edit("migrations/0004_schedule_protocol.sql",
              "create trigger generations_are_immutable before update or delete on appsurface_durable.schedule_generations\n"
              "    for each row execute function appsurface_durable.generations_are_immutable();\n", ""),
         Edit("migrations/0004_schedule_protocol.sql",
              "grant select, insert on appsurface_durable.schedule_generations to appsurface_durable_runtime;",
              "grant select, insert, update on appsurface_durable.schedule_generations to appsurface_durable_runtime;")),
        slice=("update-behind-cursor",)),
    Mutant(
        "window-equal-suspends", SAFETY_WINDOW,
        "A lateness equal to the safety window is taken for an anomaly (lateness >= window) and suspends the schedule "
        "instead of deciding its recovery range.",
        (Edit("evaluator.py", "    if lateness > safety_window:\n", "    if lateness >= safety_window:\n"),),
        slice=("lateness-on-window",)),
    Mutant(
        "lateness-whole-seconds", ANOMALY,
        "Lateness and safety window are compared in whole seconds, so a cutoff late by the window and less than a "
        "second more is taken as inside it and decides a recovery range instead of suspending.",
        (Edit("evaluator.py", "    if lateness > safety_window:\n",
              "    if lateness // timedelta(seconds=1) > safety_window // timedelta(seconds=1):\n"),),
        slice=("lateness-on-window",)),
    Mutant(
        "hosted-processor", PASSIVE,
        "The adapter hosts its processor: once no request has come for half a second, a thread of its own runs "
        "passes (reporting no barrier), so due schedules are decided with nothing asked.",
        (Edit("adapter.py", "import json\n", "import json\nimport threading\nimport time\n"),
         Edit("adapter.py", '        """Report the hit and block until the host answers; the host may kill us '
              'meanwhile."""\n',
              '        """Report the hit and block until the host answers; the host may kill us meanwhile."""\n'
              "        if threading.current_thread() is not threading.main_thread():\n            return\n"),
         Edit("adapter.py", '            if request.get("type") == "shutdown":\n                break\n'
              "            self.send(self.respond(request))\n",
              '            if request.get("type") == "shutdown":\n                break\n'
              "            self._idle_since = None\n            self.send(self.respond(request))\n"
              "            self._idle_since = time.monotonic()\n"),
         Edit("adapter.py", "        for line in self.stdin:\n            if not line.strip():\n",
              "        self._idle_since = time.monotonic()\n"
              "        threading.Thread(target=self._hosted, daemon=True).start()\n"
              "        for line in self.stdin:\n            if not line.strip():\n"),
         Edit("adapter.py", "\ndef main() -> int:\n",
              "    def _hosted(self) -> None:\n"
              "        processor = ScheduleProcessor(self.runtime_dsn, self.dispatcher_dsn, deadline=self.deadline)\n"
              "        while True:\n"
              "            time.sleep(0.1)\n"
              "            idle = self._idle_since\n"
              "            if idle is None or time.monotonic() - idle < 0.5:\n"
              "                continue\n"
              "            try:\n"
              "                processor.process_due(ProcessRequest(maximum_schedules=64, "
              "lease_duration=timedelta(seconds=2)))\n"
              "            except Exception:  # noqa: BLE001\n"
              "                pass\n"
              "\n\ndef main() -> int:\n")),
        slice=("safety-window-sides",)),
    Mutant(
        "anomaly-leaves-no-evidence", EVIDENCE,
        "A clock-anomaly suspension writes no schedule_history row (other suspensions and skipped ranges still do).",
        (Edit("processor.py", '        s.defer(query("schedule", "record_history"), {"schedule_id": '
              'definition["schedule_id"], "event": event,\n',
              '        if detail.get("reason") == "clock-anomaly":\n            return\n'
              '        s.defer(query("schedule", "record_history"), {"schedule_id": '
              'definition["schedule_id"], "event": event,\n'),),
        slice=("anomaly-suspends",)),
    Mutant(
        "anomaly-evidence-without-cursor", EVIDENCE,
        "A clock-anomaly suspension's history detail leaves out the cursor it kept.",
        (Edit("processor.py", '                "cursor_utc": canonical_instant(cursor), "cutoff_utc": '
              'canonical_instant(cutoff),\n',
              '                "cutoff_utc": canonical_instant(cutoff),\n'),),
        slice=("anomaly-suspends",)),
    Mutant(
        "release-overwrites-requeue", REQUEUE,
        "The lease is released in a transaction of its own after the decision, with the due time the decision "
        "computed, so a Work that reached terminal truth in between has its requeue written over.",
        (Edit("processor.py", "        decided = ProcessCounts()\n",
              "        decided = ProcessCounts()\n        self._release_later = None\n"),
         Edit("processor.py", "        if not may_bridge:\n"
              "            self._release(s, dispatch, next_after(generation.timing, cursor))\n",
              "        if not may_bridge:\n"
              "            self._release_later = {\"dispatch_id\": dispatch[\"dispatch_id\"], "
              "\"due_at_utc\": next_after(generation.timing, cursor)}\n"),
         Edit("processor.py", '        barriers.hit("schedule-decision-after-commit", **context)\n'
              "        if not bridge:\n            return\n",
              '        barriers.hit("schedule-decision-after-commit", **context)\n'
              "        if not bridge:\n"
              "            if self._release_later is not None:\n"
              "                with self.runtime.scoped(scope_id, self.runtime_role) as s:\n"
              '                    s.execute(query("schedule", "release_lease"), self._release_later)\n'
              "            return\n")),
        slice=("coalesce-terminal-callback",)),
    # No barrier sits between the two commits, so no fault at a barrier can separate them: only what the host reads
    # at the barriers (testhost/case/barrier_facts.py) tells two transactions from one.
    Mutant(
        "cursor-committed-beside-decision", ONE_TRANSACTION,
        "The decision transaction records the occurrence; the cursor moves right after its COMMIT, in a transaction "
        "of its own (retried after a lost connection), before the decision's after-commit barrier; a move still lost "
        "is finished by the next decision.",
        (Edit("processor.py",
              '            s.defer(query("schedule", "move_cursor"), {"schedule_id": schedule_id, "cursor_utc": cutoff})\n',
              '            self._cursor_later = {"schedule_id": schedule_id, "cursor_utc": cutoff}\n'),
         Edit("processor.py",
              "            bridge = self._decide(s, claim, decided)\n",
              "            self._cursor_later = None\n            bridge = self._decide(s, claim, decided)\n"),
         Edit("processor.py",
              '        counts.add(decided)\n        barriers.hit("schedule-decision-after-commit", **context)\n',
              '        counts.add(decided)\n'
              '        if self._cursor_later is not None:\n'
              '            later = self._cursor_later\n'
              '\n'
              '            def move():\n'
              '                with self.runtime.scoped(scope_id, self.runtime_role) as s:\n'
              '                    s.execute(query("schedule", "move_cursor"), later)\n'
              '            self._retrying(move, retry_unknown=True)\n'
              '        barriers.hit("schedule-decision-after-commit", **context)\n'),
         # A cursor move lost to a fault after its decision committed is finished by the next decision, which then
         # decides nothing twice: so no fault at a barrier makes this mutant's final state differ from the reference's.
         Edit("processor.py",
              '        cursor = definition["cursor_utc"]\n        evaluation = evaluate(',
              '        cursor = definition["cursor_utc"]\n'
              '        floor = max((o["last_nominal_utc"] for o in state.waiting), default=cursor)\n'
              '        if floor > cursor:\n'
              '            self._cursor_later = {"schedule_id": schedule_id, "cursor_utc": floor}\n'
              '            cursor = floor\n'
              '        evaluation = evaluate(')),
        slice=("at-single",)),
    Mutant(
        "work-accepted-in-own-transaction", WORK_INSIDE_LINK,
        "The bridge accepts the Work in a transaction of its own on a second runtime session, committed before the "
        "bridge links it.",
        (Edit("processor.py",
              "        accepted = self.writer.enqueue(s, WorkRequest(work.work_id, work.idempotency_key, work.command,\n"
              "                                                      work.activity, payload), compare=False)\n",
              "        side = Session(self.runtime_dsn, deadline=self.deadline)\n"
              "        try:\n"
              "            with side.scoped(scope_id, self.runtime_role) as w:\n"
              "                accepted = self.writer.enqueue(w, WorkRequest(work.work_id, work.idempotency_key, "
              "work.command,\n"
              "                                                              work.activity, payload), compare=False)\n"
              "        finally:\n"
              "            side.close()\n"),),
        slice=("at-single",)),
    Mutant(
        "transient-claimed-occurrence", GATE_A_STATES,
        "The decision writes a new nominal or recovery occurrence as `claimed` and the bridge takes it from there to "
        "`materialized`, so the final state shows only Gate A's states.",
        (Edit("queries/schedule.sql",
              "        %(first_nominal_utc)s, %(last_nominal_utc)s, 'pending', transaction_timestamp());\n",
              "        %(first_nominal_utc)s, %(last_nominal_utc)s,\n"
              "        case when %(occurrence_kind)s = 'coalesced' then 'pending' else 'claimed' end, "
              "transaction_timestamp());\n"),
         Edit("queries/schedule.sql",
              "where o.scope_id = appsurface_durable.current_scope() and o.schedule_id = %(schedule_id)s and "
              "o.state = 'pending'\n",
              "where o.scope_id = appsurface_durable.current_scope() and o.schedule_id = %(schedule_id)s and "
              "o.state in ('pending', 'claimed')\n")),
        slice=("at-single",)),
    Mutant(
        "refused-release-bumps-revision", RELEASE_ADMITTED,
        "ReleaseAfterRecovery of an active schedule is refused, but only after it wrote the definition's next "
        "revision: the refusal changed a row.",
        (Edit("client.py",
              '            if current["lifecycle_state"] != "suspended":\n'
              '                return problems.release_refused(schedule_id, "it is not suspended")\n',
              '            if current["lifecycle_state"] != "suspended":\n'
              '                self._advance(s, current)\n'
              '                return problems.release_refused(schedule_id, "it is not suspended")\n'),),
        slice=("client-commands",)),
    Mutant(
        "stale-revision-applied", PROBLEM_RESULTS,
        "A command's expected_revision is not compared: an update that read a stale revision is applied.",
        (Edit("client.py", '        if current["revision"] != expected_revision:\n',
              '        if False:\n'),),
        slice=("client-commands",)),
    Mutant(
        "repeated-command-id-taken-as-new", PROBLEM_RESULTS,
        "A command ID already accepted for another schedule is taken for a new command, so the create fails on "
        "the command's key instead of answering the command-conflict problem.",
        (Edit("client.py", "                return accepted_at, seen, problems.command_conflict(command_id)\n",
              "                return accepted_at, None, None\n"),),
        slice=("client-commands",)),
    Mutant(
        "every-interval-not-validated", PROBLEM_RESULTS,
        "An Every interval is not validated: an interval of zero reaches the database instead of answering the "
        "validation problem.",
        (Edit("model.py", "        if not _positive(spec.every):\n", "        if False:\n"),),
        slice=("client-commands",)),
    Mutant(
        "command-accepted-at-own-sample", ONE_ACCEPTANCE,
        "The command row records a clock_timestamp() sample of its own instead of the transaction_timestamp() the "
        "generation carries.",
        (Edit("queries/schedule.sql", "        %(accepted_at_utc)s, %(generation)s, %(revision)s);",
              "        clock_timestamp(), %(generation)s, %(revision)s);"),),
        slice=("client-commands",), also=(ONE_CAPTURE,)),
    Mutant(
        "anchor-whole-seconds", UTC_UNCHANGED,
        "An explicit Every anchor is stored truncated to whole seconds.",
        (Edit("client.py", "    anchor = spec.anchor if spec.anchor is not None else",
              "    anchor = spec.anchor.replace(microsecond=0) if spec.anchor is not None else"),),
        slice=("client-commands",)),
    Mutant(
        "release-keeps-scope-generation", RELEASE_REBINDS,
        "ReleaseAfterRecovery rebinds the runtime epoch only, so a schedule whose scope generation advanced too "
        "stays bound to the old one.",
        (Edit("client.py",
              'runtime_epoch=fences["runtime_epoch"], scope_generation=fences["scope_generation"])',
              'runtime_epoch=fences["runtime_epoch"])'),),
        slice=("release-keeps-cursor",)),
    Mutant(
        "release-clears-scope-generation-suspension", SCOPE_ONLY_NEEDS_UPDATE,
        "ReleaseAfterRecovery also clears a scope-generation suspension, which needs an update.",
        (Edit("client.py", 'if current["suspension_reason"] != "runtime-epoch":',
              'if current["suspension_reason"] not in ("runtime-epoch", "scope-generation"):'),),
        slice=("scope-generation-repair",)),
    Mutant(
        "release-clears-conflict-suspension", RELEASE_ADMITTED,
        "ReleaseAfterRecovery also clears an idempotency-conflict suspension, which is no stale-runtime-epoch fence.",
        (Edit("client.py", 'if current["suspension_reason"] != "runtime-epoch":',
              'if current["suspension_reason"] not in ("runtime-epoch", "idempotency-conflict"):'),),
        slice=("link-conflict",)),
    Mutant(
        "suspension-keeps-the-revision", DEFINITION_ROW,
        "A processor suspension sets the lifecycle state and reason but leaves the revision as it was, so a caller's "
        "expected_revision read while the schedule was active still matches the suspended row.",
        (Edit("processor.py",
              '        s.defer(query("schedule", "advance_definition"), {\n'
              '            "schedule_id": definition["schedule_id"], "lifecycle_state": "suspended", ',
              '        s.defer("update appsurface_durable.schedule_definitions set lifecycle_state = %(lifecycle_state)s, "\n'
              '                "suspension_reason = %(suspension_reason)s where scope_id = appsurface_durable.current_scope() "\n'
              '                "and schedule_id = %(schedule_id)s", {\n'
              '            "schedule_id": definition["schedule_id"], "lifecycle_state": "suspended", '),),
        slice=("anomaly-suspends",)),
    Mutant(
        "update-anchored-on-the-second", ACCEPTANCE_ANCHOR,
        "An update to an Every without anchor anchors the new generation on its acceptance time cut to the whole "
        "second (as a client that serializes the instant without its fraction would); create stays right.",
        (Edit("client.py",
              '(accepted_at if spec.kind == "every" else None)',
              '((accepted_at if generation == 1 else accepted_at.replace(microsecond=0)) if spec.kind == "every" '
              'else None)'),),
        slice=("update-unanchored",)),
    Mutant(
        "missing-migration-retriable", SCHEMA_VERSION,
        "A store without migration 0004 is refused as a transient failure (`retriable: true`), as a runtime that "
        "waits for an operator's migration would: a caller retries what no retry can make succeed.",
        (Edit("errors.py",
              '    """A migration this runtime version needs is missing, or the runtime version does not admit the call."""\n',
              '    """A migration this runtime version needs is missing, or the runtime version does not admit the call."""\n'
              '\n    retriable = True\n'),),
        slice=("schema-version",)),
    Mutant(
        "cancel-not-retriable", SQLSTATE_RETRY,
        "A cancelled statement (SQLSTATE 57014, query_canceled) is taken as a definite failure: the pass neither "
        "retries after the rollback nor says a retry may follow.",
        (Edit("errors.py", 'RETRIABLE_CODES = {"57P01", "57P02", "57P03", "57014", "55P03"}',
              'RETRIABLE_CODES = {"57P01", "57P02", "57P03", "55P03"}'),),
        slice=("*/*/cancel/*",)),
    Mutant(
        "asynchronous-commit", CRASH_SURVIVES,
        "Every session of the processor commits asynchronously (synchronous_commit off), as a tuning for throughput "
        "would: COMMIT returns before its WAL is flushed, so a server crash right after it loses a fact the pass "
        "already reported, and a retry may decide again what was decided.",
        (Edit("db.py", 'GENERIC_PLANS = "-c plan_cache_mode=force_generic_plan"',
              'GENERIC_PLANS = "-c plan_cache_mode=force_generic_plan -c synchronous_commit=off"'),),
        slice=("at-single/*-after-commit/db-crash/*",)),
    Mutant(
        "cancel-compensates", CANCEL_KEEPS,
        "A pass cancelled right after a committed decision (barrier-reply `cancel-pass`) undoes it: a compensating "
        "transaction supersedes the occurrence the decision opened and releases the lease, and no bridge runs.",
        (Edit("processor.py", "        counts = ProcessCounts()\n        owner = ",
              "        counts = ProcessCounts()\n        self._cancel = cancel\n        owner = "),
         Edit("processor.py",
              '        barriers.hit("schedule-decision-after-commit", **context)\n        if not bridge:\n',
              '        barriers.hit("schedule-decision-after-commit", **context)\n'
              '        if self._cancel is not None and self._cancel._event.is_set():\n'
              '            with self.runtime.scoped(scope_id, self.runtime_role, reads=self._state_reads(claim)) as s:\n'
              '                s.defer(query("schedule", "supersede_pending"),\n'
              '                        {"schedule_id": claim.schedule_id, "keep_generation": None})\n'
              '                self._release(s, self._load(s, claim).dispatch, None)\n'
              '            return\n'
              '        if not bridge:\n')),
        slice=("cancel-after-decision",)),
    Mutant(
        "cancel-pass-ignored", CANCEL_LEASE,
        "The adapter takes a barrier-reply `cancel-pass` for `continue`: a pass cancelled in flight goes on and "
        "starts the next lease.",
        (Edit("adapter.py", CANCEL_PASS_REPLY, '        if False:\n'),),
        slice=("cancel-after-decision",)),
    # One per barrier the host may answer `cancel-pass` (barriers/catalog.py CANCEL_BARRIERS, read from the registry):
    # the action honoured everywhere but there, so each barrier's case in `cancel-at-each-barrier` has its own teeth.
    *(Mutant(
        f"cancel-pass-ignored-at-{_short(barrier)}", CANCEL_LEASE,
        f"The adapter honours a barrier-reply `cancel-pass` at every barrier but `{barrier}`, where it takes it for "
        "`continue`: a pass cancelled there goes on and starts the next lease.",
        (Edit("adapter.py", CANCEL_PASS_REPLY, CANCEL_PASS_REPLY.replace(
            ":\n", f" and name != {barrier!r}:\n")),),
        slice=("cancel-at-each-barrier",)) for barrier in CANCEL_BARRIERS),
    Mutant(
        "target-format-characters-stored", PROBLEM_RESULTS,
        "A target command is checked for control characters only, so one holding a format character (a "
        "right-to-left override, a zero-width space) is stored instead of answering the validation problem.",
        (Edit("model.py", "            or _unfit(command):\n", "            or False:\n"),),
        slice=("hostile-definitions",)),
    Mutant(
        "bridge-role-unproven", BRIDGE_PROOF,
        "Neither the runtime session nor a scoped transaction proves current_user: the scope is set for whatever "
        "login the DSN names, so a role that is only a member of the runtime role, holding its privileges, has its "
        "decision and Work accepted.",
        (Edit("db.py", "       case when current_user = %(runtime_role)s\n",
              "       case when %(runtime_role)s::text is not null\n"),
         Edit("processor.py", "            if user != self.runtime_role:\n", "            if user is None:\n")),
        slice=("bridge-role",)),
    Mutant(
        "bridge-own-session-unproven", BRIDGE_PROOF,
        "Only the decision proves current_user: the bridge runs on a runtime session of its own (a pool's next "
        "connection) and takes whatever role that session has for the configured one, so a login that lost the "
        "runtime role after the decision committed still has its Work accepted and linked.",
        (Edit("processor.py",
              "        with self.runtime.scoped(scope_id, self.runtime_role, reads=self._state_reads(claim)) as s:\n"
              "            self._bridge(s, claim, scope_id, bridged, context)\n"
              "            barriers.hit(\"schedule-bridge-before-commit\", **context)\n",
              "        own = Session(self.runtime_dsn, deadline=self.deadline, application_name=\"appsurface-bridge\")\n"
              "        try:\n"
              "            with own.scoped(scope_id, own.one(\"select current_user as user\")[\"user\"],\n"
              "                            reads=self._state_reads(claim)) as s:\n"
              "                self._bridge(s, claim, scope_id, bridged, context)\n"
              "                barriers.hit(\"schedule-bridge-before-commit\", **context)\n"
              "        finally:\n"
              "            own.close()\n"),),
        slice=("bridge-role-after-decision",)),
    Mutant(
        "bridge-denial-retriable", BRIDGE_NOT_RETRIABLE,
        "An access-denied SQLSTATE (42501) and a refused bridge role are taken as transient: the pass retries them "
        "after rollback, gives up, and answers as after a disconnect.",
        (Edit("errors.py", "class AccessDenied(DurableError):", "class AccessDenied(RetriableError):"),
         Edit("errors.py", "class BridgeRoleError(DurableError):", "class BridgeRoleError(RetriableError):")),
        slice=("bridge-role",)),
    Mutant(
        "requeue-waits-an-interval", NEXT_PASS,
        "The Work-terminal trigger requeues the schedule an hour after the terminal transition instead of at once, "
        "so the waiting coalesced occurrence is materialized only when time has moved on.",
        (Edit("migrations/0004_schedule_protocol.sql",
              "       set due_at_utc = now_utc,\n"
              "           claimable_at_utc = case when lease_owner is null then now_utc else claimable_at_utc end\n",
              "       set due_at_utc = now_utc + interval '1 hour',\n"
              "           claimable_at_utc = case when lease_owner is null then now_utc + interval '1 hour' "
              "else claimable_at_utc end\n"),),
        slice=("coalesce-terminal-callback",)),
    Mutant(
        "history-partition-updatable", EXACT_GRANTS,
        "Each monthly history partition made after the migrations grants the runtime UPDATE beside SELECT and "
        "INSERT, so a child created later holds more than the exact grants.",
        (Edit("migrations/0004_schedule_protocol.sql",
              "            execute format('grant select, insert on appsurface_durable.%I to appsurface_durable_runtime', "
              "child);",
              "            execute format('grant select, insert, update on appsurface_durable.%I to "
              "appsurface_durable_runtime', child);"),),
        slice=("schema-stage",)),
    Mutant(
        "duration-cap-admits-one-more", PROBLEM_RESULTS,
        "A duration is checked against 10^10 + 1 seconds instead of 10^10, so a definition one second past the cap "
        "is stored instead of answering the validation problem.",
        (Edit("wire.py", "    if not math.isfinite(value) or abs(value) > MAX_SECONDS:\n",
              "    if not math.isfinite(value) or abs(value) > MAX_SECONDS + 1:\n"),),
        slice=("duration-edges",)),
    Mutant(
        "duration-under-a-microsecond-rounded-up", PROBLEM_RESULTS,
        "A positive duration under a microsecond is rounded up to one microsecond and stored instead of answering "
        "the validation problem (PostgreSQL's resolution makes it zero).",
        (Edit("wire.py", "    return timedelta(seconds=value)\n",
              "    return max(timedelta(seconds=value), timedelta(microseconds=1)) if value > 0 else "
              "timedelta(seconds=value)\n"),),
        slice=("duration-edges",)),
    Mutant(
        "grid-from-anchor", CUTOFF,
        "An Every's grid starts at its anchor: the instants before a future anchor (anchor + n·every, n < 0) are "
        "never evaluated, so the first one decided is the anchor itself.",
        (Edit("evaluator.py", "    n = (to_us(t) - anchor) // step + 1\n",
              "    n = max((to_us(t) - anchor) // step + 1, 0)\n"),),
        slice=("every-future-anchor",)),
)

BY_NAME = {m.name: m for m in MUTANTS}
