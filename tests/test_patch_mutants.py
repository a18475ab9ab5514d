"""`crashproof mutants --impl CMD --mutants DIR`: planted bugs as patches to any implementation's source, here
the Go example's (examples/go/mutants). Malformed input is a one-line error before anything runs."""

import json
import os
import shutil
from pathlib import Path

import pytest

from testhost.runs.patch_mutants import PatchMutantError, load, preamble, touched

GO = Path(__file__).resolve().parent.parent / "examples" / "go"


def _tiny_root(tmp_path: Path) -> Path:
    """A one-file implementation folder with a mutants folder of its own."""
    root = tmp_path / "impl"
    (root / "mutants").mkdir(parents=True)
    (root / "run.sh").write_text("#!/bin/sh\necho fine\n")
    (root / "run.sh").chmod(0o755)
    return root


def test_every_go_mutant_names_its_rule_and_changes_only_go_source():
    patches = sorted((GO / "mutants").glob("*.patch"))
    assert {p.stem for p in patches} >= {"wrong-fail-after-lost-commit", "no-client-deadline",
                                         "skipped-runtime-epoch-fence", "work-identity-from-bridge-time",
                                         "link-before-work-own-transaction"}
    repo = GO.parent.parent
    spec = " ".join(next((repo / "docs" / "spec").glob("*.txt")).read_text().split())
    protocol = " ".join((repo / "barriers" / "PROTOCOL.md").read_text().split())
    for patch in patches:
        fields = preamble(patch)
        assert fields["rule"] and fields["description"], patch.name
        assert fields["rule"] in spec or fields["rule"] in protocol, f"{patch.name}: not a verbatim rule"
        assert all(path.endswith(".go") and (GO / path).exists() for path in touched(patch)), patch.name


def test_a_patch_without_a_rule_is_refused(tmp_path):
    root = _tiny_root(tmp_path)
    (root / "mutants" / "silent.patch").write_text("--- a/run.sh\n+++ b/run.sh\n@@ -1,2 +1,2 @@\n #!/bin/sh\n"
                                                  "-echo fine\n+echo broken\n")
    with pytest.raises(PatchMutantError, match=r"silent.patch: the preamble names no `Rule:`"):
        load(str(root / "run.sh"), root / "mutants", None, None, work=tmp_path / "work")


def test_a_patch_that_does_not_apply_is_refused_naming_it(tmp_path):
    root = _tiny_root(tmp_path)
    (root / "mutants" / "stale.patch").write_text("Rule: some rule\n\n--- a/run.sh\n+++ b/run.sh\n@@ -1,2 +1,2 @@\n"
                                                 " #!/bin/sh\n-echo something else\n+echo broken\n")
    with pytest.raises(PatchMutantError, match=r"stale.patch does not apply to .*impl"):
        load(str(root / "run.sh"), root / "mutants", None, None, work=tmp_path / "work")


def test_a_command_outside_the_patched_folder_is_refused(tmp_path):
    root = _tiny_root(tmp_path)
    (root / "mutants" / "ok.patch").write_text("Rule: r\n\n--- a/run.sh\n+++ b/run.sh\n@@ -1,2 +1,2 @@\n"
                                              " #!/bin/sh\n-echo fine\n+echo broken\n")
    with pytest.raises(PatchMutantError, match=r"names no file inside .*impl"):
        load("/bin/true", root / "mutants", None, None, work=tmp_path / "work")


def test_a_patch_applies_to_a_copy_and_the_command_points_at_it(tmp_path):
    root = _tiny_root(tmp_path)
    (root / "mutants" / "ok.patch").write_text("Rule: r\nSlice: at-*, */kill/*\n\n--- a/run.sh\n+++ b/run.sh\n"
                                              "@@ -1,2 +1,2 @@\n #!/bin/sh\n-echo fine\n+echo broken\n")
    [mutant] = load(f"sh {root / 'run.sh'} --flag", root / "mutants", None, None, work=tmp_path / "work")
    assert mutant.command == f"sh {tmp_path / 'work' / 'ok' / 'run.sh'} --flag"
    assert mutant.slice == ("at-*", "*/kill/*") and mutant.migrations is None
    assert (tmp_path / "work" / "ok" / "run.sh").read_text().endswith("echo broken\n")
    assert (root / "run.sh").read_text().endswith("echo fine\n"), "the original is untouched"
    assert not (tmp_path / "work" / "ok" / "mutants").exists()


def test_a_schema_patch_gets_a_patched_copy_of_the_normative_migrations(tmp_path):
    root = _tiny_root(tmp_path)
    (root / "mutants" / "grant.patch").write_text(
        "Rule: r\n\n--- a/migrations/0003_work_store.sql\n+++ b/migrations/0003_work_store.sql\n"
        "@@ -26 +26 @@\n-grant select, insert, update on appsurface_durable.work_items to appsurface_durable_runtime;\n"
        "+grant select, insert, update, delete on appsurface_durable.work_items to appsurface_durable_runtime;\n")
    [mutant] = load(str(root / "run.sh"), root / "mutants", None, None, work=tmp_path / "work")
    assert mutant.changes_schema and Path(mutant.migrations).name == "migrations"
    assert "update, delete on" in (Path(mutant.migrations) / "0003_work_store.sql").read_text()


@pytest.mark.world
def test_a_go_mutant_is_killed_by_its_slice_and_the_unpatched_go_example_passes_it(tmp_path, capsys):
    from testhost.cli import main
    code = main(["mutants", "--impl", str(GO / "run.sh"), "--mutants", str(GO / "mutants"), "--mutant",
                 "work-identity-from-bridge-time", "--slice-only", "--jobs", "2", "--report-dir", str(tmp_path)])
    out = capsys.readouterr().out.splitlines()
    report = json.loads((tmp_path / "mutants.json").read_text())
    assert out[-1] == "mutation score: 1/1", out[-10:]
    assert code == 0
    assert report["control"]["implementation"] == str(GO / "run.sh") and report["control"]["failed"] == []
    [entry] = report["mutants"]
    assert entry["rule_named"] and "deterministic-work-identity" in entry["checks_named"]
    assert entry["caught_by"] == ["at-single"]


@pytest.mark.world
def test_all_cases_runs_every_case_of_a_killed_mutant_not_only_until_the_kill(tmp_path, capsys):
    """Killed by its first case (at-single), the mutant still runs the scenario's whole matrix with --all-cases,
    and every faulted case of it fails too, each naming the rule."""
    from testhost.cli import main
    code = main(["mutants", "--impl", str(GO / "run.sh"), "--mutants", str(GO / "mutants"), "--mutant",
                 "work-identity-from-bridge-time", "--scenario", "at-single", "--all-cases", "--jobs", "2",
                 "--report-dir", str(tmp_path)])
    capsys.readouterr()
    report = json.loads((tmp_path / "mutants.json").read_text())
    [entry] = report["mutants"]
    assert code == 0 and report["all_cases"] and entry["rule_named"]
    faulted = [case for case in entry["caught_by"] if case.count("/") == 3]
    assert entry["cases_run"] > 20 and len(faulted) == entry["cases_run"] - 1, entry


# What each planted bug must be killed by: the check whose failure names the patch's `Rule:` sentence.
GO_KILLED_BY = {"wrong-fail-after-lost-commit": "outcome-honesty", "no-client-deadline": "client-deadline",
                "skipped-runtime-epoch-fence": "fence-before-cursor-at-every-step",
                "work-identity-from-bridge-time": "deterministic-work-identity",
                "link-before-work-own-transaction": "one-work-per-materialized-occurrence",
                "cancel-compensates": "cancel-keeps-committed",
                "access-denied-retriable": "bridge-failure-not-retriable"}


@pytest.mark.world
def test_every_go_mutant_is_killed_in_its_slice_naming_its_rule_and_leaves_no_copy(tmp_path, capsys, monkeypatch):
    """Every planted bug on the narrowest slice that holds them (at-single, epoch-release, cancel-after-decision,
    bridge-role); the patched copies live under CRASHPROOF_HOME while the run lasts and are gone after it."""
    from testhost.cli import main
    home = Path(os.environ.get("CRASHPROOF_HOME") or "/tmp/crashproof")
    before = set((home / "patch-mutants").glob("*"))
    code = main(["mutants", "--impl", str(GO / "run.sh"), "--mutants", str(GO / "mutants"), "--scenario",
                 "[ae][tp]*,cancel-after-decision,bridge-role", "--slice-only", "--jobs", "2", "--report-dir", str(tmp_path)])
    out = capsys.readouterr().out.splitlines()
    report = json.loads((tmp_path / "mutants.json").read_text())
    assert out[-1] == f"mutation score: {len(GO_KILLED_BY)}/{len(GO_KILLED_BY)}", out[-12:]
    assert code == 0 and report["control"]["failed"] == []
    named = {entry["mutant"]: entry for entry in report["mutants"]}
    assert set(named) == set(GO_KILLED_BY)
    for name, check in GO_KILLED_BY.items():
        assert named[name]["rule_named"] and check in named[name]["checks_named"], named[name]
    # None of its copies is left; another run beside it (a test in another process) may have ended meanwhile.
    assert set((home / "patch-mutants").glob("*")) <= before


def test_the_patched_copies_are_removed_when_a_patch_does_not_apply(tmp_path, monkeypatch):
    from testhost.cli import main
    monkeypatch.setenv("CRASHPROOF_HOME", str(tmp_path / "home"))
    root = _tiny_root(tmp_path)
    (root / "mutants" / "ok.patch").write_text(
        "Rule: r\n\n--- a/run.sh\n+++ b/run.sh\n@@ -1,2 +1,2 @@\n #!/bin/sh\n-echo fine\n+echo broken\n")
    (root / "mutants" / "stale.patch").write_text(
        "Rule: r\n\n--- a/run.sh\n+++ b/run.sh\n@@ -1,2 +1,2 @@\n #!/bin/sh\n-echo gone\n+echo broken\n")
    assert main(["mutants", "--impl", str(root / "run.sh"), "--mutants", str(root / "mutants"),
                 "--report-dir", str(tmp_path / "report")]) != 0
    assert (tmp_path / "home" / "patch-mutants").is_dir()
    assert list((tmp_path / "home" / "patch-mutants").iterdir()) == []


def test_the_control_and_each_patched_copy_log_to_folders_of_their_own(tmp_path, monkeypatch):
    # every patched copy of examples/go/run.sh is a run.sh: a folder named from the command would be shared
    from testhost.runs import mutation
    from scenarios.matrix import CasePlan
    folders = []
    monkeypatch.setattr(mutation, "run_plan", lambda plan, command, log_dir, baseline, migrations: folders.append(
        (plan.id, log_dir)) or {})
    plan = CasePlan("at-single", "schedule-link-after-commit", "kill", 1)
    for label, command in [("control", "examples/go/run.sh"), ("skip-fence", "/tmp/a/examples/go/run.sh"),
                           ("drop-cursor", "/tmp/b/examples/go/run.sh")]:
        job = mutation.Job(plan.scenario, plan.barrier, plan.fault, plan.hit, plan.repeat, command, None, label)
        mutation._job_worker(job, "", str(tmp_path), None)
    assert [case for case, _ in folders] == [plan.id] * 3
    assert [Path(folder).name for _, folder in folders] == ["control", "skip-fence", "drop-cursor"]
    assert len({folder for _, folder in folders}) == 3


def test_a_patch_named_control_is_refused(tmp_path):
    from testhost.runs.options import Options
    from testhost.runs.mutation import run_mutants
    root = _tiny_root(tmp_path)
    (root / "mutants" / "control.patch").write_text(
        "Rule: fence\n\n--- a/run.sh\n+++ b/run.sh\n@@ -1,2 +1,2 @@\n #!/bin/sh\n-echo fine\n+echo broken\n")
    with pytest.raises(ValueError, match="may not be named 'control'"):
        run_mutants(Options(report_dir=tmp_path / "r"), impl=str(root / "run.sh"), mutants_dir=root / "mutants")


@pytest.mark.world
def test_sigterm_tears_the_mutants_run_down_and_writes_a_partial_report(tmp_path):
    import signal
    import subprocess
    import sys
    import tempfile
    import time

    from testhost.world.processes import pids_with_cwd_or_arg
    home = Path(tempfile.mkdtemp(prefix="crashproof-mutants-stop-", dir="/tmp"))
    os.chmod(home, 0o755)
    report_dir = tmp_path / "report"
    try:
        with open(tmp_path / "out", "w") as out, open(tmp_path / "err", "w") as err:
            run = subprocess.Popen([sys.executable, "-m", "testhost.cli", "mutants", "--impl", str(GO / "run.sh"),
                                    "--mutants", str(GO / "mutants"), "--mutant", "work-identity-from-bridge-time",
                                    "--scenario", "at-single", "--jobs", "1", "--report-dir", str(report_dir)],
                                   env={**os.environ, "CRASHPROOF_HOME": str(home)}, stdout=out, stderr=err,
                                   cwd=Path(__file__).resolve().parents[1])
            deadline = time.monotonic() + 120
            while not list((report_dir / "logs").glob("control/at-single/*")) and time.monotonic() < deadline:
                assert run.poll() is None, (tmp_path / "err").read_text()
                time.sleep(0.2)  # a case of the census has started its implementation: worlds and copies exist
            assert list((home / "patch-mutants").glob("run-*")), "the patched copies exist while the run lasts"
            run.send_signal(signal.SIGTERM)
            code = run.wait(timeout=120)
        output = (tmp_path / "out").read_text() + (tmp_path / "err").read_text()
        assert code == 143, output
        assert "Traceback" not in output
        report = json.loads((report_dir / "mutants.json").read_text())
        assert report["interrupted"] is True and report["logs"] == "logs"
        assert list((home / "patch-mutants").iterdir()) == []
        assert list((home / "worlds").iterdir()) == []
        assert pids_with_cwd_or_arg(str(home)) == []
    finally:
        shutil.rmtree(home, ignore_errors=True)
