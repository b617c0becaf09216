//! Long chains of tuple-by-tuple maps, as autodiff engines and layer stacks
//! emit them: fused into runs of at most `MAX_FUSED_KERNELS` kernels,
//! optimized within the limits however deep, and computing what the
//! program says.
//!
//! Fusing a chain pairwise (`R1-2`) once built a kernel per bracketing of
//! every segment: a chain of 20 transforms made a million e-nodes and ran
//! for 100 s past a 10 s limit. Lowering rewrites one level of operators
//! per iteration, so a chain deeper than the iteration limit (100) had no
//! plan at all. And egg looks at its limits only between rules, so one
//! round of matches could overshoot the node limit many times over.

use serde_json::{json, Map, Value};
use tra_executor::reference::{eval_ia, AnyLayout};
use tra_optimizer::optimize::{optimize, Limits, OptimizeAnswer};
use tra_optimizer::program::IaOp;
use tra_optimizer::Program;
use tra_rules::compose::MAX_FUSED_KERNELS;

/// `n` transforms in a row over X (3 blocks of 4×4), cycling through
/// kernels that are exact on integers (so fused and unfused agree bit for
/// bit).
fn chain(n: usize) -> Program {
    let kernels = ["relu", "scale(2)", "neg", "scale(0.5)"];
    let mut nodes = Map::new();
    for i in 0..n {
        let input = if i == 0 { "X".to_string() } else { format!("N{}", i - 1) };
        nodes.insert(format!("N{i}"), json!({"op": "transform", "input": input, "kernel": kernels[i % kernels.len()]}));
    }
    let v: Value = json!({
        "inputs": {"X": {"key_bounds": [3], "array_bounds": [4, 4]}},
        "nodes": nodes,
        "outputs": [format!("N{}", n - 1)],
        "cluster": {"sites": 2}
    });
    Program::from_value(&v).expect("the program")
}

/// The kernels of the plan's local maps, each as its number of parts.
fn map_parts(a: &OptimizeAnswer) -> Vec<usize> {
    a.plan
        .nodes
        .values()
        .filter_map(|op| match op {
            IaOp::LocalMap { kernel: Some(k), .. } => Some(k.parts()),
            _ => None,
        })
        .collect()
}

/// The plan's output equals the program's as written, on both executors.
fn computes_the_program(p: &Program, a: &OptimizeAnswer) {
    let out = p.outputs[0].clone();
    let inputs = tra_tests::random_inputs(p, 11);
    let expected = tra_executor::reference::eval_tra(p, &inputs).expect("the program, interpreted")[&out].clone();
    let layout = AnyLayout::Seeded(11);
    for (executor, run) in [
        ("reference", eval_ia(&a.plan, 2, &inputs, layout)),
        ("threads", tra_executor::threads::eval_ia(&a.plan, 2, &inputs, layout)),
    ] {
        let run = run.unwrap_or_else(|e| panic!("{executor}: {e}"));
        let got = run.erased_outputs().unwrap_or_else(|e| panic!("{executor}: {e}"))[&out].clone();
        assert_eq!(got, expected, "{executor}: the fused chain computes something else");
    }
}

#[test]
fn a_chain_of_twenty_maps_is_fused_without_a_kernel_per_bracketing() {
    let p = chain(20);
    let a = optimize(&p, &tra_rules::all(), &Limits::default()).expect("optimized");
    assert_eq!(a.stats.stop_reason, "saturated", "{:?}", a.stats);
    // Every segment once: a few hundred nodes (a kernel per bracketing: a million).
    assert!(a.stats.egraph_nodes < 2_000, "{} e-nodes", a.stats.egraph_nodes);
    let parts = map_parts(&a);
    assert_eq!(parts.iter().sum::<usize>(), 20, "every kernel once: {parts:?}");
    assert!(parts.iter().all(|&n| n <= MAX_FUSED_KERNELS), "runs of at most {MAX_FUSED_KERNELS}: {parts:?}");
    // Fused into the fewest runs: fusings that differ only in where the
    // runs split cost the same floats and flops, and the extraction's last
    // tie-break (operators that do work) prefers fewer passes.
    assert_eq!(parts.len(), 20usize.div_ceil(MAX_FUSED_KERNELS), "fused into the fewest runs: {parts:?}");
    computes_the_program(&p, &a);
}

#[test]
fn a_chain_deeper_than_the_iteration_limit_gets_a_plan() {
    let limits = Limits::default();
    let n = 3 * limits.iterations;
    let p = chain(n);
    let a =
        optimize(&p, &tra_rules::all(), &limits).expect("a plan, though the chain is deeper than the iteration limit");
    assert_eq!(a.stats.stop_reason, "saturated", "{:?}", a.stats);
    let parts = map_parts(&a);
    assert_eq!(parts.iter().sum::<usize>(), n, "every kernel once: {parts:?}");
    assert!(parts.iter().all(|&k| k <= MAX_FUSED_KERNELS), "runs of at most {MAX_FUSED_KERNELS}: {parts:?}");
    assert_eq!(parts.len(), n.div_ceil(MAX_FUSED_KERNELS), "fused into the fewest runs: {parts:?}");
    computes_the_program(&p, &a);
}

#[test]
fn the_node_limit_holds_within_a_round_of_matches() {
    // This chain's graph has about 6,000 nodes when a round of R1-2 starts
    // that adds about 4,000 (applied whole, the graph ends at 10,008).
    let nodes = 6_500;
    let limits = Limits { nodes, ..Limits::default() };
    let a = optimize(&chain(1000), &tra_rules::all(), &limits).expect("a plan within the limit");
    assert_eq!(a.stats.stop_reason, "node_limit", "{:?}", a.stats);
    assert_eq!(a.stats.stop_phase, Some("exploration"), "maps are fused while exploring: {:?}", a.stats);
    // Matches are applied in pieces of 256, a few nodes each.
    assert!(a.stats.egraph_nodes <= nodes + 1_000, "{} e-nodes for a limit of {nodes}", a.stats.egraph_nodes);
}
