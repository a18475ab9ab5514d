"""The build stage: a spawned implementation's command is started once before any case, so a launcher that builds
on its first start (`cargo build`, `go build`, `npm ci && tsc`) builds there, under a timeout of its own, and the
hello timeout of every case measures a start that has nothing left to build.

The stage runs in a worker, beside a store of its own with the scope, so the command sees the environment a case
gives it (a program that connects before its hello connects). It waits for the first line on standard output:
any line means the program runs, and what it says is the cases' to judge. The process then gets `shutdown` and its
group is killed like a case's. A command the fork server starts (`PYTHON -m MODULE`) has nothing to build and has
no stage.
"""

from __future__ import annotations

import shlex
import time
from pathlib import Path

from testhost.errors import TestHostError

from . import forkserver
from .adapter_env import adapter_environment
from .implementation import TIMEOUT, AdapterProtocolError, Implementation, ImplementationDied, NoMessage, stderr_tail

STAGE = "build stage"
LOG_FOLDER = "build-stage"  # its standard error: REPORT_DIR/logs/build-stage/A.stderr
SCOPE = "tenant-a"
DEADLINE_S = 2.0


class BuildStageFailed(TestHostError):
    """The first start of the implementation ended, or said nothing, within the build stage's timeout."""

    exit_code = 1  # the implementation's failure (docs/crash-matrix.md, exit codes), not a usage error


def needed(command: str, launcher: str = "fork-server") -> bool:
    """Whether the command gets a build stage: every command that is spawned under the run's `--launcher` (the
    fork server's have none)."""
    return launcher == "spawn" or forkserver.module_command(shlex.split(command)) is None


def _last_line(log: Path) -> str:
    tail = stderr_tail(log, lines=1)
    return f"its last stderr line: {tail[0]}" if tail else "it wrote nothing to stderr"


def run_build_stage(world, command: str, log_dir: Path, cwd: str | None = None,
                    migrations: Path | None = None) -> dict:
    """Start the command once and wait for its first line within the build timeout; shut it down. Returns
    `{"seconds": S, "log": PATH}`, and `"error": LINE` when it ended or said nothing first."""
    from barriers.schema import DISPATCHER, RUNTIME
    from testhost.world.store import new_store

    log = log_dir / LOG_FOLDER / "A.stderr"
    store = new_store(world, migrations=migrations)
    started = time.monotonic()
    impl = None
    error = None
    try:
        store.create_scope(SCOPE)
        env = adapter_environment(store.dsn(RUNTIME), store.dsn(DISPATCHER), SCOPE, DEADLINE_S)
        impl = Implementation(command, env, lambda _impl, _name, _context: None, log, label="build", cwd=cwd)
        try:
            impl.start(hello_timeout=TIMEOUT["build"])
        except ImplementationDied as exc:
            error = str(exc).split("; its last stderr lines")[0]
        except NoMessage:
            error = (f"no line on standard output within {TIMEOUT['build']:g} s of the first start (the build "
                     f"timeout)")
        except AdapterProtocolError:
            pass  # it runs and spoke: the cases judge what it said
        if error is not None:
            error = f"{error}; {_last_line(log)} (log: {log})"
    finally:
        if impl is not None:
            impl.stop()
        store.drop()
    return {"seconds": round(time.monotonic() - started, 2), "log": str(log),
            **({"error": error} if error is not None else {})}


def require_built(result: dict, command: str) -> None:
    """A stage that failed ends the run with one line naming the stage."""
    if "error" in result:
        raise BuildStageFailed(f"{STAGE}: {shlex.split(command)[0]} did not start: {result['error']}")
