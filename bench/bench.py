"""Runs tra's thread-executor benchmark (executor/benches/threads.rs) and its
peers in the same run, and prints a table of ratios.

- matmul: C = A·B, 4096×4096 float32. tra runs the optimizer's plan of the TRA
  program (blocks of 1024, 2 sites) with inputs already cut in blocks; numpy is
  one `A @ B` call (its BLAS with every core); dask is `da.from_array(…,
  chunks=1024)` on the threaded scheduler with BLAS pinned to one thread,
  `persist()`ed so that, like tra, it ends with the result in blocks.
- diag(X + Y): the Table-1 plan against the plan R1-6/R1-7 give.
- peak memory of the tra matmul run against inputs + output.
Times are the best of --reps runs after a warm-up, over --rounds rounds that
interleave the three (numpy, tra, dask), so that a busy machine slows all of
them alike; CPU time (all threads of the process) is reported next to wall
time: on a machine shared with other work it is the steadier figure.
"""

import argparse
import json
import os
import subprocess
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--n", type=int, default=4096)
ap.add_argument("--block", type=int, default=1024)
ap.add_argument("--sites", type=int, default=2)
ap.add_argument("--reps", type=int, default=5)
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--quick", action="store_true", help="small sizes: a smoke test")
ap.add_argument("--out", default="target/bench/results.json")
args = ap.parse_args()
if args.quick:
    args.n, args.block, args.reps, args.rounds = 512, 128, 2, 1
threads = os.cpu_count() or 1


def ratio(a, b):
    return f"{a / b:.2f}" if b > 0 else "n/a"


def best_and_median(times):
    s = sorted(times)
    return s[0], s[len(s) // 2]


def numpy_matmul(n, reps):
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    a @ b  # warm-up
    times, cpu = [], []
    for _ in range(reps):
        t, c = time.perf_counter(), time.process_time()
        a @ b
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return times, cpu


DASK = r"""
import json, sys, time
import numpy as np, dask, dask.array as da
n, block, reps, workers = (int(x) for x in sys.argv[1:5])
rng = np.random.default_rng(0)
a = rng.standard_normal((n, n), dtype=np.float32)
b = rng.standard_normal((n, n), dtype=np.float32)
x, y = da.from_array(a, chunks=block), da.from_array(b, chunks=block)
c = x @ y
c.persist(scheduler="threads", num_workers=workers)  # warm-up
times, cpu, dense = [], [], []
for _ in range(reps):
    t, p = time.perf_counter(), time.process_time()
    c.persist(scheduler="threads", num_workers=workers)
    times.append(time.perf_counter() - t); cpu.append(time.process_time() - p)
for _ in range(max(1, reps // 2)):
    t = time.perf_counter(); c.compute(scheduler="threads", num_workers=workers); dense.append(time.perf_counter() - t)
print(json.dumps({"times_s": times, "cpu_s": cpu, "compute_dense_s": dense, "dask": dask.__version__}))
"""


def dask_matmul(n, block, reps):
    env = dict(os.environ)
    for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[v] = "1"
    out = subprocess.run(
        [sys.executable, "-c", DASK, str(n), str(block), str(reps), str(threads)],
        env=env, check=True, capture_output=True, text=True,
    )
    return json.loads(out.stdout)


def tra_bench(matmul_only=False):
    cmd = ["cargo", "bench", "-q", "-p", "tra-executor", "--bench", "threads", "--",
           "--n", str(args.n), "--block", str(args.block), "--sites", str(args.sites), "--reps", str(args.reps)]
    if args.quick:
        cmd += ["--diag-block", "64"]
    if matmul_only:
        cmd += ["--matmul-only"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def main():
    import numpy as np

    print(f"bench: numpy {np.__version__}, {threads} cores, n={args.n}, block={args.block}, "
          f"sites={args.sites}, best of {args.reps} × {args.rounds} rounds, load {os.getloadavg()[0]:.1f}",
          file=sys.stderr)
    np_times, np_cpu, tra_times, tra_cpu, dk_times, dk_cpu, dk_dense = [], [], [], [], [], [], []
    tra, rounds = None, []
    for r in range(args.rounds):
        t, c = numpy_matmul(args.n, args.reps)
        np_times += t
        np_cpu += c
        out = tra_bench(matmul_only=tra is not None)
        tra = tra or out
        tra_times += out["matmul"]["times_s"]
        tra_cpu += out["matmul"]["cpu_s"]
        dk = dask_matmul(args.n, args.block, args.reps)
        dk_times += dk["times_s"]
        dk_cpu += dk["cpu_s"]
        dk_dense += dk["compute_dense_s"]
        rounds.append({"numpy_s": t, "tra_s": out["matmul"]["times_s"], "dask_s": dk["times_s"]})
        print(f"bench: round {r + 1}/{args.rounds}: best numpy {min(t):.3f} s, tra {min(out['matmul']['times_s']):.3f} s, "
              f"dask {min(dk['times_s']):.3f} s", file=sys.stderr)
    m, d = tra["matmul"], tra["diag"]
    np_best, np_med = best_and_median(np_times)
    dk_best, dk_med = best_and_median(dk_times)
    tra_best, tra_med = best_and_median(tra_times)
    t1, opt = d["table1"], d["optimized"]
    in_out = m["input_bytes"] + m["output_bytes"]
    rows = [
        ("matmul %d² f32 vs numpy A @ B" % args.n, f"{tra_best:.3f} s", f"{np_best:.3f} s",
         f"{tra_best / np_best:.2f}× numpy's time", "≤ 1.0×"),
        ("matmul vs dask (chunks %d, threads, BLAS 1 thread)" % args.block, f"{tra_best:.3f} s", f"{dk_best:.3f} s",
         f"tra {dk_best / tra_best:.2f}× faster", "≥ 1.15×"),
        ("  CPU time (all threads) vs numpy", f"{min(tra_cpu):.3f} s", f"{min(np_cpu):.3f} s",
         f"{ratio(min(tra_cpu), min(np_cpu))}× numpy's", ""),
        ("  CPU time (all threads) vs dask", f"{min(tra_cpu):.3f} s", f"{min(dk_cpu):.3f} s",
         f"{ratio(min(dk_cpu), min(tra_cpu))}× less", ""),
        ("diag(X+Y): composed vs Table-1 plan", f"{opt['median_s'] * 1e3:.2f} ms", f"{t1['median_s'] * 1e3:.2f} ms",
         f"{t1['median_s'] / opt['median_s']:.0f}× faster", "faster"),
        ("  work: flops (predicted)", f"{opt['flops_predicted']}", f"{t1['flops_predicted']}",
         f"{t1['flops_predicted'] / max(1, opt['flops_predicted']):.0f}× fewer", ""),
        ("  work: floats moved (measured)", f"{opt['network_floats_measured']}", f"{t1['network_floats_measured']}",
         f"{t1['network_floats_measured'] / max(1, opt['network_floats_measured']):.0f}× fewer", ""),
        ("peak heap of the matmul run vs inputs+output", f"{m['peak_heap_bytes'] / 2**20:.0f} MiB",
         f"{in_out / 2**20:.0f} MiB", f"{m['peak_heap_ratio']:.2f}×", "≤ 1.5×"),
        ("  peak RSS of the whole benchmark process", f"{(m['peak_rss_bytes'] or 0) / 2**20:.0f} MiB",
         f"{in_out / 2**20:.0f} MiB", f"{(m['peak_rss_bytes'] or 0) / in_out:.2f}×", ""),
    ]
    w = [max(len(r[i]) for r in rows + [("benchmark", "tra", "peer", "ratio", "goal")]) for i in range(5)]
    line = lambda r: "  ".join(str(c).ljust(w[i]) for i, c in enumerate(r))
    print(line(("benchmark", "tra", "peer", "ratio", "goal")))
    print("  ".join("-" * x for x in w))
    for r in rows:
        print(line(r))
    print()
    print(f"tra: plan {m['plan']}  ({m['strategy']})")
    print(f"tra: the same products on plain threads, no runtime: {m['kernels_only_s']:.3f} s (the floor)")
    print(f"tra: {2 * args.n ** 3 / tra_best / 1e9:.0f} GFLOP/s, median {tra_med:.3f} s, cold run {m['cold_ms'] / 1e3:.3f} s, "
          f"single-thread {tra['gemm']['block']}³ gemm kernel {tra['gemm']['gflops']:.0f} GFLOP/s; floats moved "
          f"{m['network_floats_measured']} measured = {m['network_floats_predicted']} predicted: {m['floats_match']}; "
          f"block bytes allocated after the first run: {m['fresh_block_bytes_after_first_run']}; "
          f"max sampled relative error {m['max_rel_error_sampled']:.1e}")
    e = tra["elementwise"]
    print(f"tra: fused relu∘matAdd on {e['n']}² f32: {e['fused_gb_per_s']:.1f} GB/s, "
          f"{e['speedup']:.2f}× faster than matAdd then relu")
    print(f"numpy: median {np_med:.3f} s; dask: median {dk_med:.3f} s persist, "
          f"{min(dk_dense):.3f} s compute() to one dense array; diag outputs equal: {d['same_output']}")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"args": vars(args), "rounds": rounds, "numpy_cpu_s": np_cpu, "tra_cpu_s": tra_cpu, "dask_cpu_s": dk_cpu,
                   "tra": tra, "machine_load": os.getloadavg()}, f, indent=2)
    print(f"(all figures in {args.out})")


if __name__ == "__main__":
    main()
