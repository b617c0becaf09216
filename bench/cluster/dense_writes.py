#!/usr/bin/env python3
"""A dense output written by block rows or by block columns, on processes.

The two mirror plans of `16×2·2×16` blocks (256² each, `f32`): `X` shuffled
by row and `Y` broadcast make the output by block rows (each site fills
whole pages of the file); `X` broadcast and `Y` shuffled by column make it
by block columns (every 4 KiB page of the 4096² file holds 1 KiB runs of
both sites). Runs them interleaved with `tra run --processes 2 --output
Z=….npy` and prints, per layout, the run less its loading (median and
least) and the writing threads' busy time (`site_write_ms`: the busiest
site, and both summed). The time model prices the two alike
(`tests/tests/time_choice.rs`).

    python3 bench/cluster/dense_writes.py [--pairs 12] [--tra target/release/tra]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INPUTS = {"X": {"key_bounds": [16, 2], "array_bounds": [256, 256]},
          "Y": {"key_bounds": [2, 16], "array_bounds": [256, 256]}}
JOIN = {"op": "local_join", "left": "n1", "right": "n0", "left_keys": [1], "right_keys": [0], "kernel": "matMul"}
AGG = {"op": "local_aggregate", "input": "n2", "group_by": [0, 2], "kernel": "matAdd"}
PLANS = {
    "by block rows": {"n0": {"op": "broadcast", "input": "Y"}, "n1": {"op": "shuffle", "input": "X", "dims": [0]},
                      "n2": JOIN, "Z": AGG},
    "by block columns": {"n0": {"op": "shuffle", "input": "Y", "dims": [1]}, "n1": {"op": "broadcast", "input": "X"},
                         "n2": JOIN, "Z": AGG},
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tra", default=os.path.join(ROOT, "target", "release", "tra"))
    ap.add_argument("--pairs", type=int, default=12)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        program = {"inputs": INPUTS,
                   "nodes": {"XY": {"op": "join", "left": "X", "right": "Y", "left_keys": [1], "right_keys": [0],
                                    "kernel": "matMul"},
                             "Z": {"op": "aggregate", "input": "XY", "group_by": [0, 2], "kernel": "matAdd"}},
                   "outputs": ["Z"], "cluster": {"sites": 2}}
        path = os.path.join(d, "program.json")
        with open(path, "w") as f:
            json.dump(program, f)
        rng = np.random.default_rng(7)
        ins = []
        for n, decl in INPUTS.items():
            np.save(os.path.join(d, f"{n}.npy"),
                    rng.standard_normal(decl["key_bounds"] + decl["array_bounds"], dtype=np.float32))
            ins += ["--input", f"{n}={os.path.join(d, n + '.npy')}"]
        files = {}
        for name, nodes in PLANS.items():
            files[name] = os.path.join(d, name.replace(" ", "-") + ".json")
            with open(files[name], "w") as f:
                json.dump({"inputs": INPUTS, "nodes": nodes, "outputs": ["Z"]}, f)
        runs = {name: [] for name in PLANS}
        sums = {}
        for _ in range(args.pairs):
            for name, plan in files.items():
                out = subprocess.run(
                    [args.tra, "run", path, *ins, "--processes", "2", "--plan", plan, "--format", "json",
                     "--output", f"Z={os.path.join(d, 'out.npy')}"],
                    check=True, capture_output=True, text=True).stdout
                rep = json.loads(out)
                t = rep["timings_ms"]
                writing = rep["outputs"]["Z"].get("site_write_ms") or [0.0]
                runs[name].append((t["run"] - t.get("load", 0.0), max(writing), sum(writing)))
                sums.setdefault(name, rep["outputs"]["Z"]["checksum"]["sum"])
        a, b = sums.values()
        assert abs(a - b) <= 1e-3 * max(abs(a), 1.0), f"the plans disagree: {a} vs {b}"
        print(f"{args.pairs} interleaved pairs, `tra run --processes 2`, 64 MiB dense output")
        print("| layout | run less loading, median ms | least ms | busiest writer, median ms | both writers, median ms |")
        print("|---|---:|---:|---:|---:|")
        for name, rs in runs.items():
            med = lambda i: statistics.median(r[i] for r in rs)
            print(f"| {name} | {med(0):.1f} | {min(r[0] for r in rs):.1f} | {med(1):.1f} | {med(2):.1f} |")


if __name__ == "__main__":
    main()
