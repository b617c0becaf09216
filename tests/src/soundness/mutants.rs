//! Deliberately unsound variants of real rules ("mutation" testing):
//! each copies the structure of the rule it replaces and changes one thing
//! (a dropped condition, swapped operands, wrong key positions, a shuffle
//! removed, a broadcast where a shuffle belongs). Each is registered under the
//! NAME of the rule it replaces, so the harness runs it on that rule's
//! generator and credits the nodes it builds to that name. The soundness test
//! requires the harness to report every one of them as a failure.

use super::build::{
    arity, complete_phys, dims, get, identity_key, inst, kernel, pat, pred, rewrite, rewrite_to, rule, with,
};
use tra_optimizer::egraph::{Param, TraEGraph};
use tra_optimizer::rule::RuleDef;
use tra_optimizer::types::{self, Placement};

/// A mutant: what it changes, and the rule it stands for.
pub struct Mutant {
    /// A short name.
    pub name: &'static str,
    /// What was changed, in words.
    pub change: &'static str,
    /// The rule (by its real name) that it replaces.
    pub replaces: &'static str,
    /// Builds the mutated rule.
    pub make: fn() -> RuleDef,
}

/// Every mutant.
pub fn all() -> Vec<Mutant> {
    vec![
        Mutant {
            name: "R2-4 without its placement condition",
            change: "`(shuffle ?p (erase ?r)) = ?r` for every complete r, not only r placed Hash(p)",
            replaces: "R2-4",
            make: r2_4_no_condition,
        },
        Mutant {
            name: "agg-subset on any dims",
            change: "the shuffle dims d range over every non-empty set of key dims, not only subsets of the group-by dims",
            replaces: "agg-subset",
            make: agg_subset_any_dims,
        },
        Mutant {
            name: "R1-3 with any key map",
            change: "a filter moved under a local map whose key map is not the identity (condition dropped)",
            replaces: "R1-3",
            make: r1_3_any_key_map,
        },
        Mutant {
            name: "R1-5 without renaming",
            change: "the predicate pushed under the aggregation reads input dims at the output dims' positions (wrong key positions)",
            replaces: "R1-5",
            make: r1_5_not_renamed,
        },
        Mutant {
            name: "R2-7b broadcasting both sides",
            change: "the non-broadcast side is broadcast too, where it must be shuffled",
            replaces: "R2-7b",
            make: r2_7b_both_broadcast,
        },
        Mutant {
            name: "R2-6 with swapped operands",
            change: "the broadcast-right form joins the operands in the other order (keys swapped too), with the same kernel",
            replaces: "R2-6",
            make: r2_6_swapped,
        },
        Mutant {
            name: "lower-aggregate without its shuffle",
            change: "the shuffle on the group-by dims is removed, whatever the operand's placement",
            replaces: "lower-aggregate",
            make: lower_aggregate_no_shuffle,
        },
        Mutant {
            name: "matmul-bmm shuffling Y on the join dim",
            change: "Y is shuffled on [0] (the common dim, which the aggregation drops) instead of [1]",
            replaces: "matmul-bmm",
            make: matmul_bmm_wrong_shuffle,
        },
        Mutant {
            name: "R1-4 without distributivity",
            change: "a map pushed under an aggregation whose kernel it does not distribute over",
            replaces: "R1-4",
            make: r1_4_no_distributivity,
        },
        Mutant {
            name: "R1-4 judging the key map by its output arity",
            change: "push-down checks that the key map is the identity on keys of its own output's arity, not of the \
                     aggregate's (so `[k0]` over a 2-dim aggregate passes): the bug `diag(A·B)` hit",
            replaces: "R1-4",
            make: r1_4_output_arity,
        },
        Mutant {
            name: "R2-3 in the paper's unconditional form",
            change: "a shuffle commuted with a local map whose key map is not the identity",
            replaces: "R2-3",
            make: r2_3_unconditional,
        },
        Mutant {
            name: "R2-5 grouping the second phase by g",
            change: "the second phase groups the partial results by g (input dims) instead of 0..|g| (wrong key positions)",
            replaces: "R2-5",
            make: r2_5_wrong_positions,
        },
    ]
}

fn r2_4_no_condition() -> RuleDef {
    rule(
        "R2-4",
        "(shuffle ?p (erase ?r)) = ?r",
        "MUTANT: r complete (the placement condition is dropped)",
        vec![rewrite("R2-4", "R2-4/mutant", "(shuffle ?p (erase ?r))", |eg, _, s| {
            let r = get(s, "?r");
            if complete_phys(eg, r).is_some() {
                vec![r]
            } else {
                vec![]
            }
        })],
    )
}

fn subsets(n: usize) -> Vec<Vec<usize>> {
    (1..(1usize << n)).map(|m| (0..n).filter(|i| m & (1 << i) != 0).collect()).collect()
}

fn agg_subset_any_dims() -> RuleDef {
    let rhs = pat("(erase (lagg ?g ?k (shuffle ?d ?x)))").ast;
    rule(
        "agg-subset",
        "(erase (lagg ?g ?k (shuffle ?g ?x))) = (erase (lagg ?g ?k (shuffle d ?x)))",
        "MUTANT: any non-empty d (the condition d ⊆ g is dropped)",
        vec![rewrite("agg-subset", "agg-subset/mutant", "(erase (lagg ?g ?k (shuffle ?g ?x)))", move |eg, _, s| {
            let (Some(g), Some(n)) = (dims(eg, get(s, "?g")), arity(eg, get(s, "?x"))) else { return vec![] };
            let mut out = Vec::new();
            for d in subsets(n.min(4)) {
                if d != g {
                    let s = with(eg, s, vec![("?d", Param::Dims(d))]);
                    out.extend(inst(eg, &rhs, &s));
                }
            }
            out
        })],
    )
}

fn r1_3_any_key_map() -> RuleDef {
    rule(
        "R1-3",
        "(lfilter ?p (lmap ?f ?k ?x)) = (lmap ?f ?k (lfilter ?p ?x))",
        "MUTANT: none (the identity-key-map condition is dropped)",
        vec![rewrite_to(
            "R1-3",
            "R1-3/mutant",
            "(lfilter ?p (lmap ?f ?k ?x))",
            "(lmap ?f ?k (lfilter ?p ?x))",
            |_, _, _| Some(vec![]),
        )],
    )
}

fn r1_5_not_renamed() -> RuleDef {
    rule(
        "R1-5",
        "(lfilter ?p (lagg ?g ?k ?x)) = (lagg ?g ?k (lfilter ?p ?x))",
        "MUTANT: the predicate is not renamed to the group-by dims",
        vec![rewrite_to(
            "R1-5",
            "R1-5/mutant",
            "(lfilter ?p (lagg ?g ?k ?x))",
            "(lagg ?g ?k (lfilter ?p ?x))",
            |eg, _, s| {
                let (p, g, k) = (pred(eg, get(s, "?p"))?, dims(eg, get(s, "?g"))?, kernel(eg, get(s, "?k"))?);
                if types::concat_params(&k).is_some() || p.dims_read().iter().any(|&d| d >= g.len()) {
                    return None;
                }
                Some(vec![])
            },
        )],
    )
}

fn r2_7b_both_broadcast() -> RuleDef {
    rule(
        "R2-7b",
        "(shuffle ?p (erase (ljoin … (broadcast ?a) ?pb))) = (ljoin … (broadcast ?a) (broadcast (erase ?pb)))",
        "MUTANT: p from the non-broadcast side, which is broadcast instead of shuffled",
        vec![rewrite_to(
            "R2-7b",
            "R2-7b/mutant",
            "(shuffle ?p (erase (ljoin ?jl ?jr ?k (broadcast ?a) ?pb)))",
            "(ljoin ?jl ?jr ?k (broadcast ?a) (broadcast (erase ?pb)))",
            |_, _, _| Some(vec![]),
        )],
    )
}

fn r2_6_swapped() -> RuleDef {
    rule(
        "R2-6",
        "(erase (ljoin ?jl ?jr ?k (broadcast (erase ?pa)) ?pb)) = (erase (ljoin ?jr ?jl ?k ?pb (broadcast (erase ?pa))))",
        "MUTANT: operands (and key lists) swapped, kernel kept",
        vec![rewrite_to(
            "R2-6",
            "R2-6/mutant",
            "(erase (ljoin ?jl ?jr ?k (broadcast (erase ?pa)) ?pb))",
            "(erase (ljoin ?jr ?jl ?k ?pb (broadcast (erase ?pa))))",
            |_, _, _| Some(vec![]),
        )],
    )
}

fn lower_aggregate_no_shuffle() -> RuleDef {
    rule(
        "lower-aggregate",
        "(aggregate ?g ?k (erase ?p)) = (erase (lagg ?g ?k ?p))",
        "MUTANT: none (the shuffle on the group-by dims is dropped)",
        vec![rewrite_to(
            "lower-aggregate",
            "lower-aggregate/mutant",
            "(aggregate ?g ?k (erase ?p))",
            "(erase (lagg ?g ?k ?p))",
            |_, _, _| Some(vec![]),
        )],
    )
}

fn matmul_bmm_wrong_shuffle() -> RuleDef {
    rule(
        "matmul-bmm",
        "(aggregate [0,2] matAdd (join [1] [0] matMul ?x ?y)) = \
         (erase (lagg [0,2] matAdd (ljoin [1] [0] matMul (broadcast ?x) (shuffle [0] ?y))))",
        "MUTANT: Y shuffled on its join dim",
        vec![rewrite_to(
            "matmul-bmm",
            "matmul-bmm/mutant",
            "(aggregate [0,2] kernel:matAdd (join [1] [0] kernel:matMul ?x ?y))",
            "(erase (lagg [0,2] kernel:matAdd (ljoin [1] [0] kernel:matMul (broadcast ?x) (shuffle [0] ?y))))",
            |_, _, _| Some(vec![]),
        )],
    )
}

fn r1_4_no_distributivity() -> RuleDef {
    rule(
        "R1-4",
        "(lmap id ?m (lagg ?g ?agg ?x)) = (lagg ?g ?agg (lmap id ?m ?x))",
        "MUTANT: identity key map (distributivity of m over agg is not checked)",
        vec![rewrite_to(
            "R1-4",
            "R1-4/mutant",
            "(lmap ?f ?m (lagg ?g ?agg ?x))",
            "(lagg ?g ?agg (lmap id ?m ?x))",
            |eg, _, s| {
                let g = dims(eg, get(s, "?g"))?;
                (identity_key(eg, get(s, "?f"), g.len()) && kernel(eg, get(s, "?m")).is_some()).then(Vec::new)
            },
        )],
    )
}

/// R1-4 as it was before the arity fix: both directions and the
/// distributivity check as in the real rule, but push-down reads the arity
/// of the map's *output* (the matched class) where the map reads the
/// aggregate's keys.
fn r1_4_output_arity() -> RuleDef {
    let distributes = |eg: &TraEGraph, s: &egg::Subst| match (kernel(eg, get(s, "?m")), kernel(eg, get(s, "?agg"))) {
        (Some(m), Some(agg)) => m.distributes_over(&agg),
        _ => false,
    };
    rule(
        "R1-4",
        "(lmap id ?m (lagg ?g ?agg ?x)) = (lagg ?g ?agg (lmap id ?m ?x))",
        "MUTANT: m distributes over agg and the key map is the identity on keys of the map's output arity",
        vec![
            rewrite_to(
                "R1-4",
                "R1-4/mutant-push-down",
                "(lmap ?f ?m (lagg ?g ?agg ?x))",
                "(lagg ?g ?agg (lmap id ?m ?x))",
                move |eg, id, s| {
                    let t = eg[id].data.phys()?;
                    (identity_key(eg, get(s, "?f"), t.rel.key_arity()) && distributes(eg, s)).then(Vec::new)
                },
            ),
            rewrite_to(
                "R1-4",
                "R1-4/mutant-pull-up",
                "(lagg ?g ?agg (lmap ?f ?m ?x))",
                "(lmap id ?m (lagg ?g ?agg ?x))",
                move |eg, _, s| {
                    let xt = complete_phys(eg, get(s, "?x"))?;
                    (identity_key(eg, get(s, "?f"), xt.rel.key_arity()) && distributes(eg, s)).then(Vec::new)
                },
            ),
        ],
    )
}

fn r2_3_unconditional() -> RuleDef {
    rule(
        "R2-3",
        "(shuffle ?d (erase (lmap ?f ?k ?x))) = (lmap ?f ?k (shuffle ?d (erase ?x)))",
        "MUTANT: any key map (the paper's unconditional form)",
        vec![rewrite_to(
            "R2-3",
            "R2-3/mutant",
            "(shuffle ?d (erase (lmap ?f ?k ?x)))",
            "(lmap ?f ?k (shuffle ?d (erase ?x)))",
            |_, _, _| Some(vec![]),
        )],
    )
}

fn r2_5_wrong_positions() -> RuleDef {
    rule(
        "R2-5",
        "(erase (lagg ?g ?k (shuffle ?p (erase ?r)))) = (erase (lagg ?g ?k (shuffle pos_g(p) (erase (lagg ?g ?k ?r)))))",
        "MUTANT: as R2-5, but the second phase groups by g",
        vec![rewrite_to(
            "R2-5",
            "R2-5/mutant",
            "(erase (lagg ?g ?k (shuffle ?p (erase ?r))))",
            "(erase (lagg ?g ?k (shuffle ?pos (erase (lagg ?g ?k ?r)))))",
            |eg: &TraEGraph, _, s| {
                let (g, p, k) = (dims(eg, get(s, "?g"))?, dims(eg, get(s, "?p"))?, kernel(eg, get(s, "?k"))?);
                let rt = complete_phys(eg, get(s, "?r"))?;
                if !p.iter().all(|d| g.contains(d)) || !k.is_assoc_comm() {
                    return None;
                }
                match &rt.placement {
                    Placement::Hash(d) if !d.iter().all(|x| g.contains(x)) => {}
                    _ => return None,
                }
                match types::local_aggregate(rt, &g, &k, eg.analysis.sites) {
                    Ok(pre) if !pre.complete => {}
                    _ => return None,
                }
                let pos: Vec<usize> = p.iter().map(|d| g.iter().position(|x| x == d).expect("p ⊆ g")).collect();
                Some(vec![("?pos", Param::Dims(pos))])
            },
        )],
    )
}
