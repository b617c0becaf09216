#!/usr/bin/env python3
"""TRA programs of the ML workloads, at any size, and their numpy answers.

Each builder returns a TRA program (a dict, as `POST /v1/optimize` takes it)
over row-blocked inputs; `numpy_*` computes the same thing with numpy. The
programs follow the blocked recipes of the kernel catalog: a row-wise maximum
is `aggregate(max)` over `rowMax` of every block, a row-wise sum
`aggregate(matAdd)` over `rowSum`, and the broadcast back a join on the row
block key with a `matColVec…` kernel.

    python3 scripts/ml_programs.py   # rewrites examples/{softmax,layernorm,logreg-step,attention-head}.json

The examples are written at the sizes the page and `tra bench` show;
`scripts/programs-numpy-test.py` runs the same builders scaled down against
numpy through `tra run`.
"""

import json
import math
import os

import numpy as np


def _inp(keys, block, hash_on=None):
    d = {"key_bounds": keys, "array_bounds": block}
    if hash_on is not None:
        d["placement"] = {"hash": hash_on}
    return d


def _join(l, r, lk, rk, k):
    return {"op": "join", "left": l, "right": r, "left_keys": lk, "right_keys": rk, "kernel": k}


def _agg(x, g, k):
    return {"op": "aggregate", "input": x, "group_by": g, "kernel": k}


def _map(x, k):
    return {"op": "transform", "input": x, "kernel": k}


def softmax_rows(nodes, x, prefix):
    """Adds the nodes of softmax over the rows of the (i, j)-keyed `x`; returns the output node."""
    p = prefix
    nodes[p + "rmax"] = _map(x, "rowMax")
    nodes[p + "max"] = _agg(p + "rmax", [0], "max")
    nodes[p + "exp"] = _join(x, p + "max", [0], [0], "compose(exp,matColVecSub)")
    nodes[p + "rsum"] = _map(p + "exp", "rowSum")
    nodes[p + "sum"] = _agg(p + "rsum", [0], "matAdd")
    nodes[p + "out"] = _join(p + "exp", p + "sum", [0], [0], "matColVecDiv")
    return p + "out"


def softmax(rows, cols, row_blocks, col_blocks, sites):
    """softmax(X, axis=1) of X [rows, cols] cut into row_blocks × col_blocks blocks."""
    nodes = {}
    out = softmax_rows(nodes, "X", "")
    return {"inputs": {"X": _inp([row_blocks, col_blocks], [rows // row_blocks, cols // col_blocks], [0])},
            "nodes": nodes, "outputs": [out], "cluster": {"sites": sites}}


def numpy_softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def layernorm(rows, cols, row_blocks, col_blocks, sites, eps=1e-5):
    """Layer normalization of every row of X [rows, cols] with gain G and bias B ([cols])."""
    bc = cols // col_blocks
    nodes = {
        "rsum": _map("X", "rowSum"),
        "sum": _agg("rsum", [0], "matAdd"),
        "mean": _map("sum", f"scale({1.0 / cols!r})"),
        "Xc": _join("X", "mean", [0], [0], "matColVecSub"),
        "sq": _join("Xc", "Xc", [0, 1], [0, 1], "elemMul"),
        "rsq": _map("sq", "rowSum"),
        "ssq": _agg("rsq", [0], "matAdd"),
        "std": _map("ssq", f"compose(sqrt,compose(shift({eps!r}),scale({1.0 / cols!r})))"),
        "N": _join("Xc", "std", [0], [0], "matColVecDiv"),
        "NG": _join("N", "G", [1], [0], "matVecMul"),
        "Y": _join("NG", "B", [1], [0], "matVecAdd"),
    }
    inputs = {"X": _inp([row_blocks, col_blocks], [rows // row_blocks, bc], [0]),
              "G": _inp([col_blocks], [bc]), "B": _inp([col_blocks], [bc])}
    return {"inputs": inputs, "nodes": nodes, "outputs": ["Y"], "cluster": {"sites": sites}}


def numpy_layernorm(x, g, b, eps=1e-5):
    c = x - x.mean(axis=1, keepdims=True)
    return c / np.sqrt((c * c).mean(axis=1, keepdims=True) + eps) * g + b


def logreg_step(rows, features, row_blocks, sites, lr=0.5):
    """One gradient step of logistic regression on a tall X [rows, features]
    (row blocks of full rows), labels Y [rows, 1], weights W [features, 1]:
    P = sigmoid(X·W), loss = −mean(Y log P + (1−Y) log(1−P)),
    W' = W − lr · Xᵀ(P − Y) / rows. Outputs W' and the loss ([1])."""
    b = rows // row_blocks
    nodes = {
        "XW": _join("X", "W", [1], [0], "matMul"),
        "Z": _agg("XW", [0, 2], "matAdd"),
        "P": _map("Z", "sigmoid"),
        "logP": _map("P", "log"),
        "log1mP": _map("P", "compose(log,compose(shift(1),neg))"),
        "L1": _join("Y", "logP", [0, 1], [0, 1], "elemMul"),
        "Y1": _map("Y", "compose(shift(1),neg)"),
        "L2": _join("Y1", "log1mP", [0, 1], [0, 1], "elemMul"),
        "L": _join("L1", "L2", [0, 1], [0, 1], "matAdd"),
        "Lc": _map("L", "colSum"),
        "Ls": _agg("Lc", [], "matAdd"),
        "loss": _map("Ls", f"scale({-1.0 / rows!r})"),
        "D": _join("P", "Y", [0, 1], [0, 1], "matSub"),
        "XtD": _join("X", "D", [0], [0], "matMulTN"),
        "grad": _agg("XtD", [1, 2], "matAdd"),
        "Wn": _join("W", "grad", [0, 1], [0, 1], f"sgdStep({lr / rows!r})"),
    }
    inputs = {"X": _inp([row_blocks, 1], [b, features], [0]), "Y": _inp([row_blocks, 1], [b, 1], [0]),
              "W": _inp([1, 1], [features, 1])}
    return {"inputs": inputs, "nodes": nodes, "outputs": ["Wn", "loss"], "cluster": {"sites": sites}}


def numpy_logreg_step(x, y, w, lr=0.5):
    p = 1.0 / (1.0 + np.exp(-(x @ w)))
    loss = -np.mean(y * np.log(p) + (1 - y) * np.log(1 - p))
    return w - lr * x.T @ (p - y) / x.shape[0], np.array([loss])


def attention_head(seq, head, blocks, sites):
    """One attention head softmax(Q·Kᵀ/√d)·V for Q, K, V [seq, head] cut into
    `blocks` row blocks of full rows: the scores are (i, j)-keyed [b, b]
    blocks, softmax runs over j, the product with V sums over j."""
    b = seq // blocks
    nodes = {
        "QK": _join("Q", "K", [1], [1], f"compose(scale({1.0 / math.sqrt(head)!r}),matMulNT)"),
        "S": {"op": "rekey", "input": "QK", "key": "[k0, k2]"},
    }
    p = softmax_rows(nodes, "S", "p")
    nodes["PV"] = _join(p, "V", [1], [0], "matMul")
    nodes["O"] = _agg("PV", [0, 2], "matAdd")
    inputs = {"Q": _inp([blocks, 1], [b, head], [0]), "K": _inp([blocks, 1], [b, head], [0]),
              "V": _inp([blocks, 1], [b, head], [0])}
    return {"inputs": inputs, "nodes": nodes, "outputs": ["O"], "cluster": {"sites": sites}}


def numpy_attention(q, k, v):
    return numpy_softmax(q @ k.T / math.sqrt(q.shape[1])) @ v


EXAMPLES = {
    "softmax": lambda: softmax(65536, 4096, 64, 4, 8),
    "layernorm": lambda: layernorm(262144, 1024, 64, 1, 8),
    "logreg-step": lambda: logreg_step(1048576, 1024, 128, 8),
    "attention-head": lambda: attention_head(4096, 128, 8, 8),
}


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for name, build in EXAMPLES.items():
        with open(os.path.join(root, "examples", f"{name}.json"), "w") as f:
            json.dump(build(), f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
