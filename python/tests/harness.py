"""What the Python front-ends' tests share: a real `tra serve` on a free
port, and a runner that runs a module's `test_*` functions as a script.

Each test file keeps `setup_module`/`teardown_module` (pytest calls them;
its `main` calls them around :func:`run_tests`)."""

import os
import socket
import subprocess
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def default_binary():
    """$TRA_BINARY, else the debug build, else the release build."""
    if os.environ.get("TRA_BINARY"):
        return os.environ["TRA_BINARY"]
    debug = os.path.join(ROOT, "target", "debug", "tra")
    release = os.path.join(ROOT, "target", "release", "tra")
    return debug if os.path.exists(debug) or not os.path.exists(release) else release


def serve(binary):
    """Start `tra serve` on a free loopback port: (the process, its URL) once it answers."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    proc = subprocess.Popen([binary, "serve", "--addr", f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            urllib.request.urlopen(url + "/healthz", timeout=1).read()
            return proc, url
        except OSError:
            time.sleep(0.05)
    proc.terminate()
    raise RuntimeError(f"{binary} serve did not start")


def stop(proc):
    """Stop a server started by :func:`serve` (None: nothing to stop)."""
    if proc is not None:
        proc.terminate()
        proc.wait()


def run_tests(namespace, title, setup, teardown, only=""):
    """Run every `test_*` function of `namespace` whose name contains `only`,
    between `setup()` and `teardown()`; print one line each and a count.
    Returns the exit status (1 if any failed)."""
    setup()
    failures = 0
    try:
        for name, fn in sorted(namespace.items()):
            if name.startswith("test_") and callable(fn) and only in name:
                t0 = time.perf_counter()
                try:
                    fn()
                    print(f"ok   {name} ({time.perf_counter() - t0:.1f} s)", flush=True)
                except Exception as e:  # report every test, then fail
                    failures += 1
                    print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
    finally:
        teardown()
    print(f"{title}: {failures} failure(s)")
    return 1 if failures else 0


def expect_errors(cases, error):
    """Each `(make, text)`: calling `make()` raises `error` whose message holds `text`."""
    for make, text in cases:
        try:
            make()
        except error as e:
            assert text in str(e), f"{text!r} not in {e}"
        else:
            raise AssertionError(f"no error for {text}")
