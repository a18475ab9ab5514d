"""A step run beside a held barrier: while a pass is held at its `during` barrier the host runs the step from a
session of its own (a fence, a Work transition, a schedule command); a step that waited for the pass's locks runs
once the pass is over, as in the model."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid

import psycopg

from scenarios.steps import BESIDE_AFTER_DECISION

from testhost.errors import FallbackFailed
from testhost.faults.catalog import DEADLINE_S
from testhost.impl.implementation import Implementation, Response

from .client import SCOPE, protocol_json
from .step_runs import RUNS

# A step run beside a held barrier is cancelled by the host as soon as the server shows it waiting for a lock (it
# then waits for the held transaction), and in any case after BESIDE_LIMIT_S. The host cancels it itself:
# PostgreSQL's own lock_timeout and statement_timeout never fire once libfaketime has moved the server clock (seen
# here: a lock wait under lock_timeout = 500ms outlived 60 s).
BESIDE_POLL_S = 0.01
BESIDE_LIMIT_S = 5.0


class BesideSteps:
    """The step a pass runs beside its held barrier, while the pass runs, and how each such step went."""

    def __init__(self, case) -> None:  # the case (runner.py CaseRun) this part of it serves
        self.case = case
        self.current: dict | None = None  # the step beside the running pass: its barrier, hit, outcome, the model

    def at_barrier(self, impl: Implementation, name: str) -> None:
        """At the planned hit of a pass's `during` barrier: the step, from the host's own session."""
        case = self.case
        beside = self.current
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
        after_pass, case.model = case.model, (case.model if after_decision else beside["model_before"])
        beside["outcome"] = RUNS[step.op].run_beside(case, step)
        if beside["outcome"] == "committed" and not after_decision:
            case.model.pass_(beside["cutoff"], beside["limit"], first=claimed)
        elif beside["outcome"] != "committed":
            case.model = after_pass
        case.note("beside-barrier", instance=impl.label, op=step.op, barrier=name, outcome=beside["outcome"])

    def after_pass(self) -> None:
        """A step beside a held barrier that waited for the pass's locks, or never met its barrier (a fault came
        first), runs now, after the pass, as in the model."""
        case = self.case
        beside = self.current
        outcome = beside["outcome"] or "barrier-not-reached"
        if outcome in ("committed", "refused"):
            pass  # it ran while the pass was held
        elif case.injection is not None and not case.recovered:
            # A fault interrupted this pass: the step waits for the recovery too, so the recovery finishes what the
            # pass committed (a decided occurrence's bridge) before the step can fence it, as the model has it.
            case.note("beside-barrier", op=beside["step"].op, barrier=beside["barrier"], outcome=outcome,
                      then="runs after the recovery")
            case.after_recovery.append(lambda: RUNS[beside["step"].op].run(case, beside["step"]))
        else:
            case.note("beside-barrier", op=beside["step"].op, barrier=beside["barrier"], outcome=outcome,
                      then="runs after the pass")
            RUNS[beside["step"].op].run(case, beside["step"])
        case.facts.beside_outcomes.append({"step": beside["step"].index + 1, "op": beside["step"].op,
                                           "barrier": beside["barrier"], "hit": beside["hit"], "outcome": outcome})

    def owner(self, sql: str, params: tuple = ()) -> bool:
        """One statement as the migration owner in a session of its own: True when it committed, False when it
        waited for a lock (the implementation's held transaction's)."""
        case = self.case
        with psycopg.connect(case.store.owner_dsn, autocommit=True) as conn, \
                cancelled_when_blocked(conn, case.store.dsn("postgres")) as waited:
            try:
                conn.execute(sql, params)
                return True
            except psycopg.errors.QueryCanceled:
                if waited():
                    return False
                raise

    def fallback(self, op: str, args: dict) -> Response | None:
        """A schedule command through the reference client in a session of its own (the implementation is held
        and answers nothing meanwhile): its response, or None when it waited for a lock. The step is the host's,
        like every fallback."""
        from reference import ScheduleClient
        from reference.errors import DurableError

        case = self.case
        case.fallbacks.add(f"{op} (beside a held barrier)")
        saved = case.client.schedule_client
        client = None
        try:
            client = case.client.schedule_client = ScheduleClient(case.store.runtime_dsn, SCOPE,
                                                                  deadline=DEADLINE_S + BESIDE_LIMIT_S)
            with cancelled_when_blocked(client.session.conn, case.store.dsn("postgres")) as waited:
                try:
                    return case.client.call(op, args, uuid.uuid4())
                except (DurableError, psycopg.Error) as exc:
                    if waited():
                        return None
                    raise FallbackFailed(f"harness fallback could not run {op} beside the held barrier: "
                                         f"{type(exc).__name__}: {exc}") from exc
        finally:
            case.client.schedule_client = saved
            if client is not None:
                client.close()

    def work(self, work_id: str, state: str) -> Response | None:
        """A Work transition through the reference Work store in a session of its own: its response, or None when
        it waited for a lock (the held pass's dispatch row)."""
        from reference import WorkStore
        from reference.errors import DurableError
        from reference.problems import Problem

        case = self.case
        case.fallbacks.add("complete-work (beside a held barrier)")
        work = WorkStore(case.store.runtime_dsn, SCOPE, deadline=DEADLINE_S + BESIDE_LIMIT_S)
        try:
            with cancelled_when_blocked(work.session.conn, case.store.dsn("postgres")) as waited:
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


@contextlib.contextmanager
def cancelled_when_blocked(conn, watcher_dsn: str, limit_s: float = BESIDE_LIMIT_S):
    """Cancel whatever `conn` runs once the server shows its backend waiting for a lock another session holds
    (`pg_blocking_pids`), or after `limit_s`; yields a function telling whether it did."""
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
