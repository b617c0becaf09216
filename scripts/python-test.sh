#!/usr/bin/env bash
# The Python front-ends (python/): installs the package with pip into a
# virtual environment under target/ (its [jax] and [onnx] extras come from
# the system site packages, which .ci/run fills), then runs their tests
# against a real `tra serve` and `tra run`: the numpy front-end in 2-D
# (test_frontend.py) and N-D (test_nd.py), tra.jax against jax.jit
# (test_jax.py) and tra.onnx against ONNX's conformance cases and
# onnxruntime (test_onnx.py), and every Python block of the READMEs
# (test_readme.py). Each test file starts its own server.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q -p tra-api --bin tra
venv=target/python-venv
[ -x "$venv/bin/python" ] || python3 -m venv --system-site-packages "$venv"
"$venv/bin/python" -m pip install -q ./python
for t in test_frontend test_nd test_jax test_onnx test_readme; do
  (cd "$venv" && "$OLDPWD/$venv/bin/python" "$OLDPWD/python/tests/$t.py" --tra "$OLDPWD/target/debug/tra")
done
