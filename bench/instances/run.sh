#!/usr/bin/env bash
# Runs bench/instances/forwarded_calls.py end to end: a real redis-server, three instances on
# it (gRPC and HTTP faces) and one single instance without Redis, all from BIN (default the
# release build); 100 one-chunk recordings spread over the three (and 100 on the single one),
# `measured` on the first; then N calls of each kind.
#
# Usage: bench/instances/run.sh [N] [BIN]   (needs redis-server, and python3 with grpcio and
# the stubs forwarded_calls.py names)
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${1:-500}
bin=${2:-target/release/tapedeck}
work=$(mktemp -d)
pids=()
cleanup() {
    kill "${pids[@]}" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

redis-server --port 26399 --save '' --appendonly no --dir "$work" >/dev/null &
pids+=($!)
sleep 0.5
start() { # name grpc-port http-port [more args]
    local name=$1 grpc=$2 http=$3
    shift 3
    "$bin" serve --data-dir "$work/$name" --listen "127.0.0.1:$grpc" \
        --http-listen "127.0.0.1:$http" "$@" >"$work/$name.log" 2>&1 &
    pids+=($!)
}
for i in 0 1 2; do
    start "i$i" $((26100 + i)) $((26200 + i)) --redis-url redis://127.0.0.1:26399 \
        --advertised-address "127.0.0.1:$((26100 + i))" \
        --advertised-http-address "127.0.0.1:$((26200 + i))"
done
start single 26110 26210
for _ in $(seq 1 100); do
    if grep -q "tapedeck listening" "$work"/i0.log "$work"/i1.log "$work"/i2.log "$work"/single.log 2>/dev/null \
        && [ "$(grep -l "tapedeck listening" "$work"/*.log | wc -l)" -eq 4 ]; then
        break
    fi
    sleep 0.1
done
echo "measured" | "$bin" record measured --server 127.0.0.1:26100 2>/dev/null
for r in $(seq 1 100); do
    echo "row $r" | "$bin" record "row-$r" --server "127.0.0.1:$((26100 + r % 3))" 2>/dev/null
    echo "row $r" | "$bin" record "row-$r" --server 127.0.0.1:26110 2>/dev/null
done
sleep 1 # the instances register what they hold (within about 50 ms)
python3 bench/instances/forwarded_calls.py 127.0.0.1:26100 127.0.0.1:26101 "$n" 127.0.0.1:26110 \
    127.0.0.1:26200 127.0.0.1:26201
