//! Deliberately unsound variants of real rules ("mutation" testing):
//! each copies the structure of the rule it replaces and changes one thing
//! (a dropped condition or operator, swapped operands or key lists, wrong key
//! positions or dims, kernels composed in the wrong order, a shuffle removed,
//! a broadcast where a shuffle belongs). Each is registered under the NAME of
//! the rule it replaces, so the harness runs it on that rule's generator and
//! credits the nodes it builds to that name. The soundness test requires the
//! harness to report every one of them as a failure. Every rule but R2-1 has
//! one (see `rules/README.md`); a mutant the typing refuses to build (a local
//! join of operands that are not co-located, for one) cannot stand here,
//! since it never reaches execution.

use tra_optimizer::egraph::{Param, TraEGraph};
use tra_optimizer::keyexpr::KeyFn;
use tra_optimizer::types;
use tra_rules::build::{
    arity, complete_phys, dims, extend, inst, is_identity_key, kernel, logical, pat, pred, rw, vars, Bound, Cond,
    Family, Rule, RuleDef, Rw,
};
use tra_rules::cond::{dense_nonempty, distributes, identity_key, identity_key_on_groups, matrices, matrix_frontiers};
use tra_rules::matmul::member;

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
            name: "matmul-assoc grouping the new inner product by [2,0]",
            change: "P·(Q·R) is built with Q·R keyed (column, row), so P meets it on R's column blocks",
            replaces: "matmul-assoc",
            make: matmul_assoc_wrong_key_order,
        },
        Mutant {
            name: "agg-eager without linearity",
            change: "an aggregation pushed below a join whose kernel (matAdd) is not linear in its operands",
            replaces: "agg-eager",
            make: agg_eager_not_linear,
        },
        Mutant {
            name: "agg-eager right without linearity",
            change: "an aggregation pushed below a join onto its right operand, for any join kernel (matAdd and max \
                     are not linear in their operands)",
            replaces: "agg-eager",
            make: agg_eager_right_not_linear,
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
        Mutant {
            name: "lower-join with its key lists swapped",
            change: "the local join reads the left operand's dims from the right key list and the right's from the \
                     left",
            replaces: "lower-join",
            make: lower_join_keys_swapped,
        },
        Mutant {
            name: "lower-filter ignoring its predicate",
            change: "the filter is lowered to its operand: every tuple is kept",
            replaces: "lower-filter",
            make: lower_filter_no_predicate,
        },
        Mutant {
            name: "lower-rekey ignoring its key map",
            change: "the rekey is lowered to its operand: the keys are not mapped",
            replaces: "lower-rekey",
            make: lower_rekey_no_key_map,
        },
        Mutant {
            name: "lower-transform ignoring its kernel",
            change: "the transform is lowered to its operand: the blocks are not transformed",
            replaces: "lower-transform",
            make: lower_transform_no_kernel,
        },
        Mutant {
            name: "lower-concat along the other array dim",
            change: "the concat aggregation joins each group's pieces along the array dim that `ad` does not name",
            replaces: "lower-concat",
            make: lower_concat_other_array_dim,
        },
        Mutant {
            name: "R1-1 keeping only the outer predicate",
            change: "two filters fused into the outer one alone (`p1`, not `p1 && p2`)",
            replaces: "R1-1",
            make: r1_1_outer_only,
        },
        Mutant {
            name: "map-identity without its condition",
            change: "a local map without a kernel is its input whatever its key map",
            replaces: "map-identity",
            make: map_identity_any_key_map,
        },
        Mutant {
            name: "R1-6 right without renaming",
            change: "a predicate that reads only dims below the right operand's arity is pushed onto the right \
                     operand as written (the join's output dims read at the right operand's positions)",
            replaces: "R1-6",
            make: r1_6_right_not_renamed,
        },
        Mutant {
            name: "R2-2 renaming the predicate through the shuffle dims",
            change: "the predicate moved below the shuffle reads dim `d[i]` where it read dim `i`, as if the \
                     shuffle had projected its operand onto `d`",
            replaces: "R2-2",
            make: r2_2_renamed_through_dims,
        },
        Mutant {
            name: "matmul-cmm without its second phase",
            change: "the partial sums by (i,k), made on the sites of j, are not shuffled and summed again",
            replaces: "matmul-cmm",
            make: matmul_cmm_one_phase,
        },
        Mutant {
            name: "matmul-rmm without its final shuffle",
            change: "the products, made on the sites of (i,j,k), are summed by (i,k) where they are, not shuffled \
                     on (i,k) first",
            replaces: "matmul-rmm",
            make: matmul_rmm_no_final_shuffle,
        },
        Mutant {
            name: "lower-tile along the other array dim",
            change: "the tile key map and kernel are those of tiling the array dim that `dim` does not name",
            replaces: "lower-tile",
            make: lower_tile_other_dim,
        },
        Mutant {
            name: "R1-2 composing the kernels in the other order",
            change: "two kernel-only maps fused with the outer kernel applied first",
            replaces: "R1-2",
            make: r1_2_kernels_swapped,
        },
        Mutant {
            name: "R1-7 keeping the kernel outside too",
            change: "the map's kernel is composed into the join and still applied by the map above it",
            replaces: "R1-7",
            make: r1_7_kernel_twice,
        },
        Mutant {
            name: "R2-7 partitioning on every join dim",
            change: "both operands are shuffled on all their join dims, not on `p` and its matching right dims, so \
                     the join's output is placed Hash(jl), not Hash(p)",
            replaces: "R2-7",
            make: r2_7_every_join_dim,
        },
    ]
}

/// The condition "`x` is complete", named.
fn complete(x: &str) -> Cond {
    let [v] = vars([x]);
    Cond::new(format!("`{}` complete", x.trim_start_matches('?')), move |eg, _, s| complete_phys(eg, s[v]).is_some())
}

fn r2_4_no_condition() -> RuleDef {
    Rule::new("R2-4", Family::R2)
        .why("MUTANT: r complete (the placement condition is dropped)")
        .rw(rw("(shuffle ?p (erase ?r))", "?r").named("mutant").when(complete("?r")))
        .build()
}

fn subsets(n: usize) -> Vec<Vec<usize>> {
    (1..(1usize << n)).map(|m| (0..n).filter(|i| m & (1 << i) != 0).collect()).collect()
}

fn agg_subset_any_dims() -> RuleDef {
    let rhs = pat("(erase (lagg ?g ?k (shuffle ?d ?x)))").ast;
    let [g, x, d] = vars(["?g", "?x", "?d"]);
    Rule::new("agg-subset", Family::R2)
        .why("MUTANT: any non-empty d (the condition d ⊆ g is dropped)")
        .rw(Rw::apply(
            "(erase (lagg ?g ?k (shuffle ?g ?x)))",
            "(erase (lagg ?g ?k (shuffle d ?x)))",
            move |eg, _, s| {
                let (Some(g), Some(n)) = (dims(eg, s[g]).map(<[usize]>::to_vec), arity(eg, s[x])) else {
                    return vec![];
                };
                let mut out = Vec::new();
                for sub in subsets(n.min(4)) {
                    if sub != g {
                        let s = extend(eg, s, vec![(d, Bound::Leaf(Param::Dims(sub)))]);
                        out.extend(inst(eg, &rhs, &s));
                    }
                }
                out
            },
        )
        .named("mutant"))
        .build()
}

fn r1_3_any_key_map() -> RuleDef {
    Rule::new("R1-3", Family::R1)
        .why("MUTANT: none (the identity-key-map condition is dropped)")
        .rw(rw("(lfilter ?p (lmap ?f ?k ?x))", "(lmap ?f ?k (lfilter ?p ?x))").named("mutant"))
        .build()
}

fn r1_5_not_renamed() -> RuleDef {
    let [p, g, k] = vars(["?p", "?g", "?k"]);
    Rule::new("R1-5", Family::R1)
        .why("MUTANT: the predicate is not renamed to the group-by dims")
        .rw(rw("(lfilter ?p (lagg ?g ?k ?x))", "(lagg ?g ?k (lfilter ?p ?x))").named("mutant").when(Cond::new(
            "`k` not concat, `p` reads only group dims",
            move |eg, _, s| {
                let (Some(p), Some(g), Some(k)) = (pred(eg, s[p]), dims(eg, s[g]), kernel(eg, s[k])) else {
                    return false;
                };
                types::concat_params(k).is_none() && p.dims_read().iter().all(|&d| d < g.len())
            },
        )))
        .build()
}

fn r2_7b_both_broadcast() -> RuleDef {
    Rule::new("R2-7b", Family::R2)
        .why("MUTANT: p from the non-broadcast side, which is broadcast instead of shuffled")
        .rw(rw(
            "(shuffle ?p (erase (ljoin ?jl ?jr ?k (broadcast ?a) ?pb)))",
            "(ljoin ?jl ?jr ?k (broadcast ?a) (broadcast (erase ?pb)))",
        )
        .named("mutant"))
        .build()
}

fn r2_6_swapped() -> RuleDef {
    Rule::new("R2-6", Family::R2)
        .why("MUTANT: operands (and key lists) swapped, kernel kept")
        .rw(rw(
            "(erase (ljoin ?jl ?jr ?k (broadcast (erase ?pa)) ?pb))",
            "(erase (ljoin ?jr ?jl ?k ?pb (broadcast (erase ?pa))))",
        )
        .named("mutant"))
        .build()
}

fn lower_aggregate_no_shuffle() -> RuleDef {
    Rule::new("lower-aggregate", Family::Lowering)
        .why("MUTANT: none (the shuffle on the group-by dims is dropped)")
        .rw(rw("(aggregate ?g ?k (erase ?p))", "(erase (lagg ?g ?k ?p))").named("mutant"))
        .build()
}

fn matmul_bmm_wrong_shuffle() -> RuleDef {
    Rule::new("matmul-bmm", Family::Matmul)
        .why("MUTANT: Y shuffled on its join dim")
        .rw(rw(
            "(aggregate [0,2] kernel:matAdd (join [1] [0] kernel:matMul ?x ?y))",
            "(erase (lagg [0,2] kernel:matAdd (ljoin [1] [0] kernel:matMul (broadcast ?x) (shuffle [0] ?y))))",
        )
        .named("mutant"))
        .build()
}

fn matmul_assoc_wrong_key_order() -> RuleDef {
    Rule::new("matmul-assoc", Family::Order)
        .why("MUTANT: the new inner product keyed (column, row)")
        .rw(rw(
            "(aggregate [0,2] kernel:matAdd (join [1] [0] kernel:matMul \
             (aggregate [0,2] kernel:matAdd (join [1] [0] kernel:matMul ?x ?y)) ?z))",
            "(aggregate [0,2] kernel:matAdd (join [1] [0] kernel:matMul ?x \
             (aggregate [2,0] kernel:matAdd (join [1] [0] kernel:matMul ?y ?z))))",
        )
        .named("mutant"))
        .build()
}

fn agg_eager_not_linear() -> RuleDef {
    Rule::new("agg-eager", Family::Order)
        .why("MUTANT: linearity of the join kernel not checked")
        .rw(rw(
            "(aggregate [1] kernel:matAdd (join [1] [0] kernel:matAdd ?a ?b))",
            "(join [0] [0] kernel:matAdd (aggregate [1] kernel:matAdd ?a) ?b)",
        )
        .named("mutant"))
        .build()
}

/// `agg-eager/right` for any join kernel: unsound for `matAdd` and `max`
/// (not linear over the sum), with `b`'s join dim first or last.
fn agg_eager_right_not_linear() -> RuleDef {
    Rule::new("agg-eager", Family::Order)
        .why("MUTANT: linearity of the join kernel not checked (right operand)")
        .rw(rw(
            "(aggregate [0,1] kernel:matAdd (join [1] [0] ?k ?a ?b))",
            "(join [1] [0] ?k ?a (aggregate [0] kernel:matAdd ?b))",
        )
        .named("mutant-first"))
        .rw(rw(
            "(aggregate [0,1] kernel:matAdd (join [1] [1] ?k ?a ?b))",
            "(join [1] [0] ?k ?a (aggregate [1] kernel:matAdd ?b))",
        )
        .named("mutant-last"))
        .build()
}

fn r1_4_no_distributivity() -> RuleDef {
    let [m] = vars(["?m"]);
    Rule::new("R1-4", Family::R1)
        .why("MUTANT: identity key map (distributivity of m over agg is not checked)")
        .rw(rw("(lmap ?f ?m (lagg ?g ?agg ?x))", "(lagg ?g ?agg (lmap id ?m ?x))")
            .named("mutant")
            .when(identity_key_on_groups("?f", "?g"))
            .when(Cond::new("`m` is a kernel", move |eg, _, s| kernel(eg, s[m]).is_some())))
        .build()
}

/// R1-4 as it was before the arity fix: both directions and the
/// distributivity check as in the real rule, but push-down reads the arity
/// of the map's *output* (the matched class) where the map reads the
/// aggregate's keys.
fn r1_4_output_arity() -> RuleDef {
    let [f] = vars(["?f"]);
    let output_arity = Cond::new("`f` is the identity on the map's output arity", move |eg: &TraEGraph, id, s| {
        eg[id].data.phys().is_some_and(|t| is_identity_key(eg, s[f], t.rel.key_arity()))
    });
    Rule::new("R1-4", Family::R1)
        .why("MUTANT: m distributes over agg and the key map is the identity on keys of the map's output arity")
        .rw(rw("(lmap ?f ?m (lagg ?g ?agg ?x))", "(lagg ?g ?agg (lmap id ?m ?x))")
            .named("mutant-push-down")
            .when(output_arity)
            .when(distributes("?m", "?agg")))
        .rw(rw("(lagg ?g ?agg (lmap ?f ?m ?x))", "(lmap id ?m (lagg ?g ?agg ?x))")
            .named("mutant-pull-up")
            .when(identity_key("?f", "?x"))
            .when(distributes("?m", "?agg")))
        .build()
}

fn r2_3_unconditional() -> RuleDef {
    Rule::new("R2-3", Family::R2)
        .why("MUTANT: any key map (the paper's unconditional form)")
        .rw(rw("(shuffle ?d (erase (lmap ?f ?k ?x)))", "(lmap ?f ?k (shuffle ?d (erase ?x)))").named("mutant"))
        .build()
}

fn r2_5_wrong_positions() -> RuleDef {
    let [g, p] = vars(["?g", "?p"]);
    Rule::new("R2-5", Family::R2)
        .why("MUTANT: as R2-5, but the second phase groups by g")
        .rw(rw(
            "(erase (lagg ?g ?k (shuffle ?p (erase ?r))))",
            "(erase (lagg ?g ?k (shuffle ?pos (erase (lagg ?g ?k ?r)))))",
        )
        .named("mutant")
        .when(tra_rules::cond::dims_within("?p", "?g"))
        .when(tra_rules::cond::assoc_comm("?k"))
        .when(tra_rules::cond::partial_pre_aggregation("?r", "?g", "?k"))
        .bind(&[("?pos", "pos_g(p)")], move |eg, _, s| {
            let (g, p) = (dims(eg, s[g])?, dims(eg, s[p])?);
            let pos: Vec<usize> = p.iter().map(|d| g.iter().position(|x| x == d).expect("p ⊆ g")).collect();
            Some(vec![Bound::Leaf(Param::Dims(pos))])
        }))
        .build()
}

fn lower_join_keys_swapped() -> RuleDef {
    Rule::new("lower-join", Family::Lowering)
        .why("MUTANT: none (the key lists are swapped)")
        .rw(rw("(join ?jl ?jr ?k ?a (erase ?pb))", "(erase (ljoin ?jr ?jl ?k (broadcast ?a) ?pb))").named("mutant"))
        .build()
}

fn lower_filter_no_predicate() -> RuleDef {
    Rule::new("lower-filter", Family::Lowering)
        .why("MUTANT: none (the predicate is dropped)")
        .rw(rw("(filter ?pr (erase ?p))", "(erase ?p)").named("mutant"))
        .build()
}

fn lower_rekey_no_key_map() -> RuleDef {
    Rule::new("lower-rekey", Family::Lowering)
        .why("MUTANT: none (the key map is dropped)")
        .rw(rw("(rekey ?f (erase ?p))", "(erase ?p)").named("mutant"))
        .build()
}

fn lower_transform_no_kernel() -> RuleDef {
    Rule::new("lower-transform", Family::Lowering)
        .why("MUTANT: none (the kernel is dropped)")
        .rw(rw("(transform ?k (erase ?p))", "(erase ?p)").named("mutant"))
        .build()
}

fn lower_concat_other_array_dim() -> RuleDef {
    let [ds, x] = vars(["?ds", "?x"]);
    Rule::new("lower-concat", Family::Lowering)
        .why("MUTANT: none (the pieces are joined along the other array dim)")
        .rw(rw("(concat ?ds ?x)", "(erase (lagg ?g ?kernel (shuffle ?g ?x)))").named("mutant").bind(
            &[("?g", "g"), ("?kernel", "kernel:concat(kd,1-ad)")],
            move |eg, _, s| {
                let (d, lt) = (dims(eg, s[ds])?, logical(eg, s[x])?);
                let [kd, ad] = d[..] else { return None };
                let (g, kernel) = types::concat_as_aggregate(&lt.rel, kd, 1 - ad.min(1));
                Some(vec![Bound::Leaf(Param::Dims(g)), Bound::Leaf(Param::Kernel(kernel))])
            },
        ))
        .build()
}

fn r1_1_outer_only() -> RuleDef {
    Rule::new("R1-1", Family::R1)
        .why("MUTANT: none (the inner predicate is dropped)")
        .rw(rw("(lfilter ?p1 (lfilter ?p2 ?x))", "(lfilter ?p1 ?x)").named("mutant"))
        .build()
}

fn map_identity_any_key_map() -> RuleDef {
    Rule::new("map-identity", Family::R1)
        .why("MUTANT: none (the key map is not checked)")
        .rw(rw("(lmap ?f id ?x)", "?x").named("mutant"))
        .build()
}

fn r1_6_right_not_renamed() -> RuleDef {
    let [p, b] = vars(["?p", "?b"]);
    Rule::new("R1-6", Family::R1)
        .why("MUTANT: `p` reads only dims below `b`'s arity (not renamed to `b`'s dims)")
        .rw(rw("(lfilter ?p (ljoin ?jl ?jr ?k ?a ?b))", "(ljoin ?jl ?jr ?k ?a (lfilter ?p ?b))").named("mutant").when(
            Cond::new("`p` reads only dims below `b`'s arity", move |eg, _, s| {
                let (Some(p), Some(bt)) = (pred(eg, s[p]), complete_phys(eg, s[b])) else { return false };
                p.dims_read().iter().all(|&d| d < bt.rel.key_arity())
            }),
        ))
        .build()
}

fn r2_2_renamed_through_dims() -> RuleDef {
    let [p, d] = vars(["?p", "?d"]);
    Rule::new("R2-2", Family::R2)
        .why("MUTANT: the predicate is renamed through the shuffle dims (when that changes it)")
        .rw(rw("(lfilter ?p (shuffle ?d (erase ?x)))", "(shuffle ?d (erase (lfilter ?q ?x)))").named("mutant").bind(
            &[("?q", "p with dim i read as d[i]")],
            move |eg, _, s| {
                let (p, d) = (pred(eg, s[p])?, dims(eg, s[d])?);
                let q = p.remap(&|i| d.get(i).copied().unwrap_or(i));
                (q != *p).then(|| vec![Bound::Leaf(Param::Pred(q))])
            },
        ))
        .build()
}

fn matmul_cmm_one_phase() -> RuleDef {
    Rule::new("matmul-cmm", Family::Matmul)
        .why("MUTANT: `x`, `y` matrices (the partial sums are not summed again)")
        .rw(rw(
            "(aggregate [0,2] kernel:matAdd (join [1] [0] kernel:matMul ?x ?y))",
            "(erase (lagg [0,2] kernel:matAdd (ljoin [1] [0] kernel:matMul (shuffle [1] ?x) (shuffle [0] ?y))))",
        )
        .named("mutant")
        .when(matrices("?x", "?y")))
        .build()
}

fn matmul_rmm_no_final_shuffle() -> RuleDef {
    let [x, y] = vars(["?x", "?y"]);
    Rule::new("matmul-rmm", Family::Matmul)
        .why("MUTANT: as matmul-rmm, without the shuffle on (i,k) before the sum")
        .rw(rw(
            "(aggregate [0,2] kernel:matAdd (join [1] [0] kernel:matMul ?x ?y))",
            "(erase (lagg [0,2] kernel:matAdd (ljoin [0,1,2] [0,1,2] kernel:matMul \
             (shuffle [0,1,2] (erase (lmap ?kx id ?px))) (shuffle [0,1,2] (erase (lmap ?ky id ?py))))))",
        )
        .named("mutant")
        .when(matrices("?x", "?y"))
        .when(dense_nonempty("?x", "?y"))
        .reads_members()
        .bind(
            &[("?px", "member(?x)"), ("?py", "member(?y)"), ("?kx", "key:[k0,k1,0..K]"), ("?ky", "key:[0..I,k0,k1]")],
            move |eg, _, s| {
                let (fx, fy) = matrix_frontiers(eg, s[x], s[y])?;
                let (px, py) = (member(eg, s[x])?, member(eg, s[y])?);
                Some(vec![
                    Bound::Class(px),
                    Bound::Class(py),
                    Bound::Leaf(Param::Key(KeyFn::replicate(2, 2, fy[1]))),
                    Bound::Leaf(Param::Key(KeyFn::replicate(2, 0, fx[0]))),
                ])
            },
        ))
        .build()
}

fn lower_tile_other_dim() -> RuleDef {
    let [ds, p] = vars(["?ds", "?p"]);
    Rule::new("lower-tile", Family::Lowering)
        .why("MUTANT: none (the other array dim is tiled)")
        .rw(rw("(tile ?ds (erase ?p))", "(erase (lmap ?key ?kernel ?p))").named("mutant").bind(
            &[("?key", "key:[k0,…,k{n-1},0..pieces]"), ("?kernel", "kernel:tile(1-dim,size)")],
            move |eg, _, s| {
                let (d, pt) = (dims(eg, s[ds])?, complete_phys(eg, s[p])?);
                let [dim, size] = d[..] else { return None };
                let (key, kernel) = types::tile_as_map(&pt.rel, 1 - dim.min(1), size).ok()?;
                Some(vec![Bound::Leaf(Param::Key(key)), Bound::Leaf(Param::Kernel(kernel))])
            },
        ))
        .build()
}

fn r1_2_kernels_swapped() -> RuleDef {
    let [k1, k2] = vars(["?k1", "?k2"]);
    Rule::new("R1-2", Family::R1)
        .why("MUTANT: both key maps `id`, both kernels (composed inner after outer)")
        .rw(rw("(lmap id ?k1 (lmap id ?k2 ?x))", "(lmap id ?k ?x)").named("mutant").bind(
            &[("?k", "compose(k2,k1)")],
            move |eg, _, s| {
                let (a, b) = (kernel(eg, s[k1])?.clone(), kernel(eg, s[k2])?.clone());
                (a != b).then(|| vec![Bound::Leaf(Param::Kernel(tra_optimizer::KernelRef::compose(b, a)))])
            },
        ))
        .build()
}

fn r1_7_kernel_twice() -> RuleDef {
    let [m, k] = vars(["?m", "?k"]);
    Rule::new("R1-7", Family::R1)
        .why("MUTANT: `m` a kernel (composed into the join, and kept on the map)")
        .rw(rw("(lmap ?f ?m (ljoin ?jl ?jr ?k ?a ?b))", "(lmap ?f ?m (ljoin ?jl ?jr ?mk ?a ?b))").named("mutant").bind(
            &[("?mk", "compose(m,k)")],
            move |eg, _, s| {
                let (m, k) = (kernel(eg, s[m])?.clone(), kernel(eg, s[k])?.clone());
                Some(vec![Bound::Leaf(Param::Kernel(tra_optimizer::KernelRef::compose(m, k)))])
            },
        ))
        .build()
}

fn r2_7_every_join_dim() -> RuleDef {
    let [p, jl, jr] = vars(["?p", "?jl", "?jr"]);
    Rule::new("R2-7", Family::R2)
        .why("MUTANT: `p` ⊆ `jl`, but both sides shuffled on every join dim")
        .rw(rw(
            "(shuffle ?p (erase (ljoin ?jl ?jr ?k ?r ?s)))",
            "(ljoin ?jl ?jr ?k (shuffle ?pl (erase ?r)) (shuffle ?pr (erase ?s)))",
        )
        .named("mutant")
        .bind(&[("?pl", "jl"), ("?pr", "jr")], move |eg, _, s| {
            let (p, jl, jr) = (dims(eg, s[p])?, dims(eg, s[jl])?, dims(eg, s[jr])?);
            (p.iter().all(|d| jl.contains(d)) && p != jl)
                .then(|| vec![Bound::Leaf(Param::Dims(jl.to_vec())), Bound::Leaf(Param::Dims(jr.to_vec()))])
        }))
        .build()
}
