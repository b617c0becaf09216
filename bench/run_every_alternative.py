"""Runs every alternative plan of a suite of shapes on `--processes N` timely
processes over loopback, under both cost models, and compares the predicted
seconds with the measured ones.

For each shape and each cost model (`network`, `time`): `tra optimize
--format json --cost-model M --profile P` gives the alternatives (one per
strategy) with `cost.seconds`; each alternative is run with `tra run
--processes N --alternative LABEL` on random float32 inputs, best of --reps;
the measured time is the dataflow's wall time less input loading
(`timings_ms.run - timings_ms.load`). Reported per shape and model: every
alternative's predicted and measured seconds, the regret (the chosen plan's
measured time over the fastest measured), and Kendall's tau between
predicted and measured over the pairs the model tells apart (predictions more
than 5% apart).

Run `tra calibrate --processes N > profile.json` first and pass it with
--profile (without it the API's default profile is used).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("--tra", default="target/release/tra")
ap.add_argument("--processes", type=int, default=2)
ap.add_argument("--profile", default=None)
ap.add_argument("--reps", type=int, default=3)
ap.add_argument("--block", type=int, default=256)
ap.add_argument("--json", action="store_true")
args = ap.parse_args()
b = args.block


def matmul(kx, ky, px=None, py=None):
    x = {"key_bounds": kx, "array_bounds": [b, b]}
    y = {"key_bounds": ky, "array_bounds": [b, b]}
    if px is not None:
        x["placement"] = px
    if py is not None:
        y["placement"] = py
    return {"inputs": {"X": x, "Y": y},
            "nodes": {"XY": {"op": "join", "left": "X", "right": "Y", "left_keys": [1], "right_keys": [0],
                             "kernel": "matMul"},
                      "Z": {"op": "aggregate", "input": "XY", "group_by": [0, 2], "kernel": "matAdd"}},
            "outputs": ["Z"]}


SHAPES = {
    "square 4×4·4×4": matmul([4, 4], [4, 4]),
    "common large dim 1×8·8×1": matmul([1, 8], [8, 1]),
    "two large dims 8×1·1×8": matmul([8, 1], [1, 8]),
    "skewed 2×8·8×2 (hashed)": matmul([2, 8], [8, 2], {"hash": [0]}, {"hash": [1]}),
    "thin 8×2·2×1": matmul([8, 2], [2, 1]),
    "broadcast from one site": matmul([4, 4], [4, 1], {"hash": []}, {"hash": []}),
    "diag(X+Y)": {
        "inputs": {"X": {"key_bounds": [4, 4], "array_bounds": [b, b]},
                   "Y": {"key_bounds": [4, 4], "array_bounds": [b, b]}},
        "nodes": {"S": {"op": "join", "left": "X", "right": "Y", "left_keys": [0, 1], "right_keys": [0, 1],
                        "kernel": "matAdd"},
                  "D": {"op": "filter", "input": "S", "predicate": "k0 == k1"},
                  "Z": {"op": "transform", "input": "D", "kernel": "diag"}},
        "outputs": ["Z"]},
}


def sh(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}\n{r.stderr}")
    return r.stdout


def kendall(pred, meas):
    agree = disagree = 0
    for i in range(len(pred)):
        for j in range(i + 1, len(pred)):
            if abs(pred[i] - pred[j]) <= 0.05 * max(pred[i], pred[j]):
                continue
            s = (pred[i] - pred[j]) * (meas[i] - meas[j])
            agree += s > 0
            disagree += s < 0
    n = agree + disagree
    return None if n == 0 else (agree - disagree) / n


def main():
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for name, prog in SHAPES.items():
            prog = dict(prog)
            prog["cluster"] = {"sites": args.processes}
            path = os.path.join(d, "p.json")
            with open(path, "w") as f:
                json.dump(prog, f)
            ins = []
            rng = np.random.default_rng(7)
            for n, decl in prog["inputs"].items():
                a = rng.standard_normal(decl["key_bounds"] + decl["array_bounds"], dtype=np.float32)
                fp = os.path.join(d, f"{n}.npy")
                np.save(fp, a)
                ins += ["--input", f"{n}={fp}"]
            for model in ["network", "time"]:
                opt = [args.tra, "optimize", path, "--format", "json", "--cost-model", model]
                if args.profile:
                    opt += ["--profile", args.profile]
                answer = json.loads(sh(opt))
                alts = answer["alternatives"]
                pred, meas = [], []
                for a in alts:
                    best = None
                    for _ in range(args.reps):
                        run = [args.tra, "run", path, *ins, "--processes", str(args.processes), "--cost-model", model,
                               "--alternative", a["label"], "--format", "json",
                               "--output", "Z=" + os.path.join(d, "z.npy")]
                        if args.profile:
                            run += ["--profile", args.profile]
                        rep = json.loads(sh(run))
                        t = rep["timings_ms"]
                        s = (t["run"] - t.get("load", 0.0)) / 1000.0
                        best = s if best is None else min(best, s)
                    pred.append(a["cost"]["seconds"])
                    meas.append(best)
                fastest = min(meas)
                rows.append({"shape": name, "model": model, "labels": [a["label"] for a in alts],
                             "predicted_s": pred, "measured_s": meas,
                             "regret": meas[0] / fastest if fastest > 0 else None,
                             "kendall_tau": kendall(pred, meas)})
                print(f"{name:28} {model:8} regret {rows[-1]['regret']:.2f}  tau {rows[-1]['kendall_tau']}",
                      file=sys.stderr)
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print("| shape | model | alternative | predicted s | measured s |")
    print("|---|---|---|---|---|")
    for r in rows:
        for i, lab in enumerate(r["labels"]):
            mark = " (chosen)" if i == 0 else ""
            print(f"| {r['shape']} | {r['model']} | {lab[:50]}{mark} | {r['predicted_s'][i]:.4g} | {r['measured_s'][i]:.4g} |")
        tau = "—" if r["kendall_tau"] is None else f"{r['kendall_tau']:.2f}"
        print(f"| {r['shape']} | {r['model']} | **regret {r['regret']:.2f}, tau {tau}** | | |")


main()
