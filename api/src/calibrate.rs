//! `tra calibrate`: measure the speeds the time cost model needs, on real
//! timely processes talking over loopback TCP exactly as a cluster's
//! processes do, with the executor's own kernels and exchanges, and print
//! them as the `profile` object of a request.
//!
//! Three runs, each repeated and the best kept (the least disturbed):
//! - **GEMM**: a local join with `matMul` of co-located 512² `f32` blocks,
//!   a few per site. Each site's flops are known exactly
//!   ([`tra_optimizer::loads`]); its rate is those flops over the time the
//!   site spent in the operator, and the profile takes the median site.
//! - **Link**: a shuffle of 64 KiB blocks (16 MiB per site) from a round-robin layout to a
//!   hash layout (all-to-all). The bytes that crossed between processes over
//!   the time from the first sent to the last received, per process, is one
//!   site's link rate.
//! - **Latency**: a shuffle of one float per site: its wall time.
//!
//! With `--processes N` the processes run as threads of this process (one
//! worker each), which is what `tra run --processes N` does on one machine.

use std::collections::BTreeMap;
use std::time::Instant;
use tra_executor::cluster::run_loopback;
use tra_executor::reference::{random_relation, AnyLayout};
use tra_executor::threads::{TRelation, ThreadRuntime};
use tra_optimizer::check::check_plan;
use tra_optimizer::loads::plan_loads;
use tra_optimizer::time::Profile;
use tra_optimizer::Plan;

/// Arguments of `tra calibrate`.
#[derive(clap::Args, Debug, Clone)]
pub struct CalibrateArgs {
    /// Timely processes to measure (each one site), talking over loopback.
    #[arg(long, default_value_t = 2)]
    pub processes: usize,
    /// Repetitions of each measurement (the best is kept).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
}

/// What one calibration found, with the figures behind it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Calibration {
    /// The profile to give requests (`cluster.profile`, `tra serve --profile`).
    pub profile: Profile,
    /// Per-site GEMM rates of the best run, flops per second.
    pub site_flops_per_second: Vec<f64>,
    /// Seconds the whole calibration took.
    pub seconds: f64,
}

fn plan(json: serde_json::Value) -> Result<Plan, String> {
    Plan::from_json(&json.to_string()).map_err(|e| format!("internal error: calibration plan: {e}"))
}

fn inputs(p: &Plan, rt: &ThreadRuntime<f32>) -> BTreeMap<String, TRelation<f32>> {
    p.inputs
        .iter()
        .enumerate()
        .map(|(i, (name, d))| {
            let kb: Vec<u32> = d.key_bounds.iter().map(|&k| k as u32).collect();
            let ab: Vec<usize> = d.array_bounds.iter().map(|&a| a as usize).collect();
            (name.clone(), TRelation::from_relation(&random_relation(&kb, &ab, i as u64 + 1), rt.pool()))
        })
        .collect()
}

/// Measure this machine with `args.processes` processes.
pub fn calibrate(args: &CalibrateArgs) -> Result<Calibration, String> {
    let n = args.processes;
    if !(1..=64).contains(&n) {
        return Err(format!("--processes {n}: between 1 and 64"));
    }
    let reps = args.reps.clamp(1, 20);
    let start = Instant::now();
    let rt = ThreadRuntime::<f32>::with_threads(1);
    let run = |p: &Plan, data: &BTreeMap<String, TRelation<f32>>| {
        run_loopback(p, n, 1, data, AnyLayout::RoundRobin).map_err(|e| format!("calibration run failed: {}", e.message))
    };

    // GEMM.
    let gemm = plan(serde_json::json!({
        "inputs": {"A": {"key_bounds": [3 * n], "array_bounds": [512, 512], "placement": {"hash": [0]}},
                   "B": {"key_bounds": [3 * n], "array_bounds": [512, 512], "placement": {"hash": [0]}}},
        "nodes": {"C": {"op": "local_join", "left": "A", "right": "B", "left_keys": [0], "right_keys": [0],
                        "kernel": "matMul"}},
        "outputs": ["C"]}))?;
    let typed = check_plan(&gemm, n).map_err(|e| format!("internal error: {e}"))?;
    let flops = plan_loads(&gemm, &typed, n, 4).map_err(|e| e.to_string())?["C"].clone();
    let data = inputs(&gemm, &rt);
    let mut best_rates: Vec<f64> = Vec::new();
    for _ in 0..reps {
        let r = run(&gemm, &data)?;
        let stats = r.nodes.iter().find(|s| s.name == "C").ok_or("internal error: no timing for the GEMM")?;
        let rates: Vec<f64> = flops
            .iter()
            .zip(&stats.site_ms)
            .filter(|(l, ms)| l.flops > 0 && **ms > 0.0)
            .map(|(l, ms)| l.flops as f64 / (ms / 1000.0))
            .collect();
        if median(&rates) > median(&best_rates) {
            best_rates = rates;
        }
    }
    let site_flops = median(&best_rates);

    // Link bandwidth.
    let blocks = 256 * n;
    let shuffle = plan(serde_json::json!({
        "inputs": {"X": {"key_bounds": [blocks], "array_bounds": [16384]}},
        "nodes": {"S": {"op": "shuffle", "input": "X", "dims": [0]}},
        "outputs": ["S"]}))?;
    let data = inputs(&shuffle, &rt);
    let mut link: f64 = 0.0;
    for _ in 0..reps {
        let r = run(&shuffle, &data)?;
        if let Some(w) = r.wire.get("S") {
            if w.ms > 0.0 && w.bytes > 0 {
                link = link.max((w.bytes as f64 / n as f64) / (w.ms / 1000.0));
            }
        }
    }

    // Latency of one exchange.
    let tiny = plan(serde_json::json!({
        "inputs": {"X": {"key_bounds": [n], "array_bounds": [1]}},
        "nodes": {"S": {"op": "shuffle", "input": "X", "dims": [0]}},
        "outputs": ["S"]}))?;
    let data = inputs(&tiny, &rt);
    let mut latency = f64::INFINITY;
    for _ in 0..reps.max(3) {
        let r = run(&tiny, &data)?;
        if let Some(s) = r.nodes.iter().find(|s| s.name == "S") {
            latency = latency.min(s.wall_ms / 1000.0);
        }
    }

    let defaults = Profile::default();
    let profile = Profile {
        link_bytes_per_second: if link > 0.0 { link } else { defaults.link_bytes_per_second },
        site_flops_per_second: if site_flops > 0.0 { site_flops } else { defaults.site_flops_per_second },
        latency_seconds: if latency.is_finite() { latency } else { defaults.latency_seconds },
        bytes_per_float: 4,
    };
    Ok(Calibration { profile, site_flops_per_second: best_rates, seconds: start.elapsed().as_secs_f64() })
}

fn median(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}
