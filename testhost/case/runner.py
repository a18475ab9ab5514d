"""One case, start to finish: prepare a store, run the scenario's timeline through the implementation,
inject the planned fault at the planned barrier hit, recover, and judge the durable outcome."""

from __future__ import annotations

import contextlib
import copy
import shlex
import sys
import threading
import time
import traceback
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from barriers import BY_NAME
from barriers.catalog import PROCESSOR_TRANSACTIONS
from barriers.schema import DISPATCHER, REVOCABLE, RUNTIME
from scenarios.scenario import T0, Scenario, Step, relative
from scenarios.matrix import CasePlan
from scenarios.steps import BESIDE_AFTER_DECISION, during_step, pass_denial, pass_limit

from testhost.errors import FallbackFailed, TestHostError
from testhost.faults.bridge_clock import BridgeClock
from testhost.faults.cancel_pass import CancelPlan
from testhost.faults.catalog import DEADLINE_S, FAULTS, Injection
from testhost.impl import skew
from testhost.impl.adapter_env import adapter_environment
from testhost.impl.implementation import AdapterProtocolError, Implementation, ImplementationDied, Response
from testhost.impl.instance_setup import instance_setup
from testhost.judge import bridge_role
from testhost.judge.cancelled_pass import keeps_committed
from testhost.judge.clock_samples import acceptance_anchor, work_own_clock
from testhost.judge.commands import client_outcomes, results as command_results
from testhost.judge.contract_notes import settle, targeted as targeted_contract
from testhost.judge.expectations import history_agreement, model_agreement
from testhost.judge.fault_checks import (FATE_ABORTED, FATE_COMMITTED, PLANNED_FAULT_FIRED, cancel_retried,
                                         client_deadline, crash_durability, late_writes, outcome_honesty,
                                         stall_took_over)
from testhost.judge.identity import expected_work, instant_text
from testhost.judge.invariants import universal
from testhost.judge.gate_model import generation_of, picture as model_picture
from testhost.judge.observations import (FENCE_REASONS, beside_barrier_reached, coalesced_forward, cursor_high_water,
                                         definition_revision, fence_locked_beside, fence_seen, generations_unchanged,
                                         idle_cursor, one_pending_coalesced_seen, pass_decides_due, passive_processor,
                                         requeue_kept)
from testhost.judge.pass_windows import (COUNT_FACTS, counts_not_compared, empty_pass, pass_bounded,
                                         pass_leaves_no_lease, process_counts)
from testhost.judge.pictures import normalize
from testhost.judge.rules import CheckResult
from testhost.judge.state import read_state
from testhost.judge.timelines import Timelines
from testhost.judge.verdict import baseline as make_baseline, fault_free_judges
from testhost.world.components import find_libfaketime
from testhost.world.sessions import KeptSession
from testhost.world.store import Store, StorePool
from testhost.world.worlds import CLOCK, NETWORK, World

from . import case_facts
from .barrier_facts import BarrierFacts
from .step_runs import RUNS

SCOPE = "tenant-a"
MAX_DRAIN_PASSES = 20
# How far the server's clock may be from the host's reading of it when the host decides that the history
# partition of the month the clock stands in already exists.
PARTITION_MARGIN = timedelta(minutes=5)
REFERENCE_COMMAND = f"{shlex.quote(sys.executable)} -m reference.adapter"
# The folder holding the harness's own `reference` package, beside `testhost`: the reference's census beside another
# --impl starts REFERENCE_COMMAND there, so it runs that package whatever the run's working directory or
# PYTHONPATH hold (`python -m` looks in the working directory first).
REFERENCE_ROOT = str(Path(__file__).resolve().parents[2])
# A fallback retries like any client; its attempts are spaced so a restarted server has time to accept.
FALLBACK_ATTEMPTS = 5
FALLBACK_PAUSE_S = 0.3
# Starts of the implementation one case may make (first start, restarts after faults, a takeover processor,
# retries): a program that dies at every start ends its case here instead of being restarted without end.
MAX_STARTS = 8
# A step run beside a held barrier is cancelled by the host as soon as the server shows it waiting for a lock (it
# then waits for the held transaction), and in any case after BESIDE_LIMIT_S. The host cancels it itself:
# PostgreSQL's own lock_timeout and statement_timeout never fire once libfaketime has moved the server clock (seen
# here: a lock wait under lock_timeout = 500ms outlived 60 s).
BESIDE_POLL_S = 0.01
BESIDE_LIMIT_S = 5.0
# Barriers reached only once a schedule's decision has committed in this pass.
DECIDED_AT = {"schedule-decision-after-commit", "schedule-work-after-acceptance", "schedule-bridge-before-commit",
              "schedule-link-after-commit"}


_pools: dict[tuple, StorePool] = {}


def await_commits_in_flight(session: KeptSession, limit_s: float = 2.0, poll_s: float = 0.005) -> tuple[int, float]:
    """Wait, bounded, until no session of the implementation's roles holds a transaction ID on the case's database;
    how many still did, and how long it waited."""
    started = time.monotonic()
    while True:
        with session() as conn:  # the verifier's session: rows are dicts
            open_xids = conn.execute(
                "select count(*) as n from pg_stat_activity where datname = current_database() "
                "and backend_xid is not null and usename in (%s, %s)", (RUNTIME, DISPATCHER)).fetchone()["n"]
        waited = time.monotonic() - started
        if not open_xids or waited > limit_s:
            return open_xids, round(waited, 3)
        time.sleep(poll_s)


def store_pool(world: World, migrations: Path | None = None) -> StorePool:
    """The world's pool of prepared stores per schema (made on first use, closed when the world goes down)."""
    key = (id(world), str(migrations) if migrations else None)
    if key not in _pools:
        _pools[key] = StorePool(world, migrations=migrations, history_at=T0 if world.capabilities.has(CLOCK) else None)
        world.on_down.append(lambda: _pools.pop(key).close())
    return _pools[key]


@dataclass
class CaseOutcome:
    plan: CasePlan
    verdict: str  # pass, fail, error, not-run
    reason: str = ""
    checks: list[CheckResult] = field(default_factory=list)
    timeline: list[dict] = field(default_factory=list)
    duration_s: float = 0.0
    hits: dict[str, int] = field(default_factory=dict)
    picture: dict | None = None  # the database's final state, run-independent (checks.normalize)
    model_picture: dict | None = None  # what the model says this timeline must end in
    fallbacks: list[str] = field(default_factory=list)
    implementation: str = ""
    operations: list[str] = field(default_factory=list)  # what the implementation's hello declared
    contract: int | None = None  # the contract major version the hello targets, if it named one
    logs: dict[str, str] = field(default_factory=dict)  # instance -> its stderr log
    cause: str = ""  # of an `error` verdict: "implementation" (it broke the protocol) or "harness"
    clock_skew: dict[str, dict] = field(default_factory=dict)  # instance -> its OS clock's skew, as verified
    measurements: dict = field(default_factory=dict)  # figures a case reports beside its verdict (`restore-drills`)
    facts: dict = field(default_factory=dict)  # what the run's diagnosis reads of the implementation (case_facts.py)

    @property
    def baseline(self) -> dict | None:
        """What this run hands its scenario's faulted cases when it is the fault-free run."""
        return make_baseline(self.picture, self.model_picture)

    def to_json(self) -> dict:
        found = {"id": self.plan.id, "scenario": self.plan.scenario, "barrier": self.plan.barrier,
                 "fault": self.plan.fault, "hit": self.plan.hit, "verdict": self.verdict, "reason": self.reason,
                 "checks": [c.to_json() for c in self.checks], "timeline": self.timeline,
                 "duration_s": round(self.duration_s, 3), "barrier_hits": self.hits, "fallbacks": self.fallbacks,
                 "operations": self.operations, "logs": self.logs}
        if self.contract is not None:
            found["contract"] = self.contract
        if self.measurements:
            found["measurements"] = self.measurements
        if self.verdict == "error":
            found["cause"] = self.cause or "harness"
        if self.clock_skew:
            found["clock_skew"] = self.clock_skew
        if self.facts:
            found["facts"] = self.facts
        return found


class CaseRun:
    """Everything one case needs while it runs; faults call back into it (advance, drain, start)."""

    def __init__(self, world: World, scenario: Scenario, plan: CasePlan, command: str, log_dir: Path,
                 migrations: Path | None = None, clock_offset: timedelta | None = None, instance_commands: bool = True,
                 cwd: str | None = None):
        self.world, self.scenario, self.plan, self.command = world, scenario, plan, command
        self.cwd = cwd  # where every instance starts (None: this process's working directory)
        self.clock_offset = clock_offset  # --impl-clock-offset: every instance's OS clock, unless it sets its own
        self.instance_commands = instance_commands  # False in the reference's census beside another --impl
        self.clock_skew: dict[str, dict] = {}  # instance -> how its skew was verified (testhost/impl/skew.py)
        self.migrations = migrations
        self.log_dir = log_dir
        self.store: Store | None = None
        self.impls: dict[str, Implementation] = {}
        self.started: list[Implementation] = []  # every process this case started, stopped at its end
        self.logs: dict[str, Path] = {}
        self.timeline: list[dict] = []
        self.hits: dict[str, int] = {}
        self.injection: Injection | None = None
        self.fault_error: str | None = None
        self.on_recovery: list = []
        self.fallbacks: set[str] = set()
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._fallback_client = None
        self._fallback_work = None
        self.concurrent = False  # two processors are running side by side
        self.racers: dict[str, threading.Thread] = {}  # the threads of the last `race` step, by instance
        self._protocol_error: AdapterProtocolError | None = None  # raised in a racing thread, re-raised here
        self.schedule_ids = {name: scenario.schedule_id(name) for name in scenario.schedules}
        self.schedule_names = {str(i): name for name, i in self.schedule_ids.items()}  # Schedule ID text -> name
        # Per schedule, its Work IDs in the order they were accepted: accepted_at_utc alone misorders Work accepted
        # after the clock was set back, so the order is taken before each backward move and extended after it.
        self.work_order: dict[str, list[str]] = {}
        self.model = Timelines()  # what Gate A says this timeline must produce, kept step by step
        self.client_outcomes: list[tuple[Step, Response, dict]] = []
        self.command_facts: dict[str, list] = {}  # per client check, what each client step showed it
        self.coalesced_seen: list[tuple[int, dict]] = []  # pending coalesced rows after each step
        self.late_probe: tuple[dict, dict] | None = None  # a paused processor's schedule rows before it resumed
        self.late_check: CheckResult | None = None
        self.drained_at: datetime | None = None
        self._partitioned_month: tuple[int, int] | None = None  # its partition and the next one exist
        self.planted: set = set()
        # Per request to an implementation: its outcome, the after-commit barriers it reported meanwhile and the
        # barrier where the fault fired during it, to judge a `fail` against what the verifier knows committed.
        self.answers: list[dict] = []
        self.asking: dict[str, dict] = {}
        self._freeze_next = False  # a set-clock step froze the clock for the step after it
        self.frozen_instants: set[datetime] = set()  # where the server clock stood still in this case
        self.recovered = False  # the fault's recovery has run
        self.healed = False  # the fault's recovery has healed the world and restarted what died (its passes follow)
        self.after_recovery: list = []  # what waits for the recovery (a step beside a pass a fault interrupted)
        self.beside: dict | None = None  # the step a pass runs beside its held barrier, while the pass runs
        self.beside_outcomes: list[dict] = []
        self.snapshots: dict[str, tuple] = {}  # name -> (store snapshot, model)
        self.restores: list[dict] = []
        self.restored_at_step = False  # the step just run restored the store: its observation starts afresh
        # Per stretch of time with a `process-due` request in flight (two when processors race): the counts the
        # answers reported and the committed facts the verifier read before and after, for `process-counts`.
        self.count_windows: list[dict] = []
        self.window: dict | None = None
        self._window_lock = threading.Lock()
        self._expecting = False  # a pass whose step expects an answer (a refused lease) is being asked
        self.passes_asked = 0  # process-due requests sent so far, to tell a stretch in which none was
        self.bridge_clock = BridgeClock(self, scenario.bridge_clock_shift_s) if scenario.bridge_clock_shift_s else None
        self.barrier_facts = BarrierFacts()  # each schedule's rows and their writers, read at its barriers
        self.cancel_plans: list[CancelPlan] = []  # each `process` step's `cancel_at` that has run, in order
        self.denied_passes: list[dict] = []  # passes whose bridge must be refused (testhost/judge/bridge_role.py)
        self.demotions: list[bridge_role.Demotion] = []  # passes whose runtime role is taken after their decision
        self.default_role_set = False  # the store's default role for bridge_role.DEFAULT_ROLE_LOGIN, reset at the end
        self.log_offset: int | None = None  # where the server log stood when the case began (case_facts.py)
        self.runtime_logins: set[str] = set()  # every login CRASHPROOF_RUNTIME_DSN named in this case
        self.final_state = None  # the store as the checks read it at the end

    @property
    def owner(self) -> KeptSession:
        """The verifier's session (migration owner, direct, autocommit), the store's: `with self.owner() as conn`."""
        return self.store.verifier

    # -- timeline ---------------------------------------------------------------------------------------

    def note(self, event: str, **details: Any) -> None:
        self.timeline.append({"t": round(time.monotonic() - self._started, 3), "event": event, **details})

    # -- implementations and barriers ----------------------------------------------------------------------

    @property
    def network_faulted(self) -> bool:
        """Whether this case's fault acts on the network, so the implementation must reach the server through
        the proxy. Otherwise its DSNs go straight to the server: the proxy would only relay the bytes (it was
        about 7% of a case's CPU, and one more hop for every round trip)."""
        return self.plan.fault is not None and NETWORK in FAULTS[self.plan.fault].needs

    def start_implementation(self, label: str) -> Implementation:
        proxied = self.network_faulted
        instance = self.scenario.instances.get(label)
        runtime_user = RUNTIME
        if instance is not None and instance.runtime_login is not None:
            runtime_user = bridge_role.LOGIN_ROLES[instance.runtime_login]
            bridge_role.ensure_member(self.world, runtime_user)
            if runtime_user == bridge_role.DEFAULT_ROLE_LOGIN:  # its sessions in this store begin as the runtime role
                bridge_role.set_default_role(self.world, self.store.dbname, runtime=True)
                self.default_role_set = True
        self.runtime_logins.add(runtime_user)
        env = adapter_environment(self.store.dsn(runtime_user, proxied=proxied),
                                  self.store.dsn(DISPATCHER, proxied=proxied), SCOPE, DEADLINE_S)
        if len(self.started) >= MAX_STARTS:
            last = self.started[-1]
            raise ImplementationDied(f"started {len(self.started)} times in this case, the implementation ended "
                                     f"each time; the last: {last.death_reason()}")
        self.logs[label] = self.log_dir / self.plan.id / f"{label}.stderr"
        command, extra, offset = instance_setup(self.scenario.instances.get(label), self.command, self.clock_offset,
                                                self.instance_commands)
        impl = Implementation(command, {**env, **extra}, self.on_barrier, self.logs[label], label=label,
                              server_environment=skew.server_environment(extra) if offset is not None else {},
                              cwd=self.cwd)
        self.started.append(impl)
        try:
            impl.start()
        finally:  # a start that failed is on the timeline too, with the pid of what was started
            self.note("start", instance=label, pid=impl.pid, launcher=impl.launched_by,
                      **({} if impl.hello else {"failed": True}), **({"command": command} if command != self.command
                                                                       else {}))
        if offset is not None:
            self.clock_skew[label] = skew.worst(self.clock_skew.get(label), skew.verify(
                offset, impl.hello, impl.started_utc, impl.hello_utc, impl.pid, find_libfaketime()))
            self.note("clock-skew", instance=label, **self.clock_skew[label])
        return impl

    def on_barrier(self, impl: Implementation, name: str, context: dict) -> str | None:
        self._run_beside(impl, name)
        with self._lock:
            armed = self.injection is None and self.plan.fault is not None
            if armed:
                self.hits[name] = self.hits.get(name, 0) + 1
                fire = name == self.plan.barrier and self.hits[name] == self.plan.hit
            else:
                if self.plan.fault is None:
                    self.hits[name] = self.hits.get(name, 0) + 1
                fire = False
            if fire:
                self.injection = Injection(self.plan.fault, name, context=dict(context))
        self.note("barrier", instance=impl.label, name=name, context=context)
        asked = self.asking.get(impl.label)
        if asked is not None:
            if BY_NAME[name].position == "after-commit":
                asked["committed"].append(name)
            if fire:
                asked["faulted"] = name
        self._watch_barrier(impl, name, context, fire)
        if fire:
            self.note("fault", fault=self.plan.fault, barrier=name, hit=self.plan.hit, instance=impl.label)
            if BY_NAME[name].transaction in PROCESSOR_TRANSACTIONS:
                self.model.fork(self.decided_in_pass())  # what it claimed may be left to the recovery's clock
            try:
                FAULTS[self.plan.fault].inject(self, impl, BY_NAME[name], self.injection)
            except Exception as exc:  # noqa: BLE001 - a fault that could not be injected is a harness error
                self.fault_error = f"{type(exc).__name__}: {exc}"
                raise
            self.note("fault-injected", details=self.injection.details, open_xid=self.injection.open_xid)
            if self.bridge_clock is not None:  # a process that lived on may bridge without redoing its decision
                self.bridge_clock.after_fault(impl, name, context, self.plan.fault)
        if self.demotions:  # the runtime role taken from the login after a committed decision, before the reply
            self.demotions[-1].at_barrier(self, impl, name, context)
        # After any fault at this barrier: a cancel rides on the reply the implementation gets once it goes on.
        return self.cancel_plans[-1].at_barrier(self, impl, name, context) if self.cancel_plans else None

    def wait_for_other_racers(self, label: str, timeout: float | None = None) -> list[str]:
        """While two processors race, let every racer but `label` finish its pass (a fault calls this from the
        faulted processor's thread); the racers waited for."""
        from testhost.impl.implementation import TIMEOUT

        if not self.concurrent:
            return []
        waited = []
        for other, thread in self.racers.items():
            if other != label and thread is not threading.current_thread():
                thread.join(TIMEOUT["operation"] if timeout is None else timeout)
                waited.append(other)
        self.note("racers-finished", instances=waited)
        return waited
    def _watch_barrier(self, impl: Implementation, name: str, context: dict, fire: bool) -> None:
        """What the counts and the Work clock need from a barrier: a fault inside a counting window, and the
        committed decision at which the bridge's clock move starts."""
        self.barrier_facts.at_barrier(self, impl, name, context, fire)
        window = self.window
        if fire and window is not None:
            window["faults"].append(self.plan.fault)
        if self.bridge_clock is not None:
            self.bridge_clock.at_barrier(impl, name, context, faulted=fire)

    def decided_in_pass(self) -> set[str]:
        """The schedules whose decision the verifier saw commit since the step began (the barrier that fired
        included): a fault in that pass cannot leave them undecided. Only what the barriers' context names."""
        names = self.schedule_names
        start = max((i for i, e in enumerate(self.timeline) if e["event"] in ("step", "final-drain")), default=0)
        return {names[e["context"]["schedule_id"]] for e in self.timeline[start:]
                if e["event"] == "barrier" and e["name"] in DECIDED_AT
                and str((e.get("context") or {}).get("schedule_id")) in names}

    # -- world helpers -------------------------------------------------------------------------------

    def ensure_partitions(self) -> None:
        """History partitions for the server's month and the next, unless this case already made sure of the
        month the clock stands in (a clock step far from a month's edge cannot leave it)."""
        now = self.world.clock.now()
        months = {(t.year, t.month) for t in (now - PARTITION_MARGIN, now + PARTITION_MARGIN)}
        if months == {self._partitioned_month}:
            return
        with self.owner() as conn:
            conn.execute("select appsurface_durable.ensure_schedule_history_partitions()")
        self._partitioned_month = months.pop() if len(months) == 1 else None

    def advance(self, delta: timedelta) -> None:
        if delta < timedelta(0):
            self._works_in_acceptance_order()
        self.world.clock.shift(delta)
        if self.world.clock.frozen:
            self.frozen_instants.add(self.world.clock.now())
        self.ensure_partitions()
        self.note("clock", shift_s=delta.total_seconds())

    def anything_due(self) -> bool:
        with self.owner() as conn:
            return conn.execute("select exists (select 1 from appsurface_durable.schedule_dispatch_timing "
                                "where claimable_at_utc <= clock_timestamp()) as due").fetchone()["due"]

    def drain(self, impl: Implementation) -> int:
        """Fault-free passes until nothing is due (or a pass claims nothing)."""
        self.model.drain(self.world.clock.now())
        self.drained_at = self.world.clock.now()
        passes = 0
        while passes < MAX_DRAIN_PASSES and self.anything_due():
            response = self._ask(impl, "process-due", {"maximum_schedules": 64,
                                                       "lease_seconds": self.scenario.lease_seconds})
            passes += 1
            self.note("response", instance=impl.label, op="process-due", outcome=response.outcome,
                      value=response.value, error=response.error)
            if response.died or (isinstance(response.value, dict) and response.value.get("claimed") == 0):
                break
        self.model.ran_until(self.world.clock.now())
        return passes

    # -- steps ---------------------------------------------------------------------------------------------

    def schedule_rows(self, schedule_id: str) -> dict:
        """Everything durable about one schedule (for the late-write fence)."""
        with self.owner() as conn:
            def rows(sql: str) -> list:
                return [dict(r) for r in conn.execute(sql, (schedule_id,)).fetchall()]
            return {
                "definition": rows("select * from appsurface_durable.schedule_definitions where schedule_id = %s"),
                "dispatch": self.dispatch_rows(schedule_id),
                "occurrences": rows("select * from appsurface_durable.schedule_occurrences where schedule_id = %s "
                                    "order by generation, occurrence_kind, first_nominal_utc"),
                "history": rows("select count(*) as events from appsurface_durable.schedule_history "
                                "where schedule_id = %s"),
            }

    def observe_coalesced(self, index: int) -> None:
        # After every step: the three statements travel in one round trip (a pipeline), read when it syncs.
        with self.owner() as conn, conn.pipeline():
            rows = conn.execute("select schedule_id, generation, first_nominal_utc, last_nominal_utc, state "
                                "from appsurface_durable.schedule_occurrences "
                                "where occurrence_kind = 'coalesced'")
            # The raw cursor beside what was decided so far, to tell a cursor that moved with no decision.
            cursors = conn.execute(
                "select d.schedule_id::text as schedule_id, d.cursor_utc, d.active_generation, "
                "d.revision, d.lifecycle_state, d.suspension_reason, d.runtime_epoch, d.scope_generation, "
                "(select count(*) from appsurface_durable.schedule_occurrences o where o.schedule_id = d.schedule_id) "
                "as occurrences, (select max(last_nominal_utc) from appsurface_durable.schedule_occurrences o "
                "where o.schedule_id = d.schedule_id) as last_decided, (select count(*) from "
                "appsurface_durable.schedule_history h where h.schedule_id = d.schedule_id "
                "and h.event = 'recovery-skipped') as skipped, (select count(*) from "
                "appsurface_durable.schedule_occurrences o where o.schedule_id = d.schedule_id "
                "and o.work_id is not null) as linked, (select q.lease_generation from "
                "appsurface_durable.schedule_dispatch q where q.schedule_id = d.schedule_id) as lease_generation "
                "from appsurface_durable.schedule_definitions d")
            # What only a processor writes, store-wide, to tell a stretch with no pass asked that changed it; and the
            # schedules a pending coalesced occurrence waits in with its slot free and no lease held: a Work's
            # terminal transaction requeued them, so each must be claimable now. One statement for both.
            processor_facts = conn.execute(
                "select (select coalesce(sum(lease_generation), 0) from appsurface_durable.schedule_dispatch) "
                "as claims, (select count(*) from appsurface_durable.schedule_history where event = 'suspended') "
                "as suspended, clock_timestamp() as server_now, (select coalesce(jsonb_agg(jsonb_build_object("
                "'schedule_id', d.schedule_id::text, 'claimable_at_utc', t.claimable_at_utc)), '[]') "
                "from appsurface_durable.schedule_definitions d "
                "join appsurface_durable.schedule_dispatch q on q.schedule_id = d.schedule_id "
                "join appsurface_durable.schedule_dispatch_timing t on t.dispatch_id = q.dispatch_id "
                "where d.lifecycle_state = 'active' and q.lease_state = 'ready' and exists (select 1 from "
                "appsurface_durable.schedule_occurrences p where p.schedule_id = d.schedule_id "
                "and p.generation = d.active_generation and p.occurrence_kind = 'coalesced' and p.state = 'pending') "
                "and not exists (select 1 from appsurface_durable.schedule_occurrences o join "
                "appsurface_durable.work_items w on w.work_id = o.work_id where o.schedule_id = d.schedule_id "
                "and o.state = 'materialized' and w.state not in ('succeeded', 'failed', 'canceled'))) as requeued")
            # Every generation row as it reads now, to hold each to what it was when first read.
            generations = conn.execute("select * from appsurface_durable.schedule_generations")
        rows, cursors, processor_facts = rows.fetchall(), cursors.fetchall(), dict(processor_facts.fetchone())
        generations = {(str(g["schedule_id"]), g["generation"]): dict(g) for g in generations.fetchall()}
        requeued = [{"schedule_id": r["schedule_id"], "server_now": processor_facts["server_now"],
                     "claimable_at_utc": datetime.fromisoformat(r["claimable_at_utc"])
                     if r["claimable_at_utc"] else None} for r in processor_facts.pop("requeued")]
        key = lambda r: (str(r["schedule_id"]), r["generation"], r["first_nominal_utc"])  # noqa: E731
        self.coalesced_seen.append((index, {"all": {key(r): dict(r) for r in rows},
                                            "pending": {key(r): dict(r) for r in rows if r["state"] == "pending"},
                                            "cursors": {r["schedule_id"]: dict(r) for r in cursors},
                                            # what Gate A holds fenced after this step, to judge the step by
                                            "fenced": {str(self.schedule_ids[name]): s.suspension
                                                       for name, s in self.model.schedules.items()
                                                       if s.lifecycle == "suspended" and s.suspension in FENCE_REASONS
                                                       and name in self.schedule_ids},
                                            # a restore put older rows back: not a move of this timeline
                                            "restored": self.restored_at_step,
                                            "passes_asked": self.passes_asked, "processor": processor_facts,
                                            "requeued": {r["schedule_id"]: dict(r) for r in requeued},
                                            "generations": generations,
                                            # a pass step the checks may hold to what was due when it began: no fault
                                            # so far, no refusal expected or bridge denied
                                            "clean_pass": self.clean_pass(index)}))
        self.barrier_facts.note_cursors(f"after step {index + 1}", {r["schedule_id"]: r["cursor_utc"] for r in cursors},
                                        restored=self.restored_at_step)
        self.restored_at_step = False

    def clean_pass(self, index: int) -> bool:
        """Step `index` was a pass (`process` or `race`) with no fault injected by its end, no refusal expected of it
        and no bridge to be denied."""
        step = self.scenario.steps[index] if 0 <= index < len(self.scenario.steps) else None
        return step is not None and step.op in ("process", "race") and self.injection is None \
            and "expect" not in step.args and pass_denial(self.scenario, step) is None

    def dispatch_rows(self, schedule_id: str | None = None) -> list:
        """Dispatch rows with their timing (one schedule's, or all)."""
        with self.owner() as conn:
            return [dict(r) for r in conn.execute(
                "select d.*, t.due_at_utc, t.claimable_at_utc, t.lease_owner, t.lease_expires_at_utc "
                "from appsurface_durable.schedule_dispatch d join appsurface_durable.schedule_dispatch_timing t "
                "using (dispatch_id) where %(id)s::uuid is null or d.schedule_id = %(id)s::uuid "
                "order by d.schedule_id", {"id": schedule_id}).fetchall()]

    def plant_work(self, args: dict) -> None:
        """As a plain Work caller (straight into the Work store), take an occurrence's idempotency key for a
        Work that is not the occurrence's: the bridge must find the mismatch and link nothing."""
        generation, kind, first = args.get("generation", 1), args.get("kind", "nominal"), relative(args["first"])
        key = expected_work(SCOPE, self.schedule_ids[args["schedule"]], generation, kind, first, "")["idempotency_key"]
        work_id = uuid.uuid5(uuid.NAMESPACE_URL, "crashproof/planted/" + key)
        with self.owner() as conn:
            conn.execute("insert into appsurface_durable.work_items (scope_id, work_id, idempotency_key, command, "
                         "activity, payload) values (%s, %s, %s, 'plain-caller', 'plain-caller/activity', '{}')",
                         (SCOPE, work_id, key))
        self.planted.add(work_id)
        self.model.plant(args["schedule"], generation, kind, first)
        self.note("planted-work", work_id=str(work_id), idempotency_key=key)

    def revision_of(self, schedule: str) -> int:
        """The schedule's current definition revision as the store holds it (0: none yet)."""
        with self.owner() as conn:
            row = conn.execute("select revision from appsurface_durable.schedule_definitions where schedule_id = %s",
                               (self.schedule_ids[schedule],)).fetchone()
        return row["revision"] if row else 0

    def nth_work(self, schedule: str, nth: int) -> str | None:
        """The schedule's Work ID `nth` in acceptance order (1 the first, -1 the last; None: no such Work)."""
        works = self._works_in_acceptance_order().get(schedule, [])
        index = nth - 1 if nth > 0 else nth
        return works[index] if -len(works) <= index < len(works) else None

    def _works_in_acceptance_order(self) -> dict[str, list[str]]:
        """Each schedule's Work IDs in acceptance order: those seen before and still in the store (a restore drill
        takes back what it did not hold), then the new ones by accepted_at_utc (no backward clock move has come
        between them, since one takes this order first)."""
        with self.owner() as conn:
            rows = conn.execute("select work_id, split_part(idempotency_key, '|', 3) as schedule_id "
                                "from appsurface_durable.work_items where idempotency_key like %s "
                                "order by accepted_at_utc, work_id", (f"schedule-occurrence/v1|{SCOPE}|%",)).fetchall()
        present = {str(row["work_id"]) for row in rows}
        self.work_order = {name: [w for w in order if w in present] for name, order in self.work_order.items()}
        for row in rows:
            name = self.schedule_names.get(row["schedule_id"])
            if name is None:
                continue  # a Work no schedule of this case owns
            order = self.work_order.setdefault(name, [])
            if str(row["work_id"]) not in order:
                order.append(str(row["work_id"]))
        return self.work_order

    def _work_state(self, work_id: str) -> str | None:
        with self.owner() as conn:
            row = conn.execute("select state from appsurface_durable.work_items where work_id = %s",
                               (work_id,)).fetchone()
        return row["state"] if row else None

    def client_op(self, op: str, args: dict, attempts: int = 3) -> Response:
        """Through the implementation when it offers the operation, else the reference over the normative schema.

        Like any caller, the harness retries (bounded) an outcome that is unknown or a retriable failure; a
        Work transition already applied by an attempt whose reply was lost counts as done. Every attempt of one
        step carries the same command ID, so a repeated schedule command whose first reply was lost returns the
        schedule as it stands instead of applying twice. A fallback that cannot complete the step is a harness
        error (FallbackFailed), never charged to the implementation.
        """
        command_id = uuid.UUID(args["command_id"]) if "command_id" in args else uuid.uuid4()
        for attempt in range(attempts):
            impl = self.impls["A"]
            if impl.supports(op):
                response = self._ask(impl, op, args)
            else:
                self.fallbacks.add(op)
                response = self._fallback_with_retry(op, args, command_id)
            retriable = response.outcome == "unknown" or (response.outcome == "fail" and (response.error or {}).get("retriable"))
            if not retriable or attempt == attempts - 1:
                return response
            self.record(response, f"{op} (will retry)")
            if response.died:
                self.impls["A"] = self.start_implementation("A")
            if op == "complete-work" and self._work_state(args["work_id"]) == args["state"]:
                return Response("ok", value=self._work_row(args["work_id"]))  # applied by an earlier attempt
        return response

    def _fallback_with_retry(self, op: str, args: dict, command_id: uuid.UUID) -> Response:
        """The fallback, reconnecting and retrying after a rollback or a lost reply like any client (a fault may
        have killed its connection or restarted the server); what still fails is the harness's error."""
        last = None
        for attempt in range(FALLBACK_ATTEMPTS):
            response, error = self._fallback(op, args, command_id)
            if error is None:
                return response
            last = error
            self.note("fallback-retry", op=op, attempt=attempt + 1, error=error)
            if op == "complete-work" and self._work_state(args["work_id"]) == args["state"]:
                return Response("ok", value=self._work_row(args["work_id"]))
            time.sleep(FALLBACK_PAUSE_S)
        raise FallbackFailed(f"harness fallback (reference {'Work store' if op == 'complete-work' else 'client'}) "
                             f"could not run {op} after {FALLBACK_ATTEMPTS} attempts: {last}; the implementation "
                             f"does not offer {op}, so this is not its failure")

    def _fallback(self, op: str, args: dict, command_id: uuid.UUID) -> tuple[Response | None, str | None]:
        """One attempt: (the response, None), or (None, why it failed) after which the connection is renewed."""
        import psycopg

        from reference.errors import DurableError

        try:
            return self.fallback_call(op, args, command_id), None
        except (DurableError, psycopg.Error) as exc:
            self.close_fallbacks()
            return None, f"{type(exc).__name__}: {exc}"

    def fallback_call(self, op: str, args: dict, command_id: uuid.UUID) -> Response:
        from reference import ScheduleClient, WorkStore
        from reference.adapter import run_command
        from reference.problems import Problem

        if op == "complete-work":
            if self._fallback_work is None or self._fallback_work.session.broken:
                self.close_fallbacks()
                self._fallback_work = WorkStore(self.store.runtime_dsn, SCOPE, deadline=DEADLINE_S)
            result = self._fallback_work.transition(uuid.UUID(args["work_id"]), args["state"])
        else:
            if self._fallback_client is None or self._fallback_client.session.broken:
                self.close_fallbacks()
                self._fallback_client = ScheduleClient(self.store.runtime_dsn, SCOPE, deadline=DEADLINE_S)
            result = run_command(self._fallback_client, op, args, command_id)
        if isinstance(result, Problem):
            return Response("fail", problem=result.to_json())
        return Response("ok", value=protocol_json(result.to_json() if hasattr(result, "to_json") else result))

    def close_fallbacks(self) -> None:
        for name in ("_fallback_client", "_fallback_work"):
            resource = getattr(self, name)
            setattr(self, name, None)
            if resource is not None:
                try:
                    resource.close()
                except Exception:  # noqa: BLE001 - a dead connection may fail to close; it is dropped either way
                    pass

    def _work_row(self, work_id: str) -> dict:
        with self.owner() as conn:
            return protocol_json(dict(conn.execute("select * from appsurface_durable.work_items where work_id = %s",
                                                   (work_id,)).fetchone()))

    def step(self, step: Step) -> None:
        """One step of the timeline, run by its kind's run (step_runs.py; the kind itself: scenarios/steps.py)."""
        self.note("step", index=step.index, op=step.op, args={k: v for k, v in step.args.items() if k != "spec"})
        frozen, self._freeze_next = self._freeze_next, False
        try:
            RUNS[step.op].run(self, step)
        finally:
            if frozen:  # it stood still for this step alone, and runs on from where it stands
                self.world.clock.unfreeze()
                self.note("clock-set", unfrozen_at=instant_text(self.world.clock.now()))

    @property
    def scope(self) -> str:
        return SCOPE

    def set_clock(self, when: datetime, *, freeze: bool) -> None:
        """The server clock at `when`; frozen there for the next step when asked (the step after this one)."""
        if when < self.world.clock.now():
            self._works_in_acceptance_order()
        if freeze:
            self.world.clock.freeze(when)
            self.frozen_instants.add(when)
            self._freeze_next = True
        else:
            self.world.clock.set_time(when)
        self.ensure_partitions()
        self.note("clock-set", set_to=instant_text(when), frozen=freeze)

    def run_pass(self, step: Step, labels: list[str], request: dict) -> None:
        """A process-due request to each labelled copy (at once when several), with the model's pass; a pass
        with `during` runs that step beside its held barrier and orders the model by what the step did."""
        for label in labels:
            if label not in self.impls:
                self.impls[label] = self.start_implementation(label)
        denial = pass_denial(self.scenario, step)
        if denial is not None:
            self.denied_pass(step, labels[0], request, denial)
            return
        if step.args.get("demote_after_decision"):
            self.demoted_pass(step, labels[0], request)
            return
        cutoff = self.world.clock.now()
        model_limit = min(request["maximum_schedules"], request.get("cancel_after", 1 << 30)) * len(labels)
        if "cancel_at" in step.args:
            model_limit = pass_limit(step.args) * len(labels)
            self.cancel_plans.append(CancelPlan(step.index, labels[0], step.args["cancel_at"]["barrier"],
                                          step.args["cancel_at"].get("hit", 1), any(
                                              s.op in ("update", "delete") for s in self.scenario.steps[step.index:])))
        beside = during_step(step)
        try:
            if "expect" in step.args:  # a pass the scenario expects an answer of, e.g. a refused lease
                before = self.dispatch_rows()
                self._expecting = True
                try:
                    response = self._ask(self.impls[labels[0]], "process-due", request)
                finally:
                    self._expecting = False
                self.record(response, "process-due", labels[0])
                after = self.dispatch_rows()
                refused_but_changed = ({"before": before, "after": after}
                                       if response.outcome == "fail" and before != after else {})
                self.client_outcomes.append((step, response, refused_but_changed))
                if step.expected_outcome == "ok":
                    self.model.pass_(cutoff, request["maximum_schedules"])
            else:
                if beside is not None:  # the model as it stood before the pass, should the step beside it come first
                    self.beside = {"barrier": beside[0], "hit": beside[1], "step": beside[2], "seen": 0,
                                    "outcome": None, "model_before": copy.deepcopy(self.model), "cutoff": cutoff,
                                    "limit": model_limit}
                # The model first: a fault inside the pass branches it there, and its recovery drains on top.
                # More schedules due than the pass may claim: which it claims is the store's to say (31p).
                choosing = beside is None and len(labels) == 1 and len(self.model.schedules) > model_limit \
                    and self.model.due_count(cutoff) > model_limit
                if choosing:
                    leases_before, fired_before = self._lease_generations(), self.injection is not None
                self.model.pass_(cutoff, model_limit)
                fault_before_pass = self.injection is not None
                if len(labels) == 1:
                    if "cancel_at" in step.args:
                        self.cancel_plans[-1].armed = True
                    self._respond(self.impls[labels[0]], "process-due", request)
                    if "cancel_at" in step.args:
                        self.cancel_plans[-1].armed = False
                        self.cancel_plans[-1].after_answer(self, self.answers[-1] if self.answers else None)
                    if choosing and fired_before == (self.injection is not None):  # no fault fired in this pass
                        self._claims_seen(leases_before)
                    if beside is None and "cancel_at" not in step.args \
                            and fault_before_pass == (self.injection is not None):
                        self.model.ran_until(self.world.clock.now())  # an instant that fell due as it ran (38e)
                else:
                    threads = [threading.Thread(target=self._respond, args=(self.impls[label], "process-due", request))
                               for label in labels]
                    self.racers = dict(zip(labels, threads))
                    self.concurrent = True
                    for thread in threads:
                        thread.start()
                    for thread in threads:
                        thread.join()
                    self.concurrent = False
                if beside is not None:
                    self.judge_late_writes()  # before the step beside runs again: its writes are no late writes
                    self._after_beside()
        finally:
            self.beside = None

    def denied_pass(self, step: Step, label: str, request: dict, denial: str) -> None:
        """A pass whose bridge must be refused: its privilege revoked for it alone (granted back however it ends),
        the scoped rows read around it; the model takes nothing from it."""
        revoked = denial in REVOCABLE
        try:
            with self.owner() as conn:
                if revoked:
                    bridge_role.set_privilege(conn, denial, granted=False)
                not_in_effect = bridge_role.denial_in_effect(conn, denial)
                due = conn.execute("select exists (select 1 from appsurface_durable.schedule_dispatch_timing "
                                   "where claimable_at_utc <= clock_timestamp()) as due").fetchone()["due"]
                before = bridge_role.rows(conn)
            offset = bridge_role.log_offset(self.world) if revoked else None
            fired_before = self.injection is not None
            self._expecting = True
            try:
                response = self._ask(self.impls[label], "process-due", request)
            finally:
                self._expecting = False
            with self.owner() as conn:
                after = bridge_role.rows(conn)
            refused = bridge_role.denials_logged(self.world, offset, denial) if revoked else None
        finally:
            if revoked:
                with self.owner() as conn:
                    bridge_role.set_privilege(conn, denial, granted=True)
        self.record(response, "process-due", label)
        self._leases_left(before, after)
        self.note("denied-pass", denial=denial, due=due, not_in_effect=not_in_effect, denied_statements=refused)
        self.denied_passes.append({"step": step.index + 1, "instance": label, "denial": denial, "due": due,
                                   "not_in_effect": not_in_effect, "outcome": response.outcome,
                                   "error": response.error, "value": response.value,
                                   "changed": bridge_role.scoped_changes(before, after),
                                   "claims": bridge_role.claims(before, after), "denied_statements": refused,
                                   "faulted": not fired_before and self.injection is not None})

    def demoted_pass(self, step: Step, label: str, request: dict) -> None:
        """A pass whose copy's login loses the runtime role between its committed decision and its bridge (given
        back however the pass ends); the model takes its decision, no bridge, and the lease the store shows left."""
        demotion = bridge_role.Demotion(step.index + 1, label, self.store.dbname)
        self.demotions.append(demotion)
        demotion.start(self)
        self.model.pass_(self.world.clock.now(), 1, bridges=False)
        fired_before, response = self.injection is not None, None
        self._expecting = demotion.armed = True  # an answer that may be a refusal: its window is not a clean pass's
        try:
            response = self._ask(self.impls[label], "process-due", request)
        finally:
            self._expecting = demotion.armed = False
            demotion.end(self, response, faulted=not fired_before and self.injection is not None)
        self.record(response, "process-due", label)
        if demotion.after is not None:
            self._leases_left(demotion.before, demotion.after)

    def _lease_generations(self) -> dict[str, int]:
        """Each dispatch row's lease generation, by Schedule ID: a claim moves it by one."""
        with self.owner() as conn:
            return {str(r["schedule_id"]): r["lease_generation"] for r in conn.execute(
                "select schedule_id, lease_generation from appsurface_durable.schedule_dispatch").fetchall()}

    def _claims_seen(self, leases_before: dict[str, int]) -> None:
        """A pass bounded below the schedules due may claim any of them (a pass a fault fired in is left to the
        model's branches): the claim function orders by claimable time, which ties among schedules due at one
        instant and which requeues and expired leases move, and the spec orders nothing. The model predicted its
        claims; where the store shows the pass claimed others, the model takes the pass again with the claims seen,
        as many as it predicted (docs/protocol-notes.md, 31p)."""
        after = self._lease_generations()
        seen = sorted(self.schedule_names[i] for i, generation in after.items()
                      if i in self.schedule_names and generation > leases_before.get(i, 0))
        predicted = sorted(self.model.last_pass_claims())
        if len(seen) != len(predicted) or predicted == seen:
            return  # as predicted; or another number of claims, which the model's verdicts judge as they stand
        self.model.redo_last_pass(seen)
        self.note("model-claims", predicted=predicted, seen=seen)

    def _leases_left(self, before: dict, after: dict) -> None:
        """The leases a refused pass claimed and left to expire, as the store shows them, for the model: the claim
        function takes those schedules again only at their expiry, so a later pass bounded below the schedules due
        claims the others first. Read from the store, since how many schedules a refused pass claims before it
        answers is the implementation's (PROTOCOL.md, `bridge-failure-not-retriable`)."""
        was = {r["dispatch_id"]: r["lease_generation"] for r in before["schedule_dispatch"]}
        timing = {r["dispatch_id"]: r for r in after["schedule_dispatch_timing"]}
        for row in after["schedule_dispatch"]:
            name = self.schedule_names.get(str(row["schedule_id"]))
            claimable = (timing.get(row["dispatch_id"]) or {}).get("claimable_at_utc")
            if name in self.model.schedules and claimable and row["lease_generation"] > was.get(row["dispatch_id"], 0):
                self.model.lease_left(name, datetime.fromisoformat(claimable))

    def judge_late_writes(self) -> None:
        """Once a paused or stalled processor has finished its step: did it write anything for the schedule the
        takeover processed after its snapshot (judged once, at the first chance)?"""
        if self.late_probe is not None and self.late_check is None:
            context, before = self.late_probe
            self.late_check = late_writes(before, self.schedule_rows(context["schedule_id"]), context)

    def _after_beside(self) -> None:
        """A step beside a held barrier that waited for the pass's locks, or never met its barrier (a fault came
        first), runs now, after the pass, as in the model."""
        beside = self.beside
        outcome = beside["outcome"] or "barrier-not-reached"
        if outcome in ("committed", "refused"):
            pass  # it ran while the pass was held
        elif self.injection is not None and not self.recovered:
            # A fault interrupted this pass: the step waits for the recovery too, so the recovery finishes what the
            # pass committed (a decided occurrence's bridge) before the step can fence it, as the model has it.
            self.note("beside-barrier", op=beside["step"].op, barrier=beside["barrier"], outcome=outcome,
                      then="runs after the recovery")
            self.after_recovery.append(lambda: RUNS[beside["step"].op].run(self, beside["step"]))
        else:
            self.note("beside-barrier", op=beside["step"].op, barrier=beside["barrier"], outcome=outcome,
                      then="runs after the pass")
            RUNS[beside["step"].op].run(self, beside["step"])
        self.beside_outcomes.append({"step": beside["step"].index + 1, "op": beside["step"].op,
                                     "barrier": beside["barrier"], "hit": beside["hit"], "outcome": outcome})

    def _run_beside(self, impl: Implementation, name: str) -> None:
        """At the planned hit of a pass's `during` barrier: the step, from the host's own session."""
        beside = self.beside
        if beside is None or beside["outcome"] is not None or name != beside["barrier"]:
            return
        beside["seen"] += 1
        if beside["seen"] != beside["hit"]:
            return
        step = beside["step"]
        # A step that commits while the pass is held comes first: the pass must see it (a fence, or a lock it
        # waited for). The model takes it in that order: the step, then the pass again; one that waited keeps the
        # model's pass first and runs once the pass is over.
        # After a committed decision the pass's decisions came first: the model keeps its pass and takes the step
        # on top (a Work transition changes eligibility only, docs/protocol-notes.md 29i).
        # The pass's claims up to this hit were made before the step (the claim's row lock comes first, and the step
        # waits for it): those leases are the pass's whatever the step changes; its later claims see the step.
        after_decision = name in BESIDE_AFTER_DECISION
        claimed = beside["model_before"].claimed(beside["cutoff"], beside["limit"])[:beside["hit"]]
        after_pass, self.model = self.model, (self.model if after_decision else beside["model_before"])
        beside["outcome"] = RUNS[step.op].run_beside(self, step)
        if beside["outcome"] == "committed" and not after_decision:
            self.model.pass_(beside["cutoff"], beside["limit"], first=claimed)
        elif beside["outcome"] != "committed":
            self.model = after_pass
        self.note("beside-barrier", instance=impl.label, op=step.op, barrier=name, outcome=beside["outcome"])

    def owner_beside(self, sql: str, params: tuple = ()) -> bool:
        """One statement as the migration owner in a session of its own: True when it committed, False when it
        waited for a lock (the implementation's held transaction's)."""
        import psycopg

        with psycopg.connect(self.store.owner_dsn, autocommit=True) as conn, \
                _cancelled_when_blocked(conn, self.store.dsn("postgres")) as waited:
            try:
                conn.execute(sql, params)
                return True
            except psycopg.errors.QueryCanceled:
                if waited():
                    return False
                raise

    def fallback_beside(self, op: str, args: dict) -> Response | None:
        """A schedule command through the reference client in a session of its own (the implementation is held
        and answers nothing meanwhile): its response, or None when it waited for a lock. The step is the host's,
        like every fallback."""
        import psycopg

        from reference import ScheduleClient
        from reference.errors import DurableError

        self.fallbacks.add(f"{op} (beside a held barrier)")
        saved = self._fallback_client
        client = None
        try:
            client = self._fallback_client = ScheduleClient(self.store.runtime_dsn, SCOPE,
                                                            deadline=DEADLINE_S + BESIDE_LIMIT_S)
            with _cancelled_when_blocked(client.session.conn, self.store.dsn("postgres")) as waited:
                try:
                    return self.fallback_call(op, args, uuid.uuid4())
                except (DurableError, psycopg.Error) as exc:
                    if waited():
                        return None
                    raise FallbackFailed(f"harness fallback could not run {op} beside the held barrier: "
                                         f"{type(exc).__name__}: {exc}") from exc
        finally:
            self._fallback_client = saved
            if client is not None:
                client.close()

    def work_beside(self, work_id: str, state: str) -> Response | None:
        """A Work transition through the reference Work store in a session of its own: its response, or None when
        it waited for a lock (the held pass's dispatch row)."""
        import psycopg

        from reference import WorkStore
        from reference.errors import DurableError
        from reference.problems import Problem

        self.fallbacks.add("complete-work (beside a held barrier)")
        work = WorkStore(self.store.runtime_dsn, SCOPE, deadline=DEADLINE_S + BESIDE_LIMIT_S)
        try:
            with _cancelled_when_blocked(work.session.conn, self.store.dsn("postgres")) as waited:
                try:
                    row = work.transition(uuid.UUID(work_id), state)
                except (DurableError, psycopg.Error) as exc:
                    if waited():
                        return None
                    raise FallbackFailed(f"harness fallback could not run complete-work beside the held barrier: "
                                         f"{type(exc).__name__}: {exc}") from exc
            if isinstance(row, Problem):
                return Response("fail", problem=row.to_json())
            return Response("ok", value=protocol_json(row))
        finally:
            work.close()

    # -- backup and restore -------------------------------------------------------------------------------

    def take_snapshot(self, name: str) -> None:
        """Every row of the store in one snapshot, with the model as it stands, for a later restore."""
        from testhost.world.store import Snapshot

        self.snapshots[name] = (Snapshot.of(self.store), copy.deepcopy(self.model))
        self.note("snapshot", name=name, rows={table: len(rows) for table, rows in self.snapshots[name][0].rows.items()})

    def restore_snapshot(self, name: str) -> None:
        """As an operator restores a backup: the processors stop, the store's rows go back to the snapshot, the
        model with them; the clock goes on. What each instant's Work identity was before is kept for the drill's
        measurement."""
        from testhost.world.store import reset_store

        snapshot, model = self.snapshots[name]
        before = self.instant_identities()
        for label, impl in list(self.impls.items()):
            impl.stop()
        self.close_fallbacks()
        reset_store(self.store, snapshot)
        self.model = copy.deepcopy(model)
        self._partitioned_month = None
        self.ensure_partitions()
        self.restored_at_step = True
        self.restores.append({"snapshot": name, "before": before})
        for label in list(self.impls):
            self.impls[label] = self.start_implementation(label)
        self.note("restore", name=name, instants_with_work=len(before))

    def instant_identities(self) -> dict[tuple[str, str], str]:
        """Per (schedule name, nominal instant) covered by a linked occurrence: the Work ID it was accepted under."""
        with self.owner() as conn:
            state = read_state(conn)
        names = {str(schedule_id): name for name, schedule_id in self.schedule_ids.items()}
        found = {}
        for o in state.occurrences:
            if o["work_id"] is None:
                continue
            generation = generation_of(state.generation(o["schedule_id"], o["generation"]))
            for instant in generation.instants_between(o["first_nominal_utc"] - timedelta(microseconds=1),
                                                       o["last_nominal_utc"]):
                found[(names.get(str(o["schedule_id"]), str(o["schedule_id"])), instant_text(instant))] = \
                    str(o["work_id"])
        return found

    def restore_measurements(self) -> list[dict]:
        """For each restore: of the instants that had Work before it, how many have Work under another identity
        now, the same identity, or none (the spec accepts a changed identity after a restore; auditors count it)."""
        if not self.restores:
            return []
        now = self.instant_identities()
        out = []
        for restore in self.restores:
            before = restore["before"]
            same = sum(1 for key, work in before.items() if now.get(key) == work)
            other = sorted(key for key, work in before.items() if key in now and now[key] != work)
            out.append({"snapshot": restore["snapshot"], "instants_with_work_before_restore": len(before),
                        "same_work_identity": same, "another_work_identity": len(other),
                        "without_work_now": len(before) - same - len(other),
                        "reidentified": [{"schedule": k[0], "instant": k[1]} for k in other[:20]]})
        return out

    def _respond(self, impl: Implementation, op: str, request: dict) -> None:
        try:
            self.record(self._ask(impl, op, request), op, impl.label)
        except AdapterProtocolError as exc:
            self._protocol_error = exc

    def _ask(self, impl: Implementation, op: str, args: dict) -> Response:
        """One request to an implementation, kept in `answers` with what committed while it ran."""
        counting = op == "process-due"
        if counting:
            self._open_window(args)
        asked = self.asking[impl.label] = {"instance": impl.label, "op": op, "committed": [], "faulted": None}
        response = None
        try:
            response = impl.request(op, args)
        finally:
            self.asking.pop(impl.label, None)
            if counting:
                self._close_window(impl, response)
        self.answers.append({**asked, "outcome": response.outcome, "error": response.error,
                             "problem": response.problem, "died": response.died,
                             "expected_refusal": self._expecting,
                             # answered after a fault fired and before its recovery healed the world
                             "in_fault": self.injection is not None and not self.healed})
        return response

    def _during(self) -> str | None:
        """Which part of the case runs now: a scenario step, the recovery, the final drain or a settle."""
        for event in reversed(self.timeline):
            if event["event"] == "step":
                return f"step {event['index'] + 1} ({event['op']})"
            if event["event"] in ("recovery", "final-drain", "settle"):
                return event["event"]
        return None

    def _open_window(self, args: dict | None = None) -> None:
        """A `process-due` request is about to be sent: read the facts first unless another pass is in flight."""
        with self._window_lock:
            if self.window is None:
                before, leases = self._window_facts()
                self.window = {"before": before, "answers": [], "faults": [], "during": self._during(),
                                "in_flight": 0, "leases_before": leases, "requests": [],
                                # no fault yet in this case, and no answer the step expects (a refused lease)
                                "clean": self.injection is None and not self._expecting}
            self.window["in_flight"] += 1
            self.window["requests"].append(dict(args or {}))
            self.passes_asked += 1

    def _window_facts(self) -> tuple[dict, dict]:
        """The counts' facts and, per dispatch row, its lease state and generation (to tell a lease a pass took and
        left held), in one statement."""
        with self.owner() as conn:
            row = dict(conn.execute("select " + ", ".join(f"({sql})::bigint as {name}"
                                                          for name, sql in COUNT_FACTS.items())
                                    + ", (select coalesce(jsonb_object_agg(dispatch_id::text, jsonb_build_array("
                                      "lease_state, lease_generation)), '{}') from "
                                      "appsurface_durable.schedule_dispatch) as leases_").fetchone())
        leases = row.pop("leases_")
        return row, {d: (s, g) for d, (s, g) in leases.items()}

    def _close_window(self, impl: Implementation, response: Response | None) -> None:
        """A `process-due` answer came (or none: the request broke): the last one in flight reads the facts again."""
        with self._window_lock:
            window = self.window
            window["answers"].append({"instance": impl.label, "outcome": response.outcome if response else "none",
                                      "value": response.value if response else None})
            window["in_flight"] -= 1
            if window["in_flight"]:
                return
            self.window = None
            window["clean"] = window["clean"] and self.injection is None
            try:
                window["after"], window["leases_after"] = self._window_facts()
            except Exception as exc:  # noqa: BLE001 - the facts are unknown; the window is not compared
                window["after"], window["unread"] = None, f"{type(exc).__name__}: {exc}"
            self.count_windows.append(window)
        reason = counts_not_compared(window)
        if reason:
            self.note("counts-not-compared", reason=reason, during=window["during"],
                      instances=[a["instance"] for a in window["answers"]])

    def record(self, response: Response, op: str, label: str = "A") -> None:
        """A response on the timeline, under the operation that asked it and the instance that answered."""
        self.note("response", instance=label, op=op, outcome=response.outcome, value=response.value,
                  problem=response.problem, error=response.error)

    # -- recovery ---------------------------------------------------------------------------------------

    def recover(self, step: Step | None) -> None:
        """Heal the world, restart what died, move the clock past the dead lease, redo an interrupted Work step,
        and run fault-free passes until nothing is due."""
        self.note("recovery")
        for hook in self.on_recovery:
            hook()
        if self.world.proxy is not None:
            self.world.proxy.heal()
        if self.network_faulted:
            self._await_commits_in_flight()
        for label, impl in list(self.impls.items()):
            if not impl.alive:
                self.impls[label] = self.start_implementation(label)
        self.healed = True
        self.advance(timedelta(seconds=self.scenario.lease_seconds + 1))
        if step is not None and step.op == "complete-work":
            work_id = self.nth_work(step.args["schedule"], step.args.get("nth", -1))
            if work_id and self._work_state(work_id) != step.args["state"]:
                self.record(self.client_op("complete-work", {"work_id": work_id, "state": step.args["state"]}),
                             "complete-work (redo)")
        self.drain(self.impls["A"])

    def _await_commits_in_flight(self) -> None:
        """A COMMIT a racer sent just as a network fault cut its connection may still be committing on the server
        when the recovery opens its first counting window, and would be seen there as a claim or a decision nobody
        reported: before the recovery counts anything, let it land."""
        still_open, waited_s = await_commits_in_flight(self.owner)
        if still_open:
            self.note("commits-in-flight", sessions=still_open, waited_s=waited_s)

    def fault_shift_s(self) -> float:
        """How far the fault, its recovery and the settling moved the server clock beyond the scenario's own
        advances (a pause moves it twice: for the takeover and for the recovery)."""
        moved = sum(e["shift_s"] for e in self.timeline if e["event"] == "clock")
        return moved - sum(s.args["seconds"] for s in self.scenario.steps if s.op == "advance")

    def settle(self, rounds: int = 3) -> None:
        """After a fault, a lease taken by an attempt that failed later still blocks its schedule until it
        expires: move the clock past it and drain again (bounded)."""
        for _ in range(rounds):
            with self.owner() as conn:
                expiry = conn.execute("select max(lease_expires_at_utc) - clock_timestamp() as left "
                                      "from appsurface_durable.schedule_dispatch_timing "
                                      "where lease_owner is not null").fetchone()["left"]
            if expiry is None:
                return
            self.note("settle", lease_left_s=expiry.total_seconds())
            self.advance(max(expiry, timedelta(0)) + timedelta(seconds=1))
            self.drain(self.impls["A"])

    # -- the case ----------------------------------------------------------------------------------------

    def _resolve(self, value: str, generation: dict) -> datetime:
        return relative(value, generation.get("accepted_at_utc"))

    def _server_fate(self) -> str | None:
        """What the server did with the transaction open at the faulted barrier, when the verifier can know."""
        if self.injection is None or self.injection.open_xid is None or self.plan.fault == "db-crash":
            # After a crash an xid whose WAL never reached disk can be handed out again, so its status says
            # nothing about the lost transaction; the durable-state checks judge db-crash cases instead.
            return None
        with self.owner() as conn:
            return conn.execute("select pg_xact_status(%s::text::xid8) as fate",
                                (str(self.injection.open_xid),)).fetchone()["fate"]

    def _transaction_fate(self, fate: str | None) -> CheckResult | None:
        """What the server did with the transaction open at the barrier: the verifier confirms what committed."""
        if fate is None:
            return None
        expected = "committed" if self.plan.fault in ("lost-commit-reply", "pause") else "aborted"
        rule = FATE_ABORTED if expected == "aborted" else FATE_COMMITTED
        return CheckResult("transaction-fate", rule, fate == expected,
                           [] if fate == expected else [{"xid": self.injection.open_xid, "fate": fate,
                                                         "expected": expected}], 1)

    def execute(self, baseline: dict | None) -> CaseOutcome:
        outcome = CaseOutcome(self.plan, "error")
        try:
            missing = [FAULTS[self.plan.fault].needs if self.plan.fault else (), (CLOCK,)]
            for capability in [c for group in missing for c in group]:
                if not self.world.capabilities.has(capability):
                    outcome.verdict, outcome.reason = "not-run", self.world.capabilities.reason(capability)
                    return outcome
            self.store = store_pool(self.world, self.migrations).take()
            with self.owner() as conn:
                conn.execute("select appsurface_durable.create_scope(%s)", (SCOPE,))
            self.world.clock.set_time(T0)
            self.ensure_partitions()
            if self.world.proxy is not None:
                self.world.proxy.heal()
            self.log_offset = case_facts.log_offset(self.world)
            self.impls["A"] = self.start_implementation("A")
            outcome.implementation = self.impls["A"].hello.get("implementation", "")
            outcome.operations = sorted(self.impls["A"].hello.get("operations", []))
            outcome.contract = targeted_contract(self.impls["A"].hello)
            for step in self.scenario.steps:
                self.model.step_started()
                self.step(step)
                if self._protocol_error:
                    raise self._protocol_error
                if self.fault_error:
                    raise TestHostError(f"fault could not be injected: {self.fault_error}")
                self.judge_late_writes()
                self.observe_coalesced(step.index)
                if self.injection is not None and not self.recovered:
                    self.recover(step)
                    self.recovered = True
                    for deferred in self.after_recovery:
                        deferred()
                    self.observe_coalesced(step.index)
            self.note("final-drain")
            self.drain(self.impls["A"])
            if self.injection is not None and not self.recovered:
                # The planned hit fell in the final drain (a timeline whose last pass is that drain): recover as
                # after a step, else what the fault killed stays dead and the claimed schedule stays leased.
                self.recover(None)
                self.recovered = True
            if self.injection is not None:
                self.settle()
            for cancel in self.cancel_plans:
                cancel.at_end(self)
            with self.owner() as conn:
                state = read_state(conn)
            state.drained_at = self.drained_at
            state.planted = frozenset(self.planted)
            self.final_state = state
            checks = universal(state)
            checks.append(coalesced_forward(self.coalesced_seen))
            checks.append(one_pending_coalesced_seen(self.coalesced_seen))
            checks.append(idle_cursor(self.coalesced_seen))
            checks.append(fence_seen(self.coalesced_seen))
            checks.append(passive_processor(self.coalesced_seen, self.started))
            checks.append(requeue_kept(self.coalesced_seen))
            checks.append(definition_revision(self.coalesced_seen, state))
            checks.append(generations_unchanged(self.coalesced_seen, state))
            checks.append(pass_decides_due(self.coalesced_seen, {(str(g["schedule_id"]), g["generation"]): g
                                                                 for g in state.generations}))
            self.barrier_facts.note_cursors("in the final state", {str(d["schedule_id"]): d["cursor_utc"]
                                                                   for d in state.definitions})
            checks.append(cursor_high_water(self.barrier_facts.cursor_reads))
            if self.late_check is not None:
                checks.append(self.late_check)
            picture = normalize(state, self.schedule_ids)
            model = self.model.matching(picture)  # the timeline that ran, where a fault left two possible
            left = self.model.left[self.model.branches.index(model)]
            if left:
                self.note("model-timeline", left_to_recovery=sorted(left))
            predicted = model_picture(model)
            # The fault-free run's judges apply only where the model says this timeline, on its real clock, must
            # end as the fault-free one did; elsewhere the report says why they were not compared.
            judges = fault_free_judges(checks, faulted=self.plan.fault is not None, scenario=self.scenario,
                                       base=baseline, model_picture=predicted, picture=picture, state=state,
                                       schedule_ids=self.schedule_ids, resolve=self._resolve,
                                       shift_s=self.fault_shift_s(), left=left)
            checks += [c for c in judges if c.name != "crash-equivalence"]
            checks.append(model_agreement(picture, model))
            checks.append(history_agreement(state, self.schedule_ids, model))
            checks.append(acceptance_anchor(state, self.schedule_ids, model))
            checks.extend(client_outcomes(self.client_outcomes))
            checks.extend(command_results(self.command_facts))
            fate = self._server_fate()
            checks.append(outcome_honesty(self.answers, fate))
            if self.beside_outcomes:
                checks.append(beside_barrier_reached(self.beside_outcomes, faulted=self.plan.fault is not None))
                locked = fence_locked_beside(self.coalesced_seen, self.beside_outcomes)
                if locked is not None:
                    checks.append(locked)
            drills = self.restore_measurements()
            if drills:
                outcome.measurements["restore-drills"] = drills
            checks += self._count_and_clock_checks(state)
            checks += bridge_role.judge(self.denied_passes)
            checks += bridge_role.judge_demotions(self.demotions)
            checks += self.barrier_facts.checks()
            cancelled = keeps_committed(self.cancel_plans, faulted=self.plan.fault is not None)
            if cancelled is not None:
                checks.append(cancelled)
            if self.plan.fault is not None:
                fired = self.injection is not None
                checks.append(CheckResult("planned-fault-fired", PLANNED_FAULT_FIRED, fired,
                                          [] if fired else [{"barrier": self.plan.barrier, "hit": self.plan.hit,
                                                             "hits_seen": self.hits}], 1))
                fate_check = self._transaction_fate(fate)
                deadline_check = client_deadline(self.injection.details) if fired else None
                stall_check = stall_took_over(self.injection.details) if fired else None
                for thread in getattr(self, "fault_threads", []):
                    thread.join()
                cancel_check = cancel_retried(self.injection.details, self.answers) if fired else None
                durability_check = crash_durability(self.injection.details) if fired else None
                checks += [c for c in (fate_check, deadline_check, stall_check, cancel_check, durability_check)
                           if c is not None]
            checks += [c for c in judges if c.name == "crash-equivalence"]
            checks = settle(checks, targeted_contract(getattr(self.impls.get("A"), "hello", None)))
            outcome.checks, outcome.picture, outcome.model_picture = checks, picture, predicted
            failed = [c.name for c in checks if not c.ok]
            outcome.verdict = "fail" if failed else "pass"
            outcome.reason = ", ".join(failed)
        except ImplementationDied as exc:
            outcome.verdict, outcome.reason, outcome.cause = "error", str(exc), "implementation"
        except AdapterProtocolError as exc:
            outcome.verdict, outcome.reason, outcome.cause = "error", f"adapter protocol: {exc}", "implementation"
        except Exception as exc:  # noqa: BLE001 - any harness failure is this case's error, never the run's
            outcome.verdict = "error"
            outcome.reason = f"{type(exc).__name__}: {exc}"
            self.note("harness-error", traceback=traceback.format_exc(limit=8))
        finally:
            self.teardown()
            outcome.timeline = self.timeline
            outcome.hits = dict(self.hits)
            outcome.fallbacks = sorted(self.fallbacks)
            outcome.duration_s = time.monotonic() - self._started
            outcome.logs = {label: str(path) for label, path in self.logs.items() if path.exists()}
            outcome.clock_skew = dict(self.clock_skew)
            outcome.facts = self.facts()
        return outcome

    def facts(self) -> dict:
        """What the run's diagnosis reads of the implementation in this case (after its processes stopped)."""
        if not self.started:
            return {}
        try:
            def sessions(users) -> int | None:
                return (case_facts.sessions_logged_in(self.world, self.log_offset, users, self.store.dbname)
                        if self.store is not None else None)
            # the host's fallbacks log in as the runtime role too: then its sessions tell nothing of the implementation
            runtime = None if self.fallbacks else sessions(self.runtime_logins)
            return case_facts.gather(answers=self.answers, timeline=self.timeline, logs=self.logs,
                                     dispatcher_sessions=sessions({DISPATCHER}), runtime_sessions=runtime,
                                     state=self.final_state, schedule_names=self.schedule_names)
        except Exception as exc:  # noqa: BLE001 - facts only explain a verdict; they never change one
            return {"unread": f"{type(exc).__name__}: {exc}"}

    def _count_and_clock_checks(self, state) -> list[CheckResult]:
        """The counts every `ok` pass reported against the committed facts, and the Work's own clock."""
        clock = self.bridge_clock
        if clock is not None:
            clock.join()
        return [process_counts(self.count_windows), pass_bounded(self.count_windows), empty_pass(self.count_windows),
                pass_leaves_no_lease(self.count_windows),
                work_own_clock(state, clock.moves if clock else [], planned=clock is not None,
                               promised=clock is not None and self.plan.fault is None,
                               holds=clock.holds if clock else [], frozen=frozenset(self.frozen_instants))]

    def teardown(self) -> None:
        if self.bridge_clock is not None:
            self.bridge_clock.join()  # its hold ends within its wait: no lock outlives the case
        for impl in self.started:
            try:
                impl.stop()
            except Exception:  # noqa: BLE001
                impl.kill_group()
        self.close_fallbacks()
        try:
            if self.world.proxy is not None:
                self.world.proxy.heal()
            if self.world.cluster is not None and not self.world.cluster.running:
                self.world.cluster.restart()
            if self.store is not None and self.default_role_set:
                try:  # the store goes back to the pool without the login's default role
                    bridge_role.set_default_role(self.world, self.store.dbname, runtime=False)
                except Exception:  # noqa: BLE001 - only that login reads it, and a later case sets it again
                    pass
            if self.store is not None:
                store_pool(self.world, self.migrations).give_back(self.store)
        except Exception:  # noqa: BLE001 - teardown must not mask the verdict
            pass


@contextlib.contextmanager
def _cancelled_when_blocked(conn, watcher_dsn: str, limit_s: float = BESIDE_LIMIT_S):
    """Cancel whatever `conn` runs once the server shows its backend waiting for a lock another session holds
    (`pg_blocking_pids`), or after `limit_s`; yields a function telling whether it did."""
    import psycopg

    pid = conn.info.backend_pid
    fired, done = threading.Event(), threading.Event()

    def cancel() -> None:
        fired.set()
        try:
            conn.cancel()
        except Exception:  # noqa: BLE001 - a connection that ended meanwhile has nothing left to cancel
            pass

    def watch() -> None:
        deadline = time.monotonic() + limit_s
        with psycopg.connect(watcher_dsn, autocommit=True) as watcher:
            while not done.wait(BESIDE_POLL_S):
                blocked = watcher.execute("select cardinality(pg_blocking_pids(%s)) > 0", (pid,)).fetchone()[0]
                if blocked or time.monotonic() > deadline:
                    cancel()
                    return

    thread = threading.Thread(target=watch, daemon=True, name="beside-watch")
    thread.start()
    try:
        yield fired.is_set
    finally:
        done.set()
        thread.join()


def protocol_json(value: Any) -> Any:
    """A value as the adapter protocol's JSON: instants in RFC 3339 UTC, UUIDs and other scalars as text."""
    if isinstance(value, dict):
        return {str(k): protocol_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [protocol_json(v) for v in value]
    if isinstance(value, datetime):
        return value.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def run_case(world: World, scenario: Scenario, plan: CasePlan, command: str, log_dir: Path,
             baseline: dict | None = None, migrations: Path | None = None, clock_offset: timedelta | None = None,
             instance_commands: bool = True, cwd: str | None = None) -> CaseOutcome:
    return CaseRun(world, scenario, plan, command, log_dir, migrations, clock_offset,
                   instance_commands, cwd).execute(baseline)
