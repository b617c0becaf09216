#!/usr/bin/env python3
"""A front-end as its authors would write it: build a blocked matmul program for
two numpy arrays, ask tra for the plan, run it through /v1/execute, and check
the answer with numpy.

    python3 examples/client.py [--url http://127.0.0.1:8080]
"""
import argparse
import sys

import numpy as np
import requests


def blocked_matmul_program(a, b, block, sites):
    """The TRA program of C = A @ B over blocks of `block` x `block`."""
    (m, k), (k2, n) = a.shape, b.shape
    assert k == k2, "inner dimensions differ"
    for d in (m, k, n):
        assert d % block == 0, "this client cuts exact blocks"
    return {
        "inputs": {
            "A": {"key_bounds": [m // block, k // block], "array_bounds": [block, block]},
            "B": {"key_bounds": [k // block, n // block], "array_bounds": [block, block]},
        },
        "nodes": {
            "AB": {"op": "join", "left": "A", "right": "B",
                   "left_keys": [1], "right_keys": [0], "kernel": "matMul"},
            "C": {"op": "aggregate", "input": "AB", "group_by": [0, 2], "kernel": "matAdd"},
        },
        "outputs": ["C"],
        "cluster": {"sites": sites},
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--sites", type=int, default=3)
    args = ap.parse_args()

    rng = np.random.default_rng(7)
    a = rng.standard_normal((24, 16))
    b = rng.standard_normal((16, 32))
    program = blocked_matmul_program(a, b, block=8, sites=args.sites)

    plan = requests.post(f"{args.url}/v1/optimize", json=program, timeout=60)
    plan.raise_for_status()
    plan = plan.json()
    print(f"chosen: {plan['alternatives'][0]['label']}, "
          f"{plan['cost']['network_floats']} floats moved, "
          f"{len(plan['alternatives'])} alternatives, rules {plan['rules_applied']}")

    body = dict(program, data={"A": {"dense": a.tolist()}, "B": {"dense": b.tolist()}})
    run = requests.post(f"{args.url}/v1/execute", json=body, timeout=120)
    run.raise_for_status()
    run = run.json()
    c = np.array(run["outputs"]["C"]["data"])
    expected = a @ b
    if c.shape != expected.shape or not np.allclose(c, expected, rtol=1e-9, atol=1e-9):
        print(f"MISMATCH: got shape {c.shape}, max error {np.abs(c - expected).max()}", file=sys.stderr)
        return 1
    if run["network_floats_measured"] != run["network_floats_predicted"]:
        print("floats moved differ from the prediction", file=sys.stderr)
        return 1
    # A bad program gets a clear error naming the node.
    bad = dict(program)
    bad["nodes"] = dict(program["nodes"], AB=dict(program["nodes"]["AB"], kernel="matMull"))
    err = requests.post(f"{args.url}/v1/optimize", json=bad, timeout=60)
    if err.status_code != 422 or err.json()["error"]["at"] != "AB.kernel":
        print(f"unexpected answer to a bad kernel: {err.status_code} {err.text}", file=sys.stderr)
        return 1
    print(f"ok: C = A @ B matches numpy ({c.shape[0]}x{c.shape[1]}), "
          f"{run['network_floats_measured']} floats moved as predicted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
