//! Benchmarks of the thread executor, printed as one JSON object (run by
//! `bench/run.sh`, which measures the peers — numpy, dask — in the same run
//! and prints the ratios).
//!
//! - `matmul`: `C = A·B` for 4096×4096 `f32` matrices as a TRA program
//!   (blocks of 1024, 2 sites), the optimizer's plan on the thread runtime;
//!   inputs already in blocks, output left in blocks. Cold run, then `reps`
//!   timed runs (steady state: no block allocation). Peak heap (a counting
//!   global allocator) and peak RSS against inputs + output.
//! - `diag`: `diag(X + Y)` (paper §5.2.1) with the Table-1 plan and with the
//!   optimizer's plan (R1-6/R1-7: filter pushed down, `diag∘matAdd` fused).
//! - `gemm`: one single-threaded 1024³ `f32` product, the kernel alone,
//!   through the process's GEMM (`TRA_GEMM`); `gemm_backends`: the built-in
//!   GEMM against OpenBLAS on 256², 512² and 1024² products, one core.
//! - `elementwise`: fused `relu∘matAdd` against the two kernels in sequence.
//!
//! Arguments: `--n N --block B --sites S --reps R --diag-block D --threads T`,
//! `--matmul-only`, `--gemm-only` (`gemm_backends` alone).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::json;
use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tra_executor::threads::kernels::{matmul_into, matmul_with, GemmBackend, GemmRequest, MatMulKind};
use tra_executor::threads::{Elem, RunOptions, TRelation, ThreadRuntime};
use tra_optimizer::check::{check_plan, check_program};
use tra_optimizer::compile::compile;
use tra_optimizer::cost::{plan_report, Weights};
use tra_optimizer::optimize::{optimize, Limits};
use tra_optimizer::{Plan, Program};

struct Counting;
static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            let now = CURRENT.fetch_add(l.size(), Ordering::Relaxed) + l.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(l) };
        if !p.is_null() {
            let now = CURRENT.fetch_add(l.size(), Ordering::Relaxed) + l.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) };
        CURRENT.fetch_sub(l.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            if new >= l.size() {
                let now = CURRENT.fetch_add(new - l.size(), Ordering::Relaxed) + (new - l.size());
                PEAK.fetch_max(now, Ordering::Relaxed);
            } else {
                CURRENT.fetch_sub(l.size() - new, Ordering::Relaxed);
            }
        }
        q
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn peak_rss_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
}

/// CPU time of this process (all threads, user + system), from
/// `/proc/self/stat` (clock ticks of 1/100 s).
fn cpu_seconds() -> f64 {
    let Ok(s) = std::fs::read_to_string("/proc/self/stat") else { return f64::NAN };
    let Some(rest) = s.rsplit(')').next() else { return f64::NAN };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|x| x.parse::<f64>().ok()).unwrap_or(f64::NAN);
    (ticks(11) + ticks(12)) / 100.0
}

/// Minor page faults of this process so far, from `/proc/self/stat`.
fn minor_faults() -> u64 {
    let Ok(s) = std::fs::read_to_string("/proc/self/stat") else { return 0 };
    let Some(rest) = s.rsplit(')').next() else { return 0 };
    rest.split_whitespace().nth(7).and_then(|x| x.parse().ok()).unwrap_or(0)
}

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn random_relation<T: Elem>(rt: &ThreadRuntime<T>, keys: [u32; 2], block: usize, seed: u64) -> TRelation<T> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut tuples = Vec::new();
    for i in 0..keys[0] {
        for j in 0..keys[1] {
            let mut b = rt.pool().take(&[block, block]);
            for x in b.as_mut_slice() {
                *x = T::from_f64(rng.random_range(-1.0..1.0));
            }
            tuples.push((vec![i, j], Arc::new(b)));
        }
    }
    TRelation { tuples }
}

fn program(text: &str) -> Program {
    Program::from_json(text).expect("benchmark program")
}

fn matmul(n: usize, block: usize, sites: usize, reps: usize, threads: usize) -> serde_json::Value {
    let kb = (n / block) as u32;
    let p = program(&format!(
        r#"{{"inputs": {{"A": {{"key_bounds": [{kb}, {kb}], "array_bounds": [{block}, {block}]}},
                       "B": {{"key_bounds": [{kb}, {kb}], "array_bounds": [{block}, {block}]}}}},
            "nodes": {{"AB": {{"op": "join", "left": "A", "right": "B", "left_keys": [1], "right_keys": [0], "kernel": "matMul"}},
                      "C": {{"op": "aggregate", "input": "AB", "group_by": [0, 2], "kernel": "matAdd"}}}},
            "outputs": ["C"], "cluster": {{"sites": {sites}}}}}"#
    ));
    let answer = optimize(&p, &tra_rules::all(), &Limits::default()).expect("optimize");
    // Reset the peak RSS (Linux ≥ 4.0), so that it is this benchmark's.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let rt = ThreadRuntime::<f32>::with_threads(threads);
    let mut inputs = BTreeMap::new();
    inputs.insert("A".to_string(), random_relation(&rt, [kb, kb], block, 1));
    inputs.insert("B".to_string(), random_relation(&rt, [kb, kb], block, 2));
    let in_bytes = 2 * n * n * 4;
    let out_bytes = n * n * 4;
    let before = CURRENT.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let opts = RunOptions::default();
    let t = Instant::now();
    let run = rt.run(&answer.plan, sites, &inputs, &opts).expect("run");
    let cold_ms = t.elapsed().as_secs_f64() * 1e3;
    let peak_heap = PEAK.load(Ordering::Relaxed);
    // Correctness: sampled entries against f64 dot products.
    let c = run.outputs["C"].erase().expect("complete");
    let (a, b) = (&inputs["A"], &inputs["B"]);
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let mut max_rel = 0.0f64;
    for _ in 0..64 {
        let (i, j) = (rng.random_range(0..n), rng.random_range(0..n));
        let mut want = 0.0f64;
        for kk in 0..n {
            let x =
                a.get(&[(i / block) as u32, (kk / block) as u32]).unwrap().as_slice()[(i % block) * block + kk % block];
            let y =
                b.get(&[(kk / block) as u32, (j / block) as u32]).unwrap().as_slice()[(kk % block) * block + j % block];
            want += x as f64 * y as f64;
        }
        let got = c.get(&[(i / block) as u32, (j / block) as u32]).unwrap().as_slice()[(i % block) * block + j % block]
            as f64;
        max_rel = max_rel.max((got - want).abs() / (1.0 + want.abs()));
    }
    // The same products with no runtime at all: one plain thread per core,
    // each summing its share of output blocks (the floor for the plan's time).
    let floor = {
        let blocks: Vec<(u32, u32)> = (0..kb).flat_map(|i| (0..kb).map(move |j| (i, j))).collect();
        let per = blocks.len().div_ceil(threads);
        let mut best = f64::INFINITY;
        for _ in 0..reps.clamp(1, 3) {
            let t = Instant::now();
            std::thread::scope(|sc| {
                for chunk in blocks.chunks(per) {
                    let (a, b) = (&inputs["A"], &inputs["B"]);
                    sc.spawn(move || {
                        let mut c = vec![0.0f32; block * block];
                        let sh = [block, block];
                        let kind = MatMulKind { trans_a: false, trans_b: false };
                        for &(i, j) in chunk {
                            for l in 0..kb {
                                let (x, y) = (a.get(&[i, l]).unwrap(), b.get(&[l, j]).unwrap());
                                matmul_into(kind, &mut c, x.as_slice(), &sh, y.as_slice(), &sh, l > 0);
                            }
                        }
                        std::hint::black_box(&c);
                    });
                }
            });
            best = best.min(t.elapsed().as_secs_f64());
        }
        best
    };
    let measured = run.total_floats_moved();
    let node_ms: Vec<serde_json::Value> =
        run.report.nodes.iter().map(|n| json!({"name": n.name, "op": n.op, "wall_ms": n.wall_ms})).collect();
    drop((c, run));
    let mut times = Vec::new();
    let mut cpu = Vec::new();
    let mut faults = Vec::new();
    let mut fresh = 0;
    for _ in 0..reps {
        let (t, c0, f0) = (Instant::now(), cpu_seconds(), minor_faults());
        let run = rt.run(&answer.plan, sites, &inputs, &opts).expect("run");
        times.push(t.elapsed().as_secs_f64());
        cpu.push(cpu_seconds() - c0);
        faults.push(minor_faults() - f0);
        fresh += run.report.fresh_block_bytes;
    }
    let flops = 2.0 * (n as f64).powi(3);
    let best = times.iter().cloned().fold(f64::INFINITY, f64::min);
    json!({
        "n": n, "block": block, "sites": sites, "threads": rt.threads(), "dtype": "f32",
        "plan": answer.plan.to_sexpr(), "strategy": answer.alternatives[0].label,
        "cold_ms": cold_ms,
        "kernels_only_s": floor,
        "times_s": times, "best_s": best, "median_s": median(times.clone()),
        "cpu_s": cpu.clone(), "best_cpu_s": cpu.iter().cloned().fold(f64::INFINITY, f64::min),
        "minor_page_faults": faults,
        "gflops_best": flops / best / 1e9,
        "max_rel_error_sampled": max_rel,
        "network_floats_measured": measured, "network_floats_predicted": answer.cost.network_floats,
        "floats_match": measured == answer.cost.network_floats,
        "nodes_cold": node_ms,
        "fresh_block_bytes_after_first_run": fresh,
        "input_bytes": in_bytes, "output_bytes": out_bytes,
        "peak_heap_bytes": peak_heap, "heap_before_run_bytes": before,
        "peak_heap_ratio": peak_heap as f64 / (in_bytes + out_bytes) as f64,
        "peak_rss_bytes": peak_rss_bytes(),
    })
}

fn diag(kb: u32, block: usize, sites: usize, reps: usize, threads: usize) -> serde_json::Value {
    let p = program(&format!(
        r#"{{"inputs": {{"X": {{"key_bounds": [{kb}, {kb}], "array_bounds": [{block}, {block}]}},
                       "Y": {{"key_bounds": [{kb}, {kb}], "array_bounds": [{block}, {block}]}}}},
            "nodes": {{"S": {{"op": "join", "left": "X", "right": "Y", "left_keys": [0, 1], "right_keys": [0, 1], "kernel": "matAdd"}},
                      "F": {{"op": "filter", "input": "S", "predicate": "k0 == k1"}},
                      "R": {{"op": "rekey", "input": "F", "key": "[k0]"}},
                      "D": {{"op": "transform", "input": "R", "kernel": "diag"}}}},
            "outputs": ["D"], "cluster": {{"sites": {sites}}}}}"#
    ));
    let typed = check_program(&p).unwrap();
    let table1 = compile(&p, &typed);
    let answer = optimize(&p, &tra_rules::all(), &Limits::default()).expect("optimize");
    let rt = ThreadRuntime::<f64>::with_threads(threads);
    let mut inputs = BTreeMap::new();
    inputs.insert("X".to_string(), random_relation(&rt, [kb, kb], block, 3));
    inputs.insert("Y".to_string(), random_relation(&rt, [kb, kb], block, 4));
    let w = Weights { network: 1.0, compute: 0.0 };
    let one = |label: &str, plan: &Plan| {
        let tp = check_plan(plan, sites).unwrap();
        let rep = plan_report(plan, &tp, sites, w);
        let flops: u64 = rep.values().map(|r| r.flops).sum();
        let predicted: u64 = rep.values().map(|r| r.network_floats).sum();
        let opts = RunOptions::default();
        let cold = rt.run(plan, sites, &inputs, &opts).expect("run");
        let fresh_cold = cold.report.fresh_block_bytes;
        let out = cold.outputs["D"].erase().unwrap().to_relation();
        let measured = cold.total_floats_moved();
        drop(cold);
        let mut times = Vec::new();
        for _ in 0..reps {
            let t = Instant::now();
            let r = rt.run(plan, sites, &inputs, &opts).expect("run");
            times.push(t.elapsed().as_secs_f64());
            drop(r);
        }
        (
            json!({
                "label": label, "plan": plan.to_sexpr(), "flops_predicted": flops,
                "network_floats_predicted": predicted, "network_floats_measured": measured,
                "block_bytes_allocated_cold": fresh_cold,
                "times_s": times.clone(), "median_s": median(times.clone()),
                "best_s": times.iter().cloned().fold(f64::INFINITY, f64::min),
            }),
            out,
        )
    };
    let (t1, out1) = one("Table-1 plan", &table1);
    let (opt, out2) = one("optimized plan (R1-6/R1-7: filter first, diag∘matAdd fused)", &answer.plan);
    let same = tra_executor::reference::compare(&out1, &out2, 1e-12).is_ok();
    json!({"key_bounds": [kb, kb], "block": block, "sites": sites, "dtype": "f64", "table1": t1, "optimized": opt, "same_output": same})
}

fn gemm_kernel(block: usize, reps: usize) -> serde_json::Value {
    let chosen = tra_executor::threads::kernels::gemm_backend().expect("the GEMM TRA_GEMM asks for");
    let mut v = gemm_rate(chosen, block, reps);
    v["backend"] = json!(chosen.describe());
    v
}

/// One single-threaded `block`³ `f32` product through `backend`, accumulating
/// (`C += A·B`, as the fused matmul does): the best of `reps` runs.
fn gemm_rate(backend: &GemmBackend, block: usize, reps: usize) -> serde_json::Value {
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let a: Vec<f32> = (0..block * block).map(|_| rng.random_range(-1.0..1.0)).collect();
    let b: Vec<f32> = (0..block * block).map(|_| rng.random_range(-1.0..1.0)).collect();
    let mut c = vec![0.0f32; block * block];
    let kind = MatMulKind { trans_a: false, trans_b: false };
    let sh = [block, block];
    matmul_with(backend, kind, &mut c, &a, &sh, &b, &sh, false, 1);
    let mut times = Vec::new();
    for _ in 0..reps.max(3) {
        let t = Instant::now();
        matmul_with(backend, kind, &mut c, &a, &sh, &b, &sh, true, 1);
        times.push(t.elapsed().as_secs_f64());
    }
    let best = times.iter().cloned().fold(f64::INFINITY, f64::min);
    json!({"block": block, "dtype": "f32", "threads": 1, "best_s": best, "gflops": 2.0 * (block as f64).powi(3) / best / 1e9})
}

/// The built-in GEMM against OpenBLAS (when it loads) on 256², 512² and
/// `block`² products, one core each, in one run.
fn gemm_backends(block: usize, reps: usize) -> serde_json::Value {
    let builtin = GemmBackend::Builtin;
    let openblas = GemmBackend::select(GemmRequest::OpenBlas);
    let mut sizes = vec![256, 512, block];
    sizes.dedup();
    let rows: Vec<serde_json::Value> = sizes
        .into_iter()
        .map(|b| {
            let r = gemm_rate(&builtin, b, reps);
            let o = openblas.as_ref().ok().map(|o| gemm_rate(o, b, reps));
            let ratio = o.as_ref().map(|o| o["gflops"].as_f64().unwrap() / r["gflops"].as_f64().unwrap());
            json!({"block": b, "builtin_gflops": r["gflops"], "openblas_gflops": o.map(|o| o["gflops"].clone()),
                   "openblas_over_builtin": ratio})
        })
        .collect();
    json!({"openblas": openblas.as_ref().map(|o| o.describe()).unwrap_or_else(|e| e.to_string()),
           "dtype": "f32", "threads": 1, "sizes": rows})
}

/// Fused `relu∘matAdd` against `matAdd` then `relu` (two kernels, a
/// temporary), on one 2048² `f32` block pair, single-threaded.
fn elementwise(reps: usize) -> serde_json::Value {
    use tra_executor::threads::{FastKernel, Pool};
    use tra_optimizer::kernel::KernelRef;
    let n = 2048;
    let pool = Pool::<f32>::new();
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let mut a = pool.take(&[n, n]);
    let mut b = pool.take(&[n, n]);
    for x in a.as_mut_slice().iter_mut().chain(b.as_mut_slice().iter_mut()) {
        *x = rng.random_range(-1.0..1.0);
    }
    let k = |s: &str| FastKernel::new(&KernelRef::parse(s).unwrap());
    let (fused, add, relu) = (k("compose(relu,matAdd)"), k("matAdd"), k("relu"));
    let time = |f: &dyn Fn()| {
        f();
        (0..reps.max(3))
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64()
            })
            .fold(f64::INFINITY, f64::min)
    };
    let t_fused = time(&|| drop(fused.apply1(&pool, &[&a, &b]).unwrap()));
    let t_seq = time(&|| {
        let s = add.apply1(&pool, &[&a, &b]).unwrap();
        drop(relu.apply1(&pool, &[&s]).unwrap());
    });
    let bytes = 3.0 * (n * n * 4) as f64; // read a, b; write out
    json!({"n": n, "dtype": "f32", "fused_s": t_fused, "sequential_s": t_seq,
           "fused_gb_per_s": bytes / t_fused / 1e9, "speedup": t_seq / t_fused})
}

fn main() {
    let n = arg("--n", 4096);
    let block = arg("--block", 1024);
    let sites = arg("--sites", 2);
    let reps = arg("--reps", 5);
    let threads = arg("--threads", std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1));
    let diag_kb = arg("--diag-keys", 8) as u32;
    let diag_block = arg("--diag-block", 512);
    if std::env::args().any(|a| a == "--gemm-only") {
        println!("{}", serde_json::to_string_pretty(&json!({"gemm_backends": gemm_backends(block, reps)})).unwrap());
        return;
    }
    if std::env::args().any(|a| a == "--matmul-only") {
        let m = matmul(n, block, sites, reps, threads);
        println!("{}", serde_json::to_string_pretty(&json!({"matmul": m})).unwrap());
        return;
    }
    let g = gemm_kernel(block, reps);
    let gb = gemm_backends(block, reps);
    let e = elementwise(reps);
    let m = matmul(n, block, sites, reps, threads);
    let d = diag(diag_kb, diag_block, sites, reps, threads);
    println!(
        "{}",
        serde_json::to_string_pretty(
            &json!({"gemm": g, "gemm_backends": gb, "elementwise": e, "matmul": m, "diag": d})
        )
        .unwrap()
    );
}
