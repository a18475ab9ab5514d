"""One case, start to finish: prepare a store, run the scenario's timeline through the implementation,
inject the planned fault at the planned barrier hit, recover, and judge the durable outcome."""

from __future__ import annotations

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
from scenarios.model import T0, Scenario, Step, relative, spec_to_wire

from . import skew
from .checks import (FATE_ABORTED, FATE_COMMITTED, FENCE_REASONS, PLANNED_FAULT_FIRED, CheckResult, client_deadline,
                     client_outcomes, coalesced_forward, equivalence, expectations, fence_seen, history_agreement,
                     idle_cursor, late_writes, model_agreement, normalize, one_pending_coalesced_seen, outcome_honesty,
                     universal, vacuity)
from .errors import FallbackFailed, TestHostError
from .faults import FAULTS, Injection
from .components import find_libfaketime
from .identity import expected_work
from .instances import instance_setup
from .implementation import AdapterProtocolError, Implementation, ImplementationDied, Response
from .model import Generation, Model
from .state import read_state
from .sessions import KeptSession
from .store import RUNTIME, Store, StorePool
from .world import CLOCK, World

SCOPE = "tenant-a"
DEADLINE_S = 2.0
MAX_DRAIN_PASSES = 20
# How far the server's clock may be from the host's reading of it when the host decides that the history
# partition of the month the clock stands in already exists.
PARTITION_MARGIN = timedelta(minutes=5)
REFERENCE_COMMAND = f"{shlex.quote(sys.executable)} -m reference.adapter"
# A fallback retries like any client; its attempts are spaced so a restarted server has time to accept.
FALLBACK_ATTEMPTS = 5
FALLBACK_PAUSE_S = 0.3
# Starts of the implementation one case may make (first start, restarts after faults, a takeover processor,
# retries): a program that dies at every start ends its case here instead of being restarted without end.
MAX_STARTS = 8


_pools: dict[tuple, StorePool] = {}


def store_pool(world: World, migrations: Path | None = None) -> StorePool:
    """The world's pool of prepared stores per schema (made on first use, closed when the world goes down)."""
    key = (id(world), str(migrations) if migrations else None)
    if key not in _pools:
        _pools[key] = StorePool(world, migrations=migrations, history_at=T0 if world.capabilities.has(CLOCK) else None)
        world.on_down.append(lambda: _pools.pop(key).close())
    return _pools[key]


@dataclass(frozen=True)
class CasePlan:
    """scenario × barrier × fault × hit; a plan without a fault is the scenario's fault-free run."""

    scenario: str
    barrier: str | None = None
    fault: str | None = None
    hit: int | None = None
    repeat: int = 1

    @property
    def id(self) -> str:
        base = self.scenario if self.fault is None else f"{self.scenario}/{self.barrier}/{self.fault}/{self.hit}"
        return base if self.repeat == 1 else f"{base}#{self.repeat}"


@dataclass
class CaseOutcome:
    plan: CasePlan
    verdict: str  # pass, fail, error, not-run
    reason: str = ""
    checks: list[CheckResult] = field(default_factory=list)
    timeline: list[dict] = field(default_factory=list)
    duration_s: float = 0.0
    hits: dict[str, int] = field(default_factory=dict)
    picture: dict | None = None
    fallbacks: list[str] = field(default_factory=list)
    implementation: str = ""
    operations: list[str] = field(default_factory=list)  # what the implementation's hello declared
    logs: dict[str, str] = field(default_factory=dict)  # instance -> its stderr log
    cause: str = ""  # of an `error` verdict: "implementation" (it broke the protocol) or "harness"
    clock_skew: dict[str, dict] = field(default_factory=dict)  # instance -> its OS clock's skew, as verified

    def to_json(self) -> dict:
        found = {"id": self.plan.id, "scenario": self.plan.scenario, "barrier": self.plan.barrier,
                 "fault": self.plan.fault, "hit": self.plan.hit, "verdict": self.verdict, "reason": self.reason,
                 "checks": [c.to_json() for c in self.checks], "timeline": self.timeline,
                 "duration_s": round(self.duration_s, 3), "barrier_hits": self.hits, "fallbacks": self.fallbacks,
                 "operations": self.operations, "logs": self.logs}
        if self.verdict == "error":
            found["cause"] = self.cause or "harness"
        if self.clock_skew:
            found["clock_skew"] = self.clock_skew
        return found


class CaseRun:
    """Everything one case needs while it runs; faults call back into it (advance, drain, start)."""

    def __init__(self, world: World, scenario: Scenario, plan: CasePlan, command: str, log_dir: Path,
                 migrations: Path | None = None, clock_offset: timedelta | None = None, instance_commands: bool = True):
        self.world, self.scenario, self.plan, self.command = world, scenario, plan, command
        self.clock_offset = clock_offset  # --impl-clock-offset: every instance's OS clock, unless it sets its own
        self.instance_commands = instance_commands  # False in the reference's census beside another --impl
        self.clock_skew: dict[str, dict] = {}  # instance -> how its skew was verified (testhost/skew.py)
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
        self._protocol_error: AdapterProtocolError | None = None  # raised in a racing thread, re-raised here
        self.schedule_ids = {name: scenario.schedule_id(name) for name in scenario.schedules}
        self.model = Model()  # what Gate A says this timeline must produce, kept step by step
        self.client_outcomes: list[tuple[Step, Response, dict]] = []
        self.coalesced_seen: list[tuple[int, dict]] = []  # pending coalesced rows after each step
        self.late_probe: tuple[dict, dict] | None = None  # a paused processor's schedule rows before it resumed
        self.drained_at: datetime | None = None
        self._partitioned_month: tuple[int, int] | None = None  # its partition and the next one exist
        self.planted: set = set()
        # Per request to an implementation: its outcome, the after-commit barriers it reported meanwhile and the
        # barrier where the fault fired during it, to judge a `fail` against what the verifier knows committed.
        self.answers: list[dict] = []
        self._asking: dict[str, dict] = {}

    @property
    def owner(self) -> KeptSession:
        """The verifier's session (migration owner, direct, autocommit), the store's: `with self.owner() as conn`."""
        return self.store.verifier

    # -- timeline ---------------------------------------------------------------------------------------

    def note(self, event: str, **details: Any) -> None:
        self.timeline.append({"t": round(time.monotonic() - self._started, 3), "event": event, **details})

    # -- implementations and barriers ----------------------------------------------------------------------

    def start_implementation(self, label: str) -> Implementation:
        env = {"CRASHPROOF_RUNTIME_DSN": self.store.dsn(RUNTIME, proxied=True),
               "CRASHPROOF_DISPATCHER_DSN": self.store.dsn("appsurface_durable_dispatcher", proxied=True),
               "CRASHPROOF_SCOPE": SCOPE, "CRASHPROOF_DEADLINE_S": str(DEADLINE_S)}
        if len(self.started) >= MAX_STARTS:
            last = self.started[-1]
            raise ImplementationDied(f"started {len(self.started)} times in this case, the implementation ended "
                                     f"each time; the last: {last.death_reason()}")
        self.logs[label] = self.log_dir / self.plan.id / f"{label}.stderr"
        command, extra, offset = instance_setup(self.scenario.instances.get(label), self.command, self.clock_offset,
                                                self.instance_commands)
        impl = Implementation(command, {**env, **extra}, self.on_barrier, self.logs[label], label=label,
                              server_environment=skew.server_environment(extra) if offset is not None else {})
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

    def on_barrier(self, impl: Implementation, name: str, context: dict) -> None:
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
        asked = self._asking.get(impl.label)
        if asked is not None:
            if BY_NAME[name].position == "after-commit":
                asked["committed"].append(name)
            if fire:
                asked["faulted"] = name
        if fire:
            self.note("fault", fault=self.plan.fault, barrier=name, hit=self.plan.hit, instance=impl.label)
            try:
                FAULTS[self.plan.fault].inject(self, impl, BY_NAME[name], self.injection)
            except Exception as exc:  # noqa: BLE001 - a fault that could not be injected is a harness error
                self.fault_error = f"{type(exc).__name__}: {exc}"
                raise
            self.note("fault-injected", details=self.injection.details, open_xid=self.injection.open_xid)

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
        self.world.clock.shift(delta)
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
        return passes

    # -- steps ---------------------------------------------------------------------------------------------

    def schedule_rows(self, schedule_id: str) -> dict:
        """Everything durable about one schedule (for the late-write fence)."""
        with self.owner() as conn:
            def rows(sql: str) -> list:
                return [dict(r) for r in conn.execute(sql, (schedule_id,)).fetchall()]
            return {
                "definition": rows("select * from appsurface_durable.schedule_definitions where schedule_id = %s"),
                "dispatch": self._dispatch_rows(schedule_id),
                "occurrences": rows("select * from appsurface_durable.schedule_occurrences where schedule_id = %s "
                                    "order by generation, occurrence_kind, first_nominal_utc"),
                "history": rows("select count(*) as events from appsurface_durable.schedule_history "
                                "where schedule_id = %s"),
            }

    def observe_coalesced(self, index: int) -> None:
        with self.owner() as conn:
            rows = conn.execute("select schedule_id, generation, first_nominal_utc, last_nominal_utc, state "
                                "from appsurface_durable.schedule_occurrences "
                                "where occurrence_kind = 'coalesced'").fetchall()
            # The raw cursor beside what was decided so far, to tell a cursor that moved with no decision.
            cursors = conn.execute(
                "select d.schedule_id::text as schedule_id, d.cursor_utc, d.active_generation, "
                "(select count(*) from appsurface_durable.schedule_occurrences o where o.schedule_id = d.schedule_id) "
                "as occurrences, (select max(last_nominal_utc) from appsurface_durable.schedule_occurrences o "
                "where o.schedule_id = d.schedule_id) as last_decided, (select count(*) from "
                "appsurface_durable.schedule_history h where h.schedule_id = d.schedule_id "
                "and h.event = 'recovery-skipped') as skipped, (select count(*) from "
                "appsurface_durable.schedule_occurrences o where o.schedule_id = d.schedule_id "
                "and o.work_id is not null) as linked "
                "from appsurface_durable.schedule_definitions d").fetchall()
        key = lambda r: (str(r["schedule_id"]), r["generation"], r["first_nominal_utc"])  # noqa: E731
        self.coalesced_seen.append((index, {"all": {key(r): dict(r) for r in rows},
                                            "pending": {key(r): dict(r) for r in rows if r["state"] == "pending"},
                                            "cursors": {r["schedule_id"]: dict(r) for r in cursors},
                                            # what Gate A holds fenced after this step, to judge the step by
                                            "fenced": {str(self.schedule_ids[name]): s.suspension
                                                       for name, s in self.model.schedules.items()
                                                       if s.lifecycle == "suspended" and s.suspension in FENCE_REASONS
                                                       and name in self.schedule_ids}}))

    def _dispatch_rows(self, schedule_id: str | None = None) -> list:
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

    def _revision(self, schedule: str) -> int:
        with self.owner() as conn:
            row = conn.execute("select revision from appsurface_durable.schedule_definitions where schedule_id = %s",
                               (self.schedule_ids[schedule],)).fetchone()
        return row["revision"] if row else 0

    def _nth_work(self, schedule: str, nth: int) -> str | None:
        prefix = f"schedule-occurrence/v1|{SCOPE}|{self.schedule_ids[schedule]}|%"
        with self.owner() as conn:
            rows = conn.execute("select work_id from appsurface_durable.work_items where idempotency_key like %s "
                                "order by accepted_at_utc, work_id", (prefix,)).fetchall()
        index = nth - 1 if nth > 0 else nth
        return str(rows[index]["work_id"]) if -len(rows) <= index < len(rows) else None

    def _work_state(self, work_id: str) -> str | None:
        with self.owner() as conn:
            row = conn.execute("select state from appsurface_durable.work_items where work_id = %s",
                               (work_id,)).fetchone()
        return row["state"] if row else None

    def _client_op(self, op: str, args: dict, attempts: int = 3) -> Response:
        """Through the implementation when it offers the operation, else the reference over the normative schema.

        Like any caller, the harness retries (bounded) an outcome that is unknown or a retriable failure; a
        Work transition already applied by an attempt whose reply was lost counts as done. Every attempt of one
        step carries the same command ID, so a repeated schedule command whose first reply was lost returns the
        schedule as it stands instead of applying twice. A fallback that cannot complete the step is a harness
        error (FallbackFailed), never charged to the implementation.
        """
        command_id = uuid.uuid4()
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
            self._record(response, f"{op} (will retry)")
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
            return self._fallback_call(op, args, command_id), None
        except (DurableError, psycopg.Error) as exc:
            self._close_fallbacks()
            return None, f"{type(exc).__name__}: {exc}"

    def _fallback_call(self, op: str, args: dict, command_id: uuid.UUID) -> Response:
        from reference import ScheduleClient, WorkStore
        from reference.adapter import spec_from_json
        from reference.problems import Problem

        if op == "complete-work":
            if self._fallback_work is None or self._fallback_work.session.broken:
                self._close_fallbacks()
                self._fallback_work = WorkStore(self.store.runtime_dsn, SCOPE, deadline=DEADLINE_S)
            result = self._fallback_work.transition(uuid.UUID(args["work_id"]), args["state"])
        else:
            if self._fallback_client is None or self._fallback_client.session.broken:
                self._close_fallbacks()
                self._fallback_client = ScheduleClient(self.store.runtime_dsn, SCOPE, deadline=DEADLINE_S)
            client = self._fallback_client
            schedule_id = uuid.UUID(args["schedule_id"])
            if op == "create":
                result = client.create(spec_from_json(args["spec"]), schedule_id=schedule_id, command_id=command_id)
            elif op == "update":
                result = client.update(schedule_id, spec_from_json(args["spec"]),
                                       expected_revision=args["expected_revision"], command_id=command_id)
            elif op == "delete":
                result = client.delete(schedule_id, expected_revision=args["expected_revision"], command_id=command_id)
            else:
                result = client.release_after_recovery(schedule_id, expected_revision=args["expected_revision"],
                                                       command_id=command_id)
        if isinstance(result, Problem):
            return Response("fail", problem=result.to_json())
        return Response("ok", value=protocol_json(result.to_json() if hasattr(result, "to_json") else result))

    def _close_fallbacks(self) -> None:
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
        self.note("step", index=step.index, op=step.op, args={k: v for k, v in step.args.items() if k != "spec"})
        args = step.args
        if step.op == "advance":
            self.advance(timedelta(seconds=args["seconds"]))
            return
        if step.op in ("advance-epoch", "advance-scope-generation"):
            (self.model.advance_epoch if step.op == "advance-epoch" else self.model.advance_scope_generation)()
            sql = ("select appsurface_durable.advance_runtime_epoch()" if step.op == "advance-epoch"
                   else f"select appsurface_durable.advance_scope_generation('{SCOPE}')")
            with self.owner() as conn:
                conn.execute(sql)
            return
        if step.op == "drain":
            self.drain(self.impls["A"])
            return
        if step.op == "plant-work":
            self.plant_work(args)
            return
        if step.op in ("process", "race"):
            labels = ["A", "B"] if step.op == "race" else [args.get("processor", "A")]
            for label in labels:
                if label not in self.impls:
                    self.impls[label] = self.start_implementation(label)
            request = {"maximum_schedules": args.get("maximum_schedules", 1),
                       "lease_seconds": args.get("lease_seconds", self.scenario.lease_seconds)}
            for key in ("cancel_after", "lease_owner"):
                if key in args:
                    request[key] = args[key]
            if "expect" in args:  # a pass the scenario expects an answer of, e.g. a refused lease
                before = self._dispatch_rows()
                response = self._ask(self.impls[labels[0]], "process-due", request)
                self._record(response, "process-due", labels[0])
                after = self._dispatch_rows()
                refused_but_changed = ({"before": before, "after": after}
                                       if response.outcome == "fail" and before != after else {})
                self.client_outcomes.append((step, response, refused_but_changed))
                if step.expected_outcome == "ok":
                    self.model.pass_(self.world.clock.now(), request["maximum_schedules"])
                return
            self.model.pass_(self.world.clock.now(),
                             min(request["maximum_schedules"], args.get("cancel_after", 1 << 30)) * len(labels))
            if len(labels) == 1:
                self._respond(self.impls[labels[0]], "process-due", request)
            else:
                threads = [threading.Thread(target=self._respond, args=(self.impls[l], "process-due", request))
                           for l in labels]
                self.concurrent = True
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                self.concurrent = False
            return
        if step.op == "complete-work":
            work_id = self._nth_work(args["schedule"], args.get("nth", -1))
            if work_id is None:
                self.note("skipped", reason=f"no Work number {args.get('nth', -1)} for {args['schedule']}")
                return
            self._record(self._client_op("complete-work", {"work_id": work_id, "state": args["state"]}), step.op)
            self.model.work(args["schedule"], args.get("nth", -1), args["state"])
            return
        schedule_id = str(self.schedule_ids[args["schedule"]])
        request = {"schedule_id": schedule_id}
        if "spec" in args:
            request["spec"] = spec_to_wire(args["spec"])
        if step.op != "create":
            request["expected_revision"] = self._revision(args["schedule"])
        op = {"release": "release-after-recovery"}.get(step.op, step.op)
        response = self._client_op(op, request)
        self._record(response, op)
        self.client_outcomes.append((step, response, {}))
        if response.outcome == "ok":
            self._model_client_step(step)

    def _model_client_step(self, step: Step) -> None:
        """The model takes the same command; a new generation's acceptance time is the server's, read back."""
        name = step.args["schedule"]
        if step.op in ("create", "update"):
            with self.owner() as conn:
                row = conn.execute("select * from appsurface_durable.schedule_generations where schedule_id = %s "
                                   "order by generation desc limit 1", (self.schedule_ids[name],)).fetchone()
            spec = step.args["spec"]
            generation = Generation(
                1, spec["kind"], row["accepted_at_utc"],
                at=relative(spec["at"]) if "at" in spec else None,
                after=timedelta(seconds=spec["after_s"]) if "after_s" in spec else None,
                every=timedelta(seconds=spec["every_s"]) if "every_s" in spec else None,
                anchor=(relative(spec["anchor"]) if "anchor" in spec else row["accepted_at_utc"])
                if spec["kind"] == "every" else None,
                misfire=spec.get("misfire_policy", "run-once"),
                window=timedelta(seconds=spec.get("safety_window_s", 3600)))
            (self.model.create if step.op == "create" else self.model.update)(name, generation)
        elif step.op == "delete":
            self.model.delete(name)
        elif step.op == "release":
            self.model.release(name)

    def _respond(self, impl: Implementation, op: str, request: dict) -> None:
        try:
            self._record(self._ask(impl, op, request), op, impl.label)
        except AdapterProtocolError as exc:
            self._protocol_error = exc

    def _ask(self, impl: Implementation, op: str, args: dict) -> Response:
        """One request to an implementation, kept in `answers` with what committed while it ran."""
        asked = self._asking[impl.label] = {"instance": impl.label, "op": op, "committed": [], "faulted": None}
        try:
            response = impl.request(op, args)
        finally:
            self._asking.pop(impl.label, None)
        self.answers.append({**asked, "outcome": response.outcome, "error": response.error,
                             "problem": response.problem})
        return response

    def _record(self, response: Response, op: str, label: str = "A") -> None:
        self.note("response", instance=label, op=op, outcome=response.outcome, value=response.value,
                  problem=response.problem, error=response.error)

    # -- recovery ---------------------------------------------------------------------------------------

    def recover(self, step: Step) -> None:
        """Heal the world, restart what died, move the clock past the dead lease, redo an interrupted Work step,
        and run fault-free passes until nothing is due."""
        self.note("recovery")
        for hook in self.on_recovery:
            hook()
        if self.world.proxy is not None:
            self.world.proxy.heal()
        for label, impl in list(self.impls.items()):
            if not impl.alive:
                self.impls[label] = self.start_implementation(label)
        self.advance(timedelta(seconds=self.scenario.lease_seconds + 1))
        if step.op == "complete-work":
            work_id = self._nth_work(step.args["schedule"], step.args.get("nth", -1))
            if work_id and self._work_state(work_id) != step.args["state"]:
                self._record(self._client_op("complete-work", {"work_id": work_id, "state": step.args["state"]}),
                             "complete-work (redo)")
        self.drain(self.impls["A"])

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
            self.impls["A"] = self.start_implementation("A")
            outcome.implementation = self.impls["A"].hello.get("implementation", "")
            outcome.operations = sorted(self.impls["A"].hello.get("operations", []))
            recovered = False
            late_check = None
            for step in self.scenario.steps:
                self.step(step)
                if self._protocol_error:
                    raise self._protocol_error
                if self.fault_error:
                    raise TestHostError(f"fault could not be injected: {self.fault_error}")
                if self.late_probe is not None and late_check is None:
                    context, before = self.late_probe
                    late_check = late_writes(before, self.schedule_rows(context["schedule_id"]), context)
                self.observe_coalesced(step.index)
                if self.injection is not None and not recovered:
                    self.recover(step)
                    recovered = True
                    self.observe_coalesced(step.index)
            self.note("final-drain")
            self.drain(self.impls["A"])
            if self.injection is not None:
                self.settle()
            with self.owner() as conn:
                state = read_state(conn)
            state.drained_at = self.drained_at
            state.planted = frozenset(self.planted)
            checks = universal(state)
            checks.append(coalesced_forward(self.coalesced_seen))
            checks.append(one_pending_coalesced_seen(self.coalesced_seen))
            checks.append(idle_cursor(self.coalesced_seen))
            checks.append(fence_seen(self.coalesced_seen))
            if late_check is not None:
                checks.append(late_check)
            if self.plan.fault is None or self.scenario.equivalence:
                # A timeline whose outcome a fault's recovery changes (equivalence = false) is held to its
                # expectations in its fault-free run; its faulted runs are judged by the model instead.
                checks.append(expectations(state, self.scenario.expect, self.schedule_ids, self._resolve))
                checks.append(vacuity(checks, self.scenario.expect))
            picture = normalize(state, self.schedule_ids)
            checks.append(model_agreement(picture, self.model))
            checks.append(history_agreement(state, self.schedule_ids, self.model))
            checks.extend(client_outcomes(self.client_outcomes))
            fate = self._server_fate()
            checks.append(outcome_honesty(self.answers, fate))
            if self.plan.fault is not None:
                fired = self.injection is not None
                checks.append(CheckResult("planned-fault-fired", PLANNED_FAULT_FIRED, fired,
                                          [] if fired else [{"barrier": self.plan.barrier, "hit": self.plan.hit,
                                                             "hits_seen": self.hits}], 1))
                fate_check = self._transaction_fate(fate)
                deadline_check = client_deadline(self.injection.details) if fired else None
                checks += [c for c in (fate_check, deadline_check) if c is not None]
                if baseline is not None and self.scenario.equivalence:
                    checks.append(equivalence(picture, baseline))
            outcome.checks, outcome.picture = checks, picture
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
            self._teardown()
            outcome.timeline = self.timeline
            outcome.hits = dict(self.hits)
            outcome.fallbacks = sorted(self.fallbacks)
            outcome.duration_s = time.monotonic() - self._started
            outcome.logs = {label: str(path) for label, path in self.logs.items() if path.exists()}
            outcome.clock_skew = dict(self.clock_skew)
        return outcome

    def _teardown(self) -> None:
        for impl in self.started:
            try:
                impl.stop()
            except Exception:  # noqa: BLE001
                impl.kill_group()
        self._close_fallbacks()
        try:
            if self.world.proxy is not None:
                self.world.proxy.heal()
            if self.world.cluster is not None and not self.world.cluster.running:
                self.world.cluster.restart()
            if self.store is not None:
                store_pool(self.world, self.migrations).give_back(self.store)
        except Exception:  # noqa: BLE001 - teardown must not mask the verdict
            pass


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
             instance_commands: bool = True) -> CaseOutcome:
    return CaseRun(world, scenario, plan, command, log_dir, migrations, clock_offset,
                   instance_commands).execute(baseline)
