#!/usr/bin/env python3
"""The ML workloads (softmax, layer normalization, a logistic-regression step,
an attention head) run by `tra run` on worker threads next to numpy on the
same machine, in one run: the chosen plan, the floats it moves, the wall
time of each and their ratio, and the largest difference from numpy.

    cargo build --release -p tra-api --bin tra
    python3 bench/ml_workloads.py [--tra target/release/tra] [--sites 4] [--threads 2] [--scale 1]

`--scale` multiplies the row counts (1: sizes a 2-core machine runs in
seconds). numpy's time is the best of three; tra's is `timings_ms.total` of
its report (the execution, without reading the .npy files).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import ml_programs as ml  # noqa: E402


def best_of(f, n=3):
    best = float("inf")
    for _ in range(n):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return best * 1000


def workloads(scale, sites, rng):
    r = scale
    x = rng.standard_normal((8192 * r, 2048))
    yield ("softmax", ml.softmax(8192 * r, 2048, 8, 2, sites), {"X": x}, "out", lambda: ml.numpy_softmax(x))
    x2 = rng.standard_normal((65536 * r, 512))
    g, b = rng.standard_normal(512), rng.standard_normal(512)
    yield ("layernorm", ml.layernorm(65536 * r, 512, 16, 1, sites), {"X": x2, "G": g, "B": b}, "Y",
           lambda: ml.numpy_layernorm(x2, g, b))
    x3 = rng.standard_normal((262144 * r, 256))
    y3 = (rng.random((262144 * r, 1)) > 0.5).astype(float)
    w3 = rng.standard_normal((256, 1)) * 0.05
    yield ("logreg-step", ml.logreg_step(262144 * r, 256, 32, sites), {"X": x3, "Y": y3, "W": w3}, "Wn",
           lambda: ml.numpy_logreg_step(x3, y3, w3)[0])
    q, k, v = (rng.standard_normal((2048 * r, 128)) for _ in range(3))
    yield ("attention-head", ml.attention_head(2048 * r, 128, 4, sites), {"Q": q, "K": k, "V": v}, "O",
           lambda: ml.numpy_attention(q, k, v))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tra", default=os.path.join(ROOT, "target", "release", "tra"))
    ap.add_argument("--sites", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--scale", type=int, default=1)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for name, prog, data, out, numpy_fn in workloads(args.scale, args.sites, rng):
            pfile = os.path.join(d, "p.json")
            with open(pfile, "w") as f:
                json.dump(prog, f)
            cmd = [args.tra, "run", "--format", "json", pfile, "--no-progress", "--threads", str(args.threads)]
            for n, a in data.items():
                np.save(os.path.join(d, n + ".npy"), a)
                cmd += ["--input", f"{n}={os.path.join(d, n + '.npy')}"]
            cmd += ["--output", f"{out}={os.path.join(d, 'out.npy')}"]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                print(f"{name}: tra run failed: {r.stderr}", file=sys.stderr)
                return 1
            rep = json.loads(r.stdout)
            want = numpy_fn()
            numpy_ms = best_of(numpy_fn)
            got = np.load(os.path.join(d, "out.npy"))
            err = float(np.abs(got - want).max())
            tra_ms = rep["timings_ms"]["total"]
            rows.append((name, rep["strategy"], rep["network_floats_measured"], tra_ms, numpy_ms, err))
    print(f"{'workload':16} {'tra ms':>9} {'numpy ms':>9} {'tra/numpy':>9} {'floats moved':>13} {'max |diff|':>10}  plan")
    for name, plan, floats, t, n, err in rows:
        print(f"{name:16} {t:9.1f} {n:9.1f} {t / n:9.2f} {floats:13,} {err:10.1e}  {plan}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
