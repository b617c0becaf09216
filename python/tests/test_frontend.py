#!/usr/bin/env python3
"""The Python front-end against numpy, through a real `tra serve` and `tra run`.

Property tests build random expressions (products, elementwise arithmetic
with broadcasting and numbers, relu/sigmoid/exp, transposes, reductions,
softmax, einsum) over random blocked matrices, compute them in one program
and compare with numpy; the workloads (attention, logistic regression, layer
normalization) run end to end; mistakes raise errors naming the operation.

    python3 python/tests/test_frontend.py [--tra target/debug/tra] [--cases 40]

Runs with pytest too (each `test_*` function); the server is started once.
"""

import argparse
import io
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (the shared server and runner)

import tra

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRA = harness.default_binary()
CASES = int(os.environ.get("TRA_PY_CASES", "60"))
_server = None


def setup_module(module=None):
    """Start `tra serve` on a free port and connect to it."""
    global _server
    if _server is not None:
        return
    _server, url = harness.serve(TRA)
    tra.connect(url, sites=3)


def teardown_module(module=None):
    global _server
    harness.stop(_server)
    _server = None


def close(got, want, what):
    got = np.asarray(got)
    assert got.shape == np.shape(want), f"{what}: shape {got.shape}, numpy {np.shape(want)}"
    assert np.allclose(got, want, rtol=1e-9, atol=1e-9), f"{what}: max error {np.abs(got - want).max()}"


def softmax_np(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


class Gen:
    """Random expressions, each with its numpy value. Every matrix is cut into
    blocks of `b` on both axes, so any two of matching shapes combine."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.b = int(self.rng.integers(1, 4))
        self.dims = [self.b * int(self.rng.integers(1, 4)) for _ in range(3)]

    def leaf(self, shape):
        a = self.rng.standard_normal(shape)
        return tra.array(a, block=self.b), a

    def mat(self, m, n, depth):
        if depth == 0 or self.rng.random() < 0.25:
            return self.leaf((m, n))
        r = self.rng.integers(0, 11)
        if r == 0:
            k = self.dims[int(self.rng.integers(0, 3))]
            (x, a), (y, c) = self.mat(m, k, depth - 1), self.mat(k, n, depth - 1)
            return x @ y, a @ c
        if r in (1, 2, 3):
            (x, a), (y, c) = self.mat(m, n, depth - 1), self.mat(m, n, depth - 1)
            i = int(self.rng.integers(0, 3))
            return [(x + y, a + c), (x - y, a - c), (x * y, a * c)][i]
        if r == 4:
            x, a = self.mat(n, m, depth - 1)
            return x.T, a.T
        if r == 5:
            x, a = self.mat(m, n, depth - 1)
            c = float(self.rng.integers(-3, 4)) or 0.5
            i = int(self.rng.integers(0, 5))
            return [(x * c, a * c), (c - x, c - a), (x + c, a + c), (x / c, a / c), (-x, -a)][i]
        if r == 6:
            x, a = self.mat(m, n, depth - 1)
            i = int(self.rng.integers(0, 3))
            return [(tra.relu(x), np.maximum(a, 0)), (tra.sigmoid(x), 1 / (1 + np.exp(-a))),
                    (tra.exp(x * 0.1), np.exp(a * 0.1))][i]
        if r == 7:
            x, a = self.mat(m, n, depth - 1)
            ax = int(self.rng.integers(0, 2))
            return tra.softmax(x, axis=ax), softmax_np(a, ax)
        if r == 8:
            # Broadcast a reduction back: x - x.mean(axis, keepdims=True), or a vector.
            x, a = self.mat(m, n, depth - 1)
            ax = int(self.rng.integers(0, 2))
            if self.rng.random() < 0.5:
                return x - x.mean(axis=ax, keepdims=True), a - a.mean(axis=ax, keepdims=True)
            v, vn = self.leaf((n,))
            return x * v, a * vn
        if r == 9:
            (x, a), (y, c) = self.mat(m, n, depth - 1), self.mat(n, n, depth - 1)
            return tra.einsum("ij,jk->ik", x, y), a @ c
        x, a = self.mat(m, n, depth - 1)
        return x.max(axis=1, keepdims=True) + x, a.max(axis=1, keepdims=True) + a


def test_random_expressions_match_numpy():
    for seed in range(CASES):
        g = Gen(seed)
        m, n = g.dims[0], g.dims[1]
        exprs = [g.mat(m, n, 3) for _ in range(2)]
        x, a = exprs[0]
        extra = [(x.sum(axis=0), a.sum(axis=0)), (x.sum(), np.array(a.sum())), (x.sum(axis=1), a.sum(axis=1))]
        exprs.append(extra[seed % 3])
        got = tra.compute(*[e for e, _ in exprs])
        for i, ((e, want), value) in enumerate(zip(exprs, got)):
            close(value, want, f"seed {seed}, expression {i} ({e.op})")


def test_attention_logreg_layernorm_end_to_end():
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((32, 8)) for _ in range(3))
    Q, K, V = (tra.array(a, block=(8, 8), partition=0) for a in (q, k, v))
    close((tra.softmax(Q @ K.T / np.sqrt(8.0), axis=1) @ V).compute(),
          softmax_np(q @ k.T / np.sqrt(8), 1) @ v, "attention")

    x = rng.standard_normal((64, 5))
    y = (rng.random((64, 1)) > 0.5).astype(float)
    w = rng.standard_normal((5, 1)) * 0.1
    X, Y, W = tra.array(x, block=(16, 5)), tra.array(y, block=(16, 1)), tra.array(w, block=(5, 1))
    p = tra.sigmoid(X @ W)
    loss = -(Y * tra.log(p) + (1 - Y) * tra.log(1 - p)).mean()
    w_new = W - 0.5 / 64 * (X.T @ (p - Y))
    got_w, got_loss = tra.compute(w_new, loss)
    pn = 1 / (1 + np.exp(-(x @ w)))
    close(got_w, w - 0.5 / 64 * x.T @ (pn - y), "logreg weights")
    close(got_loss, -np.mean(y * np.log(pn) + (1 - y) * np.log(1 - pn)), "logreg loss")

    x = rng.standard_normal((24, 12))
    gain, bias = rng.standard_normal(12), rng.standard_normal(12)
    X, G, B = tra.array(x, block=(6, 4)), tra.array(gain, block=4), tra.array(bias, block=4)
    c = X - X.mean(axis=1, keepdims=True)
    ln = c / tra.sqrt((c * c).mean(axis=1, keepdims=True) + 1e-5) * G + B
    cn = x - x.mean(axis=1, keepdims=True)
    close(ln.compute(), cn / np.sqrt((cn * cn).mean(axis=1, keepdims=True) + 1e-5) * gain + bias, "layer norm")
    close(np.asarray(ln), ln.compute(), "numpy.asarray")


def test_shared_subexpressions_are_built_once():
    x = tra.array(np.ones((4, 4)), block=2)
    y = x @ x
    z = tra.relu(y) + tra.relu(y)
    prog = z.program()
    kernels = [n.get("kernel") for n in prog["nodes"].values()]
    assert kernels.count("matMul") == 1 and kernels.count("relu") == 1, kernels
    assert len(prog["inputs"]) == 1, prog["inputs"]
    # Equal expressions built twice are one node too.
    w = tra.exp(x) + tra.exp(x)
    assert [n.get("kernel") for n in w.program()["nodes"].values()].count("exp") == 1


def test_einsum_cases():
    rng = np.random.default_rng(3)
    a, b, v = rng.standard_normal((6, 4)), rng.standard_normal((4, 6)), rng.standard_normal(4)
    A, B, Vv = tra.array(a, block=2), tra.array(b, block=2), tra.array(v, block=2)
    for spec, ops, want in [("ij,jk->ik", (A, B), a @ b), ("ij,jk->ki", (A, B), (a @ b).T), ("ij->ji", (A,), a.T),
                            ("ij->", (A,), a.sum()), ("ij->j", (A,), a.sum(0)), ("ij,j->i", (A, Vv), a @ v),
                            ("ij,jk,kl->il", (A, B, A), a @ b @ a), ("ij,ij", (A, A), np.einsum("ij,ij", a, a)),
                            ("i,i->", (Vv, Vv), v @ v)]:
        close(tra.einsum(spec, *ops).compute(), want, spec)
    close((A @ Vv).compute(), a @ v, "matrix @ vector")


def test_errors_name_the_operation():
    x = tra.array(np.ones((4, 6)), block=2)
    y = tra.array(np.ones((5, 2)), block=1)
    cases = [
        (lambda: x @ y, "matmul: inner dimensions differ"),
        (lambda: tra.array(np.ones((4, 6)), block=(3, 3)), "array: block size 3 does not divide axis 0"),
        (lambda: tra.einsum("ii->i", x), "einsum: index 'i' has sizes 4 and 6"),
        (lambda: x.sum(axis=2), "sum: axis 2 is out of range"),
        (lambda: x @ "a", "matmul: operand must be a tra expression, a numpy array or a number"),
    ]
    harness.expect_errors(cases, tra.TraError)
    # Operands cut differently are re-blocked; numbers divided by arrays and numpy operands work.
    a = np.arange(1.0, 25.0).reshape(4, 6)
    close((x + tra.array(a, block=1)).compute(), 1 + a, "operands cut differently")
    close((1 / tra.array(a, block=2)).compute(), 1 / a, "a number over an array")
    close((x @ np.ones((6, 2))).compute(), np.full((4, 2), 6.0), "a numpy operand")
    # An error from the service names the operation the failing node came from.
    bad = tra.Session(url=tra.default_session().url, sites=5000)
    try:
        (x @ x.T).compute(session=bad)
    except tra.TraError as e:
        assert e.op in ("matmul", "transpose", "tra") and "sites" in str(e), e
    else:
        raise AssertionError("5,000 sites were accepted for an execution")


def test_empty_axes_give_numpy_answers():
    b = np.random.default_rng(9).standard_normal((6, 4))
    local = tra.Session(binary=TRA, sites=2)
    # (0, 6) @ (6, 4) is empty; (3, 0) @ (0, 4) is zeros, as numpy says.
    for a, bb, blocks in [(np.ones((0, 6)), b, ((2, 3), (3, 2))), (np.ones((3, 0)), np.ones((0, 4)), ((3, 2), (2, 2)))]:
        A, B = tra.array(a, block=blocks[0]), tra.array(bb, block=blocks[1])
        for session in (None, local):
            close((A @ B).compute(session=session), a @ bb, f"{a.shape} @ {bb.shape}")
            close(tra.relu(A).sum(axis=1).compute(session=session), np.maximum(a, 0).sum(axis=1), f"sum of {a.shape}")
        close(tra.einsum("ij,jk->ik", A, B).compute(), np.einsum("ij,jk->ik", a, bb), "einsum with an empty axis")


def test_explain_and_local_run():
    x = tra.array(np.arange(12.0).reshape(4, 3), block=(2, 3))
    out = io.StringIO()
    answer = tra.softmax(x, axis=1).explain(file=out)
    assert "chosen plan:" in out.getvalue() and answer["alternatives"], out.getvalue()
    # Plans name inputs and intermediates by the caller's variables, else by operation and shape.
    queries = tra.array(np.random.default_rng(4).standard_normal((32, 8)), block=(8, 8))
    scores = queries @ queries.T
    out = io.StringIO()
    tra.softmax(scores, axis=1).explain(file=out)
    prog = tra.program(tra.softmax(scores, axis=1))
    assert list(prog["inputs"]) == ["queries"] and "scores" in prog["nodes"], (prog["inputs"], list(prog["nodes"]))
    assert all(re.fullmatch(r"[a-z_]+_(\d+x)*\d+(_\d+)?|scores", n) for n in prog["nodes"]), list(prog["nodes"])
    assert "queries" in out.getvalue() and "in0" not in out.getvalue(), out.getvalue()
    local = tra.Session(binary=TRA, sites=2)
    big = tra.array(np.random.default_rng(5).standard_normal((120, 100)), block=(30, 50))
    got = local.compute([big @ big.T])[0]
    a = np.asarray(big.compute(session=local))
    close(got, a @ a.T, "tra run, 14,400 floats")


def main():
    global TRA, CASES
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tra", default=TRA)
    ap.add_argument("--cases", type=int, default=CASES)
    args = ap.parse_args()
    TRA, CASES = args.tra, args.cases
    return harness.run_tests(globals(), "python front-end", setup_module, teardown_module)


if __name__ == "__main__":
    sys.exit(main())
