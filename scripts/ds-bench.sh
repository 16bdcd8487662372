#!/usr/bin/env bash
# The Durable Streams comparison of BENCHMARKS.md: tapedeck's HTTP face against Electric's
# durable-streams-server (crate durable-streams 0.1.5, WAL durability),
# durable-streams-server 0.3.0 in acid (redb) mode, and S2's self-hosted server (crate s2-cli
# 0.43.4, `s2 lite --local-root DIR`: SlateDB on the local disk with fsync, its WAL flush
# interval SL8_FLUSH_INTERVAL at 0 to match tapedeck's commit-when-the-last-is-done; spoken
# to over S2's REST API), one run:
#   appends/s with 1,000 writers, and with 32 writers on one stream; ack latency at a fixed
#   rate (100 streams × 10 appends/s); SSE append→receive latency, 200 streams × 50
#   messages/s; catch-up read MB/s (not S2: its reads are paginated); fan-out, 100 streams ×
#   100 SSE readers (10,000 connections; the open-file limit is raised as far as the process
#   may, which must allow it); each server's peak memory per measure.
# Installs the three peers with `cargo install` into target/ds-peers the first time (a few
# minutes each on 2 cores). Extra arguments go to tapedeck-ds-bench (e.g. --seconds 5).
set -euo pipefail
cd "$(dirname "$0")/.."

peers="${DS_PEERS:-target/ds-peers}"
[ -x "$peers/electric/bin/durable-streams-server" ] ||
    cargo install --quiet --root "$peers/electric" durable-streams@0.1.5
[ -x "$peers/ds-server/bin/durable-streams-server" ] ||
    cargo install --quiet --root "$peers/ds-server" durable-streams-server@0.3.0
[ -x "$peers/s2/bin/s2" ] ||
    cargo install --quiet --locked --root "$peers/s2" s2-cli@0.43.4

cargo build --release --workspace --bin tapedeck --bin tapedeck-ds-bench
echo "machine: $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB; source $(git describe --always --dirty 2>/dev/null || echo unknown)" >&2
echo "load before the run: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
target/release/tapedeck-ds-bench \
    --electric "$peers/electric/bin/durable-streams-server" \
    --ds-server "$peers/ds-server/bin/durable-streams-server" \
    --s2 "$peers/s2/bin/s2" "$@"
echo "load after the run: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
