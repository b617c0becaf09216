#!/usr/bin/env python3
"""Every Python code block of README.md and python/README.md, run as written
against a real `tra serve` (the URL they name is this test's server), and
README's "numpy in, numpy out" shell block with this build's `tra` on the PATH.

    python3 python/tests/test_readme.py [--tra target/debug/tra]
"""

import argparse
import contextlib
import io
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (the shared runner)
import test_frontend as frontend  # noqa: E402  (its server)

import tra  # noqa: E402

ROOT = harness.ROOT
DOCS = ["README.md", os.path.join("python", "README.md")]


def blocks():
    for doc in DOCS:
        text = open(os.path.join(ROOT, doc), encoding="utf-8").read()
        for i, m in enumerate(re.finditer(r"```python\n(.*?)```", text, re.S)):
            yield f"{doc} block {i + 1}", m.group(1)


def test_every_python_block_runs():
    url = tra.default_session().url
    os.environ["TRA_URL"] = url
    found = 0
    for where, code in blocks():
        found += 1
        cwd = os.getcwd()
        out = io.StringIO()
        try:
            os.chdir(ROOT)
            with contextlib.redirect_stdout(out):
                exec(compile(code.replace("http://127.0.0.1:8080", url), where, "exec"), {"__name__": "__readme__"})
        except Exception as e:
            raise AssertionError(f"{where}: {type(e).__name__}: {e}\n{code}") from e
        finally:
            os.chdir(cwd)
    assert found >= 6, f"only {found} Python blocks found in {DOCS}"


def test_numpy_in_numpy_out_shell_block():
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    block = re.search(r"\*\*numpy in, numpy out\.\*\*.*?```\n(.*?)```", text, re.S).group(1)
    env = dict(os.environ, PATH=os.path.dirname(os.path.abspath(frontend.TRA)) + os.pathsep + os.environ["PATH"])
    with tempfile.TemporaryDirectory() as d:
        r = subprocess.run(["bash", "-e", "-c", block], cwd=d, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"exit {r.returncode}: {r.stderr}"
    assert r.stdout.strip().endswith("(200, 200) True"), r.stdout


def setup_module(module=None):
    frontend.setup_module()


def teardown_module(module=None):
    frontend.teardown_module()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tra", default=frontend.TRA)
    frontend.TRA = ap.parse_args().tra
    return harness.run_tests(globals(), "README Python blocks", setup_module, teardown_module)


if __name__ == "__main__":
    sys.exit(main())
