"""CPU per faulted case of two commits, measured alternately on one machine
(`python -m bench.paired OLD NEW [--rounds N] [-- CASE_COST_ARGS]`).

Each commit is checked out once in a worktree beside the repository and measured with its own `bench.case_cost`
(run from that worktree, so the host, the fork server and the reference are that commit's code). The rounds alternate
OLD, NEW, OLD, NEW, ... so that a machine that grows busier or quieter during the run weighs on both alike; the
figure to read is the ratio of the medians."""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORKTREES = Path("/tmp/crashproof-paired")
TOTAL = re.compile(r"^\s+total\s+([0-9.]+)\s*$", re.M)
SAMPLED = re.compile(r"(\d+) faulted cases sampled")
DEFAULT_SAMPLE = ["--stride", "10"]


def worktree(commit: str) -> Path:
    """A detached worktree of `commit`, made once and reused."""
    sha = subprocess.run(["git", "rev-parse", "--short=12", commit], cwd=ROOT, check=True, capture_output=True,
                         text=True).stdout.strip()
    path = WORKTREES / sha
    if not (path / "bench" / "case_cost.py").exists():
        WORKTREES.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "worktree", "add", "--detach", "--force", str(path), sha], cwd=ROOT, check=True,
                       capture_output=True)
    return path


def measure(path: Path, sample: list[str]) -> tuple[float, int]:
    """(total CPU per faulted case in ms, cases sampled) of one `bench.case_cost` run in `path`."""
    run = subprocess.run([sys.executable, "-m", "bench.case_cost", *sample], cwd=path, capture_output=True, text=True)
    found, cases = TOTAL.search(run.stdout), SAMPLED.search(run.stdout)
    if run.returncode or not found or not cases:
        raise SystemExit(f"bench.case_cost in {path} failed (rc {run.returncode}):\n{run.stdout[-2000:]}"
                         f"{run.stderr[-4000:]}")
    return float(found.group(1)), int(cases.group(1))


def main(argv: list[str]) -> int:
    split = argv.index("--") if "--" in argv else len(argv)
    own, rest = argv[:split], argv[split + 1:]
    parser = argparse.ArgumentParser(prog="python -m bench.paired")
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args(own)
    sample = rest or DEFAULT_SAMPLE
    paths = {options.old: worktree(options.old), options.new: worktree(options.new)}
    figures: dict[str, list[float]] = {options.old: [], options.new: []}
    for round_ in range(options.rounds):
        for commit in (options.old, options.new):
            ms, cases = measure(paths[commit], sample)
            figures[commit].append(ms)
            print(f"round {round_ + 1} {commit:>12}: {ms:7.1f} ms CPU per faulted case ({cases} case{'s' * (cases != 1)})", flush=True)
    old, new = statistics.median(figures[options.old]), statistics.median(figures[options.new])
    print(f"median {options.old}: {old:.1f} ms, {options.new}: {new:.1f} ms; ratio {new / old:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
