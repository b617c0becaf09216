#!/usr/bin/env python3
"""The N-dimensional numpy front-end against numpy, through a real `tra serve`.

Random programs over arrays of rank 0 to 4, each axis cut into random blocks
(so operands are often cut differently and must be re-blocked): numpy
broadcasting, comparisons and `where`, reductions over any axes with
`keepdims`, transposes, reshapes (block-aligned and not), concatenation,
batched products and einsum, softmax/logsumexp, dtype rules. Each program's
outputs are computed in one request and compared with numpy.

    python3 python/tests/test_nd.py [--tra target/debug/tra] [--cases 60]

Runs with pytest too; the server is started once (as in test_frontend.py).
"""

import argparse
import os
import sys

import numpy as np

import tra

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (the shared runner)
import test_frontend as frontend  # noqa: E402  (its server)

CASES = int(os.environ.get("TRA_PY_CASES", "60"))


def setup_module(module=None):
    frontend.setup_module()


def teardown_module(module=None):
    frontend.teardown_module()


def close(got, want, what, rtol=1e-9, atol=1e-9):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, numpy {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, numpy {want.dtype}"
    if want.dtype.kind == "f":
        assert np.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True), \
            f"{what}: max error {np.nanmax(np.abs(got - want)) if got.size else 0}"
    else:
        assert np.array_equal(got, want), f"{what}: {got} != {want}"


def divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0] or [0]


class Gen:
    """Random N-d expressions with their numpy values."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def pick(self, xs):
        return xs[int(self.rng.integers(0, len(xs)))]

    def block(self, shape):
        return tuple(self.pick(divisors(n)) if n else 0 for n in shape)

    def leaf(self, shape, kind="f"):
        if kind == "b":
            a = self.rng.random(shape) < 0.5
        elif kind == "i":
            a = self.rng.integers(-3, 4, shape).astype(np.int32)
        else:
            a = self.rng.standard_normal(shape)
        return tra.array(a, block=self.block(shape)), a

    def shape(self, rank=None):
        rank = int(self.rng.integers(0, 4)) if rank is None else rank
        return tuple(int(self.pick([1, 2, 3, 4, 6])) for _ in range(rank))

    def expr(self, shape, depth):
        if depth == 0 or self.rng.random() < 0.2:
            return self.leaf(shape)
        r = int(self.rng.integers(0, 12))
        if r == 0:  # broadcasting binary: the other operand drops or shrinks axes
            (x, a) = self.expr(shape, depth - 1)
            cut = int(self.rng.integers(0, len(shape) + 1))
            small = tuple(1 if self.rng.random() < 0.3 else n for n in shape[cut:])
            (y, c) = self.expr(small, depth - 1)
            op = self.pick(["add", "subtract", "multiply", "maximum", "minimum"])
            if self.rng.random() < 0.5:
                return getattr(tra, op)(x, y), getattr(np, op)(a, c)
            return getattr(tra, op)(y, x), getattr(np, op)(c, a)
        if r == 1:  # comparisons and where
            (x, a), (y, c), (z, d) = (self.expr(shape, depth - 1) for _ in range(3))
            cmp = self.pick(["less", "greater_equal", "not_equal"])
            return tra.where(getattr(tra, cmp)(x, y), z, 0.5), np.where(getattr(np, cmp)(a, c), d, 0.5)
        if r == 2:  # unary
            x, a = self.expr(shape, depth - 1)
            f = self.pick(["tanh", "abs", "exp", "sign", "square", "log1p", "relu"])
            if f == "exp":
                return tra.exp(x * 0.25), np.exp(a * 0.25)
            if f == "log1p":
                return tra.log1p(tra.abs(x)), np.log1p(np.abs(a))
            if f == "relu":
                return tra.relu(x), np.maximum(a, 0)
            return getattr(tra, f)(x), getattr(np, f)(a)
        if r == 3 and shape:  # a reduction with keepdims back to the shape
            x, a = self.expr(shape, depth - 1)
            axes = tuple(i for i in range(len(shape)) if self.rng.random() < 0.5) or (0,)
            f = self.pick(["sum", "max", "min", "mean"])
            return getattr(x, f)(axis=axes, keepdims=True) + x, getattr(a, f)(axis=axes, keepdims=True) + a
        if r == 4 and len(shape) >= 2:  # transpose
            perm = tuple(self.rng.permutation(len(shape)))
            inv = tuple(np.argsort(perm))
            x, a = self.expr(tuple(shape[p] for p in inv), depth - 1)
            return x.transpose(perm), a.transpose(perm)
        if r == 5 and shape:  # reshape from another factorization
            n = int(np.prod(shape))
            other = self.pick([(n,), (1, n), shape[::-1] if int(np.prod(shape[::-1])) == n else (n,)])
            x, a = self.expr(other, depth - 1)
            return x.reshape(shape), a.reshape(shape)
        if r == 6 and shape:  # concatenate along an axis
            ax = int(self.rng.integers(0, len(shape)))
            if shape[ax] >= 2:
                k = int(self.rng.integers(1, shape[ax]))
                s1 = shape[:ax] + (k,) + shape[ax + 1:]
                s2 = shape[:ax] + (shape[ax] - k,) + shape[ax + 1:]
                (x, a), (y, c) = self.expr(s1, depth - 1), self.expr(s2, depth - 1)
                return tra.concatenate([x, y], axis=ax), np.concatenate([a, c], axis=ax)
        if r == 7 and len(shape) >= 2:  # batched matmul
            k = int(self.pick([1, 2, 3, 4]))
            (x, a) = self.expr(shape[:-1] + (k,), depth - 1)
            (y, c) = self.expr(shape[:-2] + (k, shape[-1]), depth - 1)
            return x @ y, a @ c
        if r == 8 and shape:  # softmax along an axis
            x, a = self.expr(shape, depth - 1)
            ax = int(self.rng.integers(0, len(shape)))
            e = np.exp(a - a.max(axis=ax, keepdims=True))
            return tra.softmax(x, axis=ax), e / e.sum(axis=ax, keepdims=True)
        if r == 9 and len(shape) >= 1:  # einsum with an extra contracted letter
            k = int(self.pick([2, 3]))
            (x, a) = self.expr(shape + (k,), depth - 1)
            (y, c) = self.expr((k, shape[-1]), depth - 1)
            letters = "abcde"[:len(shape)]
            spec = f"{letters}z,z{letters[-1]}->{letters}"
            return tra.einsum(spec, x, y), np.einsum(spec, a, c)
        if r == 10 and shape:  # expand, then squeeze
            x, a = self.expr(shape, depth - 1)
            ax = int(self.rng.integers(0, len(shape) + 1))
            return tra.squeeze(tra.expand_dims(x, ax), ax), a
        x, a = self.expr(shape, depth - 1)
        return x / 2.0 - 1.0, a / 2.0 - 1.0


def test_random_nd_programs_match_numpy():
    for seed in range(CASES):
        g = Gen(1000 + seed)
        shape = g.shape()
        outs = [g.expr(shape, 3) for _ in range(2)]
        got = tra.compute(*[e for e, _ in outs])
        for i, ((e, want), value) in enumerate(zip(outs, got)):
            close(value, np.asarray(want), f"seed {1000 + seed}, output {i} ({e.op}, shape {shape})")


def test_reshapes_aligned_and_reblocked():
    rng = np.random.default_rng(7)
    cases = [((6, 4), (3, 2), (2, 3, 2, 2)), ((2, 3, 4), (1, 3, 2), (6, 4)), ((2, 3, 4), (1, 1, 2), (2, 12)),
             ((2, 3, 4), (2, 3, 2), (24,)), ((24,), (4,), (2, 3, 4)), ((24,), (6,), (4, 6)), ((4, 6), (2, 3), (6, 4)),
             ((1, 6, 1), (1, 2, 1), (6,)), ((6,), (3,), (1, 2, 1, 3)), ((2, 3, 4), (1, 3, 4), (2, 3, 2, 2)),
             ((8, 6), (2, 6), (2, 4, 3, 2))]
    for shape, block, new in cases:
        a = rng.standard_normal(shape)
        x = tra.array(a, block=block)
        close(x.reshape(new).compute(), a.reshape(new), f"reshape {shape} blocks {block} -> {new}")
        close((x.reshape(new) * 2).reshape(shape).compute(), a * 2, f"round trip {shape} via {new}")


def test_reductions_over_blocked_axes():
    a = np.random.default_rng(11).standard_normal((4, 6, 2))
    x = tra.array(a, block=(2, 3, 1))
    for axes in [0, 1, (0, 1), (1, 2), None]:
        for f in ("sum", "max", "min", "mean"):
            for keep in (False, True):
                close(getattr(x, f)(axis=axes, keepdims=keep).compute(), np.asarray(getattr(a, f)(axis=axes, keepdims=keep)),
                      f"{f} over {axes}, keepdims={keep}")
    close(tra.logsumexp(x, axis=1).compute(), np.log(np.exp(a).sum(axis=1)), "logsumexp")
    close(tra.log_softmax(x, axis=0).compute(), a - a.max(0) - np.log(np.exp(a - a.max(0)).sum(0)), "log_softmax")


def test_diagonals_and_arg_extremes():
    rng = np.random.default_rng(12)
    a = rng.standard_normal((6, 6, 4))
    x = tra.array(a, block=(2, 3, 2))  # the two axes of `i` cut differently: re-blocked
    for spec in ("iik->ik", "iik->ki", "iik->", "iik", "iij,jk->ik"):
        ops = (a,) if "," not in spec else (a, a[0].T)
        xs = (x,) if "," not in spec else (x, tra.array(a[0].T, block=2))
        close(tra.einsum(spec, *xs).compute(), np.einsum(spec, *ops), f"einsum {spec}")
    b = rng.integers(0, 3, (4, 6, 5)).astype(np.float64)  # many ties: the first index wins
    y = tra.array(b, block=(2, 3, 5))
    for axis in (0, 1, 2, None):
        close(tra.argmax(y, axis=axis).compute(), np.argmax(b, axis=axis), f"argmax over {axis}")
        close(tra.argmin(y, axis=axis).compute(), np.argmin(b, axis=axis), f"argmin over {axis}")
    close(tra.argmax(y, axis=1, keepdims=True).compute(), np.argmax(b, axis=1, keepdims=True), "argmax keepdims")


def test_dtypes_follow_numpy():
    a32 = np.arange(12, dtype=np.float32).reshape(3, 4) - 5
    x = tra.array(a32, block=(3, 2))
    labels = np.array([0, 2, 1, 5], dtype=np.int32)
    got = tra.compute(x * 0.5, x > 0, tra.one_hot(tra.array(labels), 3), (x > 0).sum(axis=1),
                      tra.array(labels) * 2, x.astype(np.int32), tra.where(x > 0, x, -x))
    want = [a32 * 0.5, a32 > 0, (labels[:, None] == np.arange(3)).astype(np.float32), (a32 > 0).sum(axis=1),
            labels * 2, a32.astype(np.int32), np.where(a32 > 0, a32, -a32)]
    for i, (g, w) in enumerate(zip(got, want)):
        close(g, w, f"dtype case {i}")


def test_placeholders_feed_new_values():
    p = tra.placeholder((4, 3), np.float32, block=(2, 3))
    y = tra.softmax(p * 2.0, axis=-1).sum(axis=0)
    for seed in range(2):
        a = np.random.default_rng(seed).standard_normal((4, 3)).astype(np.float32)
        e = np.exp(2 * a - (2 * a).max(axis=-1, keepdims=True))
        close(tra.compute(y, feed={p: a})[0], (e / e.sum(axis=-1, keepdims=True)).sum(axis=0), f"feed {seed}",
              rtol=1e-5, atol=1e-6)
    harness.expect_errors([
        (lambda: tra.compute(y, feed={p: np.ones((3, 4))}), "placeholder: the value fed has shape (3, 4), the placeholder (4, 3)"),
        (lambda: tra.compute(y), "placeholder: 1 placeholder(s) have no value"),
        (lambda: tra.compute(y, feed={tra.array(np.ones(2)): np.ones(2)}), "compute: feed keys must be tra.placeholder"),
    ], tra.TraError)


def test_errors_name_the_axis_and_operation():
    x = tra.array(np.ones((4, 6)), block=2)
    cases = [
        (lambda: x + tra.array(np.ones((4, 5))), "add: operands could not be broadcast together with shapes (4, 6) (4, 5)"),
        (lambda: x.reshape(5, 5), "reshape: cannot reshape an array of 24 elements"),
        (lambda: x.sum(axis=2), "sum: axis 2 is out of range for shape (4, 6)"),
        (lambda: tra.transpose(x, (0, 0)), "transpose: axes (0, 0) are not a permutation"),
        (lambda: tra.squeeze(x, 0), "squeeze: cannot squeeze axis 0 of size 4"),
        (lambda: tra.array(np.ones(4, dtype=np.float16)), "array: dtype float16 is not supported"),
        (lambda: tra.array(np.ones(6), block=4), "array: block size 4 does not divide axis 0 of size 6"),
        (lambda: tra.concatenate([x, tra.array(np.ones((3, 5)))], axis=0), "concatenate: shapes (4, 6) and (3, 5)"),
        (lambda: bool(x > 0), "bool: the truth value of a lazy tra expression"),
    ]
    harness.expect_errors(cases, tra.TraError)


def main():
    global CASES
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tra", default=frontend.TRA)
    ap.add_argument("--cases", type=int, default=CASES)
    args = ap.parse_args()
    frontend.TRA, CASES = args.tra, args.cases
    return harness.run_tests(globals(), "N-d front-end", setup_module, teardown_module)


if __name__ == "__main__":
    sys.exit(main())
