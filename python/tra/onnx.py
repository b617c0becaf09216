"""ONNX models on tra: each node of the graph becomes ``tra`` array operations.

    import numpy as np, tra, tra.onnx
    tra.connect("http://127.0.0.1:8080")
    y, = tra.onnx.run("model.onnx", {"x": np.random.rand(2, 8, 16).astype(np.float32)})
    prog = tra.onnx.program("model.onnx", {"x": (2, 8, 16)})   # the TRA program alone

The model is shape-inferred (``onnx.shape_inference.infer_shapes``), then its
nodes are translated in the order of ``graph.node`` (ONNX keeps them
topologically sorted), one small function per operator (``_OPS``). Model
inputs become ``tra.placeholder`` leaves fed at compute time, so the TRA
program is the same from call to call; initializers and ``Constant`` nodes are
numpy constants, and a node whose inputs are all constants is computed with
numpy on the spot (constant folding), so only the part of the graph that
depends on the inputs goes to tra, in one program. A constant meets a computed
value as ``tra.array(value)``, or as a Python number when it is a single
element that does not widen the result.

Supported operators (default domain; opset from the model):

- ``MatMul`` (batched, numpy ``matmul``), ``Gemm`` (transA, transB, alpha,
  beta, C broadcast), ``Einsum`` (``...`` spelled out as letters; then what
  ``tra.einsum`` takes: no letter repeated within one operand)
- ``Add Sub Mul Div Pow`` with numpy broadcasting
- ``Relu Sigmoid Tanh Exp Log Sqrt Abs Neg Reciprocal``
- ``Softmax LogSoftmax`` (``axis``; before opset 13 the input is flattened to
  2-D at ``axis``, from 13 on the one axis)
- ``ReduceSum ReduceMean ReduceMax`` (``axes`` as attribute or as a constant
  second input per opset, ``keepdims``, ``noop_with_empty_axes``)
- ``LayerNormalization`` (``axis``, ``epsilon``, ``stash_type``; outputs Y,
  Mean and InvStdDev, the last two of the input's shape with 1 from ``axis`` on)
- ``Transpose`` (``perm``), ``Reshape`` (0 and -1 in the shape, ``allowzero``),
  ``Flatten``, ``Concat``, ``Identity``
- ``Cast`` between float32 and float64 (float16 and bfloat16 are refused;
  any cast of constants is folded), ``Constant``

Anything else raises :class:`tra.TraError` naming the node and its operator.
Model inputs must be float32 or float64 tensors; an integer input is accepted
only when every use of it is a shape or axes parameter (Reshape's shape, the
axes of a reduction), whose value is then a constant of the program. A tensor
with no elements carries no data: it is a constant (of its shape) too. Each
translated value's shape is checked against the one ONNX infers.

:func:`run` computes the outputs; :func:`exprs` gives the ``tra.Expr`` of
each output and the feed of its placeholders; :func:`program` the TRA program
alone (built with ``tra.array`` leaves of the inputs' shapes, since a program
with unfed placeholders cannot be built: the same program, without data).

``onnx`` is an optional dependency: ``pip install ./python[onnx]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from .expr import TraError

#: numpy dtypes tra computes in.
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _onnx() -> Any:
    """The ``onnx`` package, or a TraError saying how to install it."""
    try:
        import onnx
        import onnx.numpy_helper  # noqa: F401
        import onnx.shape_inference  # noqa: F401
    except ImportError:
        raise TraError("onnx", "pip install ./python[onnx]") from None
    return onnx


# ------------------------------------------------------------------ numpy
class _Numpy:
    """The tra namespace's functions on numpy arrays: what constant folding
    computes with (and what the tests may translate with, in place of tra)."""

    matmul = staticmethod(np.matmul)
    add = staticmethod(np.add)
    subtract = staticmethod(np.subtract)
    multiply = staticmethod(np.multiply)
    divide = staticmethod(np.divide)
    power = staticmethod(np.power)
    tanh = staticmethod(np.tanh)
    exp = staticmethod(np.exp)
    log = staticmethod(np.log)
    sqrt = staticmethod(np.sqrt)
    abs = staticmethod(np.abs)
    negative = staticmethod(np.negative)
    reciprocal = staticmethod(np.reciprocal)
    transpose = staticmethod(np.transpose)
    reshape = staticmethod(np.reshape)
    concatenate = staticmethod(np.concatenate)
    einsum = staticmethod(np.einsum)
    sum = staticmethod(np.sum)
    mean = staticmethod(np.mean)

    @staticmethod
    def array(data: Any, block: Any = None) -> np.ndarray:
        return np.asarray(data)

    @staticmethod
    def astype(x: np.ndarray, dtype: Any) -> np.ndarray:
        return np.asarray(x).astype(dtype)

    @staticmethod
    def max(x: np.ndarray, axis: Any = None, keepdims: bool = False) -> np.ndarray:
        x = np.asarray(x)
        if x.size == 0 and x.dtype.kind == "f":  # ONNX: the maximum of nothing is -inf
            return np.max(x, axis=axis, keepdims=keepdims, initial=-np.inf)
        return np.max(x, axis=axis, keepdims=keepdims)

    @staticmethod
    def relu(x: np.ndarray) -> np.ndarray:
        return np.maximum(x, 0)

    @staticmethod
    def sigmoid(x: np.ndarray) -> np.ndarray:
        return 1 / (1 + np.exp(-x))

    @staticmethod
    def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
        e = np.exp(x - np.max(x, axis=axis, keepdims=True))
        return e / np.sum(e, axis=axis, keepdims=True)

    @staticmethod
    def log_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
        s = x - np.max(x, axis=axis, keepdims=True)
        return s - np.log(np.sum(np.exp(s), axis=axis, keepdims=True))


NUMPY = _Numpy()


# --------------------------------------------------------------- op table
@dataclass
class _Op:
    fn: Callable[..., Any]
    #: input positions read as numpy constants (shapes, axes), never lifted.
    params: Tuple[int, ...] = ()
    #: whether a one-element constant may stand as a Python number.
    numbers: bool = False


_OPS: Dict[str, _Op] = {}


def _op(*names: str, params: Tuple[int, ...] = (), numbers: bool = False) -> Callable:
    def register(fn: Callable) -> Callable:
        for name in names:
            _OPS[name] = _Op(fn, params, numbers)
        return fn

    return register


def supported_ops() -> List[str]:
    """The ONNX operators tra translates."""
    return sorted(_OPS)


class _Node:
    """One node being translated: its attributes, opset and namespace."""

    def __init__(self, node: Any, index: int, opset: int, ns: Any, attrs: Dict[str, Any], folding: bool):
        self.node = node
        self.index = index
        self.opset = opset
        self.ns = ns
        self.attrs = attrs
        #: whether every input is a constant (computed with numpy now).
        self.folding = folding

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def param(self, value: Any, what: str) -> Optional[np.ndarray]:
        """An input read as a constant (shape, axes); None when absent."""
        if value is None:
            return None
        if not isinstance(value, np.ndarray):
            raise TraError("onnx", f"{what} must be a constant (an initializer, a Constant node or "
                                   f"computed from them), not a value computed from the model inputs")
        return value


def _axis(axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < max(rank, 1):
        raise TraError("onnx", f"{what} {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


# ------------------------------------------------------------- operators
@_op("Identity")
def _identity(n: _Node, x: Any) -> Any:
    return x


@_op("Constant")
def _constant(n: _Node) -> np.ndarray:
    onnx = _onnx()
    a = n.attrs
    if "value" in a:
        return onnx.numpy_helper.to_array(a["value"])
    if "value_float" in a:
        return np.array(a["value_float"], dtype=np.float32)
    if "value_floats" in a:
        return np.array(a["value_floats"], dtype=np.float32)
    if "value_int" in a:
        return np.array(a["value_int"], dtype=np.int64)
    if "value_ints" in a:
        return np.array(a["value_ints"], dtype=np.int64)
    raise TraError("onnx", f"Constant with attribute {sorted(a)} is not supported (value, value_float(s), "
                           f"value_int(s) are)")


@_op("MatMul")
def _matmul(n: _Node, a: Any, b: Any) -> Any:
    return n.ns.matmul(a, b)


@_op("Gemm", numbers=True)
def _gemm(n: _Node, a: Any, b: Any, c: Any = None) -> Any:
    ns = n.ns
    if n.attr("transA", 0):
        a = ns.transpose(a)
    if n.attr("transB", 0):
        b = ns.transpose(b)
    y = ns.matmul(a, b)
    alpha, beta = float(n.attr("alpha", 1.0)), float(n.attr("beta", 1.0))
    if alpha != 1.0:
        y = ns.multiply(y, alpha)
    if c is None or beta == 0.0:
        return y
    return ns.add(y, c if beta == 1.0 else ns.multiply(c, beta))


def _namespace_op(onnx_name: str, fname: str, numbers: bool = False) -> None:
    """An operator that is one namespace function of its inputs."""
    _op(onnx_name, numbers=numbers)(lambda n, *xs: getattr(n.ns, fname)(*xs))


for _name, _fname in (("Add", "add"), ("Sub", "subtract"), ("Mul", "multiply")):
    _namespace_op(_name, _fname, numbers=True)


@_op("Div", numbers=True)
def _div(n: _Node, a: Any, b: Any) -> Any:
    if n.folding and a.dtype.kind in "iu" and b.dtype.kind in "iu":  # ONNX: integer division truncates
        return (np.trunc(np.divide(a, b))).astype(np.result_type(a, b))
    return n.ns.divide(a, b)


@_op("Pow", numbers=True)
def _pow(n: _Node, a: Any, b: Any) -> Any:
    y = n.ns.power(a, b)
    want = getattr(a, "dtype", None)  # ONNX: the base's type
    return n.ns.astype(y, want) if want is not None and np.dtype(y.dtype) != np.dtype(want) else y


for _name, _fname in (("Relu", "relu"), ("Sigmoid", "sigmoid"), ("Tanh", "tanh"), ("Exp", "exp"), ("Log", "log"),
                      ("Sqrt", "sqrt"), ("Abs", "abs"), ("Neg", "negative"), ("Reciprocal", "reciprocal")):
    _namespace_op(_name, _fname)


def _softmax_like(n: _Node, x: Any, fn: Callable[[Any, int], Any]) -> Any:
    rank = len(x.shape)
    if n.opset >= 13:
        return fn(x, _axis(n.attr("axis", -1), rank))
    # Before opset 13: the input as a 2-D matrix cut at `axis`, normalized along its rows.
    axis = _axis(n.attr("axis", 1), rank) if rank else 0
    rows = int(np.prod(x.shape[:axis], dtype=np.int64))
    cols = int(np.prod(x.shape[axis:], dtype=np.int64))
    if (rows, cols) == tuple(x.shape):
        return fn(x, 1)
    return n.ns.reshape(fn(n.ns.reshape(x, (rows, cols)), 1), tuple(x.shape))


@_op("Softmax")
def _softmax(n: _Node, x: Any) -> Any:
    return _softmax_like(n, x, lambda v, ax: n.ns.softmax(v, axis=ax))


@_op("LogSoftmax")
def _log_softmax(n: _Node, x: Any) -> Any:
    return _softmax_like(n, x, lambda v, ax: n.ns.log_softmax(v, axis=ax))


# Opset from which each reduction takes its axes as the second input.
_AXES_INPUT_SINCE = {"ReduceSum": 13, "ReduceMean": 18, "ReduceMax": 18}


def _reduce(n: _Node, x: Any, axes_in: Any, fn: Callable[..., Any]) -> Any:
    rank = len(x.shape)
    if n.opset >= _AXES_INPUT_SINCE[n.node.op_type]:
        axes = n.param(axes_in, "the axes (input 2)")
        axes = [] if axes is None else [int(a) for a in axes.reshape(-1)]
    else:
        axes = list(n.attr("axes", []))
    keepdims = bool(n.attr("keepdims", 1))
    if not axes:
        if n.attr("noop_with_empty_axes", 0):
            return x
        axes = list(range(rank))
    axes = sorted({_axis(a, rank, "reduction axis") for a in axes})
    if not axes:  # a 0-d input: nothing to reduce
        return x
    return fn(x, axis=axes[0] if len(axes) == 1 else tuple(axes), keepdims=keepdims)


@_op("ReduceSum", params=(1,))
def _reduce_sum(n: _Node, x: Any, axes: Any = None) -> Any:
    return _reduce(n, x, axes, n.ns.sum)


@_op("ReduceMean", params=(1,))
def _reduce_mean(n: _Node, x: Any, axes: Any = None) -> Any:
    return _reduce(n, x, axes, n.ns.mean)


@_op("ReduceMax", params=(1,))
def _reduce_max(n: _Node, x: Any, axes: Any = None) -> Any:
    return _reduce(n, x, axes, n.ns.max)


@_op("Transpose")
def _transpose(n: _Node, x: Any) -> Any:
    perm = n.attr("perm")
    rank = len(x.shape)
    if perm is None:
        perm = list(range(rank))[::-1]
    perm = [int(p) for p in perm]
    if sorted(_axis(p, rank, "perm entry") for p in perm) != list(range(rank)):
        raise TraError("onnx", f"perm {perm} is not a permutation of the {rank} axes")
    return x if perm == list(range(rank)) else n.ns.transpose(x, tuple(perm))


@_op("LayerNormalization")
def _layer_norm(n: _Node, x: Any, scale: Any, bias: Any = None) -> Tuple[Any, Any, Any]:
    onnx = _onnx()
    ns = n.ns
    rank = len(x.shape)
    axis = _axis(n.attr("axis", -1), rank)
    eps = float(n.attr("epsilon", 1e-5))
    stash = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(n.attr("stash_type", 1)))
    if stash not in _FLOATS:
        raise TraError("onnx", f"stash_type {stash} is not supported (float32 and float64 are)")
    dtype = np.dtype(x.dtype)
    axes = tuple(range(axis, rank))
    red = axes[0] if len(axes) == 1 else axes
    xs = x if dtype == stash else ns.astype(x, stash)
    mean = ns.mean(xs, axis=red, keepdims=True)
    d = ns.subtract(xs, mean)
    var = ns.mean(ns.multiply(d, d), axis=red, keepdims=True)
    inv_std = ns.reciprocal(ns.sqrt(ns.add(var, eps)))
    y = ns.multiply(d, inv_std)
    if dtype != stash:
        y = ns.astype(y, dtype)
    y = ns.multiply(y, scale)
    if bias is not None:
        y = ns.add(y, bias)
    return y, mean, inv_std


def _expand_ellipsis(eq: str, ranks: Sequence[int]) -> str:
    """`eq` with each '...' spelled as letters the equation does not use."""
    if "..." not in eq:
        return eq
    lhs, arrow, out = eq.partition("->")
    parts = lhs.split(",")
    free = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" if c not in eq]
    width = max((r - len(p.replace("...", "")) for p, r in zip(parts, ranks) if "..." in p), default=0)
    if width < 0 or width > len(free):
        raise TraError("onnx", f"equation '{eq}' does not match operands of ranks {list(ranks)}")
    batch = "".join(free[:width])
    parts = [p.replace("...", batch[width - (r - len(p.replace("...", ""))):]) for p, r in zip(parts, ranks)]
    if not arrow:  # implicit output: the broadcast axes first, then the letters used once, sorted
        letters = [c for c in "".join(parts) if c not in batch]
        rest = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
        return ",".join(parts) + "->" + batch + rest
    return ",".join(parts) + "->" + out.replace("...", batch)


@_op("Einsum")
def _einsum(n: _Node, *xs: Any) -> Any:
    eq = n.attr("equation")
    eq = (eq.decode() if isinstance(eq, bytes) else str(eq)).replace(" ", "")
    return n.ns.einsum(_expand_ellipsis(eq, [len(x.shape) for x in xs]), *xs)


def _reshape_target(shape: Sequence[int], spec: Sequence[int], allowzero: bool) -> Tuple[int, ...]:
    """ONNX Reshape's output shape: 0 copies the input's size (unless
    `allowzero`), one -1 is inferred."""
    if list(spec).count(-1) > 1:
        raise TraError("onnx", f"shape {list(spec)} has more than one -1")
    out = []
    for i, d in enumerate(spec):
        if d == 0 and not allowzero:
            if i >= len(shape):
                raise TraError("onnx", f"shape {list(spec)}: 0 at position {i} copies no axis of input "
                                       f"shape {tuple(shape)}")
            d = shape[i]
        elif d < -1:
            raise TraError("onnx", f"shape {list(spec)} has a negative size {d}")
        out.append(int(d))
    total = int(np.prod(shape, dtype=np.int64))
    if -1 in out:
        known = int(np.prod([d for d in out if d != -1], dtype=np.int64))
        if known == 0 or total % known:
            raise TraError("onnx", f"cannot reshape {tuple(shape)} ({total} elements) to {list(spec)}")
        out[out.index(-1)] = total // known
    if int(np.prod(out, dtype=np.int64)) != total:
        raise TraError("onnx", f"cannot reshape {tuple(shape)} ({total} elements) to {list(spec)} "
                               f"({int(np.prod(out, dtype=np.int64))} elements)")
    return tuple(out)


@_op("Reshape", params=(1,))
def _reshape(n: _Node, x: Any, shape: Any) -> Any:
    spec = n.param(shape, "the shape (input 2)")
    if spec is None:
        raise TraError("onnx", "Reshape needs its shape input")
    allowzero = bool(n.attr("allowzero", 0)) if n.opset >= 14 else False
    target = _reshape_target(tuple(x.shape), [int(d) for d in spec.reshape(-1)], allowzero)
    return x if target == tuple(x.shape) else n.ns.reshape(x, target)


@_op("Flatten")
def _flatten(n: _Node, x: Any) -> Any:
    rank = len(x.shape)
    axis = n.attr("axis", 1)
    if not -rank <= axis <= rank:
        raise TraError("onnx", f"axis {axis} is out of range for rank {rank}")
    if axis < 0:
        axis += rank
    target = (int(np.prod(x.shape[:axis], dtype=np.int64)), int(np.prod(x.shape[axis:], dtype=np.int64)))
    return x if target == tuple(x.shape) else n.ns.reshape(x, target)


@_op("Concat")
def _concat(n: _Node, *xs: Any) -> Any:
    xs = tuple(x for x in xs if x is not None)
    axis = _axis(n.attr("axis"), len(xs[0].shape))
    return xs[0] if len(xs) == 1 else n.ns.concatenate(list(xs), axis=axis)


@_op("Cast")
def _cast(n: _Node, x: Any) -> Any:
    onnx = _onnx()
    to = n.attr("to")
    dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(to))
    name = onnx.TensorProto.DataType.Name(to).lower()
    if n.folding:
        if name in ("float16", "bfloat16") or dtype.kind not in "biuf":
            raise TraError("onnx", f"Cast to {name} is not supported")
        return np.asarray(x).astype(dtype)
    if dtype not in _FLOATS:
        raise TraError("onnx", f"Cast to {name} is not supported (tra casts between float32 and float64)")
    return x if np.dtype(x.dtype) == dtype else n.ns.astype(x, dtype)


# ------------------------------------------------------------ translation
def load(model: Any) -> Any:
    """The shape-inferred ModelProto of a path, bytes or ModelProto."""
    onnx = _onnx()
    if isinstance(model, (str, bytes)) or hasattr(model, "__fspath__"):
        try:
            model = onnx.load(model) if not isinstance(model, bytes) else onnx.load_from_string(model)
        except Exception as e:  # noqa: BLE001 - any unreadable file
            raise TraError("onnx", f"cannot read the model: {e}") from e
    if not isinstance(model, onnx.ModelProto):
        raise TraError("onnx", f"expected a path or an onnx.ModelProto, got {type(model).__name__}")
    try:
        return onnx.shape_inference.infer_shapes(model)
    except Exception as e:  # noqa: BLE001 - onnx raises several kinds
        raise TraError("onnx", f"shape inference failed: {e}") from e


def _opset(model: Any) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return int(imp.version)
    return 1


def _where(index: int, node: Any) -> str:
    name = f" '{node.name}'" if node.name else ""
    return f"node {index}{name} ({node.op_type})"


def _type_name(onnx: Any, type_proto: Any) -> str:
    kind = type_proto.WhichOneof("value")
    if kind != "tensor_type":
        return (kind or "unknown type").replace("_type", "")
    return onnx.TensorProto.DataType.Name(type_proto.tensor_type.elem_type).lower()


@dataclass
class Input:
    """A model input: its name, ONNX type name, numpy dtype and shape (dims
    without a fixed size are None, or names)."""

    name: str
    type: str
    dtype: Optional[np.dtype]
    shape: Optional[Tuple[Any, ...]]


def inputs_of(model: Any) -> List[Input]:
    """The model's inputs (initializers listed as inputs excluded)."""
    onnx = _onnx()
    inits = {t.name for t in model.graph.initializer}
    out = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        t = vi.type
        dtype, shape = None, None
        if t.WhichOneof("value") == "tensor_type":
            try:
                dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.tensor_type.elem_type))
            except (KeyError, TypeError, ValueError):
                dtype = None
            if t.tensor_type.HasField("shape"):
                shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                              for d in t.tensor_type.shape.dim)
        out.append(Input(vi.name, _type_name(onnx, t), dtype, shape))
    return out


def _param_uses(model: Any) -> Dict[str, bool]:
    """For each value name: whether all its uses are shape/axes parameters."""
    only: Dict[str, bool] = {}
    for node in model.graph.node:
        op = _OPS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        for i, name in enumerate(node.input):
            if name:
                only[name] = only.get(name, True) and op is not None and i in op.params
    for vi in model.graph.output:
        only[vi.name] = False
    return only


class _Translator:
    """Translates one graph with namespace `ns`; constants fold with numpy."""

    def __init__(self, model: Any, ns: Any):
        self.onnx = _onnx()
        self.model = model
        self.ns = ns
        self.opset = _opset(model)
        #: name -> numpy constant
        self.const: Dict[str, np.ndarray] = {}
        #: name -> value in `ns` (depends on the model inputs)
        self.dyn: Dict[str, Any] = {}
        self._lifted: Dict[str, Any] = {}
        for t in model.graph.initializer:
            self.const[t.name] = self.onnx.numpy_helper.to_array(t)
        #: name -> the shape ONNX infers (None for a size it does not know)
        self.inferred: Dict[str, Tuple[Optional[int], ...]] = {}
        g = model.graph
        for vi in list(g.value_info) + list(g.output):
            t = vi.type
            if t.WhichOneof("value") == "tensor_type" and t.tensor_type.HasField("shape"):
                self.inferred[vi.name] = tuple(d.dim_value if d.HasField("dim_value") else None
                                               for d in t.tensor_type.shape.dim)

    def value(self, name: str) -> Any:
        if name in self.dyn:
            return self.dyn[name]
        return self.const[name]

    def lift(self, name: str) -> Any:
        """The constant `name` as a value of the namespace (one per name)."""
        if name not in self._lifted:
            self._lifted[name] = self.ns.array(self.const[name])
        return self._lifted[name]

    def set(self, name: str, v: Any, folded: bool) -> None:
        if folded:
            self.const[name] = np.asarray(v)
        elif 0 in tuple(v.shape):  # an empty tensor is its shape alone
            self.const[name] = np.zeros(tuple(v.shape), dtype=np.dtype(v.dtype))
        else:
            self.dyn[name] = v

    def args(self, node: Any, op: _Op) -> Tuple[List[Any], bool]:
        names = list(node.input)
        folded = all(not nm or nm in self.const for nm in names)
        if folded:
            return [self.const[nm] if nm else None for nm in names], True
        others = [self.value(nm) for nm in names if nm and nm in self.dyn]
        rank = max((len(v.shape) for v in others), default=0)
        out: List[Any] = []
        for i, nm in enumerate(names):
            if not nm:
                out.append(None)
            elif nm in self.dyn or i in op.params:
                out.append(self.value(nm))
            elif op.numbers and self.const[nm].size == 1 and self.const[nm].ndim <= rank:
                out.append(self.const[nm].reshape(()).item())
            else:
                out.append(self.lift(nm))
        return out, False

    def node(self, index: int, node: Any) -> None:
        where = _where(index, node)
        op = _OPS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        if op is None:
            domain = f" of domain '{node.domain}'" if node.domain not in ("", "ai.onnx") else ""
            raise TraError("onnx", f"{where}: operator {node.op_type}{domain} is not supported by tra")
        for nm in node.input:
            if nm and nm not in self.dyn and nm not in self.const:
                raise TraError("onnx", f"{where}: input '{nm}' is not defined before the node "
                                       f"(nodes must be in topological order)")
        attrs = {a.name: self.onnx.helper.get_attribute_value(a) for a in node.attribute}
        try:
            args, folded = self.args(node, op)
            ctx = _Node(node, index, self.opset, NUMPY if folded else self.ns, attrs, folded)
            with np.errstate(all="ignore"):
                result = op.fn(ctx, *args)
        except TraError as e:
            raise TraError("onnx", f"{where}: {e.message if e.op == 'onnx' else str(e)}") from e
        except Exception as e:  # noqa: BLE001 - never a traceback from deep inside
            raise TraError("onnx", f"{where}: {type(e).__name__}: {e}") from e
        results = result if isinstance(result, tuple) else (result,)
        for i, nm in enumerate(node.output):
            if not nm:
                continue
            if i >= len(results):
                raise TraError("onnx", f"{where}: output {i} ('{nm}') is not supported")
            want = self.inferred.get(nm)
            shape = tuple(np.shape(results[i]))
            if want is not None and (len(want) != len(shape) or any(w is not None and w != s
                                                                     for w, s in zip(want, shape))):
                raise TraError("onnx", f"{where}: output '{nm}' has shape {shape}; ONNX infers "
                                       f"{tuple('?' if w is None else w for w in want)}")
            self.set(nm, results[i], folded)

    def run(self, leaves: Mapping[str, Any], consts: Mapping[str, np.ndarray]) -> List[Any]:
        self.dyn.update(leaves)
        self.const.update(consts)
        for i, node in enumerate(self.model.graph.node):
            self.node(i, node)
        outs = []
        for vi in self.model.graph.output:
            if vi.name not in self.dyn and vi.name not in self.const:
                raise TraError("onnx", f"output '{vi.name}' is computed by no node")
            outs.append(self.value(vi.name))
        return outs


def translate(model: Any, leaves: Mapping[str, Any], consts: Mapping[str, np.ndarray], ns: Any) -> List[Any]:
    """The graph outputs of `model` (shape-inferred, see :func:`load`) with
    its inputs bound to `leaves` (name -> a value of the namespace `ns`, e.g.
    a ``tra.placeholder``) and `consts` (name -> a numpy array taken as a
    constant): each a numpy array (when constant) or a value of `ns`."""
    return _Translator(model, ns).run(leaves, consts)


def _output_dtypes(model: Any) -> List[Optional[np.dtype]]:
    onnx = _onnx()
    out = []
    for vi in model.graph.output:
        try:
            out.append(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)))
        except (KeyError, TypeError, ValueError):
            out.append(None)
    return out


@dataclass
class Bound:
    """The model inputs as given: `leaves` (name -> (input, shape, value or
    None)) become namespace leaves; `consts` (integer parameters, empty
    tensors) are numpy constants."""

    leaves: Dict[str, Tuple[Input, Tuple[int, ...], Optional[np.ndarray]]]
    consts: Dict[str, np.ndarray]


def bind(model: Any, given: Mapping[str, Any], shapes_ok: bool = False) -> Bound:
    """Check the inputs `given` (name -> array; with `shapes_ok`, a tuple
    is a shape) against the model's."""
    ins = inputs_of(model)
    names = {i.name for i in ins}
    unknown = [k for k in given if k not in names]
    if unknown:
        raise TraError("onnx", f"the model has no input {unknown[0]!r} (its inputs: {sorted(names)})")
    params = _param_uses(model)
    bound = Bound({}, {})
    for inp in ins:
        if inp.name not in given:
            raise TraError("onnx", f"input '{inp.name}' ({inp.type}) is not given")
        v = given[inp.name]
        if shapes_ok and isinstance(v, tuple) and all(isinstance(d, (int, np.integer)) for d in v):
            arr, shape = None, tuple(int(d) for d in v)
        else:
            arr = np.asarray(v)
            shape = tuple(arr.shape)
        if inp.dtype is None:
            raise TraError("onnx", f"input '{inp.name}' is a {inp.type}; tra takes float32/float64 tensors")
        if inp.type in ("float16", "bfloat16"):
            raise TraError("onnx", f"input '{inp.name}' has type {inp.type}; tra computes in float32/float64 "
                                   f"(float16 and bfloat16 are refused)")
        if inp.dtype not in _FLOATS:
            if not (inp.dtype.kind in "iu" and params.get(inp.name, False)):
                raise TraError("onnx", f"input '{inp.name}' has type {inp.type}; tra takes float32/float64 "
                                       f"model inputs (integers only as shape or axes parameters)")
            if arr is None:
                raise TraError("onnx", f"input '{inp.name}' ({inp.type}) is a shape or axes parameter: "
                                       f"give its value, not a shape")
        if inp.shape is not None and (len(inp.shape) != len(shape) or any(
                isinstance(d, int) and d > 0 and d != s for d, s in zip(inp.shape, shape))):
            raise TraError("onnx", f"input '{inp.name}' has shape {shape}, the model declares "
                                   f"{tuple(d if d is not None else '?' for d in inp.shape)}")
        if inp.dtype not in _FLOATS:
            bound.consts[inp.name] = arr.astype(inp.dtype)
        elif 0 in shape:  # no elements: no data
            bound.consts[inp.name] = np.zeros(shape, dtype=inp.dtype)
        else:
            bound.leaves[inp.name] = (inp, shape, None if arr is None else arr.astype(inp.dtype, copy=False))
    return bound


def _block_of(block: Any, name: str) -> Any:
    return block.get(name) if isinstance(block, Mapping) else block


def _namespace() -> Any:
    import tra

    return tra


def _leaves(bound: Bound, block: Any, placeholders: bool) -> Tuple[Dict[str, Any], Dict[Any, np.ndarray]]:
    """The namespace leaves of the model inputs, and the feed of the placeholders."""
    tra = _namespace()
    leaves, feed = {}, {}
    for name, (inp, shape, arr) in bound.leaves.items():
        blk = _block_of(block, name)
        if placeholders:
            leaves[name] = tra.placeholder(shape, inp.dtype, block=blk)
            if arr is not None:
                feed[leaves[name]] = arr
        else:  # the same program: a leaf is an input whatever its data
            leaves[name] = tra.array(np.zeros(shape, inp.dtype) if arr is None else arr, block=blk)
    return leaves, feed


def run(model: Any, inputs: Mapping[str, Any], *, session: Any = None, block: Any = None) -> List[np.ndarray]:
    """Run an ONNX model on tra: `model` is a path or an ``onnx.ModelProto``,
    `inputs` maps input names to arrays; returns the graph's outputs in order,
    as numpy arrays of the model's output types. The inputs are
    ``tra.placeholder`` leaves, so the program is the same from call to call.
    `block` cuts them into blocks (``tra.placeholder``'s block: an int or a
    tuple, or a dict input name -> block); `session` is the
    :class:`tra.Session` to run on (default: the last ``tra.connect``)."""
    m = load(model)
    tra = _namespace()
    bound = bind(m, inputs)
    leaves, feed = _leaves(bound, block, placeholders=True)
    outs = translate(m, leaves, bound.consts, tra)
    exprs = [o for o in outs if not isinstance(o, np.ndarray)]
    values = iter(tra.compute(*exprs, feed=feed, session=session) if exprs else [])
    results = []
    for o, dtype in zip(outs, _output_dtypes(m)):
        v = o if isinstance(o, np.ndarray) else np.asarray(next(values))
        results.append(v.astype(dtype, copy=False) if dtype is not None else v)
    return results


def _given(m: Any, inputs_or_shapes: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    given = dict(inputs_or_shapes or {})
    for inp in inputs_of(m):
        if inp.name in given or inp.shape is None:
            continue
        if not all(isinstance(d, int) for d in inp.shape):
            raise TraError("onnx", f"input '{inp.name}' has shape "
                                   f"{tuple(d if d is not None else '?' for d in inp.shape)} without fixed "
                                   f"sizes; give its shape")
        given[inp.name] = tuple(inp.shape)
    return given


def exprs(model: Any, inputs_or_shapes: Optional[Mapping[str, Any]] = None, *, block: Any = None,
          placeholders: bool = True) -> Tuple[List[Any], Dict[Any, np.ndarray]]:
    """The ``tra.Expr`` of each graph output (a constant output is a
    ``tra.array``) and the feed of its placeholders (for
    ``tra.compute(*exprs, feed=feed)``). The model inputs are
    ``tra.placeholder`` leaves (``tra.array`` ones without `placeholders`),
    their shapes from `inputs_or_shapes` (name -> array or shape tuple; an
    input not named: as the model declares it); an array given is fed."""
    m = load(model)
    tra = _namespace()
    bound = bind(m, _given(m, inputs_or_shapes), shapes_ok=True)
    leaves, feed = _leaves(bound, block, placeholders)
    outs = translate(m, leaves, bound.consts, tra)
    return [tra.array(o) if isinstance(o, np.ndarray) else o for o in outs], feed


def program(model: Any, inputs_or_shapes: Optional[Mapping[str, Any]] = None, *, block: Any = None,
            sites: Optional[int] = None) -> dict:
    """The TRA program (JSON, as ``Expr.program()``, outputs in the graph's
    order) that :func:`run` sends for these input shapes; see :func:`exprs`.
    The program has no data: the inputs are declared by their blocks."""
    es, _ = exprs(model, inputs_or_shapes, block=block, placeholders=False)
    from .session import build_program

    return build_program(es, sites)[0]
