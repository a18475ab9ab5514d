"""The worker processes of a run: each starts one world, runs the cases and stages it is handed, and tears its world
down on a stop signal. The controller hands these functions over by name (case_worker picks one for it); they run in
the worker, on its world."""

from __future__ import annotations

import atexit
import os
import signal
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Callable

from scenarios.matrix import CasePlan
from scenarios.scenario import Scenario, load_catalog

from testhost.impl import implementation
from testhost.impl.implementation import set_launcher

from .options import SCHEMA_STAGE_ID, SCHEMA_VERSION_ID

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

_world = None
_scenarios: dict[str, Scenario] = {}


def _abort(signum: int, _frame) -> None:
    """A stop signal (from the controller, or from a terminal to the whole group): kill every implementation
    process group and the world's servers, remove the world's folder, and exit without finishing the case."""
    for number in STOP_SIGNALS:
        signal.signal(number, signal.SIG_IGN)
    try:
        implementation.kill_all()
        if _world is not None:
            _world.kill()
    finally:
        os._exit(128 + signum)


def take_stop_signals(handler: Callable[[int, object], None]) -> None:
    """The stop signals handed to `handler`, then unblocked: a worker is spawned with SIGINT blocked
    (pool.QuietSpawnProcess), and one that came while it started runs the handler now."""
    for number in STOP_SIGNALS:
        signal.signal(number, handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def start(mode: dict) -> None:
    """A worker's initializer: its world (a local one, --dsn's or Docker's) up, and the catalog its cases name."""
    global _world, _scenarios
    take_stop_signals(_abort)
    # The case's modules (psycopg, Toxiproxy's client) load here, in the worker: the controller that names these
    # functions imports this module and never runs a case.
    from testhost.case.runner import CASE_SEED
    from testhost.world.docker_world import docker_world
    from testhost.world.worlds import ExternalWorld, World
    set_launcher(mode.get("launcher", "fork-server"))
    if mode.get("dsn"):
        _world = ExternalWorld(mode["dsn"], network_optional=True)
    elif mode.get("docker"):
        _world = docker_world(network_optional=True)
    else:
        _world = World("certify", network_optional=True, seed=CASE_SEED)
    _world.up()
    atexit.register(_world.down)
    _scenarios = {s.name: s for s in load_catalog(mode.get("catalog", []), mode.get("with_builtin", False))}


def world():
    """This worker's world (None before start)."""
    return _world


def run_plan(plan: CasePlan, command: str, log_dir: str, baseline: dict | None,
             migrations: str | None = None, clock_offset_s: int | None = None,
             instance_commands: bool = True, impl_cwd: str | None = None) -> dict:
    """One case (or the stage a plan names) in this worker's world: its case, its baseline, the implementation."""
    if plan.scenario == SCHEMA_VERSION_ID:
        from .schema_version import run_with_hello
        case, hello = run_with_hello(_world, command, Path(log_dir))
        return {"case": case, "baseline": None, "implementation": hello.get("implementation", "")}
    if plan.scenario == SCHEMA_STAGE_ID:
        return {"case": schema_stage(migrations), "baseline": None, "implementation": ""}
    from testhost.case.runner import run_case
    outcome = run_case(_world, _scenarios[plan.scenario], plan, command, Path(log_dir), baseline,
                       Path(migrations) if migrations else None,
                       timedelta(seconds=clock_offset_s) if clock_offset_s is not None else None, instance_commands,
                       impl_cwd)
    return {"case": outcome.to_json(), "baseline": outcome.baseline, "implementation": outcome.implementation}


def build_stage(command: str, log_dir: str, cwd: str | None, migrations: str | None) -> dict:
    from testhost.impl.build_stage import run_build_stage
    return run_build_stage(_world, command, Path(log_dir), cwd, Path(migrations) if migrations else None)


def schema_stage(migrations: str | None) -> dict:
    from .schema_stage import run_schema_stage
    return run_schema_stage(_world, Path(migrations) if migrations else None)


def environment() -> dict:
    return {**_world.components(), "capabilities_missing": dict(_world.capabilities.missing)}


def case_worker(options):
    """The worker running one case, on the implementation's own schema when it ships one, with the OS clock skew
    of --impl-clock-offset; the reference's census beside another --impl runs no instance's own command, and starts
    the reference beside the harness's own package."""
    if (options.migrations is None and options.impl_clock_offset is None and options.instance_commands
            and options.impl_cwd is None):
        return run_plan
    offset = options.impl_clock_offset
    return partial(run_plan, migrations=str(options.migrations) if options.migrations else None,
                   clock_offset_s=int(offset.total_seconds()) if offset is not None else None,
                   instance_commands=options.instance_commands, impl_cwd=options.impl_cwd)
