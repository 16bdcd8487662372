#!/usr/bin/env bash
# Runs the Durable Streams conformance suite (npm @durable-streams/server-conformance-tests)
# against a tapedeck binary serving its HTTP face on a port it picks (port 0), with a fresh
# data dir.
# Usage: scripts/conformance.sh [path/to/tapedeck [vitest args]]
# (default: builds target/release/tapedeck)
set -euo pipefail
cd "$(dirname "$0")/.."
binary="${1:-}"
shift || true
if [[ -z "$binary" ]]; then
  cargo build --release --quiet --bin tapedeck
  binary="${CARGO_TARGET_DIR:-target}/release/tapedeck"
fi
[ -x conformance/node_modules/.bin/vitest ] || (cd conformance && npm ci --silent --no-audit --no-fund)
data_dir="$(mktemp -d)"
# Port 0 for both faces: the server picks free ports and its readiness line names them, so no
# other process can take a port between picking and binding.
"$binary" serve --data-dir "$data_dir" --listen "127.0.0.1:0" \
  --http-listen "127.0.0.1:0" --log-format json 2> "$data_dir/server.log" &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -rf "$data_dir"' EXIT
http_addr=""
for _ in $(seq 100); do
  http_addr="$(grep '"tapedeck listening"' "$data_dir/server.log" \
    | grep -o '"http_addr":"[^"]*"' | cut -d'"' -f4 || true)"
  [ -n "$http_addr" ] && break
  kill -0 $server 2>/dev/null || { cat "$data_dir/server.log"; exit 1; }
  sleep 0.1
done
[ -n "$http_addr" ] || { echo "conformance.sh: the server did not say where it listens" >&2; cat "$data_dir/server.log"; exit 1; }
cd conformance
TAPEDECK_HTTP_URL="http://$http_addr" npx vitest run "$@"
