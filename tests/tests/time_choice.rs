//! How the time model chooses among plans it cannot tell apart (predicted
//! within `TIME_RESOLUTION` of the fastest): the one whose kernels move the
//! fewest bytes through memory. The case that measured it: thin matrices
//! on 2 processes over loopback, where exchanging a join's products before
//! summing them is predicted 4% faster than the fused matmul and ran 1.40×
//! slower (`bench/README.md`).

use tra_optimizer::optimize::{optimize, Limits, Scorer, TIME_RESOLUTION};
use tra_optimizer::time::Profile;
use tra_optimizer::{Plan, Program};

/// The profile `tra calibrate --processes 2` measured over loopback.
const PROFILE: &str = r#"{"link_bytes_per_second": 5.09e8, "site_flops_per_second": 5.61e10,
    "memory_bytes_per_second": 2.50e10, "latency_seconds": 0.00624, "exchange_cpu_bytes_per_second": 4.84e8}"#;

const INPUTS: &str = r#"{"X": {"key_bounds": [64, 4], "array_bounds": [256, 256]},
                         "Y": {"key_bounds": [4, 1], "array_bounds": [256, 256]}}"#;

/// `X` shuffled by row, `Y` broadcast: each site sums its products inside
/// the GEMMs.
const FUSED: &str = r#"{"n0": {"op": "broadcast", "input": "Y"},
    "n1": {"op": "shuffle", "input": "X", "dims": [0]},
    "n2": {"op": "local_join", "left": "n1", "right": "n0", "left_keys": [1], "right_keys": [0], "kernel": "matMul"},
    "Z": {"op": "local_aggregate", "input": "n2", "group_by": [0, 2], "kernel": "matAdd"}}"#;

/// `Y` broadcast, `X` left where it is: the products are written out,
/// shuffled by row, and summed there.
const UNFUSED: &str = r#"{"n0": {"op": "broadcast", "input": "Y"},
    "n1": {"op": "local_join", "left": "X", "right": "n0", "left_keys": [1], "right_keys": [0], "kernel": "matMul"},
    "n2": {"op": "shuffle", "input": "n1", "dims": [0]},
    "Z": {"op": "local_aggregate", "input": "n2", "group_by": [0, 2], "kernel": "matAdd"}}"#;

fn plan(nodes: &str) -> Plan {
    Plan::from_json(&format!(r#"{{"inputs": {INPUTS}, "nodes": {nodes}, "outputs": ["Z"]}}"#)).unwrap()
}

#[test]
fn the_fused_matmul_is_chosen_over_an_unfused_plan_predicted_a_little_faster() {
    let profile: Profile = serde_json::from_str(PROFILE).unwrap();
    // Predicted: the unfused plan a little faster, within the resolution;
    // the fused one moves fewer bytes through memory.
    let mut scorer = Scorer::new(2, profile);
    let (fused, _, fused_sites) = scorer.score(&plan(FUSED)).unwrap();
    let (unfused, _, unfused_sites) = scorer.score(&plan(UNFUSED)).unwrap();
    assert!(unfused < fused && fused <= unfused * (1.0 + TIME_RESOLUTION), "fused {fused} s, unfused {unfused} s");
    let memory = |sites: &[tra_optimizer::loads::SiteLoad]| sites.iter().map(|s| s.memory_bytes).sum::<u64>();
    assert!(memory(&fused_sites) < memory(&unfused_sites));

    let program = |model: &str| {
        Program::from_json(&format!(
            r#"{{"inputs": {INPUTS},
                "nodes": {{"XY": {{"op": "join", "left": "X", "right": "Y", "left_keys": [1], "right_keys": [0], "kernel": "matMul"}},
                          "Z": {{"op": "aggregate", "input": "XY", "group_by": [0, 2], "kernel": "matAdd"}}}},
                "outputs": ["Z"], "cluster": {{"sites": 2, "cost_model": "{model}", "profile": {PROFILE}}}}}"#
        ))
        .unwrap()
    };
    let rules = tra_rules::all();
    let time = optimize(&program("time"), &rules, &Limits::default()).unwrap();
    assert_eq!(time.plan, plan(FUSED), "{}", time.alternatives[0].label);
    assert_eq!(time.cost.seconds, fused);
    // Every alternative it shows is the one of its strategy it would run.
    assert_eq!(time.alternatives[0].plan, time.plan);
    // The network model: the paper's figures alone, unchanged.
    let network = optimize(&program("network"), &rules, &Limits::default()).unwrap();
    assert_eq!(network.plan, plan(FUSED), "{}", network.alternatives[0].label);
}

/// A broadcast from one site beside the GEMMs it feeds, on a profile with a
/// small exchange latency (`tra calibrate` over loopback: 0.1 ms per
/// exchange, the job's fixed 7.8 ms apart). Extraction prices each e-node on
/// its own, and an exchange's time depends on where its operand's tuples
/// are: priced from the cheapest source in the e-graph (a replicated copy
/// that an earlier broadcast made), every exchange cost its latency alone,
/// and extraction chose plans that replicate both operands, 40% slower by
/// the model's own figures, and a co-partitioned plan that sends every
/// product to one site.
#[test]
fn exchanges_are_priced_from_where_the_plan_takes_their_operand() {
    let profile = r#"{"link_bytes_per_second": 5.22e8, "site_flops_per_second": 5.29e10,
        "memory_bytes_per_second": 2.70e10, "latency_seconds": 0.0001, "job_overhead_seconds": 0.0078,
        "exchange_cpu_bytes_per_second": 5.70e8}"#;
    let program = Program::from_json(&format!(
        r#"{{"inputs": {{"X": {{"key_bounds": [8, 8], "array_bounds": [256, 256], "placement": {{"hash": []}}}},
                        "Y": {{"key_bounds": [8, 4], "array_bounds": [256, 256], "placement": {{"hash": []}}}}}},
            "nodes": {{"XY": {{"op": "join", "left": "X", "right": "Y", "left_keys": [1], "right_keys": [0], "kernel": "matMul"}},
                      "Z": {{"op": "aggregate", "input": "XY", "group_by": [0, 2], "kernel": "matAdd"}}}},
            "outputs": ["Z"], "cluster": {{"sites": 2, "cost_model": "time", "profile": {profile}}}}}"#
    ))
    .unwrap();
    let answer = optimize(&program, &tra_rules::all(), &Limits::default()).unwrap();
    let chosen = answer.plan.to_sexpr();
    assert_eq!(
        chosen, "(local_aggregate [0 2] matAdd (local_join [1] [0] matMul (broadcast X) (shuffle [1] Y)))",
        "{}",
        answer.alternatives[0].label
    );
    for a in &answer.alternatives {
        assert!(a.cost.seconds >= answer.cost.seconds, "{} predicted faster than the chosen plan", a.label);
        assert!(!a.plan.to_sexpr().contains("(shuffle []"), "{} sends everything to one site", a.label);
    }
    // The best co-partitioned plan sums each site's partial products before
    // exchanging them (0.134 s predicted); priced from the cheapest sources,
    // extraction shuffled the products themselves (0.183 s).
    let co = answer.alternatives.iter().find(|a| a.label.starts_with("CMM")).expect("a co-partitioned plan");
    assert!(co.cost.seconds < 1.25 * answer.cost.seconds, "{}: {} s", co.label, co.cost.seconds);
    // The job's fixed time is in every plan's seconds, once.
    let overhead = 0.0078;
    let without: Profile = serde_json::from_str(&profile.replace(r#""job_overhead_seconds": 0.0078,"#, "")).unwrap();
    let (seconds, _, _) = Scorer::new(2, without).score(&answer.plan).unwrap();
    assert!((answer.cost.seconds - seconds - overhead).abs() < 1e-12, "{} vs {seconds}", answer.cost.seconds);
}

/// A dense output costs each site the bytes it writes, however its blocks
/// share the file's pages with other sites' blocks. Measured on two
/// processes over loopback (`bench/cluster/dense_writes.py`): a 4096²
/// `f32` output in 256² blocks written by block columns (each 4 KiB page
/// shared by both sites) took as long as written by block rows, and each
/// site's writing as much processor time; pricing each site every page it
/// writes into, whole, predicted the plan by columns 24% slower and ranked
/// the mirror plans apart where runs could not tell them apart.
#[test]
fn a_dense_output_costs_its_writers_their_bytes_however_they_share_its_pages() {
    let profile: Profile = serde_json::from_str(
        r#"{"link_bytes_per_second": 4.8e8, "site_flops_per_second": 1.31e11, "memory_bytes_per_second": 1.05e10,
            "latency_seconds": 0.0018, "job_overhead_seconds": 0.007, "exchange_cpu_bytes_per_second": 3.9e8,
            "output_bytes_per_second": 1.1e9}"#,
    )
    .unwrap();
    let plan = |nodes: &str| {
        Plan::from_json(&format!(
            r#"{{"inputs": {{"X": {{"key_bounds": [16, 2], "array_bounds": [256, 256]}},
                            "Y": {{"key_bounds": [2, 16], "array_bounds": [256, 256]}}}},
                "nodes": {nodes}, "outputs": ["Z"]}}"#
        ))
        .unwrap()
    };
    // The output by block rows (`X` shuffled by row) and by block columns
    // (`Y` shuffled by column): the same bytes to write, split alike.
    let rows = plan(
        r#"{"n0": {"op": "broadcast", "input": "Y"}, "n1": {"op": "shuffle", "input": "X", "dims": [0]},
            "n2": {"op": "local_join", "left": "n1", "right": "n0", "left_keys": [1], "right_keys": [0], "kernel": "matMul"},
            "Z": {"op": "local_aggregate", "input": "n2", "group_by": [0, 2], "kernel": "matAdd"}}"#,
    );
    let columns = plan(
        r#"{"n0": {"op": "shuffle", "input": "Y", "dims": [1]}, "n1": {"op": "broadcast", "input": "X"},
            "n2": {"op": "local_join", "left": "n1", "right": "n0", "left_keys": [1], "right_keys": [0], "kernel": "matMul"},
            "Z": {"op": "local_aggregate", "input": "n2", "group_by": [0, 2], "kernel": "matAdd"}}"#,
    );
    let mut scorer = Scorer::new(2, profile);
    let (by_rows, _, row_sites) = scorer.score(&rows).unwrap();
    let (by_columns, _, column_sites) = scorer.score(&columns).unwrap();
    let written = |sites: &[tra_optimizer::loads::SiteLoad]| sites.iter().map(|s| s.output_bytes).collect::<Vec<_>>();
    assert_eq!(written(&row_sites), written(&column_sites));
    assert_eq!(written(&row_sites).iter().sum::<u64>(), 4096 * 4096 * 4);
    let (fast, slow) = (by_rows.min(by_columns), by_rows.max(by_columns));
    assert!(slow <= fast * (1.0 + TIME_RESOLUTION), "by rows {by_rows} s, by columns {by_columns} s: told apart");
}
