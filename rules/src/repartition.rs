//! Family `R2`: re-partition rules (paper 004, Table 2, R2-1 … R2-7), in the
//! two-sort form (see `tra_optimizer::egraph`), plus `agg-subset` and `R2-7b`.
//!
//! A P class is a relation *with* its sites: `shuffle` and `broadcast` are P
//! nodes whose value depends only on their erased (L) operand. Rules that
//! change where tuples live without changing the relation equate L classes
//! (`erase(…)`); rules that equate P classes must give both sides the same
//! placement, and the analysis checks that they do.

use crate::build::{
    add_checked, arity, complete_phys, dims, extend, inst, leaf, pat, phys, rw, vars, Bound, Family, Rule, RuleDef, Rw,
};
use crate::cond::{
    assoc_comm, complete_result, dims_of, dims_within, identity_key, partial_pre_aggregation, placed_by, placed_within,
    replicated,
};
use tra_optimizer::egraph::{Ia, Param};
use tra_optimizer::types::Placement;

const FAMILY: Family = Family::R2;

/// Every R2 rule, `agg-subset` and `R2-7b`.
pub fn rules() -> Vec<RuleDef> {
    vec![r2_1(), r2_2(), r2_3(), r2_4(), agg_subset(), r2_5(), r2_6(), r2_7(), r2_7b()]
}

/// `R2-1`: a re-partition, erased, is its operand.
///
/// No condition: a re-partition moves tuples, it does not change the relation
/// up to site (erase has set semantics: a replicated tuple counts once; a
/// partial aggregate's copies stay copies). The paper's "only the last of a
/// sequence of shuffles is needed" follows by congruence:
/// `shuffle(q, erase(shuffle(p, x))) = shuffle(q, x)`.
///
/// Arity audit: no key map and no condition on dims.
pub fn r2_1() -> RuleDef {
    Rule::new("R2-1", FAMILY)
        .why("a re-partition moves tuples; up to site the relation is the same (the paper's chain of shuffles follows by congruence)")
        .rw(rw("(erase (shuffle ?d ?x))", "?x").named("shuffle"))
        .rw(rw("(erase (broadcast ?x))", "?x").named("broadcast"))
        .build()
}

/// `R2-2`: filter before re-partitioning (shuffle or broadcast).
///
/// No condition: a tuple's site depends on its key only, and a filter keeps
/// keys; filtering first moves fewer tuples. The inner filter needs `x`
/// complete (checked by typing).
///
/// Arity audit: the predicate reads the keys of `x`, which neither the
/// filter nor the re-partition changes; `d` names `x`'s dims on both sides.
pub fn r2_2() -> RuleDef {
    Rule::new("R2-2", FAMILY)
        .why("a tuple's site depends on its key only, and a filter keeps keys: filtering first moves fewer tuples")
        .rw(rw("(lfilter ?p (shuffle ?d (erase ?x)))", "(shuffle ?d (erase (lfilter ?p ?x)))").named("shuffle"))
        .rw(rw("(lfilter ?p (broadcast (erase ?x)))", "(broadcast (erase (lfilter ?p ?x)))").named("broadcast"))
        .build()
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
    Rule::new("R2-3", FAMILY)
        .why("every site maps the whole broadcast relation; a shuffle routes by keys, which an identity key map keeps (the paper's unconditional form would route by old keys)")
        .rw(rw("(broadcast (erase (lmap ?f ?k ?x)))", "(lmap ?f ?k (broadcast (erase ?x)))").named("broadcast").both_ways())
        .rw(rw("(shuffle ?d (erase (lmap ?f ?k ?x)))", "(lmap ?f ?k (shuffle ?d (erase ?x)))")
            .named("shuffle")
            .both_ways()
            .when(identity_key("?f", "?x")))
        .build()
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
    let [rv] = vars(["?r"]);
    Rule::new("R2-4", FAMILY)
        .why("a complete relation already placed as the re-partition would place it is that re-partition; one class per placement keeps the graph small")
        .rw(rw("(shuffle ?p (erase ?r))", "?r").named("shuffle").when(placed_by("?r", "?p")))
        // The same equations read right to left, for every complete P class
        // whose placement is known: this makes all P members of an L class
        // with one placement a single class (they are the same physical
        // relation), which keeps the graph small.
        .rw(Rw::apply_pairs("(erase ?r)", "?r = (shuffle D (erase ?r)) or (broadcast (erase ?r))", move |eg, l, s| {
                let r = s[rv];
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
})
            .named("canonical")
            .unlisted()
            .checks("`r` complete and placed `Hash(D)` on several sites, or replicated"))
        .rw(rw("(broadcast (erase ?r))", "?r").named("broadcast").when(replicated("?r")))
        .rw(rw("(erase (lagg ?g ?k (shuffle ?q (erase ?r))))", "(erase (lagg ?g ?k ?r))")
            .named("aggregate")
            .when(placed_within("?r", "?g"))
            .when(complete_result()))
        .build()
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

/// `agg-subset`: an aggregation's shuffle on its group dims `g` may hash on
/// any non-empty `d ⊆ g` instead (in `g`'s order; only singletons when
/// `|g| > 4`).
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
    let [g, d] = vars(["?g", "?d"]);
    Rule::new("agg-subset", FAMILY)
        .why("hashing on a subset of the group keys still puts each group on one site")
        .rw(Rw::apply(
            "(erase (lagg ?g ?k (shuffle ?g ?x)))",
            "(erase (lagg ?g ?k (shuffle d ?x)))",
            move |eg, _, s| {
                let Some(g) = dims(eg, s[g]) else { return vec![] };
                let mut out = Vec::new();
                for sub in proper_subsets(g) {
                    let s = extend(eg, s, vec![(d, Bound::Leaf(Param::Dims(sub)))]);
                    out.extend(inst(eg, &rhs, &s));
                }
                out
            },
        )
        .checks("`∅ ≠ d ⊊ g`, in `g`'s order; only singletons when `|g| > 4`"))
        .build()
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
    let [g, p] = vars(["?g", "?p"]);
    Rule::new("R2-5", FAMILY)
        .why("an associative, commutative aggregation can pre-aggregate where the tuples are and finish after a smaller shuffle; the guard also stops self-rewriting")
        .rw(rw(
            "(erase (lagg ?g ?k (shuffle ?p (erase ?r))))",
            "(erase (lagg ?idg ?k (shuffle ?pos (erase (lagg ?g ?k ?r)))))",
        )
        .when(dims_within("?p", "?g"))
        .when(assoc_comm("?k"))
        .when(partial_pre_aggregation("?r", "?g", "?k"))
        .bind(&[("?idg", "id_g"), ("?pos", "pos_g(p)")], move |eg, _, s| {
            let (g, p) = (dims(eg, s[g])?, dims(eg, s[p])?);
            let pos: Vec<usize> = p.iter().map(|d| g.iter().position(|x| x == d).expect("p ⊆ g")).collect();
            let idg: Vec<usize> = (0..g.len()).collect();
            Some(vec![Bound::Leaf(Param::Dims(idg)), Bound::Leaf(Param::Dims(pos))])
        }))
        .build()
}

/// `R2-6`: the three ways to place a join's operands are equal up to site:
/// `(erase (ljoin … (broadcast (erase ?pa)) ?pb))` =
/// `(erase (ljoin … ?pa (broadcast (erase ?pb))))` =
/// `(erase (ljoin ?jl ?jr … (shuffle ?jl (erase ?pa)) (shuffle ?jr (erase ?pb))))`.
///
/// No condition: in each form every matching pair meets on some site exactly
/// once (a broadcast operand is everywhere; co-partitioned operands are
/// hashed on matching join dims). From each form, the other two are added,
/// once per match: a match applied from one form is skipped by the other two
/// (`same_equality_as`), which would only build the same forms again.
///
/// Arity audit: `jl` and `jr` keep naming each operand's own dims in every
/// form; no key map.
pub fn r2_6() -> RuleDef {
    r2_6_built(true)
}

/// `R2-6`, its three rewrites sharing their matches or not (the test that
/// sharing builds the same graph compares both).
fn r2_6_built(shared: bool) -> RuleDef {
    let group = |r: Rw| if shared { r.same_equality_as("placements") } else { r };
    const BL: &str = "(erase (ljoin ?jl ?jr ?k (broadcast (erase ?pa)) ?pb))";
    const BR: &str = "(erase (ljoin ?jl ?jr ?k ?pa (broadcast (erase ?pb))))";
    const CO: &str = "(erase (ljoin ?jl ?jr ?k (shuffle ?jl (erase ?pa)) (shuffle ?jr (erase ?pb))))";
    Rule::new("R2-6", FAMILY)
        .why("in each form every matching pair meets on some site exactly once")
        .rw(group(rw(BL, BR).or(CO).named("from-bcast-left")))
        .rw(group(rw(BR, BL).or(CO).named("from-bcast-right").unlisted()))
        .rw(group(rw(CO, BL).or(BR).named("from-co-partition").unlisted()))
        .build()
}

/// `R2-7`: a shuffle of a join's output on left join dims is a join of
/// operands shuffled on matching join dims.
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
    let [p, jl, jr] = vars(["?p", "?jl", "?jr"]);
    Rule::new("R2-7", FAMILY)
        .why("operands co-partitioned on matching join dims meet, and the join's output is placed `Hash(p)` like the left side")
        .rw(rw(
            "(shuffle ?p (erase (ljoin ?jl ?jr ?k ?r ?s)))",
            "(ljoin ?jl ?jr ?k (shuffle ?p (erase ?r)) (shuffle ?pr (erase ?s)))",
        )
        .checks("every dim of `p` is a left join dim `jl[i]`; `p_r` = the matching `jr[i]`")
        .bind(&[("?pr", "p_r")], move |eg, _, s| {
            let (p, jl, jr) = (dims(eg, s[p])?, dims(eg, s[jl])?, dims(eg, s[jr])?);
            let pr: Vec<usize> = p.iter().map(|d| jl.iter().position(|x| x == d).map(|i| jr[i])).collect::<Option<_>>()?;
            Some(vec![Bound::Leaf(Param::Dims(pr))])
        }))
        .build()
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
    let [p, jl, jr, a, pb] = vars(["?p", "?jl", "?jr", "?a", "?pb"]);
    Rule::new("R2-7b", FAMILY)
        .why("the broadcast side is everywhere, so the join's output is placed as its other side is")
        .rw(rw(
            "(shuffle ?p (erase (ljoin ?jl ?jr ?k (broadcast ?a) ?pb)))",
            "(ljoin ?jl ?jr ?k (broadcast ?a) (shuffle ?pp (erase ?pb)))",
        )
        .named("bcast-left")
        .checks("`p` names only output dims from `pb` (right non-join dims, or left join dims); `p'` = their positions in `pb`")
        .bind(&[("?pp", "p'")], move |eg, _, s| {
            let (p, jl, jr) = (dims(eg, s[p])?, dims(eg, s[jl])?, dims(eg, s[jr])?);
            let (la, bt) = (arity(eg, s[a])?, phys(eg, s[pb])?);
            let rest: Vec<usize> = (0..bt.rel.key_arity()).filter(|d| !jr.contains(d)).collect();
            let pp: Vec<usize> = p
                .iter()
                .map(|&d| if d >= la { rest.get(d - la).copied() } else { jl.iter().position(|&x| x == d).map(|i| jr[i]) })
                .collect::<Option<_>>()?;
            Some(vec![Bound::Leaf(Param::Dims(pp))])
        }))
        .rw(rw(
            "(shuffle ?p (erase (ljoin ?jl ?jr ?k ?pa (broadcast ?b))))",
            "(ljoin ?jl ?jr ?k (shuffle ?p (erase ?pa)) (broadcast ?b))",
        )
        .named("bcast-right")
        .when(dims_of("?p", "?pa")))
        .build()
}

#[cfg(test)]
mod tests {
    use super::{proper_subsets, r2_6_built};
    use crate::build::{rw, Rule};
    use tra_optimizer::optimize::{optimize, Limits};
    use tra_optimizer::Program;

    /// A match applied from one placement form adds the other two, so the
    /// other rewrites skipping it build exactly the graph they would have
    /// built: same nodes, classes and iterations, and plans of the same cost,
    /// on every example.
    #[test]
    fn placements_applied_once_per_match_build_the_same_graph() {
        let shared = crate::all();
        let apart: Vec<_> =
            crate::all().into_iter().map(|r| if r.name == "R2-6" { r2_6_built(false) } else { r }).collect();
        let dir = format!("{}/../examples", env!("CARGO_MANIFEST_DIR"));
        let mut seen = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|x| x != "json") {
                continue;
            }
            let Ok(p) = Program::from_json(&std::fs::read_to_string(&path).unwrap()) else { continue };
            let (a, b) =
                (optimize(&p, &shared, &Limits::default()).unwrap(), optimize(&p, &apart, &Limits::default()).unwrap());
            let what = path.display();
            let size = |a: &tra_optimizer::optimize::OptimizeAnswer| {
                (a.stats.egraph_nodes, a.stats.egraph_classes, a.stats.iterations)
            };
            assert_eq!(size(&a), size(&b), "{what}: (nodes, classes, iterations)");
            assert_eq!(
                (a.cost.network_floats, a.cost.flops),
                (b.cost.network_floats, b.cost.flops),
                "{what}: the chosen plan's cost"
            );
            seen += 1;
        }
        assert!(seen >= 10, "only {seen} examples read from {dir}");
    }

    #[test]
    #[should_panic(expected = "state different forms")]
    fn rewrites_sharing_matches_must_state_the_same_forms() {
        const A: &str = "(broadcast (erase ?x))";
        const B: &str = "(shuffle [0] (erase ?x))";
        const C: &str = "(shuffle [1] (erase ?x))";
        Rule::new("test-equality", crate::Family::R2)
            .why("a test")
            .rw(rw(A, B).same_equality_as("g"))
            .rw(rw(B, C).same_equality_as("g"))
            .build();
    }

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
