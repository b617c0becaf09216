#!/usr/bin/env bash
# Runs every test of tra: unit, property, soundness, differential and
# end-to-end (HTTP, the Python client, the page in a real browser).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --no-fail-fast "$@"
bash scripts/client-test.sh
python3 scripts/programs-numpy-test.py
python3 scripts/einsum-numpy-test.py
bash scripts/python-test.sh
bash scripts/web-test.sh
