"""`crashproof explore`: generated timelines with drawn faults against any implementation, one world per job;
the first failure of each job is shrunk and written as a scenario file that certify replays."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import queue as queues
import random
import shlex
import shutil
import sys
import threading
import time
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from reports import counted, report as reports
from reports.render import remove_outputs, render

from testhost.impl.reference_command import REFERENCE_COMMAND
from testhost.errors import TestHostError
from testhost.impl import provenance

from . import workers
from .explore_profiles import PROFILES, Profile
from .explore_search import Search, Stats
from .hostile_phase import TARGETS, targets_text
from .options import SCHEMA_STAGE_ID, Options as CertifyOptions, preflight
from .pool import Pool, RunStopped, StopSignals, executors, spawn_context
from .run_report import SUITE
from .stages import build_stage

from scenarios.generate import scenario_toml


@dataclass
class Options:
    command: str = REFERENCE_COMMAND
    profile: str = "ci"
    seed: int | None = None
    max_examples: int | None = None
    duration_s: float | None = None
    jobs: int = 1
    out: Path = Path("explore-found")
    report_dir: Path = Path("explore-report")
    migrations: Path | None = None
    dsn: str | None = None
    docker: bool = False
    launcher: str = "fork-server"
    hostile: int | None = None  # hostile calls in all (None: the profile's; 0: no hostile phase)
    progress: Callable[[str], None] = field(default=lambda line: print(line, file=sys.stderr, flush=True))


# What explore renders beside report.json: no certificate (explore certifies nothing; certify does).
RENDERINGS = ["html", "md", "junit"]


def _job(job: dict, updates) -> dict:
    """One search in this worker's world (testhost/runs/workers.py started it)."""
    profile = PROFILES[job["profile"]]
    profile = dataclasses.replace(profile, **job["overrides"])
    migrations = Path(job["migrations"]) if job["migrations"] else None
    hostile = _hostile_phase(job, profile, migrations, updates)
    deadline = time.monotonic() + job["duration_s"] if job["duration_s"] else None
    search = Search(workers.world(), job["command"], profile, Path(job["log_dir"]),
                    report=lambda stats: updates.put((job["index"], stats.to_json())),
                    migrations=Path(job["migrations"]) if job["migrations"] else None, deadline=deadline)
    search.stats.hostile, search.stats.hostile_failures = hostile["inputs"], hostile["failures"]
    search.stats.hostile_to = dict(hostile["to"])
    if hostile["failure"] is None:
        search.run(job["seed"], job["max_examples"], edges=job["index"] == 0)
    # Every case keeps its timeline, passing ones too: `crashproof report show` and report.html draw it.
    return {"stats": search.stats.to_json(), "failure": search.failure, "blob": search.blob, "cases": search.cases,
            "seed": job["seed"], "index": job["index"], "hostile": hostile,
            "identity": search.identity or hostile["identity"]}


def _hostile_phase(job: dict, profile: Profile, migrations: Path | None, updates) -> dict:
    """This job's share of hostile calls, in a store and a start of the implementation of their own."""
    from .hostile_phase import HostileRun, HostileSearch

    stats = Stats()
    search = HostileSearch(HostileRun(workers.world(), job["command"], Path(job["log_dir"]), migrations),
                           profile.hostile_shrink_s, share=(job["index"], job["jobs"]) if job["sweep"] else None)

    def report(hostile) -> None:
        stats.hostile, stats.hostile_failures, stats.hostile_to = hostile.inputs, hostile.failures, dict(hostile.to)
        updates.put((job["index"], stats.to_json()))

    search.report = report
    if job["hostile"] > 0 or job["sweep"]:
        search.run(job["seed"], job["hostile"])
    stores, identity = _hostile_stores(job)
    return {"inputs": search.stats.inputs, "by_op": search.stats.by_op, "to": search.stats.to,
            "failures": search.stats.failures, "identity": search.run_.identity or identity,
            "shrinks": search.stats.shrinks, "seconds": search.stats.seconds, "failure": search.failure,
            "check": search.result().to_json() if job["hostile"] > 0 or job["sweep"] else None,
            "stores": stores}


def _hostile_stores(job: dict) -> tuple[list[dict], str]:
    """The hostile stores, once per run (the first job, with the sweep): every schedule operation the implementation
    declares, against a store migrated only to 0003, as certify's schema-version stage sends them; and, when the
    implementation ships its own migrations, certify's schema stage on them (its claim and scope probes among its
    rules). With them, the implementation's identity as the schema-version stage's hello said."""
    if job["index"] != 0 or not job["sweep"]:
        return [], ""
    from .schema_version import run_with_hello

    stage, hello = run_with_hello(workers.world(), job["command"], Path(job["log_dir"]))
    stores = [stage]
    if job["migrations"]:
        from .schema_stage import run_schema_stage
        from testhost.world.store import MigrationFailed
        try:
            stores.append(run_schema_stage(workers.world(), Path(job["migrations"])))
        except MigrationFailed:
            pass  # every program's store fails the same way, and says so
    return stores, hello.get("implementation", "")


def replay_line(code: dict, *words: str) -> str:
    """The command that replays a find as it was found: in the working directory the implementation ran in (where
    a relative --impl, `python -m`'s module and the find's own paths resolve as they did)."""
    return f"cd {shlex.quote(code['cwd'])} && {shlex.join(words)}"


def store_finding(case: dict, out: Path, options: Options, code: dict | None = None) -> dict | None:
    """A hostile store the implementation did not refuse as it must, written beside the other finds (None when
    it was refused), with which code ran (`code`, resolved here when not given)."""
    if case is None or case["verdict"] == "pass":
        return None
    code = code or provenance.resolve(options.command)
    failed = [c for c in case["checks"] if not c["ok"]]
    check = failed[0] if failed else {"name": case["id"], "rule": case["reason"], "evidence": []}
    if case["id"] == SCHEMA_STAGE_ID:  # certify runs the stage before the cases it selects: here, one
        replay = replay_line(code, "crashproof", "certify", "--migrations", str(options.migrations), "--scenario",
                             "schema-version", "--impl", options.command)
        op, field, why = "schema", "migrations", f"the schema of --migrations {options.migrations}"
    else:
        replay = replay_line(code, "crashproof", "certify", "--scenario", case["id"], "--impl", options.command)
        op, field, why = "process-due", "store", "a store migrated only to 0003 (no migration 0004)"
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"hostile-store-{case['id']}.json"
    path.write_text(json.dumps({"case": case, "replay": replay, "impl": options.command, "code": code},
                               indent=1) + "\n")
    return {"op": op, "field": field, "why": why, "check": check["name"], "rule": check["rule"], "file": str(path),
            "replay": replay, "wrong": [_wrong_answer(e) for e in check.get("evidence", [])] or [case["reason"]]}


def _wrong_answer(evidence: dict) -> str:
    """One line of the stage's evidence: an answer by its outcome and retriable flag, anything else as JSON."""
    if "op" in evidence and "outcome" in evidence:
        error = evidence.get("error") or {}
        return (f"{evidence['op']} answered {evidence['outcome']}, retriable: {error.get('retriable')}, "
                f"{str(error.get('message') or '')[:80]!r}")
    return json.dumps(evidence, default=str)[:300]


def total(stats: list[dict]) -> dict:
    """The jobs' stats summed."""
    summed = Stats().to_json()
    for one in stats:
        for key, value in one.items():
            if isinstance(value, dict) and isinstance(summed.get(key), dict):  # per fault fired, per hostile target
                for name, count in value.items():
                    summed[key][name] = summed[key].get(name, 0) + count
            elif isinstance(value, int) and key in summed and key not in ("steps_to_failure", "examples_to_failure"):
                summed[key] += value
    return summed


def programs_text(stats: dict) -> str:
    """`446 programs drawn (400 judged, 46 set aside)`: the judged ones are what --max-examples and a profile's
    budget count; a program set aside asked for a moment its own timeline does not have (docs/explore.md)."""
    judged = stats.get("judged", stats["examples"])
    return f"{counted(stats['examples'], 'program')} drawn ({judged} judged, {stats['examples'] - judged} set aside)"


def hostile_text(stats: dict) -> str:
    """`999 hostile calls (to the implementation 0, the harness's fallback client 849, the claim function 150;
    0 not refused)`."""
    return (f"{counted(stats['hostile'], 'hostile call')} ({targets_text(stats.get('hostile_to') or {})}; "
            f"{stats.get('hostile_failures', 0)} not refused)")


def progress_line(stats: dict, elapsed: float) -> str:
    fired = ", ".join(f"{fault} {n}" for fault, n in sorted(stats["fired"].items())) or "none"
    hostile = f", {hostile_text(stats)}" if "hostile" in stats else ""
    edges = f"{counted(stats['edge_programs'], 'edge program')}, " if stats.get("edge_programs") else ""
    return (f"explore: {edges}{programs_text(stats)}, {counted(stats['steps'], 'step')}, {stats['faulted']} faulted "
            f"(fired: {fired}), {counted(stats['failures'], 'failure')}{hostile}, {int(elapsed)}s")


def _budget(options: Options, profile: Profile) -> tuple[int, float | None]:
    """Programs per job and the duration: --max-examples and --duration override the profile's."""
    duration = options.duration_s if options.duration_s is not None else (
        None if options.max_examples is not None else profile.duration_s)
    examples = options.max_examples or profile.max_examples
    if examples is None:
        examples = 10 ** 9  # the duration ends it
    return max(1, -(-examples // options.jobs)), duration


def hostile_share(options: Options, profile: Profile, index: int) -> int:
    """Job `index`'s part of the hostile calls (--hostile, else the profile's), split as evenly as they go."""
    total_calls = profile.hostile_examples if options.hostile is None else options.hostile
    return total_calls // options.jobs + (1 if index < total_calls % options.jobs else 0)


def write_hostile(out: Path, failure: dict, seed: int, options: Options, code: dict | None = None) -> Path:
    """The call that was not refused, whole, with the exact request line, what came back and which code ran."""
    code = code or provenance.resolve(options.command)
    out.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(failure["request"].encode()).hexdigest()[:10]
    path = out / f"hostile-{failure['input']['op']}-{digest}.json"
    replay = replay_line(code, "crashproof", "explore", "--replay-hostile", str(path.absolute()), "--impl",
                         options.command)
    path.write_text(json.dumps({**failure, "seed": seed, "profile": options.profile, "impl": options.command,
                                "code": code, "replay": replay}, indent=1) + "\n")
    return path


def reproduced_line(replayed: dict | None) -> str:
    """How often the shrunk failure failed again when run afresh (explore_search.Search.replay)."""
    if not replayed:
        return "reproduced: not replayed"
    line = f"reproduced: {replayed['reproduced']} of {replayed['runs']} fresh runs"
    if replayed["reproduced"] < replayed["runs"]:
        line += (" (timing-dependent: fresh runs failed " + "; ".join(", ".join(d) or "nothing"
                                                                       for d in replayed["diagnoses"]) + ")")
    return line


def failing_run(case: dict) -> dict:
    """What the run that failed showed: its verdict, each failing check's evidence and its timeline. A find that
    did not reproduce afresh has no other record of why it failed once the report's folder is gone."""
    return {"id": case["id"], "verdict": case["verdict"], "reason": case.get("reason", ""),
            "checks": [c for c in case.get("checks", []) if not c.get("ok", True)],
            "timeline": case.get("timeline", [])}


def write_failure(out: Path, failure: dict, seed: int, options: Options, blob: str | None,
                  stats: dict, code: dict | None = None) -> tuple[Path, str]:
    """The shrunk program as a scenario file (its case id, which code ran and the replay in comments) and as the
    program that drew it."""
    code = code or provenance.resolve(options.command)
    case = failure["case"]
    failed = ", ".join(f"{c['name']} ({c['rule']})" for c in failure["checks"]) or case["reason"]
    replay = replay_line(code, "crashproof", "certify", "--catalog", str(out.absolute()), "--case", case["id"],
                         "--impl", options.command)
    text = scenario_toml(failure["steps"], f"Found by crashproof explore: {', '.join(c['name'] for c in failure['checks']) or case['verdict']}.",
                         (f"case = {case['id']}", f"found by: crashproof explore --profile {options.profile} "
                          f"--seed {seed} --impl {shlex.quote(options.command)}", f"failed: {failed}",
                          f"replay: {replay}", reproduced_line(failure.get("replayed")),
                          provenance.code_comment(options.command, code)),
                         failure.get("header"))
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{failure['name']}.toml"
    path.write_text(text)
    program = {"case": case["id"], "scenario": failure["name"], "seed": seed, "profile": options.profile,
               "impl": options.command, "code": code, "steps": failure["steps"], "header": failure.get("header") or {}, "plan": {k: case[k] for k in ("barrier", "fault",
                                                                                                  "hit")},
               "failed_checks": failure["checks"], "failing_run": failing_run(case), "hypothesis": blob,
               "replayed": failure.get("replayed"),
               "steps_to_failure": stats.get("steps_to_failure"), "examples_to_failure": stats.get("examples_to_failure")}
    (out / f"{failure['name']}.program.json").write_text(json.dumps(program, indent=1) + "\n")
    return path, replay


def _profile(options: Options) -> Profile:
    """The profile --profile names, once --jobs and --max-examples are checked."""
    if options.profile not in PROFILES:
        raise TestHostError(f"no profile named {options.profile!r}; choose from {', '.join(PROFILES)}")
    if options.jobs < 1:
        raise TestHostError(f"--jobs must be at least 1, not {options.jobs}")
    if options.max_examples is not None and options.max_examples < 1:
        raise TestHostError("--max-examples must be at least 1")
    return PROFILES[options.profile]


def _watch(updates, options: Options, profile: Profile, started: float) -> tuple[threading.Event, threading.Thread]:
    """A thread that reads the jobs' stats as they report them and prints their sum every profile.progress_s, until
    the event is set."""
    latest: dict[int, dict] = {}
    stop = threading.Event()

    def watch() -> None:
        last = time.monotonic()
        while not stop.is_set():
            try:
                index, stats = updates.get(timeout=0.5)
                latest[index] = stats
            except queues.Empty:
                pass
            except (EOFError, OSError):
                return
            if time.monotonic() - last >= profile.progress_s:
                last = time.monotonic()
                options.progress(progress_line(total(list(latest.values())), last - started))

    watcher = threading.Thread(target=watch, daemon=True, name="explore-progress")
    watcher.start()
    return stop, watcher


def _search(options: Options, profile: Profile, jobs: list[dict], log_dir: Path, started: float) -> list[dict] | int:
    """Every job in a world of its own, after the build stage: their results, or the exit code of a search that did
    not end (a stop signal, or the harness failing)."""
    mode = {"dsn": options.dsn, "docker": options.docker, "launcher": options.launcher, "catalog": [],
            "with_builtin": False}
    context = spawn_context()
    manager = context.Manager()
    updates = manager.Queue()
    stop, watcher = _watch(updates, options, profile, started)
    stopped: RunStopped | None = None
    with StopSignals() as signals:
        pool = signals.pool = Pool(executors(options.jobs, mode, context), jobs=options.jobs)
        signals.armed = True
        try:
            # A spawned command's first start, before any program runs (a launcher that builds on it builds there).
            build_stage(CertifyOptions(command=options.command, launcher=options.launcher,
                                       migrations=options.migrations, progress=options.progress), pool, log_dir)
            futures = [pool.submit(_job, job, updates) for job in jobs]
            results = [future.result() for future in futures]
            signals.armed = False
            pool.close()
        except RunStopped as stop_signal:
            # Every worker kills its implementations and its world, as certify's do; nothing is written.
            signals.armed = False
            stopped = stop_signal
            pool.abort()
        except TestHostError:  # a one-line error of its own (a build stage that failed): not the harness's
            signals.armed = False
            pool.abort()
            raise
        except Exception as exc:  # noqa: BLE001 - a worker that died or a search that broke: the harness failed
            signals.armed = False
            pool.abort()
            failure = "a worker process died" if isinstance(exc, BrokenProcessPool) else f"{type(exc).__name__}: {exc}"
            print(f"crashproof: error: the harness failed: {failure}", file=sys.stderr)
            return 3
        finally:
            signals.armed = False
            stop.set()
            watcher.join()
            manager.shutdown()
    if stopped is not None:
        print(f"explore: interrupted ({stopped}); worlds torn down, nothing written", file=sys.stderr)
        return 128 + (stopped.signum or 0)
    return results


def _found(options: Options, results: list[dict], code: dict) -> list[dict]:
    """Each job's shrunk failure, written as a scenario file (and the program that drew it)."""
    found = []
    for result in results:
        if result["failure"] is not None:
            path, replay = write_failure(options.out, result["failure"], result["seed"], options, result["blob"],
                                         result["stats"], code)
            found.append({"case": result["failure"]["case"]["id"], "file": str(path), "replay": replay,
                          "checks": result["failure"]["checks"], "steps": len(result["failure"]["steps"]),
                          "replayed": result["failure"].get("replayed"),
                          "steps_to_failure": result["stats"]["steps_to_failure"],
                          "examples_to_failure": result["stats"]["examples_to_failure"]})
    return found


def _hostile_found(options: Options, results: list[dict], code: dict) -> tuple[dict, list[dict]]:
    """The hostile phase over every job: its counts and finds (each call not refused, each store not refused, every
    one written beside the other finds), and the hostile stores' cases."""
    found = []
    for result in results:
        failure = result["hostile"]["failure"]
        if failure is not None:
            path = write_hostile(options.out, failure, result["seed"], options, code)
            found.append({"op": failure["input"]["op"], "field": failure["input"]["field"],
                          "why": failure["input"]["why"], "check": failure["check"], "rule": failure["rule"],
                          "wrong": failure["wrong"], "file": str(path)})
    stores = [case for r in results for case in r["hostile"]["stores"]]
    found += [f for f in (store_finding(case, options.out, options, code) for case in stores) if f is not None]
    hostile = {"inputs": sum(r["hostile"]["inputs"] for r in results),
               "failures": sum(r["hostile"]["failures"] for r in results),
               "shrinks": sum(r["hostile"]["shrinks"] for r in results),
               "seconds": max((r["hostile"]["seconds"] for r in results), default=0.0),
               "by_op": {op: sum(r["hostile"]["by_op"].get(op, 0) for r in results)
                         for op in sorted({op for r in results for op in r["hostile"]["by_op"]})},
               "to": {target: sum(r["hostile"]["to"].get(target, 0) for r in results) for target in TARGETS},
               "stores": [{"case": case["id"], "verdict": case["verdict"]} for case in stores],
               "found": found}
    return hostile, stores


def _build_report(options: Options, profile: Profile, seed: int, results: list[dict], stats: dict, found: list[dict],
                  hostile: dict, stores: list[dict], code: dict, started_at: str, elapsed: float,
                  report_dir: Path, log_dir: Path) -> dict:
    """The report: every case the searches ran, each once (logs relative to the report's folder), and the run
    record with the stats, their rates and the finds."""
    cases = [case for r in results for case in r["cases"]] + stores
    for case in cases:
        case["logs"] = {label: os.path.relpath(path, report_dir) for label, path in case.get("logs", {}).items()}
    seen: set[str] = set()
    unique = []
    for case in cases:  # two jobs may draw the same program
        if case["id"] not in seen:
            seen.add(case["id"])
            unique.append(case)
    rate = {"examples_per_s": round(stats["examples"] / elapsed, 2), "steps_per_s": round(stats["steps"] / elapsed, 2),
            "faulted_per_s": round(stats["faulted"] / elapsed, 2)}
    # The report's cases, as its summary counts them, from every case the searches ran: less those set aside (they
    # judged nothing) and those two jobs both ran (one program drawn by both), plus the hostile stores' cases.
    counts = {"cases_run": stats["cases"], "cases_set_aside": stats["cases_set_aside"],
              "cases_run_twice": len(cases) - len(unique), "store_cases": len(stores),
              "cases": len(unique)}
    run = {"started_at": started_at, "duration_s": round(elapsed, 2), "seed": seed,
           "selection": {"explore": profile.name, "cases": [], "catalog": ["generated"]},
           "explore": {"profile": profile.name, "jobs": options.jobs, **stats, **counts, **rate, "found": found,
                       "hostile": hostile},
           "skipped": [], "problems": [], "logs": os.path.relpath(log_dir, report_dir)}
    identity = next((r["identity"] for r in results if r["identity"]), "")
    report = reports.build(suite_version=f"{SUITE}+explore", implementation={
        "command": options.command, "identity": identity, "code": code,
        "migrations": str(options.migrations) if options.migrations else None,
        "operations": sorted({op for c in unique for op in c.get("operations", [])})},
        environment={"jobs": options.jobs, "cpus": os.cpu_count()}, run=run, cases=sorted(unique, key=lambda c: c["id"]))
    report["partial"] = False
    report["interrupted"] = False
    return report


def _print_finds(report: dict, stats: dict, found: list[dict], hostile: dict, elapsed: float,
                 report_dir: Path) -> None:
    """Each find with its replay, which code ran, and the run in one line."""
    for item in found:
        print(f"found {item['case']} after {counted(item['steps_to_failure'], 'step')} "
              f"({counted(item['examples_to_failure'], 'program')} drawn), shrunk to {counted(item['steps'], 'step')}: "
              f"{item['file']}")
        for check in item["checks"]:
            print(f"  {check['name']} (rule: {check['rule']})")
        print(f"  replay: {item['replay']}")
        print(f"  {reproduced_line(item['replayed'])}")
    for item in hostile["found"]:
        print(f"found a hostile {item['op']} call not refused as it must be ({item['field']}: {item['why']}): "
              f"{'; '.join(item['wrong'])}\n  {item['check']} (rule: {item['rule']})\n  input and request: "
              f"{item['file']}" + (f"\n  replay: {item['replay']}" if "replay" in item else ""))
    print("\n".join(reports.which_code_text(report["implementation"])))
    run = report["run"]["explore"]  # the counts and rates of _build_report
    print(f"explore: {counted(stats['edge_programs'], 'edge program')}, {programs_text(stats)}, "
          f"{counted(stats['steps'], 'step')}, {stats['faulted']} faulted; {counted(run['cases'], 'case')} reported "
          f"({run['cases_run']} run, {run['cases_set_aside']} set aside, {run['cases_run_twice']} run by two "
          f"jobs, {run['store_cases']} hostile store) in {elapsed:.0f}s ({run['examples_per_s']} programs/s, "
          f"{run['steps_per_s']} steps/s, {run['faulted_per_s']} faulted/s); "
          f"{hostile_text({'hostile': hostile['inputs'], 'hostile_to': hostile['to'], 'hostile_failures': hostile['failures']})} "
          f"in {hostile['seconds']:.0f}s; {counted(len(found) + len(hostile['found']), 'failure')}; "
          f"report: {report_dir / 'report.html'}")


def explore(options: Options) -> tuple[int, dict]:
    """Run the searches, write what they found, and the report; exit 0 when nothing failed."""
    profile = _profile(options)
    seed = options.seed if options.seed is not None else (random.randrange(1 << 31) if profile.random_seed else 0)
    per_job, duration = _budget(options, profile)
    preflight(CertifyOptions(command=options.command, report_dir=options.report_dir))
    remove_outputs(options.report_dir)  # an earlier run's report (or a certify run's certificate) in this folder
    code = provenance.resolve(options.command)  # which code runs, once: the report and every find record it
    report_dir = options.report_dir.absolute()
    log_dir = report_dir / "logs"
    shutil.rmtree(log_dir, ignore_errors=True)
    log_dir.mkdir(parents=True)
    started, started_at = time.monotonic(), datetime.now(timezone.utc).isoformat()
    options.progress(f"explore: profile {profile.name}, seed {seed}, {counted(options.jobs, 'job')}, "
                     + (f"{int(duration)}s" if duration else f"{counted(per_job * options.jobs, 'program')} to judge"))
    jobs = [{"index": i, "profile": profile.name, "overrides": {}, "seed": seed + i, "max_examples": per_job,
             "duration_s": duration, "command": options.command, "log_dir": str(log_dir),
             "migrations": str(options.migrations) if options.migrations else None,
             "hostile": hostile_share(options, profile, i), "jobs": options.jobs,
             "sweep": profile.hostile_sweep and options.hostile != 0} for i in range(options.jobs)]
    results = _search(options, profile, jobs, log_dir, started)
    if isinstance(results, int):
        return results, {}
    elapsed = time.monotonic() - started
    stats = total([r["stats"] for r in results])
    options.progress(progress_line(stats, elapsed))
    found = _found(options, results, code)
    hostile, stores = _hostile_found(options, results, code)
    report = _build_report(options, profile, seed, results, stats, found, hostile, stores, code, started_at, elapsed,
                           report_dir, log_dir)
    reports.write(report, report_dir)
    render(report_dir, RENDERINGS)
    _print_finds(report, stats, found, hostile, elapsed, report_dir)
    return (1 if found or hostile["found"] else 0), report
