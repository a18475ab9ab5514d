"""The certification contract: its version, every change since the first published one, and the class of each rule.

The contract is the rules certification enforces (every check of `testhost.judge.registry.CHECKS` and every schema rule
of `barriers.schema.SCHEMA_RULES`) plus the normative store. A change that can fail an implementation that conformed
before (a new mandatory behaviour, a store API change, a rule tightened, a reading pinned) is a major version; a change
that cannot (a new optional operation or field, a new scenario or check of a rule that already bound, a rule
loosened) is minor. `docs/contract-changes.md` is rendered from this module and written by
`python -m testhost.runs.protocol_page contract`, and tests/test_contract.py keeps the fingerprints below equal to the
rules' texts, so no rule changes without its entry.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

# What an implementation must do to pass, rule by rule.
SPEC = "spec"  # a spec sentence, read as it stands
PINNED = "pinned-reading"  # a spec sentence read through a protocol note, pinned so implementations agree
ADAPTER = "adapter"  # the adapter protocol of PROTOCOL.md: what the host needs to drive and observe any implementation
REFERENCE = "reference-choice"  # the reference's own way: a difference is reported as a note and never fails a run
KINDS = (SPEC, PINNED, ADAPTER, REFERENCE)
KIND_MEANING = {
    SPEC: "a spec sentence, as it stands",
    PINNED: "a spec sentence read through the protocol note(s) named, pinned so that implementations agree; its "
            "effect shows in the durable facts or answers",
    ADAPTER: "the adapter protocol of this page: what the host needs to drive and observe any implementation",
    REFERENCE: "how the reference does it; a difference is reported as a note (\"differs from the reference\") and "
               "never fails a run",
}

MAJOR, MINOR = "major", "minor"
CHANGES_PAGE = "docs/contract-changes.md"


@dataclass(frozen=True)
class RuleClass:
    """Why a rule may fail an implementation: its kind and, for a pinned reading, the protocol notes it cites."""

    kind: str
    notes: tuple[str, ...] = ()  # "24j The scope authorizes only the transaction that set it": number, then title


@dataclass(frozen=True)
class Change:
    """One change of the contract: what changed, which checks' verdicts it can move, and what to change."""

    version: str  # "MAJOR.MINOR": the contract that first carried it
    date: str
    commits: tuple[str, ...]  # where it landed on main
    slug: str
    title: str
    kind: str  # MAJOR or MINOR
    checks: tuple[str, ...]  # the checks (and schema rules) whose verdict it can move
    must_change: str  # what an implementation of the contract before it changes; "nothing" for most minor changes
    notes: tuple[str, ...] = ()

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])


def _n(*notes: str) -> tuple[str, ...]:
    return notes


CHANGES: tuple[Change, ...] = (
    # -- 1.0: the first published contract ------------------------------------------------------------------------
    Change("1.0", "2026-11-30", ("4827ac1", "8e922e4"), "first-published", "The first published contract: the "
           "adapter protocol of PROTOCOL.md (hello, requests, barriers, faults), the normative store of the reference's "
           "migrations, and the invariants of Gate A over its tables", MAJOR,
           ("one-occurrence-per-identity", "instant-decided-once", "one-work-per-materialized-occurrence",
            "deterministic-work-identity", "link-compare-or-return", "cursor-within-decisions-and-server-time",
            "at-most-one-pending-coalesced", "queue-one-slot", "nothing-materialized-for-superseded-or-suspended",
            "gate-a-writes-three-states", "suspension-keeps-the-cursor", "due-instants-decided", "anomaly-suspends",
            "fence-before-cursor", "recovered-nothing-due", "no-vacuous-checks", "planned-fault-fired",
            "transaction-fate", "scenario-expectations", "crash-equivalence", "model-agreement", "client-outcomes",
            "step-outcomes", "coalesced-range-forward", "at-most-one-pending-coalesced-at-every-step",
            "late-writes-fenced"),
           "implement the adapter protocol and the rules of PROTOCOL.md"),
    # -- 2.0 ---------------------------------------------------------------------------------------------------------
    Change("2.0", "2026-12-01", ("c4d5a4e", "9ed0c54"), "scope-through-set-local-scope", "The store honours a scope "
           "only through `appsurface_durable.set_local_scope(scope_id)`: a value of the setting "
           "`appsurface_durable.scope_id` written any other way, `set_config(..., true)` included, reads and writes "
           "nothing", MAJOR, ("schema-local-scope",),
           "set the scope with `select appsurface_durable.set_local_scope($1)` inside each scoped transaction, in "
           "place of `set_config('appsurface_durable.scope_id', $1, true)` or `SET LOCAL`. PostgreSQL shows a "
           "function only a setting's value, so no store can honour a transaction-local `set_config` and still "
           "refuse the session-level value that leaks a tenant's rows through a pooled connection (note 24j; "
           "tests/test_store_scope.py). Every check fails on a store that never sees your scope; the diagnosis "
           "`no-scoped-commit` names this change",
           _n("24j The scope authorizes only the transaction that set it")),
    Change("2.0", "2026-12-01", ("9ed0c54",), "lease-cap-where-it-ends", "The claim function's ten-minute cap is "
           "computed where the lease ends (months, then days, then time, as PostgreSQL adds them), not on the "
           "interval's compared value", MAJOR, ("schema-claim-refusals", "hostile-claim-inputs"),
           "only a store of your own (`--migrations`): refuse a lease whose end lies more than ten minutes after "
           "the claim, computed as `now() + lease`",
           _n("24i The lease cap is checked where the lease ends")),
    Change("2.0", "2026-12-01", ("4f6fd90",), "grid-before-anchor", "Every: the grid is `anchor + n·every` for "
           "every integer n, instants before a future anchor included (note 6 pinned)", MAJOR,
           ("model-agreement", "scenario-expectations", "crash-equivalence"),
           "evaluate an Every schedule's instants on the whole grid through its anchor: with an anchor in the "
           "future, the instants `anchor - k·every` after the acceptance are due too",
           _n("6 Grid.", "39e Every grid before a future anchor")),
    Change("2.0", "2026-12-01", ("4f6fd90",), "honest-answers", "Answers are honest and bounded: `fail` only when "
           "nothing committed, and a lost COMMIT reply turns into an error within `CRASHPROOF_DEADLINE_S`", MAJOR,
           ("outcome-honesty", "client-deadline"),
           "answer `unknown`, not `fail`, once a transaction of the request may have committed; give up on a "
           "round trip after `CRASHPROOF_DEADLINE_S` seconds and close the connection",
           _n("39a An honest `fail`.", "39b The client deadline is exercised.")),
    Change("2.0", "2026-12-01", ("4f6fd90",), "processor-history", "The processor's history rows are normative: one "
           "`suspended` row with its reason at each suspension it writes, `recovery-skipped` for a skipped range",
           MAJOR, ("processor-history",),
           "write the history rows PROTOCOL.md lists when the processor suspends a schedule or skips a range",
           _n("39d Processor history is normative, the rest is free.")),
    Change("2.0", "2026-12-01", ("4f6fd90",), "idle-cursor", "Idle passes keep the cursor: the cursor moves only in "
           "a decision that disposes of at least one due instant (note 2 enforced)", MAJOR,
           ("idle-pass-keeps-cursor",),
           "leave the cursor where it is on a pass with nothing due (loosened again in 6.1: `idle-cursor-free`)",
           _n("2 The cursor moves to the cutoff", "39c Idle passes keep the cursor")),
    Change("2.0", "2026-12-01", ("e26a9b0", "1f6179f"), "schema-stage", "`certify --migrations DIR` certifies a "
           "store of your own: a schema stage checks its tables, grants, row security, history partitions, "
           "SECURITY DEFINER functions and the claim's refusals before any case", MINOR,
           ("schema-tables", "schema-grants", "schema-row-security", "schema-history-partitions",
            "schema-security-definer", "schema-claim-refusals"),
           "nothing: an optional way to bring your own schema"),
    Change("2.0", "2026-12-01", ("861381e",), "fence-at-every-step", "A fenced schedule acts on nothing, seen after "
           "every step, not only at the end", MINOR, ("fence-before-cursor-at-every-step",), "nothing",
           _n("39g A fenced schedule acts on nothing, seen step by step.")),
    # -- 3.0 ---------------------------------------------------------------------------------------------------------
    Change("3.0", "2026-12-01", ("9a5e64f", "96c5ffa"), "pass-counts", "An `ok` answer of `process-due` counts what "
           "its pass committed, under the names of *Counts of a pass*", MAJOR, ("process-counts",),
           "answer each count of *Counts of a pass* as what your pass committed (a retried transaction counts once)",
           _n("39k Which counts are checked, and when.")),
    Change("3.0", "2026-12-01", ("de562e6", "f7e12fc"), "fence-locked-for-decision", "A fence is locked for the "
           "decision: an operator's scope-generation change waits for a decision in flight, or the decision is "
           "fenced", MAJOR, ("fence-locked-beside-decision",),
           "read the scope generation with `FOR SHARE` (or stronger) in the decision transaction",
           _n("26a A fence is locked for the decision")),
    Change("3.0", "2026-12-01", ("9a5e64f",), "work-own-clock", "The Work's accepted time is its own "
           "`clock_timestamp()` sample, judged with the clock moved inside a held bridge", MINOR,
           ("work-own-clock",), "nothing",
           _n("39j The Work's own clock, against the bridge's.")),
    Change("3.0", "2026-12-01", ("428eab3", "d37ddc7"), "stall-fault", "The `stall` fault: the session of a "
           "transaction at a barrier is ended while another processor takes its lease over", MINOR,
           ("stall-took-over",), "nothing",
           _n("39h A transaction whose session ends while another takes its lease over")),
    Change("3.0", "2026-12-01", ("ec890af", "f09427f"), "clock-utc", "Skewed implementation clocks: the hello's "
           "optional `clock_utc`, and scenarios whose processes run on a wrong OS clock", MINOR, (),
           "nothing: `clock_utc` is optional; read every time from PostgreSQL, as the spec already says",
           _n("25a \"The cutoff comes from PostgreSQL\" covers leases too")),
    Change("3.0", "2026-12-01", ("de562e6",), "steps-beside-barriers", "Steps planned beside a held barrier",
           MINOR, ("beside-barrier-reached",), "nothing"),
    # -- 4.0 ---------------------------------------------------------------------------------------------------------
    Change("4.0", "2026-12-01", ("bb5049f", "fd4ea83"), "schema-version-refused", "On a store migrated only to "
           "0003, every schedule operation answers `fail`, not retriable, and changes nothing", MAJOR,
           ("schema-version-refused",),
           "answer `fail` with `retriable: false` when migration 0004's tables or functions are missing",
           _n("32a \"Runtime version 4 requires it before Schedule operations run\"")),
    Change("4.0", "2026-12-01", ("922fa1a",), "bounded-pass-readings", "Readings of a bounded pass pinned: a pass "
           "leaves no lease behind, the safety window is the generation's own, a cutoff behind the cursor is a "
           "no-op and no anomaly, the range opens after the cursor", MAJOR,
           ("pass-leaves-no-lease", "anomaly-only-past-the-window", "behind-cursor-no-op",
            "range-opens-after-the-cursor"),
           "release or finish every lease a pass took before it answers; judge lateness against the generation's "
           "own window; do nothing for a cutoff at or behind the cursor; never decide the cursor's own instant again",
           _n("29c \"Observes cancellation before starting the next lease\" forbids an abandoned lease.",
              "29d \"Inside the configured safety window\" is the generation's own window.",
              "29e A cutoff behind the cursor is a no-op even for a claimable schedule",
              "29f The cursor's end of (cursor_utc, cutoff_utc].")),
    Change("4.0", "2026-12-01", ("87a18f5",), "passive", "A passive processor: nothing happens without a request",
           MAJOR, ("passive-processor",),
           "report no barrier and commit nothing while no request is in flight",
           _n("29g \"Passive\" is judged on what happens with no request in flight.")),
    Change("4.0", "2026-12-01", ("eecb8f7",), "revision-records-changes", "The definition's revision moves with "
           "every change of its lifecycle, suspension reason, generation or fences", MAJOR,
           ("definition-revision",),
           "bump the definition's revision whenever the processor suspends or fences a schedule",
           _n("22 Revision", "27a The revision records every change of the definition row but its cursor.")),
    Change("4.0", "2026-12-01", ("922fa1a", "cc96b55", "09ab8e2", "41d4b97", "50c0ce4", "31ffa88"),
           "existing-rules-checked", "Checks of sentences that already bound: bounded passes, empty passes, the "
           "acceptance anchor, the requeue, client commands, what commits between barriers, the `cancel` fault",
           MINOR, ("pass-bounded", "empty-pass-ok", "acceptance-anchor", "requeue-kept", "command-accepted-at",
                   "definition-persisted", "release-rebinds", "decision-commits-together",
                   "work-inside-link-transaction", "gate-a-states-at-every-barrier", "transaction-roles-at-barriers",
                   "cancel-retried"), "nothing"),
    # -- 5.0 ---------------------------------------------------------------------------------------------------------
    Change("5.0", "2026-12-01", ("252244f", "e8c4f0b", "1a57277"), "cancel-pass", "The barrier-reply action "
           "`cancel-pass`: a pass told to cancel finishes the lease in hand, starts no other, answers `ok` and keeps "
           "what it committed (mandatory for `process-due`)", MAJOR, ("cancel-keeps-committed", "pass-bounded"),
           "honour `{\"action\": \"cancel-pass\"}` in a barrier-reply after a claim or a decision committed",
           _n("34a A cancel rides on a barrier-reply", "34c Honouring it is mandatory")),
    Change("5.0", "2026-12-01", ("67da2c6", "d3e1782", "cb8c6f7"), "bridge-role-proof", "The bridge proves "
           "`current_user` is `appsurface_durable_runtime` before it sets the scope, and an access-denied bridge is "
           "not retried", MAJOR, ("bridge-role-proven", "bridge-failure-not-retriable"),
           "check `current_user = 'appsurface_durable_runtime'` (`SET ROLE` if your login is only a member) in the "
           "statement that sets the scope; answer a 42501 with `fail`, `retriable: false`, without retrying it",
           _n("33a \"The configured runtime role\" is `appsurface_durable_runtime`",
              "33f \"Not retriable\" also means not retried")),
    Change("5.0", "2026-12-01", ("f257667", "bda34a3", "109660c"), "hostile-and-crash", "Hostile inputs to every "
           "client operation and the claim function; durability across a database crash, row for row", MINOR,
           ("hostile-client-inputs", "hostile-claim-inputs", "committed-survives-crash"), "nothing"),
    Change("5.0", "2026-12-01", ("5109cde",), "claims-are-yours", "Which of the schedules due a bounded pass claims "
           "is the implementation's (loosened)", MINOR, ("model-agreement",), "nothing",
           _n("31p Which of the schedules due a bounded pass claims is the store's")),
    # -- 6.0 ---------------------------------------------------------------------------------------------------------
    Change("6.0", "2026-12-02", ("c8ce1e5", "b9118ac"), "store-probes", "A store of your own is probed for the "
           "local scope's reach as the runtime role, and the claim's cap where the lease ends and over the owner's "
           "Unicode classes", MAJOR, ("schema-local-scope", "schema-claim-refusals", "hostile-claim-inputs"),
           "only a store of your own (`--migrations`): bind the scope to the transaction that set it; refuse "
           "owners blank by any White_Space or Default_Ignorable code point or holding Cc, Cf, Zl or Zp",
           _n("24j The scope authorizes only the transaction that set it",
              "24m Blank and control-character lease owners, for Unicode.")),
    Change("6.0", "2026-12-02", ("174e7c1", "f3b0eaf"), "cutoff-end-decided", "An instant on the cutoff is that "
           "pass's: neither dropped nor deferred", MAJOR, ("pass-decides-what-was-due",),
           "decide (cursor, cutoff] with its end included, in the pass whose cutoff lands on the instant",
           _n("26d The range (cursor_utc, cutoff_utc] includes its end",
              "37d The cutoff's end")),
    Change("6.0", "2026-12-02", ("256c559", "0cc2a41"), "bridge-role-after-decision", "The bridge proves its role "
           "in its own transaction, also after a decision that committed under the role", MAJOR,
           ("bridge-role-proven-after-decision",),
           "prove `current_user` in every bridge transaction, not once per session",
           _n("33m What a bridge must do then")),
    Change("6.0", "2026-12-02", ("948f7d8", "0aa7a2c"), "cancel-at-link", "`cancel-pass` may arrive at every "
           "after-commit barrier of a pass, the link's included", MAJOR, ("pass-bounded", "cancel-keeps-committed"),
           "honour `cancel-pass` at `schedule-link-after-commit` too",
           _n("34b Where a cancel may be delivered", "34l Each delivery point has its case")),
    Change("6.0", "2026-12-02", ("174e7c1", "c1a53cc", "911efbe", "da55676"), "edges-checked", "Checks of "
           "sentences that already bound, at their edges: the cursor never moves back, generations are never "
           "rewritten, no instant is passed over, the requeue's next pass, history partitions", MINOR,
           ("cursor-never-moves-back", "generations-never-rewritten", "no-instant-passed-over", "requeue-kept",
            "schema-history-partitions"), "nothing",
           _n("37a The cursor is read as a high-water mark", "37e A generation row is read as it was first read.")),
    # -- 6.1 ---------------------------------------------------------------------------------------------------------
    Change("6.1", "2026-12-02", (), "idle-cursor-free", "A pass with nothing due may leave the cursor or move it to "
           "its cutoff: `idle-pass-keeps-cursor` is the reference's choice, reported as a difference and never a "
           "failure", MINOR, ("idle-pass-keeps-cursor",), "nothing (loosened)",
           _n("2 The cursor moves to the cutoff", "39c Idle passes keep the cursor")),
    Change("6.1", "2026-12-02", (), "work-own-clock-any-bridge", "`work-own-clock` holds the dispatch row "
           "wherever the bridge can meet it (also after a fault the process survived, so a bridge retried alone on "
           "a new session is judged), and a case that offers no hold is not compared; it never fails a retry "
           "shape", MINOR, ("work-own-clock",), "nothing (loosened)",
           _n("39j The Work's own clock, against the bridge's.")),
    Change("6.1", "2026-12-02", (), "pass-ran-past-an-instant", "A pass or drain that ran past a nominal instant "
           "may have decided it in a later decision or in a second claim of its schedule: the model accepts both "
           "timelines, so a slow implementation is no longer failed for deciding at its own transactions' times",
           MINOR, ("model-agreement", "crash-equivalence"), "nothing (loosened)",
           _n("38e An instant that falls due while a pass runs.")),
    Change("6.1", "2026-12-02", (), "build-stage-and-uris", "A spawned command's first start is a build stage "
           "with its own 600 s timeout before any case, so a launcher that compiles on first start certifies; each "
           "DSN also comes as a `postgresql://` URI (`CRASHPROOF_RUNTIME_DSN_URI`, `CRASHPROOF_DISPATCHER_DSN_URI`); "
           "`CRASHPROOF_DEADLINE_S` is always a decimal", MINOR, (),
           "nothing: parse `CRASHPROOF_DEADLINE_S` as a float, and take the URI form if your driver reads only URIs"),
    Change("6.1", "2026-12-02", (), "diagnosis", "A failed run's summary groups its failures by first failing check "
           "with a likely cause, the PROTOCOL.md section and the notes and contract changes to read", MINOR, (),
           "nothing"),
    Change("6.1", "2026-12-02", (), "rule-classes", "Every rule carries its class (spec, pinned reading, adapter "
           "protocol, reference choice); the hello may name the contract it targets (`contract`), and failures of "
           "checks changed since say so", MINOR, (), "nothing: `contract` is optional"),
    # -- 6.2 ---------------------------------------------------------------------------------------------------------
    Change("6.2", "2026-12-03", (), "beside-pass-ran-past-an-instant", "A pass held at a barrier for a step beside "
           "it that ran past a nominal instant is judged as any other pass that did (38e): the model accepts it "
           "decided at the pass's end, and claimed again, with the step where it ran. Before, such a pass kept its one "
           "cutoff, and a slow decision that skipped two instants as one recovery range failed", MINOR,
           ("model-agreement", "processor-history"), "nothing (loosened)",
           _n("38e An instant that falls due while a pass runs.")),
    Change("6.2", "2026-12-03", (), "planned-hit-placed-again", "A faulted run whose timeline never reached its "
           "planned hit, failing no other check, is run again, three runs in all, before `planned-fault-fired` fails "
           "it: how often a pass claims can depend on when its decisions cut off", MINOR, ("planned-fault-fired",),
           "nothing (loosened)", _n("38f A planned hit a run's timeline did not reach.")),
)

VERSION = max(CHANGES, key=lambda c: tuple(map(int, c.version.split(".")))).version
MAJOR_VERSION = int(VERSION.split(".")[0])

# Every rule's class. tests/test_contract.py keeps the keys equal to the rules registered.
CLASSES: dict[str, RuleClass] = {
    "one-occurrence-per-identity": RuleClass(SPEC),
    "instant-decided-once": RuleClass(SPEC),
    "one-work-per-materialized-occurrence": RuleClass(SPEC),
    "deterministic-work-identity": RuleClass(SPEC),
    "link-compare-or-return": RuleClass(SPEC),
    "cursor-within-decisions-and-server-time": RuleClass(PINNED, _n("2 The cursor moves to the cutoff")),
    "at-most-one-pending-coalesced": RuleClass(SPEC),
    "queue-one-slot": RuleClass(PINNED, _n("9 What occupies the QueueOne slot:")),
    "nothing-materialized-for-superseded-or-suspended": RuleClass(SPEC),
    "gate-a-writes-three-states": RuleClass(SPEC),
    "suspension-keeps-the-cursor": RuleClass(SPEC),
    "due-instants-decided": RuleClass(SPEC),
    "anomaly-suspends": RuleClass(PINNED, _n("3 Safety window and \"anomalously large\".")),
    "fence-before-cursor": RuleClass(SPEC),
    "recovered-nothing-due": RuleClass(SPEC),
    "no-vacuous-checks": RuleClass(ADAPTER),
    "planned-fault-fired": RuleClass(ADAPTER),
    "transaction-fate": RuleClass(SPEC),
    "scenario-expectations": RuleClass(PINNED, _n("6 Grid.", "8 Update moves the cursor")),
    "crash-equivalence": RuleClass(PINNED, _n("39l \"Recovery produces one occurrence and one accepted Work identity\"")),
    "model-agreement": RuleClass(PINNED, _n("4 One declared recovery range.", "6 Grid.", "10 Bridge order:")),
    "client-outcomes": RuleClass(PINNED, _n("20 \"Durable problem results\"", "28b A problem is named by the last")),
    "step-outcomes": RuleClass(SPEC),
    "coalesced-range-forward": RuleClass(SPEC),
    "at-most-one-pending-coalesced-at-every-step": RuleClass(SPEC),
    "late-writes-fenced": RuleClass(PINNED, _n("24d A lease that expired and was taken over fences every later")),
    "stall-took-over": RuleClass(ADAPTER),
    "committed-survives-crash": RuleClass(PINNED, _n("36a \"What was committed before the crash stays\"")),
    "outcome-honesty": RuleClass(ADAPTER),
    "client-deadline": RuleClass(ADAPTER),
    "idle-pass-keeps-cursor": RuleClass(REFERENCE, _n("2 The cursor moves to the cutoff", "39c Idle passes keep")),
    "cursor-never-moves-back": RuleClass(SPEC),
    "pass-decides-what-was-due": RuleClass(PINNED, _n("26d The range (cursor_utc, cutoff_utc] includes its end",
                                                        "37d The cutoff's end")),
    "generations-never-rewritten": RuleClass(SPEC),
    "fence-before-cursor-at-every-step": RuleClass(SPEC),
    "processor-history": RuleClass(PINNED, _n("39d Processor history is normative, the rest is free.")),
    "beside-barrier-reached": RuleClass(ADAPTER),
    "fence-locked-beside-decision": RuleClass(PINNED, _n("26a A fence is locked for the decision")),
    "process-counts": RuleClass(ADAPTER),
    "work-own-clock": RuleClass(PINNED, _n("39j The Work's own clock, against the bridge's.")),
    "pass-bounded": RuleClass(PINNED, _n("29a \"Processes at most MaximumSchedules schedules\" counts claims.",
                                         "34i \"No second lease\" is `pass-bounded`")),
    "empty-pass-ok": RuleClass(PINNED, _n("29b An empty pass answers `ok`.")),
    "pass-leaves-no-lease": RuleClass(PINNED, _n("29c \"Observes cancellation before starting the next lease\"")),
    "anomaly-only-past-the-window": RuleClass(PINNED, _n("29d \"Inside the configured safety window\"")),
    "behind-cursor-no-op": RuleClass(PINNED, _n("29e A cutoff behind the cursor is a no-op")),
    "range-opens-after-the-cursor": RuleClass(PINNED, _n("29f The cursor's end of (cursor_utc, cutoff_utc].")),
    "no-instant-passed-over": RuleClass(PINNED, _n("39e Every grid before a future anchor")),
    "passive-processor": RuleClass(PINNED, _n("29g \"Passive\" is judged on what happens")),
    "requeue-kept": RuleClass(PINNED, _n("29i The Work-terminal requeue beside a held lease")),
    "definition-revision": RuleClass(PINNED, _n("27a The revision records every change of the definition row")),
    "acceptance-anchor": RuleClass(SPEC),
    "schema-version-refused": RuleClass(PINNED, _n("32a \"Runtime version 4 requires it before Schedule operations run\"")),
    "cancel-retried": RuleClass(PINNED, _n("32d \"SQLSTATE failures ... require a bounded retry only after rollback\"")),
    "hostile-client-inputs": RuleClass(PINNED, _n("35a A hostile argument is a problem result, not an error.",
                                                  "35g Which problem an input allows.")),
    "hostile-claim-inputs": RuleClass(PINNED, _n("24i The lease cap is checked where the lease ends.",
                                                 "24m Blank and control-character lease owners, for Unicode.")),
    "command-accepted-at": RuleClass(SPEC),
    "definition-persisted": RuleClass(PINNED, _n("28f \"At and explicitly anchored Every schedules persist")),
    "release-rebinds": RuleClass(PINNED, _n("31b ReleaseAfterRecovery's answer hangs on what a pass fenced.")),
    "decision-commits-together": RuleClass(PINNED, _n("30a \"One scoped transaction\" is judged at the barriers")),
    "work-inside-link-transaction": RuleClass(SPEC),
    "gate-a-states-at-every-barrier": RuleClass(PINNED, _n("30d \"Gate A writes only pending, materialized, and "
                                                           "superseded\" holds at every moment")),
    "transaction-roles-at-barriers": RuleClass(PINNED, _n("30e \"Two non-overlapping transaction forms\"")),
    "cancel-keeps-committed": RuleClass(PINNED, _n("34e \"Does not roll back\" forbids compensation, not progress.")),
    "bridge-role-proven": RuleClass(PINNED, _n("33a \"The configured runtime role\" is `appsurface_durable_runtime`")),
    "bridge-failure-not-retriable": RuleClass(PINNED, _n("33f \"Not retriable\" also means not retried")),
    "bridge-role-proven-after-decision": RuleClass(PINNED, _n("33m What a bridge must do then")),
    "schema-tables": RuleClass(PINNED, _n("24g The normative schema is migrations 0001-0004")),
    "schema-grants": RuleClass(SPEC),
    "schema-row-security": RuleClass(PINNED, _n("19 The migration owner has BYPASSRLS.")),
    "schema-history-partitions": RuleClass(SPEC),
    "schema-security-definer": RuleClass(SPEC),
    "schema-claim-refusals": RuleClass(PINNED, _n("24i The lease cap is checked where the lease ends.",
                                                  "24m Blank and control-character lease owners, for Unicode.")),
    "schema-local-scope": RuleClass(PINNED, _n("24j The scope authorizes only the transaction that set it")),
}

# Each rule's fingerprint (of its class and its text) and the contract that settled it: tests/test_contract.py fails
# when a rule's text or class moves without both a new fingerprint here and a Change of that version naming it.
# `python -m testhost.runs.protocol_page fingerprints` prints what the registry holds now.
FINGERPRINTS: dict[str, tuple[str, str]] = {
    "one-occurrence-per-identity": ("60520afff5", "1.0"),
    "instant-decided-once": ("1ef20934f4", "1.0"),
    "one-work-per-materialized-occurrence": ("5b36646107", "1.0"),
    "deterministic-work-identity": ("0362da3e57", "1.0"),
    "link-compare-or-return": ("e1938b65fa", "1.0"),
    "cursor-within-decisions-and-server-time": ("6079c12af8", "1.0"),
    "at-most-one-pending-coalesced": ("5d582bee7b", "1.0"),
    "queue-one-slot": ("d07f465e70", "1.0"),
    "nothing-materialized-for-superseded-or-suspended": ("40ff9df729", "1.0"),
    "gate-a-writes-three-states": ("9089a05d94", "1.0"),
    "suspension-keeps-the-cursor": ("2b229c68de", "1.0"),
    "due-instants-decided": ("3f56650bfc", "1.0"),
    "anomaly-suspends": ("1bb51d2851", "1.0"),
    "fence-before-cursor": ("f6b283fd66", "1.0"),
    "recovered-nothing-due": ("438fa97f87", "1.0"),
    "no-vacuous-checks": ("68817b45fa", "1.0"),
    "planned-fault-fired": ("24ed6a3345", "6.2"),
    "transaction-fate": ("b43a26c014", "1.0"),
    "scenario-expectations": ("f6c02d5c49", "2.0"),
    "crash-equivalence": ("3959a95b46", "6.1"),
    "model-agreement": ("6d94f338ef", "6.2"),
    "client-outcomes": ("62ae32b707", "1.0"),
    "step-outcomes": ("b93b7880fc", "1.0"),
    "coalesced-range-forward": ("7aaafdb31c", "1.0"),
    "at-most-one-pending-coalesced-at-every-step": ("5d582bee7b", "1.0"),
    "late-writes-fenced": ("3020bc9779", "1.0"),
    "stall-took-over": ("b7133ad645", "3.0"),
    "committed-survives-crash": ("61f2265825", "5.0"),
    "outcome-honesty": ("480656674e", "2.0"),
    "client-deadline": ("fe79f766e4", "2.0"),
    "idle-pass-keeps-cursor": ("4e5e4bebe5", "6.1"),
    "cursor-never-moves-back": ("5d4efdb9b9", "6.0"),
    "pass-decides-what-was-due": ("b464e68b77", "6.0"),
    "generations-never-rewritten": ("84033b0ee1", "6.0"),
    "fence-before-cursor-at-every-step": ("ff1e44805e", "2.0"),
    "processor-history": ("379f71f3ed", "6.2"),
    "beside-barrier-reached": ("d8762ba112", "3.0"),
    "fence-locked-beside-decision": ("424637b362", "3.0"),
    "process-counts": ("160f37734d", "3.0"),
    "work-own-clock": ("3de92c62f0", "6.1"),
    "pass-bounded": ("2343fe1c0a", "6.0"),
    "empty-pass-ok": ("a5cd7cc3a7", "4.0"),
    "pass-leaves-no-lease": ("86b61bdee9", "4.0"),
    "anomaly-only-past-the-window": ("7e8aa1be4a", "4.0"),
    "behind-cursor-no-op": ("776cd74d4c", "4.0"),
    "range-opens-after-the-cursor": ("b8c4fc869b", "4.0"),
    "no-instant-passed-over": ("ac205ede6e", "6.0"),
    "passive-processor": ("68e5b87444", "4.0"),
    "requeue-kept": ("42ae3fe380", "6.0"),
    "definition-revision": ("0a23043124", "4.0"),
    "acceptance-anchor": ("5e474da96d", "4.0"),
    "schema-version-refused": ("2a69bcbbbf", "4.0"),
    "cancel-retried": ("8d389399f9", "4.0"),
    "hostile-client-inputs": ("bd256f06ab", "5.0"),
    "hostile-claim-inputs": ("397418125f", "6.0"),
    "command-accepted-at": ("df60f8bb4c", "4.0"),
    "definition-persisted": ("167ed144cb", "4.0"),
    "release-rebinds": ("4c3bd23750", "4.0"),
    "decision-commits-together": ("87d12108e0", "4.0"),
    "work-inside-link-transaction": ("8a4cec188c", "4.0"),
    "gate-a-states-at-every-barrier": ("7390edb243", "4.0"),
    "transaction-roles-at-barriers": ("f2456887c2", "4.0"),
    "cancel-keeps-committed": ("916e72b3a7", "6.0"),
    "bridge-role-proven": ("b35c039a4e", "5.0"),
    "bridge-failure-not-retriable": ("7db5ad325e", "5.0"),
    "bridge-role-proven-after-decision": ("c9950e7bc4", "6.0"),
    "schema-tables": ("c6492a3126", "2.0"),
    "schema-grants": ("ec60b0a2e2", "2.0"),
    "schema-row-security": ("bdb195f0c5", "2.0"),
    "schema-history-partitions": ("62723b8f2b", "6.0"),
    "schema-security-definer": ("8315fa9cd4", "2.0"),
    "schema-claim-refusals": ("73000efa69", "6.0"),
    "schema-local-scope": ("eeb8a3517d", "6.0"),
}


def fingerprint(kind: str, rule: str) -> str:
    """Ten hex digits of SHA-256 over a rule's class and text."""
    return hashlib.sha256(f"{kind}|{rule}".encode()).hexdigest()[:10]


def version_key(version: str) -> tuple[int, int]:
    major, _, minor = version.partition(".")
    return int(major), int(minor or 0)


def settled(name: str) -> str:
    """The contract version whose changes last moved this check: the latest Change naming it, else 1.0."""
    versions = [c.version for c in CHANGES if name in c.checks]
    return max(versions, key=version_key) if versions else "1.0"


def changes_since(name: str, targeted: int | None) -> list[Change]:
    """The major changes to a check after the contract an implementation targets (none named: the current major's)."""
    floor = MAJOR_VERSION - 1 if targeted is None else targeted
    return [c for c in CHANGES if name in c.checks and c.kind == MAJOR and c.major > floor]


def anchor(version: str) -> str:
    """The contract-changes page's anchor of a version's section."""
    return "contract-" + version.replace(".", "")


def changed_note(name: str, targeted: int | None) -> str | None:
    """`rule changed in contract N: ...; see docs/contract-changes.md#contract-N0`, or None."""
    found = changes_since(name, targeted)
    if not found:
        return None
    latest = max(found, key=lambda c: version_key(c.version))
    return (f"rule changed in contract {latest.version}: {latest.title}; what to change: {latest.must_change}; see "
            f"{CHANGES_PAGE}#{anchor(latest.version)}")


def releases() -> list[tuple[str, list[Change]]]:
    """The versions, newest first, each with its changes."""
    out: dict[str, list[Change]] = {}
    for change in CHANGES:
        out.setdefault(change.version, []).append(change)
    return sorted(out.items(), key=lambda item: version_key(item[0]), reverse=True)


def render() -> str:
    """docs/contract-changes.md."""
    out = ["# Contract changes", "",
           "<!-- Generated by `python -m testhost.runs.protocol_page contract` from barriers/contract.py. Do not edit "
           "by hand. -->", "",
           f"The certification contract is at version **{VERSION}**. The contract is the rules certification "
           "enforces (barriers/PROTOCOL.md, *What a certified implementation must do* and *The checks*, each with "
           "its class) plus the normative store (the reference's migrations 0001-0004, or your own under "
           "`--migrations`, held to the schema rules). The wire protocol's own number (`protocol` in the hello) is "
           "separate and still 1.", "",
           "A **major** change can fail an implementation that conformed before: a new mandatory behaviour, a store "
           "API change, a rule tightened, a reading pinned. A **minor** change cannot: a new optional operation or "
           "field, a new scenario or check of a rule that already bound (an implementation that fails it broke the "
           "rule already), a rule loosened. Your hello may name the contract you target "
           "(`\"contract\": 5`); a failing check changed by a major change after it then says so "
           "(\"rule changed in contract N: ...\"), in the CLI, report.md, report.html and the verdict. With no "
           "contract named, failures of checks changed in the current major version carry the note.", "",
           "Rule classes: " + "; ".join(f"`{k}`: {v}" for k, v in KIND_MEANING.items()) + ".", ""]
    for version, changes in releases():
        kind = MAJOR if any(c.kind == MAJOR for c in changes) else MINOR
        out += [f"## Contract {version} ({changes[0].date}) <a id=\"{anchor(version)}\"></a>", "",
                f"A {kind} version." if version != "1.0" else "The first published contract.", ""]
        for change in changes:
            commits = ", ".join(f"`{c}`" for c in change.commits) or "this version"
            checks = ", ".join(f"`{c}`" for c in change.checks) or "none"
            out += [f"### {change.title} (`{change.slug}`, {change.kind})", "",
                    f"- checks: {checks}",
                    f"- what to change: {change.must_change}",
                    *([f"- protocol notes: {'; '.join(change.notes)}"] if change.notes else []),
                    f"- landed: {commits}", ""]
    return "\n".join(out)


def current_fingerprints(rules: dict[str, str]) -> dict[str, tuple[str, str]]:
    """What FINGERPRINTS must read for the rules registered now."""
    return {name: (fingerprint(CLASSES[name].kind if name in CLASSES else "?", rule), settled(name))
            for name, rule in rules.items()}


def print_fingerprints(rules: dict[str, str]) -> int:
    """FINGERPRINTS as it must read for `rules`, one entry a line, to paste into it."""
    for name, (digest, version) in current_fingerprints(rules).items():
        print(f'    "{name}": ("{digest}", "{version}"),')
    return 0
