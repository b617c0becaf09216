"""A lazy numpy-like front-end for tra.

Array code written with this module builds an expression; ``compute()`` turns
it into one TRA program (tensor relational algebra: blocked tensors as
relations of ``(key, block)`` pairs, combined by joins, aggregations and
transforms), every shared sub-expression once, sends it to a tra service (or
runs ``tra run``) and returns numpy arrays::

    import numpy as np, tra
    x = tra.array(np.random.rand(8, 6), block=(4, 3))
    y = tra.softmax(x @ x.T, axis=1)
    y.explain()          # the chosen plan and the alternatives
    np.asarray(y)        # computed by tra

See ``python/README.md`` for the list of operations.
"""

from .expr import Expr, TraError, array, einsum, exp, log, relu, sigmoid, softmax, sqrt
from .session import Session, compute, connect, connect_local, default_session

__all__ = [
    "Expr",
    "TraError",
    "Session",
    "array",
    "einsum",
    "exp",
    "log",
    "relu",
    "sigmoid",
    "softmax",
    "sqrt",
    "compute",
    "connect",
    "connect_local",
    "default_session",
]
