"""Lazy array expressions and their translation into TRA programs.

An :class:`Expr` knows its numpy shape and how it is cut into blocks; it
records an operation and its operands and computes nothing. :class:`Builder`
turns one or more expressions into a TRA program: each operation becomes a
few TRA nodes (a matrix product is a join with ``matMul`` and an aggregation
with ``matAdd``; a softmax is ``rowMax`` aggregated with ``max``, a join back
with ``exp∘matColVecSub``, ``rowSum`` aggregated with ``matAdd`` and a join
with ``matColVecDiv``), and a node equal to one already built (same operation
on the same operands) is reused, so shared sub-expressions appear once.

How a value is held (its *kind*), with ``I, J`` the block counts:

========  ============  ===========  =========================
kind      numpy shape   TRA key      block
========  ============  ===========  =========================
``mat``   ``(m, n)``    ``(I, J)``   ``(m/I, n/J)``
``vec``   ``(n,)``      ``(I,)``     ``(n/I,)``
``col``   ``(m, 1)``    ``(I,)``     ``(m/I,)`` (``keepdims`` of a row reduction)
``row``   ``(1, n)``    ``(J,)``     ``(n/J,)`` (``keepdims`` of a column reduction)
``scalar``  ``()``      ``()``       ``()``
========  ============  ===========  =========================
"""

from __future__ import annotations

import json
import math
import numbers
import re
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

    def __init__(self) -> None:
        self.inputs: Dict[str, dict] = {}
        self.data: Dict[str, np.ndarray] = {}
        self.nodes: Dict[str, dict] = {}
        #: node or input name -> the front-end operation it was built for.
        self.origin: Dict[str, str] = {}
        self._by_spec: Dict[str, str] = {}
        self._by_expr: Dict[int, str] = {}
        self._by_array: Dict[Tuple[int, Shape], str] = {}
        self._keep: List[Any] = []

    def name_of(self, e: "Expr") -> str:
        """The node holding `e`, built on first use."""
        key = id(e)
        if key not in self._by_expr:
            self._keep.append(e)  # ids stay unique while the builder lives
            self._by_expr[key] = e._emit(self)
        return self._by_expr[key]

    def input(self, arr: np.ndarray, grid: Shape, block: Shape, partition: Optional[int]) -> str:
        key = (id(arr), block)
        if key in self._by_array:
            return self._by_array[key]
        self._keep.append(arr)
        name = f"in{len(self.inputs)}"
        decl: dict = {"key_bounds": list(grid), "array_bounds": list(block)}
        if partition is not None:
            decl["placement"] = {"hash": [partition]}
        self.inputs[name] = decl
        self.data[name] = arr
        self.origin[name] = "array"
        self._by_array[key] = name
        return name

    def node(self, op: str, spec: dict) -> str:
        """A TRA node for the front-end operation `op`; an equal node is reused."""
        canon = json.dumps(spec, sort_keys=True)
        if canon in self._by_spec:
            return self._by_spec[canon]
        name = f"{re.sub(r'[^A-Za-z0-9]', '', op)}{len(self.nodes)}"
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


def _num(c: float) -> str:
    """A kernel argument: the shortest text of a finite float."""
    if not math.isfinite(c):
        raise ValueError(f"not a finite number: {c}")
    return repr(float(c))


class Expr:
    """A lazy array: an operation on other expressions or on a numpy array.

    Supports ``@``, ``+ - * /`` (with arrays of the same shape, numpy
    broadcasting of a vector or a ``keepdims`` reduction, or a Python
    number), unary ``-``, ``.T``, ``.sum``, ``.mean``, ``.max``, and the
    functions of this module. Nothing is computed until :meth:`compute`.
    """

    __array_priority__ = 1000  # numpy defers `ndarray op Expr` to us

    def __init__(self, op: str, kind: str, shape: Shape, block: Shape, grid: Shape,
                 emit: Callable[[Builder], str]):
        self.op = op
        self.kind = kind
        self.shape = tuple(shape)
        #: block shape of the TRA relation (see the module doc).
        self.block = tuple(block)
        #: key bounds of the TRA relation.
        self.grid = tuple(grid)
        self._emit = emit

    # ---------------------------------------------------------------- basics
    @property
    def ndim(self) -> int:
        """Number of axes, as numpy's."""
        return len(self.shape)

    def __repr__(self) -> str:
        return f"tra.Expr({self.op}, shape={self.shape}, blocks={self.block})"

    def program(self, sites: Optional[int] = None) -> dict:
        """The TRA program computing this expression (its output is the last node)."""
        from .session import build_program

        return build_program([self], sites)[0]

    def compute(self, session: Any = None) -> np.ndarray:
        """Run the program on tra and return the value as a numpy array."""
        from .session import compute

        return compute(self, session=session)[0]

    def explain(self, session: Any = None, file: Any = None) -> dict:
        """Print the plan tra chooses and the alternatives; returns tra's answer."""
        from .session import default_session

        return (session or default_session()).explain([self], file=file)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self.compute()
        return out if dtype is None else out.astype(dtype)

    # ------------------------------------------------------------ arithmetic
    def __matmul__(self, other: Any) -> "Expr":
        return _matmul(self, _lift(other, "matmul"))

    def __rmatmul__(self, other: Any) -> "Expr":
        return _matmul(_lift(other, "matmul"), self)

    def __add__(self, other: Any) -> "Expr":
        return _binary("add", self, other)

    def __radd__(self, other: Any) -> "Expr":
        return _binary("add", self, other)

    def __sub__(self, other: Any) -> "Expr":
        return _binary("subtract", self, other)

    def __rsub__(self, other: Any) -> "Expr":
        return _binary("subtract", other, self)

    def __mul__(self, other: Any) -> "Expr":
        return _binary("multiply", self, other)

    def __rmul__(self, other: Any) -> "Expr":
        return _binary("multiply", self, other)

    def __truediv__(self, other: Any) -> "Expr":
        return _binary("divide", self, other)

    def __rtruediv__(self, other: Any) -> "Expr":
        return _binary("divide", other, self)

    def __neg__(self) -> "Expr":
        return _unary("negative", self, "neg")

    @property
    def T(self) -> "Expr":
        """The transpose (a vector or scalar is its own transpose)."""
        if self.kind == "mat":
            src = self

            def emit(b: Builder) -> str:
                r = b.rekey("transpose", b.name_of(src), "[k1, k0]")
                return b.transform("transpose", r, "transpose")

            return Expr("transpose", "mat", self.shape[::-1], self.block[::-1], self.grid[::-1], emit)
        if self.kind in ("col", "row"):
            src = self
            flip = {"col": "row", "row": "col"}[self.kind]
            return Expr("transpose", flip, self.shape[::-1], self.block, self.grid, lambda b: b.name_of(src))
        return self

    def sum(self, axis: Optional[int] = None, keepdims: bool = False) -> "Expr":
        """Sum over `axis` (all axes when None), as numpy's ``sum``."""
        return _reduce("sum", self, axis, keepdims)

    def max(self, axis: Optional[int] = None, keepdims: bool = False) -> "Expr":
        """Maximum over `axis` of a matrix, as numpy's ``max``."""
        return _reduce("max", self, axis, keepdims)

    def mean(self, axis: Optional[int] = None, keepdims: bool = False) -> "Expr":
        """Mean over `axis` (all axes when None), as numpy's ``mean``."""
        s = self.sum(axis, keepdims)
        count = int(np.prod(self.shape)) // max(int(np.prod(s.shape)), 1)
        return _unary("mean", s, f"scale({_num(1.0 / count)})") if count else s


# -------------------------------------------------------------------- leaves
def array(data: Any, block: Union[int, Sequence[int], None] = None, partition: Optional[int] = None) -> Expr:
    """A 1-D or 2-D numpy array cut into blocks of shape `block`.

    `block` is one size per axis (an int for every axis); each must divide
    the array's size on that axis. Without it the whole array is one block.
    `partition`, if given, declares the input hash-partitioned on that block
    key dimension (0: row blocks), which the optimizer may exploit.
    """
    arr = np.asarray(data, dtype=np.float64)
    if arr.ndim not in (1, 2):
        raise TraError("array", f"only 1-D and 2-D arrays are supported, got shape {arr.shape}")
    if block is None:
        block = arr.shape
    if isinstance(block, numbers.Integral):
        block = (int(block),) * arr.ndim
    block = tuple(int(b) for b in block)
    if len(block) != arr.ndim:
        raise TraError("array", f"block {block} has {len(block)} sizes for an array of shape {arr.shape}")
    # An empty axis is one empty block (block size 0, or any size: it is cut to 0).
    block = tuple(0 if n == 0 else b for n, b in zip(arr.shape, block))
    for ax, (n, b) in enumerate(zip(arr.shape, block)):
        if n != 0 and (b <= 0 or n % b != 0):
            raise TraError("array", f"block size {b} does not divide axis {ax} of size {n} (shape {arr.shape})")
    if partition is not None and not 0 <= partition < arr.ndim:
        raise TraError("array", f"partition {partition} is not an axis of a {arr.ndim}-D array")
    grid = tuple(n // b if b else 1 for n, b in zip(arr.shape, block))
    kind = "mat" if arr.ndim == 2 else "vec"
    return Expr("array", kind, arr.shape, block, grid, lambda b: b.input(arr, grid, block, partition))


def _lift(x: Any, op: str) -> Expr:
    if isinstance(x, Expr):
        return x
    raise TraError(op, f"operand must be a tra expression (tra.array(...)), got {type(x).__name__}")


# -------------------------------------------------------------- elementwise
def _unary(op: str, x: Expr, kernel: str) -> Expr:
    x = _lift(x, op)
    return Expr(op, x.kind, x.shape, x.block, x.grid, lambda b: b.transform(op, b.name_of(x), kernel))


def relu(x: Expr) -> Expr:
    """max(x, 0) elementwise."""
    return _unary("relu", x, "relu")


def sigmoid(x: Expr) -> Expr:
    """1 / (1 + e^-x) elementwise."""
    return _unary("sigmoid", x, "sigmoid")


def exp(x: Expr) -> Expr:
    """e^x elementwise."""
    return _unary("exp", x, "exp")


def log(x: Expr) -> Expr:
    """Natural logarithm elementwise."""
    return _unary("log", x, "log")


def sqrt(x: Expr) -> Expr:
    """Square root elementwise."""
    return _unary("sqrt", x, "sqrt")


_SAME = {"add": "matAdd", "subtract": "matSub", "multiply": "elemMul", "divide": "elemDiv"}
_ROW = {"add": "matVecAdd", "subtract": "matVecSub", "multiply": "matVecMul", "divide": "matVecDiv"}
_COL = {"add": "matColVecAdd", "subtract": "matColVecSub", "multiply": "matColVecMul", "divide": "matColVecDiv"}


def _binary(op: str, a: Any, c: Any) -> Expr:
    if isinstance(a, numbers.Real) and not isinstance(c, numbers.Real):
        return _scalar_left(op, float(a), _lift(c, op))
    if isinstance(c, numbers.Real):
        return _scalar_right(op, _lift(a, op), float(c))
    a, c = _lift(a, op), _lift(c, op)
    if a.kind == c.kind:
        if a.shape != c.shape:
            raise TraError(op, f"shapes differ: {a.shape} and {c.shape}")
        if a.block != c.block:
            raise TraError(op, f"blocks differ: {a.block} and {c.block} (cut both operands alike)")
        dims = list(range(len(a.grid)))
        return Expr(op, a.kind, a.shape, a.block, a.grid,
                    lambda b: b.join(op, b.name_of(a), b.name_of(c), dims, dims, _SAME[op]))
    # Broadcasting: a matrix with a row vector ((n,) or (1, n)) or a column (m, 1).
    if a.kind != "mat":
        if c.kind == "mat" and op in ("add", "multiply"):
            return _binary(op, c, a)
        if c.kind == "mat" and op == "subtract":
            return _unary("subtract", _binary(op, c, a), "neg")
        raise TraError(op, f"cannot broadcast {a.shape} with {c.shape} (supported: a matrix with a vector (n,), "
                           f"(1, n) or (m, 1) on the right, or + and * on either side)")
    if c.kind in ("vec", "row"):
        axis, kernels = 1, _ROW
    elif c.kind == "col":
        axis, kernels = 0, _COL
    else:
        raise TraError(op, f"cannot broadcast {a.shape} with a scalar expression {c.shape}")
    if c.shape[-1 if axis == 1 else 0] != a.shape[axis] or c.block[0] != a.block[axis]:
        raise TraError(op, f"cannot broadcast {a.shape} (blocks {a.block}) with {c.shape} (blocks {c.block}): "
                           f"axis {axis} must match in size and block")
    return Expr(op, "mat", a.shape, a.block, a.grid,
                lambda b: b.join(op, b.name_of(a), b.name_of(c), [axis], [0], kernels[op]))


def _scalar_right(op: str, a: Expr, c: float) -> Expr:
    if not math.isfinite(c):
        raise TraError(op, f"the number must be finite, got {c}")
    if op == "add":
        return _unary(op, a, f"shift({_num(c)})")
    if op == "subtract":
        return _unary(op, a, f"shift({_num(-c)})")
    if op == "multiply":
        return _unary(op, a, f"scale({_num(c)})")
    if c == 0:
        raise TraError(op, "division by the number 0")
    return _unary(op, a, f"scale({_num(1.0 / c)})")


def _scalar_left(op: str, c: float, a: Expr) -> Expr:
    if op in ("add", "multiply"):
        return _scalar_right(op, a, c)
    if op == "subtract":
        return _unary(op, a, f"compose(shift({_num(c)}),neg)")
    raise TraError(op, "a number divided by an array is not supported (no reciprocal kernel)")


# --------------------------------------------------------------- products
def _matmul(a: Expr, c: Expr) -> Expr:
    op = "matmul"
    if a.kind not in ("mat", "vec") or c.kind not in ("mat", "vec"):
        raise TraError(op, f"operands must be 1-D or 2-D arrays, got shapes {a.shape} and {c.shape}")
    inner_a, inner_c = a.shape[-1], c.shape[0]
    if inner_a != inner_c:
        raise TraError(op, f"inner dimensions differ: {a.shape} @ {c.shape}")
    if a.block[-1] != c.block[0]:
        raise TraError(op, f"inner block sizes differ: blocks {a.block} @ {c.block} (cut both alike)")
    if a.kind == "mat" and c.kind == "mat":
        return Expr(op, "mat", (a.shape[0], c.shape[1]), (a.block[0], c.block[1]), (a.grid[0], c.grid[1]),
                    lambda b: b.aggregate(op, b.join(op, b.name_of(a), b.name_of(c), [1], [0], "matMul"),
                                          [0, 2], "matAdd"))
    la = "ij" if a.kind == "mat" else "j"
    lc = "jk" if c.kind == "mat" else "j"
    out = la.replace("j", "") + lc.replace("j", "")
    return _einsum_pair(op, a, la, c, lc, out)


def _einsum_pair(op: str, a: Expr, la: str, c: Expr, lc: str, out: str) -> Expr:
    """The blocked einsum of two operands whose letters are distinct within each."""
    sizes, blocks, grids = _letters(op, [(a, la), (c, lc)])
    shared = [ch for ch in la if ch in lc]
    joined = la + "".join(ch for ch in lc if ch not in shared)
    keep = "".join(ch for ch in joined if ch in out)
    spec = f"einSum({la}_{lc}_{keep})"

    def emit(b: Builder) -> str:
        j = b.join(op, b.name_of(a), b.name_of(c), [la.index(ch) for ch in shared],
                   [lc.index(ch) for ch in shared], spec)
        if keep != joined:
            j = b.aggregate(op, j, [joined.index(ch) for ch in keep], "matAdd")
        return _permute(b, op, j, keep, out)

    return _result(op, out, sizes, blocks, grids, emit)


def _permute(b: Builder, op: str, name: str, have: str, want: str) -> str:
    if have == want:
        return name
    key = "[" + ", ".join(f"k{have.index(ch)}" for ch in want) + "]"
    return b.transform(op, b.rekey(op, name, key), f"einSum({have}_{want})")


def _result(op: str, out: str, sizes: dict, blocks: dict, grids: dict, emit: Callable[[Builder], str]) -> Expr:
    if len(out) > 2:
        raise TraError(op, f"results of more than 2 axes are not supported ('{out}')")
    kind = {0: "scalar", 1: "vec", 2: "mat"}[len(out)]
    return Expr(op, kind, tuple(sizes[ch] for ch in out), tuple(blocks[ch] for ch in out),
                tuple(grids[ch] for ch in out), emit)


def _letters(op: str, operands: Sequence[Tuple[Expr, str]]) -> Tuple[dict, dict, dict]:
    sizes: dict = {}
    blocks: dict = {}
    grids: dict = {}
    for x, letters in operands:
        if x.kind not in ("mat", "vec"):
            raise TraError(op, f"operands must be 1-D or 2-D arrays, got shape {x.shape}")
        if len(letters) != x.ndim:
            raise TraError(op, f"'{letters}' names {len(letters)} axes of an operand of shape {x.shape}")
        if len(set(letters)) != len(letters):
            raise TraError(op, f"a letter repeated within one operand ('{letters}') is not supported")
        for ch, n, bl, g in zip(letters, x.shape, x.block, x.grid):
            if ch in sizes and sizes[ch] != n:
                raise TraError(op, f"index '{ch}' has sizes {sizes[ch]} and {n}")
            if ch in blocks and blocks[ch] != bl:
                raise TraError(op, f"index '{ch}' is cut into blocks of {blocks[ch]} and {bl} (cut operands alike)")
            sizes[ch], blocks[ch], grids[ch] = n, bl, g
    return sizes, blocks, grids


def einsum(spec: str, *operands: Expr) -> Expr:
    """Einstein summation as numpy's ``einsum`` (``'ij,jk->ik'``; without
    ``->`` the output is the letters used once, sorted). Operands are 1-D or
    2-D; more than two are contracted left to right; a letter repeated within
    one operand (a diagonal) is not supported."""
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
    sizes, _, _ = _letters(op, list(zip(xs, parts)))
    for ch in out:
        if ch not in sizes:
            raise TraError(op, f"output index '{ch}' appears in no operand")
    if len(set(out)) != len(out):
        raise TraError(op, f"output '{out}' repeats an index")
    cur, lcur = xs[0], parts[0]
    if len(xs) == 1:
        return _einsum_one(op, cur, lcur, out)
    for i in range(1, len(xs)):
        later = out + "".join(parts[i + 1:])
        nxt, lnxt = xs[i], parts[i]
        joined = lcur + "".join(ch for ch in lnxt if ch not in lcur)
        keep = "".join(ch for ch in joined if ch in later)
        if i < len(xs) - 1 and len(keep) > 2:
            raise TraError(op, f"intermediate '{keep}' has more than 2 axes; reorder the operands")
        final = out if i == len(xs) - 1 else keep
        cur, lcur = _einsum_pair(op, cur, lcur, nxt, lnxt, final), final
    return cur


def _einsum_one(op: str, x: Expr, la: str, out: str) -> Expr:
    sizes, blocks, grids = _letters(op, [(x, la)])
    keep = "".join(ch for ch in la if ch in out)

    def emit(b: Builder) -> str:
        name = b.name_of(x)
        if keep != la:
            t = b.transform(op, name, f"einSum({la}_{keep})")
            name = b.aggregate(op, t, [la.index(ch) for ch in keep], "matAdd")
        return _permute(b, op, name, keep, out)

    return _result(op, out, sizes, blocks, grids, emit)


# ------------------------------------------------------------- reductions
def _norm_axis(op: str, x: Expr, axis: Optional[int]) -> Optional[int]:
    if axis is None:
        return None
    if not -x.ndim <= axis < max(x.ndim, 1):
        raise TraError(op, f"axis {axis} is out of range for shape {x.shape}")
    return axis % x.ndim


def _reduce(op: str, x: Expr, axis: Optional[int], keepdims: bool) -> Expr:
    axis = _norm_axis(op, x, axis)
    per_block = {"sum": ("rowSum", "colSum"), "max": ("rowMax", "colMax")}[op]
    agg = {"sum": "matAdd", "max": "max"}[op]
    if x.kind == "mat" and axis is not None:
        kernel = per_block[0] if axis == 1 else per_block[1]
        keep = 0 if axis == 1 else 1
        shape = (x.shape[keep],)
        kind = "vec"
        if keepdims:
            shape, kind = ((x.shape[0], 1), "col") if axis == 1 else ((1, x.shape[1]), "row")
        return Expr(op, kind, shape, (x.block[keep],), (x.grid[keep],),
                    lambda b: b.aggregate(op, b.transform(op, b.name_of(x), kernel), [keep], agg))
    if keepdims:
        raise TraError(op, "keepdims=True is supported for axis 0 or 1 of a matrix")
    if x.kind == "scalar":
        return x
    if x.kind == "mat":
        return _reduce(op, _reduce(op, x, 1, False), None, False)
    if x.kind in ("col", "row") and axis is not None and x.shape[axis] == 1:
        src = x
        return Expr(op, "vec", (x.shape[1 - axis],), x.block, x.grid, lambda b: b.name_of(src))
    if x.kind in ("col", "row") and axis is not None:
        raise TraError(op, f"axis {axis} of shape {x.shape} is not supported; use axis=None")
    if op == "max":
        raise TraError(op, f"the maximum of a vector {x.shape} is not supported (no vector max kernel)")
    return Expr(op, "scalar", (), (), (),
                lambda b: b.aggregate(op, b.transform(op, b.name_of(x), "einSum(i_)"), [], "matAdd"))


def softmax(x: Expr, axis: int = -1) -> Expr:
    """softmax along `axis` of a matrix: exp(x − max) / sum(exp(x − max)),
    the maximum and the sum aggregated over the blocks of that axis."""
    op = "softmax"
    x = _lift(x, op)
    if x.kind != "mat":
        raise TraError(op, f"only matrices are supported, got shape {x.shape}")
    axis = _norm_axis(op, x, axis)
    keep = 0 if axis == 1 else 1
    red, tot, sub, div = (("rowMax", "rowSum", "matColVecSub", "matColVecDiv") if axis == 1
                          else ("colMax", "colSum", "matVecSub", "matVecDiv"))

    def emit(b: Builder) -> str:
        n = b.name_of(x)
        m = b.aggregate(op, b.transform(op, n, red), [keep], "max")
        e = b.join(op, n, m, [keep], [0], f"compose(exp,{sub})")
        s = b.aggregate(op, b.transform(op, e, tot), [keep], "matAdd")
        return b.join(op, e, s, [keep], [0], div)

    return Expr(op, "mat", x.shape, x.block, x.grid, emit)
