#!/bin/sh
# Starts the Go example implementation, for `crashproof certify --impl examples/go/run.sh`: builds it into
# bin/ beside this script the first time (and again whenever a source changed), then execs the binary, so
# the TestHost's signals reach the implementation itself. Build output goes to standard error: standard
# output belongs to the adapter protocol. `run.sh --build-only` builds and exits (setup and CI run it, so no
# case waits for a build).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bin="$here/bin/crashproof-go-example"
GO=${GO:-go}
if ! command -v "$GO" >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
    GO=/usr/local/go/bin/go
fi

stale() {
    [ ! -x "$bin" ] || [ -n "$(find "$here" -maxdepth 1 \( -name '*.go' -o -name go.mod -o -name go.sum \) -newer "$bin")" ]
}

if stale; then
    mkdir -p "$here/bin"
    # Cases start the implementation side by side: one build at a time, each into its own file, moved in whole.
    (
        flock 9
        if stale; then
            cd "$here"
            "$GO" build -buildvcs=false -o "$bin.$$" . && mv -f "$bin.$$" "$bin"
        fi
    ) 9>"$here/bin/.build-lock" 1>&2
fi
if [ "${1:-}" = "--build-only" ]; then
    exit 0
fi
exec "$bin" "$@"
