#!/usr/bin/env bash
# Runs the Durable Streams conformance suite (npm @durable-streams/server-conformance-tests)
# against a tapedeck binary serving its HTTP face on a free port, with a fresh data dir.
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
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
grpc_port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
"$binary" serve --data-dir "$data_dir" --listen "127.0.0.1:$grpc_port" \
  --http-listen "127.0.0.1:$port" --log-format json 2> "$data_dir/server.log" &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -rf "$data_dir"' EXIT
for _ in $(seq 100); do
  grep -q "HTTP face (Durable Streams) listening" "$data_dir/server.log" && break
  kill -0 $server 2>/dev/null || { cat "$data_dir/server.log"; exit 1; }
  sleep 0.1
done
cd conformance
TAPEDECK_HTTP_URL="http://127.0.0.1:$port" npx vitest run "$@"
