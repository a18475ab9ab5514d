"""A certification run against adapters that break the protocol: each case ends with a clear `error`
verdict naming what went wrong, and the run goes on to the next case."""

import sys
from pathlib import Path

import pytest

from testhost.certify import Options, certify

BROKEN = Path(__file__).parent / "adapters" / "broken.py"


@pytest.mark.parametrize("mode, reason", [
    ("crash-at-start", "exited before its hello"),
    ("no-process-due", "lacks the mandatory operation"),
    ("bad-json", "not a JSON line"),
    ("hang", "no the response to process-due within"),
    ("unknown-message", "unexpected message type 'gossip'"),
    ("wrong-id", "does not match request"),
])
@pytest.mark.parametrize("started_as", ["script", "module"])
def test_broken_adapter_gives_error_verdicts_and_the_run_goes_on(mode, reason, started_as, tmp_path, monkeypatch):
    """As a script the adapter is spawned; as `python -m` it is forked from the fork server: same verdicts."""
    monkeypatch.setenv("CRASHPROOF_OPERATION_TIMEOUT_S", "2")
    monkeypatch.setenv("CRASHPROOF_HELLO_TIMEOUT_S", "5")
    lines = []
    program = BROKEN if started_as == "script" else "-m tests.adapters.broken"
    code, report = certify(Options(command=f"{sys.executable} {program} {mode}", scenario="a[ft]*",
                                   report_dir=tmp_path, progress=lines.append))
    assert report["implementation"]["launcher"] == ("spawn" if started_as == "script" else "fork-server")
    assert {e["launcher"] for c in report["cases"] for e in c["timeline"] if e["event"] == "start"} <= {
        report["implementation"]["launcher"]}
    assert code == 1
    cases = report["cases"]
    assert [c["scenario"] for c in cases] == ["after-single", "at-single"]
    assert all(c["verdict"] == "error" for c in cases), [c["reason"] for c in cases]
    assert all(reason in c["reason"] for c in cases), [c["reason"] for c in cases]
    assert report["summary"]["error"] == 2 and (tmp_path / "report.json").exists()
