"""Run every benchmark (or those named on the command line) and print one line per figure."""

from __future__ import annotations

import sys

from . import barrier_bench, explore_bench, guard, matrix_bench, reference_bench, report_bench, world_bench

SUITES = {"world": world_bench.BENCHMARKS, "reference": reference_bench.BENCHMARKS, "matrix": matrix_bench.BENCHMARKS,
          "barriers": barrier_bench.BENCHMARKS, "report": report_bench.BENCHMARKS, "explore": explore_bench.BENCHMARKS,
          "guard": guard.BENCHMARKS}


def main(argv: list[str]) -> int:
    chosen = argv or list(SUITES)
    unknown = [name for name in chosen if name not in SUITES]
    if unknown:
        print(f"unknown benchmark suite {unknown}; choose from {sorted(SUITES)}", file=sys.stderr)
        return 2
    missed = 0
    for suite in chosen:
        for benchmark in SUITES[suite]:
            for figure in benchmark():
                print(figure.line(), flush=True)
                missed += not figure.met
    print(f"{missed} target{'s' * (missed != 1)} missed" if missed else "all targets met")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
