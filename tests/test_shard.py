"""`certify --shard I/N`: the split is deterministic, disjoint, complete and balanced by cost; the merged shard
reports equal the unsharded run case for case; merge refuses a missing or a repeated shard."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

from scenarios.matrix import CasePlan
from testhost.errors import TestHostError
from testhost.runs.shard import cost, parse, split

CENSUS = {"light": {"b1": 1}, "heavy": {"b1": 9, "b2": 10}, "mid": {"b1": 4, "b2": 3}}


def _plans() -> list[CasePlan]:
    return [CasePlan(s, b, f, h) for s in CENSUS for b in CENSUS[s] for f in ("kill", "pause")
            for h in range(1, CENSUS[s][b] + 1)]


def test_the_split_is_disjoint_complete_deterministic_and_balanced_by_cost():
    plans = _plans()
    shards = split(plans, CENSUS, 3)
    shuffled = plans[:]
    random.Random(7).shuffle(shuffled)
    assert split(shuffled, CENSUS, 3) == shards  # the order the plans came in does not matter
    ids = [p.id for shard in shards for p in shard]
    assert sorted(ids) == sorted(p.id for p in plans) and len(ids) == len(set(ids))
    loads = [sum(cost(p, CENSUS) for p in shard) for shard in shards]
    assert max(loads) - min(loads) <= max(cost(p, CENSUS) for p in plans)
    counts = [len(shard) for shard in shards]
    assert len(set(counts)) > 1  # balanced by cost, not by count: the heavy scenario's cases spread thinner


def test_a_bad_shard_is_a_one_line_error():
    assert parse("2/3") == (2, 3)
    for bad in ("0/3", "4/3", "2", "a/b", "1/0"):
        with pytest.raises(TestHostError, match="--shard"):
            parse(bad)


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "testhost.cli", *args], capture_output=True, text=True, timeout=600)


@pytest.mark.world
def test_three_merged_shards_equal_the_unsharded_run(tmp_path):
    selection = ["--scenario", "at-single", "--fault", "kill", "--jobs", "2"]
    unsharded = _run("certify", *selection, "--report-dir", str(tmp_path / "whole"))
    assert unsharded.returncode == 0, unsharded.stdout + unsharded.stderr
    shards = []
    for index in (1, 2, 3):
        directory = tmp_path / f"shard{index}"
        done = _run("certify", *selection, "--shard", f"{index}/3", "--report-dir", str(directory))
        assert done.returncode == 0, done.stdout + done.stderr
        shards.append(directory)
    counts = [json.loads((d / "report.json").read_text())["summary"]["cases"] for d in shards]
    whole = json.loads((tmp_path / "whole" / "report.json").read_text())
    assert all(counts) and sum(counts) == whole["summary"]["cases"] >= 5
    merged = _run("report", "merge", str(tmp_path / "all"), *map(str, shards))
    assert merged.returncode == 0, merged.stderr
    result = json.loads((tmp_path / "all" / "report.json").read_text())
    assert [(c["id"], c["verdict"]) for c in result["cases"]] == [(c["id"], c["verdict"]) for c in whole["cases"]]
    assert result["summary"] == whole["summary"] and result["suite_version"] == whole["suite_version"]
    missing = _run("report", "merge", str(tmp_path / "o1"), str(shards[0]), str(shards[2]))
    assert missing.returncode == 2 and "shard 2/3 missing" in missing.stderr
    twice = _run("report", "merge", str(tmp_path / "o2"), str(shards[0]), str(shards[1]), str(shards[1]),
                 str(shards[2]))
    assert twice.returncode == 2 and "shard 2/3 twice" in twice.stderr


@pytest.mark.world
def test_shards_of_named_cases_merge_and_an_empty_slice_passes(tmp_path):
    """A requested case not in the matrix is reported by shard 1 alone; shard 2's slice of one planned case is
    empty by construction: it exits 0, records so, and the shards merge into the unsharded run."""
    cases = ["--case", "at-single/schedule-decision-after-commit/kill/1",
             "--case", "at-single/schedule-decision-after-commit/kill/99", "--jobs", "2"]
    shards = []
    for index, expected_exit in ((1, 1), (2, 0)):  # shard 1 holds the not-run case kill/99
        directory = tmp_path / f"shard{index}"
        done = _run("certify", *cases, "--shard", f"{index}/2", "--report-dir", str(directory))
        assert done.returncode == expected_exit, done.stdout + done.stderr
        shards.append(json.loads((directory / "report.json").read_text()))
    assert [c["id"] for c in shards[1]["cases"]] == [] and shards[1]["run"]["empty_slice"] is True
    assert "no case ran" not in (tmp_path / "shard2" / "report.md").read_text()
    assert [(c["id"], c["verdict"]) for c in shards[0]["cases"]] == [
        ("at-single", "pass"), ("at-single/schedule-decision-after-commit/kill/1", "pass"),
        ("at-single/schedule-decision-after-commit/kill/99", "not-run")]
    digests = {(s["run"]["selection"]["plan_count"], s["run"]["selection"]["plan_digest"]) for s in shards}
    assert len(digests) == 1 and digests.pop()[0] == 3
    merged = _run("report", "merge", str(tmp_path / "all"), str(tmp_path / "shard1"), str(tmp_path / "shard2"))
    assert merged.returncode == 0, merged.stderr
    assert json.loads((tmp_path / "all" / "report.json").read_text())["summary"]["cases"] == 3
