"""What a case reads of the store while it runs, as the verifier (the migration owner): a schedule's rows, the store
after every step, the Work in acceptance order and what each instant's Work identity is."""

from __future__ import annotations

from datetime import datetime, timedelta

from scenarios.steps import pass_denial

from testhost.judge.identity import instant_text
from testhost.judge.gate_model import generation_of
from testhost.judge.observations import FENCE_REASONS
from testhost.judge.state import read_state

from .client import SCOPE, protocol_json


class StoreReads:
    """The verifier's reads of a case's store."""

    def __init__(self, case) -> None:  # the case (runner.py CaseRun) this part of it serves
        self.case = case
        # Per schedule, its Work IDs in the order they were accepted: accepted_at_utc alone misorders Work accepted
        # after the clock was set back, so the order is taken before each backward move and extended after it.
        self.work_order: dict[str, list[str]] = {}
        self.restored_at_step = False  # the step just run restored the store: its observation starts afresh

    def anything_due(self) -> bool:
        with self.case.owner() as conn:
            return conn.execute("select exists (select 1 from appsurface_durable.schedule_dispatch_timing "
                                "where claimable_at_utc <= clock_timestamp()) as due").fetchone()["due"]

    def schedule_rows(self, schedule_id: str) -> dict:
        """Everything durable about one schedule (for the late-write fence)."""
        with self.case.owner() as conn:
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

    def observe(self, index: int) -> None:
        """The store after step `index` (its coalesced rows, cursors, processor facts and generations), kept in the
        record for the checks that judge how it moved."""
        # After every step: the three statements travel in one round trip (a pipeline), read when it syncs.
        with self.case.owner() as conn, conn.pipeline():
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
        self.case.facts.coalesced_seen.append((index, {"all": {key(r): dict(r) for r in rows},
                                            "pending": {key(r): dict(r) for r in rows if r["state"] == "pending"},
                                            "cursors": {r["schedule_id"]: dict(r) for r in cursors},
                                            # what Gate A holds fenced after this step, to judge the step by
                                            "fenced": {str(self.case.schedule_ids[name]): s.suspension
                                                       for name, s in self.case.model.schedules.items()
                                                       if s.lifecycle == "suspended" and s.suspension in FENCE_REASONS
                                                       and name in self.case.schedule_ids},
                                            # a restore put older rows back: not a move of this timeline
                                            "restored": self.restored_at_step,
                                            "passes_asked": self.case.requests.passes_asked, "processor": processor_facts,
                                            "requeued": {r["schedule_id"]: dict(r) for r in requeued},
                                            "generations": generations,
                                            # a pass step the checks may hold to what was due when it began: no fault
                                            # so far, no refusal expected or bridge denied
                                            "clean_pass": self.clean_pass(index)}))
        self.case.barrier_facts.note_cursors(f"after step {index + 1}", {r["schedule_id"]: r["cursor_utc"] for r in cursors},
                                        restored=self.restored_at_step)
        self.restored_at_step = False

    def clean_pass(self, index: int) -> bool:
        """Step `index` was a pass (`process` or `race`) with no fault injected by its end, no refusal expected of it
        and no bridge to be denied."""
        step = self.case.scenario.steps[index] if 0 <= index < len(self.case.scenario.steps) else None
        return step is not None and step.op in ("process", "race") and self.case.injection is None \
            and "expect" not in step.args and pass_denial(self.case.scenario, step) is None

    def dispatch_rows(self, schedule_id: str | None = None) -> list:
        """Dispatch rows with their timing (one schedule's, or all)."""
        with self.case.owner() as conn:
            return [dict(r) for r in conn.execute(
                "select d.*, t.due_at_utc, t.claimable_at_utc, t.lease_owner, t.lease_expires_at_utc "
                "from appsurface_durable.schedule_dispatch d join appsurface_durable.schedule_dispatch_timing t "
                "using (dispatch_id) where %(id)s::uuid is null or d.schedule_id = %(id)s::uuid "
                "order by d.schedule_id", {"id": schedule_id}).fetchall()]

    def revision_of(self, schedule: str) -> int:
        """The schedule's current definition revision as the store holds it (0: none yet)."""
        with self.case.owner() as conn:
            row = conn.execute("select revision from appsurface_durable.schedule_definitions where schedule_id = %s",
                               (self.case.schedule_ids[schedule],)).fetchone()
        return row["revision"] if row else 0

    def nth_work(self, schedule: str, nth: int) -> str | None:
        """The schedule's Work ID `nth` in acceptance order (1 the first, -1 the last; None: no such Work)."""
        works = self.works_in_acceptance_order().get(schedule, [])
        index = nth - 1 if nth > 0 else nth
        return works[index] if -len(works) <= index < len(works) else None

    def works_in_acceptance_order(self) -> dict[str, list[str]]:
        """Each schedule's Work IDs in acceptance order: those seen before and still in the store (a restore drill
        takes back what it did not hold), then the new ones by accepted_at_utc (no backward clock move has come
        between them, since one takes this order first)."""
        with self.case.owner() as conn:
            rows = conn.execute("select work_id, split_part(idempotency_key, '|', 3) as schedule_id "
                                "from appsurface_durable.work_items where idempotency_key like %s "
                                "order by accepted_at_utc, work_id", (f"schedule-occurrence/v1|{SCOPE}|%",)).fetchall()
        present = {str(row["work_id"]) for row in rows}
        self.work_order = {name: [w for w in order if w in present] for name, order in self.work_order.items()}
        for row in rows:
            name = self.case.schedule_names.get(row["schedule_id"])
            if name is None:
                continue  # a Work no schedule of this case owns
            order = self.work_order.setdefault(name, [])
            if str(row["work_id"]) not in order:
                order.append(str(row["work_id"]))
        return self.work_order

    def work_state(self, work_id: str) -> str | None:
        with self.case.owner() as conn:
            row = conn.execute("select state from appsurface_durable.work_items where work_id = %s",
                               (work_id,)).fetchone()
        return row["state"] if row else None

    def work_row(self, work_id: str) -> dict:
        with self.case.owner() as conn:
            return protocol_json(dict(conn.execute("select * from appsurface_durable.work_items where work_id = %s",
                                                   (work_id,)).fetchone()))

    def lease_generations(self) -> dict[str, int]:
        """Each dispatch row's lease generation, by Schedule ID: a claim moves it by one."""
        with self.case.owner() as conn:
            return {str(r["schedule_id"]): r["lease_generation"] for r in conn.execute(
                "select schedule_id, lease_generation from appsurface_durable.schedule_dispatch").fetchall()}

    def instant_identities(self) -> dict[tuple[str, str], str]:
        """Per (schedule name, nominal instant) covered by a linked occurrence: the Work ID it was accepted under."""
        with self.case.owner() as conn:
            state = read_state(conn)
        names = {str(schedule_id): name for name, schedule_id in self.case.schedule_ids.items()}
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
