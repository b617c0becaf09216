//! The test programs, shared by the test files: one per rule (made so that
//! the rule fires), and larger workloads.

use super::{input, matmul_nodes, program};

pub fn dense(keys: &[u32], blocks: &[u32]) -> String {
    input(keys, blocks, "")
}

pub fn hashed(keys: &[u32], blocks: &[u32], dims: &[usize]) -> String {
    input(keys, blocks, &format!(r#"{{"hash": {dims:?}}}"#))
}

pub const MATMUL_J: &str =
    r#"{"op": "join", "left": "X", "right": "Y", "left_keys": [1], "right_keys": [0], "kernel": "matMul"}"#;
pub const MATMUL: &str = r#"{"op": "aggregate", "input": "j", "group_by": [0, 2], "kernel": "matAdd"}"#;

pub fn matmul(sites: usize) -> String {
    program(
        sites,
        &[("X", dense(&[4, 4], &[8, 8])), ("Y", dense(&[4, 4], &[8, 8]))],
        &[("j", MATMUL_J), ("m", MATMUL)],
        &["m"],
    )
}

pub fn diag(placement: &str) -> String {
    program(
        4,
        &[("X", input(&[4, 4], &[8, 8], placement)), ("Y", input(&[4, 4], &[8, 8], placement))],
        &[
            (
                "s",
                r#"{"op": "join", "left": "X", "right": "Y", "left_keys": [0, 1], "right_keys": [0, 1], "kernel": "matAdd"}"#,
            ),
            ("f", r#"{"op": "filter", "input": "s", "predicate": "k0 == k1"}"#),
            ("r", r#"{"op": "rekey", "input": "f", "key": "[k0]"}"#),
            ("d", r#"{"op": "transform", "input": "r", "kernel": "diag"}"#),
        ],
        &["d"],
    )
}

/// The program each rule is tested on.
pub fn program_for(rule: &str) -> String {
    let x3 = || dense(&[3, 4, 2], &[4, 4]);
    match rule {
        "lower-aggregate" | "lower-join" | "R2-1" | "R2-6" | "R2-7b" | "agg-subset" | "matmul-bmm" | "matmul-cmm"
        | "matmul-rmm" => matmul(10),
        "lower-rekey" | "lower-filter" | "lower-transform" | "R1-6" | "R1-7" => diag(r#"{"hash": [0, 1]}"#),
        "lower-tile" | "lower-concat" => program(
            3,
            &[("X", dense(&[2, 3], &[4, 6]))],
            &[
                ("t", r#"{"op": "tile", "input": "X", "dim": 1, "size": 2}"#),
                ("c", r#"{"op": "concat", "input": "t", "key_dim": 2, "array_dim": 1}"#),
            ],
            &["c"],
        ),
        // (X·Y)·V with X 4×1 blocks, Y 1×4, V 4×1: X·(Y·V) is 4× cheaper.
        "matmul-assoc" => program(
            4,
            &[("X", dense(&[4, 1], &[8, 8])), ("Y", dense(&[1, 4], &[8, 8])), ("V", dense(&[4, 1], &[8, 8]))],
            &[
                ("j", MATMUL_J),
                ("m", MATMUL),
                (
                    "jv",
                    r#"{"op": "join", "left": "m", "right": "V", "left_keys": [1], "right_keys": [0], "kernel": "matMul"}"#,
                ),
                ("z", r#"{"op": "aggregate", "input": "jv", "group_by": [0, 2], "kernel": "matAdd"}"#),
            ],
            &["z"],
        ),
        // Σ_i X(i,j) ⊙ y(j): the sum over i before the product.
        "agg-eager" => program(
            4,
            &[("X", dense(&[4, 3], &[8, 8])), ("y", dense(&[3], &[8, 8]))],
            &[
                (
                    "j",
                    r#"{"op": "join", "left": "X", "right": "y", "left_keys": [1], "right_keys": [0], "kernel": "elemMul"}"#,
                ),
                ("s", r#"{"op": "aggregate", "input": "j", "group_by": [1], "kernel": "matAdd"}"#),
            ],
            &["s"],
        ),
        "R1-1" => program(
            4,
            &[("X", dense(&[4, 4], &[2, 2]))],
            &[
                ("f1", r#"{"op": "filter", "input": "X", "predicate": "k0 < 2"}"#),
                ("f2", r#"{"op": "filter", "input": "f1", "predicate": "k1 < 3"}"#),
            ],
            &["f2"],
        ),
        "R1-2" => program(
            4,
            &[("X", dense(&[4, 3], &[2, 2]))],
            &[
                ("t", r#"{"op": "transform", "input": "X", "kernel": "relu"}"#),
                ("r", r#"{"op": "rekey", "input": "t", "key": "[k1, k0]"}"#),
            ],
            &["r"],
        ),
        "R1-3" => program(
            4,
            &[("X", dense(&[4, 4], &[2, 2]))],
            &[
                ("t", r#"{"op": "transform", "input": "X", "kernel": "relu"}"#),
                ("f", r#"{"op": "filter", "input": "t", "predicate": "k0 == k1"}"#),
            ],
            &["f"],
        ),
        "R1-4" => program(
            4,
            &[("X", hashed(&[4, 4], &[2, 2], &[0])), ("Y", dense(&[4, 4], &[2, 2]))],
            &[
                // push-down: a map over an aggregation
                ("a", r#"{"op": "aggregate", "input": "X", "group_by": [0], "kernel": "matAdd"}"#),
                ("t", r#"{"op": "transform", "input": "a", "kernel": "scale(2)"}"#),
                // pull-up: an aggregation over a map
                ("n", r#"{"op": "transform", "input": "Y", "kernel": "neg"}"#),
                ("b", r#"{"op": "aggregate", "input": "n", "group_by": [1], "kernel": "matAdd"}"#),
            ],
            &["t", "b"],
        ),
        "R1-5" => program(
            4,
            &[("X", x3())],
            &[
                ("a", r#"{"op": "aggregate", "input": "X", "group_by": [0, 1], "kernel": "matAdd"}"#),
                ("f", r#"{"op": "filter", "input": "a", "predicate": "k0 < 2"}"#),
            ],
            &["f"],
        ),
        "map-identity" => program(
            4,
            &[("X", dense(&[4, 3], &[2, 2]))],
            &[("r", r#"{"op": "rekey", "input": "X", "key": "[k0, k1]"}"#)],
            &["r"],
        ),
        // The co-partitioned plan of diag(X+Y) filters shuffled operands
        // (R1-6 over R2-6): the filters move before the shuffles.
        "R2-2" => diag(""),
        "R2-3" => program(
            4,
            &[("X", dense(&[4, 4], &[2, 2])), ("Y", dense(&[4, 4], &[2, 2]))],
            &[
                ("t", r#"{"op": "transform", "input": "X", "kernel": "relu"}"#),
                (
                    "j",
                    r#"{"op": "join", "left": "t", "right": "Y", "left_keys": [1], "right_keys": [0], "kernel": "matMul"}"#,
                ),
                ("a", r#"{"op": "aggregate", "input": "t", "group_by": [0], "kernel": "matAdd"}"#),
            ],
            &["j", "a"],
        ),
        "R2-4" => program(
            4,
            &[
                ("X", hashed(&[4, 4], &[2, 2], &[0])),
                ("R", input(&[4, 4], &[2, 2], r#""replicated""#)),
                ("Y", dense(&[4, 4], &[2, 2])),
            ],
            &[
                ("a", r#"{"op": "aggregate", "input": "X", "group_by": [0], "kernel": "matAdd"}"#),
                ("b", r#"{"op": "aggregate", "input": "X", "group_by": [0, 1], "kernel": "matAdd"}"#),
                (
                    "j",
                    r#"{"op": "join", "left": "R", "right": "Y", "left_keys": [1], "right_keys": [0], "kernel": "matMul"}"#,
                ),
            ],
            &["a", "b", "j"],
        ),
        "R2-5" => program(
            4,
            &[("X", hashed(&[4, 4], &[2, 2], &[1]))],
            &[("a", r#"{"op": "aggregate", "input": "X", "group_by": [0], "kernel": "matAdd"}"#)],
            &["a"],
        ),
        "R2-7" => program(
            4,
            &[("X", dense(&[4, 4], &[2, 2])), ("Y", dense(&[4, 4], &[2, 2]))],
            &[("j", MATMUL_J), ("a", r#"{"op": "aggregate", "input": "j", "group_by": [1], "kernel": "matAdd"}"#)],
            &["a"],
        ),
        other => panic!("no test program for rule {other}: add one"),
    }
}

pub fn join(l: &str, r: &str, lk: &[usize], rk: &[usize], k: &str) -> String {
    format!(
        r#"{{"op": "join", "left": "{l}", "right": "{r}", "left_keys": {lk:?}, "right_keys": {rk:?}, "kernel": "{k}"}}"#
    )
}
pub fn agg(x: &str, g: &[usize], k: &str) -> String {
    format!(r#"{{"op": "aggregate", "input": "{x}", "group_by": {g:?}, "kernel": "{k}"}}"#)
}
pub fn transform(x: &str, k: &str) -> String {
    format!(r#"{{"op": "transform", "input": "{x}", "kernel": "{k}"}}"#)
}

pub fn ffnn(sites: usize) -> String {
    let b = |p: &str| if p.is_empty() { String::new() } else { p.to_string() };
    let inputs = vec![
        ("X", input(&[4, 4], &[16, 16], &b(r#"{"hash": [0]}"#))),
        ("W1", input(&[4, 2], &[16, 16], "")),
        ("b1", input(&[2], &[16], r#""replicated""#)),
        ("W2", input(&[2, 1], &[16, 16], "")),
        ("Y", input(&[4, 1], &[16, 16], &b(r#"{"hash": [0]}"#))),
    ];
    let nodes = vec![
        ("z1j", join("X", "W1", &[1], &[0], "matMul")),
        ("z1", agg("z1j", &[0, 2], "matAdd")),
        ("z1b", join("z1", "b1", &[1], &[0], "matVecAdd")),
        ("a1", transform("z1b", "relu")),
        ("z2j", join("a1", "W2", &[1], &[0], "matMul")),
        ("z2", agg("z2j", &[0, 2], "matAdd")),
        ("d2", join("z2", "Y", &[0, 1], &[0, 1], "matSub")),
        ("gW2j", join("a1", "d2", &[0], &[0], "matMulTN")),
        ("gW2", agg("gW2j", &[1, 2], "matAdd")),
        ("d1j", join("d2", "W2", &[1], &[1], "matMulNT")),
        ("d1", agg("d1j", &[0, 2], "matAdd")),
        ("d1r", join("d1", "z1b", &[0, 1], &[0, 1], "reluGrad")),
        ("gW1j", join("X", "d1r", &[0], &[0], "matMulTN")),
        ("gW1", agg("gW1j", &[1, 2], "matAdd")),
        ("W1n", join("W1", "gW1", &[0, 1], &[0, 1], "sgdStep(0.1)")),
        ("W2n", join("W2", "gW2", &[0, 1], &[0, 1], "sgdStep(0.1)")),
    ];
    let nodes: Vec<(&str, &str)> = nodes.iter().map(|(a, b)| (*a, b.as_str())).collect();
    program(sites, &inputs, &nodes, &["W1n", "W2n"])
}

pub fn distances(sites: usize) -> String {
    let inputs = vec![
        ("D", input(&[4, 2], &[16, 16], r#"{"hash": [0]}"#)),
        ("q", input(&[2], &[16], "")),
        ("M", input(&[2, 2], &[16, 16], "")),
    ];
    let nodes = vec![
        ("diff", join("D", "q", &[1], &[0], "matVecSub")),
        ("dmj", join("diff", "M", &[1], &[0], "matMul")),
        ("dm", agg("dmj", &[0, 2], "matAdd")),
        ("e", join("dm", "diff", &[0, 1], &[0, 1], "elemMul")),
        ("rs", transform("e", "rowSum")),
        ("dist", agg("rs", &[0], "matAdd")),
        ("near", r#"{"op": "filter", "input": "dist", "predicate": "k0 < 2"}"#.to_string()),
        ("neg", transform("near", "neg")),
        ("out", r#"{"op": "rekey", "input": "neg", "key": "[k0, 0]"}"#.to_string()),
    ];
    let nodes: Vec<(&str, &str)> = nodes.iter().map(|(a, b)| (*a, b.as_str())).collect();
    program(sites, &inputs, &nodes, &["out"])
}

/// A chain of `n` matmuls over inputs of varied shapes, every other one
/// hashed on its rows.
pub fn chain(n: usize, sites: usize) -> String {
    let names: Vec<String> = (0..=n).map(|i| format!("I{i}")).collect();
    let decls: Vec<(&str, String)> = (0..=n)
        .map(|i| {
            let p = if i % 2 == 0 { r#"{"hash": [0]}"# } else { "" };
            (names[i].as_str(), input(&[2 + (i as u32 % 3), 2 + ((i as u32 + 1) % 3)], &[4, 4], p))
        })
        .collect();
    let mut nodes = matmul_nodes("m1", "I0", "I1");
    for (i, name) in names.iter().enumerate().skip(2) {
        nodes.extend(matmul_nodes(&format!("m{i}"), &format!("m{}", i - 1), name));
    }
    let nodes: Vec<(&str, &str)> = nodes.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    program(sites, &decls, &nodes, &[&format!("m{n}")])
}

/// Relations with holes (filters before and after joins and aggregations,
/// key maps, a filtered diagonal): the typing paths that describe one
/// relation differently meet here.
pub fn holes(sites: usize) -> String {
    program(
        sites,
        &[
            ("X", input(&[4, 4], &[2, 2], r#"{"hash": [0]}"#)),
            ("Y", input(&[4, 3], &[2, 2], "")),
            ("Z", input(&[3, 2, 2], &[2, 2], r#"{"hash": [2]}"#)),
        ],
        &[
            ("fx", r#"{"op": "filter", "input": "X", "predicate": "k0 + k1 != 3"}"#),
            ("fy", r#"{"op": "filter", "input": "Y", "predicate": "k1 < 2 || k0 == 3"}"#),
            (
                "j",
                r#"{"op": "join", "left": "fx", "right": "fy", "left_keys": [1], "right_keys": [0], "kernel": "matMul"}"#,
            ),
            ("f", r#"{"op": "filter", "input": "j", "predicate": "k2 == 1 || k1 == 0"}"#),
            ("a", r#"{"op": "aggregate", "input": "f", "group_by": [0, 2], "kernel": "matAdd"}"#),
            ("fa", r#"{"op": "filter", "input": "a", "predicate": "k0 < 3"}"#),
            ("t", r#"{"op": "transform", "input": "fa", "kernel": "relu"}"#),
            ("r", r#"{"op": "rekey", "input": "t", "key": "[k1, k0]"}"#),
            ("r2", r#"{"op": "rekey", "input": "r", "key": "[k1, k0]"}"#),
            ("za", r#"{"op": "aggregate", "input": "Z", "group_by": [0, 1], "kernel": "max"}"#),
            ("zt", r#"{"op": "transform", "input": "za", "kernel": "relu"}"#),
            (
                "zj",
                r#"{"op": "join", "left": "zt", "right": "r2", "left_keys": [0, 1], "right_keys": [0, 1], "kernel": "matAdd"}"#,
            ),
            ("zf", r#"{"op": "filter", "input": "zj", "predicate": "k0 == k1"}"#),
            ("zd", r#"{"op": "transform", "input": "zf", "kernel": "diag"}"#),
        ],
        &["r2", "zd"],
    )
}

/// A filter over a join whose right operand has holes: pushing the filter
/// into the left operand gives the same keys, but the join's typing keeps the
/// right operand's frontier where the filter's recomputes it (R1-6 must skip,
/// not merge).
pub fn frontier_mismatch(sites: usize) -> String {
    program(
        sites,
        &[("X", input(&[4, 4], &[2, 2], "")), ("Y", input(&[4, 4], &[2, 2], r#"{"hash": [1]}"#))],
        &[
            ("fy", r#"{"op": "filter", "input": "Y", "predicate": "(k0 == 0 && k1 == 3) || (k0 == 3 && k1 == 0)"}"#),
            (
                "j",
                r#"{"op": "join", "left": "X", "right": "fy", "left_keys": [1], "right_keys": [0], "kernel": "matMul"}"#,
            ),
            ("f", r#"{"op": "filter", "input": "j", "predicate": "k1 == 3"}"#),
            ("t", r#"{"op": "transform", "input": "f", "kernel": "relu"}"#),
            ("r", r#"{"op": "rekey", "input": "t", "key": "[k2, k0, k1]"}"#),
            ("r2", r#"{"op": "rekey", "input": "r", "key": "[k1, k2, k0]"}"#),
        ],
        &["r2"],
    )
}

/// `X·Y` with small blocks, `X` 3×4 and `Y` 4×2 blocks, placed as given.
pub fn matmul_nodes_program(sites: usize, px: &str, py: &str) -> String {
    let nodes = matmul_nodes("m", "X", "Y");
    let nodes: Vec<(&str, &str)> = nodes.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    program(sites, &[("X", input(&[3, 4], &[2, 2], px)), ("Y", input(&[4, 2], &[2, 2], py))], &nodes, &["m"])
}
