"""The run contract with outside implementations and CI: group kills through a wrapper, stop signals that tear
everything down and leave a partial report, --fail-fast, --case, --rerun-failed and --catalog."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from testhost.runs.certify import certify
from testhost.runs.options import Options
from testhost.runs.run_report import exit_code
from testhost.world.processes import is_alive

ROOT = Path(__file__).parent.parent
WRAPPER = Path(__file__).parent / "adapters" / "wrapper.sh"
WRAPPED_REFERENCE = f"sh {WRAPPER}"


def _mentions(pid: int, marker: str) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read().decode("utf-8", "replace").split("\0")
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return False
    return f"CRASHPROOF_HOME={marker}" in environ or marker in cmdline or marker in cwd


def survivors(home: Path) -> list[int]:
    """Live processes of the run that used this CRASHPROOF_HOME: its workers, servers and implementations (they
    inherit it in their environment or name it in their command line or working directory)."""
    return [int(e) for e in os.listdir("/proc") if e.isdigit() and int(e) != os.getpid()
            and _mentions(int(e), str(home)) and is_alive(int(e))]


@pytest.fixture(scope="module")
def home():
    root = Path(tempfile.mkdtemp(prefix="crashproof-contract-", dir="/tmp"))
    os.chmod(root, 0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _env(home: Path) -> dict:
    return {**os.environ, "CRASHPROOF_HOME": str(home), "PYTHON": sys.executable}


@pytest.mark.long
def test_a_wrapper_that_runs_the_reference_as_its_child_passes_every_kill_and_pause_case(tmp_path, monkeypatch):
    """The shell stays the group's leader, the adapter its child: kill and pause must reach both."""
    monkeypatch.setenv("PYTHON", sys.executable)
    code, report = certify(Options(command=WRAPPED_REFERENCE, scenario="at-single,two-processors-race",
                                   fault=["kill", "pause"], jobs=2, report_dir=tmp_path, progress=lambda line: None))
    faulted = [c for c in report["cases"] if c["fault"]]
    assert {c["fault"] for c in faulted} == {"kill", "pause"} and len(faulted) >= 10
    assert code == 0, [(c["id"], c["reason"]) for c in report["cases"] if c["verdict"] != "pass"]
    assert report["implementation"]["launcher"] == "spawn"
    stderr = (tmp_path / faulted[0]["logs"]["A"]).read_text()
    assert "wrapper: the adapter exited" in stderr  # the log is the wrapper's and its child's


def _start_run(home: Path, report_dir: Path, *extra: str) -> tuple[subprocess.Popen, list[str], threading.Thread]:
    """A certify run started as its own session, once its first faulted case is done; its standard error's lines
    gather in the list as the returned thread reads them."""
    process = subprocess.Popen(
        [sys.executable, "-m", "testhost.cli", "certify", "--impl", WRAPPED_REFERENCE, "--scenario", "at-single",
         "--fault", "kill,pause", "--jobs", "2", "--report-dir", str(report_dir), *extra],
        cwd=ROOT, env=_env(home), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    errors: list[str] = []
    errors_read = threading.Thread(target=lambda: errors.extend(process.stderr), daemon=True)
    errors_read.start()
    deadline = time.monotonic() + 180
    # two fault-free runs: the implementation's and the reference's (whose barriers it must reach too)
    while sum(line.startswith("fault-free") and "1/1" in line for line in errors) < 2:
        assert process.poll() is None and time.monotonic() < deadline, "".join(errors)
        time.sleep(0.1)
    while not any(line.startswith("faulted") for line in errors):  # the first faulted case is done: more run now
        assert process.poll() is None and time.monotonic() < deadline, "".join(errors)
        time.sleep(0.1)
    return process, errors, errors_read


def _finish(process: subprocess.Popen, errors_read: threading.Thread, timeout: float) -> str:
    """The run's standard output once it has exited, with its standard error read to the end by `errors_read`.
    Not communicate(): it would read standard error too, taking lines from that reader (so a check of its lines
    could miss them) and closing the pipe under it."""
    out: list[str] = []
    out_read = threading.Thread(target=lambda: out.extend(process.stdout), daemon=True)
    out_read.start()
    process.wait(timeout=timeout)
    for reader in (out_read, errors_read):
        reader.join(timeout=30)  # a process that kept the pipes open outlives the run: the checks of survivors say so
    return "".join(out)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name)
@pytest.mark.parametrize("to", ["process", "group"])
def test_a_stop_signal_tears_everything_down_and_writes_a_partial_report(sig, to, home, tmp_path):
    report_dir = tmp_path / "report"
    process, errors, errors_read = _start_run(home, report_dir)
    assert survivors(home), "the run has no processes to leave behind: the test would prove nothing"
    (os.killpg if to == "group" else os.kill)(process.pid, sig)
    out = _finish(process, errors_read, timeout=120)
    assert process.returncode == 128 + sig, out + "".join(errors)
    assert f"partial report: {report_dir / 'report.json'}" in out and out.startswith("interrupted after ")
    assert "Traceback" not in out + "".join(errors)
    report = json.loads((report_dir / "report.json").read_text())
    assert report["interrupted"] is True and report["partial"] is True
    assert report["run"]["stopped_by"] == sig.name
    done, total = out.split("interrupted after ")[1].split(" cases")[0].split(" of ")
    assert int(total) == report["summary"]["cases"] > int(done) >= 1
    not_run = [c for c in report["cases"] if c["verdict"] == "not-run"]
    assert len(not_run) == int(total) - int(done) and all("the run stopped" in c["reason"] for c in not_run)
    assert report["cases"][0]["id"] == "at-single" and report["cases"][0]["verdict"] == "pass"
    assert list((home / "worlds").iterdir()) == []
    assert survivors(home) == []


def test_a_second_signal_forces_the_exit_and_the_workers_still_clean_up(home, tmp_path):
    process, _, errors_read = _start_run(home, tmp_path / "report")
    process.send_signal(signal.SIGTERM)
    time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _finish(process, errors_read, timeout=60)
    assert process.returncode == 143
    deadline = time.monotonic() + 60
    while (survivors(home) or list((home / "worlds").iterdir())) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert survivors(home) == [] and list((home / "worlds").iterdir()) == []


def test_fail_fast_stops_at_the_first_failed_case_with_a_partial_report(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHON", sys.executable)
    lines = []
    code, report = certify(Options(command=f"sh {WRAPPER} tests.adapters.broken hello-then-exit",
                                   scenario="a[ft]*", jobs=1, fail_fast=True, report_dir=tmp_path,
                                   progress=lines.append))
    assert code == 1 and report["partial"] is True and report["interrupted"] is False
    verdicts = [c["verdict"] for c in report["cases"]]
    assert verdicts.count("error") == 1 and verdicts.count("not-run") == 1, verdicts
    assert report["run"]["stopped_by"].startswith("--fail-fast: ")


def test_case_runs_only_the_named_cases_and_names_one_not_in_the_matrix(tmp_path):
    code, report = certify(Options(cases=["at-single/schedule-link-after-commit/kill/1",
                                          "at-single/schedule-link-after-commit/kill/9"],
                                   report_dir=tmp_path, progress=lambda line: None))
    by_id = {c["id"]: c for c in report["cases"]}
    assert set(by_id) == {"at-single", "at-single/schedule-link-after-commit/kill/1",
                          "at-single/schedule-link-after-commit/kill/9"}
    assert by_id["at-single/schedule-link-after-commit/kill/1"]["verdict"] == "pass"
    assert by_id["at-single/schedule-link-after-commit/kill/9"]["verdict"] == "not-run"
    assert "not in this run's matrix" in by_id["at-single/schedule-link-after-commit/kill/9"]["reason"]
    assert code == 1
    # The default command, running the harness's own reference: its census stands for the reference's.
    assert report["implementation"]["code"]["module_origin"] == str(ROOT.resolve() / "reference" / "adapter.py")
    assert report["run"]["reference_census"]["separate"] is False
    assert not any(c["name"] == "barrier-coverage" for c in by_id["at-single"]["checks"])


def test_the_reference_command_running_a_copy_gets_the_references_own_census(tmp_path):
    """The default --impl started from another folder with a PYTHONPATH holding a copy of the reference runs the
    copy: the report says so (the copy's origin, the folder, the PYTHONPATH), and the reference's own census runs
    beside it, so a barrier the copy no longer reaches fails barrier-coverage instead of passing unnoticed."""
    from mutants import materialize
    from tests.test_provenance import UNREPORTED_LINK
    from testhost.case.runner import REFERENCE_COMMAND

    copy = materialize(UNREPORTED_LINK, tmp_path / "copies")
    elsewhere, report_dir = tmp_path / "elsewhere", tmp_path / "report"
    elsewhere.mkdir()
    done = subprocess.run([sys.executable, "-m", "testhost.cli", "certify", "--impl", REFERENCE_COMMAND, "--case",
                           "at-single", "--jobs", "1", "--report-dir", str(report_dir)], cwd=elsewhere,
                          env={**os.environ, "PYTHONPATH": str(copy)}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads((report_dir / "report.json").read_text())
    code = report["implementation"]["code"]
    origin = str(copy.resolve() / "reference" / "adapter.py")
    assert code["cwd"] == str(elsewhere.resolve()) and code["module_origin"] == origin
    assert code["environment"] == {"PYTHONPATH": str(copy)}
    census = report["run"]["reference_census"]
    assert census["separate"] is True and census["code"]["module_origin"] == str(ROOT.resolve() / "reference" /
                                                                                 "adapter.py")
    assert "--impl is the reference's command, running other code than the harness's reference" in done.stderr
    (case,) = report["cases"]
    coverage = [c for c in case["checks"] if c["name"] == "barrier-coverage"]
    assert coverage and coverage[0]["ok"] is False and case["verdict"] == "fail"
    assert coverage[0]["evidence"][0]["not_reached"] == ["schedule-link-after-commit"]
    # The terminal, report.md and the certificate show which code ran.
    assert f"\n  cwd          {elsewhere.resolve()}\n" in done.stdout and origin in done.stdout
    assert f"PYTHONPATH={copy}" in done.stdout
    markdown = (report_dir / "report.md").read_text()
    assert f"cwd `{elsewhere.resolve()}`" in markdown and origin in markdown
    assert json.loads((report_dir / "certificate.json").read_text())["implementation"]["code"] == code


def test_rerun_failed_runs_only_what_did_not_pass(home, tmp_path):
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / "report.json").write_text(json.dumps({"cases": [
        {"id": "after-single", "verdict": "pass"},
        {"id": "at-single/schedule-claim-after-commit/pause/1", "verdict": "fail"}]}))
    result = subprocess.run([sys.executable, "-m", "testhost.cli", "certify", "--rerun-failed", str(earlier),
                             "--report-dir", str(tmp_path / "again")], cwd=ROOT, env=_env(home),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((tmp_path / "again" / "report.json").read_text())
    assert [c["id"] for c in report["cases"]] == ["at-single", "at-single/schedule-claim-after-commit/pause/1"]
    (earlier / "report.json").write_text(json.dumps({"cases": [{"id": "after-single", "verdict": "pass"}]}))
    nothing = subprocess.run([sys.executable, "-m", "testhost.cli", "certify", "--rerun-failed", str(earlier)],
                             cwd=ROOT, env=_env(home), capture_output=True, text=True, timeout=60)
    assert nothing.returncode == 0 and "nothing to rerun" in nothing.stdout


def test_a_catalog_of_a_teams_own_replaces_or_joins_the_built_in_one(home, tmp_path):
    own = tmp_path / "ours"
    own.mkdir()
    shutil.copy(ROOT / "scenarios" / "catalog" / "at-single.toml", own / "team-at.toml")
    code, report = certify(Options(catalog=[own], barrier="schedule-link-after-commit", fault="kill",
                                   report_dir=tmp_path / "r", progress=lambda line: None))
    assert code == 0 and [c["scenario"] for c in report["cases"]] == ["team-at"] * 2
    builtin = subprocess.run([sys.executable, "-m", "testhost.cli", "--version"], cwd=ROOT, env=_env(home),
                             capture_output=True, text=True).stdout
    assert report["suite_version"].startswith("crashproof-barrier-suite-1+") and report["suite_version"] not in builtin
    listing = subprocess.run([sys.executable, "-m", "testhost.cli", "scenarios", "--catalog", str(own),
                              "--with-builtin"], cwd=ROOT, env=_env(home), capture_output=True, text=True)
    assert "team-at" in listing.stdout and "coalesce-terminal-callback" in listing.stdout


def test_exit_codes_tell_the_implementations_failure_from_the_harnesss():
    passed, failed = {"verdict": "pass"}, {"verdict": "fail"}
    harness = {"verdict": "error", "cause": "harness"}
    protocol = {"verdict": "error", "cause": "implementation"}
    assert exit_code([passed, passed], []) == 0
    assert exit_code([passed, failed], []) == 1
    assert exit_code([passed, protocol], []) == 1
    assert exit_code([passed, {"verdict": "not-run"}], []) == 1
    assert exit_code([passed], ["barrier X is never reached by any scenario"]) == 1
    assert exit_code([passed, harness], []) == 3
    assert exit_code([failed, harness], []) == 1  # a finding about the implementation outranks a harness error
    assert exit_code([], []) == 1


def test_rerun_failed_and_case_leave_the_schema_stage_out(tmp_path):
    from testhost.runs.options import SCHEMA_STAGE_ID, failed_case_ids, validate
    from testhost.runs.schema_stage import CASE_ID
    assert SCHEMA_STAGE_ID == CASE_ID
    earlier = tmp_path / "report.json"
    earlier.write_text(json.dumps({"cases": [
        {"id": "schema-stage", "verdict": "fail"}, {"id": "at-single", "verdict": "pass"},
        {"id": "at-single/schedule-link-after-commit/kill/1", "verdict": "fail"}]}))
    assert failed_case_ids(earlier) == ["at-single/schedule-link-after-commit/kill/1"]
    _, wanted = validate(Options(cases=["schema-stage", "at-single/schedule-link-after-commit/kill/1"]))
    assert [plan.id for plan in wanted] == ["at-single/schedule-link-after-commit/kill/1"]
    earlier.write_text(json.dumps({"cases": [{"id": "schema-stage", "verdict": "fail"},
                                             {"id": "at-single", "verdict": "pass"}]}))
    with pytest.raises(ValueError, match="only the schema stage did not pass"):
        failed_case_ids(earlier)
    with pytest.raises(ValueError, match="the schema stage is no case to select"):
        validate(Options(cases=["schema-stage"]))


def test_a_repeated_case_id_is_planned_as_that_repeat_of_its_case():
    from testhost.runs.options import parse_case_id
    from testhost.runs.stages import requested
    from scenarios.matrix import CasePlan
    planned = [CasePlan("at-single", "schedule-link-after-commit", "kill", 1)]
    wanted = [parse_case_id("at-single/schedule-link-after-commit/kill/1#3"),
              parse_case_id("at-single/schedule-link-after-commit/kill/1")]
    chosen, missing = requested(planned, wanted, {"at-single": {"schedule-link-after-commit": 1}})
    assert [plan.id for plan in chosen] == ["at-single/schedule-link-after-commit/kill/1#3",
                                            "at-single/schedule-link-after-commit/kill/1"]
    assert chosen[0].repeat == 3 and missing == []
    chosen, missing = requested(planned, [parse_case_id("at-single/schedule-link-after-commit/kill/2#2")], {})
    assert chosen == [] and [case["id"] for case in missing] == ["at-single/schedule-link-after-commit/kill/2#2"]
    # --repeat 3: the case named without #N runs three times; #3, named besides, still runs once.
    chosen, _ = requested(planned, wanted, {"at-single": {"schedule-link-after-commit": 1}}, repeat=3)
    assert [plan.id for plan in chosen] == ["at-single/schedule-link-after-commit/kill/1#3",
                                            "at-single/schedule-link-after-commit/kill/1",
                                            "at-single/schedule-link-after-commit/kill/1#2"]


def test_a_run_that_ends_early_leaves_no_report_of_an_earlier_run(tmp_path):
    stale = ["report.json", "report.html", "report.md", "junit.xml", "certificate.json", "certificate.json.sig"]
    for name in stale:
        (tmp_path / name).write_text("from an earlier run")
    (tmp_path / "notes.txt").write_text("not the harness's")
    with pytest.raises(Exception, match="no such directory"):
        certify(Options(report_dir=tmp_path, migrations=tmp_path / "nowhere", progress=lambda line: None))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def _worker_dies(*_args):
    os._exit(1)


def _worker_raises(*_args):
    raise RuntimeError("an unexpected fault in the harness")


@pytest.mark.parametrize("step, migrations", [("environment", False), ("schema_stage", True)])
@pytest.mark.parametrize("fault, said", [(_worker_dies, "the worker process died during"),
                                         (_worker_raises, "RuntimeError: an unexpected fault in the harness")])
def test_a_harness_step_that_breaks_is_one_line_exit_3_and_a_partial_report(step, migrations, fault, said, tmp_path,
                                                                            monkeypatch, capsys):
    from testhost.runs import workers as controller
    monkeypatch.setattr(controller, step, fault)  # spawned workers unpickle it from this module
    home = Path(tempfile.mkdtemp(prefix="crashproof-harness-", dir="/tmp"))  # a worker that dies leaves its
    os.chmod(home, 0o755)                                                    # world's folder: not in a shared home
    monkeypatch.setenv("CRASHPROOF_HOME", str(home))
    report_dir = tmp_path / "report"
    try:
        code, report = certify(Options(scenario="at-single", barrier="schedule-link-after-commit", fault="kill",
                                       jobs=1, migrations=ROOT / "reference" / "migrations" if migrations else None,
                                       report_dir=report_dir, progress=lambda line: None))
    finally:
        shutil.rmtree(home, ignore_errors=True)
    error = [line for line in capsys.readouterr().err.splitlines() if line.startswith("crashproof: error:")]
    assert code == 3 and len(error) == 1 and said in error[0], error
    assert report["partial"] is True and report["interrupted"] is False
    assert [(c["id"], c["verdict"]) for c in report["cases"]] == [("at-single", "not-run")]
    assert json.loads((report_dir / "report.json").read_text())["run"]["stopped_by"].startswith("the harness failed")
