"""The mutants: each is the reference with exactly one rule broken, runs through the adapter protocol, and is
caught by its slice of the matrix with a diagnosis that names that rule, while the reference passes the same
slice. The edits themselves are checked without a database."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mutants import MUTANTS, Edit, Mutant, MutantError, apply_edits, materialize
from testhost.runs.mutation import Verdict

SPEC = "durable-schedule-protocol-v1.txt"


def test_the_catalog_has_the_mutants_the_harness_promises():
    names = {m.name for m in MUTANTS}
    assert len(MUTANTS) >= 12 and len(names) == len(MUTANTS)
    assert {"cursor-own-transaction", "random-work-id", "link-without-compare", "no-lease-fence",
            "processor-clock-cutoff", "coalesced-range-moved", "fences-after-cursor", "coalesced-added-twice",
            "retry-releases-slot", "superseded-materialized", "anomaly-processed", "claim-long-lease"} <= names


def test_every_mutant_breaks_a_verbatim_spec_sentence_or_adapter_protocol_rule():
    root = Path(__file__).parent.parent
    spec = " ".join((root / "docs" / "spec" / SPEC).read_text().split())
    protocol = " ".join((root / "barriers" / "PROTOCOL.md").read_text().split())
    for mutant in MUTANTS:
        assert mutant.rule in spec or mutant.rule in protocol, mutant.name
        assert mutant.slice, f"{mutant.name} names no slice"
        for also in mutant.also:
            assert (also in spec or also in protocol) and also != mutant.rule, mutant.name


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_each_mutant_applies_exactly_once_and_changes_only_its_files(mutant, tmp_path):
    root = materialize(mutant, tmp_path)
    from mutants import reference_root
    reference = reference_root()
    changed = sorted(str(p.relative_to(root / "reference")) for p in (root / "reference").rglob("*")
                     if p.is_file() and (reference / p.relative_to(root / "reference")).read_bytes() != p.read_bytes())
    assert changed == sorted({e.path for e in mutant.edits})
    assert materialize(mutant, tmp_path) == root  # made once per content


def test_an_edit_that_no_longer_matches_the_reference_is_a_clear_error():
    stale = Mutant("stale", "rule", "an edit that matches nothing", (Edit("processor.py", "no such text", "x"),))
    with pytest.raises(MutantError, match=r"stale: the text to replace in reference/processor.py occurs 0 times"):
        apply_edits(stale, lambda path: "some other text")
    twice = Mutant("twice", "rule", "an edit that matches twice", (Edit("processor.py", "a", "b"),))
    with pytest.raises(MutantError, match="occurs 2 times"):
        apply_edits(twice, lambda path: "a a")


def test_the_launcher_lists_the_catalog_and_refuses_an_unknown_mutant():
    listing = subprocess.run([sys.executable, "-m", "mutants", "--list"], capture_output=True, text=True, check=True)
    assert [line.split(":")[0] for line in listing.stdout.splitlines()] == [m.name for m in MUTANTS]
    unknown = subprocess.run([sys.executable, "-m", "mutants", "no-such"], capture_output=True, text=True)
    assert unknown.returncode == 2 and "no mutant named 'no-such'" in unknown.stderr


def test_a_mutant_is_killed_only_when_a_failing_check_names_its_rule():
    mutant = MUTANTS[0]
    verdict = Verdict(mutant)
    assert not verdict.caught and not verdict.killed
    verdict.failed.append({"id": "a", "checks": [("scenario-expectations", "scenario")]})
    assert verdict.caught and not verdict.killed
    verdict.failed.append({"id": "b", "checks": [("instant-decided-once", mutant.rule + " (so ...)")]})
    assert verdict.killed and verdict.to_json()["caught_by"] == ["b"]


@pytest.mark.world
@pytest.mark.long
def test_every_mutant_is_caught_by_its_slice_naming_its_rule_and_the_reference_passes_it(tmp_path, capsys):
    from testhost.cli import main
    code = main(["mutants", "--jobs", "2", "--slice-only", "--report-dir", str(tmp_path)])
    out = capsys.readouterr().out.splitlines()
    report = json.loads((tmp_path / "mutants.json").read_text())
    assert out[-1] == f"mutation score: {len(MUTANTS)}/{len(MUTANTS)}", out[-20:]
    assert code == 0
    assert report["control"]["cases"] > len(MUTANTS) and report["control"]["failed"] == []
    by_name = {m["mutant"]: m for m in report["mutants"]}
    for mutant in MUTANTS:
        entry = by_name[mutant.name]
        assert entry["rule_named"] and entry["caught_by"], entry
        assert entry["also_named"] == list(mutant.also), entry  # what `also` claims, its slice shows
    # Its slice: 65 faulted cases (a kill right after its decision commits, in every scenario) and the 30 fault-free
    # runs they are compared with. The fault-free all run; settled (killed, no `also`) by its first faulted cases,
    # it runs a handful of the faulted, not all 95.
    assert by_name["cursor-own-transaction"]["cases_run"] < 45, by_name["cursor-own-transaction"]
    # a pass that decides nothing where the scenario promised occurrences is also a vacuous run
    assert "due-instants-decided" in by_name["processor-clock-cutoff"]["checks_named"]
    assert any(line.startswith("time: ") for line in out)


def test_a_case_whose_turn_comes_once_its_mutant_is_settled_is_not_run():
    """run_cases asks `skip` of each plan as its turn comes: after the failure that settles a mutant, only the
    cases already in flight finish; the rest never start, and the progress line's total shrinks to match. (The
    mutants' hunt skips faulted cases only: the whole-catalog test above.)"""
    from concurrent.futures import ThreadPoolExecutor
    from scenarios.matrix import CasePlan
    from testhost.runs.pool import Pool, Progress, run_cases
    plans = [CasePlan("at-single", "schedule-link-after-commit", "kill", hit) for hit in range(1, 11)]
    ran, failed = [], []

    def worker(plan, _command, _log_dir, _baseline):
        ran.append(plan.hit)
        return {"case": {"id": plan.id, "verdict": "fail" if plan.hit == 2 else "pass"}, "baseline": None}

    progress = Progress(len(plans), lambda line: None, "mutants: slice")
    results = run_cases(Pool(lambda: ThreadPoolExecutor(max_workers=1)), [(p, None) for p in plans], "", "",
                        progress, worker=worker, skip=lambda plan: bool(failed),
                        finished=lambda r: failed.extend([r] if r["case"]["verdict"] == "fail" else []))
    assert ran[:2] == [1, 2] and set(ran) <= {1, 2, 3}  # at most the one submitted beside the failure
    assert sorted(r["plan"].hit for r in results) == sorted(ran) and len(failed) == 1
    assert progress.total == progress.done == len(ran)


def test_an_unknown_mutant_glob_is_a_one_line_error_before_anything_runs(tmp_path, capsys):
    from testhost.cli import main
    assert main(["mutants", "--mutant", "no-such-*", "--report-dir", str(tmp_path)]) == 2
    assert "no mutant matches 'no-such-*'" in capsys.readouterr().err
    assert not (tmp_path / "mutants.json").exists()


def test_a_mutant_root_without_a_copy_of_the_reference_is_a_clear_error(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mutants", "--root", str(tmp_path)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and "no reference/adapter.py there" in done.stderr
