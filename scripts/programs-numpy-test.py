#!/usr/bin/env python3
"""`tra run` on programs users write, against numpy, on every site count.

Each program is a TRA program over blocked matrices that computes something
numpy computes in one line: the diagonal of a product (`diag(A·B)`, which once
crashed the optimizer, and its minimal form), the transpose and the row sums
of a product, `relu(X·Y + Z)`, a product with a block mask, a chain of three
bracketed both ways, numpy's kernels (a broadcasting sub, einMax, einMin, a
where by gt and selectIf), and the ML workloads of examples/ scaled down
(softmax, layer normalization, a logistic-regression step, an attention head;
built by scripts/ml_programs.py). For sites 1-7 it runs

    tra run --format json PROGRAM --input A=a.npy ... --output OUT=out.npy --dense --sites S

on worker threads, then again with `--alternative` for every strategy the
optimizer offers and with `--plan` on the plan `tra optimize` wrote, and
compares out.npy with numpy. It also checks that `tra run` refuses a garbage
plan file. Exit status 1 on any mismatch.

Usage: python3 scripts/programs-numpy-test.py [--tra PATH] [--sites 1-7]
(without --tra it builds and uses ./target/debug/tra).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import ml_programs  # noqa: E402  (the ML workloads, shared with examples/)


def blocks(name, keys, block):
    return {name: {"key_bounds": keys, "array_bounds": block}}


def join(l, r, lk, rk, k):
    return {"op": "join", "left": l, "right": r, "left_keys": lk, "right_keys": rk, "kernel": k}


def product(nodes, name, l, r):
    nodes[name + "_j"] = join(l, r, [1], [0], "matMul")
    nodes[name] = {"op": "aggregate", "input": name + "_j", "group_by": [0, 2], "kernel": "matAdd"}
    return name


def block_mask(m, b, keep):
    """`m` with the b×b blocks whose block key (i, j) fails `keep` zeroed."""
    out = m.copy()
    for i in range(m.shape[0] // b):
        for j in range(m.shape[1] // b):
            if not keep(i, j):
                out[i * b:(i + 1) * b, j * b:(j + 1) * b] = 0
    return out


def cases():
    """(name, program, {input: dense array}, output, expected dense array, layout)."""
    rng = np.random.default_rng(13)
    out = []

    # diag(A·B): the program of the report, 2×2 blocks of 6×6.
    a, b = rng.standard_normal((12, 12)), rng.standard_normal((12, 12))
    nodes = {}
    product(nodes, "S", "A", "B")
    nodes["F"] = {"op": "filter", "input": "S", "predicate": "k0 == k1"}
    nodes["R"] = {"op": "rekey", "input": "F", "key": "[k0]"}
    nodes["D"] = {"op": "transform", "input": "R", "kernel": "diag"}
    prog = {"inputs": {**blocks("A", [2, 2], [6, 6]), **blocks("B", [2, 2], [6, 6])}, "nodes": nodes, "outputs": ["D"]}
    out.append(("diag(A·B)", prog, {"A": a, "B": b}, "D", np.diag(a @ b), "dense"))

    # Its minimal form: aggregate by both dims of [2, 1] blocks, rekey [k0]
    # (drops the dim of bound 1), scale(2). Output key arity 1, block rank 2:
    # the relation layout [2, 3, 4].
    x = rng.standard_normal((6, 4))
    prog = {"inputs": blocks("X", [2, 1], [3, 4]),
            "nodes": {"S": {"op": "aggregate", "input": "X", "group_by": [0, 1], "kernel": "matAdd"},
                      "R": {"op": "rekey", "input": "S", "key": "[k0]"},
                      "T": {"op": "transform", "input": "R", "kernel": "scale(2)"}},
            "outputs": ["T"]}
    out.append(("minimal form", prog, {"X": x}, "T", 2 * x.reshape(2, 3, 4), "relation"))

    # The transpose of a product: rekey [k1, k0], transpose every block.
    a, b = rng.standard_normal((6, 8)), rng.standard_normal((8, 9))
    nodes = {}
    product(nodes, "P", "A", "B")
    nodes["Q"] = {"op": "rekey", "input": "P", "key": "[k1, k0]"}
    nodes["T"] = {"op": "transform", "input": "Q", "kernel": "transpose"}
    prog = {"inputs": {**blocks("A", [2, 2], [3, 4]), **blocks("B", [2, 3], [4, 3])}, "nodes": nodes, "outputs": ["T"]}
    out.append(("transpose(A·B)", prog, {"A": a, "B": b}, "T", (a @ b).T, "dense"))

    # Row sums of a product: rowSum of every block, then summed over block columns.
    nodes = {}
    product(nodes, "P", "A", "B")
    nodes["r"] = {"op": "transform", "input": "P", "kernel": "rowSum"}
    nodes["rows"] = {"op": "aggregate", "input": "r", "group_by": [0], "kernel": "matAdd"}
    prog = {"inputs": {**blocks("A", [2, 2], [3, 4]), **blocks("B", [2, 3], [4, 3])}, "nodes": nodes, "outputs": ["rows"]}
    out.append(("row sums of A·B", prog, {"A": a, "B": b}, "rows", (a @ b).sum(axis=1), "dense"))

    # relu(X·Y + Z).
    x, y, z = rng.standard_normal((8, 6)), rng.standard_normal((6, 4)), rng.standard_normal((8, 4))
    nodes = {}
    product(nodes, "P", "X", "Y")
    nodes["s"] = join("P", "Z", [0, 1], [0, 1], "matAdd")
    nodes["H"] = {"op": "transform", "input": "s", "kernel": "relu"}
    prog = {"inputs": {**blocks("X", [4, 3], [2, 2]), **blocks("Y", [3, 2], [2, 2]), **blocks("Z", [4, 2], [2, 2])},
            "nodes": nodes, "outputs": ["H"]}
    out.append(("relu(X·Y + Z)", prog, {"X": x, "Y": y, "Z": z}, "H", np.maximum(x @ y + z, 0), "dense"))

    # A product with a block mask (upper block triangle), on a masked operand too.
    a, b = rng.standard_normal((9, 9)), rng.standard_normal((9, 9))
    nodes = {"La": {"op": "filter", "input": "A", "predicate": "k0 >= k1"}}
    product(nodes, "P", "La", "B")
    nodes["U"] = {"op": "filter", "input": "P", "predicate": "k0 <= k1"}
    prog = {"inputs": {**blocks("A", [3, 3], [3, 3]), **blocks("B", [3, 3], [3, 3])}, "nodes": nodes, "outputs": ["U"]}
    want = block_mask(block_mask(a, 3, lambda i, j: i >= j) @ b, 3, lambda i, j: i <= j)
    out.append(("masked product", prog, {"A": a, "B": b}, "U", want, "dense"))

    # A chain of three, bracketed both ways.
    a, b, c = rng.standard_normal((4, 6)), rng.standard_normal((6, 6)), rng.standard_normal((6, 2))
    ins = {**blocks("A", [2, 3], [2, 2]), **blocks("B", [3, 3], [2, 2]), **blocks("C", [3, 1], [2, 2])}
    left, right = {}, {}
    product(left, "AB", "A", "B")
    product(left, "ABC", "AB", "C")
    product(right, "BC", "B", "C")
    product(right, "ABC", "A", "BC")
    for name, nodes in [("(A·B)·C", left), ("A·(B·C)", right)]:
        prog = {"inputs": ins, "nodes": nodes, "outputs": ["ABC"]}
        out.append((name, prog, {"A": a, "B": b, "C": c}, "ABC", a @ b @ c, "dense"))

    # Masks: a filtered relation (holes) joined with a full one is an inner
    # join on keys; the result's frontier is that of the keys it has.
    x, y = rng.standard_normal((6, 4)), rng.standard_normal((6, 4))
    upper = lambda i, j: i <= j  # noqa: E731
    prog = {"inputs": {**blocks("X", [3, 2], [2, 2]), **blocks("Y", [3, 2], [2, 2])},
            "nodes": {"F": {"op": "filter", "input": "X", "predicate": "k0 <= k1"},
                      "J": join("F", "X", [0, 1], [0, 1], "elemMul"),
                      "D": join("Y", "F", [0, 1], [0, 1], "matSub")},
            "outputs": ["J", "D"]}
    # Keys (0,0), (0,1), (1,1): the frontier is [2, 2], so 4×4 dense.
    out.append(("triangular mask ⋈ full", prog, {"X": x, "Y": y}, "J", block_mask(x * x, 2, upper)[:4, :4], "dense"))
    out.append(("full ⋈ triangular mask", prog, {"X": x, "Y": y}, "D", block_mask(y - x, 2, upper)[:4, :4], "dense"))
    a, c = rng.standard_normal((8, 8)), rng.standard_normal((8, 6))
    band = lambda i, j: abs(i - j) <= 1  # noqa: E731
    nodes = {"Bd": {"op": "filter", "input": "A", "predicate": "k0 <= k1 + 1 && k1 <= k0 + 1"}}
    product(nodes, "P", "Bd", "C")
    prog = {"inputs": {**blocks("A", [4, 4], [2, 2]), **blocks("C", [4, 3], [2, 2])}, "nodes": nodes, "outputs": ["P"]}
    out.append(("banded mask · full", prog, {"A": a, "C": c}, "P", block_mask(a, 2, band) @ c, "dense"))

    # numpy's kernels (what the numpy / JAX / ONNX front-ends emit): a row
    # maximum by einMax, its broadcast back by expandDims and a broadcasting
    # sub, elementwise maps, a comparison and a select (numpy's where); a
    # column minimum by einMin.
    x = rng.standard_normal((12, 8))
    nodes = {"rmax": {"op": "transform", "input": "X", "kernel": "einMax(ij_i)"},
             "max": {"op": "aggregate", "input": "rmax", "group_by": [0], "kernel": "max"},
             "col": {"op": "transform", "input": "max", "kernel": "expandDims(1)"},
             "d": join("X", "col", [0], [0], "sub"),
             "t": {"op": "transform", "input": "d", "kernel": "compose(powc(2),tanh)"},
             "c": join("X", "t", [0, 1], [0, 1], "gt"),
             "W": join("c", "X", [0, 1], [0, 1], "selectIf"),
             "cmin": {"op": "transform", "input": "X", "kernel": "einMin(ij_j)"},
             "M": {"op": "aggregate", "input": "cmin", "group_by": [1], "kernel": "min"}}
    prog = {"inputs": blocks("X", [3, 2], [4, 4]), "nodes": nodes, "outputs": ["W", "M"]}
    t = np.tanh(x - x.max(axis=1, keepdims=True)) ** 2
    out.append(("numpy kernels: where(X > tanh²(X − rowmax), X, 0)", prog, {"X": x}, "W", np.where(x > t, x, 0.0),
                "dense"))
    out.append(("numpy kernels: column minima", prog, {"X": x}, "M", x.min(axis=0), "dense"))

    # The ML workloads of examples/, scaled down (scripts/ml_programs.py).
    x = rng.standard_normal((12, 8)) * 3
    out.append(("softmax", ml_programs.softmax(12, 8, 3, 2, 1), {"X": x}, "out", ml_programs.numpy_softmax(x), "dense"))
    g, bias = rng.standard_normal(8), rng.standard_normal(8)
    out.append(("layer norm", ml_programs.layernorm(12, 8, 3, 2, 1), {"X": x, "G": g, "B": bias}, "Y",
                ml_programs.numpy_layernorm(x, g, bias), "dense"))
    x, w = rng.standard_normal((40, 6)), rng.standard_normal((6, 1)) * 0.3
    y = (rng.random((40, 1)) > 0.5).astype(float)
    w_new, loss = ml_programs.numpy_logreg_step(x, y, w)
    data = {"X": x, "Y": y, "W": w}
    out.append(("logreg step: weights", ml_programs.logreg_step(40, 6, 4, 1), data, "Wn", w_new, "dense"))
    out.append(("logreg step: loss", ml_programs.logreg_step(40, 6, 4, 1), data, "loss", loss, "relation"))
    q, k, v = (rng.standard_normal((16, 4)) for _ in range(3))
    out.append(("attention head", ml_programs.attention_head(16, 4, 4, 1), {"Q": q, "K": k, "V": v}, "O",
                ml_programs.numpy_attention(q, k, v), "dense"))
    return out


def run(tra, args):
    return subprocess.run([tra] + args, capture_output=True, text=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tra", help="the tra binary (default: build ./target/debug/tra)")
    ap.add_argument("--sites", default="1-7", help="site counts, as LO-HI")
    args = ap.parse_args()
    tra = args.tra
    if tra is None:
        subprocess.run(["cargo", "build", "-q", "-p", "tra-api", "--bin", "tra"], cwd=ROOT, check=True)
        tra = os.path.join(ROOT, "target", "debug", "tra")
    lo, hi = (int(v) for v in args.sites.split("-"))
    failures, runs = [], 0
    with tempfile.TemporaryDirectory() as d:
        for name, prog, data, output, want, layout in cases():
            for sites in range(lo, hi + 1):
                prog["cluster"] = {"sites": sites}
                pfile = os.path.join(d, "program.json")
                with open(pfile, "w") as f:
                    json.dump(prog, f)
                inputs = []
                for n, arr in data.items():
                    path = os.path.join(d, f"{n}.npy")
                    np.save(path, arr)
                    inputs += ["--input", f"{n}={path}"]
                opt = run(tra, ["optimize", "--format", "json", pfile])
                if opt.returncode != 0:
                    failures.append(f"{name}, {sites} sites: tra optimize failed: {opt.stderr.strip()}")
                    continue
                answer = json.loads(opt.stdout)
                if answer["warnings"]:
                    failures.append(f"{name}, {sites} sites: warnings {answer['warnings']}")
                plan_file = os.path.join(d, "plan.json")
                with open(plan_file, "w") as f:
                    json.dump(answer["plan"], f)
                choices = [[]] + [["--alternative", a["label"]] for a in answer["alternatives"]]
                choices.append(["--plan", plan_file])
                for extra in choices:
                    out = os.path.join(d, "out.npy")
                    if os.path.exists(out):
                        os.remove(out)
                    flags = ["--dense"] if layout == "dense" else []
                    r = run(tra, ["run", "--format", "json", pfile, *inputs, "--output", f"{output}={out}", "--no-progress",
                                  "--threads", "2", *flags, *extra])
                    runs += 1
                    what = f"{name}, {sites} sites{' ' + ' '.join(extra) if extra else ''}"
                    if r.returncode != 0:
                        failures.append(f"{what}: tra run failed: {r.stderr.strip()}")
                        continue
                    summary = json.loads(r.stdout)
                    got = np.load(out)
                    if got.shape != want.shape or not np.allclose(got, want, rtol=1e-9, atol=1e-9):
                        err = np.abs(got - want).max() if got.shape == want.shape else f"shape {got.shape} vs {want.shape}"
                        failures.append(f"{what}: differs from numpy ({err})")
                    if not summary["floats_match"]:
                        failures.append(f"{what}: measured floats {summary['network_floats_measured']} != "
                                        f"predicted {summary['network_floats_predicted']}")
        # A garbage plan file is refused, naming the file.
        bad = os.path.join(d, "garbage.json")
        with open(bad, "w") as f:
            f.write('{"inputs": {}, "nodes": {}, "outputs": ["nope"]}')
        r = run(tra, ["run", pfile, *inputs, "--plan", bad, "--no-progress"])
        if r.returncode == 0 or "garbage.json" not in r.stderr:
            failures.append(f"a garbage plan file was not refused: exit {r.returncode}, {r.stderr.strip()}")
    for f in failures:
        print("FAIL", f)
    print(f"programs-numpy-test: {runs} runs of {len(cases())} programs, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
