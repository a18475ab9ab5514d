"""Two independent readings of Gate A must agree on generated timelines: Hypothesis drives the reference
(real PostgreSQL, real server clock) and the harness's model with the same commands, and after every step
the database's picture must equal the model's. A failure prints the replayable program of steps."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, initialize, invariant, precondition, rule,
                                 run_state_machine_as_test)

from reference import ProcessRequest, ScheduleClient, ScheduleProcessor, WorkStore
from reference.model import ScheduleSpec, Target
from scenarios.scenario import T0
from testhost.judge.pictures import comparable, normalize
from testhost.judge.gate_model import Generation, Model, picture
from testhost.judge.state import read_state
from testhost.world.store import new_store

SCOPE = "tenant-a"
NAMES = ("s1", "s2")
# Instants sit 0.9 s past a whole second. The model is given the whole second the timeline has reached.
# Every other step runs with the server clock set to that second, and each pass 0.1 s after it: a pass's
# transaction time is that plus however long the pass takes to start, far less than 0.8 s, so both see
# the same instants, and a pass never runs at a time earlier than what a step before it stamped (a Work
# completed after a pass requeues its schedule at the completion's time; a pass with the clock set back
# behind that would not find it due yet).
OFFSET = timedelta(seconds=0.9)
PASS_LEAD = timedelta(seconds=0.1)


class ModelAgreesWithReference(RuleBasedStateMachine):
    world = None  # set by the test below

    def __init__(self) -> None:
        super().__init__()
        self.world.clock.set_time(T0)  # the history partitions are made for the server's month
        self.store = new_store(self.world)
        self.store.ensure_partitions()
        self.store.create_scope(SCOPE)
        self.client = ScheduleClient(self.store.runtime_dsn, SCOPE)
        self.work = WorkStore(self.store.runtime_dsn, SCOPE)
        self.processor = ScheduleProcessor(self.store.runtime_dsn, self.store.dispatcher_dsn)
        self.model = Model()
        self.ids: dict[str, uuid.UUID] = {}
        self.deleted: set[str] = set()
        self.timeline_at = T0  # where the timeline's clock stands, in whole seconds from T0
        self.world.clock.set_time(T0)  # again: making the store took real time

    def teardown(self) -> None:
        for resource in (self.client, self.work, self.processor):
            resource.close()
        self.store.drop()

    def _spec(self, every_s: int, misfire: str, window_s: int, command: str) -> ScheduleSpec:
        return ScheduleSpec("every", Target(command), every=timedelta(seconds=every_s), anchor=T0 + OFFSET,
                            misfire_policy=misfire, safety_window=timedelta(seconds=window_s))

    def _generation(self, name: str, every_s: int, misfire: str, window_s: int) -> Generation:
        with self.store.owner() as conn:
            row = conn.execute("select accepted_at_utc from appsurface_durable.schedule_generations "
                               "where schedule_id = %s order by generation desc limit 1", (self.ids[name],)).fetchone()
        return Generation(1, "every", row["accepted_at_utc"], every=timedelta(seconds=every_s), anchor=T0 + OFFSET,
                          misfire=misfire, window=timedelta(seconds=window_s))

    @initialize(every_s=st.sampled_from([30, 60]), misfire=st.sampled_from(["run-once", "skip"]),
                window_s=st.sampled_from([120, 3600]))
    def create_first(self, every_s, misfire, window_s):
        self.create(every_s, misfire, window_s)

    @precondition(lambda self: len(self.ids) < len(NAMES))
    @rule(every_s=st.sampled_from([30, 60]), misfire=st.sampled_from(["run-once", "skip"]),
          window_s=st.sampled_from([120, 3600]))
    def create(self, every_s, misfire, window_s):
        name = NAMES[len(self.ids)]
        self._at_timeline()
        view = self.client.create(self._spec(every_s, misfire, window_s, name))
        self.ids[name] = view.schedule_id
        self.model.create(name, self._generation(name, every_s, misfire, window_s))

    def _at_timeline(self) -> None:
        self.world.clock.set_time(self.timeline_at)

    def _process(self):
        self.world.clock.set_time(self.timeline_at + PASS_LEAD)
        self.processor.process_due(ProcessRequest(maximum_schedules=64))
        self.model.pass_(self.timeline_at)

    @rule(seconds=st.sampled_from([0, 31, 61, 150, 400]), times=st.integers(1, 3))
    def advance_and_process(self, seconds, times):
        """`times` rounds of: the clock moves by whole seconds, then one pass runs (400 s is past the 120 s
        safety window). Several rounds in one step let short programs reach coalescing and its growth."""
        for _ in range(times):
            self.timeline_at += timedelta(seconds=seconds)
            self._process()

    @precondition(lambda self: self.ids)
    @rule(data=st.data(), state=st.sampled_from(["running", "retrying", "suspended", "succeeded", "failed"]))
    def complete_latest_work(self, data, state):
        name = data.draw(st.sampled_from(sorted(self.ids)))
        with self.store.owner() as conn:
            row = conn.execute("select work_id from appsurface_durable.work_items where idempotency_key like %s "
                               "order by accepted_at_utc desc limit 1",
                               (f"schedule-occurrence/v1|{SCOPE}|{self.ids[name]}|%",)).fetchone()
        if row is None:
            return
        self._at_timeline()
        self.work.transition(row["work_id"], state)
        self.model.work(name, -1, state)

    @precondition(lambda self: set(self.ids) - self.deleted)
    @rule(data=st.data(), every_s=st.sampled_from([30, 60]), misfire=st.sampled_from(["run-once", "skip"]))
    def update(self, data, every_s, misfire):
        name = data.draw(st.sampled_from(sorted(set(self.ids) - self.deleted)))
        current = self.client.get(self.ids[name])
        self._at_timeline()
        self.client.update(self.ids[name], self._spec(every_s, misfire, 3600, f"{name}-v2"),
                           expected_revision=current.revision)
        self.model.update(name, self._generation(name, every_s, misfire, 3600))

    @precondition(lambda self: set(self.ids) - self.deleted)
    @rule(data=st.data())
    def delete(self, data):
        name = data.draw(st.sampled_from(sorted(set(self.ids) - self.deleted)))
        current = self.client.get(self.ids[name])
        self._at_timeline()
        self.client.delete(self.ids[name], expected_revision=current.revision)
        self.model.delete(name)
        self.deleted.add(name)

    @invariant()
    def database_matches_the_model(self):
        database = normalize(read_state(self.store.owner_dsn), self.ids)
        expected = picture(self.model)
        assert {n: comparable(e) for n, e in database.items()} == {n: comparable(e) for n, e in expected.items()}


@pytest.mark.world
def test_the_reference_and_the_model_agree_on_generated_timelines(world):
    ModelAgreesWithReference.world = world
    # The examples come from the loaded profile (ci or dev); each one builds a store, so fewer of them.
    run_state_machine_as_test(ModelAgreesWithReference, settings=settings(
        settings.default, max_examples=min(settings.default.max_examples, 30), stateful_step_count=12))


class _Drawn:
    """Stands in for Hypothesis's `data` in a replayed program: every draw returns the recorded value."""

    def __init__(self, value):
        self.value = value

    def draw(self, strategy):
        return self.value


@pytest.mark.world
def test_a_pass_right_after_a_completion_materializes_the_requeued_coalesced_occurrence(world):
    """A program Hypothesis found: Work completed, then a pass in the same timeline second. The pass must run
    at or after the completion's time, or the schedule it requeued is not due yet and the two disagree."""
    ModelAgreesWithReference.world = world
    machine = ModelAgreesWithReference()
    try:
        machine.create_first(every_s=30, misfire="run-once", window_s=120)
        machine.create(every_s=30, misfire="run-once", window_s=120)
        machine.advance_and_process(seconds=31, times=2)
        machine.complete_latest_work(_Drawn("s1"), state="succeeded")
        machine.advance_and_process(seconds=0, times=1)
        machine.database_matches_the_model()
        coalesced = [o for o in normalize(read_state(machine.store.owner_dsn), machine.ids)["s1"]["occurrences"]
                     if o[1] == "coalesced"]
        assert [o[4] for o in coalesced] == ["materialized"]
    finally:
        machine.teardown()
