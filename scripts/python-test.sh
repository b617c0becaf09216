#!/usr/bin/env bash
# The Python front-end (python/): installs it with pip into a virtual
# environment under target/, then runs its tests against a real `tra serve`
# and `tra run` (python/tests/test_frontend.py starts the server).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q -p tra-api --bin tra
venv=target/python-venv
[ -x "$venv/bin/python" ] || python3 -m venv --system-site-packages "$venv"
"$venv/bin/python" -m pip install -q ./python
(cd "$venv" && "$OLDPWD/$venv/bin/python" "$OLDPWD/python/tests/test_frontend.py" --tra "$OLDPWD/target/debug/tra")
