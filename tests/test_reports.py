"""The report formats rendered from real runs: junit.xml read back by a JUnit consumer, report.md, the
certificate (tampering, OpenSSH signatures), diff and merge."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from barriers.contract import VERSION as CONTRACT
from junitparser import Error, Failure, JUnitXml, Skipped

from reports import ReportError, certificate, compare, render
from reports.junit import case_name
from reports.report import load, outcome, standing, summary, write
from testhost.runs.run_report import exit_code

pytestmark = pytest.mark.world


def _copy(source: Path, target: Path) -> Path:
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy(source / "report.json", target / "report.json")
    return target


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "testhost.cli", *args], capture_output=True, text=True, timeout=120)


def _rewrite(directory: Path, change) -> dict:
    report = json.loads((directory / "report.json").read_text())
    change(report)
    report["summary"] = summary(report["cases"])
    write(report, directory)
    return report


def test_certify_rendered_every_format_beside_its_report(mutant_report):
    for name in ("report.html", "report.md", "junit.xml", "certificate.json"):
        assert (mutant_report / name).stat().st_size > 0, name
    report = json.loads((mutant_report / "report.json").read_text())
    assert report["summary"]["failed"] >= 1 and report["summary"]["passed"] >= 1  # the failures are planted


def test_junit_has_one_testcase_per_case_with_its_outcome(mutant_report, tmp_path):
    directory = _copy(mutant_report, tmp_path / "r")
    # Every outcome at once: one failing case errs, one is not run, as a harness error or a missing capability would.
    def vary(report):
        failing = [c for c in report["cases"] if c["verdict"] == "fail"]
        failing[0].update(verdict="error", reason="the worker process running this case died")
        failing[1].update(verdict="not-run", reason="the world lacks network")
    report = _rewrite(directory, vary)
    render.render(directory, ["junit"])
    xml = JUnitXml.fromfile(str(directory / "junit.xml"))
    seen = {}
    for suite in xml:
        for case in suite:
            key = (case.classname, case.name)
            assert key not in seen, f"{key} twice"
            kinds = {type(r) for r in case.result}
            seen[key] = (Failure in kinds and "fail") or (Error in kinds and "error") or (
                Skipped in kinds and "not-run") or "pass"
            if seen[key] == "fail":
                text = case.result[0].text
                assert "It writes the occurrence disposition and cursor movement in one scoped transaction." in text
                assert "overlapping_ranges" in text  # the evidence rows travel with the failure
            assert "barrier         schedule-claim-before-commit" in case.system_out  # the timeline
            if case.name != "fault-free":
                assert f"fault           {case.name.split('/')[1]} at" in case.system_out
    expected = {(c["scenario"], case_name(c)): c["verdict"] for c in report["cases"]}
    assert seen == expected
    assert ("at-single", "fault-free") in seen and ("at-single", "schedule-decision-after-commit/kill/1") in seen
    assert xml.tests == len(report["cases"])


def test_markdown_has_the_verdict_counts_and_a_line_per_failing_case(mutant_report):
    text = (mutant_report / "report.md").read_text()
    report = json.loads((mutant_report / "report.json").read_text())
    assert text.startswith("## crashproof: ❌ NOT CERTIFIED")
    assert standing(json.loads((mutant_report / "report.json").read_text())) == "not-certified"
    assert "| kill |" in text and "| schedule-decision-after-commit |" in text
    for case in report["cases"]:
        line = [l for l in text.splitlines() if f"`{case['id']}`" in l]
        assert len(line) == (case["verdict"] != "pass"), case["id"]
        if line:
            assert f"(report.html#case-{case['id']})" in line[0]
            first = next(c for c in case["checks"] if not c["ok"])
            assert f"`{first['name']}`" in line[0]


def test_a_tampered_report_or_an_edited_certificate_fails_verify(mutant_report, tmp_path):
    directory = tmp_path / "r"
    shutil.copytree(mutant_report, directory)
    ok = _cli("report", "verify", str(directory))
    assert ok.returncode == 0, ok.stderr
    assert "matches" in ok.stdout and "NOT CERTIFIED" in ok.stdout
    raw = (directory / "report.json").read_text()
    (directory / "report.json").write_text(raw.replace('"verdict": "fail"', '"verdict": "pass"', 1))
    tampered = _cli("report", "verify", str(directory))
    assert tampered.returncode == 2 and "is not the report this certificate certifies" in tampered.stderr
    assert tampered.stderr.count("\n") == 1
    (directory / "report.json").write_text(raw)
    stated = json.loads((directory / "certificate.json").read_text())
    stated["certified"] = True
    (directory / "certificate.json").write_text(json.dumps(stated))
    edited = _cli("report", "verify", str(directory))
    assert edited.returncode == 2 and "certified does not match report.json" in edited.stderr


def test_a_signed_certificate_verifies_and_a_changed_one_does_not(reference_report, tmp_path):
    directory = tmp_path / "r"
    shutil.copytree(reference_report, directory)
    key = tmp_path / "key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "auditor", "-f", str(key)], check=True)
    signers = tmp_path / "allowed_signers"
    signers.write_text(f'auditor@example namespaces="{certificate.NAMESPACE}" {key.with_suffix(".pub").read_text()}')
    signed = _cli("report", "sign", str(directory), "--key", str(key))
    assert signed.returncode == 0, signed.stderr
    good = _cli("report", "verify", str(directory), "--allowed-signers", str(signers), "--signer", "auditor@example")
    assert good.returncode == 0, good.stderr
    assert "PASSED (a selection: " in good.stdout and "Good" in good.stdout
    wrong_signer = _cli("report", "verify", str(directory), "--allowed-signers", str(signers), "--signer", "mallory")
    assert wrong_signer.returncode == 2 and "does not verify for mallory" in wrong_signer.stderr
    path = directory / "certificate.json"
    path.write_text(path.read_text().replace('\n "', '\n  "', 1))  # the same statement, other bytes
    changed = _cli("report", "verify", str(directory), "--allowed-signers", str(signers), "--signer", "auditor@example")
    assert changed.returncode == 2 and "does not verify" in changed.stderr


def test_diff_finds_the_planted_regression(reference_report, mutant_report):
    regressed = _cli("report", "diff", str(reference_report), str(mutant_report))
    assert regressed.returncode == 1, regressed.stdout + regressed.stderr
    assert "NEW FAILURE at-single/schedule-decision-after-commit/kill/1: pass -> fail" in regressed.stdout
    assert "NEW FAILURE at-single/schedule-decision-after-commit/pause/1: fail (not in the old run)" in regressed.stdout
    fixed = _cli("report", "diff", str(mutant_report), str(reference_report))
    assert fixed.returncode == 0
    assert "changed     at-single/schedule-decision-after-commit/kill/1: fail -> pass" in fixed.stdout
    same = compare.diff(load(mutant_report), load(mutant_report))
    assert not same.changed and not same.new_failures


def _split(source: Path, tmp_path: Path, parts: int) -> list[Path]:
    """Disjoint selections of one run's cases, each a report of its own (the shape shards have)."""
    report = json.loads((source / "report.json").read_text())
    dirs = []
    for i in range(parts):
        part = dict(report, cases=report["cases"][i::parts])
        part["summary"] = summary(part["cases"])
        dirs.append(write(part, tmp_path / f"part{i}").parent)
        if (source / "logs").exists():  # each part keeps its cases' logs beside it, as a shard does
            shutil.copytree(source / "logs", dirs[-1] / "logs", dirs_exist_ok=True)
    return dirs


def _without_logs(cases: list[dict]) -> list[dict]:
    return [{k: v for k, v in case.items() if k != "logs"} for case in cases]


def test_merge_of_disjoint_reports_is_their_union(mutant_report, tmp_path):
    parts = _split(mutant_report, tmp_path, 3)
    out = tmp_path / "merged"
    merged = _cli("report", "merge", str(out), *map(str, reversed(parts)))
    assert merged.returncode == 0, merged.stderr
    whole = json.loads((mutant_report / "report.json").read_text())
    result = json.loads((out / "report.json").read_text())
    assert _without_logs(result["cases"]) == _without_logs(whole["cases"]) and result["summary"] == whole["summary"]
    assert result["suite_version"] == whole["suite_version"] and len(result["run"]["merged_from"]) == 3
    for name in ("report.html", "report.md", "junit.xml", "certificate.json"):
        assert (out / name).exists()


def test_merged_log_links_lead_to_each_parts_logs(mutant_report, tmp_path):
    parts = _split(mutant_report, tmp_path / "parts", 2)
    out = tmp_path / "elsewhere" / "merged"
    assert _cli("report", "merge", str(out), *map(str, parts)).returncode == 0
    result = json.loads((out / "report.json").read_text())
    links = [(case["id"], path) for case in result["cases"] for path in case["logs"].values()]
    assert links
    for case_id, path in links:
        assert (out / path).is_file(), f"{case_id}: {path} does not lead to a file from {out}"
        assert (out / path).resolve().is_relative_to(tmp_path / "parts")


def test_a_merged_certificate_counts_the_fallbacks_of_every_part(mutant_report, tmp_path):
    from reports.report import fallbacks
    parts = _split(mutant_report, tmp_path, 2)
    for part, operation in zip(parts, ("create", "update")):
        def planted(report, operation=operation):
            for case in report["cases"]:
                case["fallbacks"] = [operation]
            report["implementation"].update(fallbacks(report["cases"], ["create-after-insert"]))
        _rewrite(part, planted)
    merged = compare.merge([load(p) for p in parts])
    counts = {p: len(json.loads((p / "report.json").read_text())["cases"]) for p in parts}
    assert merged["implementation"]["fallbacks"] == ["create", "update"]
    assert len(merged["implementation"]["fallback_cases"]["update"]) == counts[parts[1]]
    assert f"create (in {counts[parts[0]]} cases), update (in {counts[parts[1]]} cases)" in \
        merged["implementation"]["fallback_note"]


def test_merge_refuses_duplicated_cases_other_implementations_and_suites(mutant_report, reference_report, tmp_path):
    duplicated = _cli("report", "merge", str(tmp_path / "o1"), str(mutant_report), str(mutant_report))
    assert duplicated.returncode == 2 and "is in both" in duplicated.stderr
    assert duplicated.stderr.count("\n") == 1 and not (tmp_path / "o1").exists()
    parts = _split(mutant_report, tmp_path, 2)
    with pytest.raises(ReportError, match="different implementations"):
        compare.merge([load(parts[0]), load(reference_report)])
    _rewrite(parts[1], lambda r: r.update(suite_version=r["suite_version"] + "x"))
    other_suite = _cli("report", "merge", str(tmp_path / "o2"), *map(str, parts))
    assert other_suite.returncode == 2 and "different suite versions" in other_suite.stderr


def test_reading_a_missing_or_broken_report_is_one_line(tmp_path):
    missing = _cli("report", "render", str(tmp_path))
    assert missing.returncode == 2 and "no report.json in" in missing.stderr and missing.stderr.count("\n") == 1
    (tmp_path / "report.json").write_text('{"cases": [')
    broken = _cli("report", "render", str(tmp_path))
    assert broken.returncode == 2 and "is not JSON" in broken.stderr
    (tmp_path / "report.json").write_text('{"schema_version": 9, "cases": []}')
    assert "schema_version 9" in _cli("report", "render", str(tmp_path)).stderr
    assert not (tmp_path / "report.html").exists()


def test_renderers_tolerate_fields_they_do_not_know(mutant_report, tmp_path):
    directory = _copy(mutant_report, tmp_path / "r")
    def extend(report):
        report["interrupted"] = True
        report["partial"] = True
        report["run"]["stopped_by"] = "SIGTERM"
        report["cases"][0]["logs"] = {"A": "logs/at-single/A.stderr"}
        report["cases"][0]["timeline"].append({"t": 9.9, "event": "novel-event", "instance": "A", "weight": 3})
        report["cases"][0]["checks"][0]["new_field"] = {"x": 1}
    _rewrite(directory, extend)
    render.render(directory)
    assert "the run stopped early (SIGTERM)" in (directory / "report.md").read_text()
    assert "novel-event" in (directory / "junit.xml").read_text()
    assert json.loads((directory / "certificate.json").read_text())["certified"] is False


def test_the_benchmarks_full_matrix_replicates_a_real_run_under_unique_ids(mutant_report):
    from bench.report_bench import full_matrix
    run = json.loads((mutant_report / "report.json").read_text())
    big = full_matrix(run, 23)
    ids = [c["id"] for c in big["cases"]]
    assert len(ids) == len(set(ids)) == 23 and big["summary"]["cases"] == 23
    assert all(c["id"].startswith(c["scenario"]) for c in big["cases"])
    first_faulted = next(i for i, c in enumerate(big["cases"]) if c["fault"] is not None)
    assert all(c["fault"] is not None for c in big["cases"][first_faulted:])


def test_sign_and_verify_refuse_in_one_line_what_they_cannot_do(reference_report, tmp_path):
    directory = tmp_path / "r"
    shutil.copytree(reference_report, directory)
    key = tmp_path / "key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    signers = tmp_path / "allowed_signers"
    signers.write_text(f"a@example {key.with_suffix('.pub').read_text()}")
    refusals = [
        (("sign", str(directory), "--key", str(tmp_path / "nokey")), "no key at"),
        (("sign", str(directory), "--key", str(signers)), "ssh-keygen -Y sign failed"),
        (("verify", str(directory), "--allowed-signers", str(signers)), "--allowed-signers and --signer go together"),
        (("verify", str(directory), "--allowed-signers", str(signers), "--signer", "a@example"), "is not signed"),
        (("verify", str(directory), "--allowed-signers", str(tmp_path / "none"), "--signer", "a"), "no allowed-signers"),
    ]
    for args, needle in refusals:
        done = _cli("report", *args)
        assert done.returncode == 2 and needle in done.stderr and done.stderr.count("\n") == 1, (args, done.stderr)
    assert _cli("report", "sign", str(directory), "--key", str(key)).returncode == 0
    unchecked = _cli("report", "verify", str(directory))
    assert unchecked.returncode == 0 and "present but not checked" in unchecked.stdout
    no_tool = subprocess.run([sys.executable, "-m", "testhost.cli", "report", "sign", str(directory), "--key", str(key)],
                             capture_output=True, text=True, env={"PATH": str(tmp_path)}, timeout=120)
    assert no_tool.returncode == 2 and "ssh-keygen not found" in no_tool.stderr
    (directory / "certificate.json").write_text("{")
    assert "is not JSON" in _cli("report", "verify", str(directory)).stderr
    (directory / "certificate.json").unlink()
    assert "no certificate.json in" in _cli("report", "verify", str(directory)).stderr
    assert "no certificate.json in" in _cli("report", "sign", str(directory), "--key", str(key)).stderr


def test_merge_refuses_shards_mixed_with_other_reports_or_other_splits(mutant_report, tmp_path):
    parts = _split(mutant_report, tmp_path, 3)
    _rewrite(parts[0], lambda r: r["run"]["selection"].update(shard="1/3"))
    _rewrite(parts[1], lambda r: r["run"]["selection"].update(shard="2/2"))
    with pytest.raises(ReportError, match="not shards"):
        compare.merge([load(parts[0]), load(parts[2])])
    with pytest.raises(ReportError, match="different splits"):
        compare.merge([load(parts[0]), load(parts[1])])
    with pytest.raises(ReportError, match="nothing to merge"):
        compare.merge([])
    (tmp_path / "list" ).mkdir()
    (tmp_path / "list" / "report.json").write_text("[]")
    assert "is not a crashproof report" in _cli("report", "render", str(tmp_path / "list")).stderr


def test_the_certificate_names_the_schema_and_merge_refuses_other_migrations(reference_report, tmp_path):
    parts = _split(reference_report, tmp_path, 2)
    for part, digest in zip(parts, ("a" * 64, "b" * 64)):
        _rewrite(part, lambda r, digest=digest: r["implementation"].update(migrations="/m", migrations_sha256=digest))
    stated = certificate.statement(load(parts[0]))["implementation"]
    assert stated["migrations"] == "/m" and stated["migrations_sha256"] == "a" * 64
    with pytest.raises(ReportError, match="different migrations") as refused:
        compare.merge([load(p) for p in parts])
    assert str(parts[0]) in str(refused.value) and str(parts[1]) in str(refused.value)


WHOLE = {"scenario": None, "barrier": None, "fault": None, "cases": [], "shard": None}


def _as_shards(parts: list[Path], digest: str = "d" * 64) -> None:
    for index, part in enumerate(parts, 1):
        _rewrite(part, lambda r, index=index: r["run"]["selection"].update(
            WHOLE, shard=f"{index}/{len(parts)}", plan_count=9, plan_digest=digest))


def test_only_a_run_of_the_whole_matrix_is_certified(reference_report, tmp_path):
    certified, verdict = outcome(load(reference_report).report)
    assert not certified and verdict.startswith("PASSED (a selection: --scenario at-single; --barrier "
                                                "schedule-decision-after-commit; --fault kill)")
    assert verdict.endswith(f"not a certification; contract {CONTRACT}")
    assert standing(load(reference_report).report) == "selection-passed"
    directory = _copy(reference_report, tmp_path / "whole")
    _rewrite(directory, lambda r: r["run"]["selection"].update(WHOLE))
    assert outcome(load(directory).report) == (True, f"CERTIFIED: all {len(load(directory).report['cases'])} "
                                                     f"cases passed; contract {CONTRACT}")
    assert standing(load(directory).report) == "certified"
    render.render(directory, ["md"])
    assert (directory / "report.md").read_text().startswith("## crashproof: ✅ CERTIFIED: all ")
    for narrowed, named in (({"shard": "2/3"}, "shard 2/3"), ({"cases": ["at-single"]}, "1 named case")):
        _rewrite(directory, lambda r: r["run"]["selection"].update(WHOLE, **narrowed))
        certified, verdict = outcome(load(directory).report)
        assert not certified and named in verdict, verdict
    parts = _split(directory, tmp_path, 2)
    _as_shards(parts)
    merged = compare.merge([load(p) for p in parts])
    assert outcome(merged)[0] and merged["run"]["selection"]["shard"] is None
    plain = compare.merge([load(p) for p in _split(directory, tmp_path / "plain", 2)])
    assert not outcome(plain)[0] and "not the shards of one run" in outcome(plain)[1]


def test_an_empty_slice_passes_and_is_not_a_run_where_no_case_ran(reference_report, tmp_path):
    directory = _copy(reference_report, tmp_path / "empty")
    report = _rewrite(directory, lambda r: (r.update(cases=[]), r["run"]["selection"].update(shard="3/3")))
    assert "no case ran" in outcome(report)[1]
    report = _rewrite(directory, lambda r: r["run"].update(empty_slice=True))
    assert "no case ran" not in outcome(report)[1] and "NOT CERTIFIED" not in outcome(report)[1]
    assert exit_code([], [], empty_slice=True) == 0 and exit_code([], []) == 1
    assert exit_code([], ["barrier x is never reached"], empty_slice=True) == 1


def test_merge_refuses_shards_that_planned_different_matrices(reference_report, tmp_path):
    parts = _split(reference_report, tmp_path, 2)
    _as_shards(parts)
    _rewrite(parts[1], lambda r: r["run"]["selection"].update(plan_count=8, plan_digest="e" * 64))
    with pytest.raises(ReportError, match="different plans") as refused:
        compare.merge([load(p) for p in parts])
    assert str(parts[0]) in str(refused.value) and str(parts[1]) in str(refused.value)
    assert "d" * 64 in str(refused.value) and "e" * 64 in str(refused.value)



def test_report_json_holds_one_case_per_line_and_reads_back_equal(mutant_report, tmp_path):
    report = json.loads((mutant_report / "report.json").read_text())
    lines = (mutant_report / "report.json").read_text().splitlines()
    case_lines = [line for line in lines if line.startswith('{"id": ')]
    assert len(case_lines) == len(report["cases"]) > 1
    assert [json.loads(line.rstrip(","))["id"] for line in case_lines] == [c["id"] for c in report["cases"]]
    written = write({**report, "cases": []}, tmp_path / "empty")
    assert json.loads(written.read_text()) == {**report, "cases": []}
