#!/usr/bin/env python3
"""tra.jax.jit against jax.jit, through a real `tra serve` and `tra run`.

Workloads (a 2-layer MLP training step, multi-head attention with layer
norm, a logistic-regression step) and random compositions of the supported
primitives are traced by JAX, translated into one TRA program each and
computed by tra; every output must equal jax.jit's in float32 (rtol 1e-4,
atol 1e-5). The cache (a second call traces nothing), refused primitives
(named, with the equation and the source line) and unblockable shapes are
checked, and the translation alone is checked with numpy standing in for the
tra namespace.

    python3 python/tests/test_jax.py [--tra target/debug/tra] [--cases 40]

Runs with pytest too (each `test_*` function); the server is started once.
"""

import argparse
import math
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (the shared server and runner)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
try:
    import tra
except ImportError:  # run from the source tree
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import tra

import jax
import jax.numpy as jnp

import tra.jax as trajax


TRA = harness.default_binary()
CASES = int(os.environ.get("TRA_JAX_CASES", "40"))
RTOL, ATOL = 1e-4, 1e-5
_server = None
_url = None
REPORT = []  # (program, stats of the first call, stats of the second call)


def setup_module(module=None):
    """Start `tra serve` on a free port and connect to it."""
    global _server, _url
    if _server is not None:
        return
    _server, url = harness.serve(TRA)
    _url = url
    tra.connect(url, sites=3)


def teardown_module(module=None):
    global _server
    harness.stop(_server)
    _server = None


# ------------------------------------------------------------------ helpers
def close(got, want, what):
    """Two pytrees of arrays: the same structure, shapes, dtypes and values."""
    g_leaves, g_tree = jax.tree_util.tree_flatten(got)
    w_leaves, w_tree = jax.tree_util.tree_flatten(want)
    assert g_tree == w_tree, f"{what}: structure {g_tree}, jax {w_tree}"
    for i, (g, w) in enumerate(zip(g_leaves, w_leaves)):
        w = np.asarray(w)
        assert isinstance(g, np.ndarray), f"{what}[{i}]: a {type(g).__name__}, not a numpy array"
        assert g.shape == w.shape, f"{what}[{i}]: shape {g.shape}, jax {w.shape}"
        assert g.dtype == w.dtype, f"{what}[{i}]: dtype {g.dtype}, jax {w.dtype}"
        if w.dtype.kind in "biu":
            assert np.array_equal(g, w), f"{what}[{i}]: {g} != jax {w}"
        else:
            ok = np.allclose(g, w, rtol=RTOL, atol=ATOL, equal_nan=True)
            assert ok, f"{what}[{i}]: max error {np.nanmax(np.abs(g.astype(float) - w))}"


def check(f, *args, what, session=None, block=None, record=True):
    """tra.jax.jit(f) equals jax.jit(f) on `args`, twice (the second call cached)."""
    want = jax.jit(f)(*args)
    tj = trajax.jit(f, session=session, block=block)
    close(tj(*args), want, what)
    first = _snapshot(tj.stats)
    # New values, the same shapes: no trace, the same program, the new answer.
    args2 = jax.tree_util.tree_map(_perturb, args)
    close(tj(*args2), jax.jit(f)(*args2), what + " (second call)")
    assert tj.stats.cache_hit and tj.stats.traces == 1, tj.stats
    if record:
        REPORT.append((what, first, _snapshot(tj.stats)))
    return tj


def _perturb(a):
    a = np.asarray(a)
    if a.dtype.kind == "f":
        return (a * 0.9 + 0.05).astype(a.dtype)
    if a.dtype.kind in "iu":
        return a[::-1].copy() if a.ndim else a
    return a


def _snapshot(stats):
    import dataclasses
    return dataclasses.replace(stats, primitives=dict(stats.primitives))


class NumpyNamespace:
    """numpy standing in for the tra namespace: checks the translation alone."""

    def __getattr__(self, name):
        return getattr(np, name)

    @staticmethod
    def array(data, block=None):
        return np.asarray(data)

    @staticmethod
    def astype(x, dtype):
        return np.asarray(x).astype(dtype)

    @staticmethod
    def sigmoid(x):
        return 1 / (1 + np.exp(-x))

    @staticmethod
    def rsqrt(x):
        return 1 / np.sqrt(x)

    @staticmethod
    def erf(x):
        return np.vectorize(math.erf, otypes=[np.asarray(x).dtype])(x)


def check_numpy(f, *args, what):
    """The translation evaluated by numpy equals jax.jit."""
    leaves, tree = jax.tree_util.tree_flatten(args)
    closed = jax.make_jaxpr(lambda *xs: f(*jax.tree_util.tree_unflatten(tree, xs)))(*leaves)
    outs = trajax.translate(closed, [np.asarray(x) for x in leaves], NumpyNamespace())
    want_leaves, want_tree = jax.tree_util.tree_flatten(jax.jit(f)(*args))
    got = jax.tree_util.tree_unflatten(want_tree, [
        np.asarray(o).astype(np.asarray(w).dtype).reshape(np.shape(w)) for o, w in zip(outs, want_leaves)])
    close(got, jax.tree_util.tree_unflatten(want_tree, want_leaves), what + " (numpy namespace)")


# ---------------------------------------------------------------- workloads
N, D_IN, HIDDEN, CLASSES = 8, 12, 16, 4


def mlp_params(rng):
    return {"w1": (rng.standard_normal((D_IN, HIDDEN)) * 0.3).astype(np.float32),
            "b1": (rng.standard_normal(HIDDEN) * 0.1).astype(np.float32),
            "w2": (rng.standard_normal((HIDDEN, CLASSES)) * 0.3).astype(np.float32),
            "b2": (rng.standard_normal(CLASSES) * 0.1).astype(np.float32)}


def mlp_loss(params, x, labels):
    h = jax.nn.relu(x @ params["w1"] + params["b1"])
    logits = h @ params["w2"] + params["b2"]
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.sum(jax.nn.one_hot(labels, CLASSES) * logp, axis=-1))


def mlp_step(params, x, labels):
    loss, grads = jax.value_and_grad(mlp_loss)(params, x, labels)
    return loss, jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)


def mlp_args(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N, D_IN)).astype(np.float32)
    labels = rng.integers(0, CLASSES, N).astype(np.int32)
    return mlp_params(rng), x, labels


B, T, D, HEADS = 2, 8, 16, 2


def layer_norm(x, gain, bias, eps=1e-5):
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean((x - mu) ** 2, axis=-1, keepdims=True)
    return (x - mu) * jax.lax.rsqrt(var + eps) * gain + bias


def attention(p, x):
    b, t, d = x.shape
    dh = d // HEADS
    h = layer_norm(x, p["gain"], p["bias"])

    def heads(w):  # (B, T, D) -> (B, H, T, dh)
        return (h @ w).reshape(b, t, HEADS, dh).transpose(0, 2, 1, 3)

    q, k, v = heads(p["wq"]), heads(p["wk"]), heads(p["wv"])
    scores = q @ k.transpose(0, 1, 3, 2) / jnp.sqrt(float(dh))
    a = jax.nn.softmax(scores, axis=-1)
    o = (a @ v).transpose(0, 2, 1, 3).reshape(b, t, d)
    return x + o @ p["wo"]


def attention_args(seed=0):
    rng = np.random.default_rng(seed)
    p = {k: (rng.standard_normal((D, D)) / np.sqrt(D)).astype(np.float32) for k in ("wq", "wk", "wv", "wo")}
    p["gain"] = (1 + 0.1 * rng.standard_normal(D)).astype(np.float32)
    p["bias"] = (0.1 * rng.standard_normal(D)).astype(np.float32)
    return p, rng.standard_normal((B, T, D)).astype(np.float32)


def logreg_loss(w, b, x, y):
    z = x @ w + b
    return -jnp.mean(y * jax.nn.log_sigmoid(z) + (1 - y) * jax.nn.log_sigmoid(-z))


def logreg_step(w, b, x, y):
    loss, (gw, gb) = jax.value_and_grad(logreg_loss, argnums=(0, 1))(w, b, x, y)
    return loss, w - 0.5 * gw, b - 0.5 * gb


def logreg_args(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((32, 6)).astype(np.float32)
    y = (rng.random(32) > 0.5).astype(np.float32)
    return (rng.standard_normal(6) * 0.1).astype(np.float32), np.float32(0.1), x, y


# ----------------------------------------------------- random compositions
class Gen:
    """Random jnp programs over 1-3 arrays of rank 0-3, built shape first: an
    expression is asked for with a shape and made of elementwise operations
    (with broadcasting and Python numbers), comparisons and where, reductions
    (with keepdims), transposes, reshapes, matmul and einsum, concatenation,
    softmax and logsumexp, casts through integers and booleans."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.sizes = [int(n) for n in self.rng.permutation([2, 3, 4])]
        self.inputs = []  # shapes
        self.max_inputs = int(self.rng.integers(1, 4))

    def pick(self, seq):
        return seq[int(self.rng.integers(0, len(seq)))]

    def shape(self, rank=None):
        rank = int(self.rng.integers(0, 4)) if rank is None else rank
        return tuple(self.pick(self.sizes) for _ in range(rank))

    def leaf(self, shape):
        # An input of this shape, one that broadcasts to it, or a new input.
        for i, s in enumerate(self.inputs):
            if s == shape and self.rng.random() < 0.7:
                return lambda xs, i=i: xs[i], f"x{i}"
        for i, s in enumerate(self.inputs):
            if len(s) <= len(shape) and all(a in (1, b) for a, b in zip(s[::-1], shape[::-1])) \
                    and self.rng.random() < 0.5:
                return lambda xs, i=i: jnp.broadcast_to(xs[i], shape), f"broadcast(x{i})"
        if len(self.inputs) < self.max_inputs:
            self.inputs.append(shape)
            i = len(self.inputs) - 1
            return lambda xs: xs[i], f"x{i}"
        # Reuse an input: its first elements (a slice of the flattened array), repeated if too few.
        i = int(self.rng.integers(0, len(self.inputs)))
        s = self.inputs[i]
        size, have = int(np.prod(shape)), int(np.prod(s))
        reps = -(-size // have)
        return (lambda xs: jnp.reshape(jnp.tile(jnp.ravel(xs[i]), reps)[:size], shape)), f"take(x{i}, {shape})"

    def compatible(self, shape):
        """A shape that broadcasts against `shape` (trailing axes, some 1)."""
        keep = int(self.rng.integers(0, len(shape) + 1))
        tail = shape[len(shape) - keep:]
        return tuple(1 if self.rng.random() < 0.3 else n for n in tail)

    def expr(self, shape, depth, top=False):
        if depth == 0 or (not top and self.rng.random() < 0.15):
            return self.leaf(shape)
        rank = len(shape)
        ops = ["unary", "binary", "binary", "scalar", "where", "reduce", "transpose", "reshape", "cast"]
        if rank >= 1:
            ops += ["softmax", "logsumexp", "matmul", "einsum", "concat", "keepdims"]
        if rank <= 2:
            ops += ["reduce", "einsum"]
        op = self.pick(ops)
        d = depth - 1
        if op == "unary":
            (f, s) = self.expr(shape, d)
            name, fn = self.pick([
                ("tanh", jnp.tanh), ("exp∘tanh", lambda v: jnp.exp(jnp.tanh(v))), ("relu", jax.nn.relu),
                ("sigmoid", jax.nn.sigmoid), ("abs", jnp.abs), ("neg", jnp.negative), ("square", jnp.square),
                ("log(1+|x|)", lambda v: jnp.log(1 + jnp.abs(v))),
                ("sqrt(|x|+.1)", lambda v: jnp.sqrt(jnp.abs(v) + 0.1)),
                ("log1p(|x|)", lambda v: jnp.log1p(jnp.abs(v))), ("expm1∘tanh", lambda v: jnp.expm1(jnp.tanh(v))),
                ("rsqrt(x²+1)", lambda v: jax.lax.rsqrt(v * v + 1)), ("cube", lambda v: v ** 3),
                ("sign", jnp.sign), ("floor(3x)", lambda v: jnp.floor(3 * v)), ("ceil(3x)", lambda v: jnp.ceil(3 * v)),
                ("log_sigmoid", jax.nn.log_sigmoid), ("softplus", jax.nn.softplus),
                ("exp2∘tanh", lambda v: jnp.exp2(jnp.tanh(v))),
                ("clip", lambda v: jnp.clip(v, -0.5, 0.7)), ("erf", jax.lax.erf)])
            if name == "erf" and not hasattr(tra, "erf"):
                name, fn = "tanh", jnp.tanh
            return (lambda xs: fn(f(xs))), f"{name}({s})"
        if op in ("binary", "where"):
            fa, sa = self.expr(shape, d)
            other = self.compatible(shape)
            fb, sb = self.expr(other, d)
            if op == "where":
                fc, sc = self.expr(shape, d)
                cmp, cname = self.pick([(jnp.greater, ">"), (jnp.less_equal, "<="), (jnp.less, "<"),
                                        (jnp.greater_equal, ">=")])
                return (lambda xs: jnp.where(cmp(fa(xs), fb(xs)), fa(xs), fc(xs))), f"where({sa} {cname} {sb}, ., {sc})"
            name, fn = self.pick([("+", jnp.add), ("-", jnp.subtract), ("*", jnp.multiply),
                                  ("/", lambda a, b: a / (jnp.abs(b) + 1)), ("max", jnp.maximum),
                                  ("min", jnp.minimum)])
            if self.rng.random() < 0.5:
                return (lambda xs: fn(fa(xs), fb(xs))), f"({sa} {name} {sb})"
            return (lambda xs: fn(fb(xs), fa(xs))), f"({sb} {name} {sa})"
        if op == "scalar":
            f, s = self.expr(shape, d)
            c = float(self.pick([0.5, 2.0, -1.5, 3.0]))
            name, fn = self.pick([("+", lambda v: v + c), ("r-", lambda v: c - v), ("*", lambda v: v * c),
                                  ("/", lambda v: v / c), ("r/", lambda v: c / (jnp.abs(v) + 1)),
                                  ("**2", lambda v: v ** 2)])
            return (lambda xs: fn(f(xs))), f"({s} {name} {c})"
        if op == "cast":
            f, s = self.expr(shape, d)
            if self.rng.random() < 0.5:
                return (lambda xs: jnp.floor(f(xs) * 2).astype(jnp.int32).astype(jnp.float32) * 0.5), f"int({s})"
            return (lambda xs: (f(xs) > 0).astype(jnp.float32) + f(xs)), f"bool({s})"
        if op == "reduce" and rank < 3:
            n = self.pick(self.sizes)
            axis = int(self.rng.integers(0, rank + 1))
            inner = shape[:axis] + (n,) + shape[axis:]
            f, s = self.expr(inner, d)
            name, fn = self.pick([("sum", jnp.sum), ("max", jnp.max), ("min", jnp.min), ("mean", jnp.mean)])
            return (lambda xs: fn(f(xs), axis=axis)), f"{name}({s}, axis={axis})"
        if op == "keepdims" or op == "reduce":
            axis = int(self.rng.integers(0, rank)) if rank else None
            if axis is None:
                f, s = self.expr(shape, d)
                return (lambda xs: jnp.sum(f(xs), keepdims=True)), f"sum({s}, keepdims)"
            n = self.pick(self.sizes)
            inner = shape[:axis] + (n,) + shape[axis + 1:]
            f, s = self.expr(inner, d)
            name, fn = self.pick([("sum", jnp.sum), ("max", jnp.max), ("min", jnp.min), ("mean", jnp.mean)])
            g = (lambda xs: fn(f(xs), axis=axis, keepdims=True))
            if shape[axis] == 1:
                return g, f"{name}({s}, axis={axis}, keepdims)"
            return (lambda xs: jnp.broadcast_to(g(xs), shape)), f"broadcast({name}({s}, axis={axis}, keepdims))"
        if op == "transpose":
            perm = tuple(int(p) for p in self.rng.permutation(rank))
            inv = tuple(int(i) for i in np.argsort(perm))
            inner = tuple(shape[i] for i in inv)
            f, s = self.expr(inner, d)
            return (lambda xs: jnp.transpose(f(xs), perm)), f"transpose({s}, {perm})"
        if op == "reshape":
            size = int(np.prod(shape))
            factors = [n for n in (2, 3, 4, 6, 8, 9, 12, 16) if size % n == 0]
            if factors and self.rng.random() < 0.7:
                a = self.pick(factors)
                inner = (a, size // a) if size // a > 1 else (a,)
            else:
                inner = (size,)
            f, s = self.expr(inner, d)
            return (lambda xs: jnp.reshape(f(xs), shape)), f"reshape({s}, {shape})"
        if op == "softmax":
            axis = int(self.rng.integers(-rank, rank))
            f, s = self.expr(shape, d)
            if self.rng.random() < 0.5:
                return (lambda xs: jax.nn.softmax(f(xs), axis=axis)), f"softmax({s}, {axis})"
            return (lambda xs: jax.nn.log_softmax(f(xs), axis=axis)), f"log_softmax({s}, {axis})"
        if op == "logsumexp":
            axis = int(self.rng.integers(0, rank))
            n = self.pick(self.sizes)
            inner = shape[:axis] + (n,) + shape[axis + 1:]
            f, s = self.expr(inner, d)
            if shape[axis] == 1 and self.rng.random() < 0.5:
                return ((lambda xs: jax.nn.logsumexp(f(xs), axis=axis, keepdims=True)),
                        f"logsumexp({s}, {axis}, keepdims)")
            inner = shape[:axis] + (n,) + shape[axis:]
            f, s = self.expr(inner, d)
            return (lambda xs: jax.nn.logsumexp(f(xs), axis=axis)), f"logsumexp({s}, {axis})"
        if op == "matmul":
            n = self.pick(self.sizes)
            if rank == 1:
                fa, sa = self.expr((n,), d)
                fb, sb = self.expr((n, shape[0]), d)
            else:
                fa, sa = self.expr(shape[:-1] + (n,), d)
                fb, sb = self.expr((shape[:-2] if self.rng.random() < 0.6 else ()) + (n, shape[-1]), d)
            return (lambda xs: jnp.tanh(fa(xs) @ fb(xs))), f"tanh({sa} @ {sb})"
        if op == "einsum":
            # Output letters, one contracted letter c; the operands share some output letters (batch).
            out = "ijkl"[:rank]
            n = self.pick(self.sizes)
            a_letters = "".join(ch for ch in out if self.rng.random() < 0.6) + "c"
            b_letters = "".join(ch for ch in out if ch not in a_letters or self.rng.random() < 0.4) + "c"
            a_letters = "".join(self.rng.permutation(list(a_letters)))
            b_letters = "".join(self.rng.permutation(list(b_letters)))
            size = dict(zip(out, shape), c=n)
            fa, sa = self.expr(tuple(size[ch] for ch in a_letters), d)
            fb, sb = self.expr(tuple(size[ch] for ch in b_letters), d)
            spec = f"{a_letters},{b_letters}->{out}"
            return (lambda xs: jnp.tanh(jnp.einsum(spec, fa(xs), fb(xs)))), f"tanh(einsum('{spec}', {sa}, {sb}))"
        if op == "concat":
            axis = int(self.rng.integers(0, rank))
            if shape[axis] < 2:
                return self.expr(shape, d)
            k = int(self.rng.integers(1, shape[axis]))
            fa, sa = self.expr(shape[:axis] + (k,) + shape[axis + 1:], d)
            fb, sb = self.expr(shape[:axis] + (shape[axis] - k,) + shape[axis + 1:], d)
            return (lambda xs: jnp.concatenate([fa(xs), fb(xs)], axis=axis)), f"concat({sa}, {sb}, axis={axis})"
        return self.leaf(shape)

    def program(self):
        out_shape = self.shape()
        f, text = self.expr(out_shape, 4, top=True)
        if not self.inputs:  # a program of constants only still takes an argument
            self.inputs.append(())
        shapes = list(self.inputs)
        args = [self.rng.standard_normal(s).astype(np.float32) for s in shapes]
        return (lambda *xs: f(xs)), args, text


def random_programs():
    for seed in range(CASES):
        g = Gen(seed)
        f, args, text = g.program()
        yield seed, f, args, text


# -------------------------------------------------------------------- tests
def test_translation_with_numpy_namespace():
    """The translation, with numpy as the namespace, equals jax.jit."""
    check_numpy(mlp_step, *mlp_args(), what="mlp step")
    check_numpy(attention, *attention_args(), what="attention")
    check_numpy(logreg_step, *logreg_args(), what="logistic regression step")
    for seed, f, args, text in random_programs():
        check_numpy(f, *args, what=f"random program {seed}: {text}")


def test_mlp_training_step():
    check(mlp_step, *mlp_args(), what="mlp step")


def test_attention_layer_norm():
    check(attention, *attention_args(), what="attention")


def test_logistic_regression_step():
    check(logreg_step, *logreg_args(), what="logistic regression step")


def test_random_compositions():
    for seed, f, args, text in random_programs():
        want = jax.jit(f)(*args)
        tj = trajax.jit(f)
        try:
            close(tj(*args), want, f"random program {seed}")
        except Exception as e:
            raise AssertionError(f"random program {seed}: {text}: {type(e).__name__}: {e}") from e


@jax.custom_vjp
def _scaled_tanh(x):
    return 2 * jnp.tanh(x)


_scaled_tanh.defvjp(lambda x: (_scaled_tanh(x), x), lambda x, g: (g * 2 * (1 - jnp.tanh(x) ** 2),))


def more_programs():
    """Primitives beyond the random programs': slicing, padding, integer
    arithmetic, logic, conditionals, call-like wrappers; boolean and integer
    outputs. Each (name, f, args)."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    y = rng.standard_normal((4, 6)).astype(np.float32)
    k = rng.integers(-9, 10, (4, 6)).astype(np.int32)
    out = [
        ("slices", lambda a: (a[1:3, ::2], a[1], a[:, -1], a[::-1, 1:5:3]), (x,)),
        ("flip", lambda a: jnp.flip(a, (0, 1)), (x,)),
        ("pad", lambda a: (jnp.pad(a, ((1, 0), (2, 1))), jnp.pad(a, 1, constant_values=2.0)), (x,)),
        ("pad by a value", lambda a, v: jax.lax.pad(a, v, ((0, 1, 1), (1, 0, 0))), (x, np.float32(0.5))),
        ("split", lambda a: jnp.split(a, [2, 5], axis=1), (x,)),
        ("tile", lambda a: jnp.tile(a, (2, 1)), (x,)),
        ("dynamic_slice", lambda a: jax.lax.dynamic_slice(a, (1, 3), (2, 3)), (x,)),
        ("cond", lambda a, b: jax.lax.cond(a.sum() > b.sum(), lambda u: u * 2, lambda u: u - 1, a), (x, y)),
        ("switch", lambda a: jax.lax.switch(jnp.clip(jnp.floor(a.mean() * 10).astype(jnp.int32), 0, 2),
                                            [jnp.tanh, jnp.exp, jnp.abs], a), (x,)),
        ("integer division", lambda i: (i // 3, i % 4, jnp.floor_divide(i, -2), i * 2 - 5, -i, abs(i),
                                        jax.lax.div(i, 4), jax.lax.rem(i, 3)), (k,)),
        ("integer inputs to floats", lambda i, a: i * a + jnp.sign(i), (k, x)),
        ("logic", lambda a, b: ((a > 0) & (b < 0), (a > 0) | (b > 0), (a > 0) ^ (b > 0), ~(a > b),
                                jnp.all(a > -1, axis=1), jnp.any(a > 1, axis=0)), (x, y)),
        ("select_n", lambda a, b: jax.lax.select_n(jnp.clip(jnp.floor(a * 2).astype(jnp.int32), 0, 2), a, b, a * b),
         (x, y)),
        ("powers", lambda a: (jnp.abs(a) ** 2.5, a ** -1, a ** 3, a ** 0, jnp.exp2(a), a ** -2,
                              jax.lax.pow(jnp.abs(a) + 1, a)), (x,)),
        ("clamp", lambda a: (jax.lax.clamp(-0.5, a, 0.5), jnp.clip(a, max=0.2)), (x,)),
        ("custom_vjp and checkpoint", lambda a: jax.checkpoint(lambda u: _scaled_tanh(u) * u)(a), (x,)),
        ("gradient of custom_vjp", jax.grad(lambda a: jnp.sum(_scaled_tanh(a) ** 2)), (x,)),
        ("jax.nn", lambda a: (jax.nn.relu(a), jax.nn.softplus(a), jax.nn.logsumexp(a, axis=0), jax.nn.gelu(a),
                              jax.nn.silu(a), jax.nn.log_sigmoid(a), jax.nn.standardize(a, axis=1)), (x,)),
        ("shapes", lambda a: (jnp.expand_dims(a, (0, 2)), jnp.squeeze(a[None, :, None]), a.reshape(2, 12).T,
                              jnp.concatenate([a, jnp.ones((1, 6))]), jnp.stack([a, a], axis=1),
                              jnp.broadcast_to(a[:, None, :], (4, 3, 6)), a.sum(), a.max(0), a.min()), (x,)),
        ("constants only", lambda a: (jnp.arange(6.0).reshape(2, 3) * 2, jnp.eye(3), a), (x,)),
        ("boolean and integer outputs", lambda a, i: (a > 0, (a * 3).astype(jnp.int32), i.astype(jnp.float32),
                                                      (i > 0).astype(jnp.int32) + i), (x, k)),
        ("unused argument", lambda a, b: a * 2, (x, y)),
    ]
    if hasattr(tra, "argmax"):
        out.append(("argmax", lambda a: (jnp.argmax(a, axis=1), jnp.argmin(a, axis=0)), (x,)))
    return out


def test_more_primitives():
    for name, f, args in more_programs():
        check_numpy(f, *args, what=name)
        want = jax.jit(f)(*args)
        try:
            close(trajax.jit(f)(*args), want, name)
        except Exception as e:
            raise AssertionError(f"{name}: {type(e).__name__}: {e}") from e


def test_local_run_and_sites():
    """The attention and the MLP also run with `tra run`, and for other cluster sizes."""
    local = tra.Session(binary=TRA)
    check(mlp_step, *mlp_args(1), what="mlp step (tra run)", session=local, record=False)
    check(attention, *attention_args(1), what="attention (tra run)", session=local, record=False)
    for sites in (1, 4):
        for session in (tra.Session(url=_url, sites=sites), tra.Session(binary=TRA, sites=sites)):
            check(mlp_step, *mlp_args(2), what=f"mlp step ({session}, {sites} sites)", session=session, record=False)
            check(attention, *attention_args(2), what=f"attention ({session}, {sites} sites)", session=session,
                  record=False)
    # tra.connect_local as the default session.
    try:
        tra.connect_local(TRA, sites=2)
        check(attention, *attention_args(3), what="attention (connect_local)", record=False)
    finally:
        tra.connect(_url, sites=3)


def test_on_two_processes():
    """The training steps, the attention and some random programs across two
    `tra run --processes 2` processes (timely dataflow over loopback); a
    second call reuses the plan."""
    two = tra.Session(binary=TRA, processes=2)
    check(mlp_step, *mlp_args(5), what="mlp step (2 processes)", session=two, record=False)
    check(attention, *attention_args(5), what="attention (2 processes)", session=two, record=False)
    check(logreg_step, *logreg_args(5), what="logistic regression step (2 processes)", session=two, record=False)
    check(logreg_step, *logreg_args(6), what="logistic regression step again (2 processes)", session=two,
          record=False)
    assert two.last_report["sites"] == 2, two.last_report["sites"]
    for seed, f, args, text in list(random_programs())[:8]:
        try:
            close(trajax.jit(f, session=two)(*args), jax.jit(f)(*args), f"random program {seed} (2 processes)")
        except Exception as e:
            raise AssertionError(f"random program {seed} on 2 processes: {text}: {type(e).__name__}: {e}") from e


def test_blocked_arguments():
    check(mlp_step, *mlp_args(4), what="mlp step, blocks of 4", block=4, record=False)
    check(attention, *attention_args(4), what="attention, blocks of 8", block=8, record=False)


class RecordingSession(tra.Session):
    """A service session that keeps the text of every program it computes."""

    def __init__(self, url, sites=None):
        super().__init__(url=url, sites=sites)
        self.programs = []

    def compute(self, exprs):
        import json
        from tra.session import build_program
        self.programs.append(json.dumps(build_program(exprs, self.sites)[0], sort_keys=True))
        return super().compute(exprs)


def test_cache_does_not_trace_again():
    calls = []
    real = jax.make_jaxpr

    def counting(*a, **k):
        calls.append(1)
        return real(*a, **k)

    jax.make_jaxpr = counting
    try:
        tj = trajax.jit(mlp_step)
        p, x, labels = mlp_args(5)
        close(tj(p, x, labels), jax.jit(mlp_step)(p, x, labels), "first call")
        assert len(calls) == 1 and not tj.stats.cache_hit, (calls, tj.stats)
        p2, x2, labels2 = mlp_args(6)
        close(tj(p2, x2, labels2), jax.jit(mlp_step)(p2, x2, labels2), "second call")
        assert len(calls) == 1 and tj.stats.cache_hit, (calls, tj.stats)
        # The same expressions with the same placeholders: the same TRA program text.
        assert tj.lower(p2, x2, labels2) is tj.lower(p, x, labels) and len(calls) == 1
        rec = RecordingSession(_url, sites=3)
        tr = trajax.jit(mlp_step, session=rec)
        tr(p, x, labels)
        tr(p2, x2, labels2)
        assert len(rec.programs) == 2 and rec.programs[0] == rec.programs[1] and len(calls) == 2
        # New shapes trace again.
        x3 = np.concatenate([x, x]).astype(np.float32)
        l3 = np.concatenate([labels, labels])
        close(tj(p, x3, l3), jax.jit(mlp_step)(p, x3, l3), "new shapes")
        assert len(calls) == 3 and not tj.stats.cache_hit and tj.stats.traces == 2
        # Python numbers are traced values of their dtype, not constants.
        scale = trajax.jit(lambda a, c: a * c)
        close(scale(x, 2.0), jax.jit(lambda a, c: a * c)(x, 2.0), "python scalar")
        close(scale(x, 3.0), jax.jit(lambda a, c: a * c)(x, 3.0), "python scalar, again")
        assert scale.stats.traces == 1 and scale.stats.cache_hit
    finally:
        jax.make_jaxpr = real


def test_unsupported_primitive_names_it_and_the_line():
    def f(x):
        return jnp.sort(x, axis=-1) * 2  # THE SORT LINE

    def g(x):
        return jax.lax.cumsum(x, axis=0) + 1

    x = np.ones((4, 4), np.float32)
    line = next(i for i, text in enumerate(open(__file__), 1) if "# THE SORT LINE" in text and "def" not in text)
    for fn, prim, where in [(f, "sort", f"{os.path.basename(__file__)}:{line}"), (g, "cumsum", "test_jax.py")]:
        tj = trajax.jit(fn)
        try:
            tj(x)
        except tra.TraError as e:
            assert e.op == prim, e
            assert prim in str(e) and "equation:" in str(e) and where in str(e), str(e)
        else:
            raise AssertionError(f"{prim} was translated")


def test_unblockable_shape_is_a_tra_error():
    tj = trajax.jit(lambda a: a @ a.T, block=4)
    try:
        tj(np.ones((6, 8), np.float32))
    except tra.TraError as e:
        assert "block" in str(e) and "(6, 8)" in str(e), e
    else:
        raise AssertionError("a 6-row array was cut into blocks of 4")


def test_outputs_known_without_computing():
    f = lambda a: (a, jnp.arange(3), jnp.ones((2,)) * 2, a.sum())  # noqa: E731
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    close(trajax.jit(f)(x), jax.jit(f)(x), "passthrough and constants")


def test_without_jax_import_works_and_jit_says_how_to_install():
    code = ("import sys; sys.modules['jax'] = None; sys.path.insert(0, %r)\n"
            "import tra, tra.jax\n"
            "try:\n    tra.jax.jit(lambda x: x)\nexcept tra.TraError as e:\n    print(e.op, '|', e.message)\n"
            % os.path.join(ROOT, "python"))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "jax | pip install ./python[jax]", (r.stdout, r.stderr)


# --------------------------------------------------------------------- main
def report(file=sys.stdout):
    print("program                          eqns  live translated folded inlined  first: trace+translate  "
          "second: trace+translate  compute(2nd)", file=file)
    for what, first, second in REPORT:
        print(f"{what:<32} {first.equations:>4} {first.equations_all:>5} {first.translated:>10} {first.folded:>6} "
              f"{first.inlined:>7}  {first.trace_s * 1e3:>8.1f}+{first.translate_s * 1e3:.1f} ms        "
              f"{second.trace_s * 1e3:>6.1f}+{second.translate_s * 1e3:.1f} ms "
              f"({'hit' if second.cache_hit else 'miss'})"
              f"  {second.compute_s * 1e3:8.1f} ms", file=file)


def main():
    global TRA, CASES
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tra", default=TRA)
    ap.add_argument("--cases", type=int, default=CASES)
    ap.add_argument("-k", default="", help="run only the tests whose name contains this")
    args = ap.parse_args()
    TRA, CASES = args.tra, args.cases
    status = harness.run_tests(globals(), "tra.jax", setup_module, teardown_module, only=args.k)
    report()
    return status


if __name__ == "__main__":
    sys.exit(main())
