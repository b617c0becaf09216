"""Run JAX functions on tra: ``tra.jax.jit`` translates a jaxpr into one TRA program.

::

    import jax, jax.numpy as jnp, numpy as np, tra, tra.jax
    tra.connect("http://127.0.0.1:8080")

    @tra.jax.jit
    def step(params, x, y):
        def loss(p):
            return jnp.mean((jax.nn.relu(x @ p["w"]) @ p["v"] - y) ** 2)
        l, g = jax.value_and_grad(loss)(params)
        return l, jax.tree_util.tree_map(lambda p, d: p - 0.1 * d, params, g)

    loss, params = step(params, x, y)   # traced, translated, computed by tra
    loss, params = step(params, x, y)   # cached: only the values travel
    print(step.stats)

On the first call for some argument shapes and dtypes the function is traced
with ``jax.make_jaxpr``; the jaxpr is translated equation by equation into
the lazy ``tra`` namespace (``tra.add``, ``tra.einsum``, ``tra.where``, ...)
with a ``tra.placeholder`` for every argument; all the outputs are computed
in one ``tra.compute(..., feed=...)``. Later calls with the same shapes and
dtypes reuse the expressions and feed the new values, so the TRA program text
is the same and the service's caches hit.

The translation inlines ``jit``/``pjit``, ``custom_jvp_call`` and
``custom_vjp_call`` (their primal function: ``jax.nn.relu``,
``jax.nn.softmax``, ``jnp.logaddexp`` ...), ``closed_call`` and
``checkpoint``/``remat``; an equation whose inputs are all known (iota,
arithmetic on literals, ``jax.nn.one_hot``'s index grid) is evaluated with
jax itself and becomes a constant (``tra.array``). A primitive without a
translation (``cumsum``, ``sort``, ``scan``, ``gather`` ...) raises
:class:`tra.TraError` naming the primitive, printing the equation and the
source line JAX recorded; nothing runs then.

jax is optional: ``import tra`` works without it, and :func:`jit` raises
``TraError("jax", "pip install ./python[jax]")`` when it is missing.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import math
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from .expr import TraError

__all__ = ["jit", "Jitted", "JitStats", "Traced", "translate"]

_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _jax() -> Any:
    """The jax module, or a TraError saying how to install it."""
    try:
        return importlib.import_module("jax")
    except ImportError:
        raise TraError("jax", "pip install ./python[jax]") from None


def _tra() -> Any:
    # The package namespace (tra.add, tra.placeholder, tra.compute ...), read at use.
    return importlib.import_module(__name__.rsplit(".", 1)[0])


# ------------------------------------------------------------------- values
class _Const:
    """A value known while translating (a literal, a closed-over constant, a
    folded equation): a numpy array, turned into ``tra.array`` where used."""

    __slots__ = ("value", "expr")

    def __init__(self, value: Any, dtype: Any = None):
        self.value = np.asarray(value, dtype=dtype)
        self.expr: Any = None

    def __repr__(self) -> str:
        return f"_Const({self.value!r})"


def _source_line(eqn: Any) -> str:
    try:
        from jax._src import source_info_util

        return source_info_util.summarize(eqn.source_info) or ""
    except Exception:  # the location is a courtesy; never fail on it
        return ""


def _located(op: str, message: str, eqn: Any, outer: Sequence[Any] = ()) -> TraError:
    """A TraError for `eqn`: the message, the equation and the source line
    (that of the innermost enclosing call when JAX recorded none for `eqn`,
    as for the body of ``jnp.sort``, a jitted jax function)."""
    try:
        text = str(eqn)
    except Exception:
        text = f"<{eqn.primitive.name} equation>"
    text = text.strip().replace("\n", "\n      ")
    line = _source_line(eqn)
    for call in reversed(list(outer)):
        if line:
            break
        line = _source_line(call)
        if line:
            line += f" (inside {call.primitive.name}{_call_name(call)})"
    err = TraError(op, f"{message}\n  equation: {text}\n  at: {line or 'unknown source line'}")
    err.primitive = eqn.primitive.name  # type: ignore[attr-defined]
    err.located = True  # type: ignore[attr-defined]
    return err


def _call_name(eqn: Any) -> str:
    name = eqn.params.get("name")
    return f" '{name}'" if isinstance(name, str) else ""


def _unsupported(eqn: Any, why: str = "", outer: Sequence[Any] = ()) -> TraError:
    name = eqn.primitive.name
    msg = f"the JAX primitive '{name}' has no translation to tra"
    return _located(name, msg + (f" ({why})" if why else ""), eqn, outer)


class _Refuse(Exception):
    """Raised by a translation rule: the primitive is refused with this reason."""


# ------------------------------------------------------------- translator
class _Translator:
    """Translates jaxprs into values of a numpy-like namespace `ns` (tra)."""

    def __init__(self, ns: Any, block: Any = None):
        self.ns = ns
        self.block = block
        self.counts = {"equations": 0, "translated": 0, "folded": 0, "inlined": 0, "dead": 0}
        self.primitives: Dict[str, int] = {}
        #: the call-like equations being inlined, outermost first (for source lines).
        self.outer: List[Any] = []

    # ------------------------------------------------------------ operands
    def const_block(self, shape: Tuple[int, ...]) -> Any:
        if self.block is None or not shape:
            return None
        if callable(self.block):
            try:
                return self.block(tuple(shape))
            except Exception:
                return None
        b = int(self.block)
        return tuple(b if n > b and n % b == 0 else n for n in shape)

    def e(self, v: Any) -> Any:
        """`v` as a namespace array (constants become ``ns.array``, once)."""
        if isinstance(v, _Const):
            if v.expr is None:
                v.expr = self.ns.array(v.value, block=self.const_block(v.value.shape))
            return v.expr
        return v

    def s(self, v: Any) -> Any:
        """`v` as an operand: a 0-d constant is a Python number of its kind."""
        if isinstance(v, _Const) and v.value.ndim == 0:
            kind = v.value.dtype.kind
            item = v.value.item()
            if kind == "b":
                return bool(item)
            if kind in "iu":
                return int(item)
            if kind == "f":
                return float(item)
            return self.e(v)
        return self.e(v)

    # ---------------------------------------------------------------- run
    def run(self, jaxpr: Any, consts: Sequence[Any], args: Sequence[Any]) -> List[Any]:
        """The values of `jaxpr`'s outputs given its constants and inputs."""
        env: Dict[Any, Any] = {}
        for var, c in zip(jaxpr.constvars, consts):
            env[var] = c if isinstance(c, _Const) else _Const(c)
        for var, a in zip(jaxpr.invars, args):
            env[var] = a

        def read(v: Any) -> Any:
            if _is_literal(v):
                return _Const(v.val, dtype=v.aval.dtype)
            return env[v]

        live = _live_equations(jaxpr)
        self.counts["dead"] += len(jaxpr.eqns) - len(live)
        for eqn in live:
            self.counts["equations"] += 1
            ins = [read(v) for v in eqn.invars]
            outs = self.equation(eqn, ins)
            for var, val in zip(eqn.outvars, outs):
                env[var] = val
        return [read(v) for v in jaxpr.outvars]

    def equation(self, eqn: Any, ins: List[Any]) -> List[Any]:
        name = eqn.primitive.name
        self.primitives[name] = self.primitives.get(name, 0) + 1
        sub = _sub_jaxpr(eqn)
        if sub is not None:
            self.counts["inlined"] += 1
            jaxpr, consts = sub
            self.outer.append(eqn)
            try:
                return self.run(jaxpr, consts, ins)
            except TraError as err:
                if getattr(err, "located", False):
                    raise
                raise _located(err.op, err.message, eqn, self.outer[:-1]) from None
            finally:
                self.outer.pop()
        if all(isinstance(v, _Const) for v in ins):  # iota, arithmetic on literals ...
            folded = self.fold(eqn, ins)
            if folded is not None:
                self.counts["folded"] += 1
                return folded
        rule = _RULES.get(name)
        if rule is None:
            raise _unsupported(eqn, outer=self.outer)
        try:
            out = rule(self, eqn, ins, **_rule_params(eqn))
        except _Refuse as why:
            raise _unsupported(eqn, str(why), self.outer) from None
        except TraError as err:
            if getattr(err, "located", False):
                raise
            raise _located(err.op, f"{err.message} (translating the JAX primitive '{name}')", eqn,
                           self.outer) from None
        except Exception as err:  # a namespace or translation mistake: name the equation
            raise _located(name, f"{type(err).__name__}: {err}", eqn, self.outer) from err
        outs = out if eqn.primitive.multiple_results else [out]
        if len(outs) != len(eqn.outvars):
            raise _located(name, f"translated to {len(outs)} values for {len(eqn.outvars)} outputs", eqn,
                           self.outer)
        self.counts["translated"] += 1
        return [self.fit(o, var.aval, eqn) for o, var in zip(outs, eqn.outvars)]

    def fold(self, eqn: Any, ins: List[_Const]) -> Optional[List[_Const]]:
        """Evaluate an equation of known inputs with jax; None if jax cannot."""
        try:
            bound = eqn.primitive.get_bind_params(eqn.params)
            # (subfuns, params) before jax 0.7; the params alone since.
            subfuns, params = bound if isinstance(bound, tuple) else ((), bound)
            out = eqn.primitive.bind(*subfuns, *[c.value for c in ins], **params)
            outs = out if eqn.primitive.multiple_results else [out]
            return [_Const(np.asarray(o)) for o in outs]
        except Exception:
            return None

    def fit(self, value: Any, aval: Any, eqn: Any) -> Any:
        """`value` with the output's dtype; its shape must be the output's."""
        if isinstance(value, _Const):
            want = tuple(aval.shape)
            v = value.value
            if v.shape != want:
                v = np.broadcast_to(v, want)
            return value if v is value.value and v.dtype == aval.dtype else _Const(v.astype(aval.dtype))
        shape = tuple(getattr(value, "shape", ()))
        if shape != tuple(aval.shape):
            if not shape and isinstance(value, (bool, int, float)):
                return _Const(np.full(tuple(aval.shape), value, dtype=aval.dtype))
            raise _located(eqn.primitive.name, f"the translation has shape {shape}, JAX's output "
                                               f"{tuple(aval.shape)}", eqn, self.outer)
        dtype = getattr(value, "dtype", None)
        if dtype is None or np.dtype(dtype) != np.dtype(aval.dtype):
            value = self.ns.astype(value, np.dtype(aval.dtype))
        return value


def _is_literal(v: Any) -> bool:
    return type(v).__name__ == "Literal" and hasattr(v, "val")


def _live_equations(jaxpr: Any) -> List[Any]:
    """The equations an output depends on (and any with effects), in order."""
    live = {id(v) for v in jaxpr.outvars if not _is_literal(v)}
    keep = []
    for eqn in reversed(jaxpr.eqns):
        if getattr(eqn, "effects", None) or any(id(v) in live for v in eqn.outvars):
            keep.append(eqn)
            live.update(id(v) for v in eqn.invars if not _is_literal(v))
    keep.reverse()
    return keep


_CALL_PARAMS = ("jaxpr", "call_jaxpr", "fun_jaxpr")
# Call-like primitives whose body is a function of exactly the equation's inputs.
_INLINED = {"pjit", "jit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call",
            "custom_vjp_call_jaxpr", "remat", "remat2", "checkpoint"}


def _sub_jaxpr(eqn: Any) -> Optional[Tuple[Any, List[Any]]]:
    """(jaxpr, consts) of an inlinable call-like equation, else None."""
    if eqn.primitive.name not in _INLINED:
        return None
    for key in _CALL_PARAMS:
        j = eqn.params.get(key)
        if j is None:
            continue
        if hasattr(j, "jaxpr") and hasattr(j, "consts"):  # ClosedJaxpr
            return j.jaxpr, list(j.consts)
        if hasattr(j, "eqns"):  # an open Jaxpr (checkpoint)
            return j, []
    return None


def _rule_params(eqn: Any) -> dict:
    return dict(eqn.params)


# ------------------------------------------------------------------ rules
_RULES: Dict[str, Callable[..., Any]] = {}


def _rule(*names: str) -> Callable:
    def deco(fn: Callable) -> Callable:
        for n in names:
            _RULES[n] = fn
        return fn

    return deco


def _dtype(v: Any) -> np.dtype:
    if isinstance(v, _Const):
        return v.value.dtype
    return np.dtype(v.dtype)


def _shape(v: Any) -> Tuple[int, ...]:
    if isinstance(v, _Const):
        return v.value.shape
    return tuple(v.shape)


def _is_float(v: Any) -> bool:
    return _dtype(v).kind == "f"


def _binary(fname: str) -> Callable:
    def rule(t: _Translator, eqn: Any, ins: List[Any], **_: Any) -> Any:
        a, b = ins
        return getattr(t.ns, fname)(t.s(a), t.s(b))

    return rule


for _prim, _fn in {"add": "add", "add_any": "add", "sub": "subtract", "mul": "multiply", "pow": "power",
                   "eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal", "gt": "greater",
                   "ge": "greater_equal"}.items():
    _RULES[_prim] = _binary(_fn)


def _infinite(v: Any, sign: int) -> bool:
    return (isinstance(v, _Const) and v.value.ndim == 0 and v.value.dtype.kind == "f"
            and bool(np.isinf(v.value)) and np.sign(v.value) == sign)


@_rule("max", "min")
def _max_min(t: _Translator, eqn: Any, ins: List[Any], **_: Any) -> Any:
    a, b = ins
    is_max = eqn.primitive.name == "max"
    # max(-inf, x) and min(+inf, x) are x (jax.nn.softmax writes the first).
    neutral = -1 if is_max else 1
    if _infinite(a, neutral):
        return b
    if _infinite(b, neutral):
        return a
    return (t.ns.maximum if is_max else t.ns.minimum)(t.s(a), t.s(b))


def _trunc(t: _Translator, q: Any) -> Any:
    return t.ns.where(t.ns.less(q, 0), t.ns.ceil(q), t.ns.floor(q))


@_rule("div")
def _div(t: _Translator, eqn: Any, ins: List[Any], **_: Any) -> Any:
    a, b = ins
    if _is_float(eqn.outvars[0].aval):
        return t.ns.divide(t.s(a), t.s(b))
    # Integer division rounds toward zero (C's, not numpy's floor).
    q = t.ns.divide(t.s(a), t.s(b))
    return _trunc(t, q)


@_rule("rem")
def _rem(t: _Translator, eqn: Any, ins: List[Any], **_: Any) -> Any:
    a, b = ins
    # The remainder takes the dividend's sign (C's fmod): a - b * trunc(a / b).
    q = _trunc(t, t.ns.divide(t.s(a), t.s(b)))
    return t.ns.subtract(t.s(a), t.ns.multiply(t.s(b), q))


def _unary(fname: str) -> Callable:
    def rule(t: _Translator, eqn: Any, ins: List[Any], **_: Any) -> Any:
        fn = getattr(t.ns, fname, None)
        if fn is None:
            raise _Refuse(f"the tra namespace has no {fname}")
        return fn(t.e(ins[0]))

    return rule


for _prim, _fn in {"neg": "negative", "exp": "exp", "log": "log", "log1p": "log1p", "expm1": "expm1",
                   "tanh": "tanh", "logistic": "sigmoid", "sqrt": "sqrt", "rsqrt": "rsqrt", "abs": "abs",
                   "sign": "sign", "floor": "floor", "ceil": "ceil", "erf": "erf"}.items():
    _RULES[_prim] = _unary(_fn)


@_rule("square")
def _square(t: _Translator, eqn: Any, ins: List[Any], **_: Any) -> Any:
    x = t.e(ins[0])
    return t.ns.square(x) if hasattr(t.ns, "square") else t.ns.multiply(x, x)


@_rule("exp2")
def _exp2(t: _Translator, eqn: Any, ins: List[Any], **_: Any) -> Any:
    return t.ns.exp(t.ns.multiply(t.e(ins[0]), math.log(2.0)))


@_rule("integer_pow")
def _integer_pow(t: _Translator, eqn: Any, ins: List[Any], y: int, **_: Any) -> Any:
    x = t.e(ins[0])
    if y == 0:
        return _Const(np.ones(_shape(x), dtype=_dtype(x)))
    if y == 1:
        return x
    if y == 2:
        return _square(t, eqn, ins)
    if y == -1 and _is_float(x):
        return t.ns.divide(1.0, x)
    if y < 0 and not _is_float(x):
        raise _Refuse("a negative power of integers")
    return t.ns.power(x, float(y) if _is_float(x) else int(y))


@_rule("is_finite")
def _is_finite(t: _Translator, eqn: Any, ins: List[Any], **_: Any) -> Any:
    # |x| <= the largest finite number is false for ±inf and NaN.
    x = t.e(ins[0])
    return t.ns.less_equal(t.ns.abs(x), float(np.finfo(_dtype(x)).max))


@_rule("not")
def _not(t: _Translator, eqn: Any, ins: List[Any], **_: Any) -> Any:
    if _dtype(ins[0]).kind != "b":
        raise _Refuse("bitwise not of integers")
    return t.ns.logical_not(t.e(ins[0]))


def _logical(fname: str) -> Callable:
    def rule(t: _Translator, eqn: Any, ins: List[Any], **_: Any) -> Any:
        if any(_dtype(v).kind != "b" for v in ins):
            raise _Refuse(f"bitwise {eqn.primitive.name} of integers")
        return getattr(t.ns, fname)(t.s(ins[0]), t.s(ins[1]))

    return rule


_RULES["and"] = _logical("logical_and")
_RULES["or"] = _logical("logical_or")
_RULES["xor"] = _logical("not_equal")


@_rule("select_n")
def _select_n(t: _Translator, eqn: Any, ins: List[Any], **_: Any) -> Any:
    pred, cases = ins[0], ins[1:]
    if len(cases) == 1:
        return cases[0]
    if isinstance(pred, _Const):
        p = pred.value
        if p.ndim == 0 or (p == p.flat[0]).all():
            return cases[int(p.flat[0])]
    if _dtype(pred).kind == "b":
        return t.ns.where(t.e(pred), t.s(cases[1]), t.s(cases[0]))
    p = t.e(pred)
    out = t.s(cases[0])
    for i in range(1, len(cases)):
        out = t.ns.where(t.ns.equal(p, i), t.s(cases[i]), out)
    return out


@_rule("clamp")
def _clamp(t: _Translator, eqn: Any, ins: List[Any], **_: Any) -> Any:
    lo, x, hi = ins
    if isinstance(x, _Const):
        return t.ns.minimum(t.ns.maximum(t.e(x), t.s(lo)), t.s(hi))
    return t.ns.clip(x, t.s(lo), t.s(hi))


@_rule("convert_element_type")
def _convert(t: _Translator, eqn: Any, ins: List[Any], new_dtype: Any, **_: Any) -> Any:
    x = t.e(ins[0])
    if _dtype(x) == np.dtype(new_dtype):
        return x
    return t.ns.astype(x, np.dtype(new_dtype))


@_rule("stop_gradient", "copy", "copy_p", "optimization_barrier", "sharding_constraint", "mesh_cast",
       "pvary", "reduce_precision")
def _identity(t: _Translator, eqn: Any, ins: List[Any], **params: Any) -> Any:
    if eqn.primitive.name == "reduce_precision":
        info = np.finfo(_dtype(ins[0]))
        if params.get("mantissa_bits", 0) < info.nmant or params.get("exponent_bits", 0) < info.nexp:
            raise _Refuse(f"rounding {_dtype(ins[0])} to {params.get('exponent_bits')} exponent and "
                          f"{params.get('mantissa_bits')} mantissa bits")
    return list(ins) if eqn.primitive.multiple_results else ins[0]


def _einsum_spec(lhs: Sequence[str], rhs: Sequence[str], out: Sequence[str]) -> str:
    return f"{''.join(lhs)},{''.join(rhs)}->{''.join(out)}"


@_rule("dot_general")
def _dot_general(t: _Translator, eqn: Any, ins: List[Any], dimension_numbers: Any, **_: Any) -> Any:
    (lc, rc), (lb, rb) = dimension_numbers
    a, b = t.e(ins[0]), t.e(ins[1])
    na, nb = len(_shape(a)), len(_shape(b))
    letters = iter(_LETTERS)
    la = [next(letters) for _ in range(na)]
    lb_ = [""] * nb
    for i, j in zip(lb, rb):
        lb_[j] = la[i]
    for i, j in zip(lc, rc):
        lb_[j] = la[i]
    for j in range(nb):
        if not lb_[j]:
            lb_[j] = next(letters)
    out = ([la[i] for i in lb] + [la[i] for i in range(na) if i not in lb and i not in lc]
           + [lb_[j] for j in range(nb) if j not in rb and j not in rc])
    return t.ns.einsum(_einsum_spec(la, lb_, out), a, b)


def _reduce(fname: str) -> Callable:
    def rule(t: _Translator, eqn: Any, ins: List[Any], axes: Sequence[int], **_: Any) -> Any:
        x = t.e(ins[0])
        if not axes:
            return x
        return getattr(t.ns, fname)(x, axis=tuple(int(a) for a in axes))

    return rule


_RULES["reduce_sum"] = _reduce("sum")
_RULES["reduce_max"] = _reduce("max")
_RULES["reduce_min"] = _reduce("min")


@_rule("reduce_and", "reduce_or")
def _reduce_logical(t: _Translator, eqn: Any, ins: List[Any], axes: Sequence[int], **_: Any) -> Any:
    if _dtype(ins[0]).kind != "b":
        raise _Refuse("bitwise reduction of integers")
    fname = "min" if eqn.primitive.name == "reduce_and" else "max"
    return _reduce(fname)(t, eqn, ins, axes)


@_rule("argmax", "argmin")
def _argmax(t: _Translator, eqn: Any, ins: List[Any], axes: Sequence[int], **_: Any) -> Any:
    fn = getattr(t.ns, eqn.primitive.name, None)
    if fn is None:
        raise _Refuse(f"the tra namespace has no {eqn.primitive.name}")
    (axis,) = axes
    return fn(t.e(ins[0]), axis=int(axis))


@_rule("broadcast_in_dim")
def _broadcast_in_dim(t: _Translator, eqn: Any, ins: List[Any], shape: Sequence[int],
                      broadcast_dimensions: Sequence[int], **_: Any) -> Any:
    if len(ins) != 1:
        raise _Refuse("dynamic shapes")
    x = t.e(ins[0])
    shape = tuple(int(n) for n in shape)
    dims = tuple(int(d) for d in broadcast_dimensions)
    rank = len(shape)
    if dims != tuple(range(rank - len(dims), rank)):  # numpy aligns trailing axes; else add ones
        missing = tuple(i for i in range(rank) if i not in dims)
        x = t.ns.expand_dims(x, missing)
    if tuple(_shape(x)) != shape:
        x = t.ns.broadcast_to(x, shape)
    return x


@_rule("reshape")
def _reshape(t: _Translator, eqn: Any, ins: List[Any], new_sizes: Sequence[int], dimensions: Any = None,
             **_: Any) -> Any:
    if len(ins) != 1:
        raise _Refuse("dynamic shapes")
    x = t.e(ins[0])
    if dimensions is not None and tuple(dimensions) != tuple(range(len(_shape(x)))):
        x = t.ns.transpose(x, tuple(int(d) for d in dimensions))
    new = tuple(int(n) for n in new_sizes)
    return x if tuple(_shape(x)) == new else t.ns.reshape(x, new)


@_rule("transpose")
def _transpose(t: _Translator, eqn: Any, ins: List[Any], permutation: Sequence[int], **_: Any) -> Any:
    x = t.e(ins[0])
    perm = tuple(int(p) for p in permutation)
    return x if perm == tuple(range(len(perm))) else t.ns.transpose(x, perm)


@_rule("squeeze")
def _squeeze(t: _Translator, eqn: Any, ins: List[Any], dimensions: Sequence[int], **_: Any) -> Any:
    x = t.e(ins[0])
    return t.ns.squeeze(x, axis=tuple(int(d) for d in dimensions)) if dimensions else x


@_rule("expand_dims")
def _expand_dims(t: _Translator, eqn: Any, ins: List[Any], dimensions: Sequence[int], **_: Any) -> Any:
    return t.ns.expand_dims(t.e(ins[0]), tuple(int(d) for d in dimensions))


@_rule("tile")
def _tile(t: _Translator, eqn: Any, ins: List[Any], reps: Sequence[int], **_: Any) -> Any:
    x = t.e(ins[0])
    shape = _shape(x)
    reps = tuple(int(r) for r in reps)
    if len(reps) != len(shape):
        raise _Refuse(f"reps {reps} for a rank-{len(shape)} operand")
    if all(r == 1 for r in reps):
        return x
    # (n0, n1) -> (1, n0, 1, n1) -> (r0, n0, r1, n1) -> (r0 n0, r1 n1).
    paired = tuple(d for n in shape for d in (1, n))
    x = t.ns.reshape(x, paired)
    x = t.ns.broadcast_to(x, tuple(d for r, n in zip(reps, shape) for d in (r, n)))
    return t.ns.reshape(x, tuple(r * n for r, n in zip(reps, shape)))


@_rule("stack")
def _stack(t: _Translator, eqn: Any, ins: List[Any], axis: int, **_: Any) -> Any:
    xs = [t.e(v) for v in ins]
    if hasattr(t.ns, "stack"):
        return t.ns.stack(xs, axis=int(axis))
    return t.ns.concatenate([t.ns.expand_dims(x, int(axis)) for x in xs], axis=int(axis))


@_rule("concatenate")
def _concatenate(t: _Translator, eqn: Any, ins: List[Any], dimension: int, **_: Any) -> Any:
    return t.ns.concatenate([t.e(v) for v in ins], axis=int(dimension))


# Slicing, reversing and padding: tra has no indexing, so each is an einsum
# with a 0/1 selection matrix (sel[i, j] = 1: output j is input i) per axis.
def _select(t: _Translator, x: Any, axis: int, sources: Sequence[Optional[int]]) -> Any:
    n = _shape(x)[axis]
    if list(sources) == list(range(n)):
        return x
    sel = np.zeros((n, len(sources)), dtype=_dtype(x))
    for j, i in enumerate(sources):
        if i is not None:
            sel[i, j] = 1
    rank = len(_shape(x))
    lx = list(_LETTERS[:rank])
    new = _LETTERS[rank]
    out = list(lx)
    out[axis] = new
    return t.ns.einsum(_einsum_spec(lx, [lx[axis], new], out), x, t.e(_Const(sel)))


def _slice_axes(t: _Translator, x: Any, starts: Sequence[int], limits: Sequence[int],
                strides: Optional[Sequence[int]]) -> Any:
    strides = strides or [1] * len(starts)
    for axis, (s, l, st) in enumerate(zip(starts, limits, strides)):
        x = _select(t, x, axis, list(range(int(s), int(l), int(st))))
    return x


@_rule("slice")
def _slice(t: _Translator, eqn: Any, ins: List[Any], start_indices: Sequence[int], limit_indices: Sequence[int],
           strides: Optional[Sequence[int]] = None, **_: Any) -> Any:
    return _slice_axes(t, t.e(ins[0]), start_indices, limit_indices, strides)


@_rule("split")
def _split(t: _Translator, eqn: Any, ins: List[Any], sizes: Sequence[int], axis: int, **_: Any) -> Any:
    x = t.e(ins[0])
    outs, start = [], 0
    for size in sizes:
        sources = list(range(start, start + int(size)))
        outs.append(_select(t, x, int(axis), sources))
        start += int(size)
    return outs


@_rule("rev")
def _rev(t: _Translator, eqn: Any, ins: List[Any], dimensions: Sequence[int], **_: Any) -> Any:
    x = t.e(ins[0])
    for axis in dimensions:
        n = _shape(x)[int(axis)]
        x = _select(t, x, int(axis), list(range(n - 1, -1, -1)))
    return x


@_rule("dynamic_slice")
def _dynamic_slice(t: _Translator, eqn: Any, ins: List[Any], slice_sizes: Sequence[int], **_: Any) -> Any:
    x, idx = ins[0], ins[1:]
    if len(idx) != len(slice_sizes) or not all(isinstance(i, _Const) for i in idx):
        raise _Refuse("start indices computed from the arguments")
    shape = _shape(x)
    # JAX clamps the start so that the slice fits.
    starts = [min(max(int(i.value), 0), n - int(s)) for i, n, s in zip(idx, shape, slice_sizes)]
    limits = [s + int(z) for s, z in zip(starts, slice_sizes)]
    return _slice_axes(t, t.e(x), starts, limits, None)


@_rule("pad")
def _pad(t: _Translator, eqn: Any, ins: List[Any], padding_config: Sequence[Tuple[int, int, int]],
         **_: Any) -> Any:
    x, value = t.e(ins[0]), ins[1]
    shape = _shape(x)
    mask = np.ones((), dtype=bool)
    for axis, (lo, hi, interior) in enumerate(padding_config):
        lo, hi, interior = int(lo), int(hi), int(interior)
        n = shape[axis]
        size = lo + hi + n + max(n - 1, 0) * interior
        sources: List[Optional[int]] = [None] * size
        for i in range(n):
            j = lo + i * (interior + 1)
            if 0 <= j < size:
                sources[j] = i
        x = _select(t, x, axis, sources)
        m = np.array([s is not None for s in sources])
        mask = mask[..., None] & m
    if not mask.all():
        gaps = (~mask).astype(_dtype(x))
        if isinstance(value, _Const):
            if float(value.value) != 0:
                x = t.ns.add(x, t.e(_Const(gaps * value.value)))
        else:
            x = t.ns.add(x, t.ns.multiply(t.e(value), t.e(_Const(gaps))))
    return x


@_rule("cond")
def _cond(t: _Translator, eqn: Any, ins: List[Any], branches: Sequence[Any], **_: Any) -> Any:
    index, ops = ins[0], ins[1:]
    t.outer.append(eqn)
    try:
        if isinstance(index, _Const):
            i = min(max(int(index.value), 0), len(branches) - 1)
            return t.run(branches[i].jaxpr, branches[i].consts, ops)
        # The branches have no effects: compute every one and select.
        results = [t.run(b.jaxpr, b.consts, ops) for b in branches]
    finally:
        t.outer.pop()
    outs = []
    for k, var in enumerate(eqn.outvars):
        cases = [t.fit(r[k], var.aval, eqn) for r in results]
        idx = t.ns.minimum(t.ns.maximum(t.e(index), 0), len(branches) - 1)
        p = idx if len(branches) > 2 else t.ns.astype(idx, np.dtype(bool))
        outs.append(_select_n(t, eqn, [p, *cases]))
    return outs


# --------------------------------------------------------------- translate
def translate(closed_jaxpr: Any, args: Sequence[Any], namespace: Any = None, block: Any = None,
              stats: Optional[dict] = None) -> List[Any]:
    """Translate a ``jax.make_jaxpr`` result applied to `args` (values of the
    namespace, e.g. ``tra.placeholder``s) into values of `namespace` (default:
    ``tra``). Outputs known without computing are numpy arrays. Raises
    TraError naming the first primitive it cannot translate. `stats`, if
    given, receives the counts of equations translated, folded and inlined."""
    ns = namespace if namespace is not None else _tra()
    t = _Translator(ns, block)
    outs = t.run(closed_jaxpr.jaxpr, list(closed_jaxpr.consts), list(args))
    if stats is not None:
        stats.update(t.counts)
        stats["primitives"] = dict(t.primitives)
    return [o.value if isinstance(o, _Const) else o for o in outs]


# --------------------------------------------------------------------- jit
@dataclasses.dataclass
class JitStats:
    """What the last call of a :func:`jit` function did."""

    calls: int = 0
    traces: int = 0  # calls that traced with jax.make_jaxpr
    cache_hit: bool = False  # the last call reused traced and translated expressions
    equations: int = 0  # equations of the traced jaxpr (top level)
    equations_all: int = 0  # live equations visited, inlined bodies included
    translated: int = 0  # equations turned into tra operations
    folded: int = 0  # equations evaluated with jax (all inputs known)
    inlined: int = 0  # call-like equations (jit, custom_jvp_call, ...) inlined
    dead: int = 0  # equations no output depends on
    trace_s: float = 0.0  # time in jax.make_jaxpr (last trace)
    translate_s: float = 0.0  # time translating (last trace)
    compute_s: float = 0.0  # time in tra.compute (last call)
    primitives: Dict[str, int] = dataclasses.field(default_factory=dict)

    def summary(self) -> str:
        return (f"{self.equations} equations ({self.equations_all} with inlined bodies): "
                f"{self.translated} translated, {self.folded} folded, {self.inlined} inlined, {self.dead} dead; "
                f"trace {self.trace_s * 1e3:.1f} ms, translate {self.translate_s * 1e3:.1f} ms, "
                f"compute {self.compute_s * 1e3:.1f} ms, cache {'hit' if self.cache_hit else 'miss'}")


@dataclasses.dataclass
class Traced:
    """A function traced and translated for one argument signature (cached)."""

    placeholders: Dict[int, Any]  # argument leaf index -> its tra.placeholder
    exprs: List[Any]  # the distinct tra expressions computed on every call
    outs: List[Tuple[str, Any]]  # per output leaf: ('expr', k) | ('const', array) | ('arg', leaf index)
    avals: List[Tuple[Tuple[int, ...], np.dtype]]  # JAX's shape and dtype of each output leaf
    out_tree: Any  # the output pytree structure
    counts: dict  # equations translated, folded, inlined, dead; primitives seen
    trace_s: float
    translate_s: float
    jaxpr: Any  # the ClosedJaxpr


class Jitted:
    """A function traced by JAX and run by tra (made by :func:`jit`)."""

    def __init__(self, f: Callable, session: Any = None, block: Any = None):
        self.f = f
        self.session = session
        self.block = block
        self.stats = JitStats()
        self._cache: Dict[Any, Traced] = {}
        functools.update_wrapper(self, f)

    def __repr__(self) -> str:
        return f"tra.jax.jit({getattr(self.f, '__name__', self.f)!r})"

    # ---------------------------------------------------------- arguments
    def _leaves(self, args: tuple, kwargs: dict) -> Tuple[List[np.ndarray], List[Any], Any, tuple]:
        jax = _jax()
        leaves, in_tree = jax.tree_util.tree_flatten((args, kwargs))
        arrays, specs, key = [], [], []
        for i, leaf in enumerate(leaves):
            weak = isinstance(leaf, (bool, int, float)) and not isinstance(leaf, np.generic)
            try:
                arr = np.asarray(leaf)
            except Exception as err:
                raise TraError("jax", f"argument leaf {i} ({type(leaf).__name__}) is not an array: {err}") from None
            if arr.dtype.kind not in "biuf":
                raise TraError("jax", f"argument leaf {i} has dtype {arr.dtype}; tra carries booleans, "
                                      f"integers and floats")
            dtype = np.dtype(jax.dtypes.canonicalize_dtype(arr.dtype))
            arr = np.asarray(arr, dtype=dtype)
            arrays.append(arr)
            # A Python number is traced as JAX traces it: a weakly typed scalar.
            specs.append(leaf if weak else jax.ShapeDtypeStruct(arr.shape, dtype))
            key.append((arr.shape, dtype.str, weak))
        return arrays, specs, in_tree, tuple(key)

    # --------------------------------------------------------------- build
    def _build(self, specs: List[Any], in_tree: Any) -> Traced:
        jax = _jax()
        tra = _tra()
        out_tree: List[Any] = []

        def flat(*leaves: Any) -> List[Any]:
            args, kwargs = jax.tree_util.tree_unflatten(in_tree, leaves)
            out = self.f(*args, **kwargs)
            out_leaves, tree = jax.tree_util.tree_flatten(out)
            out_tree.append(tree)
            return out_leaves

        t0 = time.perf_counter()
        closed = jax.make_jaxpr(flat)(*specs)
        t1 = time.perf_counter()
        jaxpr = closed.jaxpr
        placeholders: Dict[int, Any] = {}
        args = []
        used = {id(v) for e in _live_equations(jaxpr) for v in e.invars} | {id(v) for v in jaxpr.outvars}
        for i, var in enumerate(jaxpr.invars):
            if id(var) not in used:
                args.append(None)
                continue
            shape, dtype = tuple(var.aval.shape), np.dtype(var.aval.dtype)
            block = self._input_block(shape, dtype)
            try:
                ph = tra.placeholder(shape, dtype, block=block)
            except TraError as err:
                raise TraError(err.op, f"{err.message} (argument leaf {i} of shape {shape}, block {block})") \
                    from None
            placeholders[i] = ph
            args.append(ph)
        counts: dict = {}
        values = translate(closed, args, tra, block=self.block, stats=counts)
        t2 = time.perf_counter()
        exprs: List[Any] = []
        index: Dict[int, int] = {}
        outs: List[Tuple[str, Any]] = []
        invar_pos = {id(v): i for i, v in enumerate(jaxpr.invars)}
        for var, val in zip(jaxpr.outvars, values):
            if not _is_literal(var) and id(var) in invar_pos:
                outs.append(("arg", invar_pos[id(var)]))
            elif isinstance(val, np.ndarray):
                outs.append(("const", val))
            else:
                if id(val) not in index:
                    index[id(val)] = len(exprs)
                    exprs.append(val)
                outs.append(("expr", index[id(val)]))
        counts["equations_top"] = len(jaxpr.eqns)
        avals = [(tuple(v.aval.shape), np.dtype(v.aval.dtype)) for v in jaxpr.outvars]
        return Traced(placeholders, exprs, outs, avals, out_tree[0], counts, t1 - t0, t2 - t1, closed)

    def _input_block(self, shape: Tuple[int, ...], dtype: np.dtype) -> Any:
        if self.block is None or not shape:
            return None
        if callable(self.block):
            return self.block(shape)
        b = int(self.block)
        # An axis shorter than the block is one block; a longer one must be cut evenly.
        return tuple(min(b, n) if n else b for n in shape)

    # ---------------------------------------------------------------- call
    def lower(self, *args: Any, **kwargs: Any) -> Traced:
        """The traced and translated program for these arguments (cached)."""
        _, specs, in_tree, key = self._leaves(args, kwargs)
        return self._entry(specs, in_tree, key)[0]

    def _entry(self, specs: List[Any], in_tree: Any, key: tuple) -> Tuple[Traced, bool]:
        cache_key = (in_tree, key)
        entry = self._cache.get(cache_key)
        if entry is not None:
            return entry, True
        entry = self._build(specs, in_tree)
        self._cache[cache_key] = entry
        self.stats.traces += 1
        return entry, False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        jax = _jax()
        tra = _tra()
        arrays, specs, in_tree, key = self._leaves(args, kwargs)
        entry, hit = self._entry(specs, in_tree, key)
        t0 = time.perf_counter()
        values: List[np.ndarray] = []
        if entry.exprs:
            feed = {ph: arrays[i] for i, ph in entry.placeholders.items()}
            values = tra.compute(*entry.exprs, feed=feed, session=self.session)
        t1 = time.perf_counter()
        results = []
        for (kind, what), (shape, dtype) in zip(entry.outs, entry.avals):
            if kind == "expr":
                v = values[what]
            elif kind == "arg":
                v = arrays[what]
            else:
                v = what
            results.append(_as_output(v, shape, dtype))
        s = self.stats
        s.calls += 1
        s.cache_hit = hit
        s.compute_s = t1 - t0
        c = entry.counts
        s.equations, s.equations_all = c.get("equations_top", 0), c.get("equations", 0)
        s.translated, s.folded, s.inlined, s.dead = c["translated"], c["folded"], c["inlined"], c["dead"]
        s.primitives = dict(c.get("primitives", {}))
        s.trace_s, s.translate_s = (0.0, 0.0) if hit else (entry.trace_s, entry.translate_s)
        return jax.tree_util.tree_unflatten(entry.out_tree, results)


def _as_output(v: Any, shape: Tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    v = np.asarray(v)
    if dtype.kind == "b":
        out = v if v.dtype.kind == "b" else v != 0
    elif dtype.kind in "iu" and v.dtype.kind == "f":
        out = np.rint(v)
    else:
        out = v
    return np.array(out, dtype=dtype).reshape(shape)


def jit(f: Optional[Callable] = None, *, session: Any = None,
        block: Union[int, Callable[[Tuple[int, ...]], Any], None] = None) -> Any:
    """Run `f` (a function of arrays, written with jax) on tra.

    The returned callable has `f`'s signature: pytrees of arrays in, `f`'s
    output pytree of numpy arrays (JAX's shapes and dtypes) out. Each new
    combination of argument structure, shapes and dtypes is traced with
    ``jax.make_jaxpr`` and translated once; every call computes all the
    outputs in one ``tra.compute``. `session`: where it runs (the default
    session at call time if None). `block`: how arguments are cut into
    blocks: an int for every axis (an axis shorter than it is one block, a
    longer one must be a multiple of it), a function of the shape giving the
    block tuple, or None (every argument one block). ``.stats`` says what the
    last call did. Usable as ``@jit`` or ``@jit(block=64)``.
    """
    _jax()
    if f is None:
        return lambda g: Jitted(g, session=session, block=block)
    return Jitted(f, session=session, block=block)
