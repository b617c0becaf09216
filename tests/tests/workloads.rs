//! The workloads of the paper's evaluation: every one saturates, the chosen
//! plan is the one the paper's evaluation says wins (000 §6, Tables 3, 5, 7,
//! 8), and snapshots of the chosen plans (kept apart from soundness tests).

use tra_optimizer::optimize::{optimize, Limits, OptimizeAnswer};
use tra_optimizer::program::IaOp;
use tra_optimizer::{Plan, Program};

fn example(name: &str) -> Program {
    let path = format!("{}/../examples/{name}.json", env!("CARGO_MANIFEST_DIR"));
    Program::from_json(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn run(name: &str) -> OptimizeAnswer {
    let answer = optimize(&example(name), &tra_rules::all(), &Limits::default()).unwrap();
    assert_eq!(answer.stats.stop_reason, "saturated", "{name}");
    let costs: Vec<f64> = answer.alternatives.iter().map(|a| a.cost.total).collect();
    assert!(costs.windows(2).all(|w| w[0] <= w[1]), "{name}: alternatives sorted by cost: {costs:?}");
    assert_eq!(answer.plan, answer.alternatives[0].plan);
    answer
}

/// Inputs the plan broadcasts, and inputs it shuffles.
fn moved(plan: &Plan) -> (Vec<String>, Vec<String>) {
    let (mut b, mut s) = (vec![], vec![]);
    for op in plan.nodes.values() {
        match op {
            IaOp::Broadcast { input } if plan.inputs.contains_key(input) => b.push(input.clone()),
            IaOp::Shuffle { input, .. } if plan.inputs.contains_key(input) => s.push(input.clone()),
            _ => {}
        }
    }
    (b, s)
}

fn snapshot(name: &str, a: &OptimizeAnswer) {
    let mut text = a.plan.to_sexpr();
    text.push_str(&format!(
        "\n-- network floats {}, flops {}\n-- alternatives:\n",
        a.cost.network_floats, a.cost.flops
    ));
    for alt in &a.alternatives {
        text.push_str(&format!("--   {:>14} {}\n", alt.cost.network_floats, alt.label));
    }
    insta::assert_snapshot!(name, text);
}

#[test]
fn matmul_offers_bmm_cmm_and_rmm() {
    let a = run("matmul");
    for s in ["BMM", "CMM", "RMM"] {
        assert!(
            a.alternatives.iter().any(|x| x.label.contains(s)),
            "matmul: no {s} alternative: {:?}",
            a.alternatives.iter().map(|x| &x.label).collect::<Vec<_>>()
        );
    }
    snapshot("matmul", &a);
}

#[test]
fn common_large_dimension_chooses_cmm() {
    let a = run("matmul-common-large-dim");
    assert!(a.alternatives[0].label.contains("CMM"), "{}", a.alternatives[0].label);
    snapshot("matmul-common-large-dim", &a);
}

#[test]
fn two_large_dimensions_choose_bmm() {
    let a = run("matmul-two-large-dims");
    assert!(a.alternatives[0].label.contains("BMM"), "{}", a.alternatives[0].label);
    snapshot("matmul-two-large-dims", &a);
}

#[test]
fn diag_of_a_sum_pushes_the_filter_down_and_composes_diag_into_the_join() {
    let a = run("diag-x-plus-y");
    for r in ["R1-6", "R1-7"] {
        assert!(a.rules_applied.iter().any(|x| x == r), "{r} not in {:?}", a.rules_applied);
    }
    let plan = &a.plan;
    let joins: Vec<&IaOp> = plan.nodes.values().filter(|o| matches!(o, IaOp::LocalJoin { .. })).collect();
    assert_eq!(joins.len(), 1);
    let IaOp::LocalJoin { left, right, kernel, .. } = joins[0] else { unreachable!() };
    assert_eq!(kernel.to_string(), "compose(diag,matAdd)", "diag composed into the join's kernel");
    // Both operands are filtered before the join (possibly then shuffled):
    // no addition is done on off-diagonal blocks.
    let filtered = |n: &str| {
        let mut n = n.to_string();
        loop {
            match plan.nodes.get(&n) {
                Some(IaOp::LocalFilter { .. }) => return true,
                Some(IaOp::Shuffle { input, .. }) | Some(IaOp::Broadcast { input }) => n = input.clone(),
                _ => return false,
            }
        }
    };
    assert!(filtered(left) && filtered(right), "{}", plan.to_sexpr());
    assert!(!plan.nodes.values().any(|o| matches!(o, IaOp::LocalFilter { input, .. } if plan.nodes.get(input).is_some_and(|j| matches!(j, IaOp::LocalJoin { .. })))));
    snapshot("diag-x-plus-y", &a);
}

/// diag(A·B) replicates A along j and B along i, keeps the diagonal and
/// shuffles both by i: the 3D strategy (no partial sums are exchanged), even
/// though a filter sits between the replication and the shuffle.
#[test]
fn diag_of_a_product_is_labelled_as_the_3d_strategy_it_is() {
    let a = optimize(&tra_tests::program(tra_tests::DIAG_OF_PRODUCT), &tra_rules::all(), &Limits::default()).unwrap();
    let best = &a.alternatives[0].label;
    assert!(best.starts_with("RMM (3D)") && best.contains("filter"), "{best}");
    assert!(
        a.alternatives.iter().filter(|x| x.label.starts_with("CMM")).all(|x| !x.label.contains("replicate")),
        "{:?}",
        a.alternatives.iter().map(|x| &x.label).collect::<Vec<_>>()
    );
}

#[test]
fn ffnn_google_speech_is_data_parallel() {
    let a = run("ffnn-google-speech");
    let (b, s) = moved(&a.plan);
    assert!(b.contains(&"W1".to_string()) && b.contains(&"W2".to_string()), "weights broadcast: {b:?}");
    assert!(!b.contains(&"X".to_string()) && !s.contains(&"X".to_string()), "the data stays where it is: {b:?} {s:?}");
    snapshot("ffnn-google-speech", &a);
}

#[test]
fn ffnn_amazoncat_is_model_parallel() {
    let a = run("ffnn-amazoncat");
    let (b, s) = moved(&a.plan);
    assert!(!b.contains(&"W1".to_string()) && !b.contains(&"W2".to_string()), "weights are not broadcast: {b:?}");
    assert!(s.contains(&"W1".to_string()), "W1 is partitioned: {s:?}");
    snapshot("ffnn-amazoncat", &a);
}

#[test]
fn nn_search_wide_partitions_the_features() {
    // Opt4Horizontal-like: the feature dimension is partitioned, the metric A
    // is shuffled by rows rather than broadcast.
    let a = run("nn-search-wide");
    let (b, _) = moved(&a.plan);
    assert!(!b.contains(&"A".to_string()), "A not broadcast: {b:?}\n{}", a.plan.to_sexpr());
    snapshot("nn-search-wide", &a);
}

#[test]
fn nn_search_many_points_partitions_the_points() {
    // Opt4Vertical-like: the points are partitioned by row, A broadcast.
    let a = run("nn-search-many-points");
    let (b, _) = moved(&a.plan);
    assert!(b.contains(&"A".to_string()), "A broadcast: {b:?}\n{}", a.plan.to_sexpr());
    snapshot("nn-search-many-points", &a);
}

#[test]
fn the_choice_flips_with_the_cluster_size() {
    // A matmul of two general matrices: with one site nothing moves; the
    // choice is made by the model at every size, never an error.
    let mut p = example("matmul");
    for sites in [1, 2, 5, 10, 15] {
        p.cluster = Some(tra_optimizer::Cluster { sites, ..p.cluster() });
        let a = optimize(&p, &tra_rules::all(), &Limits::default()).unwrap();
        assert_eq!(a.stats.stop_reason, "saturated");
        if sites == 1 {
            assert_eq!(a.cost.network_floats, 0, "one site: nothing moves");
        }
    }
}

#[test]
fn softmax_over_row_partitioned_rows_moves_nothing() {
    let a = run("softmax");
    assert_eq!(a.cost.network_floats, 0, "{}", a.alternatives[0].label);
    snapshot("softmax", &a);
}

#[test]
fn layernorm_broadcasts_only_gain_and_bias() {
    let a = run("layernorm");
    let (b, s) = moved(&a.plan);
    assert!(!b.contains(&"X".to_string()) && !s.contains(&"X".to_string()), "X stays: {b:?} {s:?}");
    snapshot("layernorm", &a);
}

#[test]
fn logreg_step_keeps_the_tall_data_in_place() {
    let a = run("logreg-step");
    let (b, s) = moved(&a.plan);
    assert!(!b.contains(&"X".to_string()) && !s.contains(&"X".to_string()), "X stays: {b:?} {s:?}");
    // Far less than one copy of X (2^30 floats) moves.
    assert!(a.cost.network_floats < 1 << 20, "{}", a.cost.network_floats);
    snapshot("logreg-step", &a);
}

#[test]
fn attention_head_does_not_ship_the_score_matrix() {
    let a = run("attention-head");
    // The n×n scores are 4096² floats; the chosen plan moves less than that
    // in total, so no plan step ships them.
    assert!(a.cost.network_floats < 4096 * 4096, "{}: {}", a.alternatives[0].label, a.cost.network_floats);
    snapshot("attention-head", &a);
}

/// Inputs and nodes that no output reads are not explored: the e-graph of
/// the matmul example with a thousand unused inputs and an unused product
/// is the example's own, and so is its plan (which still declares every
/// input of the request).
#[test]
fn what_no_output_reads_is_not_explored() {
    let plain = example("matmul");
    let mut padded = plain.clone();
    for i in 0..1000 {
        padded.inputs.insert(format!("unused{i}"), plain.inputs["X"].clone());
    }
    let unused = serde_json::json!({"op": "join", "left": "Y", "right": "X", "left_keys": [1], "right_keys": [0], "kernel": "matMul"});
    padded.nodes.insert("YX".into(), serde_json::from_value(unused).unwrap());
    let a = optimize(&plain, &tra_rules::all(), &Limits::default()).unwrap();
    let b = optimize(&padded, &tra_rules::all(), &Limits::default()).unwrap();
    assert_eq!((b.stats.egraph_nodes, b.stats.egraph_classes), (a.stats.egraph_nodes, a.stats.egraph_classes));
    assert_eq!(b.plan.nodes, a.plan.nodes);
    assert_eq!(b.plan.inputs.len(), 1002, "the plan declares the request's inputs");
}
