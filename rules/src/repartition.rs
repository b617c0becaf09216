//! Family `R2`: re-partition rules (paper 004, Table 2, R2-1 … R2-7), in the
//! two-sort form (see `tra_optimizer::egraph`), plus `agg-subset` and `R2-7b`.
//!
//! A P class is a relation *with* its sites: `shuffle` and `broadcast` are P
//! nodes whose value depends only on their erased (L) operand. Rules that
//! change where tuples live without changing the relation equate L classes
//! (`erase(…)`); rules that equate P classes must give both sides the same
//! placement, and the analysis checks that they do.

use crate::support::{
    add_checked, complete_phys, dims, get, inst, is_identity_key, kernel, leaf, logical, pat, phys, rewrite,
    rewrite_pairs, subset, Guard,
};
use egg::{Id, Subst};
use tra_optimizer::egraph::{Ia, Param, TraEGraph};
use tra_optimizer::rule::{RuleDef, TraRewrite};
use tra_optimizer::types::{self, Placement};

const FAMILY: &str = "R2";

fn def(name: &'static str, equation: &'static str, condition: &'static str, rewrites: Vec<TraRewrite>) -> RuleDef {
    RuleDef { name, family: FAMILY, equation, condition, lowering: false, rewrites }
}

/// Every R2 rule, `agg-subset` and `R2-7b`.
pub fn rules() -> Vec<RuleDef> {
    vec![r2_1(), r2_2(), r2_3(), r2_4(), agg_subset(), r2_5(), r2_6(), r2_7(), r2_7b()]
}

fn with(eg: &mut TraEGraph, s: &Subst, binds: Vec<(&str, Param)>) -> Subst {
    crate::support::extend(eg, s, binds)
}

/// `R2-1`: `(erase (shuffle ?d ?x)) = ?x` and `(erase (broadcast ?x)) = ?x`.
///
/// No condition: a re-partition moves tuples, it does not change the relation
/// up to site (erase has set semantics: a replicated tuple counts once; a
/// partial aggregate's copies stay copies). The paper's "only the last of a
/// sequence of shuffles is needed" follows by congruence:
/// `shuffle(q, erase(shuffle(p, x))) = shuffle(q, x)`.
///
/// Arity audit: no key map and no condition on dims.
pub fn r2_1() -> RuleDef {
    def(
        "R2-1",
        "(erase (shuffle ?d ?x)) = ?x; (erase (broadcast ?x)) = ?x",
        "none: a re-partition does not change the relation up to site; the paper's chain of shuffles follows by \
         congruence.",
        vec![
            rewrite("R2-1", "R2-1/shuffle", "(erase (shuffle ?d ?x))", Guard::Strict, |_, _, s| vec![get(s, "?x")]),
            rewrite("R2-1", "R2-1/broadcast", "(erase (broadcast ?x))", Guard::Strict, |_, _, s| vec![get(s, "?x")]),
        ],
    )
}

/// `R2-2`: `(lfilter ?p (shuffle ?d (erase ?x))) = (shuffle ?d (erase (lfilter ?p ?x)))`,
/// and the same with `broadcast`: filter before re-partitioning.
///
/// No condition: a tuple's site depends on its key only, and a filter keeps
/// keys; filtering first moves fewer tuples. The inner filter needs `x`
/// complete (checked by typing).
///
/// Arity audit: the predicate reads the keys of `x`, which neither the
/// filter nor the re-partition changes; `d` names `x`'s dims on both sides.
pub fn r2_2() -> RuleDef {
    let shuf = pat("(shuffle ?d (erase (lfilter ?p ?x)))").ast;
    let bcast = pat("(broadcast (erase (lfilter ?p ?x)))").ast;
    def(
        "R2-2",
        "(lfilter ?p (shuffle ?d (erase ?x))) = (shuffle ?d (erase (lfilter ?p ?x))); same with broadcast",
        "none: placement depends on keys only and a filter keeps keys.",
        vec![
            rewrite("R2-2", "R2-2/shuffle", "(lfilter ?p (shuffle ?d (erase ?x)))", Guard::Strict, move |eg, _, s| {
                inst(eg, &shuf, s).into_iter().collect()
            }),
            rewrite("R2-2", "R2-2/broadcast", "(lfilter ?p (broadcast (erase ?x)))", Guard::Strict, move |eg, _, s| {
                inst(eg, &bcast, s).into_iter().collect()
            }),
        ],
    )
}

/// `R2-3`: re-partitions commute with local maps.
///
/// `(broadcast (erase (lmap ?f ?k ?x))) = (lmap ?f ?k (broadcast (erase ?x)))`
/// for any local map (every site maps the whole relation), both directions;
/// `(shuffle ?d (erase (lmap ?f ?k ?x))) = (lmap ?f ?k (shuffle ?d (erase ?x)))`
/// when the key map `f` is the identity (the tuple's key, hence its site, is
/// the same before and after the map), both directions. The paper writes
/// R2-3 for any key map: with one that changes keys, the shuffle would send
/// tuples by their old keys, which is a different placement.
///
/// Arity audit: `f` is checked against the arity of the map's input `x`
/// (for both directions the map reads `x` or its re-partition, of the same
/// arity); `d` names dims of the map's output, which are `x`'s when `f` is
/// the identity.
pub fn r2_3() -> RuleDef {
    let b_down = pat("(lmap ?f ?k (broadcast (erase ?x)))").ast;
    let b_up = pat("(broadcast (erase (lmap ?f ?k ?x)))").ast;
    let s_down = pat("(lmap ?f ?k (shuffle ?d (erase ?x)))").ast;
    let s_up = pat("(shuffle ?d (erase (lmap ?f ?k ?x)))").ast;
    let id_key = |eg: &TraEGraph, s: &Subst| {
        complete_phys(eg, get(s, "?x")).is_some_and(|t| is_identity_key(eg, get(s, "?f"), t.rel.key_arity()))
    };
    def(
        "R2-3",
        "(broadcast (erase (lmap ?f ?k ?x))) = (lmap ?f ?k (broadcast (erase ?x))); \
         (shuffle ?d (erase (lmap ?f ?k ?x))) = (lmap ?f ?k (shuffle ?d (erase ?x)))",
        "broadcast: none; shuffle: the key map f is the identity (the paper's unconditional form would route \
         tuples by their old keys).",
        vec![
            rewrite(
                "R2-3",
                "R2-3/broadcast-down",
                "(broadcast (erase (lmap ?f ?k ?x)))",
                Guard::Strict,
                move |eg, _, s| inst(eg, &b_down, s).into_iter().collect(),
            ),
            rewrite(
                "R2-3",
                "R2-3/broadcast-up",
                "(lmap ?f ?k (broadcast (erase ?x)))",
                Guard::Strict,
                move |eg, _, s| inst(eg, &b_up, s).into_iter().collect(),
            ),
            rewrite(
                "R2-3",
                "R2-3/shuffle-down",
                "(shuffle ?d (erase (lmap ?f ?k ?x)))",
                Guard::Strict,
                move |eg, _, s| {
                    if !id_key(eg, s) {
                        return vec![];
                    }
                    inst(eg, &s_down, s).into_iter().collect()
                },
            ),
            rewrite(
                "R2-3",
                "R2-3/shuffle-up",
                "(lmap ?f ?k (shuffle ?d (erase ?x)))",
                Guard::Strict,
                move |eg, _, s| {
                    if !id_key(eg, s) {
                        return vec![];
                    }
                    inst(eg, &s_up, s).into_iter().collect()
                },
            ),
        ],
    )
}

/// `R2-4`: a re-partition that changes nothing is dropped.
///
/// P form: `(shuffle ?p (erase ?r)) = ?r` when `r` is complete and its
/// placement is exactly `Hash(p)` (then the shuffle sends every tuple where
/// it already is), or on one site; `(broadcast (erase ?r)) = ?r` when `r` is
/// complete and replicated. The same equations are also applied right to
/// left (`R2-4/canonical`): every complete P class `r` placed `Hash(d)` (or
/// replicated) gets the member `(shuffle d (erase ?r))` (or `(broadcast (erase
/// ?r))`). A complete relation's placement determines its layout, so all P
/// members of one L class with one known placement are the same physical
/// relation, and this makes them one class: without it, every plan of a
/// sub-expression is a separate class and the graph grows with their product
/// (a chain of 12 matmuls reaches 200 000 nodes instead of under 2 000).
///
/// Paper form, at L level:
/// `(erase (lagg ?g ?k (shuffle ?q (erase ?r)))) = (erase (lagg ?g ?k ?r))`
/// when `r` is complete and `Hash(D)` with `D ⊆ g` (as sets) or replicated,
/// and the left side is complete (so `q` groups whole groups too): both sides
/// then aggregate every group on one site. The paper's "partDims ⊆
/// groupByKeys" speaks of the shuffle's dims, which is garbled: what matters
/// is how `r` is already placed.
///
/// Arity audit: `p` and `r`'s placement dims are both dims of `r`; in the
/// paper form, `D` (dims of `r`) and `g` (group-by dims, also read from the
/// aggregation's input) are compared in the same space. No key map.
pub fn r2_4() -> RuleDef {
    let agg = pat("(erase (lagg ?g ?k ?r))").ast;
    def(
        "R2-4",
        "(shuffle ?p (erase ?r)) = ?r; (broadcast (erase ?r)) = ?r (both ways); \
         (erase (lagg ?g ?k (shuffle ?q (erase ?r)))) = (erase (lagg ?g ?k ?r))",
        "P form: r complete and placed Hash(p) (replicated for broadcast, anything on one site); paper form: r \
         complete and Hash(D) with D ⊆ g or replicated, and the left side complete (the paper's condition on \
         the shuffle's dims is garbled).",
        vec![
            rewrite("R2-4", "R2-4/shuffle", "(shuffle ?p (erase ?r))", Guard::Strict, |eg, _, s| {
                let (Some(p), Some(rt)) = (dims(eg, get(s, "?p")), complete_phys(eg, get(s, "?r"))) else {
                    return vec![];
                };
                let one_site = eg.analysis.sites == 1 && rt.placement == Placement::Replicated;
                if one_site || rt.placement == Placement::Hash(p.to_vec()) {
                    vec![get(s, "?r")]
                } else {
                    vec![]
                }
            }),
            // The same equations read right to left, for every complete P
            // class whose placement is known: this makes all P members of an
            // L class with one placement a single class (they are the same
            // physical relation), which keeps the graph small.
            rewrite_pairs("R2-4", "R2-4/canonical", "(erase ?r)", Guard::Strict, move |eg, l, s| {
                let r = get(s, "?r");
                let Some(rt) = complete_phys(eg, r) else { return vec![] };
                let node = match &rt.placement {
                    Placement::Hash(d) if eg.analysis.sites > 1 => {
                        let d = leaf(eg, Param::Dims(d.clone()));
                        Ia::Shuffle([d, l])
                    }
                    Placement::Replicated => Ia::Broadcast(l),
                    _ => return vec![],
                };
                add_checked(eg, node).map(|c| (r, c)).into_iter().collect()
            }),
            rewrite("R2-4", "R2-4/broadcast", "(broadcast (erase ?r))", Guard::Strict, |eg, _, s| match complete_phys(
                eg,
                get(s, "?r"),
            ) {
                Some(rt) if rt.placement == Placement::Replicated => vec![get(s, "?r")],
                _ => vec![],
            }),
            rewrite(
                "R2-4",
                "R2-4/aggregate",
                "(erase (lagg ?g ?k (shuffle ?q (erase ?r))))",
                Guard::Strict,
                move |eg, id, s| {
                    let (Some(g), Some(rt)) = (dims(eg, get(s, "?g")), complete_phys(eg, get(s, "?r"))) else {
                        return vec![];
                    };
                    if !logical(eg, id).is_some_and(|l| l.complete) {
                        return vec![];
                    }
                    let placed = match &rt.placement {
                        Placement::Replicated => true,
                        Placement::Hash(d) => subset(d, g),
                        Placement::Any => false,
                    };
                    if !placed {
                        return vec![];
                    }
                    inst(eg, &agg, s).into_iter().collect()
                },
            ),
        ],
    )
}

/// Non-empty proper subsets of `g`, each in `g`'s order; only singletons when
/// `g` has more than four dims (to bound the enumeration).
fn proper_subsets(g: &[usize]) -> Vec<Vec<usize>> {
    if g.len() > 4 {
        return if g.len() > 1 { g.iter().map(|&d| vec![d]).collect() } else { vec![] };
    }
    let n = g.len();
    (1..(1usize << n) - 1).map(|mask| (0..n).filter(|i| mask & (1 << i) != 0).map(|i| g[i]).collect()).collect()
}

/// `agg-subset`: `(erase (lagg ?g ?k (shuffle ?g ?x))) = (erase (lagg ?g ?k (shuffle d ?x)))`
/// for every non-empty `d ⊆ g` (in `g`'s order; only singletons when `|g| > 4`).
///
/// Condition: `∅ ≠ d ⊆ g`. Hashing on a subset of the group keys still puts
/// each group on one site, so the local aggregation is complete; shuffle dims
/// are input dims, so nothing is renamed. This lets a relation already placed
/// on some of the group dims skip the shuffle (with R2-4).
///
/// Arity audit: `d` and `g` are both dims of the aggregation's input; no key
/// map.
pub fn agg_subset() -> RuleDef {
    let rhs = pat("(erase (lagg ?g ?k (shuffle ?d ?x)))").ast;
    def(
        "agg-subset",
        "(erase (lagg ?g ?k (shuffle ?g ?x))) = (erase (lagg ?g ?k (shuffle d ?x))), ∅ ≠ d ⊆ g",
        "d is a non-empty subset of the group-by dims (every group still on one site); singletons only when |g| > 4.",
        vec![rewrite(
            "agg-subset",
            "agg-subset",
            "(erase (lagg ?g ?k (shuffle ?g ?x)))",
            Guard::Strict,
            move |eg, _, s| {
                let Some(g) = dims(eg, get(s, "?g")) else { return vec![] };
                let mut out = Vec::new();
                for d in proper_subsets(g) {
                    let s = with(eg, s, vec![("?d", Param::Dims(d))]);
                    out.extend(inst(eg, &rhs, &s));
                }
                out
            },
        )],
    )
}

/// `R2-5`: two-phase aggregation, in its typed two-sort form:
/// `(erase (lagg ?g ?k (shuffle ?p (erase ?r)))) =
/// (erase (lagg id_g ?k (shuffle pos_g(p) (erase (lagg ?g ?k ?r)))))`,
/// `id_g = [0..|g|)`, `pos_g(p)` = the positions of `p`'s dims inside `g`.
///
/// Condition: `p ⊆ g`; `k` associative and commutative; `r` complete and
/// `Hash(D)` with `D ⊄ g`, so the pre-aggregation on `r`'s sites is really
/// partial (checked on its type). The partial results are keyed by `g` (in
/// `g`'s order), so the second phase groups by all of their dims and shuffles
/// by `p`'s positions among them. The paper's "groupByKeys ⊂ partDims" is
/// garbled. The guard (the pre-aggregation must be partial, `r` complete)
/// also stops the rule from rewriting its own output forever.
///
/// Arity audit: `p`, `g` and `D` are dims of the first phase's input `r`; the
/// second phase reads the partial results, whose dims are *positions in `g`*
/// (`id_g`, `pos_g(p)`), not `r`'s dims.
pub fn r2_5() -> RuleDef {
    let rhs = pat("(erase (lagg ?idg ?k (shuffle ?pos (erase (lagg ?g ?k ?r)))))").ast;
    def(
        "R2-5",
        "(erase (lagg ?g ?k (shuffle ?p (erase ?r)))) = (erase (lagg id_g ?k (shuffle pos_g(p) (erase (lagg ?g ?k ?r)))))",
        "p ⊆ g; k associative and commutative; r complete and Hash(D) with D ⊄ g, so that the pre-aggregation \
         is really partial (the paper's subset condition is garbled; the guard also stops self-rewriting).",
        vec![rewrite(
            "R2-5",
            "R2-5",
            "(erase (lagg ?g ?k (shuffle ?p (erase ?r))))",
            Guard::Strict,
            move |eg, _, s| {
                let (Some(g), Some(p), Some(k)) = (dims(eg, get(s, "?g")), dims(eg, get(s, "?p")), kernel(eg, get(s, "?k")))
                else {
                    return vec![];
                };
                let Some(rt) = complete_phys(eg, get(s, "?r")) else { return vec![] };
                if !subset(p, g) || !k.is_assoc_comm() {
                    return vec![];
                }
                match &rt.placement {
                    Placement::Hash(d) if !subset(d, g) => {}
                    _ => return vec![],
                }
                match types::local_aggregate(rt, g, k, eg.analysis.sites) {
                    Ok(pre) if !pre.complete => {}
                    _ => return vec![],
                }
                let pos: Vec<usize> = p.iter().map(|d| g.iter().position(|x| x == d).expect("p ⊆ g")).collect();
                let idg: Vec<usize> = (0..g.len()).collect();
                let s = with(eg, s, vec![("?idg", Param::Dims(idg)), ("?pos", Param::Dims(pos))]);
                inst(eg, &rhs, &s).into_iter().collect()
            },
        )],
    )
}

/// `R2-6`: the three ways to place a join's operands are equal up to site:
/// `(erase (ljoin … (broadcast (erase ?pa)) ?pb))` =
/// `(erase (ljoin … ?pa (broadcast (erase ?pb))))` =
/// `(erase (ljoin ?jl ?jr … (shuffle ?jl (erase ?pa)) (shuffle ?jr (erase ?pb))))`.
///
/// No condition: in each form every matching pair meets on some site exactly
/// once (a broadcast operand is everywhere; co-partitioned operands are
/// hashed on matching join dims). From each form, the other two are added.
///
/// Arity audit: `jl` and `jr` keep naming each operand's own dims in every
/// form; no key map.
pub fn r2_6() -> RuleDef {
    const BL: &str = "(erase (ljoin ?jl ?jr ?k (broadcast (erase ?pa)) ?pb))";
    const BR: &str = "(erase (ljoin ?jl ?jr ?k ?pa (broadcast (erase ?pb))))";
    const CO: &str = "(erase (ljoin ?jl ?jr ?k (shuffle ?jl (erase ?pa)) (shuffle ?jr (erase ?pb))))";
    let make = |egg_name: &str, from: &str, to: [&str; 2]| {
        let to = [pat(to[0]).ast, pat(to[1]).ast];
        rewrite("R2-6", egg_name, from, Guard::Strict, move |eg, _, s| {
            let mut out: Vec<Id> = inst(eg, &to[0], s).into_iter().collect();
            out.extend(inst(eg, &to[1], s));
            out
        })
    };
    def(
        "R2-6",
        "(erase (ljoin … (broadcast (erase ?pa)) ?pb)) = (erase (ljoin … ?pa (broadcast (erase ?pb)))) = \
         (erase (ljoin ?jl ?jr … (shuffle ?jl (erase ?pa)) (shuffle ?jr (erase ?pb))))",
        "none: each form joins every matching pair exactly once.",
        vec![
            make("R2-6/from-bcast-left", BL, [BR, CO]),
            make("R2-6/from-bcast-right", BR, [BL, CO]),
            make("R2-6/from-co-partition", CO, [BL, BR]),
        ],
    )
}

/// `R2-7`: `(shuffle ?p (erase (ljoin ?jl ?jr ?k ?r ?s))) =
/// (ljoin ?jl ?jr ?k (shuffle p (erase ?r)) (shuffle p_r (erase ?s)))`.
///
/// Condition: every dim of `p` is a left join dim (output position `jl[i]`);
/// `p_r` names the matching right join dims `jr[i]`. Then the operands are
/// co-partitioned on matching join dims (every pair meets), and the join's
/// output is placed `Hash(p)`, exactly like the left side. The paper's
/// "partDims ≅ joinKeysL ≅ joinKeysR" is this.
///
/// Arity audit: `p` names dims of the join's *output*; a left join dim keeps
/// its position in the output (the left key comes first), so `p ⊆ jl`
/// compares like with like, and `p_r` is translated to the right operand's
/// dims through `jr`.
pub fn r2_7() -> RuleDef {
    let rhs = pat("(ljoin ?jl ?jr ?k (shuffle ?p (erase ?r)) (shuffle ?pr (erase ?s)))").ast;
    def(
        "R2-7",
        "(shuffle ?p (erase (ljoin ?jl ?jr ?k ?r ?s))) = (ljoin ?jl ?jr ?k (shuffle p (erase ?r)) (shuffle p_r (erase ?s)))",
        "every dim of p is a left join dim jl[i]; p_r = the matching jr[i].",
        vec![rewrite("R2-7", "R2-7", "(shuffle ?p (erase (ljoin ?jl ?jr ?k ?r ?s)))", Guard::Strict, move |eg, _, s| {
            let (Some(p), Some(jl), Some(jr)) = (dims(eg, get(s, "?p")), dims(eg, get(s, "?jl")), dims(eg, get(s, "?jr")))
            else {
                return vec![];
            };
            let pr: Option<Vec<usize>> =
                p.iter().map(|d| jl.iter().position(|x| x == d).map(|i| jr[i])).collect();
            let Some(pr) = pr else { return vec![] };
            let s = with(eg, s, vec![("?pr", Param::Dims(pr))]);
            inst(eg, &rhs, &s).into_iter().collect()
        })],
    )
}

/// `R2-7b`: a shuffle of a broadcast join is a join with the other side shuffled:
/// `(shuffle ?p (erase (ljoin ?jl ?jr ?k (broadcast ?a) ?pb))) =
/// (ljoin ?jl ?jr ?k (broadcast ?a) (shuffle p' (erase ?pb)))`, and the mirror
/// `(shuffle ?p (erase (ljoin … ?pa (broadcast ?b)))) = (ljoin … (shuffle ?p (erase ?pa)) (broadcast ?b))`.
///
/// Condition: `p` names only output dims that come from the non-broadcast
/// side. Right side: a right non-join dim (position `≥` the left arity) or a
/// left join dim (equal to its right join dim on every pair); `p'` = their
/// positions in the right operand, so that the join's output is placed
/// `Hash(p)`. Left side: dims below the left arity; `p'' = p`.
///
/// Arity audit: `p` names dims of the join's output; the left arity `la` is
/// the *operand's* arity, and `p'` is translated into the right operand's
/// dims (its non-join dims in order after `la`, or `jr[i]` for a left join
/// dim).
pub fn r2_7b() -> RuleDef {
    let left_bcast = pat("(ljoin ?jl ?jr ?k (broadcast ?a) (shuffle ?pp (erase ?pb)))").ast;
    let right_bcast = pat("(ljoin ?jl ?jr ?k (shuffle ?p (erase ?pa)) (broadcast ?b))").ast;
    def(
        "R2-7b",
        "(shuffle ?p (erase (ljoin … (broadcast ?a) ?pb))) = (ljoin … (broadcast ?a) (shuffle p' (erase ?pb))); mirror",
        "p names only output dims from the non-broadcast side; p' = their positions in that operand.",
        vec![
            rewrite(
                "R2-7b",
                "R2-7b/bcast-left",
                "(shuffle ?p (erase (ljoin ?jl ?jr ?k (broadcast ?a) ?pb)))",
                Guard::Strict,
                move |eg, _, s| {
                    let (Some(p), Some(jl), Some(jr)) =
                        (dims(eg, get(s, "?p")), dims(eg, get(s, "?jl")), dims(eg, get(s, "?jr")))
                    else {
                        return vec![];
                    };
                    let (Some(la), Some(bt)) = (crate::support::arity(eg, get(s, "?a")), phys(eg, get(s, "?pb")))
                    else {
                        return vec![];
                    };
                    let rest: Vec<usize> = (0..bt.rel.key_arity()).filter(|d| !jr.contains(d)).collect();
                    let pp: Option<Vec<usize>> = p
                        .iter()
                        .map(|&d| {
                            if d >= la {
                                rest.get(d - la).copied()
                            } else {
                                jl.iter().position(|&x| x == d).map(|i| jr[i])
                            }
                        })
                        .collect();
                    let Some(pp) = pp else { return vec![] };
                    let s = with(eg, s, vec![("?pp", Param::Dims(pp))]);
                    inst(eg, &left_bcast, &s).into_iter().collect()
                },
            ),
            rewrite(
                "R2-7b",
                "R2-7b/bcast-right",
                "(shuffle ?p (erase (ljoin ?jl ?jr ?k ?pa (broadcast ?b))))",
                Guard::Strict,
                move |eg, _, s| {
                    let (Some(p), Some(at)) = (dims(eg, get(s, "?p")), phys(eg, get(s, "?pa"))) else {
                        return vec![];
                    };
                    if p.iter().any(|&d| d >= at.rel.key_arity()) {
                        return vec![];
                    }
                    inst(eg, &right_bcast, s).into_iter().collect()
                },
            ),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::proper_subsets;

    #[test]
    fn subsets_in_order() {
        assert_eq!(proper_subsets(&[0, 2]), vec![vec![0], vec![2]]);
        assert_eq!(proper_subsets(&[3]), Vec::<Vec<usize>>::new());
        assert_eq!(proper_subsets(&[]), Vec::<Vec<usize>>::new());
        let s = proper_subsets(&[0, 1, 2]);
        assert_eq!(s.len(), 6);
        assert!(s.contains(&vec![0, 2]) && s.contains(&vec![1, 2]) && !s.contains(&vec![0, 1, 2]));
        assert_eq!(proper_subsets(&[0, 1, 2, 3, 4]).len(), 5);
    }
}
