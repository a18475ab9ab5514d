"""A case's recovery after its fault: heal the world, restart what died, move the clock past the dead lease, redo an
interrupted Work step and drain; then settle the leases an attempt that failed later still holds."""

from __future__ import annotations

import time
from datetime import timedelta

from barriers.schema import DISPATCHER, RUNTIME
from scenarios.scenario import Step

from testhost.world.sessions import KeptSession


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


class Recovery:
    """What a case does once its planned fault fired, before its checks."""

    def __init__(self, case) -> None:  # the case (runner.py CaseRun) this part of it serves
        self.case = case

    def run(self, step: Step | None) -> None:
        """Heal the world, restart what died, move the clock past the dead lease, redo an interrupted Work step,
        and run fault-free passes until nothing is due."""
        case = self.case
        case.note("recovery")
        for hook in case.on_recovery:
            hook()
        if case.world.proxy is not None:
            case.world.proxy.heal()
        if case.network_faulted:
            self._await_commits_in_flight()
        for label, impl in list(case.impls.items()):
            if not impl.alive:
                case.impls[label] = case.start_implementation(label)
        case.healed = True
        case.advance(timedelta(seconds=case.scenario.lease_seconds + 1))
        if step is not None and step.op == "complete-work":
            work_id = case.reads.nth_work(step.args["schedule"], step.args.get("nth", -1))
            if work_id and case.reads.work_state(work_id) != step.args["state"]:
                response = case.client.op("complete-work", {"work_id": work_id, "state": step.args["state"]})
                case.requests.note_response(response, "complete-work (redo)")
        case.drain(case.impls["A"])

    def _await_commits_in_flight(self) -> None:
        """A COMMIT a racer sent just as a network fault cut its connection may still be committing on the server
        when the recovery opens its first counting window, and would be seen there as a claim or a decision nobody
        reported: before the recovery counts anything, let it land."""
        case = self.case
        still_open, waited_s = await_commits_in_flight(case.owner)
        if still_open:
            case.note("commits-in-flight", sessions=still_open, waited_s=waited_s)

    def settle(self, rounds: int = 3) -> None:
        """After a fault, a lease taken by an attempt that failed later still blocks its schedule until it
        expires: move the clock past it and drain again (bounded)."""
        case = self.case
        for _ in range(rounds):
            with case.owner() as conn:
                expiry = conn.execute("select max(lease_expires_at_utc) - clock_timestamp() as left "
                                      "from appsurface_durable.schedule_dispatch_timing "
                                      "where lease_owner is not null").fetchone()["left"]
            if expiry is None:
                return
            case.note("settle", lease_left_s=expiry.total_seconds())
            case.advance(max(expiry, timedelta(0)) + timedelta(seconds=1))
            case.drain(case.impls["A"])
