#!/usr/bin/env bash
# Runs examples/client.py (requests + numpy) against a real `tra serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -c "import numpy, requests" 2>/dev/null || python3 -m pip install -q numpy requests
cargo build -q -p tra-api --bin tra
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
./target/debug/tra serve --addr "127.0.0.1:$port" >/tmp/tra-client-test.log 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break
  sleep 0.1
done
python3 examples/client.py --url "http://127.0.0.1:$port"
