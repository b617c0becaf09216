#!/usr/bin/env bash
# Benchmarks of tra's thread executor, each against a peer measured in the
# same run on the same machine (see bench/README.md). Usage:
#   bash bench/run.sh            # the full benchmark (4096² f32 matmul, …)
#   bash bench/run.sh --quick    # small sizes, a smoke test (seconds)
# Extra arguments go to bench/bench.py (--n, --block, --reps, --sites).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
if ! "$PY" -c "import numpy, dask.array" >/dev/null 2>&1; then
    echo "bench: installing numpy and dask with pip" >&2
    "$PY" -m pip install --quiet numpy "dask[array]"
fi
echo "bench: building the Rust benchmark (release)" >&2
cargo bench -q -p tra-executor --bench threads --no-run
exec "$PY" bench/bench.py "$@"
