//! The named conditions rules are written with. Each parses its pattern
//! variables once, when the rule is built, reads only the class analysis,
//! and says what it checks in words (shown by `tra rules`, with the
//! variables written without their `?`).

use crate::build::{complete_phys, dims, is_identity_key, kernel, logical, pred, subset, var, Cond};
use tra_optimizer::keyexpr::KeyFn;
use tra_optimizer::types::{self, KeySet, Placement};

fn bare(v: &str) -> &str {
    v.trim_start_matches('?')
}

/// Key map `f` is the identity on the keys of `x` (complete), which it
/// reads: `id`, or `[k0, …]` of `x`'s arity.
pub fn identity_key(f: &str, x: &str) -> Cond {
    let text = format!("`{}` is the identity on `{}`'s keys", bare(f), bare(x));
    let (f, x) = (var(f), var(x));
    Cond::new(text, move |eg, _, s| {
        complete_phys(eg, s[x]).is_some_and(|t| is_identity_key(eg, s[f], t.rel.key_arity()))
    })
}

/// Key map `f`, which reads an aggregation's output, is the identity on its
/// `|g|` keys (not on the map's own output arity).
pub fn identity_key_on_groups(f: &str, g: &str) -> Cond {
    let text = format!("`{}` is the identity on the aggregate's `|{}|` keys", bare(f), bare(g));
    let (f, g) = (var(f), var(g));
    Cond::new(text, move |eg, _, s| dims(eg, s[g]).is_some_and(|g| is_identity_key(eg, s[f], g.len())))
}

/// Kernel `m` distributes over kernel `agg`: `m(agg(a,b)) = agg(m(a),m(b))`.
pub fn distributes(m: &str, agg: &str) -> Cond {
    let text = format!("`{0}` distributes over `{1}` (`{0}({1}(a,b)) = {1}({0}(a),{0}(b))`)", bare(m), bare(agg));
    let (m, agg) = (var(m), var(agg));
    Cond::new(text, move |eg, _, s| match (kernel(eg, s[m]), kernel(eg, s[agg])) {
        (Some(m), Some(agg)) => m.distributes_over(agg),
        _ => false,
    })
}

/// Kernel `k` is not a concat aggregation (whose block size counts the
/// pieces present).
pub fn not_concat(k: &str) -> Cond {
    let text = format!("`{}` is not a concat aggregation", bare(k));
    let k = var(k);
    Cond::new(text, move |eg, _, s| kernel(eg, s[k]).is_some_and(|k| types::concat_params(k).is_none()))
}

/// Predicate `p` reads only the `|g|` output (group) dims of an aggregation.
pub fn reads_groups_only(p: &str, g: &str) -> Cond {
    let text = format!("`{}` reads only the `|{}|` group dims", bare(p), bare(g));
    let (p, g) = (var(p), var(g));
    Cond::new(text, move |eg, _, s| match (pred(eg, s[p]), dims(eg, s[g])) {
        (Some(p), Some(g)) => p.dims_read().iter().all(|&d| d < g.len()),
        _ => false,
    })
}

/// Kernel `k` is associative and commutative.
pub fn assoc_comm(k: &str) -> Cond {
    let text = format!("`{}` is associative and commutative", bare(k));
    let k = var(k);
    Cond::new(text, move |eg, _, s| kernel(eg, s[k]).is_some_and(|k| k.is_assoc_comm()))
}

/// Dim list `a` is a subset of dim list `b`.
pub fn dims_within(a: &str, b: &str) -> Cond {
    let text = format!("`{} ⊆ {}`", bare(a), bare(b));
    let (a, b) = (var(a), var(b));
    Cond::new(text, move |eg, _, s| match (dims(eg, s[a]), dims(eg, s[b])) {
        (Some(a), Some(b)) => subset(a, b),
        _ => false,
    })
}

/// `r` is complete and placed exactly `Hash(p)`, or replicated on a single
/// site (then a shuffle by `p` moves nothing).
pub fn placed_by(r: &str, p: &str) -> Cond {
    let text = format!("`{0}` complete and placed `Hash({1})` (or anything on one site)", bare(r), bare(p));
    let (r, p) = (var(r), var(p));
    Cond::new(text, move |eg, _, s| {
        let (Some(p), Some(rt)) = (dims(eg, s[p]), complete_phys(eg, s[r])) else { return false };
        let one_site = eg.analysis.sites == 1 && rt.placement == Placement::Replicated;
        one_site || rt.placement == Placement::Hash(p.to_vec())
    })
}

/// `r` is complete and replicated.
pub fn replicated(r: &str) -> Cond {
    let text = format!("`{}` complete and replicated", bare(r));
    let r = var(r);
    Cond::new(text, move |eg, _, s| complete_phys(eg, s[r]).is_some_and(|t| t.placement == Placement::Replicated))
}

/// `r` is complete and placed `Hash(D)` with `D ⊆ g`, or replicated.
pub fn placed_within(r: &str, g: &str) -> Cond {
    let text = format!("`{0}` complete and placed `Hash(D)` with `D ⊆ {1}`, or replicated", bare(r), bare(g));
    let (r, g) = (var(r), var(g));
    Cond::new(text, move |eg, _, s| {
        let (Some(g), Some(rt)) = (dims(eg, s[g]), complete_phys(eg, s[r])) else { return false };
        match &rt.placement {
            Placement::Replicated => true,
            Placement::Hash(d) => subset(d, g),
            Placement::Any => false,
        }
    })
}

/// `r` is complete and placed `Hash(D)` with `D ⊄ g`, and aggregating it
/// by `g` with `k` where it lies gives a really partial result.
pub fn partial_pre_aggregation(r: &str, g: &str, k: &str) -> Cond {
    let text = format!(
        "`{0}` complete and placed `Hash(D)` with `D ⊄ {1}`, so that pre-aggregating `{0}` by `{1}` is really partial",
        bare(r),
        bare(g)
    );
    let (r, g, k) = (var(r), var(g), var(k));
    Cond::new(text, move |eg, _, s| {
        let (Some(g), Some(k), Some(rt)) = (dims(eg, s[g]), kernel(eg, s[k]), complete_phys(eg, s[r])) else {
            return false;
        };
        match &rt.placement {
            Placement::Hash(d) if !subset(d, g) => {}
            _ => return false,
        }
        matches!(types::local_aggregate(rt, g, k, eg.analysis.sites), Ok(pre) if !pre.complete)
    })
}

/// The matched (L) class is complete.
pub fn complete_result() -> Cond {
    Cond::new("the left side is complete", |eg, id, _| logical(eg, id).is_some_and(|l| l.complete))
}

/// Dim list `p` names only dims below the key arity of `x` (P class).
pub fn dims_of(p: &str, x: &str) -> Cond {
    let text = format!("`{}` names only dims of `{}`", bare(p), bare(x));
    let (p, x) = (var(p), var(x));
    Cond::new(text, move |eg, _, s| match (dims(eg, s[p]), crate::build::phys(eg, s[x])) {
        (Some(p), Some(t)) => p.iter().all(|&d| d < t.rel.key_arity()),
        _ => false,
    })
}

/// The frontiers of `x` and `y` when both are complete matrices (key arity
/// 2) whose common dimension has one frontier.
pub fn matrix_frontiers(eg: &tra_optimizer::egraph::TraEGraph, x: egg::Id, y: egg::Id) -> Option<(Vec<u32>, Vec<u32>)> {
    let (x, y) = (logical(eg, x)?, logical(eg, y)?);
    let (fx, fy) = (&x.rel.frontier, &y.rel.frontier);
    (x.complete && y.complete && fx.len() == 2 && fy.len() == 2 && fx[1] == fy[0]).then(|| (fx.clone(), fy.clone()))
}

/// `x` and `y` are complete matrices (key arity 2) whose common dimension
/// has the same frontier.
pub fn matrices(x: &str, y: &str) -> Cond {
    let text =
        format!("`{0}`, `{1}` complete, key arity 2, `{0}`'s column frontier = `{1}`'s row frontier", bare(x), bare(y));
    let (x, y) = (var(x), var(y));
    Cond::new(text, move |eg, _, s| matrix_frontiers(eg, s[x], s[y]).is_some())
}

/// `x` and `y` are dense (no holes), and neither `I` (`x`'s row-block
/// frontier) nor `K` (`y`'s column-block frontier) is zero.
pub fn dense_nonempty(x: &str, y: &str) -> Cond {
    let text = format!(
        "`{0}`, `{1}` dense; `I` = `{0}`'s row frontier and `K` = `{1}`'s column frontier are not 0",
        bare(x),
        bare(y)
    );
    let (x, y) = (var(x), var(y));
    Cond::new(text, move |eg, _, s| {
        let dense = |id| logical(eg, id).is_some_and(|l| l.rel.keys == KeySet::Dense);
        let Some((fx, fy)) = matrix_frontiers(eg, s[x], s[y]) else { return false };
        dense(s[x]) && dense(s[y]) && fx[0] != 0 && fy[1] != 0
    })
}

/// A key map that is the identity on `arity` keys, read as `None`.
pub fn key_or_id(eg: &tra_optimizer::egraph::TraEGraph, id: egg::Id, arity: usize) -> Option<Option<KeyFn>> {
    if is_identity_key(eg, id, arity) {
        return Some(None);
    }
    crate::build::key(eg, id).map(|k| Some(k.clone()))
}
