"""The Go example implementation (examples/go), an outside team's `process-due` in another language, certifies
on a slice that covers every processor barrier under every fault that applies to it, with nothing but
`process-due` declared. It keeps the harness honest toward implementations that are not the reference."""

import json
import subprocess
from pathlib import Path

import pytest

from barriers import CATALOG
from testhost.runs.certify import certify
from testhost.runs.options import Options
from testhost.faults.catalog import FAULTS

RUN = Path(__file__).resolve().parent.parent / "examples" / "go" / "run.sh"
SCENARIO = "at-single"  # one claim, one decision, one bridge: every processor barrier once


@pytest.fixture(scope="module")
def go_example():
    """The binary, built once before any case starts it (a case's hello timeout is no build budget)."""
    built = subprocess.run([str(RUN), "--build-only"], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, f"examples/go did not build:\n{built.stderr}"
    return str(RUN)


def test_the_go_example_declares_process_due_only_and_speaks_the_protocol(go_example, tmp_path):
    """Started by the host like any implementation: its hello is on standard output, its logs on standard error."""
    done = subprocess.run([go_example], input='{"type": "shutdown"}\n', capture_output=True, text=True, timeout=60,
                          env={"CRASHPROOF_RUNTIME_DSN": "host=127.0.0.1 port=1", "PATH": "/usr/bin:/bin",
                               "CRASHPROOF_DISPATCHER_DSN": "host=127.0.0.1 port=1"})
    assert done.returncode == 0, done.stderr
    hello = json.loads(done.stdout.splitlines()[0])
    assert hello["type"] == "hello" and hello["protocol"] == 1 and hello["operations"] == ["process-due"]
    assert hello["implementation"].startswith("crashproof-go-example")
    assert len(done.stdout.splitlines()) == 1, "nothing but protocol messages on standard output"


def test_the_go_example_certifies_every_processor_barrier_under_every_fault(go_example, tmp_path):
    code, report = certify(Options(command=go_example, scenario=SCENARIO, jobs=2, report_dir=tmp_path,
                                   progress=lambda line: None))
    failures = [(c["id"], c["verdict"], c["reason"]) for c in report["cases"] if c["verdict"] != "pass"]
    assert failures == [] and code == 0
    assert report["implementation"]["identity"].startswith("crashproof-go-example")
    assert report["implementation"]["operations"] == ["process-due"]
    wanted = {(b.name, name) for b in CATALOG if b.operation == "process-due"
              for name, fault in FAULTS.items() if fault.applies(b) is None}
    ran = {(c["barrier"], c["fault"]) for c in report["cases"] if c["fault"] is not None}
    twins = {(s["barrier"], s["fault"]) for s in report["run"]["skipped"] if "leaves the state" in s["reason"]}
    # read from the Go example's own fault-free run: after its last link it writes nothing more under the lease
    spent = {(s["barrier"], s["fault"]) for s in report["run"]["skipped"] if "nothing more under the lease" in s["reason"]}
    assert ("schedule-link-after-commit", "pause") in spent
    assert ran <= wanted and ran | twins | spent == wanted, f"not run: {sorted(wanted - twins - spent - ran)}"
    # its counts carry the registry's names, so the host held them to the committed facts in every case
    counted = [next(ch for ch in c["checks"] if ch["name"] == "process-counts") for c in report["cases"]]
    assert all(ch["ok"] and ch["rows"] >= 1 for ch in counted)


def test_a_skewed_go_example_is_marked_not_in_effect_and_never_claimed(go_example, tmp_path):
    """Go reads its clock through the vDSO, not libc: libfaketime cannot skew it. Its hello's clock_utc shows that,
    the case is judged as usual, and the certificate lists it as not in effect (docs/protocol-notes.md, 25c)."""
    code, report = certify(Options(command=go_example, scenario="race-skewed-clocks", cases=["race-skewed-clocks"],
                                   jobs=1, report_dir=tmp_path, progress=lambda line: None))
    assert code == 0, [(c["id"], c["reason"]) for c in report["cases"] if c["verdict"] != "pass"]
    skews = report["cases"][0]["clock_skew"]
    assert {r["in_effect"] for r in skews.values()} == {"not-in-effect"} and set(skews) == {"A", "B"}
    certificate = json.loads((tmp_path / "certificate.json").read_text())
    assert certificate["clock_skew"]["not_in_effect_cases"] == ["race-skewed-clocks"]
    assert certificate["clock_skew"]["in_effect"] == 0
