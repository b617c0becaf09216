#!/usr/bin/env bash
# Load benchmark of POST /v1/optimize on the docs/API.md matmul program: requests/s
# and latency percentiles at 32 connections, with wrk (Debian's package).
# Two runs on the same machine: the server as it ships (answers cached by
# program, so a repeated program costs a lookup), and with the cache off
# (--answer-cache-bytes 0: every request saturates an e-graph).
#   bash bench/http-load.sh [seconds]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-15}
command -v wrk >/dev/null || { apt-get update -q && apt-get install -y -q wrk; }
cargo build -q --release -p tra-api --bin tra
lua=$(mktemp --suffix=.lua)
python3 - "$lua" <<'PY'
import json, sys
body = json.dumps(json.load(open("examples/matmul.json")))
open(sys.argv[1], "w").write(
    'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\nwrk.body = [[' + body + ']]\n')
PY
pid=
trap 'rm -f "$lua"; [ -n "$pid" ] && kill $pid 2>/dev/null || true' EXIT
for cache in 67108864 0; do
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  ./target/release/tra serve --addr "127.0.0.1:$port" --answer-cache-bytes $cache >/tmp/tra-load.log 2>&1 &
  pid=$!
  for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
  echo
  echo "== POST /v1/optimize (examples/matmul.json), answer cache $cache, 32 connections, ${secs}s, $(nproc) cores"
  wrk -t2 -c32 -d"${secs}s" --latency -s "$lua" "http://127.0.0.1:$port/v1/optimize" | grep -E "Requests/sec|Latency|50%|90%|99%|requests in|Non-2xx|errors"
  kill $pid; wait $pid 2>/dev/null || true; pid=
done
