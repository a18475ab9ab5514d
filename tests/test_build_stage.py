"""The build stage: a launcher that builds on its first start certifies, because the host starts a spawned command
once before any case under a timeout of its own; a build that fails or never ends stops the run with one line that
names the stage and the launcher's last stderr line."""

import shlex
import sys
from pathlib import Path

import pytest

from testhost.impl import build_stage
from testhost.impl.build_stage import BuildStageFailed
from testhost.runs.certify import certify
from testhost.runs.options import Options
from testhost.world.processes import group_members

BUILD_S = 6  # longer than the hello timeout the test sets: a case's start could not have built it

# Builds `built/adapter` (a wrapper that execs the reference) the first time, slowly, as `cargo build` would; then
# execs it. Build output goes to standard error: standard output belongs to the adapter protocol.
LAUNCHER = """#!/bin/sh
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -x "$here/built/adapter" ]; then
    echo "building the adapter (first start)" >&2
    sleep {build_s}
    mkdir -p "$here/built"
    printf '#!/bin/sh\\nexec {python} -m reference.adapter "$@"\\n' > "$here/built/adapter.$$"
    chmod +x "$here/built/adapter.$$" && mv "$here/built/adapter.$$" "$here/built/adapter"
    echo "built" >&2
fi
exec "$here/built/adapter" "$@"
"""


def _launcher(folder: Path, text: str) -> Path:
    launcher = folder / "run.sh"
    launcher.write_text(text)
    launcher.chmod(0o755)
    return launcher


def test_a_launcher_that_builds_on_first_start_certifies(tmp_path, monkeypatch):
    monkeypatch.setenv("CRASHPROOF_HELLO_TIMEOUT_S", "4")
    monkeypatch.setenv("CRASHPROOF_BUILD_TIMEOUT_S", "120")
    source = tmp_path / "impl"
    source.mkdir()
    launcher = _launcher(source, LAUNCHER.format(build_s=BUILD_S, python=shlex.quote(sys.executable)))
    assert build_stage.needed(str(launcher)) and not build_stage.needed(f"{sys.executable} -m reference.adapter")
    report_dir = tmp_path / "report"
    lines = []
    code, report = certify(Options(command=str(launcher), cases=["at-single"], report_dir=report_dir,
                                   progress=lines.append))
    assert code == 0, [(c["id"], c["verdict"], c["reason"]) for c in report["cases"]]
    assert [c["id"] for c in report["cases"]] == ["at-single"]
    stage = report["run"]["build_stage"]
    assert stage["seconds"] >= BUILD_S and stage["log"] == "logs/build-stage/A.stderr"
    assert "building the adapter (first start)" in (report_dir / stage["log"]).read_text()
    assert (source / "built" / "adapter").is_file()
    case_log = report_dir / report["cases"][0]["logs"]["A"]
    assert "building" not in case_log.read_text()  # the case's start found the build done
    assert any(line.startswith("build stage: starting") for line in lines), lines


def test_a_build_that_fails_stops_the_run_with_one_line_naming_the_stage(tmp_path, monkeypatch):
    launcher = _launcher(tmp_path, "#!/bin/sh\necho 'Compiling acme v0.1.0' >&2\n"
                                   "echo 'error[E0425]: cannot find value `lease` in this scope' >&2\nexit 101\n")
    report_dir = tmp_path / "report"
    with pytest.raises(BuildStageFailed, match=r"^build stage: .*run\.sh did not start: the implementation exited "
                       r"with status 101 before its hello; its last stderr line: error\[E0425\]: cannot find value "
                       r"`lease` in this scope \(log: .*build-stage/A\.stderr\)$") as caught:
        certify(Options(command=str(launcher), cases=["at-single"], report_dir=report_dir,
                        progress=lambda line: None))
    message = str(caught.value)
    assert "\n" not in message and caught.value.exit_code == 1
    assert not (report_dir / "report.json").exists()  # no case ran
    log = Path(message.rsplit("(log: ", 1)[1].rstrip(")"))
    assert log.is_file() and "Compiling acme" in log.read_text()


def test_a_build_that_never_ends_stops_the_run_and_leaves_no_process(tmp_path, monkeypatch):
    """After the build timeout the launcher's whole process group is killed, its `sleep` child with it."""
    monkeypatch.setenv("CRASHPROOF_BUILD_TIMEOUT_S", "3")
    pid_file = tmp_path / "pid"
    launcher = _launcher(tmp_path, f"#!/bin/sh\necho $$ > {pid_file}\necho 'Compiling acme v0.1.0 (still)' >&2\n"
                                   "sleep 3600\n")
    with pytest.raises(BuildStageFailed, match=r"^build stage: .*run\.sh did not start: no line on standard output "
                       r"within 3 s of the first start \(the build timeout\); its last stderr line: Compiling acme "
                       r"v0\.1\.0 \(still\) \(log: .*\)$"):
        certify(Options(command=str(launcher), cases=["at-single"], report_dir=tmp_path / "report",
                        progress=lambda line: None))
    assert group_members(int(pid_file.read_text())) == []


def test_explore_runs_the_build_stage_too(tmp_path):
    from testhost.runs.explore import Options as ExploreOptions, explore
    launcher = _launcher(tmp_path, "#!/bin/sh\necho 'error: linking with `cc` failed' >&2\nexit 1\n")
    with pytest.raises(BuildStageFailed, match=r"^build stage: .*exited with status 1 before its hello; its last "
                                               r"stderr line: error: linking with `cc` failed"):
        explore(ExploreOptions(command=str(launcher), max_examples=1, out=tmp_path / "found",
                               report_dir=tmp_path / "report", progress=lambda line: None))
