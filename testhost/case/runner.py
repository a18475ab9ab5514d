"""One case, start to finish: prepare a store, run the scenario's timeline through the implementation,
inject the planned fault at the planned barrier hit, recover, and judge the durable outcome.

The case's parts each have their module: the barrier desk (desk.py), requests and their counting windows
(requests.py), passes (passes.py), steps beside a held barrier (beside.py), reads (reads.py), the host's client and
its fallbacks (client.py), restore drills (snapshots.py) and each step kind's run (step_runs.py). What the case
records is one record (testhost/judge/record.py), which testhost/judge/case_judge.py judges once the case is over."""

from __future__ import annotations

import threading
import time
import traceback
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from barriers.schema import DISPATCHER, RUNTIME
from scenarios.matrix import CasePlan
from scenarios.scenario import T0, Scenario, Step

from testhost.errors import TestHostError
from testhost.faults.bridge_clock import BridgeClock
from testhost.faults.catalog import DEADLINE_S, FAULTS
from testhost.impl import skew
from testhost.impl.adapter_env import adapter_environment
from testhost.impl.reference_command import REFERENCE_COMMAND, REFERENCE_ROOT  # noqa: F401 - re-exported beside run_case
from testhost.impl.implementation import AdapterProtocolError, Implementation, ImplementationDied
from testhost.impl.instance_setup import instance_setup
from testhost.judge import bridge_role
from testhost.judge.case_judge import judge
from testhost.judge.contract_notes import targeted as targeted_contract
from testhost.judge.fault_checks import late_writes
from testhost.judge.identity import instant_text
from testhost.judge.record import CaseRecord, StartedCopy
from testhost.judge.state import read_state
from testhost.world.components import find_libfaketime
from testhost.world.sessions import KeptSession
from testhost.world.store import ReferenceSeed, Store, StorePool
from testhost.world.worlds import CLOCK, NETWORK, World

from . import diagnosis_facts, role_changes
from .barrier_facts import BarrierFacts
from .beside import BesideSteps
from .client import SCOPE, HostClient
from .desk import BarrierDesk
from .passes import Passes
from .reads import StoreReads
from .outcome import CaseOutcome, planned_hit_not_reached
from .recovery import Recovery
from .requests import Requests
from .snapshots import Snapshots
from .step_runs import RUNS

MAX_DRAIN_PASSES = 20
# How far the server's clock may be from the host's reading of it when the host decides that the history
# partition of the month the clock stands in already exists.
PARTITION_MARGIN = timedelta(minutes=5)
# Starts of the implementation one case may make (first start, restarts after faults, a takeover processor,
# retries): a program that dies at every start ends its case here instead of being restarted without end.
MAX_STARTS = 8
# A faulted run whose timeline never reached its planned hit, every other check passing, tested nothing, and how often
# a pass claims can depend on when its decisions cut off (docs/protocol-notes.md 38f): such a run is run again, up to
# this many runs in all, before `planned-fault-fired` fails the case.
PLACEMENT_RUNS = 3


# What a world that runs cases starts with: the stores the case pool takes (history partitions of T0's month), made
# once per workspace and copied with the cluster (testhost/world/store.py, ReferenceSeed).
CASE_SEED = ReferenceSeed(history_at=T0)

_pools: dict[tuple, StorePool] = {}


def store_pool(world: World, migrations: Path | None = None) -> StorePool:
    """The world's pool of prepared stores per schema (made on first use, closed when the world goes down)."""
    key = (id(world), str(migrations) if migrations else None)
    if key not in _pools:
        _pools[key] = StorePool(world, migrations=migrations, history_at=T0 if world.capabilities.has(CLOCK) else None)
        world.on_down.append(lambda: _pools.pop(key).close())
    return _pools[key]


class CaseRun:
    """One case while it runs: the world, the implementation's copies, the case's parts, and its record. Faults
    call back into it through what testhost/faults/run.py's FaultedRun names."""

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
        self.facts = CaseRecord()  # what the judge reads once the case is over
        self.barrier_facts = self.facts.barrier_facts = BarrierFacts()  # each schedule's rows, read at its barriers
        self.fault_error: str | None = None
        self.on_recovery: list = []
        self.fault_threads: list[threading.Thread] = []  # threads a fault leaves running, joined before judging
        self.fallbacks: set[str] = set()
        self._started = time.monotonic()
        self.concurrent = False  # two processors are running side by side
        self.racers: dict[str, threading.Thread] = {}  # the threads of the last `race` step, by instance
        self.schedule_ids = {name: scenario.schedule_id(name) for name in scenario.schedules}
        self.schedule_names = {str(i): name for name, i in self.schedule_ids.items()}  # Schedule ID text -> name
        self.partitioned_month: tuple[int, int] | None = None  # its partition and the next one exist
        self._freeze_next = False  # a set-clock step froze the clock for the step after it
        self.recovered = False  # the fault's recovery has run
        self.healed = False  # the fault's recovery has healed the world and restarted what died (its passes follow)
        self.after_recovery: list = []  # what waits for the recovery (a step beside a pass a fault interrupted)
        self.bridge_clock = BridgeClock(self, scenario.bridge_clock_shift_s) if scenario.bridge_clock_shift_s else None
        self.default_role_set = False  # the store's default role for bridge_role.DEFAULT_ROLE_LOGIN, reset at the end
        self.log_offset: int | None = None  # where the server log stood when the case began (diagnosis_facts.py)
        self.runtime_logins: set[str] = set()  # every login CRASHPROOF_RUNTIME_DSN named in this case
        self.final_state = None  # the store as the checks read it at the end
        self.desk, self.requests, self.passes = BarrierDesk(self), Requests(self), Passes(self)
        self.beside, self.reads, self.client = BesideSteps(self), StoreReads(self), HostClient(self)
        self.snapshots, self.recovery = Snapshots(self), Recovery(self)

    # -- what a fault touches (testhost/faults/run.py) and the model, kept in the record --------------------------

    @property
    def injection(self):
        """The fault injected in this case, once it fired (None before)."""
        return self.facts.injection

    @injection.setter
    def injection(self, value) -> None:
        self.facts.injection = value

    @property
    def model(self):
        """What Gate A says this timeline must produce, kept step by step (testhost/judge/timelines.py)."""
        return self.facts.model

    @model.setter
    def model(self, value) -> None:
        self.facts.model = value

    @property
    def late_probe(self) -> tuple[dict, dict] | None:
        return self.facts.late_probe

    @late_probe.setter
    def late_probe(self, value: tuple[dict, dict] | None) -> None:
        self.facts.late_probe = value

    @property
    def asking(self) -> dict[str, dict]:
        return self.requests.asking

    @property
    def window(self) -> dict | None:
        return self.requests.window

    def wait_for_other_racers(self, label: str, timeout: float | None = None) -> list[str]:
        return self.desk.wait_for_other_racers(label, timeout)

    def schedule_rows(self, schedule_id: str) -> dict:
        return self.reads.schedule_rows(schedule_id)

    def dispatch_rows(self, schedule_id: str | None = None) -> list:
        return self.reads.dispatch_rows(schedule_id)

    @property
    def scope(self) -> str:
        return SCOPE

    @property
    def owner(self) -> KeptSession:
        """The verifier's session (migration owner, direct, autocommit), the store's: `with self.owner() as conn`."""
        return self.store.verifier

    def note(self, event: str, **details: Any) -> None:
        self.facts.timeline.append({"t": round(time.monotonic() - self._started, 3), "event": event, **details})

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
            role_changes.ensure_member(self.world, runtime_user)
            if runtime_user == bridge_role.DEFAULT_ROLE_LOGIN:  # its sessions in this store begin as the runtime role
                role_changes.set_default_role(self.world, self.store.dbname, runtime=True)
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
        impl = Implementation(command, {**env, **extra}, self.desk.at_barrier, self.logs[label], label=label,
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

    def ensure_partitions(self) -> None:
        """History partitions for the server's month and the next, unless this case already made sure of the
        month the clock stands in (a clock step far from a month's edge cannot leave it)."""
        now = self.world.clock.now()
        months = {(t.year, t.month) for t in (now - PARTITION_MARGIN, now + PARTITION_MARGIN)}
        if months == {self.partitioned_month}:
            return
        with self.owner() as conn:
            conn.execute("select appsurface_durable.ensure_schedule_history_partitions()")
        self.partitioned_month = months.pop() if len(months) == 1 else None

    def advance(self, delta: timedelta) -> None:
        if delta < timedelta(0):
            self.reads.works_in_acceptance_order()
        self.world.clock.shift(delta)
        if self.world.clock.frozen:
            self.facts.frozen_instants.add(self.world.clock.now())
        self.ensure_partitions()
        self.note("clock", shift_s=delta.total_seconds())

    def drain(self, impl: Implementation) -> int:
        """Fault-free passes until nothing is due (or a pass claims nothing)."""
        self.model.drain(self.world.clock.now())
        self.facts.drained_at = self.world.clock.now()
        passes = 0
        while passes < MAX_DRAIN_PASSES and self.reads.anything_due():
            response = self.requests.ask(impl, "process-due", {"maximum_schedules": 64,
                                                       "lease_seconds": self.scenario.lease_seconds})
            passes += 1
            self.note("response", instance=impl.label, op="process-due", outcome=response.outcome,
                      value=response.value, error=response.error)
            if response.died or (isinstance(response.value, dict) and response.value.get("claimed") == 0):
                break
        self.model.ran_until(self.world.clock.now())
        return passes

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

    def set_clock(self, when: datetime, *, freeze: bool) -> None:
        """The server clock at `when`; frozen there for the next step when asked (the step after this one)."""
        if when < self.world.clock.now():
            self.reads.works_in_acceptance_order()
        if freeze:
            self.world.clock.freeze(when)
            self.facts.frozen_instants.add(when)
            self._freeze_next = True
        else:
            self.world.clock.set_time(when)
        self.ensure_partitions()
        self.note("clock-set", set_to=instant_text(when), frozen=freeze)

    def judge_late_writes(self) -> None:
        """Once a paused or stalled processor has finished its step: did it write anything for the schedule the
        takeover processed after its snapshot (judged once, at the first chance)?"""
        if self.facts.late_probe is not None and self.facts.late_check is None:
            context, before = self.facts.late_probe
            self.facts.late_check = late_writes(before, self.reads.schedule_rows(context["schedule_id"]), context)

    def _server_fate(self) -> str | None:
        """What the server did with the transaction open at the faulted barrier, when the verifier can know."""
        if self.injection is None or self.injection.open_xid is None or self.plan.fault == "db-crash":
            # After a crash an xid whose WAL never reached disk can be handed out again, so its status says
            # nothing about the lost transaction; the durable-state checks judge db-crash cases instead.
            return None
        with self.owner() as conn:
            return conn.execute("select pg_xact_status(%s::text::xid8) as fate",
                                (str(self.injection.open_xid),)).fetchone()["fate"]

    def diagnosis(self) -> dict:
        """What the run's diagnosis reads of the implementation in this case (after its processes stopped)."""
        if not self.started:
            return {}
        try:
            def sessions(users) -> int | None:
                return (diagnosis_facts.sessions_logged_in(self.world, self.log_offset, users, self.store.dbname)
                        if self.store is not None else None)
            # the host's fallbacks log in as the runtime role too: then its sessions tell nothing of the implementation
            runtime = None if self.fallbacks else sessions(self.runtime_logins)
            return diagnosis_facts.gather(answers=self.facts.answers, timeline=self.facts.timeline, logs=self.logs,
                                          dispatcher_sessions=sessions({DISPATCHER}), runtime_sessions=runtime,
                                          state=self.final_state, schedule_names=self.schedule_names)
        except Exception as exc:  # noqa: BLE001 - facts only explain a verdict; they never change one
            return {"unread": f"{type(exc).__name__}: {exc}"}

    def teardown(self) -> None:
        if self.bridge_clock is not None:
            self.bridge_clock.join()  # its hold ends within its wait: no lock outlives the case
        for impl in self.started:
            try:
                impl.stop()
            except Exception:  # noqa: BLE001
                impl.kill_group()
        self.client.close()
        try:
            if self.world.proxy is not None:
                self.world.proxy.heal()
            if self.world.cluster is not None and not self.world.cluster.running:
                self.world.cluster.restart()
            if self.store is not None and self.default_role_set:
                try:  # the store goes back to the pool without the login's default role
                    role_changes.set_default_role(self.world, self.store.dbname, runtime=False)
                except Exception:  # noqa: BLE001 - only that login reads it, and a later case sets it again
                    pass
            if self.store is not None:
                store_pool(self.world, self.migrations).give_back(self.store)
        except Exception:  # noqa: BLE001 - teardown must not mask the verdict
            pass

    # -- the case ----------------------------------------------------------------------------------------

    def execute(self, baseline: dict | None) -> CaseOutcome:
        """Run the case and judge it: its outcome, whatever happened (a harness failure is this case's error)."""
        outcome = CaseOutcome(self.plan, "error")
        try:
            missing = [FAULTS[self.plan.fault].needs if self.plan.fault else (), (CLOCK,)]
            for capability in [c for group in missing for c in group]:
                if not self.world.capabilities.has(capability):
                    outcome.verdict, outcome.reason = "not-run", self.world.capabilities.reason(capability)
                    return outcome
            self._prepare(outcome)
            self._run_timeline()
            state = self._record_the_end()
            judgement = judge(state, self.facts, self.plan, self.scenario, baseline)
            if judgement.left:
                self.note("model-timeline", left_to_recovery=sorted(judgement.left))
            drills = self.snapshots.measurements()
            if drills:
                outcome.measurements["restore-drills"] = drills
            outcome.checks, outcome.picture = judgement.checks, judgement.picture
            outcome.model_picture = judgement.model_picture
            failed = [c.name for c in judgement.checks if not c.ok]
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
            outcome.timeline = self.facts.timeline
            outcome.hits = dict(self.facts.hits)
            outcome.fallbacks = sorted(self.fallbacks)
            outcome.duration_s = time.monotonic() - self._started
            outcome.logs = {label: str(path) for label, path in self.logs.items() if path.exists()}
            outcome.clock_skew = dict(self.clock_skew)
            outcome.facts = self.diagnosis()
        return outcome

    def _prepare(self, outcome: CaseOutcome) -> None:
        """A store from the pool with the case's scope, the clock at T0, a healed network, the first copy started."""
        self.store = store_pool(self.world, self.migrations).take()
        with self.owner() as conn:
            conn.execute("select appsurface_durable.create_scope(%s)", (SCOPE,))
        self.world.clock.set_time(T0)
        self.ensure_partitions()
        if self.world.proxy is not None:
            self.world.proxy.heal()
        self.log_offset = diagnosis_facts.log_offset(self.world)
        self.impls["A"] = self.start_implementation("A")
        hello = self.facts.hello = self.impls["A"].hello
        outcome.implementation = hello.get("implementation", "")
        outcome.operations = sorted(hello.get("operations", []))
        outcome.contract = targeted_contract(hello)

    def _run_timeline(self) -> None:
        """Every step, the store observed after each, the recovery after the step the fault fired in, the final
        drain, and the settling of leases a fault left."""
        for step in self.scenario.steps:
            self.model.step_started()
            self.step(step)
            if self.requests.protocol_error:
                raise self.requests.protocol_error
            if self.fault_error:
                raise TestHostError(f"fault could not be injected: {self.fault_error}")
            self.judge_late_writes()
            self.reads.observe(step.index)
            if self.injection is not None and not self.recovered:
                self.recovery.run(step)
                self.recovered = True
                for deferred in self.after_recovery:
                    deferred()
                self.reads.observe(step.index)
        self.note("final-drain")
        self.drain(self.impls["A"])
        if self.injection is not None and not self.recovered:
            # The planned hit fell in the final drain (a timeline whose last pass is that drain): recover as
            # after a step, else what the fault killed stays dead and the claimed schedule stays leased.
            self.recovery.run(None)
            self.recovered = True
        if self.injection is not None:
            self.recovery.settle()
        for cancel in self.facts.cancel_plans:
            cancel.at_end(self)

    def _record_the_end(self):
        """The final state, and what the record can only take once the case is over: the cursors as they end, the
        server's fate of the faulted transaction, the bridge clock's moves, the threads a fault left, the barriers
        each copy reported unasked."""
        with self.owner() as conn:
            state = read_state(conn)
        state.drained_at = self.facts.drained_at
        state.planted = frozenset(self.facts.planted)
        self.final_state = state
        self.barrier_facts.note_cursors("in the final state", {str(d["schedule_id"]): d["cursor_utc"]
                                                               for d in state.definitions})
        self.facts.transaction_fate = self._server_fate()
        clock = self.bridge_clock
        if clock is not None:
            clock.join()
            self.facts.clock_moves, self.facts.clock_holds = clock.moves, clock.holds
        self.facts.bridge_clock_planned = clock is not None
        for thread in self.fault_threads:
            thread.join()
        self.facts.started = [StartedCopy(impl.label, tuple(impl.unsolicited)) for impl in self.started]
        return state


def run_case(world: World, scenario: Scenario, plan: CasePlan, command: str, log_dir: Path,
             baseline: dict | None = None, migrations: Path | None = None, clock_offset: timedelta | None = None,
             instance_commands: bool = True, cwd: str | None = None) -> CaseOutcome:
    """The case, run again (up to PLACEMENT_RUNS in all) while its timeline never reaches the planned hit."""
    missed: list[dict] = []
    while True:
        outcome = CaseRun(world, scenario, plan, command, log_dir, migrations, clock_offset,
                          instance_commands, cwd).execute(baseline)
        if len(missed) + 1 >= PLACEMENT_RUNS or not planned_hit_not_reached(outcome):
            break
        missed.append({"barrier_hits": dict(outcome.hits), "duration_s": round(outcome.duration_s, 3)})
    outcome.placements_missed = missed
    return outcome
