#!/usr/bin/env python3
"""tra on 2 processes vs dask.distributed on a 2-process LocalCluster, in one run.

The workload: Z = X @ Y for two 4096 x 4096 float32 matrices, cut into 1024 x 1024
blocks (dask: chunks of 1024), on this machine.

- numpy: X @ Y in memory (the reference time, and the reference result).
- dask.distributed: a LocalCluster of 2 worker processes (threads shared out as
  cores / 2 each), started beforehand (its start-up is not counted); timed from
  the numpy arrays in the client (sent with `da.from_array`, chunks 1024) to the
  result gathered back as a numpy array (`.compute()`).
- tra: `tra run matmul.json --processes 2 --input X=x.npy --input Y=y.npy
  --output Z=z.npy --dense`, timed as a whole (starting the 2 job processes,
  optimizing, each process reading its own blocks from the .npy files, the
  timely dataflow, process 0 writing the dense result to a .npy file).

Every system runs `--reps` times (default 3), interleaved; the median is
reported, and the results are checked against numpy's.

    python3 bench/cluster/dask_compare.py [--tra target/release/tra] [--reps 3] [--n 4096] [--block 1024]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tra", default=os.path.join(os.path.dirname(__file__), "../../target/release/tra"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--block", type=int, default=1024)
    ap.add_argument("--json", help="write the figures here too")
    args = ap.parse_args()
    n, b = args.n, args.block
    k = n // b
    cores = os.cpu_count() or 1

    import dask
    import dask.array as da
    from dask.distributed import Client, LocalCluster

    tmp = tempfile.mkdtemp(prefix="tra-dask-")
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, n), dtype=np.float32)
    Y = rng.standard_normal((n, n), dtype=np.float32)
    xp, yp, zp = (os.path.join(tmp, f) for f in ("x.npy", "y.npy", "z.npy"))
    np.save(xp, X)
    np.save(yp, Y)
    prog = {
        "inputs": {"X": {"key_bounds": [k, k], "array_bounds": [b, b]}, "Y": {"key_bounds": [k, k], "array_bounds": [b, b]}},
        "nodes": {
            "XY": {"op": "join", "left": "X", "right": "Y", "left_keys": [1], "right_keys": [0], "kernel": "matMul"},
            "Z": {"op": "aggregate", "input": "XY", "group_by": [0, 2], "kernel": "matAdd"},
        },
        "outputs": ["Z"],
    }
    pp = os.path.join(tmp, "matmul.json")
    with open(pp, "w") as f:
        json.dump(prog, f)

    times = {"numpy": [], "dask": [], "tra": []}
    ref = None
    summary = None
    cluster = LocalCluster(n_workers=2, threads_per_worker=max(1, cores // 2), processes=True, dashboard_address=None)
    client = Client(cluster)
    try:
        for rep in range(args.reps):
            t = time.perf_counter()
            Z = X @ Y
            times["numpy"].append(time.perf_counter() - t)
            ref = Z

            t = time.perf_counter()
            dx = da.from_array(X, chunks=(b, b))
            dy = da.from_array(Y, chunks=(b, b))
            Zd = (dx @ dy).compute()
            times["dask"].append(time.perf_counter() - t)
            err_d = float(np.abs(Zd - ref).max())

            t = time.perf_counter()
            out = subprocess.run(
                [args.tra, "run", pp, "--processes", "2", "--input", f"X={xp}", "--input", f"Y={yp}", "--output", f"Z={zp}", "--dense"],
                check=True, capture_output=True, text=True,
            )
            times["tra"].append(time.perf_counter() - t)
            summary = json.loads(out.stdout)
            Zt = np.load(zp)
            err_t = float(np.abs(Zt - ref).max())
            print(f"rep {rep}: numpy {times['numpy'][-1]:.3f} s, dask {times['dask'][-1]:.3f} s (max err {err_d:.2e}), "
                  f"tra {times['tra'][-1]:.3f} s (max err {err_t:.2e})", flush=True)
            scale = float(np.abs(ref).max())
            assert err_d < 1e-4 * scale and err_t < 1e-4 * scale, "results differ from numpy's"
    finally:
        client.close()
        cluster.close()

    med = {k2: statistics.median(v) for k2, v in times.items()}
    result = {
        "n": n, "block": b, "cores": cores, "reps": args.reps,
        "median_s": med,
        "dask_over_numpy": med["dask"] / med["numpy"],
        "tra_over_numpy": med["tra"] / med["numpy"],
        "tra_speedup_over_dask": med["dask"] / med["tra"],
        "tra_plan": summary and summary.get("strategy"),
        "tra_timings_ms": summary and summary.get("timings_ms"),
        "tra_network_floats": summary and [summary.get("network_floats_measured"), summary.get("network_floats_predicted")],
        "versions": {"numpy": np.__version__, "dask": dask.__version__},
    }
    print(json.dumps(result, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    goal = result["tra_speedup_over_dask"] >= 2.5
    print(f"tra is {result['tra_speedup_over_dask']:.2f}x faster than dask.distributed end to end (goal >= 2.5x): "
          f"{'met' if goal else 'NOT met'}")
    return 0 if goal else 1


if __name__ == "__main__":
    sys.exit(main())
