"""Faults, as plug-ins behind one Protocol: each is injected when the chosen barrier is hit the chosen time."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol


from barriers import Barrier

from .world import DB_CRASH, NETWORK

if TYPE_CHECKING:
    from .implementation import Implementation
    from .runner import CaseRun

PROCESSOR_TRANSACTIONS = {"dispatcher claim", "scoped decision", "scoped bridge"}


@dataclass
class Injection:
    """What a fault did, for the timeline and for the checks that follow it."""

    fault: str
    barrier: str
    details: dict[str, Any] = field(default_factory=dict)
    open_xid: int | None = None  # the implementation's open write transaction at the barrier, if any
    context: dict[str, Any] = field(default_factory=dict)  # what the implementation said at the barrier


class Fault(Protocol):
    name: str
    needs: tuple[str, ...]  # world capabilities

    def applies(self, barrier: Barrier) -> str | None:
        """None if the fault can be injected at this barrier, else why not."""

    def inject(self, run: "CaseRun", impl: "Implementation", barrier: Barrier, injection: Injection) -> None:
        ...


def open_write_xid(run: "CaseRun", barrier: Barrier) -> int | None:
    """The xid of the implementation's open write transaction at a before-commit barrier, when it is the only
    one on the case's database (with two processors racing, whose it is cannot be told, so none).

    At the barrier the implementation waits for the host's reply, so the one session holding an xid on the
    case's database is its transaction (the host's own sessions there hold none between statements). The
    session's state is not read: the world runs with track_activities off."""
    if not barrier.before_commit or run.concurrent:
        return None
    with run.world.admin() as conn:
        rows = conn.execute(
            "select backend_xid::text::bigint from pg_stat_activity where datname = %s "
            "and backend_xid is not null and pid <> pg_backend_pid()",
            (run.store.dbname,)).fetchall()
    return rows[0][0] if len(rows) == 1 else None


class Kill:
    name, needs = "kill", ()

    def applies(self, barrier: Barrier) -> str | None:
        return None

    def inject(self, run, impl, barrier, injection):
        injection.open_xid = open_write_xid(run, barrier)
        impl.kill()
        injection.details["killed_pid"] = impl.pid


class Disconnect:
    name, needs = "disconnect", (NETWORK,)

    def applies(self, barrier: Barrier) -> str | None:
        return None

    def inject(self, run, impl, barrier, injection):
        injection.open_xid = open_write_xid(run, barrier)
        run.world.proxy.cut()


class LostCommitReply:
    """Drop server→client bytes, release the barrier: COMMIT reaches the server, its reply never returns."""

    name, needs = "lost-commit-reply", (NETWORK,)
    settle_s = 0.5
    commit_timeout_s = 15.0

    def applies(self, barrier: Barrier) -> str | None:
        return None if barrier.position == "before-commit" else "only a before-commit barrier has a commit to lose"

    def inject(self, run, impl, barrier, injection):
        injection.open_xid = open_write_xid(run, barrier)
        run.world.proxy.blackhole_replies()
        # Removing the toxic closes the connection, so heal only once the server has finished the transaction
        # (or, for one that wrote nothing, after a moment): the reply to its COMMIT is then surely lost.
        healer = threading.Thread(target=self._heal_after_commit, args=(run, injection), daemon=True)
        healer.start()
        run.on_recovery.append(healer.join)

    def _heal_after_commit(self, run, injection: Injection) -> None:
        try:
            if injection.open_xid is None:
                time.sleep(self.settle_s)
                return
            deadline = time.monotonic() + self.commit_timeout_s
            with run.world.admin() as conn:
                while time.monotonic() < deadline:
                    fate = conn.execute("select pg_xact_status(%s::text::xid8)", (str(injection.open_xid),)).fetchone()[0]
                    if fate != "in progress":
                        injection.details["server_fate_before_heal"] = fate
                        return
                    time.sleep(0.01)
                injection.details["server_fate_before_heal"] = "still in progress"
        finally:
            run.world.proxy.heal()


class DbCrash:
    name, needs = "db-crash", (DB_CRASH,)

    def applies(self, barrier: Barrier) -> str | None:
        return None

    def inject(self, run, impl, barrier, injection):
        injection.open_xid = open_write_xid(run, barrier)
        run.world.cluster.crash()
        run.world.cluster.restart()


class Pause:
    """SIGSTOP at the barrier, move the clock past the lease, let a second processor take over, SIGCONT."""

    name, needs = "pause", ()

    def applies(self, barrier: Barrier) -> str | None:
        return None if barrier.transaction in PROCESSOR_TRANSACTIONS else "only a processor holds a lease to lose"

    def inject(self, run, impl, barrier, injection):
        injection.open_xid = open_write_xid(run, barrier)
        impl.pause()
        try:
            run.advance(timedelta(seconds=run.scenario.lease_seconds + 1))
            second = run.start_implementation("takeover")
            counts = run.drain(second)
            injection.details["takeover_passes"] = counts
            second.stop()
            if barrier.position == "after-commit" and not run.concurrent and "schedule_id" in injection.context:
                # Between its transactions the paused processor holds no lock: from here on its lease is
                # another's, so whatever it does next for this schedule must be fenced (write nothing).
                schedule_id = injection.context["schedule_id"]
                run.late_probe = ({"schedule_id": schedule_id, "barrier": barrier.name},
                                  run.schedule_rows(schedule_id))
        finally:
            impl.resume()


FAULTS: dict[str, Fault] = {fault.name: fault for fault in (Kill(), Disconnect(), LostCommitReply(), DbCrash(), Pause())}
