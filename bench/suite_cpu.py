"""Where the test suite's CPU goes: a pytest plugin that writes each test's CPU, and a summary by module and test.

    CRASHPROOF_SUITE_CPU=DIR .venv/bin/pytest -n 4 -p bench.suite_cpu ...   # one file per test process in DIR
    .venv/bin/python -m bench.suite_cpu DIR                                 # the summary

A test's CPU is its process's and that of every descendant reaped meanwhile (getrusage): the spawned workers of a
run it starts, the certify subprocesses, the servers of a world it stops. A module's shared world is counted in the
test that tears it down; processes no test process reaps (a watcher, the xdist controller) are not counted, so the
sum falls short of the machine's busy time (docs/performance.md, "The test suite"). Unlike `--durations`, the
figure does not grow with what runs beside the test, which is what a CPU-bound suite needs to rank.
"""

from __future__ import annotations

import os
import resource
import sys
from collections import Counter
from pathlib import Path

import pytest

DIRECTORY_VARIABLE = "CRASHPROOF_SUITE_CPU"


def _cpu() -> float:
    own, reaped = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    directory = os.environ.get(DIRECTORY_VARIABLE)
    before = _cpu()
    yield
    if directory:
        Path(directory).mkdir(parents=True, exist_ok=True)
        with open(Path(directory) / f"{os.getpid()}.txt", "a") as out:
            out.write(f"{_cpu() - before:.2f} {item.nodeid}\n")


def summary(directory: Path, top: int = 25) -> str:
    """The CPU of every test written under `directory`: the total, the modules and the tests that cost most."""
    rows = []
    for path in sorted(directory.glob("*.txt")):
        for line in path.read_text().splitlines():
            seconds, node = line.split(" ", 1)
            rows.append((float(seconds), node))
    if not rows:
        raise SystemExit(f"{directory}: no test's CPU recorded there (run pytest with -p bench.suite_cpu and "
                         f"{DIRECTORY_VARIABLE}={directory})")
    total = sum(seconds for seconds, _ in rows)
    modules = Counter()
    for seconds, node in rows:
        modules[node.split("::")[0]] += seconds
    lines = [f"{len(rows)} tests, {total:.0f} CPU-s"]
    lines += [f"{seconds:8.1f} s {100 * seconds / total:5.1f} %  {module}" for module, seconds in modules.most_common(top)]
    lines.append("")
    lines += [f"{seconds:8.1f} s  {node}" for seconds, node in sorted(rows, reverse=True)[:top]]
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m bench.suite_cpu DIR")
    print(summary(Path(sys.argv[1])))
