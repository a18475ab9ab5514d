"""A certification run against adapters that break the protocol: each case ends with a clear `error`
verdict naming what went wrong, no process it started outlives it, and the run goes on to the next case."""

import sys
from pathlib import Path

import pytest

from testhost.impl.build_stage import BuildStageFailed
from testhost.runs.certify import certify
from testhost.runs.options import Options
from testhost.world.processes import group_members, is_alive

ADAPTERS = Path(__file__).parent / "adapters"
BROKEN = ADAPTERS / "broken.py"
WRAPPER = ADAPTERS / "wrapper.sh"


def command_for(started_as: str, mode: str) -> str:
    """As a script the adapter is spawned; as `python -m` it is forked from the fork server; through the wrapper
    a shell runs it as its child (no exec), so its process group holds two processes."""
    if started_as == "script":
        return f"{sys.executable} {BROKEN} {mode}"
    if started_as == "module":
        return f"{sys.executable} -m tests.adapters.broken {mode}"
    return f"sh {WRAPPER} tests.adapters.broken {mode}"


def survivors(report: dict) -> list[int]:
    """Live processes of any process group a case started (each start leads a group of its own)."""
    pids = [e["pid"] for c in report["cases"] for e in c["timeline"] if e["event"] == "start" and e.get("pid")]
    assert pids, "no start recorded"
    return [p for pid in pids for p in {*group_members(pid), *([pid] if is_alive(pid) else [])}]


# What the build stage says of a spawned adapter that never gets to its hello (testhost/impl/build_stage.py).
BEFORE_HELLO = {"crash-at-start": "build stage: .* did not start: the implementation exited with status 3 before its "
                                  "hello; its last stderr line: (broken: giving up at start|wrapper: the adapter "
                                  "exited with status 3)",
                "never-hello": "build stage: .* did not start: no line on standard output within 5 s of the first "
                               "start"}


@pytest.mark.parametrize("mode, reason", [
    ("crash-at-start", "the implementation exited with status 3 before its hello; its last stderr lines: "
                       "broken: giving up at start"),
    ("never-hello", "no hello within 5s from a live process"),
    ("no-process-due", "lacks the mandatory operation"),
    ("future-contract", "hello names contract 99; this crashproof certifies contract"),
    ("bad-json", "not a JSON line while waiting for the response to process-due"),
    ("hang", "no response to process-due within 2s from a live process"),
    ("unknown-message", "unexpected message type 'gossip'"),
    ("wrong-id", "does not match request"),
    ("hello-then-exit", "the implementation exited with status 3 while the host waited for the response to "
                        "process-due; its last stderr lines: broken: said hello, now exiting with status 3"),
])
@pytest.mark.parametrize("started_as", ["script", "module", "wrapper"])
def test_broken_adapter_gives_error_verdicts_and_leaves_no_process(mode, reason, started_as, tmp_path, monkeypatch):
    monkeypatch.setenv("CRASHPROOF_OPERATION_TIMEOUT_S", "2")
    monkeypatch.setenv("CRASHPROOF_HELLO_TIMEOUT_S", "5")
    monkeypatch.setenv("CRASHPROOF_BUILD_TIMEOUT_S", "5")
    monkeypatch.setenv("PYTHON", sys.executable)
    lines = []
    if started_as != "module" and mode in BEFORE_HELLO:
        # A spawned command's first start is the build stage's, before any case: it ends the run with one line.
        with pytest.raises(BuildStageFailed, match=BEFORE_HELLO[mode]):
            certify(Options(command=command_for(started_as, mode), scenario="a[ft]*", report_dir=tmp_path,
                            progress=lines.append))
        assert not (tmp_path / "report.json").exists()
        return
    code, report = certify(Options(command=command_for(started_as, mode), scenario="a[ft]*",
                                   report_dir=tmp_path, progress=lines.append))
    assert report["implementation"]["launcher"] == ("fork-server" if started_as == "module" else "spawn")
    assert code == 1
    cases = report["cases"]
    assert [c["scenario"] for c in cases] == ["after-single", "at-single"]
    assert all(c["verdict"] == "error" and c["cause"] == "implementation" for c in cases), cases
    assert all(reason in c["reason"] for c in cases), [c["reason"] for c in cases]
    assert report["summary"]["error"] == 2 and (tmp_path / "report.json").exists()
    assert survivors(report) == []
    for case in cases:  # each case names its own log, under the report folder
        assert case["logs"] == {"A": f"logs/{case['id']}/A.stderr"}
        assert (tmp_path / case["logs"]["A"]).is_file()


@pytest.mark.parametrize("started_as", ["script", "wrapper"])
def test_an_exit_while_the_host_waits_is_noticed_at_once_not_after_the_timeout(started_as, tmp_path, monkeypatch):
    """With the protocol's own 60 s operation timeout: the case ends as soon as the process exits."""
    monkeypatch.delenv("CRASHPROOF_OPERATION_TIMEOUT_S", raising=False)
    monkeypatch.setenv("PYTHON", sys.executable)
    code, report = certify(Options(command=command_for(started_as, "hello-then-exit"), scenario="at-single",
                                   report_dir=tmp_path, progress=lambda line: None))
    case = report["cases"][0]
    assert code == 1 and case["verdict"] == "error" and "exited with status 3" in case["reason"]
    started = next(e["t"] for e in case["timeline"] if e["event"] == "start")
    assert case["duration_s"] - started < 3.0, case["duration_s"]  # the protocol timeout is 60 s


def test_a_program_that_dies_at_every_start_ends_its_case_after_bounded_starts(tmp_path, monkeypatch):
    """It exits at once every time: the faulted case's restart after the kill ends the case with the reason. (Forked:
    a spawned command that dies at its first start ends the run in the build stage, before any case.)"""
    monkeypatch.setenv("PYTHON", sys.executable)
    code, report = certify(Options(command=command_for("module", "crash-at-start"), scenario="at-single",
                                   report_dir=tmp_path, progress=lambda line: None))
    assert code == 1
    (case,) = report["cases"]
    assert case["verdict"] == "error" and case["duration_s"] < 10
    assert "exited with status 3 before its hello" in case["reason"]
    assert len([e for e in case["timeline"] if e["event"] == "start"]) == 1
    assert survivors(report) == []
