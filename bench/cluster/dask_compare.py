#!/usr/bin/env python3
"""tra on 2 processes vs dask.distributed on 2 worker processes, in one run:
warm, cold, and the wire.

The workload: Z = X @ Y for two 4096 x 4096 float32 matrices, cut into 1024 x 1024
blocks (dask: chunks of 1024), on this machine.

- numpy: X @ Y in memory (the reference time, and the reference result).
- dask warm: a LocalCluster of 2 worker processes (threads: cores / 2 each)
  started beforehand (not counted); timed from the numpy arrays in the client
  (`da.from_array`, chunks 1024) to the result gathered back (`.compute()`).
- dask cold: the same, with starting and closing the LocalCluster counted.
- tra warm: `tra cluster up --processes 2` beforehand (not counted), then
  `tra run matmul.json --hosts DIR/hosts.txt --input X=x.npy --input Y=y.npy
  --output Z=z.npy --dense`, timed as a whole (the tra command starting,
  optimizing, each warm job process reading its own blocks from the .npy files,
  the timely dataflow, every process writing its blocks of the dense result).
- tra cold: `tra run … --processes 2`, which also starts the 2 job processes.
- wire: a 2-process shuffle on loopback (a 8192 x 8192 float32 relation of
  256 x 256 blocks, shuffled on its row key, on the warm cluster): the bytes
  that cross between the processes over the time from the first block sent to
  the last one received (the `wire` figures of tra's summary), next to
  iperf3's single-stream TCP throughput on loopback (`iperf3 -c 127.0.0.1`).
  Two ways, interleaved:
  - in memory (the wire figure, `tra_GBps`): the shuffled relation is not
    written to a file; each process keeps the blocks it receives and, once
    the shuffle is complete (after the window), sends them to process 0,
    which sums them (the output's checksum in tra's summary): all 1024
    blocks, and numpy's sum and sum of magnitudes of the whole matrix. The
    window still holds each process reading its blocks from the .npy file
    and serializing them (iperf3 sends from memory);
  - written (`tra_written_GBps`): the same shuffle with its output written
    into a .npy file (`--output S=… --layout S=relation`), checked on an
    element. Each process then also copies the 128 MiB it holds into the
    page cache, on the same 2 cores, in the window.

Every system runs `--reps` times (default 3), interleaved; the median is
reported, and the results are checked against numpy's.

    python3 bench/cluster/dask_compare.py [--tra target/release/tra] [--reps 3] [--n 4096] [--block 1024]
    python3 bench/cluster/dask_compare.py --only wire [--reps 5]    # the wire figures alone (no dask needed)
    python3 bench/cluster/dask_compare.py --only gemm [--reps 9]    # tra warm, OpenBLAS against the built-in GEMM

The GEMM of tra's job processes is the system OpenBLAS when installed, else the
built-in one (`TRA_GEMM=builtin` in the environment of this script forces it);
the summary reports it (`tra_gemm`).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tra", default=os.path.join(os.path.dirname(__file__), "../../target/release/tra"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--block", type=int, default=1024)
    ap.add_argument("--json", help="write the figures here too")
    ap.add_argument("--only", choices=["wire", "gemm"],
                    help="measure only this (wire: a shuffle on a warm cluster vs iperf3; gemm: tra warm with "
                         "OpenBLAS against tra warm with the built-in GEMM)")
    args = ap.parse_args()
    if args.only == "wire":
        return wire_only(args)
    if args.only == "gemm":
        return gemm_only(args)
    n, b = args.n, args.block
    cores = os.cpu_count() or 1

    import dask
    import dask.array as da
    from dask.distributed import Client, LocalCluster

    tmp = tempfile.mkdtemp(prefix="tra-dask-")
    X, Y, xp, yp, zp, pp = write_matmul(tmp, n, b)

    cdir = os.path.join(tmp, "cluster")
    up = subprocess.run([args.tra, "cluster", "up", "--processes", "2", "--dir", cdir, "--data-dir", tmp],
                        check=True, capture_output=True, text=True)
    hosts = json.loads(up.stdout)["hosts"]
    times = {"numpy": [], "dask_warm": [], "dask_cold": [], "tra_warm": [], "tra_cold": []}
    ref = None
    summary = None
    scale = None

    def tra(mode):
        where = ["--hosts", hosts] if mode == "warm" else ["--processes", "2"]
        t = time.perf_counter()
        out = subprocess.run(
            [args.tra, "run", "--format", "json", pp, *where, "--input", f"X={xp}", "--input", f"Y={yp}", "--output", f"Z={zp}", "--dense"],
            check=True, capture_output=True, text=True,
        )
        dt = time.perf_counter() - t
        err = float(np.abs(np.load(zp) - ref).max())
        assert err < 1e-4 * scale, f"tra {mode}: results differ from numpy's ({err})"
        os.remove(zp)
        return dt, json.loads(out.stdout)

    def dask_run(client_cluster=None):
        t = time.perf_counter()
        own = client_cluster is None
        if own:
            c = LocalCluster(n_workers=2, threads_per_worker=max(1, cores // 2), processes=True, dashboard_address=None)
            cl = Client(c)
        dx = da.from_array(X, chunks=(b, b))
        dy = da.from_array(Y, chunks=(b, b))
        Zd = (dx @ dy).compute()
        if own:
            cl.close()
            c.close()
        dt = time.perf_counter() - t
        err = float(np.abs(Zd - ref).max())
        assert err < 1e-4 * scale, f"dask: results differ from numpy's ({err})"
        return dt

    cluster = LocalCluster(n_workers=2, threads_per_worker=max(1, cores // 2), processes=True, dashboard_address=None)
    client = Client(cluster)
    try:
        for rep in range(args.reps):
            t = time.perf_counter()
            Z = X @ Y
            times["numpy"].append(time.perf_counter() - t)
            ref = Z
            scale = float(np.abs(ref).max())
            times["dask_warm"].append(dask_run(client))
            dt, summary = tra("warm")
            times["tra_warm"].append(dt)
            dt, _ = tra("cold")
            times["tra_cold"].append(dt)
            print(f"rep {rep}: numpy {times['numpy'][-1]:.3f} s, dask warm {times['dask_warm'][-1]:.3f} s, "
                  f"tra warm {times['tra_warm'][-1]:.3f} s, tra cold {times['tra_cold'][-1]:.3f} s", flush=True)
    finally:
        client.close()
        cluster.close()
    for rep in range(args.reps):
        times["dask_cold"].append(dask_run())
        print(f"rep {rep}: dask cold {times['dask_cold'][-1]:.3f} s", flush=True)

    wire = wire_bench(args, tmp, hosts)
    subprocess.run([args.tra, "cluster", "down", "--dir", cdir], capture_output=True)
    shutil.rmtree(tmp, ignore_errors=True)

    med = {k2: statistics.median(v) for k2, v in times.items()}
    result = {
        "n": n, "block": b, "cores": cores, "reps": args.reps,
        "median_s": med,
        "warm_speedup_over_dask": med["dask_warm"] / med["tra_warm"],
        "warm_over_numpy": med["tra_warm"] / med["numpy"],
        "cold_speedup_over_dask": med["dask_cold"] / med["tra_cold"],
        "dask_warm_over_numpy": med["dask_warm"] / med["numpy"],
        "tra_plan": summary and summary.get("strategy"),
        "tra_gemm": summary and summary.get("gemm"),
        "tra_warm_timings_ms": summary and summary.get("timings_ms"),
        "tra_network_floats": summary and [summary.get("network_floats_measured"), summary.get("network_floats_predicted")],
        "wire": wire,
        "versions": {"numpy": np.__version__, "dask": dask.__version__},
    }
    print(json.dumps(result, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    goals = [
        ("warm: tra >= 3x faster than dask.distributed", result["warm_speedup_over_dask"] >= 3.0,
         f"{result['warm_speedup_over_dask']:.2f}x"),
        ("warm: tra <= 1.3x numpy's in-memory time", result["warm_over_numpy"] <= 1.3, f"{result['warm_over_numpy']:.2f}x"),
        ("cold: tra >= 2.5x faster than dask.distributed", result["cold_speedup_over_dask"] >= 2.5,
         f"{result['cold_speedup_over_dask']:.2f}x"),
        ("wire: >= 1 GB/s", wire["tra_GBps"] >= 1.0, f"{wire['tra_GBps']:.2f} GB/s"),
        ("wire: >= 40% of iperf3", wire["fraction_of_iperf3"] >= 0.4, f"{100 * wire['fraction_of_iperf3']:.0f}%"),
    ]
    for name, met, value in goals:
        print(f"{name}: {value} — {'met' if met else 'NOT met'}")
    print(f"wire with the output written to a file (no goal): {wire['tra_written_GBps']:.2f} GB/s, "
          f"{100 * wire['written_fraction_of_iperf3']:.0f}% of iperf3")
    return 0 if all(m for _, m, _ in goals) else 1


def wire_bench(args, tmp, hosts, n=8192, block=256):
    """A 2-process shuffle on the warm cluster vs iperf3 on loopback."""
    k = n // block
    w = np.random.default_rng(1).standard_normal((n, n), dtype=np.float32)
    wp, op = os.path.join(tmp, "w.npy"), os.path.join(tmp, "w-out.npy")
    np.save(wp, w)
    prog = {"inputs": {"X": {"key_bounds": [k, k], "array_bounds": [block, block]}},
            "nodes": {"S": {"op": "transform", "input": "X", "kernel": "relu"}}, "outputs": ["S"]}
    pp = os.path.join(tmp, "wire.json")
    with open(pp, "w") as f:
        json.dump(prog, f)
    plan = json.loads(subprocess.run([args.tra, "compile", pp], check=True, capture_output=True, text=True).stdout)
    plan["nodes"] = {"S": {"op": "shuffle", "input": "X", "dims": [0]}}
    plan["outputs"] = ["S"]
    planp = os.path.join(tmp, "wire-plan.json")
    with open(planp, "w") as f:
        json.dump(plan, f)
    want = (float(np.sum(w, dtype=np.float64)), float(np.sum(np.abs(w), dtype=np.float64)))
    rates, written, figures = [], [], None
    for _ in range(args.reps):
        # In memory: no output file; process 0 collects the shuffled blocks and sums them.
        out = subprocess.run([args.tra, "run", "--format", "json", pp, "--plan", planp, "--hosts", hosts, "--input", f"X={wp}"],
                             check=True, capture_output=True, text=True)
        summary = json.loads(out.stdout)
        figures = summary["wire"]["S"]
        rates.append(figures["bytes"] / (figures["ms"] / 1e3) / 1e9)
        got = summary["outputs"]["S"]
        assert got["tuples"] == k * k, f"the shuffle delivered {got['tuples']} of {k * k} blocks"
        s, a = got["checksum"]["sum"], got["checksum"]["abs_sum"]
        assert abs(a - want[1]) <= 1e-9 * want[1] and abs(s - want[0]) <= 1e-9 * want[1], \
            f"the shuffled blocks sum to {s} (magnitudes {a}), numpy's matrix to {want[0]} ({want[1]})"
        # Written: the same shuffle, its output written into a .npy file.
        out = subprocess.run([args.tra, "run", "--format", "json", pp, "--plan", planp, "--hosts", hosts, "--input", f"X={wp}",
                              "--output", f"S={op}", "--layout", "S=relation"], check=True, capture_output=True, text=True)
        wf = json.loads(out.stdout)["wire"]["S"]
        written.append(wf["bytes"] / (wf["ms"] / 1e3) / 1e9)
        got = np.load(op, mmap_mode="r")
        assert got.shape == (k, k, block, block) and float(got[1, 2, 3, 4]) == float(w[block + 3, 2 * block + 4])
        del got
        os.remove(op)
    port = 15201
    server = subprocess.Popen(["iperf3", "-s", "-1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    try:
        ip = json.loads(subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", "3", "-J"],
                                       check=True, capture_output=True, text=True).stdout)
    finally:
        server.wait(timeout=10)
    iperf = ip["end"]["sum_received"]["bits_per_second"] / 8 / 1e9
    tra_rate = statistics.median(rates)
    return {"tra_GBps": tra_rate, "tra_runs_GBps": rates, "bytes_crossed": figures["bytes"], "iperf3_GBps": iperf,
            "fraction_of_iperf3": tra_rate / iperf,
            "tra_written_GBps": statistics.median(written), "tra_written_runs_GBps": written,
            "written_fraction_of_iperf3": statistics.median(written) / iperf}


def write_matmul(tmp, n, b):
    """X and Y (n x n float32) as .npy files in tmp, and the TRA program of X @ Y in b x b blocks."""
    k = n // b
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, n), dtype=np.float32)
    Y = rng.standard_normal((n, n), dtype=np.float32)
    xp, yp, zp = (os.path.join(tmp, f) for f in ("x.npy", "y.npy", "z.npy"))
    np.save(xp, X)
    np.save(yp, Y)
    prog = {
        "inputs": {"X": {"key_bounds": [k, k], "array_bounds": [b, b]}, "Y": {"key_bounds": [k, k], "array_bounds": [b, b]}},
        "nodes": {
            "XY": {"op": "join", "left": "X", "right": "Y", "left_keys": [1], "right_keys": [0], "kernel": "matMul"},
            "Z": {"op": "aggregate", "input": "XY", "group_by": [0, 2], "kernel": "matAdd"},
        },
        "outputs": ["Z"],
    }
    pp = os.path.join(tmp, "matmul.json")
    with open(pp, "w") as f:
        json.dump(prog, f)
    return X, Y, xp, yp, zp, pp


def gemm_only(args):
    """tra warm with each GEMM: two warm clusters of 2 processes, one started with
    TRA_GEMM=openblas and one with TRA_GEMM=builtin, their runs interleaved."""
    tmp = tempfile.mkdtemp(prefix="tra-gemm-")
    X, Y, xp, yp, zp, pp = write_matmul(tmp, args.n, args.block)
    ref = X @ Y
    hosts, times, gemm = {}, {"openblas": [], "builtin": []}, {}
    try:
        for g in times:
            up = subprocess.run([args.tra, "cluster", "up", "--processes", "2", "--dir", os.path.join(tmp, g), "--data-dir", tmp],
                                env=dict(os.environ, TRA_GEMM=g), capture_output=True, text=True)
            if up.returncode != 0:
                print(f"cannot start a cluster with TRA_GEMM={g}: {up.stderr.strip()}", file=sys.stderr)
                return 1
            hosts[g] = json.loads(up.stdout)["hosts"]
        for rep in range(max(args.reps, 5)):
            for g in times:
                t = time.perf_counter()
                out = subprocess.run([args.tra, "run", "--format", "json", pp, "--hosts", hosts[g], "--input", f"X={xp}",
                                      "--input", f"Y={yp}", "--output", f"Z={zp}", "--dense"], check=True, capture_output=True, text=True)
                times[g].append(time.perf_counter() - t)
                gemm[g] = json.loads(out.stdout)["gemm"]
                err = float(np.abs(np.load(zp) - ref).max())
                assert err < 1e-4 * float(np.abs(ref).max()), f"tra warm ({g}): results differ from numpy's ({err})"
            print(f"rep {rep}: tra warm openblas {times['openblas'][-1]:.3f} s, builtin {times['builtin'][-1]:.3f} s", flush=True)
    finally:
        for g in hosts:
            subprocess.run([args.tra, "cluster", "down", "--dir", os.path.join(tmp, g)], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    med = {g: statistics.median(v) for g, v in times.items()}
    result = {"n": args.n, "block": args.block, "tra_warm_median_s": med, "gemm": gemm,
              "builtin_over_openblas": med["builtin"] / med["openblas"]}
    print(json.dumps(result, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


def wire_only(args):
    """The wire figures alone, on a warm cluster of 2 processes started for them."""
    tmp = tempfile.mkdtemp(prefix="tra-wire-")
    cdir = os.path.join(tmp, "cluster")
    try:
        up = subprocess.run([args.tra, "cluster", "up", "--processes", "2", "--dir", cdir, "--data-dir", tmp],
                            check=True, capture_output=True, text=True)
        try:
            wire = wire_bench(args, tmp, json.loads(up.stdout)["hosts"])
        finally:
            subprocess.run([args.tra, "cluster", "down", "--dir", cdir], capture_output=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps({"wire": wire}, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"wire": wire}, f, indent=2)
    goals = [("wire: >= 1 GB/s", wire["tra_GBps"] >= 1.0, f"{wire['tra_GBps']:.2f} GB/s"),
             ("wire: >= 40% of iperf3", wire["fraction_of_iperf3"] >= 0.4, f"{100 * wire['fraction_of_iperf3']:.0f}%")]
    for name, met, value in goals:
        print(f"{name}: {value} — {'met' if met else 'NOT met'}")
    print(f"wire with the output written to a file (no goal): {wire['tra_written_GBps']:.2f} GB/s, "
          f"{100 * wire['written_fraction_of_iperf3']:.0f}% of iperf3")
    return 0 if all(m for _, m, _ in goals) else 1


if __name__ == "__main__":
    sys.exit(main())
