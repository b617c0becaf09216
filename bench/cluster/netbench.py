#!/usr/bin/env python3
"""Driver of netbench.sh: the three matmul shapes on `tra run --hosts`, with
BMM (either operand broadcast), CMM and RMM forced in turn (`--plan`, the same
plan shapes the optimizer builds) and as chosen by the optimizer.

For each shape it reports every plan's predicted network floats (the cost
model) and its measured time (median of --reps, runs interleaved), checks that
the optimizer's choice is the fastest measured or within 10% of it, and
compares the measured order with the cost model's (Kendall's tau).
"""
import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

SHAPES = {
    # name: (I, K, J) in blocks: X is I x K blocks, Y is K x J blocks.
    "two general matrices": (6, 6, 6),
    "a common large dimension": (2, 18, 2),
    "two large dimensions": (18, 2, 18),
}


def program(i, k, j, b, sites):
    return {
        "inputs": {"X": {"key_bounds": [i, k], "array_bounds": [b, b]}, "Y": {"key_bounds": [k, j], "array_bounds": [b, b]}},
        "nodes": {
            "XY": {"op": "join", "left": "X", "right": "Y", "left_keys": [1], "right_keys": [0], "kernel": "matMul"},
            "Z": {"op": "aggregate", "input": "XY", "group_by": [0, 2], "kernel": "matAdd"},
        },
        "outputs": ["Z"],
        "cluster": {"sites": sites},
    }


def join(left, right, keys=([1], [0])):
    return {"op": "local_join", "left": left, "right": right, "left_keys": keys[0], "right_keys": keys[1], "kernel": "matMul"}


def plans(prog, i, k, j):
    """The forced plans, as the optimizer writes them (tra optimize)."""
    inputs = prog["inputs"]
    agg = lambda x, g: {"op": "local_aggregate", "input": x, "group_by": g, "kernel": "matAdd"}
    shuf = lambda x, d: {"op": "shuffle", "input": x, "dims": d}
    out = {}
    out["BMM (broadcast X)"] = {"n0": shuf("Y", [1]), "n1": {"op": "broadcast", "input": "X"}, "n2": join("n1", "n0"), "Z": agg("n2", [0, 2])}
    out["BMM (broadcast Y)"] = {"n0": {"op": "broadcast", "input": "Y"}, "n1": shuf("X", [0]), "n2": join("n1", "n0"), "Z": agg("n2", [0, 2])}
    out["CMM"] = {"n0": shuf("Y", [0]), "n1": shuf("X", [1]), "n2": join("n1", "n0"), "n3": agg("n2", [0, 2]),
                  "n4": shuf("n3", [0, 1]), "Z": agg("n4", [0, 1])}
    out["RMM"] = {"n0": shuf("Y", [0]), "n1": {"op": "local_map", "input": "n0", "key": f"[0..{i}, k0, k1]"},
                  "n2": shuf("X", [1]), "n3": {"op": "local_map", "input": "n2", "key": f"[k0, k1, 0..{j}]"},
                  "n4": join("n3", "n1", ([0, 1, 2], [0, 1, 2])), "n5": agg("n4", [0, 2]), "n6": shuf("n5", [0, 1]),
                  "Z": agg("n6", [0, 1])}
    return {name: {"inputs": inputs, "nodes": nodes, "outputs": ["Z"]} for name, nodes in out.items()}


def kendall_tau(a, b):
    pairs = list(itertools.combinations(range(len(a)), 2))
    s = 0
    for x, y in pairs:
        s += np.sign(a[x] - a[y]) * np.sign(b[x] - b[y])
    return s / len(pairs) if pairs else 0.0


def concordance(pred, meas):
    """Pairs of plans the cost model tells apart (different predicted floats):
    how many the measured times order the same way."""
    pairs = [(x, y) for x, y in itertools.combinations(range(len(pred)), 2) if pred[x] != pred[y]]
    same = sum(1 for x, y in pairs if (pred[x] - pred[y]) * (meas[x] - meas[y]) > 0)
    return same, len(pairs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tra", required=True)
    ap.add_argument("--hosts", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--rate", default="?")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--block", type=int, default=256)
    ap.add_argument("--out")
    args = ap.parse_args()
    with open(args.hosts) as f:
        sites = len([l for l in f if l.strip() and not l.startswith("#")])
    b = args.block
    rng = np.random.default_rng(1)
    results = {"rate": args.rate, "processes": sites, "block": b, "reps": args.reps, "shapes": {}}
    ok_all = True
    for shape, (i, k, j) in SHAPES.items():
        d = os.path.join(args.work, shape.replace(" ", "-"))
        os.makedirs(d, exist_ok=True)
        X = rng.standard_normal((i * b, k * b), dtype=np.float32)
        Y = rng.standard_normal((k * b, j * b), dtype=np.float32)
        xp, yp, zp = (os.path.join(d, n) for n in ("x.npy", "y.npy", "z.npy"))
        np.save(xp, X)
        np.save(yp, Y)
        ref = X @ Y
        prog = program(i, k, j, b, sites)
        pp = os.path.join(d, "program.json")
        json.dump(prog, open(pp, "w"))
        configs = {"chosen by the optimizer": None}
        for name, plan in plans(prog, i, k, j).items():
            path = os.path.join(d, name.replace(" ", "_").replace("(", "").replace(")", "") + ".json")
            json.dump(plan, open(path, "w"))
            configs[name] = path
        times = {c: [] for c in configs}
        info = {}
        names = list(configs)
        for rep in range(args.reps):
            # Each rep starts with another plan, so that no plan always runs
            # first (after the previous shape's files) or right after the same one.
            for c in names[rep % len(names):] + names[:rep % len(names)]:
                plan = configs[c]
                cmd = [args.tra, "run", "--format", "json", pp, "--hosts", args.hosts, "--input", f"X={xp}", "--input", f"Y={yp}",
                       "--output", f"Z={zp}", "--dense"]
                if plan:
                    cmd += ["--plan", plan]
                t = time.perf_counter()
                r = subprocess.run(cmd, capture_output=True, text=True)
                wall = time.perf_counter() - t
                if r.returncode != 0:
                    print(f"{shape}, {c}: failed:\n{r.stderr}", file=sys.stderr)
                    sys.exit(1)
                s = json.loads(r.stdout)
                times[c].append(wall)
                info[c] = {"predicted_floats": s["network_floats_predicted"], "measured_floats": s["network_floats_measured"],
                           "strategy": s["strategy"], "run_ms": s["timings_ms"]["run"]}
                if rep == 0:
                    err = float(np.abs(np.load(zp) - ref).max())
                    assert err <= 1e-3 * float(np.abs(ref).max()), f"{shape}, {c}: wrong result (max error {err})"
                print(f"{shape:26s} {c:24s} rep {rep}: {wall:7.3f} s  ({s['network_floats_predicted']} floats predicted, "
                      f"{s['network_floats_measured']} measured)", flush=True)
        med = {c: statistics.median(v) for c, v in times.items()}
        fastest = min(med.values())
        chosen = med["chosen by the optimizer"]
        within = chosen <= 1.10 * fastest
        ok_all &= within
        forced = [c for c in configs if configs[c]]
        pred = [info[c]["predicted_floats"] for c in forced]
        tau = kendall_tau(pred, [med[c] for c in forced])
        same, distinct = concordance(pred, [med[c] for c in forced])
        results["shapes"][shape] = {
            "blocks": {"X": [i, k], "Y": [k, j]},
            "plans": {c: {**info[c], "median_s": med[c], "times_s": times[c]} for c in configs},
            "chosen_strategy": info["chosen by the optimizer"]["strategy"],
            "chosen_over_fastest": chosen / fastest,
            "chosen_within_10_percent": within,
            "kendall_tau_predicted_vs_measured": tau,
            "pairs_ordered_as_predicted": [same, distinct],
        }
    print()
    print(f"rate {args.rate} per link and direction, {sites} processes, blocks {b}x{b} f32, median of {args.reps}")
    for shape, r in results["shapes"].items():
        print(f"\n## {shape} (X {r['blocks']['X']} blocks, Y {r['blocks']['Y']} blocks)")
        print(f"| plan | predicted floats | measured floats | time (s) |")
        print(f"|---|---:|---:|---:|")
        for c, p in sorted(r["plans"].items(), key=lambda kv: kv[1]["median_s"]):
            print(f"| {c} | {p['predicted_floats']} | {p['measured_floats']} | {p['median_s']:.3f} |")
        print(f"chosen: {r['chosen_strategy']}; {r['chosen_over_fastest']:.3f}x the fastest "
              f"({'within 10%' if r['chosen_within_10_percent'] else 'NOT within 10%'}); "
              f"plans the cost model tells apart, ordered the same by measured time: "
              f"{r['pairs_ordered_as_predicted'][0]}/{r['pairs_ordered_as_predicted'][1]} pairs "
              f"(Kendall tau {r['kendall_tau_predicted_vs_measured']:.2f}, ties in the prediction count 0)")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
