//! Contraction order on chains of matrix products, against the classic
//! O(n³) matrix-chain dynamic program at block level.
//!
//! Random chains of 3–8 blocked matrices (random block grids 1–4 and block
//! extents 1–3 per dimension, bracketed at random as written, 1–6 sites)
//! are optimized with every rule under compute-only weights (network weight
//! 0, compute weight 1): the chosen plan's flops must equal the dynamic
//! program's optimum over all bracketings, where multiplying a `p×q` grid of
//! `a×b` blocks by a `q×r` grid of `b×c` blocks costs `p·q·r` block products
//! of `2abc` flops and `p·q·r − p·r` block additions of `ac` (the cost
//! model's count; no distribution does fewer). The chosen plan is then run
//! on both executors (reference interpreter and thread runtime) and its
//! output compared with the dense product of the inputs.
//!
//! `TRA_CHAIN_CASES` sets the number of chains (default 24); `TRA_SOAK=1`
//! makes it ten times larger.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Map, Value};
use tra_executor::reference::{eval_ia, AnyLayout, Relation};
use tra_optimizer::optimize::{optimize, Limits};
use tra_optimizer::Program;

fn cases() -> u64 {
    let soak = if std::env::var_os("TRA_SOAK").is_some() { 10 } else { 1 };
    std::env::var("TRA_CHAIN_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(24) * soak
}

/// A chain of `grid.len() - 1` matrices: matrix `i` is a `grid[i] ×
/// grid[i+1]` grid of `ext[i] × ext[i+1]` blocks.
struct Chain {
    grid: Vec<u64>,
    ext: Vec<u64>,
}

impl Chain {
    /// Flops of the product of matrices `i..=k` by `k+1..=j` (whole grids).
    fn product(&self, i: usize, k: usize, j: usize) -> u64 {
        let (p, q, r) = (self.grid[i], self.grid[k + 1], self.grid[j + 1]);
        let (a, b, c) = (self.ext[i], self.ext[k + 1], self.ext[j + 1]);
        p * q * r * 2 * a * b * c + (p * q * r - p * r) * a * c
    }

    /// The least flops over all bracketings (the matrix-chain recurrence).
    fn optimum(&self) -> u64 {
        let n = self.grid.len() - 1;
        let mut m = vec![vec![0u64; n]; n];
        for len in 2..=n {
            for i in 0..=n - len {
                let j = i + len - 1;
                m[i][j] = (i..j).map(|k| m[i][k] + m[k + 1][j] + self.product(i, k, j)).min().expect("a split");
            }
        }
        m[0][n - 1]
    }
}

/// The program computing the chain bracketed at random, and the flops of
/// the order it is written in.
fn program(chain: &Chain, sites: usize, rng: &mut ChaCha8Rng) -> (Program, u64) {
    let n = chain.grid.len() - 1;
    let mut inputs = Map::new();
    for i in 0..n {
        inputs.insert(
            format!("X{i}"),
            json!({"key_bounds": [chain.grid[i], chain.grid[i + 1]], "array_bounds": [chain.ext[i], chain.ext[i + 1]]}),
        );
    }
    let mut nodes = Map::new();
    let mut parts: Vec<String> = (0..n).map(|i| format!("X{i}")).collect();
    // The matrices each part spans.
    let mut spans: Vec<(usize, usize)> = (0..n).map(|i| (i, i)).collect();
    let mut written = 0;
    let mut count = 0;
    while parts.len() > 1 {
        let at = rng.random_range(0..parts.len() - 1);
        let (l, r) = (parts.remove(at), parts.remove(at));
        let ((i, k), (_, j)) = (spans.remove(at), spans.remove(at));
        written += chain.product(i, k, j);
        spans.insert(at, (i, j));
        let (j, m) = (format!("J{count}"), format!("M{count}"));
        count += 1;
        nodes.insert(
            j.clone(),
            json!({"op": "join", "left": l, "right": r, "left_keys": [1], "right_keys": [0], "kernel": "matMul"}),
        );
        nodes.insert(m.clone(), json!({"op": "aggregate", "input": j, "group_by": [0, 2], "kernel": "matAdd"}));
        parts.insert(at, m);
    }
    let v: Value = json!({
        "inputs": inputs, "nodes": nodes, "outputs": [parts[0]],
        "cluster": {"sites": sites, "network_weight": 0.0, "compute_weight": 1.0}
    });
    (Program::from_value(&v).expect("a well-formed chain"), written)
}

fn dense(r: &Relation) -> ndarray::Array2<f64> {
    r.to_dense().expect("a dense relation").into_dimensionality().expect("a matrix")
}

#[test]
fn chains_take_the_dynamic_programs_order_and_compute_the_product() {
    let mut reordered = 0;
    for seed in 0..cases() {
        let mut rng = ChaCha8Rng::seed_from_u64(0xc4a1 ^ seed);
        let n = rng.random_range(3..=8);
        let chain = Chain {
            grid: (0..=n).map(|_| rng.random_range(1..=4)).collect(),
            ext: (0..=n).map(|_| rng.random_range(1..=3)).collect(),
        };
        let sites = rng.random_range(1..=6);
        let (p, written_flops) = program(&chain, sites, &mut rng);
        let tag = format!("seed {seed}: grid {:?}, blocks {:?}, {sites} sites", chain.grid, chain.ext);
        let answer = optimize(&p, &tra_rules::all(), &Limits::default()).unwrap_or_else(|e| panic!("{tag}: {e}"));
        assert_eq!(answer.stats.stop_reason, "saturated", "{tag}");
        let best = chain.optimum();
        assert_eq!(answer.cost.flops, best, "{tag}: the chosen plan's flops differ from the matrix-chain optimum");
        // The written chain is n inputs and n − 1 joins and aggregations.
        if answer.stats.order_nodes_kept > 3 * n - 2 {
            reordered += 1;
        }

        let inputs = tra_tests::random_inputs(&p, seed);
        let mut expected = dense(&inputs["X0"]);
        for i in 1..n {
            expected = expected.dot(&dense(&inputs[&format!("X{i}")]));
        }
        let out = &p.outputs[0];
        let layout = AnyLayout::Seeded(seed);
        // Where another order wins, the best plan in the written order is
        // an alternative too, with the written order's flops.
        let written_alternative = (written_flops > best).then(|| {
            let alternative = answer.alternatives.iter().find(|a| a.cost.flops == written_flops);
            let a = alternative
                .unwrap_or_else(|| panic!("{tag}: no alternative in the written order ({written_flops} flops)"));
            ("reference, written order", eval_ia(&a.plan, sites, &inputs, layout))
        });
        for (executor, run) in [
            ("reference", eval_ia(&answer.plan, sites, &inputs, layout)),
            ("threads", tra_executor::threads::eval_ia(&answer.plan, sites, &inputs, layout)),
        ]
        .into_iter()
        .chain(written_alternative)
        {
            let run = run.unwrap_or_else(|e| panic!("{tag}, {executor}: {e}"));
            let got = dense(&run.erased_outputs().unwrap_or_else(|e| panic!("{tag}, {executor}: {e}"))[out]);
            assert_eq!(got.shape(), expected.shape(), "{tag}, {executor}");
            // Integer inputs: every product and sum is exact in f64.
            assert_eq!(got, expected, "{tag}, {executor}: the chain's value differs from the dense product");
        }
    }
    assert!(reordered > 0, "no chain kept an order other than the written one");
}

/// `Z = (X·Y)·V`, X 16×1 blocks, Y 1×16, V 16×1, blocks 1000×1000, 4 sites:
/// written left to right it takes 1.02e12 flops; `X·(Y·V)` takes 6.4e10 and
/// moves less data, so it is chosen with compute weight 0.001, and with
/// compute weight 0 too (flops break the tie of network floats); the rules
/// applied name `matmul-assoc`, and the label says the order.
#[test]
fn a_chain_written_badly_is_reordered() {
    for compute_weight in [0.001, 0.0] {
        let input = |k: [u32; 2]| json!({"key_bounds": k, "array_bounds": [1000, 1000]});
        let v = json!({
            "inputs": {"X": input([16, 1]), "Y": input([1, 16]), "V": input([16, 1])},
            "nodes": {
                "XY": {"op": "join", "left": "X", "right": "Y", "left_keys": [1], "right_keys": [0], "kernel": "matMul"},
                "P": {"op": "aggregate", "input": "XY", "group_by": [0, 2], "kernel": "matAdd"},
                "PV": {"op": "join", "left": "P", "right": "V", "left_keys": [1], "right_keys": [0], "kernel": "matMul"},
                "Z": {"op": "aggregate", "input": "PV", "group_by": [0, 2], "kernel": "matAdd"}
            },
            "outputs": ["Z"], "cluster": {"sites": 4, "compute_weight": compute_weight}
        });
        let p = Program::from_value(&v).expect("the chain");
        let a = optimize(&p, &tra_rules::all(), &Limits::default()).expect("optimized");
        let flops = a.cost.flops as f64;
        // Left to right is 1.02e12: only X·(Y·V) is within 5% of 6.4e10.
        assert!((flops - 6.4e10).abs() <= 0.05 * 6.4e10, "compute weight {compute_weight}: {flops:e} flops");
        assert!(a.rules_applied.iter().any(|r| r == "matmul-assoc"), "rules applied: {:?}", a.rules_applied);
        let label = &a.alternatives[0].label;
        assert!(label.ends_with("; order X·(Y·V)"), "compute weight {compute_weight}: label {label}");
        // The written order is shown too, as the best plan in that order.
        let written = a.alternatives.iter().find(|x| x.label.ends_with("; order (X·Y)·V"));
        let written = written.unwrap_or_else(|| panic!("no alternative in the written order: {:?}", a.alternatives));
        assert!((written.cost.flops as f64 - 1.02e12).abs() <= 0.05 * 1.02e12, "{:e} flops", written.cost.flops);
    }
}

/// Eager aggregation on either operand (`agg-eager`): `Σ_j X(i,j) ⊙ y(j)`
/// grouped by the join dim sums `X`'s rows before the products, and
/// `Σ_k X(i,j) ⊙ Y(j,k)` grouped by `(i,j)` sums `Y`'s columns before them.
/// The chosen plan does the fewer flops, names `agg-eager` among the rules
/// applied, and its value is the TRA interpreter's on the program as
/// written, on both executors.
#[test]
fn eager_aggregation_on_either_operand_is_chosen_and_computes_the_sum() {
    let input = |k: &[u32]| json!({"key_bounds": k, "array_bounds": [4, 4]});
    let cases = [
        // left: the products of 6×5 block pairs become 5 after summing X's 6 rows.
        (
            "left",
            json!({"X": input(&[6, 5]), "Y": input(&[5])}),
            json!({"op": "aggregate", "input": "J", "group_by": [1], "kernel": "matAdd"}),
            5u64,
        ),
        // right: 6·5·7 block products become 6·5 after summing Y's 7 columns.
        (
            "right",
            json!({"X": input(&[6, 5]), "Y": input(&[5, 7])}),
            json!({"op": "aggregate", "input": "J", "group_by": [0, 1], "kernel": "matAdd"}),
            30,
        ),
    ];
    for (side, inputs, agg, products) in cases {
        let v = json!({
            "inputs": inputs,
            "nodes": {
                "J": {"op": "join", "left": "X", "right": "Y", "left_keys": [1], "right_keys": [0], "kernel": "elemMul"},
                "Z": agg
            },
            "outputs": ["Z"], "cluster": {"sites": 3}
        });
        let p = Program::from_value(&v).expect("the program");
        let a = optimize(&p, &tra_rules::all(), &Limits::default()).expect("optimized");
        // One elemMul of 4×4 blocks is 16 flops; the sums before them add the rest.
        let product_flops = products * 16;
        let summed = match side {
            "left" => (6 - 1) * 5 * 16,
            _ => 5 * (7 - 1) * 16,
        };
        assert_eq!(a.cost.flops, product_flops + summed, "{side}: {:?}", a.plan);
        assert!(a.rules_applied.iter().any(|r| r == "agg-eager"), "{side}: rules applied {:?}", a.rules_applied);
        // The best plan as written is an alternative too, and the labels
        // tell the two orders apart.
        let labels: Vec<&str> = a.alternatives.iter().map(|x| x.label.as_str()).collect();
        assert!(labels[0].ends_with("; reordered by agg-eager"), "{side}: {labels:?}");
        let written = a.alternatives.iter().find(|x| x.label.ends_with("; written order"));
        let written = written.unwrap_or_else(|| panic!("{side}: no alternative in the written order: {labels:?}"));
        assert_eq!(written.cost.flops, products * 16 * if side == "left" { 6 } else { 7 } + summed_as_written(side));
        assert!(labels.iter().enumerate().all(|(i, l)| !labels[..i].contains(l)), "{side}: a label twice: {labels:?}");
        let inputs = tra_tests::random_inputs(&p, 7);
        let expected = tra_executor::reference::eval_tra(&p, &inputs).expect("the program, interpreted")["Z"].clone();
        let layout = AnyLayout::Seeded(7);
        for (executor, run) in [
            ("reference", eval_ia(&a.plan, 3, &inputs, layout)),
            ("threads", tra_executor::threads::eval_ia(&a.plan, 3, &inputs, layout)),
        ] {
            let run = run.unwrap_or_else(|e| panic!("{side}, {executor}: {e}"));
            let got = run.erased_outputs().unwrap_or_else(|e| panic!("{side}, {executor}: {e}"))["Z"].clone();
            // Integer inputs: every product and sum is exact.
            assert_eq!(got, expected, "{side}, {executor}: the value differs from the program's as written");
        }
        let run = eval_ia(&written.plan, 3, &inputs, layout).unwrap_or_else(|e| panic!("{side}, written order: {e}"));
        let got = run.erased_outputs().unwrap_or_else(|e| panic!("{side}, written order: {e}"))["Z"].clone();
        assert_eq!(got, expected, "{side}: the written-order alternative computes something else");
    }
}

/// The flops of the sums of the eager-aggregation programs as written:
/// every product's block folded into its group.
fn summed_as_written(side: &str) -> u64 {
    match side {
        // 6·5 products of X's rows with y, summed over the 6 rows: 5 groups.
        "left" => (6 * 5 - 5) * 16,
        // 6·5·7 products, summed over Y's 7 columns: 6·5 groups.
        _ => (6 * 5 * 7 - 6 * 5) * 16,
    }
}

/// A node limit met while orders are explored stops that phase, and the
/// answer says so (`stop_phase`): the orders found are pruned before
/// lowering, so the final e-graph is far below the limit, which alone
/// would read as a contradiction.
#[test]
fn a_limit_met_while_ordering_is_reported_with_its_phase() {
    let mut rng = ChaCha8Rng::seed_from_u64(60);
    let chain = Chain { grid: vec![2; 21], ext: vec![2; 21] };
    let (p, _) = program(&chain, 2, &mut rng);
    let nodes = 3_000;
    let a = optimize(&p, &tra_rules::all(), &Limits { nodes, ..Limits::default() }).expect("a plan within the limit");
    assert_eq!(
        (a.stats.stop_reason.as_str(), a.stats.stop_phase),
        ("node_limit", Some("contraction_order")),
        "{:?}",
        a.stats
    );
    assert!(a.stats.order_nodes_explored > a.stats.order_nodes_kept, "{:?}", a.stats);
    // A program that meets no limit has no phase to name.
    let small = Chain { grid: vec![2; 4], ext: vec![2; 4] };
    let a = optimize(&program(&small, 2, &mut rng).0, &tra_rules::all(), &Limits::default()).unwrap();
    assert_eq!((a.stats.stop_reason.as_str(), a.stats.stop_phase), ("saturated", None), "{:?}", a.stats);
}
