"""What a fault may touch of the case it is injected into: the attributes and methods of testhost/case/runner.py's
CaseRun that the faults here use, so that faults sit below the case and import nothing of it."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Callable, Protocol

from scenarios.scenario import Scenario

from testhost.impl.implementation import Implementation
if TYPE_CHECKING:
    from testhost.world.sessions import KeptSession
    from testhost.world.store import Store
    from testhost.world.worlds import World


class PlannedFault(Protocol):
    """The case's plan, as far as a fault reads it."""

    fault: str | None
    hit: int  # which hit of the barrier the fault fires at, counted from 1


class FactsReader(Protocol):
    """The case's reader of a schedule's committed facts at the barriers (testhost/case/barrier_facts.py)."""

    def read(self, run: "FaultedRun", schedule_id: str) -> dict:
        ...


class FaultedRun(Protocol):
    """One case while it runs, as a fault (testhost/faults/catalog.py), the planned cancel of a pass
    (cancel_pass.py) or the clock moved in a bridge (bridge_clock.py) touches it."""

    world: World
    store: Store
    scenario: Scenario
    plan: PlannedFault
    concurrent: bool  # two processors are running side by side
    injection: Any  # the fault injected in this case, once it fired (None before)
    on_recovery: list[Callable[[], Any]]  # what the recovery waits for first (a healer's thread)
    late_probe: tuple[dict, dict] | None  # a paused processor's schedule rows before it resumed
    # Threads a fault leaves running, joined when the case ends (a fault that leaves one sets it).
    fault_threads: list[threading.Thread]
    barrier_facts: FactsReader
    asking: dict[str, dict]  # per instance, the request in flight
    window: dict | None  # the `process-due` request's window in force, for the pass checks

    @property
    def owner(self) -> KeptSession:
        """The verifier's session: `with run.owner() as conn`."""

    def note(self, event: str, **details: Any) -> None:
        """An event on the case's timeline."""

    def advance(self, delta: timedelta) -> None:
        """Move the server clock forward."""

    def start_implementation(self, label: str) -> Implementation:
        """Start another copy of the implementation (a takeover processor)."""

    def drain(self, impl: Implementation) -> int:
        """Passes of `impl` until nothing is due; how many ran."""

    def wait_for_other_racers(self, label: str, timeout: float | None = None) -> list[str]:
        """Let every racing processor but `label` finish its pass; which were waited for."""

    def schedule_rows(self, schedule_id: str) -> dict:
        """The schedule's rows, read whole, for `late-writes-fenced`."""

    def dispatch_rows(self, schedule_id: str | None = None) -> list:
        """The schedule's committed dispatch rows (a plain read is not blocked by their locks)."""
