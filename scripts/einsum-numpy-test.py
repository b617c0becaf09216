#!/usr/bin/env python3
"""`tra einsum` against numpy.einsum on random expressions and shapes.

Each case draws an expression (1-4 operands; shared, repeated (diagonal) and
private indices; scalars; explicit and implicit outputs; sometimes `...`,
size-1 broadcasting and spaces) and fixed ones with zero-size axes, random float64 (sometimes float32) operands,
a block size that often does not divide the sizes (padded blocks) and a
number of sites; runs

    tra einsum EXPR --input T0=t0.npy ... --output R=out.npy --block B --sites S

and compares out.npy with numpy.einsum(EXPR, *operands). A few expressions
that must fail are checked for a non-zero exit and an error naming the
position. Exit status 1 on any mismatch.

Usage: python3 scripts/einsum-numpy-test.py [--tra PATH] [--cases N] [--seed S]
(without --tra it builds and uses ./target/debug/tra).
"""

import argparse
import os
import random
import shlex
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def random_case(rng):
    n_ops = rng.choice([1, 2, 2, 2, 3, 3, 4])
    letters = rng.sample("abcdefgABC", rng.randint(1, 5))
    size = {c: rng.randint(1, 6) for c in letters}
    terms = []
    for _ in range(n_ops):
        rank = rng.choice([0, 1, 1, 2, 2, 2, 3, 3])
        t = []
        for _ in range(rank):
            fresh = [c for c in letters if c not in t]
            if not fresh or (t and rng.random() < 0.12):
                t.append(rng.choice(t) if t else letters[0])
            else:
                t.append(rng.choice(fresh))
        terms.append(t)
    shapes = [[size[c] for c in t] for t in terms]
    # numpy broadcasting: a size-1 axis against the index's larger size.
    if rng.random() < 0.2:
        i = rng.randrange(n_ops)
        singles = [ax for ax, c in enumerate(terms[i]) if terms[i].count(c) == 1]
        if singles:
            shapes[i][rng.choice(singles)] = 1
    used = [c for c in letters if any(c in t for t in terms)]
    texts = ["".join(t) for t in terms]
    # `...`: leading batch axes, right-aligned, some of size 1.
    ellipsis = rng.random() < 0.2
    if ellipsis:
        batch = [rng.randint(1, 4) for _ in range(rng.randint(1, 2))]
        for i in range(n_ops):
            e = rng.randint(0, len(batch))
            dims = [d if rng.random() < 0.8 else 1 for d in batch[len(batch) - e:]]
            texts[i] = "..." + texts[i]
            shapes[i] = dims + shapes[i]
    expr = ",".join(texts)
    if rng.random() < 0.7:
        out = [c for c in used if rng.random() < 0.5]
        rng.shuffle(out)
        out = "".join(out)
        if ellipsis:
            out = "..." + out if rng.random() < 0.5 else out + "..."
        expr += "->" + out
    if rng.random() < 0.1:
        expr = expr.replace(",", ", ").replace("->", " -> ")
    return expr, shapes


def run(tra, args):
    return subprocess.run([tra] + args, capture_output=True, text=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tra", help="the tra binary (default: build ./target/debug/tra)")
    ap.add_argument("--cases", type=int, default=80)
    ap.add_argument("--seed", type=int, default=2024)
    ns = ap.parse_args()
    tra = ns.tra
    if tra is None:
        subprocess.run(["cargo", "build", "-q", "-p", "tra-api", "--bin", "tra"], cwd=ROOT, check=True)
        tra = os.path.join(ROOT, "target", "debug", "tra")
    if run(tra, ["einsum", "--help"]).returncode != 0:
        print(f"{tra} has no `einsum` subcommand", file=sys.stderr)
        return 1

    rng = random.Random(ns.seed)
    nrng = np.random.default_rng(ns.seed)
    failures = 0
    with tempfile.TemporaryDirectory(prefix="tra-einsum-") as d:
        # Zero-size axes: numpy answers with empty arrays, or zeros where an
        # empty index is summed; tra cuts an empty axis into one empty block.
        zero_size = [("ij,jk->ik", [(0, 3), (3, 4)]), ("ij,jk->ik", [(3, 0), (0, 4)]), ("i,i->", [(0,), (0,)]),
                     ("ij->", [(0, 5)]), ("ij->j", [(0, 5)]), ("bij,bjk->bik", [(0, 2, 3), (0, 3, 4)]),
                     ("i,j->ij", [(0,), (3,)]), ("ii->i", [(0, 0)]), ("ij->ji", [(2, 0)]),
                     ("ij,jk,kl->il", [(2, 3), (3, 0), (0, 4)])]
        cases = [random_case(rng) for _ in range(ns.cases)] + zero_size
        for expr, shapes in cases:
            arrays = [nrng.standard_normal(s) for s in shapes]
            args = ["einsum", expr]
            for i, a in enumerate(arrays):
                path = os.path.join(d, f"t{i}.npy")
                np.save(path, a.astype(np.float32) if rng.random() < 0.15 else a)
                args += ["--input", f"T{i}={path}"]
            arrays = [np.load(os.path.join(d, f"t{i}.npy")) for i in range(len(arrays))]
            # tra computes in the operands' dtype: float32 only when all are
            # (numpy's promotion); compare with numpy in float64 either way.
            want_dtype = np.result_type(*arrays)
            arrays = [a.astype(np.float64) for a in arrays]
            out = os.path.join(d, "out.npy")
            if os.path.exists(out):
                os.remove(out)
            block, sites = rng.randint(1, 5), rng.randint(1, 4)
            args += ["--output", f"R={out}", "--block", str(block), "--sites", str(sites)]
            if rng.random() < 0.25:
                args += ["--executor", "reference"]
            want = np.einsum(expr, *arrays)
            r = run(tra, args)
            cmd = " ".join(shlex.quote(x) for x in [tra] + args)
            if r.returncode != 0:
                failures += 1
                print(f"FAIL {expr!r} shapes {shapes}: exit {r.returncode}\n  {cmd}\n{r.stderr}", file=sys.stderr)
                continue
            got = np.load(out)
            scale = 1.0 + (float(np.abs(want).max()) if want.size else 0.0)
            tol = 1e-9 if want_dtype == np.float64 else 1e-4
            if (got.shape != np.shape(want) or got.dtype != want_dtype
                    or not np.allclose(got, want, rtol=tol, atol=tol * scale)):
                failures += 1
                print(f"FAIL {expr!r} shapes {shapes} block {block}: got shape {got.shape} {got.dtype}, "
                      f"numpy {np.shape(want)} {want_dtype}\n"
                      f"  {cmd}\n  got {got}\n  numpy {want}", file=sys.stderr)
            else:
                print(f"ok   {expr!r:32} shapes {shapes} block {block} sites {sites}")

        # Errors that speak einsum, with the position.
        for expr, shapes, needle in [
            ("ij,jk->ik", [[2, 3], [4, 5]], "position 3"),
            ("ij,jk,kl->il", [[2, 3], [3, 4]], "position 6"),
            ("ij,j%->i", [[2, 3], [3, 3]], "position 4"),
            ("ij->iij", [[2, 3]], "position 5"),
        ]:
            args = ["einsum", expr]
            for i, s in enumerate(shapes):
                path = os.path.join(d, f"e{i}.npy")
                np.save(path, np.ones(s))
                args += ["--input", f"T{i}={path}"]
            r = run(tra, args)
            if r.returncode == 0 or needle not in r.stderr or "^" not in r.stderr:
                failures += 1
                print(f"FAIL error case {expr!r}: exit {r.returncode}, stderr:\n{r.stderr}", file=sys.stderr)
            else:
                print(f"ok   error {expr!r}: {r.stderr.splitlines()[0]}")

    print(f"{ns.cases} random expressions, {len(zero_size)} with zero-size axes and 4 error cases: "
          f"{failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
