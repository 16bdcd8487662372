#!/usr/bin/env bash
# The standard end-to-end comparison of BENCHMARKS.md: tapedeck against Redis Streams
# (appendfsync always / everysec), SQLite (one commit per token / group commit) and a bare
# fsync'd log, same workload, one run:
#   (a) 200 producers × 50 tokens/s, 1 live subscriber each, 30 s
#   (b) 1,000 producers, closed loop, 30 s
#   (c) replay of 1,000 completed 2,000-token recordings
# On their own (--scenarios NAME, tapedeck only): restart, tier, and curves (cost against size:
# restart, reads, memory and Record against stored data, recordings and producers, drawn as SVG
# charts in --charts, default target/curves; --curve-sizes small for a quick look).
# Extra arguments go to tapedeck-bench (e.g. --scenarios a --duration 5 for a quick look).
# Prints the tables; writes the JSON to target/bench-results.json (override with BENCH_JSON).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v redis-server >/dev/null 2>&1; then
    echo "installing redis-server" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
fi

cargo build --release --workspace --bins

json="${BENCH_JSON:-target/bench-results.json}"
echo "machine: $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB, $(redis-server --version | cut -d' ' -f1-3)" >&2
echo "source: $(git describe --always --dirty 2>/dev/null || echo unknown)" >&2
echo "load before the run: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
# Tables go to stderr (shown), JSON to the file.
target/release/tapedeck-bench --json "$@" >"$json"
echo "load after the run: $(cut -d' ' -f1-3 /proc/loadavg); JSON in $json" >&2
