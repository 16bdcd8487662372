#!/usr/bin/env bash
# The README's test command. Installs what the tests need that a fresh machine lacks, then runs
# `cargo test` (extra arguments go to it):
#   - Debian's redis-server, for the locator's tests (tests/cluster.rs);
#   - a Python venv in target/python-client with what Memory Service's Python client imports
#     (tests/python/requirements.txt) and what the examples need (examples/python/), made
#     again when either file changes.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v redis-server >/dev/null 2>&1; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "test.sh: redis-server is missing; install Debian's redis-server (as root)" >&2
        exit 1
    fi
    echo "test.sh: installing redis-server" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
fi

venv=target/python-client
requirements=(tests/python/requirements.txt examples/python/requirements.txt)
stamp="$venv/requirements.txt"
if ! cat "${requirements[@]}" | cmp -s - "$stamp" 2>/dev/null; then
    echo "test.sh: preparing the Python environment in $venv" >&2
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q -r "${requirements[0]}" -r "${requirements[1]}"
    cat "${requirements[@]}" > "$stamp"
fi
export TAPEDECK_TEST_PYTHON="$PWD/$venv/bin/python"

exec cargo test "$@"
