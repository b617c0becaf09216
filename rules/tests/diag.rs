//! diag(X + Y) (paper 004 §4.2): R1-6 pushes the filter `k0 == k1` into both
//! operands of the join, R1-2 and R1-7 fuse `diag` into the join's kernel.

mod common;
use common::{input, program, run, saturated};
use tra_optimizer::egraph::Param;
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
