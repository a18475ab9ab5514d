#!/usr/bin/env bash
# The signal and teardown tests with every core kept busy by other work (one spinning process per core, at the
# same priority): what a shared CI runner does to them. Exit status: pytest's.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
TESTS=${*:-tests/test_killed_run.py tests/test_run_contract.py tests/test_world_lifecycle.py tests/test_stop_signals.py}
spinners=()
cleanup() { for pid in "${spinners[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap cleanup EXIT
for _ in $(seq "$(nproc)"); do
    "$VENV/bin/python" -c 'while True: pass' &
    spinners+=($!)
done
echo "under-load: ${#spinners[@]} spinning process(es) beside the tests; load average $(cut -d' ' -f1 /proc/loadavg)"
# shellcheck disable=SC2086
"$VENV/bin/pytest" -p no:cacheprovider -q $TESTS
