//! One application of a rule, before and after, per family (the
//! DataFusion style of optimizer-rule tests): an expression is added to an
//! e-graph, the rule's rewrites run for one iteration, and the snapshot
//! lists the expression, then every member of its class afterwards (each
//! operand written as its smallest term). A change to what a rule builds
//! shows up here as a readable diff; `INSTA_UPDATE=always` rewrites them
//! (review the diff before committing).

use egg::{AstSize, Extractor, Language, RecExpr, Runner};
use indexmap::IndexMap;
use tra_optimizer::egraph::{Ia, TraAnalysis, TraEGraph};
use tra_optimizer::program::{InputDecl, PlacementDecl};

/// Two 4×4-block matrices of 2×2 blocks, on 4 sites: `X` hashed on its rows,
/// `Y` on its columns.
fn graph() -> TraEGraph {
    let decl = |placement| InputDecl { key_bounds: vec![4, 4], array_bounds: vec![2, 2], placement };
    let inputs: IndexMap<String, InputDecl> =
        [("X".to_string(), decl(PlacementDecl::Hash(vec![0]))), ("Y".to_string(), decl(PlacementDecl::Hash(vec![1])))]
            .into_iter()
            .collect();
    TraEGraph::new(TraAnalysis::new(4, inputs))
}

/// `before`, then its class's members after one iteration of `rule`.
fn once(rule: &str, before: &str) -> String {
    let expr: RecExpr<Ia> = before.parse().unwrap_or_else(|e| panic!("bad expression {before}: {e}"));
    let mut eg = graph();
    let root = eg.add_expr(&expr);
    let rewrites = tra_rules::by_name(rule).unwrap_or_else(|| panic!("no rule {rule}")).rewrites;
    let runner: Runner<Ia, TraAnalysis> =
        Runner::new(eg.analysis.clone()).with_egraph(eg).with_iter_limit(1).run(&rewrites);
    let eg = runner.egraph;
    let root = eg.find(root);
    let extractor = Extractor::new(&eg, AstSize);
    let mut members: Vec<String> = eg[root]
        .nodes
        .iter()
        .map(|n| {
            let kids: Vec<String> = n.children().iter().map(|c| extractor.find_best(*c).1.to_string()).collect();
            if kids.is_empty() {
                n.to_string()
            } else {
                format!("({n} {})", kids.join(" "))
            }
        })
        .collect();
    assert!(members.len() > 1, "{rule} did not fire on {before}");
    members.sort();
    format!("{rule}\nbefore: {before}\nafter:\n  {}\n", members.join("\n  "))
}

#[test]
fn lowering() {
    let text = [
        once("lower-aggregate", "(aggregate [0] kernel:matAdd (erase (input X)))"),
        once("lower-join", "(join [1] [0] kernel:matMul (erase (input X)) (erase (input Y)))"),
        once("lower-rekey", "(rekey key:[k1,k0] (erase (input X)))"),
        once("lower-filter", "(filter pred:k0==k1 (erase (input X)))"),
        once("lower-transform", "(transform kernel:relu (erase (input X)))"),
        once("lower-tile", "(tile [1,1] (erase (input X)))"),
        once("lower-concat", "(concat [1,1] (erase (input X)))"),
    ];
    insta::assert_snapshot!(text.join("\n"));
}

#[test]
fn compose() {
    let text = [
        once("R1-1", "(lfilter pred:k0==k1 (lfilter pred:k0<2 (input X)))"),
        once("R1-2", "(lmap key:[k1,k0] id (lmap id kernel:relu (input X)))"),
        once("R1-3", "(lfilter pred:k0==k1 (lmap id kernel:relu (input X)))"),
        once("R1-4", "(lmap id kernel:relu (lagg [0] kernel:max (input X)))"),
        once("R1-5", "(lfilter pred:k0<2 (lagg [0] kernel:matAdd (input X)))"),
        once(
            "R1-6",
            "(lfilter pred:k0==k1 (ljoin [0,1] [0,1] kernel:matAdd (input X) (shuffle [0] (erase (input Y)))))",
        ),
        once("R1-7", "(lmap id kernel:relu (ljoin [1] [0] kernel:matMul (broadcast (erase (input X))) (input Y)))"),
        once("map-identity", "(lmap key:[k0,k1] id (input X))"),
    ];
    insta::assert_snapshot!(text.join("\n"));
}

#[test]
fn repartition() {
    let text = [
        once("R2-1", "(erase (shuffle [1] (erase (input X))))"),
        once("R2-2", "(lfilter pred:k0<2 (shuffle [1] (erase (input X))))"),
        once("R2-3", "(broadcast (erase (lmap id kernel:relu (input X))))"),
        once("R2-4", "(shuffle [0] (erase (input X)))"),
        once("agg-subset", "(erase (lagg [0,1] kernel:matAdd (shuffle [0,1] (erase (input X)))))"),
        once("R2-5", "(erase (lagg [1] kernel:matAdd (shuffle [1] (erase (input X)))))"),
        once("R2-6", "(erase (ljoin [1] [0] kernel:matMul (broadcast (erase (input X))) (input Y)))"),
        once("R2-7", "(shuffle [1] (erase (ljoin [1] [0] kernel:matMul (broadcast (erase (input X))) (input Y))))"),
        once("R2-7b", "(shuffle [2] (erase (ljoin [1] [0] kernel:matMul (broadcast (erase (input X))) (input Y))))"),
    ];
    insta::assert_snapshot!(text.join("\n"));
}

#[test]
fn matmul() {
    const XY: &str = "(aggregate [0,2] kernel:matAdd (join [1] [0] kernel:matMul (erase (input X)) (erase (input Y))))";
    // (X·Y)·X, and (X·Y)ᵀ·X = Yᵀ·(Xᵀ·X) (the outer product reads the inner transposed).
    const XY_X: &str = "(aggregate [0,2] kernel:matAdd (join [1] [0] kernel:matMul (aggregate [0,2] kernel:matAdd \
                        (join [1] [0] kernel:matMul (erase (input X)) (erase (input Y)))) (erase (input X))))";
    const XY_T_X: &str = "(aggregate [1,2] kernel:matAdd (join [0] [0] kernel:matMulTN (aggregate [0,2] kernel:matAdd \
                          (join [1] [0] kernel:matMul (erase (input X)) (erase (input Y)))) (erase (input X))))";
    let text = [
        once("matmul-bmm", XY),
        once("matmul-cmm", XY),
        once("matmul-rmm", XY),
        once("matmul-assoc", XY_X),
        once("matmul-assoc", XY_T_X),
        once(
            "agg-eager",
            "(aggregate [1,2] kernel:matAdd (join [1] [1] kernel:elemMul (erase (input X)) (erase (input Y))))",
        ),
        once(
            "agg-eager",
            "(aggregate [0,1] kernel:matAdd (join [1] [0] kernel:elemMul (erase (input X)) (erase (input Y))))",
        ),
    ];
    insta::assert_snapshot!(text.join("\n"));
}

#[test]
fn every_rule_has_a_snapshot() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots");
    let mut shown = std::collections::HashSet::new();
    for entry in std::fs::read_dir(&dir).expect("rules/tests/snapshots") {
        let text = std::fs::read_to_string(entry.expect("an entry").path()).expect("a snapshot");
        shown.extend(text.lines().map(str::to_string));
    }
    let missing: Vec<&str> = tra_rules::names().into_iter().filter(|n| !shown.contains(*n)).collect();
    assert!(missing.is_empty(), "rules without a before/after snapshot in rules/tests/snapshots.rs: {missing:?}");
}
