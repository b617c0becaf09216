#!/usr/bin/env bash
# Runs every test of tra: unit, property, soundness, differential and end-to-end.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --no-fail-fast "$@"
