#!/usr/bin/env python3
"""Mutation fuzzing of the `tra` command line, from the examples' programs.

Generated programs have blind spots (a rule's crash once hid from seventeen
thousand of them); programs a user gets slightly wrong, or too large, find
other things. Each mode starts from examples/*.json and reports every case
that breaks a promise, with the program that did it:

- `cli`: every example with 1-3 mutations (a field deleted, a value swapped
  for an odd one — a huge or negative number, a wrong type, a bogus name —,
  a number scaled, a node reference swapped), through `tra check`, `tra
  optimize` and `tra optimize --cost-model time`. Promise: exit status 0 or 1,
  no panic, no "internal error", and done within the limits (`--optimize-ms 3000`:
  nothing may take 10 s).
- `deadline`: every example and both cost models under `--optimize-ms` from 1 ms
  up to the first answer. Promise: exit 0, or 1 with `error
  [limit_exceeded]` (wherever the deadline strikes: typing, adding the
  program to the e-graph, saturation, extraction, scoring).
- `runtimes`: the examples shrunk (1-5 blocks per key dim, blocks of 1-8), some
  mutated, run with `tra run` on worker threads (1-5 sites) and on the
  cluster runtime (`--processes 1-3`) on the same random integer inputs.
  Promise: the same outputs, or a clear refusal from both.

Usage: python3 scripts/fuzz.py MODE [--tra PATH] [--seed S] [--n N]
(default tra: target/release/tra; exit status 1 if anything broke a promise).
Found so far: an input with more keys than the per-site loads enumerate
failing after saturation as an internal error; per-site layouts not counted
against the analysis memory; a deadline passing while the program was added
to the e-graph ending `tra optimize` with status 101 and no message; one
passing while a plan was scored reported as an internal error.
"""

import argparse
import copy
import glob
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
WEIRD = [0, -1, 1, 2, 3, 7, 2**31, 2**32 + 1, 2**63 - 1, -2**63, 10**30, 1.5, -0.0, 1e308, 0.5,
         "", "x", "k0", "k0 + k1", "matMul", "matAdd", None, True, [], [0], [1, 2], [2**40], {}, {"hash": [0]},
         {"hash": [5]}, "replicated", [0, 0], [-1], [1, 0], "(k0, k0)", "k9", "relu", "exp", "sum", "bogus"]


def examples():
    return [(os.path.basename(f), json.load(open(f))) for f in sorted(glob.glob(os.path.join(ROOT, "examples", "*.json")))]


def paths(o, pre=()):
    yield pre
    if isinstance(o, dict):
        for k, v in o.items():
            yield from paths(v, pre + (k,))
    elif isinstance(o, list):
        for i, v in enumerate(o):
            yield from paths(v, pre + (i,))


def mutate(o, rng):
    """`o` with 1-3 mutations."""
    o = copy.deepcopy(o)
    for _ in range(rng.randint(1, 3)):
        ps = list(paths(o))[1:]
        if not ps:
            break
        p = rng.choice(ps)
        parent = o
        for k in p[:-1]:
            parent = parent[k]
        key, r = p[-1], rng.random()
        if r < 0.5:
            parent[key] = copy.deepcopy(rng.choice(WEIRD))
        elif r < 0.65 and isinstance(parent, dict):
            del parent[key]
        elif r < 0.8:
            v = parent[key]
            if isinstance(v, int) and not isinstance(v, bool):
                parent[key] = v * rng.choice([0, 2, 100, 10000, -1])
            elif isinstance(v, list) and v:
                parent[key] = v + v if rng.random() < .5 else v[:-1]
            else:
                parent[key] = copy.deepcopy(rng.choice(WEIRD))
        elif isinstance(parent, dict) and isinstance(parent[key], str):
            ins, nds = o.get("inputs", {}), o.get("nodes", {})
            names = (list(ins) if isinstance(ins, dict) else []) + (list(nds) if isinstance(nds, dict) else [])
            if names:
                parent[key] = rng.choice(names)
    return o


def cli(args, rng):
    bad, bases = 0, [p for _, p in examples()]
    for _ in range(args.n):
        body = json.dumps(mutate(rng.choice(bases), rng))
        for cmd in (["check", "-"], ["optimize", "-", "--format", "json", "--optimize-ms", "3000"],
                    ["optimize", "-", "--cost-model", "time", "--optimize-ms", "3000"]):
            t = time.time()
            try:
                r = subprocess.run([args.tra] + cmd, input=body, capture_output=True, text=True, timeout=20)
            except subprocess.TimeoutExpired:
                print("TIMEOUT", cmd[0], body[:3000])
                bad += 1
                continue
            took = time.time() - t
            if r.returncode not in (0, 1) or "panicked" in r.stderr or "internal error" in r.stderr.lower() or took > 10:
                bad += 1
                print("BAD", " ".join(cmd), "status", r.returncode, f"{took:.1f} s", r.stderr[-600:].replace("\n", " | "))
                print("   ", body[:2500])
    return bad, f"{args.n} programs, 3 commands each"


def deadline(args, rng):
    bad = runs = 0
    steps = [1, 2, 3, 4, 5, 6, 8, 10, 13, 16, 20, 25, 30, 40, 50, 65, 80, 100, 130, 160, 200, 250, 320, 400, 500,
             650, 800, 1000, 1500, 2000, 3000, 5000]
    with tempfile.TemporaryDirectory() as d:
        for name, p in examples():
            f = os.path.join(d, name)
            json.dump(p, open(f, "w"))
            for model in ("network", "time"):
                for ms in steps:
                    r = subprocess.run([args.tra, "optimize", f, "--optimize-ms", str(ms), "--cost-model", model],
                                       capture_output=True, text=True, timeout=120)
                    runs += 1
                    if r.returncode == 0:
                        break
                    if r.returncode != 1 or not r.stderr.startswith("error [limit_exceeded]"):
                        bad += 1
                        print("BAD", name, model, f"{ms} ms", "status", r.returncode, r.stderr[-300:].replace("\n", " | "))
    return bad, f"{runs} runs"


def runtimes(args, rng):
    import numpy as np
    bad = ran = refused = 0
    bases = [p for _, p in examples()]
    tmp = tempfile.mkdtemp(prefix="tra-fuzz-")
    try:
        for i in range(args.n):
            kb, ab = rng.randint(1, 5), rng.randint(1, 8)
            p = copy.deepcopy(rng.choice(bases))
            for d in p["inputs"].values():
                d["key_bounds"] = [min(v, kb) for v in d["key_bounds"]]
                d["array_bounds"] = [min(v, ab) for v in d["array_bounds"]]
            if rng.random() < 0.4:
                p = mutate(p, rng)
            pp = os.path.join(tmp, "p.json")
            json.dump(p, open(pp, "w"))
            if subprocess.run([args.tra, "check", pp], capture_output=True).returncode != 0:
                refused += 1
                continue
            data = np.random.default_rng(i)
            inputs = []
            for name, d in p["inputs"].items():
                x = data.integers(-3, 4, size=tuple(d["key_bounds"]) + tuple(d["array_bounds"])).astype(np.float64)
                f = os.path.join(tmp, f"in-{name}.npy")
                np.save(f, x)
                inputs += ["--input", f"{name}={f}"]
            outs = {}
            for mode, extra in (("threads", ["--sites", str(rng.randint(1, 5))]),
                                ("cluster", ["--processes", str(rng.randint(1, 3))])):
                wanted = []
                for o in p["outputs"]:
                    wanted += ["--output", f"{o}={os.path.join(tmp, f'{mode}-{o}.npy')}", "--layout", f"{o}=relation"]
                model = rng.choice(["network", "time"])
                r = subprocess.run([args.tra, "run", pp, "--no-progress", "--cost-model", model] + inputs + wanted + extra,
                                   capture_output=True, text=True, timeout=300)
                if r.returncode != 0:
                    if r.returncode != 1 or "panicked" in r.stderr or "internal" in r.stderr.lower():
                        bad += 1
                        print("BAD", mode, "status", r.returncode, r.stderr[-500:].replace("\n", " | "))
                        print("   ", json.dumps(p)[:1500])
                    outs[mode] = None
                    continue
                outs[mode] = {o: np.load(os.path.join(tmp, f"{mode}-{o}.npy")) for o in p["outputs"]}
            ran += 1
            if (outs["threads"] is None) != (outs["cluster"] is None):
                bad += 1
                print("ONE REFUSED", {m: v is None for m, v in outs.items()}, json.dumps(p)[:1500])
            elif outs["threads"] is not None:
                for o in p["outputs"]:
                    a, b = outs["threads"][o], outs["cluster"][o]
                    if a.shape != b.shape or not np.allclose(a, b, rtol=1e-9, atol=1e-9, equal_nan=True):
                        bad += 1
                        print("DIFF", o, a.shape, b.shape, json.dumps(p)[:1500])
    finally:
        shutil.rmtree(tmp)
    return bad, f"{ran} programs run on both runtimes, {refused} refused by tra check"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=["cli", "deadline", "runtimes"])
    ap.add_argument("--tra", default=os.path.join(ROOT, "target", "release", "tra"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n", type=int, default=300, help="programs (cli, runtimes)")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    bad, what = {"cli": cli, "deadline": deadline, "runtimes": runtimes}[args.mode](args, rng)
    print(f"{args.mode}: {what}; {bad} broke a promise")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
