//! Family `R1`: lambda composition (paper 004, Table 2, R1-1 … R1-7), on P
//! operators, plus `map-identity`.
//!
//! All of these are exact equalities of physical relations (sites included):
//! local operators work site by site, and each rule only moves or fuses work
//! that is done tuple by tuple on the site where the tuple already is.
//! Placements are kept: a local filter keeps its input's placement, a local
//! map with an identity key map too, so both sides of every rule have the
//! same placement by the same typing functions.

use crate::build::{
    complete_phys, dims, inst, is_id_leaf, is_identity_key, kernel, key, leaf, pat, pred, rw, vars, Bound, Family,
    Rule, RuleDef, Rw,
};
use crate::cond::{distributes, identity_key, identity_key_on_groups, not_concat, reads_groups_only};
use tra_optimizer::egraph::{Param, TraEGraph};
use tra_optimizer::kernel::KernelRef;
use tra_optimizer::keyexpr::KeyFn;

const FAMILY: Family = Family::R1;

/// Every R1 rule, and `map-identity`.
pub fn rules() -> Vec<RuleDef> {
    vec![r1_1(), r1_2(), r1_3(), r1_4(), r1_5(), r1_6(), r1_7(), map_identity()]
}

/// `R1-1`: two local filters are one filter of the conjunction.
///
/// No condition: both keep exactly the tuples satisfying both predicates, on
/// the site where they are. Conjunction is idempotent (`p ∧ p` is `p`), so
/// `lfilter(p, lfilter(p, x)) = lfilter(p, x)`: the class holds itself under
/// the filter, and pushing the same filter down again (R1-6, R2-2) adds
/// nothing — without this, repeated push-downs grow the graph forever.
///
/// Arity audit: no key map and no dim list; both predicates read the same
/// keys (those of `x`, which a filter keeps).
pub fn r1_1() -> RuleDef {
    let [p1, p2] = vars(["?p1", "?p2"]);
    Rule::new("R1-1", FAMILY)
        .why("both sides keep exactly the tuples satisfying both predicates, on their sites; `p && p` is `p`")
        .rw(rw("(lfilter ?p1 (lfilter ?p2 ?x))", "(lfilter ?c ?x)").bind(&[("?c", "p1&&p2")], move |eg, _, s| {
            Some(vec![Bound::Leaf(Param::Pred(pred(eg, s[p1])?.and(pred(eg, s[p2])?)))])
        }))
        .build()
}

/// A local map's key leaf, with identity key expressions read as `None`.
fn key_or_id(eg: &TraEGraph, id: egg::Id, arity: usize) -> Option<Option<KeyFn>> {
    if is_identity_key(eg, id, arity) {
        return Some(None);
    }
    key(eg, id).map(|k| Some(k.clone()))
}

/// A local map's kernel leaf (`None` for `id`).
fn kernel_or_id(eg: &TraEGraph, id: egg::Id) -> Option<Option<KernelRef>> {
    if is_id_leaf(eg, id) {
        return Some(None);
    }
    kernel(eg, id).map(|k| Some(k.clone()))
}

/// The most catalog kernels [`r1_2`] fuses into one kernel.
pub const MAX_FUSED_KERNELS: usize = 16;

/// `R1-2`: two local maps are one, with composed key map and kernel.
///
/// Condition: the key maps compose into one key expression
/// (`KeyFn::compose` gives one; an identity side is dropped), neither
/// kernel gives several blocks per call (a multi-block kernel is paired with
/// the keys of its own key map; composing would change the pairing), and
/// the fused kernel is made of at most [`MAX_FUSED_KERNELS`] catalog
/// kernels. The kernels compose as `compose(k1, k2)`, an `id` side dropped.
///
/// The bound keeps long chains tractable: fusing a chain of `n` maps
/// pairwise puts every segment of it in the graph, O(n²) maps whose kernels
/// hold O(n) parts each; with the bound a chain of any length is fused into
/// runs of at most that many kernels, each a single pass over its blocks. The two sides
/// reach the same relation through different typing paths (a map whose key
/// map is the identity keeps its input's frontier, one that is not
/// recomputes it from the keys), so a disagreement in the description is
/// skipped, not merged.
///
/// Arity audit: each key map is checked against the arity of *its own
/// input*: `f2` against `x`'s, `f1` against `f2`'s output arity (the middle
/// relation's), and the composed map, which reads `x`, against `x`'s.
pub fn r1_2() -> RuleDef {
    let rhs = pat("(lmap ?f ?k ?x)").ast;
    let [x, f1v, f2v, k1v, k2v, fv, kv] = vars(["?x", "?f1", "?f2", "?k1", "?k2", "?f", "?k"]);
    Rule::new("R1-2", FAMILY)
        .why("two tuple-by-tuple maps on the same site are one map with the composed key map and kernel")
        .skip_mismatch()
        .rw(Rw::apply("(lmap ?f1 ?k1 (lmap ?f2 ?k2 ?x))", "(lmap f1∘f2 k1∘k2 ?x)", move |eg, _, s| {
            // The bound on fused kernels first: in a long chain most
            // matches are refused by it, and it is the cheapest test.
            let parts = |k: egg::Id| if is_id_leaf(eg, k) { Some(0) } else { kernel(eg, k).map(KernelRef::parts) };
            match (parts(s[k1v]), parts(s[k2v])) {
                // An `id` side (0 parts) adds nothing.
                (Some(a), Some(b)) if a == 0 || b == 0 || a + b <= MAX_FUSED_KERNELS => {}
                _ => return vec![],
            }
            let x = s[x];
            let Some(xt) = complete_phys(eg, x) else { return vec![] };
            let xa = xt.rel.key_arity();
            let xb = xt.rel.array_bounds.clone();
            let Some(f2) = key_or_id(eg, s[f2v], xa) else { return vec![] };
            let mid_arity = f2.as_ref().map_or(xa, |f| f.output_arity());
            let Some(f1) = key_or_id(eg, s[f1v], mid_arity) else { return vec![] };
            let (Some(k1), Some(k2)) = (kernel_or_id(eg, s[k1v]), kernel_or_id(eg, s[k2v])) else {
                return vec![];
            };
            // Single-block kernels only.
            let mid_bounds = match &k2 {
                None => xb,
                Some(k) => match (k.outputs_per_call(&[&xb]), k.output_shape(&[&xb])) {
                    (Ok(1), Ok(b)) => b,
                    _ => return vec![],
                },
            };
            if let Some(k) = &k1 {
                if k.outputs_per_call(&[&mid_bounds]) != Ok(1) {
                    return vec![];
                }
            }
            let f = match (f1, f2) {
                (None, f) | (f, None) => f,
                (Some(a), Some(b)) => match a.compose(&b) {
                    Some(c) => Some(c),
                    None => return vec![],
                },
            };
            let f = f.filter(|f| !f.is_identity(xa));
            let k = match (k1, k2) {
                (None, k) | (k, None) => k,
                (Some(a), Some(b)) => Some(KernelRef::compose(a, b)),
            };
            let mut s = s.clone();
            let fid = leaf(eg, f.map_or(Param::Id, Param::Key));
            let kid = leaf(eg, k.map_or(Param::Id, Param::Kernel));
            s.insert(fv, fid);
            s.insert(kv, kid);
            inst(eg, &rhs, &s).into_iter().collect()
        })
        .checks("the key maps compose into one key expression (`KeyFn::compose`), neither kernel gives several blocks per call, and the fused kernel has at most 16 parts"))
        .build()
}

/// `R1-3`: a local filter moved under a local map (the direction that
/// filters first).
///
/// Condition: the key map `f` is the identity (`id`, or `[k0, …]`), so the
/// predicate reads the same key before and after the map; the filter then
/// saves the kernel's work on the tuples it drops.
///
/// Arity audit: `f` is checked against the arity of the map's input `x`
/// (the keys the pushed-down predicate reads), never against its output.
pub fn r1_3() -> RuleDef {
    Rule::new("R1-3", FAMILY)
        .why("with an identity key map the predicate reads the same keys before and after the map")
        .rw(rw("(lfilter ?p (lmap ?f ?k ?x))", "(lmap ?f ?k (lfilter ?p ?x))").when(identity_key("?f", "?x")))
        .build()
}

/// `R1-4`: a local map moved across a local aggregation, both directions.
///
/// Condition: `m` distributes over `agg` (`m(agg(a, b)) = agg(m(a), m(b))`,
/// from the kernel catalog), and the key map is the identity. Then, per site
/// and group, `m` of the fold is the fold of the `m`s, so the equality is
/// exact even for partial aggregates. The paper's first form, composing the
/// map *into* the aggregation kernel (`agg' = m ∘ agg` applied pairwise), is
/// unsound in general: `relu(relu(a+b)+c) ≠ relu(a+b+c)`; only the
/// distributive form is written.
///
/// Arity audit: the key map must be the identity on the keys it *reads*.
/// Push-down: the map reads the aggregation's output, of arity `|g|`; pull-up:
/// it reads `x`. Checking the map's own output arity instead (as an earlier
/// version did for push-down) lets `[k0]` over a 2-dim aggregate pass as the
/// identity although it drops a dim, and the union then merges relations of
/// different arity (`diag(A·B)` written as aggregate, filter `k0 == k1`,
/// rekey `[k0]`, transform `diag`).
pub fn r1_4() -> RuleDef {
    Rule::new("R1-4", FAMILY)
        .why("per site and group, `m` of the fold is the fold of the `m`s (the paper's form composing `m` into `agg` is unsound: relu(relu(a+b)+c) ≠ relu(a+b+c))")
        .rw(rw("(lmap ?f ?m (lagg ?g ?agg ?x))", "(lagg ?g ?agg (lmap id ?m ?x))")
            .named("push-down")
            .when(identity_key_on_groups("?f", "?g"))
            .when(distributes("?m", "?agg")))
        .rw(rw("(lagg ?g ?agg (lmap ?f ?m ?x))", "(lmap id ?m (lagg ?g ?agg ?x))")
            .named("pull-up")
            .unlisted()
            .when(identity_key("?f", "?x"))
            .when(distributes("?m", "?agg")))
        .build()
}

/// `R1-5`: a filter over a local aggregation moved under it, output dim `i`
/// renamed to group dim `g[i]`.
///
/// Condition: the predicate reads only the aggregation's output key (always
/// true: that is all it can read), so it keeps or drops whole groups, and
/// dropping a group's inputs drops the group. Not for `concat` aggregations:
/// their block size counts the pieces present, which a filter can change.
/// The paper's "boolFunc(groupByKeys)" is this renaming.
///
/// Arity audit: the predicate reads the aggregation's *output* key, of arity
/// `|g|` (dims read must be `< |g|`), and is renamed through `g` to the
/// input's dims; no key map.
pub fn r1_5() -> RuleDef {
    let [p, g] = vars(["?p", "?g"]);
    Rule::new("R1-5", FAMILY)
        .why("a predicate on group keys keeps or drops whole groups, and dropping a group's inputs drops the group")
        .rw(rw("(lfilter ?p (lagg ?g ?k ?x))", "(lagg ?g ?k (lfilter ?q ?x))")
            .when(not_concat("?k"))
            .when(reads_groups_only("?p", "?g"))
            .bind(&[("?q", "p[i:=g[i]]")], move |eg, _, s| {
                let g = dims(eg, s[g])?;
                Some(vec![Bound::Leaf(Param::Pred(pred(eg, s[p])?.remap(&|i| g.get(i).copied().unwrap_or(i))))])
            }))
        .build()
}

/// `R1-6`: a local filter over a local join pushed into its operands.
///
/// With `S` the output dims the predicate reads and `la` the left key arity:
/// if `S ⊆ [0, la)`, `(lfilter ?p (ljoin … ?a ?b)) = (ljoin … (lfilter ?p ?a) ?b)`
/// (output dims below `la` are the left key); if every `s ∈ S` is a left join
/// dim `jl[i]` (equal to the right's `jr[i]` on every joined pair) or `≥ la`
/// (a right non-join dim), the filter, renamed to right dims, goes on the
/// right; when both hold, also on both sides at once (the `diag(X+Y)` case:
/// `k0 == k1` over a join on `[0,1] = [0,1]`). Join dims and kernel are kept.
/// The paper's form rewrites the join's key lists, which cannot express a
/// predicate; this is its sound reading. The join keeps its operands'
/// frontiers while a filter recomputes them from the keys left, so a side
/// whose description differs is skipped, not merged.
///
/// Arity audit: the predicate reads the join's output key; `la` is the left
/// *operand's* arity and the right's dims are `jr` and the right operand's
/// non-join dims in order, so each side gets dims of its own operand.
pub fn r1_6() -> RuleDef {
    let left = pat("(ljoin ?jl ?jr ?k (lfilter ?p ?a) ?b)").ast;
    let right = pat("(ljoin ?jl ?jr ?k ?a (lfilter ?q ?b))").ast;
    let both = pat("(ljoin ?jl ?jr ?k (lfilter ?p ?a) (lfilter ?q ?b))").ast;
    let [pv, jlv, jrv, av, bv, qv] = vars(["?p", "?jl", "?jr", "?a", "?b", "?q"]);
    Rule::new("R1-6", FAMILY)
        .why("a predicate on one operand's dims (or on join dims, equal on every joined pair) keeps exactly the joined pairs it would keep after the join")
        .skip_mismatch()
        .rw(Rw::apply(
            "(lfilter ?p (ljoin ?jl ?jr ?k ?a ?b))",
            "(ljoin ?jl ?jr ?k (lfilter ?p ?a) ?b) | (ljoin ?jl ?jr ?k ?a (lfilter p' ?b)) | both",
            move |eg, _, s| {
                let (Some(p), Some(jl), Some(jr)) =
                    (pred(eg, s[pv]), dims(eg, s[jlv]), dims(eg, s[jrv]))
                else {
                    return vec![];
                };
                let (Some(at), Some(bt)) = (complete_phys(eg, s[av]), complete_phys(eg, s[bv])) else {
                    return vec![];
                };
                let (la, ra) = (at.rel.key_arity(), bt.rel.key_arity());
                let read = p.dims_read();
                let on_left = read.iter().all(|&d| d < la);
                let rest: Vec<usize> = (0..ra).filter(|d| !jr.contains(d)).collect();
                let to_right: Option<std::collections::BTreeMap<usize, usize>> = read
                    .iter()
                    .map(|&d| {
                        if let Some(i) = jl.iter().position(|&x| x == d) {
                            Some((d, jr[i]))
                        } else if d >= la {
                            rest.get(d - la).map(|&r| (d, r))
                        } else {
                            None
                        }
                    })
                    .collect();
                let q = to_right.map(|m| p.remap(&|d| m.get(&d).copied().unwrap_or(d)));
                let mut s = s.clone();
                if let Some(q) = &q {
                    s.insert(qv, leaf(eg, Param::Pred(q.clone())));
                }
                let mut out = Vec::new();
                if on_left {
                    out.extend(inst(eg, &left, &s));
                }
                if q.is_some() {
                    out.extend(inst(eg, &right, &s));
                }
                if on_left && q.is_some() {
                    out.extend(inst(eg, &both, &s));
                }
                out
            },
        )
        .checks("left: `p` reads only dims below `a`'s arity; right: only left join dims and right dims, renamed to `b`'s dims as `p'`; both when both"))
        .build()
}

/// `R1-7`: a map's kernel moved into the join below it (the key map stays
/// outside; just the join when it is the identity).
///
/// Condition: `m` is a kernel giving one block per call (a multi-block kernel
/// is paired with its key map's keys and cannot move into the join), and
/// the composed kernel has at most [`MAX_FUSED_KERNELS`] parts (see
/// [`r1_2`]). Applying
/// `m` to each joined block inside the join is the same computation; the
/// key map stays outside. When `m` distributes over `k` the composed kernel
/// runs as `k(m(a), m(b))` (the catalog's evaluation rule), which is the
/// paper's "specially" case.
///
/// Arity audit: `f` reads the join's output, so it is checked against the
/// join's output arity `la + ra − |jr|` (the map's input), not the map's own
/// output arity.
pub fn r1_7() -> RuleDef {
    let with_map = pat("(lmap ?f id (ljoin ?jl ?jr ?mk ?a ?b))").ast;
    let join_only = pat("(ljoin ?jl ?jr ?mk ?a ?b)").ast;
    let [mv, kv, jrv, av, bv, fv, mkv] = vars(["?m", "?k", "?jr", "?a", "?b", "?f", "?mk"]);
    Rule::new("R1-7", FAMILY)
        .why("applying `m` to each joined block inside the join is the same computation; the key map stays outside")
        .rw(Rw::apply(
            "(lmap ?f ?m (ljoin ?jl ?jr ?k ?a ?b))",
            "(lmap ?f id (ljoin ?jl ?jr compose(m,k) ?a ?b))",
            move |eg, _, s| {
            let (Some(m), Some(k), Some(jr)) =
                (kernel(eg, s[mv]), kernel(eg, s[kv]), dims(eg, s[jrv]))
            else {
                return vec![];
            };
            let (Some(at), Some(bt)) = (complete_phys(eg, s[av]), complete_phys(eg, s[bv])) else {
                return vec![];
            };
            let Ok(mid) = k.output_shape(&[&at.rel.array_bounds, &bt.rel.array_bounds]) else { return vec![] };
            if m.outputs_per_call(&[&mid]) != Ok(1) || m.parts() + k.parts() > MAX_FUSED_KERNELS {
                return vec![];
            }
            let mk = KernelRef::compose(m.clone(), k.clone());
            // The key map reads the join's output key.
            let join_arity = at.rel.key_arity() + bt.rel.key_arity() - jr.len();
            let f_is_id = is_identity_key(eg, s[fv], join_arity);
            let mut s = s.clone();
            s.insert(mkv, leaf(eg, Param::Kernel(mk)));
            let rhs = if f_is_id { &join_only } else { &with_map };
            inst(eg, rhs, &s).into_iter().collect()
        },
        )
        .checks("`m` is a kernel (not `id`) giving one block per call and the composed kernel has at most 16 parts; just the join when `f` is the identity on the join's keys"))
        .build()
}

/// `map-identity`: a local map with an identity key map (`id` or `[k0, …]`)
/// and no kernel is its input.
///
/// A P-level identity, exact: the map changes neither keys nor blocks, on
/// any site.
///
/// Arity audit: `f` is checked against the arity of the map's input `x`;
/// a map that drops or repeats dims is never the identity.
pub fn map_identity() -> RuleDef {
    Rule::new("map-identity", FAMILY)
        .why("the map changes neither keys nor blocks, on any site")
        .rw(rw("(lmap ?f id ?x)", "?x").when(identity_key("?f", "?x")))
        .build()
}
