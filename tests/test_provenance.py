"""Which code an --impl command runs (testhost/impl/provenance.py): resolved where and how the implementation starts, so
the same command line from another folder or with another PYTHONPATH shows as the other code it is; what the
report, its renderers and explore's finds make of it; and certify's choice of the reference's own census."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from mutants import Edit, Mutant, materialize
from reports import ReportError, compare
from reports.html import Html
from reports.markdown import Markdown
from reports.report import Loaded, build, which_code, which_code_text
from scenarios.scenario import parse
from testhost.impl import provenance
from testhost.runs.stages import reference_census
from testhost.runs.explore import Options as ExploreOptions, write_failure
from testhost.case.runner import REFERENCE_COMMAND, REFERENCE_ROOT

ROOT = Path(__file__).parent.parent
# A copy of the reference whose processor does not report the barrier after the link's commit.
UNREPORTED_LINK = Mutant("link-barrier-unreported", "none: a copy for the tests of which code ran",
                         "The link's after-commit barrier is not reported.",
                         (Edit("processor.py", 'barriers.hit("schedule-link-after-commit", **context)',
                               "None  # the barrier is not reported"),))


def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    """A folder holding a modified copy of the `reference` package."""
    return materialize(UNREPORTED_LINK, tmp_path_factory.mktemp("copies"))


def test_the_reference_command_resolves_to_the_harnesss_own_package_and_interpreter():
    code = provenance.resolve(REFERENCE_COMMAND, cwd=str(ROOT))
    assert code["cwd"] == str(ROOT.resolve()) and REFERENCE_ROOT == str(ROOT.resolve())
    assert code["executable"] == os.path.realpath(sys.executable)
    assert code["executable_sha256"] == _sha256(Path(code["executable"]))
    # The virtual environment's python is a symlink: the path found is kept beside the file it resolves to.
    assert code.get("executable_via", code["executable"]) == os.path.abspath(sys.executable)
    assert code["module"] == "reference.adapter"
    assert code["module_origin"] == str(ROOT.resolve() / "reference" / "adapter.py")
    assert code["module_package"] == str(ROOT.resolve() / "reference")
    assert code["module_sha256"] == provenance.package_sha256([str(ROOT / "reference")])


def test_the_same_command_from_another_folder_or_pythonpath_resolves_to_the_code_it_runs(copy, tmp_path):
    through_path = provenance.resolve(REFERENCE_COMMAND, cwd=str(tmp_path),
                                      env={**os.environ, "PYTHONPATH": str(copy)})
    assert through_path["module_origin"] == str(copy.resolve() / "reference" / "adapter.py")
    assert through_path["environment"]["PYTHONPATH"] == str(copy)
    # `python -m` looks in its working directory first: a folder holding a copy runs the copy.
    shutil.copytree(copy / "reference", tmp_path / "reference")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    in_folder = provenance.resolve(REFERENCE_COMMAND, cwd=str(tmp_path), env=env)
    assert in_folder["module_origin"] == str(tmp_path.resolve() / "reference" / "adapter.py")
    assert in_folder["module_sha256"] == through_path["module_sha256"]  # the same files, elsewhere
    own = provenance.resolve(REFERENCE_COMMAND, cwd=str(ROOT), env=env)
    assert own["module_sha256"] != in_folder["module_sha256"]
    assert not provenance.same_code(own, in_folder) and provenance.same_code(own, dict(own, cwd="/elsewhere"))
    said = provenance.differences(own, in_folder)
    assert [s.split()[0] for s in said] == ["module_origin", "module_sha256", "cwd"], said


def test_a_script_is_the_executable_and_a_shell_wrapped_one_is_named_with_its_digest(tmp_path):
    go = provenance.resolve("examples/go/run.sh", cwd=str(ROOT))
    assert go["executable"] == str(ROOT.resolve() / "examples" / "go" / "run.sh")
    assert go["executable_sha256"] == _sha256(ROOT / "examples" / "go" / "run.sh") and "module" not in go
    wrapped = provenance.resolve("sh tests/adapters/wrapper.sh", cwd=str(ROOT))
    assert wrapped["executable"] == os.path.realpath(shutil.which("sh"))
    assert wrapped["script"] == str(ROOT.resolve() / "tests" / "adapters" / "wrapper.sh")
    assert wrapped["script_sha256"] == _sha256(ROOT / "tests" / "adapters" / "wrapper.sh")
    # A program found through PATH, as a symlink: resolved to the file it points at.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "my-adapter").symlink_to(ROOT / "examples" / "go" / "run.sh")
    found = provenance.resolve("my-adapter --flag", cwd=str(tmp_path), env={"PATH": str(bin_dir)})
    assert found["executable"] == go["executable"] and found["executable_via"] == str(bin_dir / "my-adapter")


def test_what_cannot_be_resolved_is_null_with_the_reason_and_never_the_same_code(tmp_path):
    missing = provenance.resolve(f"{sys.executable} -m no_such_module_for_crashproof", cwd=str(tmp_path))
    assert missing["module_origin"] is None and missing["module_sha256"] is None
    assert "no module named 'no_such_module_for_crashproof'" in missing["module_error"]
    assert not provenance.same_code(missing, missing)
    absent = provenance.resolve("./not-there", cwd=str(tmp_path))
    assert absent["executable"] is None and absent["executable_sha256"] is None
    assert not provenance.same_code(absent, absent)


def test_the_reference_census_is_shared_only_with_the_very_code_of_the_harnesss_reference(copy, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    same = reference_census(REFERENCE_COMMAND, provenance.resolve(REFERENCE_COMMAND, cwd=str(ROOT), env=env), env)
    assert same["separate"] is False and "code" not in same
    # From another folder the same package loads: the same code, whatever the folder.
    elsewhere = provenance.resolve(REFERENCE_COMMAND, cwd=str(tmp_path), env=env)
    assert reference_census(REFERENCE_COMMAND, elsewhere, env)["separate"] is False
    # The same command with a PYTHONPATH holding a copy runs the copy: the reference's own census runs.
    shadowed = {**env, "PYTHONPATH": str(copy)}
    decided = reference_census(REFERENCE_COMMAND, provenance.resolve(REFERENCE_COMMAND, cwd=str(tmp_path),
                                                                     env=shadowed), shadowed)
    assert decided["separate"] is True and "module_origin" in decided["why"] and str(copy) in decided["why"]
    # The reference census itself resolves to the harness's own package, the copy on PYTHONPATH notwithstanding.
    assert decided["code"]["module_origin"] == str(ROOT.resolve() / "reference" / "adapter.py")
    assert reference_census("sh tests/adapters/wrapper.sh", {}, env)["separate"] is True


def _report(implementation: dict) -> Loaded:
    report = build(suite_version="s", implementation=implementation, environment={},
                   run={"started_at": "2030-01-01T00:00:00+00:00", "duration_s": 1, "selection": {}}, cases=[])
    return Loaded(Path("."), report, json.dumps(report).encode())


def test_every_renderer_shows_which_code_ran_and_merge_refuses_other_code(copy, tmp_path):
    code = provenance.resolve(REFERENCE_COMMAND, cwd=str(tmp_path), env={**os.environ, "PYTHONPATH": str(copy)})
    implementation = {"command": REFERENCE_COMMAND, "identity": "crashproof-reference", "code": code,
                      "operations": ["create", "process-due"]}
    rows = dict(which_code(implementation, digits=None))
    assert rows["cwd"] == code["cwd"] and code["module_origin"] in rows["module"]
    assert code["executable_sha256"] in rows["executable"] and rows["environment"] == f"PYTHONPATH={copy}"
    text = which_code_text(implementation)
    assert text[0] == "Implementation: crashproof-reference (declares create, process-due)"
    assert any(line.split()[:2] == ["cwd", code["cwd"]] for line in text)
    loaded = _report(implementation)
    markdown = Markdown().render(loaded)
    assert f"cwd `{code['cwd']}`" in markdown and code["module_origin"] in markdown
    page = Html().render(loaded)
    assert code["module_origin"] in page and code["module_sha256"] in page and code["cwd"] in page
    # A report from before `code` shows its command alone.
    assert which_code({"command": "x"}) == [("command", "x")]
    other = dict(code, module_sha256="0" * 64)
    with pytest.raises(ReportError, match="different code"):
        compare.merge([loaded, _report({**implementation, "code": other})])


def test_a_find_records_which_code_found_it_and_a_replay_says_when_it_runs_other_code(copy, tmp_path):
    command = f"{sys.executable} -m mutants --root {copy}"
    code = provenance.resolve(command, cwd=str(tmp_path))
    failing_check = {"name": "c", "rule": "r", "ok": False, "evidence": [{"schedule": "s1", "model": []}]}
    failure = {"case": {"id": "explore-1/schedule-link-after-commit/kill/1", "verdict": "fail", "reason": "x",
                        "barrier": "schedule-link-after-commit", "fault": "kill", "hit": 1,
                        "checks": [{"name": "d", "rule": "r2", "ok": True, "evidence": []}, failing_check],
                        "timeline": [{"event": "step", "index": 0}]},
               "name": "explore-1", "checks": [{"name": "c", "rule": "r"}], "header": {},
               "steps": [{"op": "create", "schedule": "s1",
                          "spec": {"kind": "at", "at": "+60s", "target": {"command": "s1"}}}]}
    out = tmp_path / "found"
    path, replay = write_failure(out, failure, 0, ExploreOptions(command=command, out=out), None, {}, code)
    assert replay.startswith(f"cd {code['cwd']} && crashproof certify --catalog {out.absolute()} --case ")
    assert replay.endswith(f"--impl '{command}'")
    text = path.read_text()
    assert f"# replay: {replay}\n" in text
    scenario = parse(path.stem, text, str(path))  # still a scenario file, its code in a comment
    assert provenance.recorded(scenario.source) == {"impl": command, **code}
    program = json.loads((out / "explore-1.program.json").read_text())
    assert program["code"] == code and program["impl"] == command
    # The run that failed, as it failed: a find that does not reproduce afresh has no other record of its evidence.
    assert program["failing_run"] == {"id": failure["case"]["id"], "verdict": "fail", "reason": "x",
                                      "checks": [failing_check], "timeline": [{"event": "step", "index": 0}]}
    # Replayed with the code that found it: nothing to say; with other code (an edit, another folder): what differs.
    assert provenance.replay_notes([scenario], command, code) == []
    edited = dict(code, module_sha256="f" * 64, cwd="/elsewhere")
    notes = provenance.replay_notes([scenario], command, edited)
    assert notes == [{"scenario": "explore-1", "differences": [
        f"module_sha256 ffffffffffffffff (recorded: {code['module_sha256'][:16]})",
        f"cwd /elsewhere (recorded: {code['cwd']})"]}]
    assert provenance.replay_notes([scenario], REFERENCE_COMMAND, edited) == []  # found with another --impl
