"""The regression guard: CPU per faulted case over a fixed sample of cases, normalised by a probe of this machine's
speed measured in the same run, against the committed baseline (`bench/baseline.json`, with the commit it was
measured at). More than 10 % above the baseline fails (`python -m bench guard`; `--record` measures a new baseline).

CPU, not wall time: it counts every process of the case (the TestHost, PostgreSQL and the backends it reaped, the
implementation and its fork server, Toxiproxy), so it does not depend on how many cases run side by side. Another
machine, or the same machine on a slower day, moves the probe with the cases, and the ratio of the two stays."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from .figures import Figure

BASELINE = Path(__file__).with_name("baseline.json")
LIMIT = 1.10  # the guard fails beyond 10 % more CPU per case than the baseline, machine speed removed
SAMPLE_STRIDE = 12  # the sample recorded with a new baseline: every 12th faulted case of the matrix, seed 0
ROUNDS = 2  # the sample is run this many times; the lower figure counts (a busy moment only ever adds CPU)
PROBE_EVERY = 8  # cases between two probes


# -- the machine's speed ------------------------------------------------------------------------------------------

def _python_work() -> None:
    """Interpreter work of the kind the TestHost does: building, encoding and comparing small records."""
    rows = [{"id": i, "state": "materialized", "at": f"2031-03-03T00:{i % 60:02d}:00Z", "n": [i, i * 2]}
            for i in range(6_000)]
    text = json.dumps(rows, sort_keys=True)
    assert sorted(json.loads(text), key=lambda r: r["at"])[0]["n"][0] >= 0


def _process_work(starts: int = 15) -> float:
    """Process starts and ends of the kind a case makes (backends, implementations): CPU of the children."""
    before = os.times()
    for _ in range(starts):
        subprocess.run(["true"], check=True)
    after = os.times()
    return (after.children_user - before.children_user) + (after.children_system - before.children_system)


def _server_work(world) -> float:
    """Server work of the kind a case makes: new sessions and small statements, in a database nothing else
    uses. CPU of the backends (from /proc) and of this process's client side."""
    import psycopg

    from .figures import backend_cpu
    spent = 0.0
    for _ in range(3):
        with psycopg.connect(world.admin_dsn(), autocommit=True) as conn:
            backend = conn.execute("select pg_backend_pid()").fetchone()[0]
            for i in range(60):
                conn.execute("select count(*), max(g) from generate_series(1, 300 + %s) g", (i,)).fetchone()
            spent += backend_cpu([backend])
    return spent


def probe(world=None) -> float:
    """CPU seconds of one fixed workload shaped like a case's (interpreter work, process starts and, with a world,
    server sessions and statements)."""
    started = time.thread_time()  # this thread's only: the store pool's thread may be resetting beside it
    _python_work()
    children = _process_work()
    server = _server_work(world) if world is not None else 0.0
    return time.thread_time() - started + children + server


# -- the sample ----------------------------------------------------------------------------------------------------

def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parent.parent)
    return done.stdout.strip() or "unknown"


def sample_cpu(case_ids: list[str] | None) -> tuple[tuple[float, float], list[str], list[str]]:
    """(CPU ms per faulted case, probe seconds beside it) over `case_ids` (None: choose the sample, every
    SAMPLE_STRIDE-th faulted case), the round with the lower ratio of ROUNDS; with the ids run and those no longer
    in the matrix."""
    from scenarios.matrix import expand
    from scenarios.scenario import load_catalog
    from testhost.faults.catalog import FAULTS
    from scenarios.matrix import CasePlan
    from testhost.case.runner import CASE_SEED, REFERENCE_COMMAND, run_case
    from testhost.world.worlds import World

    from . import case_cost

    case_cost.count_crashes()  # a crashed postmaster's CPU is counted before it goes
    cpu = case_cost.cpu
    catalog = {s.name: s for s in load_catalog()}
    log_dir = Path(tempfile.mkdtemp(prefix="bench-guard-"))
    with World("bench-guard", seed=CASE_SEED) as world:
        census, pictures = {}, {}
        wanted = None if case_ids is None else {case_id.split("/")[0] for case_id in case_ids}
        for name, scenario in catalog.items():
            if wanted is None or name in wanted:
                outcome = run_case(world, scenario, CasePlan(name), REFERENCE_COMMAND, log_dir)
                census[name], pictures[name] = outcome.hits, outcome.baseline
        plans, _ = expand([catalog[n] for n in census], census, FAULTS)
        faulted = {p.id: p for p in plans if p.fault is not None}
        if case_ids is None:
            case_ids = sorted(faulted)[::SAMPLE_STRIDE]
        chosen = [faulted[i] for i in case_ids if i in faulted]
        missing = [i for i in case_ids if i not in faulted]
        if not chosen:
            raise SystemExit("none of the baseline's cases is in the matrix any more: record a new baseline")
        # The probe runs between every PROBE_EVERY cases, so a machine that speeds up or slows down during the
        # sample (seen: a third either way within minutes) moves the probe with the cases it ran beside.
        figures = []
        for _ in range(ROUNDS):
            spent = probed = 0.0
            for index, plan in enumerate(chosen):
                if index % PROBE_EVERY == 0:
                    probed += probe(world)
                before = cpu(world)
                outcome = run_case(world, catalog[plan.scenario], plan, REFERENCE_COMMAND, log_dir,
                                   pictures[plan.scenario])
                if outcome.verdict != "pass":
                    raise SystemExit(f"the guard's case {plan.id} ended {outcome.verdict}: {outcome.reason}")
                time.sleep(0.05)  # the pool thread resets the store: the case's own cost
                after = cpu(world)
                spent += sum(after[k] - before[k] for k in before)
            probes = -(-len(chosen) // PROBE_EVERY)
            figures.append((spent / len(chosen) * 1000, probed / probes))
    return min(figures, key=lambda f: f[0] / f[1]), [p.id for p in chosen], missing


# -- the guard -----------------------------------------------------------------------------------------------------

def measure(case_ids: list[str] | None = None) -> dict:
    """One measurement: the sample's CPU per case and the probe measured beside it."""
    (cpu_ms, speed), ran, missing = sample_cpu(case_ids)
    return {"commit": _commit(), "measured_at": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
            "cpu_ms_per_case": round(cpu_ms, 1), "probe_s": round(speed, 4),
            "normalised": round(cpu_ms / speed, 1), "cases": ran, "missing": missing}


def verdict(now: dict, baseline: dict) -> tuple[float, bool]:
    """The ratio of normalised CPU per case, now against the baseline, and whether it is within LIMIT."""
    ratio = now["normalised"] / baseline["normalised"]
    return ratio, ratio <= LIMIT


def guard() -> list[Figure]:
    """The benchmark suite's figure: CPU per faulted case against the baseline, machine speed removed."""
    if not BASELINE.exists():
        raise SystemExit(f"no baseline at {BASELINE}: run `python -m bench.guard --record` and commit it")
    baseline = json.loads(BASELINE.read_text())
    now = measure(baseline["cases"])
    ratio, within = verdict(now, baseline)
    print(f"guard: {len(now['cases'])} case{'s' * (len(now['cases']) != 1)}, {now['cpu_ms_per_case']} ms CPU per case, probe {now['probe_s']} s "
          f"(baseline {baseline['commit']} of {baseline['measured_at']}: {baseline['cpu_ms_per_case']} ms, probe "
          f"{baseline['probe_s']} s); normalised ratio {ratio:.3f}: "
          f"{'ok' if within else 'FAIL, over 10 % (confirm against the baseline commit side by side, without the probe: python -m bench.paired ' + baseline['commit'] + ' HEAD)'}"
          + (f"; {len(now['missing'])} baseline cases no longer planned" if now["missing"] else ""), flush=True)
    return [Figure(f"CPU per faulted case / machine probe ({len(now['cases'])} case{'s' * (len(now['cases']) != 1)})", now["normalised"], "ms/s",
                   f"<= {LIMIT:.2f}x base", within, baseline["normalised"], f"baseline at {baseline['commit']}")]


BENCHMARKS = [guard]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.guard")
    parser.add_argument("--record", action="store_true",
                        help=f"measure a new baseline (a new sample of every {SAMPLE_STRIDE}th faulted case) and "
                             f"write {BASELINE.name}")
    options = parser.parse_args(argv)
    if options.record:
        now = measure()
        BASELINE.write_text(json.dumps({k: v for k, v in now.items() if k != "missing"}, indent=1) + "\n")
        print(f"baseline at {now['commit']}: {now['cpu_ms_per_case']} ms CPU per case over {len(now['cases'])} case{'s' * (len(now['cases']) != 1)},"
              f" probe {now['probe_s']} s, normalised {now['normalised']}")
        return 0
    figure = guard()[0]
    print(figure.line())
    return 0 if figure.met else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
