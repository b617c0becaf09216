#!/usr/bin/env python3
"""tra.jax.jit on the test programs: what the first and the second call cost.

For each program (the MLP training step, attention with layer norm on
(B, T, D), the logistic-regression step of python/tests/test_jax.py) it
reports the jaxpr's equations and how many were translated, then per call:
tracing, translation, the optimizer's time as the run reports it
(`optimize_ms` of the service's answer; a local session chooses the plan
once with `tra optimize` before its first `tra run --plan`, inside that
call's time, so its optimize column reads 0) and the whole call, against `jax.jit` of the same function in the same run.
A second call with new values must trace nothing and find the plan cached.

    python3 bench/jax_frontend.py [--tra target/release/tra] [--reps 5]
"""

import argparse
import os
import sys
import time

import jax
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "python", "tests"))

import tra  # noqa: E402
import tra.jax as trajax  # noqa: E402
import harness  # noqa: E402  (starts tra serve)
import test_jax as programs  # noqa: E402  (the programs and their arguments)


def optimize_ms(session):
    r = session.last_report or {}
    return r.get("optimize_ms", (r.get("timings_ms") or {}).get("optimize", float("nan")))


def measure(name, f, args, args2, session, reps):
    tj = trajax.jit(f, session=session)
    t = time.perf_counter()
    tj(*args)
    first = (tj.stats.trace_s * 1e3, tj.stats.translate_s * 1e3, optimize_ms(session), (time.perf_counter() - t) * 1e3)
    seconds = []
    for _ in range(reps):
        t = time.perf_counter()
        tj(*args2)
        seconds.append(((time.perf_counter() - t) * 1e3, tj.stats.trace_s * 1e3, tj.stats.translate_s * 1e3,
                        optimize_ms(session)))
    assert tj.stats.traces == 1 and tj.stats.cache_hit, tj.stats
    jf = jax.jit(f)
    jax.block_until_ready(jf(*args))
    jt = []
    for _ in range(reps):
        t = time.perf_counter()
        jax.block_until_ready(jf(*args2))
        jt.append((time.perf_counter() - t) * 1e3)
    best = min(seconds)
    print(f"| {name} | {session_name(session)} | {tj.stats.equations_all} | {tj.stats.translated} | "
          f"{first[0]:.1f} + {first[1]:.1f} | {first[2]:.1f} | {first[3]:.0f} | {best[1]:.1f} + {best[2]:.1f} | "
          f"{best[3]:.1f} | {best[0]:.0f} | {min(jt):.2f} |")


def session_name(s):
    return "tra serve" if s.url else (f"tra run --processes {s.processes}" if s.processes else "tra run")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tra", default=os.path.join(ROOT, "target", "release", "tra"))
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    proc, url = harness.serve(args.tra)
    try:
        sessions = [tra.Session(url=url), tra.Session(binary=args.tra), tra.Session(binary=args.tra, processes=2)]
        print("| program | session | equations | translated | 1st call: trace + translate ms | 1st: optimize ms "
              "| 1st call ms | 2nd call: trace + translate ms | 2nd: optimize ms | 2nd call ms | jax.jit ms |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for name, f, a in [("MLP training step", programs.mlp_step, programs.mlp_args),
                           ("attention + layer norm (B,T,D)", programs.attention, programs.attention_args),
                           ("logistic-regression step", programs.logreg_step, programs.logreg_args)]:
            for s in sessions:
                measure(name, f, a(0), a(1), s, args.reps)
    finally:
        harness.stop(proc)


if __name__ == "__main__":
    main()
