"""Runs every alternative plan of a suite of shapes on the cluster runtime,
under both cost models, and compares the predicted seconds with the measured
ones.

Two settings: `--processes N` job processes on this machine over loopback
(compute-bound), or the `tra worker`s of `--hosts FILE` (for example the
shaped network of `bench/cluster/netbench.sh --every-alternative`; then
`--work DIR` must be a directory inside the workers' --data-dir).

For each shape and each cost model (`network`, `time`): `tra optimize
--format json --cost-model M --profile P` gives the alternatives (one per
strategy) with their plans and `cost.seconds`; every distinct plan of either
model is run with `tra run --plan` on the same random float32 inputs, best of
--reps (runs interleaved, so that a disturbance of the machine hits every
plan alike, every other round in the reverse order); the measured time is the dataflow's wall time less input loading
(`timings_ms.run - timings_ms.load`); a run during which other programs took
more than `--max-others` of a machine's processors (`others_busy` in the
summary: the job processes compare the machine's processor time with their
own) is run again, up to three tries, and the count is reported. Every plan's outputs must agree
(checksums within 1e-3 relative). Reported per shape and model: every
alternative's predicted and measured seconds (and the seconds the busiest site spent
writing the outputs' files, `site_write_ms` of the run report), the chosen plan's prediction
over its measured time, the regret (the chosen plan's measured time over the
fastest measured plan of either model), and Kendall's tau between the model's
own ranking figure (`cost.total`: floats for `network`, seconds for `time`)
and the measured times over the pairs the model tells apart (figures more
than 5% apart).

With `--baseline-tra OTHER`, the alternatives are also ranked by another tra
binary's time model (rows `time-baseline`) and every plan either gives is run
too: a change to the model, before and after, on the same measurements.

With `--head-to-head N`, only the plan each model chooses is run, N times
each, and the two are compared per shape: the median over repetitions of
`time`'s seconds over `network`'s in the same repetition, with a 95%
bootstrap interval; `time faster` or `time slower` where the interval leaves
out 1, `tie` where it does not. Best-of-5 regrets tell near-ties apart by
chance (the same two plans measure 10% apart one way, then the other, minutes
later); this says whether one model's choice is slower than the other's
beyond that, which is what making `time` the default rests on.

Run `tra calibrate --processes N > profile.json` (or `--hosts FILE`) first
and pass it with --profile (without it the API's default profile is used).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("--tra", default="target/release/tra")
ap.add_argument("--processes", type=int, default=2)
ap.add_argument("--hosts", default=None, help="run on the tra workers of this host file")
ap.add_argument("--work", default=None, help="directory for inputs and outputs (with --hosts: inside the workers' --data-dir)")
ap.add_argument("--profile", default=None)
ap.add_argument("--reps", type=int, default=3)
ap.add_argument("--block", type=int, default=256)
ap.add_argument("--only", default=None, help="run only the shapes whose name contains this text")
ap.add_argument("--json", default=None, help="also write the rows as JSON to this file")
ap.add_argument("--baseline-tra", default=None,
                help="also rank the alternatives with this other tra binary's time model (rows `time-baseline`), "
                     "on the same measurements: a model change before and after")
ap.add_argument("--max-others", type=float, default=0.10,
                help="run a repetition again (up to 3 tries) when other programs took more than this share of a "
                     "machine's processors during it (`others_busy` in tra run's summary); default 0.10")
ap.add_argument("--baseline-profile", default=None,
                help="the profile the baseline ranks with (default: --profile), e.g. the baseline binary's own "
                     "`tra calibrate`, when the calibration changed too")
ap.add_argument("--head-to-head", type=int, default=None, metavar="N",
                help="run only the plan each model chooses, N times each (interleaved), and compare them: the "
                     "median over runs of time's over network's seconds, paired by repetition, with a 95%% "
                     "bootstrap interval; whether `time` may be the default")
ap.add_argument("--repredict", default=None,
                help="run nothing: rank the alternatives with this binary and profile and set them beside the "
                     "measured times of an earlier --json (matched by shape and alternative label)")
args = ap.parse_args()
if args.head_to_head is not None and (args.head_to_head < 2 or args.repredict):
    ap.error("--head-to-head N runs each chosen plan N ≥ 2 times, and cannot be used with --repredict")
if not 0.0 <= args.max_others <= 1.0:
    ap.error(f"--max-others {args.max_others}: a share of a machine's processors, between 0 and 1")
b = args.block
if args.hosts:
    with open(args.hosts) as f:
        SITES = len([l for l in f if l.strip() and not l.lstrip().startswith("#")])
else:
    SITES = args.processes


def matmul(kx, ky, px=None, py=None):
    x = {"key_bounds": kx, "array_bounds": [b, b]}
    y = {"key_bounds": ky, "array_bounds": [b, b]}
    if px is not None:
        x["placement"] = px
    if py is not None:
        y["placement"] = py
    return {"inputs": {"X": x, "Y": y},
            "nodes": {"XY": {"op": "join", "left": "X", "right": "Y", "left_keys": [1], "right_keys": [0],
                             "kernel": "matMul"},
                      "Z": {"op": "aggregate", "input": "XY", "group_by": [0, 2], "kernel": "matAdd"}},
            "outputs": ["Z"]}


def chain():
    """A·B·C with A 16×4, B 4×16, C 16×2 blocks: (A·B)·C multiplies 1024
    block pairs through a large intermediate, A·(B·C) 256."""
    d = lambda k: {"key_bounds": k, "array_bounds": [b, b]}
    j = lambda l, r: {"op": "join", "left": l, "right": r, "left_keys": [1], "right_keys": [0], "kernel": "matMul"}
    agg = lambda i: {"op": "aggregate", "input": i, "group_by": [0, 2], "kernel": "matAdd"}
    return {"inputs": {"A": d([16, 4]), "B": d([4, 16]), "C": d([16, 2])},
            "nodes": {"AB": j("A", "B"), "ABs": agg("AB"), "ABC": j("ABs", "C"), "Z": agg("ABC")},
            "outputs": ["Z"]}


def ffnn():
    """One SGD step of a two-layer network (forward, backward, update), as
    examples/ffnn-google-speech.json, scaled to this machine: a batch of 4096
    rows in 8 blocks (hashed by row), 1024 features and 1024 hidden units in 4
    blocks of 256, 16 labels."""
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "ffnn-google-speech.json")) as f:
        p = json.load(f)
    p["inputs"] = {"X": {"key_bounds": [8, 4], "array_bounds": [512, 256], "placement": {"hash": [0]}},
                   "Y": {"key_bounds": [8, 1], "array_bounds": [512, 16], "placement": {"hash": [0]}},
                   "W1": {"key_bounds": [4, 4], "array_bounds": [256, 256]},
                   "W2": {"key_bounds": [4, 1], "array_bounds": [256, 16]}}
    p.pop("cluster", None)
    return p


SHAPES = {
    "square 8×8·8×8": matmul([8, 8], [8, 8]),
    "common large dim 2×48·48×2": matmul([2, 48], [48, 2]),
    "two large dims 16×2·2×16": matmul([16, 2], [2, 16]),
    "skewed 2×64·64×2 (hashed)": matmul([2, 64], [64, 2], {"hash": [0]}, {"hash": [1]}),
    "thin 64×4·4×1": matmul([64, 4], [4, 1]),
    "1-block dim 1×8·8×32": matmul([1, 8], [8, 32]),
    "broadcast from one site 8×8·8×4": matmul([8, 8], [8, 4], {"hash": []}, {"hash": []}),
    "diag(X+Y) 16×16": {
        "inputs": {"X": {"key_bounds": [16, 16], "array_bounds": [b, b]},
                   "Y": {"key_bounds": [16, 16], "array_bounds": [b, b]}},
        "nodes": {"S": {"op": "join", "left": "X", "right": "Y", "left_keys": [0, 1], "right_keys": [0, 1],
                        "kernel": "matAdd"},
                  "D": {"op": "filter", "input": "S", "predicate": "k0 == k1"},
                  "Z": {"op": "transform", "input": "D", "kernel": "diag"}},
        "outputs": ["Z"]},
    "FFNN step 4096×1024×1024×16": ffnn(),
    "3-matmul chain 16×4·4×16·16×2": chain(),
}


def sh(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}\n{r.stderr}")
    return r.stdout


def kendall(pred, meas):
    agree = disagree = 0
    for i in range(len(pred)):
        for j in range(i + 1, len(pred)):
            if abs(pred[i] - pred[j]) <= 0.05 * max(pred[i], pred[j]):
                continue
            s = (pred[i] - pred[j]) * (meas[i] - meas[j])
            agree += s > 0
            disagree += s < 0
    n = agree + disagree
    return None if n == 0 else (agree - disagree) / n


def where():
    if args.hosts:
        return ["--hosts", args.hosts]
    return ["--processes", str(args.processes)]


def busiest_writer(rep):
    """Seconds the busiest site spent writing the outputs' files (its
    writing threads' busy time, `site_write_ms`, summed over outputs)."""
    per_site = {}
    for o in rep["outputs"].values():
        for site, ms in enumerate(o.get("site_write_ms") or []):
            per_site[site] = per_site.get(site, 0.0) + ms / 1000.0
    return max(per_site.values(), default=None)


def run_shape(name, prog, d):
    prog = dict(prog)
    prog["cluster"] = {"sites": SITES}
    path = os.path.join(d, "program.json")
    with open(path, "w") as f:
        json.dump(prog, f)
    ins = []
    rng = np.random.default_rng(7)
    for n, decl in prog["inputs"].items():
        a = rng.standard_normal(decl["key_bounds"] + decl["array_bounds"], dtype=np.float32)
        fp = os.path.join(d, f"{n}.npy")
        np.save(fp, a)
        ins += ["--input", f"{n}={fp}"]
    outs = []
    for o in prog["outputs"]:
        outs += ["--output", f"{o}=" + os.path.join(d, f"out-{o}.npy")]
    answers = {}
    plans = {}  # plan JSON -> file
    models = [("network", args.tra, "network"), ("time", args.tra, "time")]
    if args.baseline_tra:
        models.append(("time-baseline", args.baseline_tra, "time"))
    for model, tra, cost_model in models:
        opt = [tra, "optimize", path, "--format", "json", "--cost-model", cost_model]
        profile = args.baseline_profile if model == "time-baseline" and args.baseline_profile else args.profile
        if profile:
            opt += ["--profile", profile]
        answers[model] = json.loads(sh(opt))["alternatives"]
        for a in answers[model][:1] if args.head_to_head else answers[model]:
            key = json.dumps(a["plan"], sort_keys=True)
            if key not in plans:
                fp = os.path.join(d, f"plan-{len(plans)}.json")
                with open(fp, "w") as f:
                    json.dump(a["plan"], f)
                plans[key] = fp
    measured = {k: None for k in plans}
    writes = {k: None for k in plans}  # the busiest site's seconds writing outputs, in the fastest run
    checksums = {}
    disturbed = kept_disturbed = 0
    samples = {k: [] for k in plans}  # every repetition's seconds, in order
    if args.repredict:
        # The same plan (rows that list their plans), else the same model's
        # alternative at the same place with the same label.
        earlier = {}
        for r in PREVIOUS:
            if r["shape"] == name:
                n = len(r["labels"])
                for i, (lab, m, w) in enumerate(zip(r["labels"], r["measured_s"], r.get("writing_s") or [None] * n)):
                    earlier[(r["model"], i, lab)] = (m, w)
                    if r.get("plans"):
                        earlier[json.dumps(r["plans"][i], sort_keys=True)] = (m, w)
        for model, alts in answers.items():
            for i, a in enumerate(alts):
                key = json.dumps(a["plan"], sort_keys=True)
                found = earlier.get(key) or earlier.get((model, i, a["label"]))
                if found is None:
                    print(f"{name}: {model}'s `{a['label']}` was not measured in {args.repredict}; shape skipped",
                          file=sys.stderr)
                    return []
                measured[key], writes[key] = found
    for rep_no in range(0 if args.repredict else args.head_to_head or args.reps):
        # Every other repetition in the reverse order, so that whatever a run
        # leaves behind for the next one (warm caches) favours no plan.
        order = list(plans.items())
        for key, fp in order[::-1] if rep_no % 2 else order:
            for attempt in range(3):
                rep = json.loads(sh([args.tra, "run", path, *ins, *where(), "--plan", fp, "--format", "json", *outs]))
                others = rep.get("others_busy")
                if others is None or others <= args.max_others:
                    break
                disturbed += 1
            else:
                kept_disturbed += 1
            t = rep["timings_ms"]
            s = (t["run"] - t.get("load", 0.0)) / 1000.0
            samples[key].append(s)
            if measured[key] is None or s < measured[key]:
                writes[key] = busiest_writer(rep)
            measured[key] = s if measured[key] is None else min(measured[key], s)
            checksums[key] = [rep["outputs"][o]["checksum"]["sum"] for o in prog["outputs"]]
    ref = next(iter(checksums.values()), [])  # none with --repredict: nothing ran
    scale = [max(abs(v["checksum"]["abs_sum"]), 1.0) for v in rep["outputs"].values()] if checksums else []
    for key, c in checksums.items():
        for x, y, sc in zip(c, ref, scale):
            assert abs(x - y) <= 1e-3 * sc, f"{name}: plans disagree ({x} vs {y})"
    if args.head_to_head:
        return [head_to_head(name, answers, samples, disturbed, kept_disturbed)]
    fastest = min(measured.values())
    rows = []
    for model, alts in answers.items():
        keys = [json.dumps(a["plan"], sort_keys=True) for a in alts]
        pred = [a["cost"]["seconds"] for a in alts]
        rank = [a["cost"]["total"] for a in alts]
        meas = [measured[k] for k in keys]
        rows.append({"shape": name, "model": model, "labels": [a["label"] for a in alts],
                     "predicted_s": pred, "ranked_by": rank, "measured_s": meas,
                     "writing_s": [writes[k] for k in keys], "plans": [a["plan"] for a in alts],
                     "chosen_predicted_over_measured": pred[0] / meas[0],
                     "regret": meas[0] / fastest, "kendall_tau": kendall(rank, meas),
                     "runs_disturbed": disturbed, "disturbed_runs_kept": kept_disturbed})
        r = rows[-1]
        tau = "—" if r["kendall_tau"] is None else f"{r['kendall_tau']:.2f}"
        print(f"{name:34} {model:8} regret {r['regret']:.2f}  pred/meas {r['chosen_predicted_over_measured']:.2f}  "
              f"tau {tau}  ({len(alts)} alternatives, {len(plans)} plans run; {disturbed} runs disturbed and "
              f"run again, {kept_disturbed} kept disturbed)", file=sys.stderr, flush=True)
    return rows


def head_to_head(name, answers, samples, disturbed, kept_disturbed):
    """The two models' chosen plans compared: each one's median seconds, and
    the median over repetitions of time's seconds over network's in the same
    repetition (the plans ran one after the other, so a disturbance of the
    machine hits both), with a 95% bootstrap interval over repetitions. The
    verdict: `time faster` or `time slower` where the interval leaves out 1,
    `tie` where it does not, `same plan` where both chose one."""
    keys = {m: json.dumps(answers[m][0]["plan"], sort_keys=True) for m in ("network", "time")}
    label = {m: answers[m][0]["label"] for m in keys}
    med = {m: float(np.median(samples[k])) for m, k in keys.items()}
    row = {"shape": name, "labels": label, "median_s": med, "runs": len(samples[keys["time"]]),
           "runs_disturbed": disturbed, "disturbed_runs_kept": kept_disturbed}
    if keys["network"] == keys["time"]:
        row.update(ratio=1.0, interval=[1.0, 1.0], verdict="same plan")
    else:
        r = np.array(samples[keys["time"]]) / np.array(samples[keys["network"]])
        rng = np.random.default_rng(11)
        boot = np.median(r[rng.integers(0, len(r), (2000, len(r)))], axis=1)
        lo, hi = (float(x) for x in np.quantile(boot, [0.025, 0.975]))
        verdict = "time faster" if hi < 1.0 else "time slower" if lo > 1.0 else "tie"
        row.update(ratio=float(np.median(r)), interval=[lo, hi], verdict=verdict)
    print(f"{name:34} time/network {row['ratio']:.3f} [{row['interval'][0]:.3f}, {row['interval'][1]:.3f}] "
          f"{row['verdict']}  ({disturbed} runs disturbed and run again, {kept_disturbed} kept disturbed)",
          file=sys.stderr, flush=True)
    return row


PREVIOUS = []
if args.repredict:
    with open(args.repredict) as f:
        PREVIOUS = json.load(f)


def main():
    rows = []
    with tempfile.TemporaryDirectory(dir=args.work) as d:
        for name, prog in SHAPES.items():
            if args.only and args.only not in name:
                continue
            rows += run_shape(name, prog, d)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    if args.head_to_head:
        setting = f"--hosts ({SITES} workers)" if args.hosts else f"--processes {args.processes}"
        print(f"{setting}, blocks {b}, {args.head_to_head} runs of each chosen plan; profile {args.profile or 'default'}\n")
        print("| shape | `network` chooses | `time` chooses | median s, network / time | time ÷ network (95% interval) | verdict |")
        print("|---|---|---|---:|---:|---|")
        for r in rows:
            lo, hi = r["interval"]
            same = r["verdict"] == "same plan"
            print(f"| {r['shape']} | {r['labels']['network'][:50]} | {'the same' if same else r['labels']['time'][:50]} | "
                  f"{r['median_s']['network']:.3f} / {r['median_s']['time']:.3f} | "
                  f"{r['ratio']:.3f} ({lo:.3f}–{hi:.3f}) | {r['verdict']} |")
        return
    setting = f"--hosts ({SITES} workers)" if args.hosts else f"--processes {args.processes}"
    print(f"{setting}, blocks {b}, best of {args.reps}; profile {args.profile or 'default'}")
    shapes = {r["shape"]: r for r in rows}.values()
    print(f"runs run again because other programs took more than {100 * args.max_others:.0f}% of a machine's "
          f"processors: {sum(r['runs_disturbed'] for r in shapes)}; kept after 3 tries: "
          f"{sum(r['disturbed_runs_kept'] for r in shapes)}\n")
    print("| shape | model | alternative | predicted s | measured s | of it writing outputs (busiest site) |")
    print("|---|---|---|---:|---:|---:|")
    for r in rows:
        for i, lab in enumerate(r["labels"]):
            mark = " **(chosen)**" if i == 0 else ""
            w = r["writing_s"][i]
            w = "—" if w is None else f"{w:.3f}"
            print(f"| {r['shape']} | {r['model']} | {lab[:60]}{mark} | {r['predicted_s'][i]:.3f} | "
                  f"{r['measured_s'][i]:.3f} | {w} |")
    print("\n| shape | model | chosen: predicted / measured | regret | Kendall tau |")
    print("|---|---|---:|---:|---:|")
    for r in rows:
        tau = "—" if r["kendall_tau"] is None else f"{r['kendall_tau']:.2f}"
        print(f"| {r['shape']} | {r['model']} | {r['chosen_predicted_over_measured']:.2f} | {r['regret']:.2f} | {tau} |")


main()
