"""Matrix expansion: scenario × barrier × fault × hit, skipping only what cannot happen, with the reason."""

from barriers import BY_NAME, CATALOG
from scenarios.matrix import expand, hits_for
from scenarios.scenario import load_catalog
from testhost.faults.catalog import FAULTS


def test_hits_first_and_last():
    assert hits_for(0) == [] and hits_for(1) == [1] and hits_for(4) == [1, 4]


def test_unreached_barriers_and_impossible_faults_are_skipped_with_reasons():
    scenario = next(s for s in load_catalog() if s.name == "at-single")
    census = {"at-single": {"schedule-claim-before-commit": 1, "schedule-decision-before-commit": 2}}
    plans, skipped = expand([scenario], census, FAULTS)
    planned = {(p.barrier, p.fault, p.hit) for p in plans}
    assert ("schedule-claim-before-commit", "lost-commit-reply", 1) in planned
    assert ("schedule-decision-before-commit", "kill", 2) in planned
    assert ("schedule-decision-before-commit", "kill", 1) in planned
    reasons = {(s.barrier, s.fault): s.reason for s in skipped}
    assert "never reaches schedule-link-after-commit" in reasons[("schedule-link-after-commit", "*")]
    assert all(p.barrier in census["at-single"] for p in plans)
    # two hits of one barrier, one of the other; stall plans the first hit only, and says so
    # cancel applies at no before-commit barrier (only after a committed claim or decision does a statement wait)
    assert len(plans) == 2 * (len(FAULTS) - 1) - 1 + (len(FAULTS) - 1)
    assert "idle in its transaction" in reasons[("schedule-claim-before-commit", "cancel")]
    assert ("schedule-decision-before-commit", "stall", 1) in planned
    assert ("schedule-decision-before-commit", "stall", 2) not in planned
    assert "hit 2: stall plans first hits only" in reasons[("schedule-decision-before-commit", "stall")]


def test_fault_applicability():
    for barrier in CATALOG:
        lost = FAULTS["lost-commit-reply"].applies(barrier)
        assert (lost is None) == (barrier.position == "before-commit")
        pause = FAULTS["pause"].applies(barrier)
        assert (pause is None) == (not barrier.name.startswith("work-terminal"))
    assert FAULTS["kill"].applies(BY_NAME["schedule-link-after-commit"]) is None


def test_filters_and_repeat():
    scenario = next(s for s in load_catalog() if s.name == "at-single")
    census = {"at-single": {b.name: 1 for b in CATALOG}}
    plans, _ = expand([scenario], census, FAULTS, barrier="schedule-claim-after-commit", fault="kill", repeat=3)
    assert [p.id for p in plans] == ["at-single/schedule-claim-after-commit/kill/1",
                                     "at-single/schedule-claim-after-commit/kill/1#2",
                                     "at-single/schedule-claim-after-commit/kill/1#3"]


def test_a_dying_worker_fails_only_its_own_case_and_the_pool_is_renewed():
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from protocol_helpers import fake_case_worker
    from testhost.runs.pool import Pool, Progress, run_cases
    from scenarios.matrix import CasePlan

    pools = []

    def factory():
        pools.append(ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")))
        return pools[-1]

    pool = Pool(factory)
    plans = [(CasePlan(name), None) for name in ("first", "die", "last")]
    try:
        results = run_cases(pool, plans, "unused", "/tmp", Progress(3, lambda line: None, "test"),
                            worker=fake_case_worker)
    finally:
        pool.close()
    verdicts = {r["plan"].scenario: (r["case"]["verdict"], r["case"]["reason"]) for r in results}
    assert verdicts["first"] == ("pass", "") and verdicts["last"] == ("pass", "")
    assert verdicts["die"] == ("error", "the worker process running this case died")
    assert len(pools) >= 2  # renewed after the death


def test_an_aborted_pool_waits_for_its_manager_thread_so_the_exit_hook_meets_a_closed_pipe():
    """A stopped run's pool lets its work go but not its manager thread: a thread still closing the executor's
    wake-up pipe when the interpreter exits races concurrent.futures' exit hook, which then writes to a closed
    descriptor and prints a traceback after a clean stop."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from testhost.runs.pool import Pool

    executors = []

    def factory():
        executors.append(ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")))
        return executors[-1]

    pool = Pool(factory)
    assert pool.executor.submit(abs, -3).result(timeout=60) == 3  # the worker and the manager thread are up
    ends = [(pool.executor._executor_manager_thread, pool.executor._executor_manager_thread_wakeup)]
    pool.renew()
    assert pool.executor.submit(abs, -4).result(timeout=60) == 4
    ends.append((pool.executor._executor_manager_thread, pool.executor._executor_manager_thread_wakeup))
    pool.abort(timeout=30)
    assert len(executors) == 2
    for manager, wakeup in ends:
        assert not manager.is_alive() and wakeup._closed  # the exit hook's write finds the pipe closed: a no-op


def test_a_skipped_combination_names_its_fault_as_one_string_whatever_the_filter():
    scenario = next(s for s in load_catalog() if s.name == "at-single")
    census = {"at-single": {b.name: 1 for b in CATALOG}}
    offered = {"process-due"}
    for fault, named in [(None, "*"), ("kill", "kill"), (["kill", "pause,db-crash"], "kill,pause,db-crash")]:
        _, skipped = expand([scenario], census, FAULTS, fault=fault, offered=offered)
        not_offered = [s for s in skipped if BY_NAME[s.barrier].operation not in offered]
        assert not_offered and {s.to_json()["fault"] for s in not_offered} == {named}


def _timeline(*names, schedule="s1", instance="A", gap_after=None):
    events = [{"event": "step"}]
    for i, name in enumerate(names):
        events.append({"event": "barrier", "instance": instance, "name": name, "context": {"schedule_id": schedule}})
        if gap_after == i:
            events.append({"event": "response"})
    return events


PASS = ("schedule-claim-before-commit", "schedule-claim-after-commit", "schedule-decision-before-commit",
        "schedule-decision-after-commit", "schedule-work-after-acceptance", "schedule-bridge-before-commit",
        "schedule-link-after-commit")


def test_a_kill_is_planned_once_per_durable_state_and_only_where_nothing_came_between():
    from scenarios.matrix import barrier_sequence, same_state_twin

    scenario = next(s for s in load_catalog() if s.name == "at-single")
    census = {"at-single": {name: 1 for name in PASS}}
    plans, skipped = expand([scenario], census, FAULTS, fault="kill",
                            sequences={"at-single": barrier_sequence(_timeline(*PASS))})
    assert {p.barrier for p in plans} == {"schedule-claim-before-commit", "schedule-decision-before-commit",
                                          "schedule-bridge-before-commit", "schedule-link-after-commit"}
    reasons = {s.barrier: s.reason for s in skipped}
    assert "schedule-decision-before-commit hit 1" in reasons["schedule-claim-after-commit"]
    assert "schedule-bridge-before-commit hit 1" in reasons["schedule-decision-after-commit"]
    # every other fault keeps every barrier: only a killed process leaves nothing but what committed
    others, _ = expand([scenario], census, FAULTS, fault="disconnect",
                       sequences={"at-single": barrier_sequence(_timeline(*PASS))})
    assert len(others) == len(PASS)

    hits = lambda name: [1]  # noqa: E731
    # an answer, another schedule or another instance between the two: not the same state, both planned
    assert same_state_twin(FAULTS["kill"], barrier_sequence(_timeline(*PASS[1:3], gap_after=0)),
                           "schedule-claim-after-commit", 1, hits) is None
    two = _timeline(PASS[1]) + _timeline(PASS[2], schedule="s2")[1:]
    assert same_state_twin(FAULTS["kill"], barrier_sequence(two), "schedule-claim-after-commit", 1, hits) is None
    racing = _timeline(PASS[1]) + _timeline(PASS[2], instance="B")[1:]
    assert same_state_twin(FAULTS["kill"], barrier_sequence(racing), "schedule-claim-after-commit", 1, hits) is None
    # two processors anywhere in the run: their interleaving is timing, and the plan must not depend on it
    raced = _timeline(*PASS[1:3]) + _timeline(PASS[0], instance="B")[1:]
    assert same_state_twin(FAULTS["kill"], barrier_sequence(raced), "schedule-claim-after-commit", 1, hits) is None
    # the twin must be planned itself: a middle hit of the later barrier is not
    assert same_state_twin(FAULTS["kill"], barrier_sequence(_timeline(*PASS[1:3])), "schedule-claim-after-commit", 1,
                           lambda name: [2]) is None
    # without a fault-free sequence (a run that failed, explore's own plans) everything is planned
    plain, _ = expand([scenario], census, FAULTS, fault="kill")
    assert len(plain) == len(PASS)


def _planned(scenario_name, fault, timeline, scenario=None):
    scenario = scenario or next(s for s in load_catalog() if s.name == scenario_name)
    census = {scenario.name: {name: 1 for name in PASS}}
    from scenarios.matrix import barrier_sequence

    plans, skipped = expand([scenario], census, FAULTS, fault=fault,
                            sequences={scenario.name: barrier_sequence(timeline)})
    return {p.barrier for p in plans}, {s.barrier: s.reason for s in skipped}


def test_a_pause_after_a_link_is_planned_only_where_the_lease_is_still_used_afterwards():
    link = "schedule-link-after-commit"
    answered = _timeline(*PASS, gap_after=len(PASS) - 1)
    planned, reasons = _planned("at-single", "pause", answered)
    assert link not in planned and "nothing more under the lease" in reasons[link]
    assert "schedule-claim-after-commit" in planned  # between transactions elsewhere: still planned
    # the next barrier another schedule's, or a new claim of the same schedule: the lease is spent too
    for after in (_timeline(PASS[0], schedule="s2")[1:], _timeline(PASS[0])[1:]):
        assert link not in _planned("at-single", "pause", _timeline(*PASS) + after)[0]
    # a second occurrence bridged under the same lease: the takeover has something to take over, so planned
    second = _timeline(*PASS) + _timeline(*PASS[4:])[1:]
    assert link in _planned("at-single", "pause", second)[0]
    # two processors: interleaving is timing, everything planned
    raced = answered + _timeline(PASS[0], instance="B")[1:]
    assert link in _planned("at-single", "pause", raced)[0]
    # without a fault-free sequence nothing is cut
    scenario = next(s for s in load_catalog() if s.name == "at-single")
    plain, _ = expand([scenario], {"at-single": {name: 1 for name in PASS}}, FAULTS, fault="pause")
    assert link in {p.barrier for p in plain}


def test_a_kill_or_cut_at_the_last_barrier_of_a_request_is_planned_in_the_crash_scenarios_only():
    from scenarios.scenario import parse
    from testhost.faults.catalog import DB_CRASH_SCENARIOS

    link = "schedule-link-after-commit"
    answered = _timeline(*PASS, gap_after=len(PASS) - 1)
    assert "after-single" not in DB_CRASH_SCENARIOS and "at-single" in DB_CRASH_SCENARIOS
    for fault in ("kill", "disconnect"):
        planned, reasons = _planned("after-single", fault, answered)
        assert link not in planned and "last barrier of its request" in reasons[link], fault
        assert "at-single" in reasons[link]
        assert link in _planned("at-single", fault, answered)[0]  # one of the scenarios that meet every kind
        assert link in _planned("after-single", fault, _timeline(*PASS))[0]  # the request went on: planned
        # a team's own scenario gets it wherever it is
        source = next(s for s in load_catalog() if s.name == "after-single").source
        assert link in _planned(None, fault, answered, scenario=parse("team-after", source))[0]
