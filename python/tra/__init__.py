"""A lazy numpy-like front-end for tra, and the JAX and ONNX front-ends on it.

Array code written with this module builds an expression; ``compute()`` turns
it into one TRA program (tensor relational algebra: blocked tensors as
relations of ``(key, block)`` pairs, combined by joins, aggregations and
transforms), every shared sub-expression once, sends it to a tra service (or
runs ``tra run``) and returns numpy arrays::

    import numpy as np, tra
    x = tra.array(np.random.rand(8, 6, 4), block=(4, 3, 4))
    y = tra.softmax(x @ x.swapaxes(1, 2), axis=-1)
    y.explain()          # the chosen plan and the alternatives
    np.asarray(y)        # computed by tra

``tra.jax.jit(f)`` runs a JAX function on tra, ``tra.onnx.run(model,
inputs)`` an ONNX graph (optional extras ``[jax]`` and ``[onnx]``). See
``python/README.md`` for the list of operations.
"""

from . import expr as _expr
from .expr import (
    Expr,
    TraError,
    abs,
    absolute,
    add,
    amax,
    amin,
    argmax,
    argmin,
    array,
    astype,
    broadcast_to,
    ceil,
    clip,
    compute,
    concatenate,
    divide,
    dot,
    einsum,
    equal,
    erf,
    exp,
    expand_dims,
    expm1,
    floor,
    greater,
    greater_equal,
    less,
    less_equal,
    log,
    log1p,
    log_softmax,
    logical_and,
    logical_not,
    logical_or,
    logsumexp,
    matmul,
    max,
    maximum,
    mean,
    min,
    minimum,
    moveaxis,
    multiply,
    negative,
    not_equal,
    one_hot,
    placeholder,
    power,
    program,
    reblock,
    reciprocal,
    relu,
    reshape,
    rsqrt,
    sigmoid,
    sign,
    softmax,
    sqrt,
    square,
    squeeze,
    stack,
    subtract,
    sum,
    swapaxes,
    tanh,
    transpose,
    true_divide,
    where,
)
from .session import Session, connect, connect_local, default_session

__all__ = [name for name in dir(_expr) if not name.startswith("_") and callable(getattr(_expr, name))
           and getattr(getattr(_expr, name), "__module__", None) == _expr.__name__] + [
    "Session", "connect", "connect_local", "default_session", "jax", "onnx"]


def __getattr__(name: str):
    # `tra.jax` and `tra.onnx` load on first use: their packages are optional.
    if name in ("jax", "onnx"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'tra' has no attribute {name!r}")
