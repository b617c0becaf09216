//! `tra bench`: optimize time and e-graph size per workload, and how they grow
//! with a chain of matmuls.

use crate::examples;
use std::fmt::Write as _;
use std::time::Instant;
use tra_executor::cluster::machine::{others_busy, MachineWatch};
use tra_optimizer::optimize::{optimize, Limits};
use tra_optimizer::rule::RuleDef;
use tra_optimizer::time::CostModel;
use tra_optimizer::Program;

/// One measured row.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    /// The workload.
    pub name: String,
    /// Median wall time of `optimize`, in milliseconds.
    pub median_ms: f64,
    /// Fastest run, in milliseconds.
    pub min_ms: f64,
    /// E-graph nodes at the end.
    pub egraph_nodes: usize,
    /// E-graph classes at the end.
    pub egraph_classes: usize,
    /// Saturation iterations.
    pub iterations: usize,
    /// Why saturation stopped.
    pub stop_reason: String,
    /// The chosen plan's label.
    pub chosen: String,
    /// Its network floats.
    pub network_floats: u64,
    /// Its flops.
    pub flops: u64,
    /// The share of the machine's processors that other programs or the
    /// hypervisor (steal) took while this workload was measured (`None`:
    /// cannot tell, e.g. in a container allowed fewer processors than its
    /// host has): above [`DISTURBED`], its times are likely slow.
    pub others_busy: Option<f64>,
}

/// The share of the machine others may take while a workload is measured
/// before [`disturbed`] names it.
pub const DISTURBED: f64 = 0.10;

/// A chain `X0 · X1 · … · Xn` of `n` matmuls of 4×4 blocks of 1000×1000 on 10 sites.
pub fn matmul_chain(n: usize) -> Program {
    chain_of(n, |_| 4, 0.0)
}

/// A chain of `n` matmuls whose block grids vary (`Xi` is `g(i) × g(i+1)`
/// blocks of 1000×1000, `g` cycling 1, 8, 2, 16, 4), written left to right,
/// with compute weight 0.001: its best order is not the written one.
pub fn mixed_chain(n: usize) -> Program {
    chain_of(n, |i| [1, 8, 2, 16, 4][i % 5], 0.001)
}

/// A chain of `n` matmuls, matrix `i` a `grid(i) × grid(i+1)` grid of
/// 1000×1000 blocks, written left to right, on 10 sites.
fn chain_of(n: usize, grid: impl Fn(usize) -> u32, compute_weight: f64) -> Program {
    let mut inputs = serde_json::Map::new();
    let mut nodes = serde_json::Map::new();
    for i in 0..=n {
        inputs.insert(
            format!("X{i}"),
            serde_json::json!({"key_bounds": [grid(i), grid(i + 1)], "array_bounds": [1000, 1000]}),
        );
    }
    let mut prev = "X0".to_string();
    for i in 1..=n {
        nodes.insert(
            format!("J{i}"),
            serde_json::json!({"op": "join", "left": prev, "right": format!("X{i}"), "left_keys": [1], "right_keys": [0], "kernel": "matMul"}),
        );
        nodes.insert(
            format!("M{i}"),
            serde_json::json!({"op": "aggregate", "input": format!("J{i}"), "group_by": [0, 2], "kernel": "matAdd"}),
        );
        prev = format!("M{i}");
    }
    let v = serde_json::json!({
        "inputs": inputs, "nodes": nodes, "outputs": [prev],
        "cluster": {"sites": 10, "compute_weight": compute_weight}
    });
    Program::from_value(&v).expect("a well-formed chain")
}

fn measure(name: &str, p: &Program, rules: &[RuleDef], reps: usize) -> Result<Row, String> {
    let mut times = Vec::with_capacity(reps);
    let mut last = None;
    let watch = MachineWatch::start();
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        let a = optimize(p, rules, &Limits::default()).map_err(|e| format!("{name}: {e}"))?;
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        last = Some(a);
    }
    let others_busy = others_busy(&[watch.and_then(|w| w.load())]);
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let a = last.unwrap();
    Ok(Row {
        name: name.to_string(),
        median_ms: times[times.len() / 2],
        min_ms: times[0],
        egraph_nodes: a.stats.egraph_nodes,
        egraph_classes: a.stats.egraph_classes,
        iterations: a.stats.iterations,
        stop_reason: a.stats.stop_reason.clone(),
        chosen: a.alternatives[0].label.clone(),
        network_floats: a.cost.network_floats,
        flops: a.cost.flops,
        others_busy,
    })
}

/// A warning naming the workloads measured while other programs or the
/// hypervisor took more than [`DISTURBED`] of the machine, if any.
pub fn disturbed(rows: &[Row]) -> Option<String> {
    let busy: Vec<String> = rows
        .iter()
        .filter_map(|r| r.others_busy.filter(|&o| o > DISTURBED).map(|o| format!("{} ({:.0}%)", r.name, 100.0 * o)))
        .collect();
    (!busy.is_empty()).then(|| {
        format!(
            "other programs or the hypervisor took more than {:.0}% of this machine's processors while these were \
             measured, so their times are likely slow: {}",
            100.0 * DISTURBED,
            busy.join(", ")
        )
    })
}

/// Whether `--only <only>` selects the workload `name`: its name contains
/// `only`, or is exactly what follows a leading `=` (`=matmul` is the plain
/// matmul alone).
fn selected(name: &str, only: &str) -> bool {
    match only.strip_prefix('=') {
        Some(exact) => name == exact,
        None => name.contains(only),
    }
}

/// Measure every built-in workload, and chains of matmuls of these lengths
/// (square grids, and mixed grids whose best order is not the written one),
/// under `model`.
pub fn run(reps: usize, chains: &[usize], only: Option<&str>, model: CostModel) -> Result<Vec<Row>, String> {
    let rules = tra_rules::all();
    let mut rows = Vec::new();
    let with_model = |mut p: Program| {
        p.cluster = Some(tra_optimizer::Cluster { cost_model: model, ..p.cluster() });
        p
    };
    for e in examples::all() {
        if only.is_some_and(|o| !selected(e.name, o)) {
            continue;
        }
        let p = Program::from_value(&e.program).map_err(|x| format!("{}: {x}", e.name))?;
        rows.push(measure(e.name, &with_model(p), &rules, reps)?);
    }
    // The chains, square then mixed, each with its name.
    type MakeChain = fn(usize) -> Program;
    let chain_rows: Vec<(String, MakeChain, usize)> =
        [("chain", matmul_chain as MakeChain), ("mixed chain", mixed_chain)]
            .into_iter()
            .flat_map(|(kind, make)| chains.iter().map(move |&n| (format!("{kind} of {n} matmuls"), make, n)))
            .collect();
    for (name, make, n) in &chain_rows {
        if only.is_none_or(|o| selected(name, o)) {
            rows.push(measure(name, &with_model(make(*n)), &rules, reps)?);
        }
    }
    if let (Some(o), true) = (only, rows.is_empty()) {
        let names: Vec<&str> =
            examples::all().iter().map(|e| e.name).chain(chain_rows.iter().map(|(name, ..)| name.as_str())).collect();
        return Err(format!("--only {o}: no workload matches (workloads: {})", names.join(", ")));
    }
    Ok(rows)
}

/// The rows as a text table.
pub fn table(rows: &[Row]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<26} {:>10} {:>10} {:>8} {:>8} {:>6} {:<11} {:>15} {:>10}  chosen",
        "workload", "median ms", "min ms", "nodes", "classes", "iters", "stop", "network floats", "flops"
    );
    for r in rows {
        let _ = writeln!(
            s,
            "{:<26} {:>10.2} {:>10.2} {:>8} {:>8} {:>6} {:<11} {:>15} {:>10.3e}  {}",
            r.name,
            r.median_ms,
            r.min_ms,
            r.egraph_nodes,
            r.egraph_classes,
            r.iterations,
            r.stop_reason,
            r.network_floats,
            r.flops as f64,
            r.chosen
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--only` selects by substring, or exactly after `=`; a filter that
    /// selects nothing is an error naming it and the workloads there are.
    #[test]
    fn only_selects_by_name_and_names_a_filter_that_matches_nothing() {
        assert!(selected("matmul-two-large-dims", "matmul"));
        assert!(!selected("matmul-two-large-dims", "=matmul"));
        assert!(selected("matmul", "=matmul"));
        let e = run(1, &[2], Some("=nosuch"), CostModel::Network).unwrap_err();
        assert!(e.contains("--only =nosuch: no workload matches") && e.contains("matmul"), "{e}");
        let rows = run(1, &[2], Some("=softmax"), CostModel::Network).unwrap();
        assert_eq!(rows.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["softmax"]);
        let rows = run(1, &[2, 3], Some("=mixed chain of 3 matmuls"), CostModel::Network).unwrap();
        assert_eq!(rows.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["mixed chain of 3 matmuls"]);
    }

    /// The workloads measured on a machine others kept busy are named, with
    /// the share they took; quiet ones and unknown ones are not.
    #[test]
    fn workloads_measured_beside_a_busy_program_are_named() {
        let mut rows = run(1, &[], Some("=softmax"), CostModel::Network).unwrap();
        rows[0].others_busy = Some(0.02);
        assert_eq!(disturbed(&rows), None);
        let mut other = rows[0].clone();
        other.name = "matmul".into();
        other.others_busy = Some(0.37);
        rows.push(other);
        rows[0].others_busy = None;
        let w = disturbed(&rows).unwrap();
        assert!(w.ends_with("likely slow: matmul (37%)"), "{w}");
    }
}
