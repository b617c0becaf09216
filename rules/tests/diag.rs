//! diag(X + Y) (paper 004 §4.2): R1-6 pushes the filter `k0 == k1` into both
//! operands of the join, R1-2 and R1-7 fuse `diag` into the join's kernel.

mod common;
use common::{input, program, run, saturated};
use tra_optimizer::egraph::{Ia, Param};
use tra_optimizer::kernel::KernelRef;

fn diag_program(sites: usize, placement: &str) -> String {
    program(
        sites,
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

#[test]
fn diag_of_sum_fuses_into_a_filtered_join() {
    let fused = KernelRef::compose(KernelRef::named("diag"), KernelRef::named("matAdd"));
    for (sites, placement) in [(4, r#"{"hash": [0, 1]}"#), (3, ""), (1, "")] {
        let r = run(&diag_program(sites, placement));
        assert!(saturated(&r.stop), "{sites} sites: {:?}, {} nodes", r.stop, r.nodes());
        let matches = r.search_root("d", "(erase (lmap ?f id (ljoin [0,1] [0,1] ?k (lfilter ?p ?a) (lfilter ?q ?b))))");
        assert!(
            matches.iter().any(|s| r.param(s, "?k") == Param::Kernel(fused.clone())
                && r.param(s, "?f").to_string() == "key:[k0]"),
            "{sites} sites: no local join of two local filters with kernel compose(diag,matAdd) in the root class"
        );
    }
}

/// `diag(A·B)` written as users write it: the product, its diagonal blocks
/// (filter `k0 == k1`, rekey `[k0]`), `diag` of each. R1-4 must not push
/// `diag` under the 2-dim aggregation through the key map `[k0]` (which
/// drops a dim): saturation completes without a merge assertion, and no
/// class holds a map over the aggregate next to an aggregate of maps.
#[test]
fn diag_of_a_product_saturates_without_pushing_the_dropping_map_down() {
    for sites in 1..=7 {
        let json = program(
            sites,
            &[("A", input(&[2, 2], &[6, 6], "")), ("B", input(&[2, 2], &[6, 6], ""))],
            &[
                (
                    "J",
                    r#"{"op": "join", "left": "A", "right": "B", "left_keys": [1], "right_keys": [0], "kernel": "matMul"}"#,
                ),
                ("S", r#"{"op": "aggregate", "input": "J", "group_by": [0, 2], "kernel": "matAdd"}"#),
                ("F", r#"{"op": "filter", "input": "S", "predicate": "k0 == k1"}"#),
                ("R", r#"{"op": "rekey", "input": "F", "key": "[k0]"}"#),
                ("D", r#"{"op": "transform", "input": "R", "kernel": "diag"}"#),
            ],
            &["D"],
        );
        let r = run(&json);
        assert!(saturated(&r.stop), "{sites} sites: {:?}", r.stop);
        // The composed map `[k0]`+diag over the aggregate exists (R1-2, R1-5), and R1-4 left it
        // alone: its class holds no aggregation (of diag maps keyed like the aggregate).
        let over_agg: egg::Pattern<Ia> = "(lmap key:[k0] kernel:diag (lagg [0,2] kernel:matAdd ?x))".parse().unwrap();
        let matches = egg::Searcher::search(&over_agg, &r.eg);
        assert!(!matches.is_empty(), "{sites} sites: no map over the aggregate to test");
        let bad = matches.iter().any(|m| r.eg[m.eclass].nodes.iter().any(|n| matches!(n, Ia::LAgg(_))));
        assert!(!bad, "{sites} sites: R1-4 pushed a dim-dropping map under an aggregation");
    }
}

/// The smallest program of the same shape: aggregate by both dims of a
/// `[2,1]` relation, rekey `[k0]`, `scale(2)` (which distributes over
/// `matAdd`), on one site.
#[test]
fn aggregate_rekey_dropping_a_dim_then_a_distributing_map() {
    for kernel in ["scale(2)", "neg", "diag", "rowSum", "transpose"] {
        let json = program(
            1,
            &[("X", input(&[2, 1], &[3, 3], ""))],
            &[
                ("S", r#"{"op": "aggregate", "input": "X", "group_by": [0, 1], "kernel": "matAdd"}"#),
                ("R", r#"{"op": "rekey", "input": "S", "key": "[k0]"}"#),
                ("T", &format!(r#"{{"op": "transform", "input": "R", "kernel": "{kernel}"}}"#)),
            ],
            &["T"],
        );
        let r = run(&json);
        assert!(saturated(&r.stop), "{kernel}: {:?}", r.stop);
    }
}
