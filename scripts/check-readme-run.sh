#!/usr/bin/env bash
# Runs the README's run command exactly as written (taken from its Quick start, so the two
# cannot drift) in a fresh directory, and checks that it serves: a real gRPC health check
# answers SERVING, and SIGTERM stops it with exit code 0.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

# The first line of the first ```sh block after "## Quick start".
command=$(awk '/^## Quick start/ {q=1} q && /^```sh/ {getline; print; exit}' README.md)
case "$command" in
    "cargo run"*) ;;
    *) echo "check-readme-run: no cargo run command in README's Quick start (found: '$command')" >&2; exit 1 ;;
esac
echo "check-readme-run: running '$command'" >&2

if ! command -v curl >/dev/null 2>&1; then
    echo "check-readme-run: installing curl" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl >/dev/null
fi

# The command compiles the release build first. Built here beforehand, with no time limit (a
# busy 2-core machine took over 10 minutes once), so that the wait below times the start.
cargo build --release --quiet

work=$(mktemp -d)
log="$work/server.log"
# The command runs in the repository, as a user would, with its default data dir moved to a
# fresh place (the README's default, ./tapedeck-data, is kept out of the repository).
export TAPEDECK_DATA_DIR="$work/tapedeck-data"
bash -c "exec $command" >"$log" 2>&1 &
pid=$!
cleanup() {
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# Up to 2 minutes: cargo finds the build up to date, and the server starts.
for _ in $(seq 1 120); do
    grep -q "tapedeck listening" "$log" && break
    kill -0 "$pid" 2>/dev/null || { echo "check-readme-run: the server exited:" >&2; tail -20 "$log" >&2; exit 1; }
    sleep 1
done
grep -q "tapedeck listening" "$log" || { echo "check-readme-run: not listening after 120 s" >&2; tail -20 "$log" >&2; exit 1; }

# grpc.health.v1.Health/Check with an empty request (a 5-byte gRPC frame: not compressed,
# length 0). SERVING is field 1 = 1: bytes 08 01 after the 5-byte frame header.
answer=$(printf '\0\0\0\0\0' | curl -sS --http2-prior-knowledge -X POST \
    -H 'content-type: application/grpc' -H 'te: trailers' --data-binary @- \
    -D "$work/headers" http://127.0.0.1:9090/grpc.health.v1.Health/Check | od -An -tx1 | tr -d ' \n')
if [ "$answer" != "00000000020801" ]; then
    echo "check-readme-run: unexpected health answer '$answer'" >&2
    cat "$work/headers" >&2
    exit 1
fi
grep -qi "grpc-status: 0" "$work/headers" || { echo "check-readme-run: no grpc-status 0" >&2; cat "$work/headers" >&2; exit 1; }
echo "check-readme-run: health check answered SERVING" >&2

# On Unix `cargo run` replaces itself with the program it runs: $pid is the server.
kill -TERM "$pid"
status=0
wait "$pid" || status=$?
echo "check-readme-run: stopped with exit code $status" >&2
[ "$status" -eq 0 ]
