"""Lazy N-dimensional arrays and their translation into TRA programs.

An :class:`Expr` knows its numpy shape, dtype and how it is cut into blocks;
it records an operation and its operands and computes nothing.
:class:`Builder` turns one or more expressions into a TRA program, every
shared sub-expression once (a node equal to one already built is reused).

How a value is held
-------------------
An array of rank ``r`` and shape ``(n0, …)`` cut into blocks ``(b0, …)`` is a
relation with key arity ``r`` (key dimension ``i`` is axis ``i``, bound
``ni / bi``) and blocks of rank ``r`` and shape ``(b0, …)``; a 0-d array is
one tuple with the empty key and a block of shape ``()``. An empty axis is
one block of size 0. Booleans and integers are carried as 0/1 and integral
floats inside float blocks; :attr:`Expr.dtype` keeps numpy's dtype and the
computed result is converted to it.

How operations map onto TRA
---------------------------
- Elementwise with numpy broadcasting: a join on the axes both operands have
  at full size; a size-1 axis is not joined (its block of extent 1 is
  broadcast by the kernel: ``add``, ``sub``, ``mul``, ``div``, ``pow``,
  ``maximum``, ``lt``, …, or ``matAdd``/``elemMul``/… when both blocks have one
  shape), then a rekey back to axis order. ``where(c, x, y)`` is
  ``selectIf(c, x) + selectElse(c, y)``.
- ``matmul``/``einsum``: a join on the shared letters with an ``einSum``
  block kernel and an aggregation (``matAdd``) over the summed letters; a 2-D
  product is ``matMul`` so the optimizer's matmul rules apply.
- Reductions: ``einSum``/``einMax``/``einMin`` inside blocks, an aggregation
  (``matAdd``/``max``/``min``) across them.
- ``transpose``: a rekey and an ``einSum`` permutation (``transpose`` in 2-D).
- ``reshape``: a rekey when it regroups whole blocks, with ``mergeAxes``,
  ``splitAxis``, ``expandDims``, ``squeezeAxis`` inside blocks; axes that
  would not stay block-aligned are first re-blocked.
- Re-blocking an axis (when operands are cut differently, or for a reshape or
  a concatenation): ``concat`` of its blocks into one, then ``tile``.
- ``concatenate``: a join on every other axis with ``concatAxis``.
"""

from __future__ import annotations

import builtins
import json
import math
import numbers
import os
import re
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

Shape = Tuple[int, ...]


class TraError(Exception):
    """A mistake in an expression, or an error from tra, naming the operation."""

    def __init__(self, op: str, message: str):
        super().__init__(f"{op}: {message}")
        self.op = op
        self.message = message


class Builder:
    """Collects the TRA nodes, inputs and input data of some expressions."""

    def __init__(self, names: Optional[Dict[int, str]] = None) -> None:
        #: id(expression) -> the user's variable name for it (see :func:`user_names`).
        self.names = names or {}
        self._emitting: List["Expr"] = []
        self._used: set = set()
        self.inputs: Dict[str, dict] = {}
        self.data: Dict[str, np.ndarray] = {}
        self.nodes: Dict[str, dict] = {}
        #: node or input name -> the front-end operation it was built for.
        self.origin: Dict[str, str] = {}
        self._by_spec: Dict[str, str] = {}
        self._by_expr: Dict[int, str] = {}
        self._keep: List[Any] = []
        #: inputs of placeholders built without a value.
        self.unfed: List[str] = []

    def name_of(self, e: "Expr") -> str:
        """The node holding `e`, built on first use."""
        key = id(e)
        if key not in self._by_expr:
            self._keep.append(e)  # ids stay unique while the builder lives
            nodes, inputs = len(self.nodes), len(self.inputs)
            self._emitting.append(e)
            try:
                name = e._emit(self)
            finally:
                self._emitting.pop()
            if key in self.names:
                name = self._rename(name, self.names[key], nodes, inputs)
            self._by_expr[key] = name
        return self._by_expr[key]

    def _fresh(self, base: str) -> str:
        """`base`, or `base_2`, `base_3`, … if taken."""
        name, i = base, 1
        while name in self._used:
            i += 1
            name = f"{base}_{i}"
        self._used.add(name)
        return name

    def _default_name(self, op: str) -> str:
        """An unnamed node: its operation and the shape of the expression being built (`max_256x1`)."""
        shape = self._emitting[-1].shape if self._emitting else ()
        return self._fresh(f"{re.sub(r'[^A-Za-z0-9_]', '', op)}_{'x'.join(map(str, shape)) or 'scalar'}")

    def _rename(self, name: str, user: str, nodes: int, inputs: int) -> str:
        """The node or input `name`, just made for an expression the user
        named `user`, renamed so plans and labels say `user`; a node made
        earlier (shared) keeps its name."""
        if name in self.inputs and len(self.inputs) > inputs and list(self.inputs)[-1] == name:
            new = self._fresh(user)
            self.inputs = {new if k == name else k: v for k, v in self.inputs.items()}
            if name in self.data:
                self.data = {new if k == name else k: v for k, v in self.data.items()}
            self.unfed = [new if k == name else k for k in self.unfed]
        elif name in self.nodes and len(self.nodes) > nodes and list(self.nodes)[-1] == name:
            new = self._fresh(user)
            self.nodes = {new if k == name else k: v for k, v in self.nodes.items()}
            self._by_spec = {k: (new if v == name else v) for k, v in self._by_spec.items()}
        else:
            return name
        self.origin[new] = self.origin.pop(name)
        return new

    def leaf(self, e: "Expr", partition: Optional[int]) -> str:
        """The input of a leaf expression (an array, a constant or a placeholder)."""
        data = e._data
        name = self._default_name("input")
        decl: dict = {"key_bounds": list(e.grid), "array_bounds": list(e.block)}
        if partition is not None:
            decl["placement"] = {"hash": [partition]}
        self.inputs[name] = decl
        self.origin[name] = e.op
        if data is None:
            # A program can be built without values; computing it needs them.
            self.unfed.append(name)
            return name
        if data.shape != e.shape:
            raise TraError("placeholder", f"the value fed has shape {data.shape}, the placeholder {e.shape}")
        if data.dtype not in (np.float32, np.float64):
            data = data.astype(np.float64)
        self.data[name] = data
        return name

    def node(self, op: str, spec: dict) -> str:
        """A TRA node for the front-end operation `op`; an equal node is reused."""
        canon = json.dumps(spec, sort_keys=True)
        if canon in self._by_spec:
            return self._by_spec[canon]
        name = self._default_name(op)
        self.nodes[name] = spec
        self.origin[name] = op
        self._by_spec[canon] = name
        return name

    # Shorthands for the TRA operators.
    def join(self, op: str, left: str, right: str, lk: Sequence[int], rk: Sequence[int], kernel: str) -> str:
        return self.node(op, {"op": "join", "left": left, "right": right, "left_keys": list(lk),
                              "right_keys": list(rk), "kernel": kernel})

    def aggregate(self, op: str, x: str, group_by: Sequence[int], kernel: str) -> str:
        return self.node(op, {"op": "aggregate", "input": x, "group_by": list(group_by), "kernel": kernel})

    def transform(self, op: str, x: str, kernel: str) -> str:
        return self.node(op, {"op": "transform", "input": x, "kernel": kernel})

    def rekey(self, op: str, x: str, key: str) -> str:
        return self.node(op, {"op": "rekey", "input": x, "key": key})

    def tile(self, op: str, x: str, dim: int, size: int) -> str:
        return self.node(op, {"op": "tile", "input": x, "dim": dim, "size": size})

    def concat(self, op: str, x: str, key_dim: int, array_dim: int) -> str:
        return self.node(op, {"op": "concat", "input": x, "key_dim": key_dim, "array_dim": array_dim})


def _num(c: float) -> str:
    """A kernel argument: the shortest text of a finite float."""
    if not math.isfinite(c):
        raise ValueError(f"not a finite number: {c}")
    return repr(float(c))


def _key(parts: Sequence[str]) -> str:
    return "[" + ", ".join(parts) + "]"


def _compose(*kernels: str) -> str:
    """`k0 ∘ k1 ∘ …` (the last applied first); one kernel is itself."""
    out = kernels[-1]
    for k in reversed(kernels[:-1]):
        out = f"compose({k},{out})"
    return out


def _grid(shape: Shape, block: Shape) -> Shape:
    return tuple(n // b if b else 1 for n, b in zip(shape, block))


Scalar = Union[int, float, bool, np.generic]


class Expr:
    """A lazy array: an operation on other expressions, or a leaf.

    Supports numpy's arithmetic, comparison and matrix-product operators
    with broadcasting (operands may be expressions, numpy arrays or Python
    numbers), ``.T``, ``.sum/.mean/.max/.min``, ``.reshape``,
    ``.transpose``, ``.astype`` and the functions of this module. Nothing is
    computed until :meth:`compute`.
    """

    __array_priority__ = 1000  # numpy defers `ndarray op Expr` to us

    def __init__(self, op: str, shape: Shape, block: Shape, dtype: Any, emit: Callable[[Builder], str]):
        self.op = op
        self.shape = tuple(int(n) for n in shape)
        #: block shape of the TRA relation (see the module doc).
        self.block = tuple(int(b) for b in block)
        self.dtype = np.dtype(dtype)
        self._emit = emit
        self._data: Optional[np.ndarray] = None

    # ---------------------------------------------------------------- basics
    @property
    def grid(self) -> Shape:
        """Key bounds of the TRA relation: blocks per axis."""
        return _grid(self.shape, self.block)

    @property
    def ndim(self) -> int:
        """Number of axes, as numpy's."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements, as numpy's."""
        return int(np.prod(self.shape, dtype=np.int64))

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tra expression")
        return self.shape[0]

    def __repr__(self) -> str:
        return f"tra.Expr({self.op}, shape={self.shape}, dtype={self.dtype}, blocks={self.block})"

    def program(self, sites: Optional[int] = None) -> dict:
        """The TRA program computing this expression."""
        return program(self, sites=sites)

    def compute(self, session: Any = None, feed: Optional[dict] = None) -> np.ndarray:
        """Run the program on tra and return the value as a numpy array."""
        return compute(self, session=session, feed=feed)[0]

    def explain(self, session: Any = None, file: Any = None) -> dict:
        """Print the plan tra chooses and the alternatives; returns tra's answer."""
        from .session import default_session

        return (session or default_session()).explain([self], file=file)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self.compute()
        return out if dtype is None else out.astype(dtype)

    # ------------------------------------------------------------ operators
    def __matmul__(self, other: Any) -> "Expr":
        return matmul(self, other)

    def __rmatmul__(self, other: Any) -> "Expr":
        return matmul(other, self)

    def __add__(self, other: Any) -> "Expr":
        return add(self, other)

    def __radd__(self, other: Any) -> "Expr":
        return add(other, self)

    def __sub__(self, other: Any) -> "Expr":
        return subtract(self, other)

    def __rsub__(self, other: Any) -> "Expr":
        return subtract(other, self)

    def __mul__(self, other: Any) -> "Expr":
        return multiply(self, other)

    def __rmul__(self, other: Any) -> "Expr":
        return multiply(other, self)

    def __truediv__(self, other: Any) -> "Expr":
        return divide(self, other)

    def __rtruediv__(self, other: Any) -> "Expr":
        return divide(other, self)

    def __pow__(self, other: Any) -> "Expr":
        return power(self, other)

    def __rpow__(self, other: Any) -> "Expr":
        return power(other, self)

    def __neg__(self) -> "Expr":
        return negative(self)

    def __pos__(self) -> "Expr":
        return self

    def __abs__(self) -> "Expr":
        return absolute(self)

    def __lt__(self, other: Any) -> "Expr":
        return less(self, other)

    def __le__(self, other: Any) -> "Expr":
        return less_equal(self, other)

    def __gt__(self, other: Any) -> "Expr":
        return greater(self, other)

    def __ge__(self, other: Any) -> "Expr":
        return greater_equal(self, other)

    def __eq__(self, other: Any) -> "Expr":  # type: ignore[override]
        return equal(self, other)

    def __ne__(self, other: Any) -> "Expr":  # type: ignore[override]
        return not_equal(self, other)

    __hash__ = object.__hash__

    def __bool__(self) -> bool:
        raise TraError("bool", "the truth value of a lazy tra expression is unknown until it is computed "
                               "(use tra.where, or compute() it first)")

    @property
    def T(self) -> "Expr":
        """The axes reversed, as numpy's ``.T``."""
        return transpose(self)

    def transpose(self, *axes: Any) -> "Expr":
        """The axes permuted, as numpy's ``transpose``."""
        if len(axes) == 1 and (axes[0] is None or isinstance(axes[0], (tuple, list))):
            axes = axes[0]
        return transpose(self, axes or None)

    def reshape(self, *shape: Any) -> "Expr":
        """The same elements in another shape, as numpy's ``reshape``."""
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return reshape(self, shape)

    def astype(self, dtype: Any) -> "Expr":
        """The values converted to `dtype`, as numpy's ``astype``."""
        return astype(self, dtype)

    def sum(self, axis: Any = None, keepdims: bool = False) -> "Expr":
        """Sum over `axis` (all axes when None), as numpy's ``sum``."""
        return sum(self, axis, keepdims=keepdims)

    def mean(self, axis: Any = None, keepdims: bool = False) -> "Expr":
        """Mean over `axis` (all axes when None), as numpy's ``mean``."""
        return mean(self, axis, keepdims=keepdims)

    def max(self, axis: Any = None, keepdims: bool = False) -> "Expr":
        """Maximum over `axis`, as numpy's ``max`` (a NaN loses to a number)."""
        return max(self, axis, keepdims=keepdims)

    def min(self, axis: Any = None, keepdims: bool = False) -> "Expr":
        """Minimum over `axis`, as numpy's ``min`` (a NaN loses to a number)."""
        return min(self, axis, keepdims=keepdims)


# -------------------------------------------------------------------- leaves
def _normalize_block(op: str, shape: Shape, block: Any) -> Shape:
    if block is None:
        block = shape
    if isinstance(block, numbers.Integral):
        block = (int(block),) * len(shape)
    block = tuple(int(b) for b in block)
    if len(block) != len(shape):
        raise TraError(op, f"block {block} has {len(block)} sizes for an array of shape {shape}")
    # An empty axis is one empty block (block size 0, or any size: it is cut to 0).
    block = tuple(0 if n == 0 else b for n, b in zip(shape, block))
    for ax, (n, b) in enumerate(zip(shape, block)):
        if n != 0 and (b <= 0 or n % b != 0):
            raise TraError(op, f"block size {b} does not divide axis {ax} of size {n} (shape {shape})")
    return block


def _leaf(op: str, shape: Shape, dtype: Any, block: Any, partition: Optional[int],
          data: Optional[np.ndarray]) -> Expr:
    shape = tuple(int(n) for n in shape)
    block = _normalize_block(op, shape, block)
    if partition is not None and not 0 <= partition < len(shape):
        raise TraError(op, f"partition {partition} is not an axis of a {len(shape)}-D array")
    dt = np.dtype(dtype)
    if not (dt.kind in "fbiu"):
        raise TraError(op, f"dtype {dt} is not supported (float, integer and bool arrays are)")
    if dt.kind == "f" and dt.itemsize < 4:
        raise TraError(op, f"dtype {dt} is not supported (float32 and float64 are)")
    e = Expr(op, shape, block, dt, lambda b: b.leaf(e, partition))
    e._data = data
    return e


def array(data: Any, block: Union[int, Sequence[int], None] = None, partition: Optional[int] = None) -> Expr:
    """A numpy array of any rank cut into blocks of shape `block`.

    `block` is one size per axis (an int for every axis); each must divide
    the array's size on that axis. Without it the whole array is one block.
    `partition`, if given, declares the input hash-partitioned on that block
    key dimension (0: row blocks), which the optimizer may exploit. The
    dtype is kept (float32 stays float32; bool and integer arrays are carried
    as floats and come back in their dtype).
    """
    if isinstance(data, Expr):
        return data
    arr = np.asarray(data)
    if arr.dtype.kind not in "fbiu":
        raise TraError("array", f"dtype {arr.dtype} is not supported (float, integer and bool arrays are)")
    if arr.dtype.kind == "f" and arr.dtype.itemsize < 4:
        raise TraError("array", f"dtype {arr.dtype} is not supported (float32 and float64 are)")
    if arr.dtype.kind in "iu" and arr.size and np.abs(arr.astype(np.float64)).max() > 2 ** 53:
        raise TraError("array", "integers beyond 2**53 cannot be carried exactly in float blocks")
    return _leaf("array", arr.shape, arr.dtype, block, partition, arr)


def placeholder(shape: Sequence[int], dtype: Any = np.float64, block: Union[int, Sequence[int], None] = None,
                partition: Optional[int] = None) -> Expr:
    """A leaf without a value, fed when computed:
    ``tra.compute(expr, feed={placeholder: array})``. The program is the same
    on every call, so tra's plan and answer caches find it again."""
    return _leaf("placeholder", tuple(shape), dtype, block, partition, None)


def _lift(x: Any, op: str) -> Expr:
    if isinstance(x, Expr):
        return x
    if isinstance(x, (np.ndarray, list, tuple)) or isinstance(x, (numbers.Number, np.generic)):
        return array(np.asarray(x))
    raise TraError(op, f"operand must be a tra expression, a numpy array or a number, got {type(x).__name__}")


def _is_scalar(x: Any) -> bool:
    return isinstance(x, (numbers.Number, np.generic)) and not isinstance(x, Expr)


def _dummy(x: Any) -> Any:
    """A stand-in with `x`'s dtype (and weak Python-scalar typing) for numpy's dtype rules."""
    if isinstance(x, Expr):
        return np.zeros((), x.dtype)
    if isinstance(x, np.ndarray):
        return np.zeros((), x.dtype)
    return x


def _result_dtype(op: str, fn: Callable, *xs: Any) -> np.dtype:
    try:
        with np.errstate(all="ignore"):
            return np.asarray(fn(*[_dummy(x) for x in xs])).dtype
    except TypeError as e:
        raise TraError(op, str(e)) from None


# ------------------------------------------------------------ re-blocking
def reblock(x: Expr, axis: int, size: int) -> Expr:
    """`x` with axis `axis` cut into blocks of `size` (which must divide it)."""
    x = _lift(x, "reblock")
    n, have = x.shape[axis], x.block[axis]
    if n == 0 or have == size:
        return x
    if size <= 0 or n % size:
        raise TraError("reblock", f"block size {size} does not divide axis {axis} of size {n}")
    r = x.ndim
    if have != n:
        # Gather the axis into one block: concat its blocks, then put the key dim back (bound 1).
        src = x

        def emit_whole(b: Builder) -> str:
            c = b.concat("reblock", b.name_of(src), axis, axis)
            parts = [f"k{i}" for i in range(r - 1)]
            parts.insert(axis, "0")
            return b.rekey("reblock", c, _key(parts))

        block = list(x.block)
        block[axis] = n
        x = Expr("reblock", x.shape, block, x.dtype, emit_whole)
    if size == n:
        return x
    src2 = x

    def emit_tile(b: Builder) -> str:
        t = b.tile("reblock", b.name_of(src2), axis, size)
        parts = [f"k{r}" if i == axis else f"k{i}" for i in range(r)]
        return b.rekey("reblock", t, _key(parts))

    block = list(x.block)
    block[axis] = size
    return Expr("reblock", x.shape, block, x.dtype, emit_tile)


def _match_blocks(x: Expr, axes: Sequence[int], like: Sequence[int]) -> Expr:
    for ax, b in zip(axes, like):
        if x.shape[ax] and x.block[ax] != b:
            x = reblock(x, ax, b)
    return x


# -------------------------------------------------------------- elementwise
_UNARY_KERNEL = {
    "negative": "neg", "absolute": "abs", "exp": "exp", "log": "log", "log1p": "log1p", "expm1": "expm1",
    "sqrt": "sqrt", "tanh": "tanh", "reciprocal": "recip", "sign": "sign", "square": "square",
    "floor": "floor", "ceil": "ceil", "relu": "relu", "sigmoid": "sigmoid", "rsqrt": "rsqrt", "erf": "erf",
    "logical_not": "logicalNot",
}
_NUMPY_UNARY: Dict[str, Callable] = {
    "negative": np.negative, "absolute": np.absolute, "exp": np.exp, "log": np.log, "log1p": np.log1p,
    "expm1": np.expm1, "sqrt": np.sqrt, "tanh": np.tanh, "reciprocal": lambda x: np.reciprocal(x),
    "sign": np.sign, "square": np.square, "floor": np.floor, "ceil": np.ceil, "relu": lambda x: x,
    "sigmoid": np.exp, "rsqrt": np.sqrt, "erf": np.exp, "logical_not": np.logical_not,
}


def _unary(op: str, x: Any, kernel: Optional[str] = None, dtype: Any = None) -> Expr:
    x = _lift(x, op)
    k = kernel or _UNARY_KERNEL[op]
    dt = np.dtype(dtype) if dtype is not None else _result_dtype(op, _NUMPY_UNARY.get(op, lambda v: v), x)
    if op == "reciprocal" and x.dtype.kind in "iub":
        dt = np.dtype(np.float64)
    return Expr(op, x.shape, x.block, dt, lambda b: b.transform(op, b.name_of(x), k))


def negative(x: Any) -> Expr:
    """−x elementwise."""
    return _unary("negative", x)


def absolute(x: Any) -> Expr:
    """|x| elementwise."""
    return _unary("absolute", x)


abs = absolute  # noqa: A001 - numpy's name


def exp(x: Any) -> Expr:
    """e^x elementwise."""
    return _unary("exp", x)


def log(x: Any) -> Expr:
    """Natural logarithm elementwise."""
    return _unary("log", x)


def log1p(x: Any) -> Expr:
    """log(1 + x) elementwise, exact for small x."""
    return _unary("log1p", x)


def expm1(x: Any) -> Expr:
    """e^x − 1 elementwise, exact for small x."""
    return _unary("expm1", x)


def sqrt(x: Any) -> Expr:
    """Square root elementwise."""
    return _unary("sqrt", x)


def rsqrt(x: Any) -> Expr:
    """1 / sqrt(x) elementwise."""
    return _unary("rsqrt", x)


def tanh(x: Any) -> Expr:
    """Hyperbolic tangent elementwise."""
    return _unary("tanh", x)


def reciprocal(x: Any) -> Expr:
    """1 / x elementwise."""
    return _unary("reciprocal", x)


def sign(x: Any) -> Expr:
    """−1, 0 or 1 by the sign of x (NaN stays NaN)."""
    return _unary("sign", x)


def square(x: Any) -> Expr:
    """x·x elementwise."""
    return _unary("square", x)


def floor(x: Any) -> Expr:
    """The largest integer ≤ x, elementwise."""
    return _unary("floor", x)


def ceil(x: Any) -> Expr:
    """The smallest integer ≥ x, elementwise."""
    return _unary("ceil", x)


def relu(x: Any) -> Expr:
    """max(x, 0) elementwise."""
    return _unary("relu", x)


def sigmoid(x: Any) -> Expr:
    """1 / (1 + e^-x) elementwise."""
    return _unary("sigmoid", x)


def erf(x: Any) -> Expr:
    """The error function elementwise."""
    return _unary("erf", x)


def logical_not(x: Any) -> Expr:
    """1 where x == 0, else 0 (a bool array)."""
    return _unary("logical_not", x, dtype=np.bool_)


_BCAST_KERNEL = {
    "add": "add", "subtract": "sub", "multiply": "mul", "divide": "div", "power": "pow",
    "maximum": "maximum", "minimum": "minimum", "less": "lt", "less_equal": "le", "greater": "gt",
    "greater_equal": "ge", "equal": "eq", "not_equal": "ne", "select_if": "selectIf", "select_else": "selectElse",
}
_SAME_KERNEL = {"add": "matAdd", "subtract": "matSub", "multiply": "elemMul", "divide": "elemDiv"}
_NUMPY_BINARY: Dict[str, Callable] = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide, "power": np.power,
    "maximum": np.maximum, "minimum": np.minimum, "less": np.less, "less_equal": np.less_equal,
    "greater": np.greater, "greater_equal": np.greater_equal, "equal": np.equal, "not_equal": np.not_equal,
}


def _broadcast_shape(op: str, a: Shape, c: Shape) -> Shape:
    try:
        return tuple(np.broadcast_shapes(a, c))
    except ValueError:
        raise TraError(op, f"operands could not be broadcast together with shapes {a} {c}") from None


def _scalar_kernel(op: str, x: Expr, c: float, scalar_left: bool) -> Optional[str]:
    """A unary kernel for `x op c` (or `c op x`), when one exists."""
    if not math.isfinite(c):
        return None
    if op == "add":
        return f"shift({_num(c)})"
    if op == "multiply":
        return f"scale({_num(c)})"
    if op == "subtract":
        return f"compose(shift({_num(c)}),neg)" if scalar_left else f"shift({_num(-c)})"
    if op == "divide":
        if scalar_left:
            return f"compose(scale({_num(c)}),recip)"
        if c == 0:
            return None
        inv = 1.0 / c
        # Only when x·(1/c) rounds as x/c always does: c a power of two.
        return f"scale({_num(inv)})" if math.frexp(c)[0] in (0.5, -0.5) else None
    if op == "power" and not scalar_left:
        return f"powc({_num(c)})"
    return None


def _binary(op: str, a: Any, c: Any, dtype: Any = None) -> Expr:
    if not isinstance(a, Expr) and not isinstance(c, Expr):
        a = _lift(a, op)
    dt = np.dtype(dtype) if dtype is not None else _result_dtype(op, _NUMPY_BINARY.get(op, np.add), a, c)
    # A Python number with an expression: a unary kernel where one computes it exactly.
    for scalar, other, left in ((c, a, False), (a, c, True)):
        if _is_scalar(scalar) and isinstance(other, Expr) and not isinstance(scalar, (bool, np.bool_)):
            k = _scalar_kernel(op, other, float(scalar), left)
            if k is not None:
                src = other
                return Expr(op, src.shape, src.block, dt, lambda b: b.transform(op, b.name_of(src), k))
    a, c = _lift(a, op), _lift(c, op)
    shape = _broadcast_shape(op, a.shape, c.shape)
    r = len(shape)
    oa, oc = r - a.ndim, r - c.ndim  # axis i of a is output axis i + oa
    # Axes both have at the same size are joined, cut alike (c follows a).
    joined_a, joined_c = [], []
    for i in range(a.ndim):
        j = i + oa - oc
        if 0 <= j < c.ndim and a.shape[i] == c.shape[j]:
            joined_a.append(i)
            joined_c.append(j)
    c = _match_blocks(c, joined_c, [a.block[i] for i in joined_a])
    free_c = [j for j in range(c.ndim) if j not in joined_c]
    # The joined key is a's key then c's free dims; each output axis reads one of them.
    parts = []
    for o in range(r):
        i, j = o - oa, o - oc
        if 0 <= i < a.ndim and (a.shape[i] == shape[o]):
            parts.append(f"k{i}")
        else:
            parts.append(f"k{a.ndim + free_c.index(j)}")
    identity = parts == [f"k{i}" for i in range(a.ndim + len(free_c))]
    block = tuple(builtins.max(x, y) for x, y in zip((1,) * oa + a.block, (1,) * oc + c.block))
    block = tuple(0 if n == 0 else bl for n, bl in zip(shape, block))
    same = a.shape == c.shape and a.block == c.block
    kernel = _SAME_KERNEL[op] if same and op in _SAME_KERNEL else _BCAST_KERNEL[op]

    def emit(b: Builder) -> str:
        j = b.join(op, b.name_of(a), b.name_of(c), joined_a, joined_c, kernel)
        return j if identity else b.rekey(op, j, _key(parts))

    return Expr(op, shape, block, dt, emit)


def add(a: Any, c: Any) -> Expr:
    """a + c with numpy broadcasting."""
    return _binary("add", a, c)


def subtract(a: Any, c: Any) -> Expr:
    """a − c with numpy broadcasting."""
    return _binary("subtract", a, c)


def multiply(a: Any, c: Any) -> Expr:
    """a · c with numpy broadcasting."""
    return _binary("multiply", a, c)


def divide(a: Any, c: Any) -> Expr:
    """a / c with numpy broadcasting (true division)."""
    return _binary("divide", a, c)


true_divide = divide


def power(a: Any, c: Any) -> Expr:
    """a ** c with numpy broadcasting."""
    return _binary("power", a, c)


def maximum(a: Any, c: Any) -> Expr:
    """The larger of a and c elementwise (NaN if either is NaN), as numpy's."""
    return _binary("maximum", a, c)


def minimum(a: Any, c: Any) -> Expr:
    """The smaller of a and c elementwise (NaN if either is NaN), as numpy's."""
    return _binary("minimum", a, c)


def less(a: Any, c: Any) -> Expr:
    """a < c (a bool array)."""
    return _binary("less", a, c)


def less_equal(a: Any, c: Any) -> Expr:
    """a <= c (a bool array)."""
    return _binary("less_equal", a, c)


def greater(a: Any, c: Any) -> Expr:
    """a > c (a bool array)."""
    return _binary("greater", a, c)


def greater_equal(a: Any, c: Any) -> Expr:
    """a >= c (a bool array)."""
    return _binary("greater_equal", a, c)


def equal(a: Any, c: Any) -> Expr:
    """a == c (a bool array)."""
    return _binary("equal", a, c)


def not_equal(a: Any, c: Any) -> Expr:
    """a != c (a bool array)."""
    return _binary("not_equal", a, c)


def _as_bool(x: Any, op: str) -> Expr:
    x = _lift(x, op)
    return x if x.dtype == np.bool_ else not_equal(x, 0)


def logical_and(a: Any, c: Any) -> Expr:
    """a and c elementwise (a bool array)."""
    return _binary("multiply", _as_bool(a, "logical_and"), _as_bool(c, "logical_and"), dtype=np.bool_)


def logical_or(a: Any, c: Any) -> Expr:
    """a or c elementwise (a bool array)."""
    return _binary("maximum", _as_bool(a, "logical_or"), _as_bool(c, "logical_or"), dtype=np.bool_)


def where(cond: Any, x: Any, y: Any) -> Expr:
    """x where cond is true, else y, with numpy broadcasting of all three."""
    op = "where"
    cond = _lift(cond, op)
    dt = _result_dtype(op, lambda p, q: np.where(True, p, q), x, y)
    t = _binary("select_if", cond, x, dtype=dt)
    f = _binary("select_else", cond, y, dtype=dt)
    return _binary("add", t, f, dtype=dt)


def clip(x: Any, a_min: Any = None, a_max: Any = None) -> Expr:
    """x limited to [a_min, a_max], as numpy's ``clip``."""
    out = _lift(x, "clip")
    if a_min is not None:
        out = maximum(out, a_min)
    if a_max is not None:
        out = minimum(out, a_max)
    return out


def astype(x: Any, dtype: Any) -> Expr:
    """The values converted to `dtype`: to bool, nonzero; to an integer type,
    truncated toward zero; to a float type, unchanged (rounded when returned)."""
    x = _lift(x, "astype")
    dt = np.dtype(dtype)
    if dt.kind not in "fbiu" or (dt.kind == "f" and dt.itemsize < 4):
        raise TraError("astype", f"dtype {dt} is not supported (float32, float64, integers and bool are)")
    if dt == x.dtype:
        return x
    if dt.kind == "b":
        return _binary("not_equal", x, 0, dtype=np.bool_)
    src = multiply(sign(x), floor(absolute(x))) if dt.kind in "iu" and x.dtype.kind == "f" else x
    return Expr("astype", x.shape, x.block, dt, lambda b: b.name_of(src))


# --------------------------------------------------------------- axes
def _norm_axes(op: str, x: Expr, axis: Any) -> Tuple[int, ...]:
    if axis is None:
        return tuple(range(x.ndim))
    axes = (axis,) if isinstance(axis, (numbers.Integral, np.integer)) else tuple(axis)
    out = []
    for a in axes:
        a = int(a)
        if x.ndim == 0 or not -x.ndim <= a < x.ndim:
            raise TraError(op, f"axis {a} is out of range for shape {x.shape}")
        a %= x.ndim
        if a in out:
            raise TraError(op, f"axis {a} repeated in {axis}")
        out.append(a)
    return tuple(out)


_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _letters(n: int) -> str:
    if n > len(_LETTERS):
        raise TraError("einsum", f"more than {len(_LETTERS)} axes")
    return _LETTERS[:n]


def transpose(x: Any, axes: Optional[Sequence[int]] = None) -> Expr:
    """The axes permuted (reversed when `axes` is None), as numpy's ``transpose``."""
    op = "transpose"
    x = _lift(x, op)
    r = x.ndim
    perm = tuple(range(r))[::-1] if axes is None else tuple(int(a) % r if r else int(a) for a in axes)
    if sorted(perm) != list(range(r)):
        raise TraError(op, f"axes {tuple(axes) if axes is not None else None} are not a permutation of the "
                           f"{r} axes of shape {x.shape}")
    if perm == tuple(range(r)):
        return x
    src = x
    letters = _letters(r)
    kernel = "transpose" if r == 2 else f"einSum({letters}_{''.join(letters[p] for p in perm)})"

    def emit(b: Builder) -> str:
        k = b.rekey(op, b.name_of(src), _key([f"k{p}" for p in perm]))
        return b.transform(op, k, kernel)

    return Expr(op, tuple(x.shape[p] for p in perm), tuple(x.block[p] for p in perm), x.dtype, emit)


def swapaxes(x: Any, axis1: int, axis2: int) -> Expr:
    """Two axes exchanged, as numpy's ``swapaxes``."""
    x = _lift(x, "swapaxes")
    a1, a2 = _norm_axes("swapaxes", x, axis1)[0], _norm_axes("swapaxes", x, axis2)[0]
    perm = list(range(x.ndim))
    perm[a1], perm[a2] = perm[a2], perm[a1]
    return transpose(x, perm)


def moveaxis(x: Any, source: int, destination: int) -> Expr:
    """One axis moved to another position, as numpy's ``moveaxis``."""
    x = _lift(x, "moveaxis")
    s = _norm_axes("moveaxis", x, source)[0]
    d = _norm_axes("moveaxis", x, destination)[0]
    perm = [i for i in range(x.ndim) if i != s]
    perm.insert(d, s)
    return transpose(x, perm)


def _restructure(op: str, x: Expr, key_parts: Sequence[str], kernels: Sequence[str], shape: Shape,
                 block: Shape) -> Expr:
    """`x` rekeyed by `key_parts` and its blocks passed through `kernels` (applied in order)."""
    src = x
    identity = list(key_parts) == [f"k{i}" for i in range(x.ndim)]

    def emit(b: Builder) -> str:
        name = b.name_of(src)
        if not identity:
            name = b.rekey(op, name, _key(key_parts))
        if kernels:
            name = b.transform(op, name, _compose(*reversed(kernels)))
        return name

    if identity and not kernels:
        return Expr(op, shape, block, x.dtype, lambda b: b.name_of(src))
    return Expr(op, shape, block, x.dtype, emit)


def expand_dims(x: Any, axis: Any) -> Expr:
    """Size-1 axes inserted at `axis` (an int or a tuple), as numpy's ``expand_dims``."""
    op = "expand_dims"
    x = _lift(x, op)
    axes = (axis,) if isinstance(axis, (numbers.Integral, np.integer)) else tuple(axis)
    r = x.ndim + len(axes)
    norm = sorted(int(a) % r if -r <= int(a) < r else -1 for a in axes)
    if -1 in norm or len(set(norm)) != len(norm):
        raise TraError(op, f"axis {axis} is out of range (or repeated) for a result of {r} axes")
    shape, block, parts, kernels = [], [], [], []
    it = 0
    for o in range(r):
        if o in norm:
            shape.append(1)
            block.append(1)
            parts.append("0")
            kernels.append(f"expandDims({o})")
        else:
            shape.append(x.shape[it])
            block.append(x.block[it])
            parts.append(f"k{it}")
            it += 1
    return _restructure(op, x, parts, kernels, tuple(shape), tuple(block))


def squeeze(x: Any, axis: Any = None) -> Expr:
    """Size-1 axes removed (all of them when `axis` is None), as numpy's ``squeeze``."""
    op = "squeeze"
    x = _lift(x, op)
    axes = tuple(i for i, n in enumerate(x.shape) if n == 1) if axis is None else _norm_axes(op, x, axis)
    for a in axes:
        if x.shape[a] != 1:
            raise TraError(op, f"cannot squeeze axis {a} of size {x.shape[a]} (shape {x.shape})")
    kernels = [f"squeezeAxis({a})" for a in sorted(axes, reverse=True)]
    keep = [i for i in range(x.ndim) if i not in axes]
    return _restructure(op, x, [f"k{i}" for i in keep], kernels, tuple(x.shape[i] for i in keep),
                        tuple(x.block[i] for i in keep))


def broadcast_to(x: Any, shape: Sequence[int]) -> Expr:
    """`x` repeated along size-1 (and new leading) axes to `shape`, as numpy's
    ``broadcast_to``; a stretched axis is one block."""
    op = "broadcast_to"
    x = _lift(x, op)
    shape = tuple(int(n) for n in shape)
    if len(shape) < x.ndim or _broadcast_shape(op, x.shape, shape) != shape:
        raise TraError(op, f"cannot broadcast shape {x.shape} to {shape}")
    lead = len(shape) - x.ndim
    if lead:
        x = expand_dims(x, tuple(range(lead)))
    parts, kernels, block = [], [], []
    for i, n in enumerate(shape):
        if x.shape[i] == n:
            parts.append(f"k{i}")
            block.append(x.block[i])
        else:  # 1 -> n: one block of n
            parts.append(f"k{i}")
            kernels.append(f"repeatAxis({i},{n})")
            block.append(n)
    if not kernels:
        return x
    return _restructure(op, x, parts, kernels, shape, tuple(0 if n == 0 else b for n, b in zip(shape, block)))


def _reshape_groups(old: Shape, new: Shape) -> List[Tuple[List[int], List[int]]]:
    """Consecutive groups of old and new axes with equal products (sizes ≥ 1)."""
    groups: List[Tuple[List[int], List[int]]] = []
    i = j = 0
    r, q = len(old), len(new)
    while i < r or j < q:
        if i < r and old[i] == 1 and (j >= q or new[j] != 1):
            groups.append(([i], []))
            i += 1
        elif j < q and new[j] == 1 and (i >= r or old[i] != 1):
            groups.append(([], [j]))
            j += 1
        elif i < r and j < q and old[i] == 1 and new[j] == 1:
            groups.append(([i], [j]))
            i += 1
            j += 1
        else:
            pi, pj, ii, jj = old[i], new[j], i + 1, j + 1
            while pi != pj:
                if pi < pj:
                    pi *= old[ii]
                    ii += 1
                else:
                    pj *= new[jj]
                    jj += 1
            groups.append((list(range(i, ii)), list(range(j, jj))))
            i, j = ii, jj
    return groups


def _split_plan(block: int, sizes: Sequence[int]) -> Optional[Tuple[int, int]]:
    """Where a contiguous run of `block` elements (starting at a multiple of
    `block`) of an axis split row-major into `sizes` stays a box: (q, d) with
    block = d·∏sizes[q+1:] and d dividing sizes[q]; None if it does not."""
    tail = 1
    for q in range(len(sizes) - 1, -1, -1):
        if block % tail:
            return None
        d = block // tail
        if d <= sizes[q] and sizes[q] % d == 0:
            return q, d
        tail *= sizes[q]
    return None


def reshape(x: Any, shape: Any) -> Expr:
    """The same elements (row-major) in another shape, as numpy's ``reshape``
    (one -1 allowed). Free when the blocks regroup whole; axes that would
    not stay block-aligned are re-blocked first."""
    op = "reshape"
    x = _lift(x, op)
    if isinstance(shape, (numbers.Integral, np.integer)):
        shape = (shape,)
    shape = [int(n) for n in shape]
    total = x.size
    if shape.count(-1) > 1:
        raise TraError(op, f"only one -1 allowed in {tuple(shape)}")
    if -1 in shape:
        rest = int(np.prod([n for n in shape if n != -1], dtype=np.int64))
        if rest == 0 or total % rest:
            raise TraError(op, f"cannot reshape an array of {total} elements (shape {x.shape}) into {tuple(shape)}")
        shape[shape.index(-1)] = total // rest
    new = tuple(shape)
    if any(n < 0 for n in new) or int(np.prod(new, dtype=np.int64)) != total:
        raise TraError(op, f"cannot reshape an array of {total} elements (shape {x.shape}) into {new}")
    if new == x.shape:
        return x
    if total == 0:
        # No element to move: the empty array of the new shape.
        return array(np.zeros(new, dtype=x.dtype))
    groups = _reshape_groups(x.shape, new)
    # Re-block where a group would not stay block-aligned: merging needs every
    # axis after the first one cut in blocks > 1 to be whole; splitting needs
    # the merged block to be a box of the new axes.
    for olds, news in groups:
        if len(olds) > 1 or len(news) > 1:
            p = next((t for t in range(len(olds)) if x.block[olds[t]] != 1), len(olds) - 1)
            for t in olds[p + 1:]:
                x = reblock(x, t, x.shape[t])
            merged = x.block[olds[p]] * int(np.prod([x.shape[t] for t in olds[p + 1:]], dtype=np.int64))
            if len(news) > 1 and _split_plan(merged, [new[t] for t in news]) is None:
                for t in olds:
                    x = reblock(x, t, x.shape[t])
    parts: List[str] = []
    out_block: List[int] = []
    kernels: List[str] = []
    # Block kernels: group by group from the last, so earlier axes keep their positions.
    for olds, news in reversed(groups):
        pos = olds[0] if olds else (groups_pos(groups, olds, news))
        if olds and not news:
            kernels.append(f"squeezeAxis({pos})")
        elif news and not olds:
            kernels.append(f"expandDims({pos})")
        elif len(olds) == 1 and len(news) == 1:
            pass
        else:
            kernels.extend([f"mergeAxes({pos})"] * (len(olds) - 1))
            p = next((t for t in range(len(olds)) if x.block[olds[t]] != 1), len(olds) - 1)
            merged = x.block[olds[p]] * int(np.prod([x.shape[t] for t in olds[p + 1:]], dtype=np.int64))
            bl = _new_blocks(merged, [new[t] for t in news])
            rem = merged
            for t in range(len(news) - 1):
                rem //= bl[t]
                kernels.append(f"splitAxis({pos + t},{rem})")
    for olds, news in groups:
        if not news:
            continue
        if not olds:
            parts.append("0")
            out_block.append(1)
            continue
        if len(olds) == 1 and len(news) == 1:
            parts.append(f"k{olds[0]}")
            out_block.append(x.block[olds[0]])
            continue
        p = next((t for t in range(len(olds)) if x.block[olds[t]] != 1), len(olds) - 1)
        grids = x.grid
        merged_key = f"k{olds[0]}"
        for t in olds[1:p + 1]:
            merged_key = f"({merged_key}) * {grids[t]} + k{t}" if grids[t] != 1 else merged_key
        merged = x.block[olds[p]] * int(np.prod([x.shape[t] for t in olds[p + 1:]], dtype=np.int64))
        sizes = [new[t] for t in news]
        bl = _new_blocks(merged, sizes)
        ng = [n // b for n, b in zip(sizes, bl)]
        for t in range(len(news)):
            below = int(np.prod(ng[t + 1:], dtype=np.int64))
            e = merged_key if below == 1 else f"({merged_key}) / {below}"
            if t > 0:
                e = f"({e}) % {ng[t]}"
            parts.append(e if ng[t] != 1 else "0")
            out_block.append(bl[t])
    return _restructure(op, x, parts, kernels, new, tuple(out_block))


def groups_pos(groups: List[Tuple[List[int], List[int]]], olds: List[int], news: List[int]) -> int:
    """The block axis where an inserted axis goes: after the old axes of earlier groups."""
    pos = 0
    for g_olds, g_news in groups:
        if g_olds is olds and g_news is news:
            return pos
        pos += len(g_olds)
    return pos


def _new_blocks(merged: int, sizes: Sequence[int]) -> List[int]:
    """Block sizes of the new axes a contiguous block of `merged` elements splits into."""
    plan = _split_plan(merged, sizes)
    assert plan is not None
    q, d = plan
    return [1] * q + [d] + list(sizes[q + 1:])


# ---------------------------------------------------------------- reductions
def _reduce(op: str, x: Any, axis: Any, keepdims: bool) -> Expr:
    x = _lift(x, op)
    axes = _norm_axes(op, x, axis)
    if op in ("max", "min"):
        for a in axes:
            if x.shape[a] == 0:
                raise TraError(op, f"zero-size axis {a} (shape {x.shape}) has no {op}imum")
    dt = {"sum": _result_dtype(op, lambda v: np.sum(v), x), "max": x.dtype, "min": x.dtype}[op]
    if not axes:
        return x if dt == x.dtype else Expr(op, x.shape, x.block, dt, lambda b, src=x: b.name_of(src))
    letters = _letters(x.ndim)
    kept = [i for i in range(x.ndim) if i not in axes]
    inner = {"sum": "einSum", "max": "einMax", "min": "einMin"}[op]
    across = {"sum": "matAdd", "max": "max", "min": "min"}[op]
    kernels = [f"{inner}({letters}_{''.join(letters[i] for i in kept)})"]
    if keepdims:
        kernels += [f"expandDims({a})" for a in sorted(axes)]
    split = any(x.grid[a] > 1 for a in axes)
    src = x

    def emit(b: Builder) -> str:
        t = b.transform(op, b.name_of(src), _compose(*reversed(kernels)))
        if split:
            t = b.aggregate(op, t, kept, across)
            have = list(range(len(kept)))
        else:
            have = kept
        if keepdims:
            parts, it = [], iter(have)
            for i in range(x.ndim):
                parts.append("0" if i in axes else f"k{next(it)}")
        else:
            parts = [f"k{i}" for i in have]
        if parts == [f"k{i}" for i in range(len(kept) if split else x.ndim)]:
            return t
        return b.rekey(op, t, _key(parts))

    shape = tuple(1 if i in axes else n for i, n in enumerate(x.shape)) if keepdims else \
        tuple(x.shape[i] for i in kept)
    block = tuple(1 if i in axes else bl for i, bl in enumerate(x.block)) if keepdims else \
        tuple(x.block[i] for i in kept)
    return Expr(op, shape, block, dt, emit)


def sum(x: Any, axis: Any = None, keepdims: bool = False) -> Expr:  # noqa: A001 - numpy's name
    """Sum over `axis` (an int, a tuple, or None for all), as numpy's ``sum``."""
    return _reduce("sum", x, axis, keepdims)


def max(x: Any, axis: Any = None, keepdims: bool = False) -> Expr:  # noqa: A001 - numpy's name
    """Maximum over `axis`, as numpy's ``max`` (a NaN loses to a number)."""
    return _reduce("max", x, axis, keepdims)


def min(x: Any, axis: Any = None, keepdims: bool = False) -> Expr:  # noqa: A001 - numpy's name
    """Minimum over `axis`, as numpy's ``min`` (a NaN loses to a number)."""
    return _reduce("min", x, axis, keepdims)


amax, amin = max, min


def mean(x: Any, axis: Any = None, keepdims: bool = False) -> Expr:
    """Mean over `axis`, as numpy's ``mean``."""
    x = _lift(x, "mean")
    axes = _norm_axes("mean", x, axis)
    count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    if count == 0:
        raise TraError("mean", f"the mean over zero-size axes {axes} of shape {x.shape} is undefined")
    s = _reduce("sum", x, axes, keepdims)
    dt = _result_dtype("mean", lambda v: np.mean(v), x)
    if count == 1:
        return s if s.dtype == dt else astype(s, dt)
    src = s
    return Expr("mean", s.shape, s.block, dt, lambda b: b.transform("mean", b.name_of(src),
                                                                    f"scale({_num(1.0 / count)})"))


def softmax(x: Any, axis: int = -1) -> Expr:
    """exp(x − max) / sum(exp(x − max)) along `axis`."""
    x = _lift(x, "softmax")
    m = _reduce("max", x, axis, True)
    e = exp(subtract(x, m))
    return divide(e, _reduce("sum", e, axis, True))


def log_softmax(x: Any, axis: int = -1) -> Expr:
    """x − max − log(sum(exp(x − max))) along `axis`."""
    x = _lift(x, "log_softmax")
    z = subtract(x, _reduce("max", x, axis, True))
    return subtract(z, log(_reduce("sum", exp(z), axis, True)))


def logsumexp(x: Any, axis: Any = None, keepdims: bool = False) -> Expr:
    """log(sum(exp(x))) over `axis`, computed as max + log(sum(exp(x − max)))."""
    x = _lift(x, "logsumexp")
    m = _reduce("max", x, axis, True)
    out = add(m, log(_reduce("sum", exp(subtract(x, m)), axis, True)))
    return out if keepdims else squeeze(out, _norm_axes("logsumexp", x, axis))


def _arg_extreme(op: str, x: Any, axis: Optional[int], keepdims: bool) -> Expr:
    x = _lift(x, op)
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    ax = _norm_axes(op, x, axis)[0]
    n = x.shape[ax]
    if n == 0:
        raise TraError(op, f"attempt to get {op} of an empty axis {ax} (shape {x.shape})")
    best = _reduce("max" if op == "argmax" else "min", x, ax, True)
    iota = np.arange(n, dtype=np.float64).reshape([n if i == ax else 1 for i in range(x.ndim)])
    # The first index where the extreme is reached: the smallest index among the ties.
    idx = where(equal(x, best), array(iota), float(n))
    return astype(_reduce("min", idx, ax, keepdims), np.int64)


def argmax(x: Any, axis: Optional[int] = None, keepdims: bool = False) -> Expr:
    """The index of the maximum along `axis` (of the flattened array when
    None), the first among ties, as numpy's ``argmax``; a NaN loses to a
    number (numpy returns the first NaN)."""
    return _arg_extreme("argmax", x, axis, keepdims)


def argmin(x: Any, axis: Optional[int] = None, keepdims: bool = False) -> Expr:
    """The index of the minimum along `axis`, as numpy's ``argmin`` (a NaN loses)."""
    return _arg_extreme("argmin", x, axis, keepdims)


def one_hot(labels: Any, n: int, dtype: Any = np.float32) -> Expr:
    """1 where the last axis equals the label, else 0 (labels outside [0, n)
    give all-zero rows), as ``jax.nn.one_hot``."""
    labels = _lift(labels, "one_hot")
    hot = equal(expand_dims(labels, -1), array(np.arange(int(n))))
    return hot if np.dtype(dtype) == np.bool_ else astype(hot, dtype)


# --------------------------------------------------------------- products
def _einsum_pair(op: str, a: Expr, la: str, c: Expr, lc: str, out: str) -> Expr:
    """The blocked einsum of two operands (letters distinct within each) to `out`."""
    shared = [ch for ch in la if ch in lc]
    c = _match_blocks(c, [lc.index(ch) for ch in shared], [a.block[la.index(ch)] for ch in shared])
    sizes = dict(zip(la, a.shape))
    sizes.update({ch: n for ch, n in zip(lc, c.shape) if ch not in sizes})
    blocks = dict(zip(la, a.block))
    blocks.update({ch: n for ch, n in zip(lc, c.block) if ch not in blocks})
    joined = la + "".join(ch for ch in lc if ch not in shared)
    keep = "".join(ch for ch in joined if ch in out)
    dt = _result_dtype(op, np.multiply, a, c)
    matmul2d = a.ndim == 2 and c.ndim == 2 and len(shared) == 1 and la[1] == lc[0] == shared[0] and \
        keep == la[0] + lc[1]
    kernel = "matMul" if matmul2d else f"einSum({la}_{lc}_{keep})"
    src_a, src_c = a, c

    def emit(b: Builder) -> str:
        j = b.join(op, b.name_of(src_a), b.name_of(src_c), [la.index(ch) for ch in shared],
                   [lc.index(ch) for ch in shared], kernel)
        if keep != joined:
            j = b.aggregate(op, j, [joined.index(ch) for ch in keep], "matAdd")
        return j

    have = Expr(op, tuple(sizes[ch] for ch in keep), tuple(blocks[ch] for ch in keep), dt, emit)
    return transpose(have, [keep.index(ch) for ch in out]) if keep != out else have


def _einsum_one(op: str, x: Expr, la: str, out: str) -> Expr:
    summed = tuple(i for i, ch in enumerate(la) if ch not in out)
    kept = "".join(ch for ch in la if ch in out)
    y = _reduce("sum", x, summed, False) if summed else x
    return transpose(y, [kept.index(ch) for ch in out]) if kept != out else y


def _diagonal(op: str, x: Expr, letters: str) -> Tuple[Expr, str]:
    """`x` with every repeated letter taken once (its diagonal): the axes of
    one letter are cut alike, the tuples whose keys agree on them kept
    (a filter), the block diagonal taken (``einSum``), the key dims kept once."""
    first: Dict[str, int] = {}
    for t, ch in enumerate(letters):
        if ch in first:
            x = _match_blocks(x, [t], [x.block[first[ch]]])
        else:
            first[ch] = t
    kept = "".join(first)
    pred = " && ".join(f"k{first[ch]} == k{t}" for t, ch in enumerate(letters) if first[ch] != t)
    src = x
    keys = _key([f"k{first[ch]}" for ch in kept])

    def emit(b: Builder) -> str:
        f = b.node(op, {"op": "filter", "input": b.name_of(src), "predicate": pred})
        return b.transform(op, b.rekey(op, f, keys), f"einSum({letters}_{kept})")

    d = Expr(op, tuple(x.shape[first[ch]] for ch in kept), tuple(x.block[first[ch]] for ch in kept), x.dtype, emit)
    return d, kept


def einsum(spec: str, *operands: Any) -> Expr:
    """Einstein summation as numpy's ``einsum`` (``'bij,bjk->bik'``; without
    ``->`` the output is the letters used once, sorted). Operands of any
    rank; more than two are contracted left to right; a letter repeated
    within one operand takes a diagonal; ``...`` is not supported."""
    op = "einsum"
    text = spec.replace(" ", "")
    if "->" in text:
        lhs, out = text.split("->", 1)
    else:
        lhs = text
        letters = lhs.replace(",", "")
        out = "".join(sorted(ch for ch in set(letters) if letters.count(ch) == 1))
    parts = lhs.split(",")
    if not re.fullmatch(r"[A-Za-z,]*", lhs) or not re.fullmatch(r"[A-Za-z]*", out):
        raise TraError(op, f"'{spec}': only letters, ',' and '->' are supported")
    if len(parts) != len(operands):
        raise TraError(op, f"'{spec}' names {len(parts)} operands, {len(operands)} given")
    xs = [_lift(x, op) for x in operands]
    sizes: Dict[str, int] = {}
    for x, letters in zip(xs, parts):
        if len(letters) != x.ndim:
            raise TraError(op, f"'{letters}' names {len(letters)} axes of an operand of shape {x.shape}")
        for ch, n in zip(letters, x.shape):
            if ch in sizes and sizes[ch] != n:
                raise TraError(op, f"index '{ch}' has sizes {sizes[ch]} and {n}")
            sizes[ch] = n
    for ch in out:
        if ch not in sizes:
            raise TraError(op, f"output index '{ch}' appears in no operand")
    if len(set(out)) != len(out):
        raise TraError(op, f"output '{out}' repeats an index")
    for t, letters in enumerate(parts):
        if len(set(letters)) != len(letters):
            xs[t], parts[t] = _diagonal(op, xs[t], letters)
    cur, lcur = xs[0], parts[0]
    if len(xs) == 1:
        return _einsum_one(op, cur, lcur, out)
    for i in range(1, len(xs)):
        later = out + "".join(parts[i + 1:])
        nxt, lnxt = xs[i], parts[i]
        joined = lcur + "".join(ch for ch in lnxt if ch not in lcur)
        keep = "".join(ch for ch in joined if ch in later)
        final = out if i == len(xs) - 1 else keep
        # A letter only this operand has and nothing later needs is summed first.
        own = tuple(t for t, ch in enumerate(lnxt) if ch not in lcur and ch not in later)
        if own:
            nxt = _reduce("sum", nxt, own, False)
            lnxt = "".join(ch for t, ch in enumerate(lnxt) if t not in own)
        if i == 1:
            own = tuple(t for t, ch in enumerate(lcur) if ch not in lnxt and ch not in later)
            if own:
                cur = _reduce("sum", cur, own, False)
                lcur = "".join(ch for t, ch in enumerate(lcur) if t not in own)
        cur, lcur = _einsum_pair(op, cur, lcur, nxt, lnxt, final), final
    return cur


def matmul(a: Any, c: Any) -> Expr:
    """The matrix product with numpy's ``matmul`` rules (1-D operands,
    broadcast batch axes)."""
    op = "matmul"
    a, c = _lift(a, op), _lift(c, op)
    if a.ndim == 0 or c.ndim == 0:
        raise TraError(op, f"matmul needs operands of at least 1 axis, got shapes {a.shape} and {c.shape}")
    ka = a.shape[-1]
    kc = c.shape[-2] if c.ndim >= 2 else c.shape[0]
    if ka != kc:
        raise TraError(op, f"inner dimensions differ: {a.shape} @ {c.shape}")
    batch_a, batch_c = a.shape[:-2], c.shape[:-2]
    batch = _broadcast_shape(op, batch_a, batch_c)
    if a.ndim > 2 and batch_a != batch[len(batch) - len(batch_a):]:
        a = broadcast_to(a, batch[len(batch) - len(batch_a):] + a.shape[-2:])
    if c.ndim > 2 and batch_c != batch[len(batch) - len(batch_c):]:
        c = broadcast_to(c, batch[len(batch) - len(batch_c):] + c.shape[-2:])
    nb = len(batch)
    letters = _letters(nb + 3)
    bl, i, j, k = letters[:nb], letters[nb], letters[nb + 1], letters[nb + 2]
    la = (bl[nb - (a.ndim - 2):] if a.ndim > 2 else "") + (i + j if a.ndim >= 2 else j)
    lc = (bl[nb - (c.ndim - 2):] if c.ndim > 2 else "") + (j + k if c.ndim >= 2 else j)
    out = bl + (i if a.ndim >= 2 else "") + (k if c.ndim >= 2 else "")
    return _einsum_pair(op, a, la, c, lc, out)


dot = matmul


# ------------------------------------------------------------ concatenation
def concatenate(xs: Sequence[Any], axis: int = 0) -> Expr:
    """Arrays joined along an existing axis, as numpy's ``concatenate``."""
    op = "concatenate"
    xs = [_lift(x, op) for x in xs]
    if not xs:
        raise TraError(op, "need at least one array to concatenate")
    first = xs[0]
    if first.ndim == 0:
        raise TraError(op, "zero-dimensional arrays cannot be concatenated")
    ax = _norm_axes(op, first, axis)[0]
    for x in xs[1:]:
        if x.ndim != first.ndim or any(p != q for t, (p, q) in enumerate(zip(x.shape, first.shape)) if t != ax):
            raise TraError(op, f"shapes {first.shape} and {x.shape} differ off axis {ax}")
    xs = [x for x in xs if x.shape[ax]] or xs[:1]
    others = [t for t in range(first.ndim) if t != ax]
    base = reblock(xs[0], ax, xs[0].shape[ax])
    dt = np.result_type(*[x.dtype for x in xs])
    for x in xs[1:]:
        x = _match_blocks(reblock(x, ax, x.shape[ax]), others, [base.block[t] for t in others])
        left, right = base, x
        keys = list(range(first.ndim))
        shape = tuple(n + (x.shape[ax] if t == ax else 0) for t, n in enumerate(left.shape))
        block = tuple(n if t == ax else bl for t, (n, bl) in enumerate(zip(shape, left.block)))

        def emit(b: Builder, left: Expr = left, right: Expr = right) -> str:
            return b.join(op, b.name_of(left), b.name_of(right), keys, keys, f"concatAxis({ax})")

        base = Expr(op, shape, block, dt, emit)
    return base if base.dtype == dt else astype(base, dt)


def stack(xs: Sequence[Any], axis: int = 0) -> Expr:
    """Arrays joined along a new axis, as numpy's ``stack``."""
    xs = [_lift(x, "stack") for x in xs]
    if not xs:
        raise TraError("stack", "need at least one array to stack")
    r = xs[0].ndim + 1
    if not -r <= axis < r:
        raise TraError("stack", f"axis {axis} is out of range for a result of {r} axes")
    return concatenate([expand_dims(x, axis % r) for x in xs], axis % r)


# ----------------------------------------------------------------- compute
def user_names() -> Dict[int, str]:
    """The variable names the caller's code gives expressions (id -> name):
    the locals and globals of the first frame outside this package, so that
    plans say `scores exchanged` rather than a generated name."""
    here = os.path.dirname(os.path.abspath(__file__))
    f = sys._getframe(1)
    while f is not None and os.path.dirname(os.path.abspath(f.f_code.co_filename)) == here:
        f = f.f_back
    names: Dict[int, str] = {}
    if f is not None:
        for scope in (f.f_globals, f.f_locals):  # a local wins over a global of the same value
            for k, v in list(scope.items()):
                if isinstance(v, Expr) and re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{0,40}", k):
                    names[id(v)] = k
    return names


def program(*exprs: Expr, sites: Optional[int] = None) -> dict:
    """The one TRA program computing all of `exprs` (outputs in order; a
    placeholder needs no value to be part of it)."""
    from .session import build_program

    for e in exprs:
        if not isinstance(e, Expr):
            raise TraError("program", f"expected tra expressions, got {type(e).__name__}")
    return build_program(list(exprs), sites)[0]


def compute(*exprs: Expr, session: Any = None, feed: Optional[dict] = None) -> List[np.ndarray]:
    """Compute several expressions in one program (shared parts once);
    `feed` gives the values of placeholders."""
    from .session import default_session

    for e in exprs:
        if not isinstance(e, Expr):
            raise TraError("compute", f"expected tra expressions, got {type(e).__name__}")
    fed = []
    try:
        for leaf, value in (feed or {}).items():
            if not isinstance(leaf, Expr) or leaf.op != "placeholder":
                raise TraError("compute", "feed keys must be tra.placeholder(...) expressions")
            arr = np.asarray(value)
            if arr.shape != leaf.shape:
                raise TraError("placeholder", f"the value fed has shape {arr.shape}, the placeholder {leaf.shape}")
            leaf._data = arr
            fed.append(leaf)
        from .session import build_program

        unfed = build_program(list(exprs), None)[3].unfed
        if unfed:
            raise TraError("placeholder", f"{len(unfed)} placeholder(s) have no value "
                                          f"(tra.compute(..., feed={{placeholder: array}}))")
        outs = (session or default_session()).compute(list(exprs))
    finally:
        for leaf in fed:
            leaf._data = None
    return [np.asarray(v).astype(e.dtype, copy=False) if e.dtype != np.float64 else v for e, v in zip(exprs, outs)]
