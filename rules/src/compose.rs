//! Family `R1`: lambda composition (paper 004, Table 2, R1-1 … R1-7), on P
//! operators, plus `map-identity`.
//!
//! All of these are exact equalities of physical relations (sites included):
//! local operators work site by site, and each rule only moves or fuses work
//! that is done tuple by tuple on the site where the tuple already is.
//! Placements are kept: a local filter keeps its input's placement, a local
//! map with an identity key map too, so both sides of every rule have the
//! same placement by the same typing functions.

use crate::support::{
    complete_phys, dims, get, inst, is_id_leaf, is_identity_key, kernel, key, leaf, pat, pred, rewrite, Guard,
};
use tra_optimizer::egraph::{Param, TraEGraph};
use tra_optimizer::kernel::KernelRef;
use tra_optimizer::keyexpr::KeyFn;
use tra_optimizer::rule::{RuleDef, TraRewrite};
use tra_optimizer::types;

const FAMILY: &str = "R1";

fn def(name: &'static str, equation: &'static str, condition: &'static str, rewrites: Vec<TraRewrite>) -> RuleDef {
    RuleDef { name, family: FAMILY, equation, condition, lowering: false, rewrites }
}

/// Every R1 rule, and `map-identity`.
pub fn rules() -> Vec<RuleDef> {
    vec![r1_1(), r1_2(), r1_3(), r1_4(), r1_5(), r1_6(), r1_7(), map_identity()]
}

/// `R1-1`: `(lfilter ?p1 (lfilter ?p2 ?x)) = (lfilter p1∧p2 ?x)`.
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
    let rhs = pat("(lfilter ?c ?x)").ast;
    def(
        "R1-1",
        "(lfilter ?p1 (lfilter ?p2 ?x)) = (lfilter p1&&p2 ?x)",
        "none (conjunction is idempotent, so a filter under an equal filter collapses).",
        vec![rewrite("R1-1", "R1-1", "(lfilter ?p1 (lfilter ?p2 ?x))", Guard::Strict, move |eg, _, s| {
            let (Some(p1), Some(p2)) = (pred(eg, get(s, "?p1")), pred(eg, get(s, "?p2"))) else { return vec![] };
            let c = p1.and(p2);
            let mut s = s.clone();
            s.insert(crate::support::var("?c"), leaf(eg, Param::Pred(c)));
            inst(eg, &rhs, &s).into_iter().collect()
        })],
    )
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

/// `R1-2`: `(lmap ?f1 ?k1 (lmap ?f2 ?k2 ?x)) = (lmap f1∘f2 k1∘k2 ?x)`.
///
/// Condition: the key maps compose into one key expression
/// (`KeyFn::compose` gives one; an identity side is dropped), and neither
/// kernel gives several blocks per call (a multi-block kernel is paired with
/// the keys of its own key map; composing would change the pairing). The
/// kernels compose as `compose(k1, k2)`, an `id` side dropped. The two sides
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
    def(
        "R1-2",
        "(lmap ?f1 ?k1 (lmap ?f2 ?k2 ?x)) = (lmap f1∘f2 k1∘k2 ?x)",
        "the key maps compose into one key expression and neither kernel gives several blocks per call.",
        vec![rewrite("R1-2", "R1-2", "(lmap ?f1 ?k1 (lmap ?f2 ?k2 ?x))", Guard::SkipMismatch, move |eg, _, s| {
            let x = get(s, "?x");
            let Some(xt) = complete_phys(eg, x) else { return vec![] };
            let xa = xt.rel.key_arity();
            let xb = xt.rel.array_bounds.clone();
            let Some(f2) = key_or_id(eg, get(s, "?f2"), xa) else { return vec![] };
            let mid_arity = f2.as_ref().map_or(xa, |f| f.output_arity());
            let Some(f1) = key_or_id(eg, get(s, "?f1"), mid_arity) else { return vec![] };
            let (Some(k1), Some(k2)) = (kernel_or_id(eg, get(s, "?k1")), kernel_or_id(eg, get(s, "?k2"))) else {
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
            s.insert(crate::support::var("?f"), fid);
            s.insert(crate::support::var("?k"), kid);
            inst(eg, &rhs, &s).into_iter().collect()
        })],
    )
}

/// `R1-3`: `(lfilter ?p (lmap ?f ?k ?x)) = (lmap ?f ?k (lfilter ?p ?x))`, the
/// direction that filters first.
///
/// Condition: the key map `f` is the identity (`id`, or `[k0, …]`), so the
/// predicate reads the same key before and after the map; the filter then
/// saves the kernel's work on the tuples it drops.
///
/// Arity audit: `f` is checked against the arity of the map's input `x`
/// (the keys the pushed-down predicate reads), never against its output.
pub fn r1_3() -> RuleDef {
    let rhs = pat("(lmap ?f ?k (lfilter ?p ?x))").ast;
    def(
        "R1-3",
        "(lfilter ?p (lmap ?f ?k ?x)) = (lmap ?f ?k (lfilter ?p ?x))",
        "the key map f is the identity: the predicate reads the same keys before and after the map.",
        vec![rewrite("R1-3", "R1-3", "(lfilter ?p (lmap ?f ?k ?x))", Guard::Strict, move |eg, _, s| {
            let Some(xt) = complete_phys(eg, get(s, "?x")) else { return vec![] };
            if !is_identity_key(eg, get(s, "?f"), xt.rel.key_arity()) {
                return vec![];
            }
            inst(eg, &rhs, s).into_iter().collect()
        })],
    )
}

/// `R1-4`: `(lmap id ?m (lagg ?g ?agg ?x)) = (lagg ?g ?agg (lmap id ?m ?x))`,
/// both directions.
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
    let down = pat("(lagg ?g ?agg (lmap id ?m ?x))").ast;
    let up = pat("(lmap id ?m (lagg ?g ?agg ?x))").ast;
    let distributes = |eg: &TraEGraph, s: &egg::Subst| match (kernel(eg, get(s, "?m")), kernel(eg, get(s, "?agg"))) {
        (Some(m), Some(agg)) => m.distributes_over(agg),
        _ => false,
    };
    def(
        "R1-4",
        "(lmap id ?m (lagg ?g ?agg ?x)) = (lagg ?g ?agg (lmap id ?m ?x))",
        "m distributes over agg (m(agg(a,b)) = agg(m(a),m(b))) and the key map is the identity on the keys it \
         reads (the aggregate's |g| dims for push-down, x's for pull-up); the paper's form composing m into the \
         aggregation kernel is unsound in general (relu(relu(a+b)+c) ≠ relu(a+b+c)), so only this one is written.",
        vec![
            rewrite("R1-4", "R1-4/push-down", "(lmap ?f ?m (lagg ?g ?agg ?x))", Guard::Strict, move |eg, _, s| {
                // The key map reads the aggregation's output, whose arity is
                // |g| (not the map's own output arity: `[k0]` over a 2-dim
                // aggregate has output arity 1 and is not the identity).
                let Some(g) = dims(eg, get(s, "?g")) else { return vec![] };
                if !is_identity_key(eg, get(s, "?f"), g.len()) || !distributes(eg, s) {
                    return vec![];
                }
                inst(eg, &down, s).into_iter().collect()
            }),
            rewrite("R1-4", "R1-4/pull-up", "(lagg ?g ?agg (lmap ?f ?m ?x))", Guard::Strict, move |eg, _, s| {
                let Some(xt) = complete_phys(eg, get(s, "?x")) else { return vec![] };
                if !is_identity_key(eg, get(s, "?f"), xt.rel.key_arity()) || !distributes(eg, s) {
                    return vec![];
                }
                inst(eg, &up, s).into_iter().collect()
            }),
        ],
    )
}

/// `R1-5`: `(lfilter ?p (lagg ?g ?k ?x)) = (lagg ?g ?k (lfilter p' ?x))`,
/// `p'` = `p` with output dim `i` renamed to group dim `g[i]`.
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
    let rhs = pat("(lagg ?g ?k (lfilter ?q ?x))").ast;
    def(
        "R1-5",
        "(lfilter ?p (lagg ?g ?k ?x)) = (lagg ?g ?k (lfilter p[i := g[i]] ?x))",
        "the predicate reads only group-by dims (renamed to their input positions), so it drops whole groups; \
         not for concat aggregations.",
        vec![rewrite("R1-5", "R1-5", "(lfilter ?p (lagg ?g ?k ?x))", Guard::Strict, move |eg, _, s| {
            let (Some(p), Some(g), Some(k)) =
                (pred(eg, get(s, "?p")), dims(eg, get(s, "?g")), kernel(eg, get(s, "?k")))
            else {
                return vec![];
            };
            if types::concat_params(k).is_some() || p.dims_read().iter().any(|&d| d >= g.len()) {
                return vec![];
            }
            let g = g.to_vec();
            let q = p.remap(&|i| g.get(i).copied().unwrap_or(i));
            let mut s = s.clone();
            s.insert(crate::support::var("?q"), leaf(eg, Param::Pred(q)));
            inst(eg, &rhs, &s).into_iter().collect()
        })],
    )
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
    def(
        "R1-6",
        "(lfilter ?p (ljoin ?jl ?jr ?k ?a ?b)) = (ljoin ?jl ?jr ?k (lfilter ?p ?a) ?b) | (ljoin … ?a (lfilter p' ?b)) | both",
        "left: the predicate reads only left dims; right: only left join dims and right dims (renamed to the \
         right's dims); both when both.",
        vec![rewrite(
            "R1-6",
            "R1-6",
            "(lfilter ?p (ljoin ?jl ?jr ?k ?a ?b))",
            Guard::SkipMismatch,
            move |eg, _, s| {
                let (Some(p), Some(jl), Some(jr)) =
                    (pred(eg, get(s, "?p")), dims(eg, get(s, "?jl")), dims(eg, get(s, "?jr")))
                else {
                    return vec![];
                };
                let (Some(at), Some(bt)) = (complete_phys(eg, get(s, "?a")), complete_phys(eg, get(s, "?b"))) else {
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
                    s.insert(crate::support::var("?q"), leaf(eg, Param::Pred(q.clone())));
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
        )],
    )
}

/// `R1-7`: `(lmap ?f ?m (ljoin ?jl ?jr ?k ?a ?b)) = (lmap ?f id (ljoin ?jl ?jr compose(m,k) ?a ?b))`
/// (just the join when `f` is the identity).
///
/// Condition: `m` is a kernel giving one block per call (a multi-block kernel
/// is paired with its key map's keys and cannot move into the join). Applying
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
    def(
        "R1-7",
        "(lmap ?f ?m (ljoin ?jl ?jr ?k ?a ?b)) = (lmap ?f id (ljoin ?jl ?jr compose(m,k) ?a ?b))",
        "m is a kernel (not id) giving one block per call; the key map stays outside the join.",
        vec![rewrite("R1-7", "R1-7", "(lmap ?f ?m (ljoin ?jl ?jr ?k ?a ?b))", Guard::Strict, move |eg, _, s| {
            let (Some(m), Some(k), Some(jr)) =
                (kernel(eg, get(s, "?m")), kernel(eg, get(s, "?k")), dims(eg, get(s, "?jr")))
            else {
                return vec![];
            };
            let (Some(at), Some(bt)) = (complete_phys(eg, get(s, "?a")), complete_phys(eg, get(s, "?b"))) else {
                return vec![];
            };
            let Ok(mid) = k.output_shape(&[&at.rel.array_bounds, &bt.rel.array_bounds]) else { return vec![] };
            if m.outputs_per_call(&[&mid]) != Ok(1) {
                return vec![];
            }
            let mk = KernelRef::compose(m.clone(), k.clone());
            // The key map reads the join's output key.
            let join_arity = at.rel.key_arity() + bt.rel.key_arity() - jr.len();
            let f_is_id = is_identity_key(eg, get(s, "?f"), join_arity);
            let mut s = s.clone();
            s.insert(crate::support::var("?mk"), leaf(eg, Param::Kernel(mk)));
            let rhs = if f_is_id { &join_only } else { &with_map };
            inst(eg, rhs, &s).into_iter().collect()
        })],
    )
}

/// `map-identity`: `(lmap ?f id ?x) = ?x` when `f` is the identity (`id` or
/// `[k0, …]`).
///
/// A P-level identity, exact: the map changes neither keys nor blocks, on
/// any site.
///
/// Arity audit: `f` is checked against the arity of the map's input `x`;
/// a map that drops or repeats dims is never the identity.
pub fn map_identity() -> RuleDef {
    def(
        "map-identity",
        "(lmap id id ?x) = ?x",
        "the key map is the identity (id or [k0,…,k{n-1}]) and the kernel is id.",
        vec![rewrite("map-identity", "map-identity", "(lmap ?f id ?x)", Guard::Strict, |eg, _, s| {
            let x = get(s, "?x");
            let Some(xt) = complete_phys(eg, x) else { return vec![] };
            if !is_identity_key(eg, get(s, "?f"), xt.rel.key_arity()) {
                return vec![];
            }
            vec![x]
        })],
    )
}
