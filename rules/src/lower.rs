//! Family `lowering`: Table 1 of the paper, the translation of each TRA
//! operator (an L node) into IA (`erase` of a P expression).
//!
//! These rules run first, alone, so that every L class reached by the program
//! has an executable member before the other rules grow the graph. Each is an
//! equality of L classes: the TRA operator's value (up to site) equals the
//! erased IA plan's. Operands of local operators are P classes; a TRA operand
//! `x` is used through any of its P members `(erase ?p)`, or re-partitioned
//! (`shuffle`, `broadcast`) from the L class itself.

use crate::support::{always, complete_phys, dims, extend, get, inst, logical, pat, rewrite, rewrite_to, Guard};
use tra_optimizer::egraph::Param;
use tra_optimizer::rule::RuleDef;
use tra_optimizer::types;

const FAMILY: &str = "lowering";

fn def(
    name: &'static str,
    equation: &'static str,
    condition: &'static str,
    rewrites: Vec<tra_optimizer::rule::TraRewrite>,
) -> RuleDef {
    RuleDef { name, family: FAMILY, equation, condition, lowering: true, rewrites }
}

/// Every lowering rule.
pub fn rules() -> Vec<RuleDef> {
    vec![
        lower_aggregate(),
        lower_join(),
        lower_rekey(),
        lower_filter(),
        lower_transform(),
        lower_tile(),
        lower_concat(),
    ]
}

/// `lower-aggregate`: `(aggregate ?g ?k ?x) = (erase (lagg ?g ?k (shuffle ?g ?x)))`.
///
/// No condition: after the shuffle on all group-by dims every group lives on
/// one site, so the local aggregation is complete.
///
/// Arity audit: `g` names dims of `x` on both sides (shuffle and local
/// aggregation read the same input); no key map.
pub fn lower_aggregate() -> RuleDef {
    def(
        "lower-aggregate",
        "(aggregate ?g ?k ?x) = (erase (lagg ?g ?k (shuffle ?g ?x)))",
        "none: the shuffle on the group-by dims puts each group on one site.",
        vec![rewrite_to(
            "lower-aggregate",
            "lower-aggregate",
            "(aggregate ?g ?k ?x)",
            "(erase (lagg ?g ?k (shuffle ?g ?x)))",
            Guard::Strict,
            always,
        )],
    )
}

/// `lower-join`: `(join ?jl ?jr ?k ?a (erase ?pb)) = (erase (ljoin ?jl ?jr ?k (broadcast ?a) ?pb))`.
///
/// No condition: with the left operand on every site, each right tuple meets
/// all its partners where it lives, whatever `pb`'s placement.
///
/// Arity audit: `jl` and `jr` name each operand's dims on both sides; no key
/// map.
pub fn lower_join() -> RuleDef {
    def(
        "lower-join",
        "(join ?jl ?jr ?k ?a (erase ?pb)) = (erase (ljoin ?jl ?jr ?k (broadcast ?a) ?pb))",
        "none: a broadcast operand is co-located with any placement of the other.",
        vec![rewrite_to(
            "lower-join",
            "lower-join",
            "(join ?jl ?jr ?k ?a (erase ?pb))",
            "(erase (ljoin ?jl ?jr ?k (broadcast ?a) ?pb))",
            Guard::Strict,
            always,
        )],
    )
}

/// `lower-rekey`: `(rekey ?f (erase ?p)) = (erase (lmap ?f id ?p))`.
///
/// No condition: a key map works tuple by tuple, wherever the tuple is.
///
/// Arity audit: no condition; the key map is copied unchanged and typed
/// against the same input on both sides.
pub fn lower_rekey() -> RuleDef {
    def(
        "lower-rekey",
        "(rekey ?f (erase ?p)) = (erase (lmap ?f id ?p))",
        "none: a key map works tuple by tuple, wherever the tuple is.",
        vec![rewrite_to(
            "lower-rekey",
            "lower-rekey",
            "(rekey ?f (erase ?p))",
            "(erase (lmap ?f id ?p))",
            Guard::Strict,
            always,
        )],
    )
}

/// `lower-filter`: `(filter ?pr (erase ?p)) = (erase (lfilter ?pr ?p))`.
///
/// No condition: a filter works tuple by tuple.
///
/// Arity audit: no condition; the predicate reads the same input's keys on
/// both sides.
pub fn lower_filter() -> RuleDef {
    def(
        "lower-filter",
        "(filter ?pr (erase ?p)) = (erase (lfilter ?pr ?p))",
        "none: a filter works tuple by tuple.",
        vec![rewrite_to(
            "lower-filter",
            "lower-filter",
            "(filter ?pr (erase ?p))",
            "(erase (lfilter ?pr ?p))",
            Guard::Strict,
            always,
        )],
    )
}

/// `lower-transform`: `(transform ?k (erase ?p)) = (erase (lmap id ?k ?p))`.
///
/// No condition: a block kernel works tuple by tuple.
///
/// Arity audit: the key map is `id`, the identity on any arity; nothing is
/// compared.
pub fn lower_transform() -> RuleDef {
    def(
        "lower-transform",
        "(transform ?k (erase ?p)) = (erase (lmap id ?k ?p))",
        "none: a block kernel works tuple by tuple.",
        vec![rewrite_to(
            "lower-transform",
            "lower-transform",
            "(transform ?k (erase ?p))",
            "(erase (lmap id ?k ?p))",
            Guard::Strict,
            always,
        )],
    )
}

/// `lower-tile`: `(tile [dim,size] (erase ?p)) =
/// (erase (lmap key:[k0,…,k{n-1},0..pieces] kernel:tile(dim,size) ?p))`.
///
/// No condition beyond typing: the tile kernel gives `pieces = bound[dim] /
/// size` blocks per tuple, paired in order with the keys of the replicating
/// key map. Key and kernel come from [`types::tile_as_map`], the function that
/// types `tile` itself, so both sides have the same type by construction.
///
/// Arity audit: the replicating key map is built from the input's own arity
/// (`types::tile_as_map` on `p`'s type), not from the output's.
pub fn lower_tile() -> RuleDef {
    let rhs = pat("(erase (lmap ?key ?kernel ?p))").ast;
    def(
        "lower-tile",
        "(tile [dim,size] (erase ?p)) = (erase (lmap key:[k0,…,k{n-1},0..pieces] kernel:tile(dim,size) ?p))",
        "none: tiling works tuple by tuple; pieces = bound[dim] / size.",
        vec![rewrite("lower-tile", "lower-tile", "(tile ?ds (erase ?p))", Guard::Strict, move |eg, _, s| {
            let (ds, p) = (get(s, "?ds"), get(s, "?p"));
            let (Some(d), Some(pt)) = (dims(eg, ds), complete_phys(eg, p)) else { return vec![] };
            let [dim, size] = d[..] else { return vec![] };
            let Ok((key, kernel)) = types::tile_as_map(&pt.rel, dim, size) else { return vec![] };
            let s = extend(eg, s, vec![("?key", Param::Key(key)), ("?kernel", Param::Kernel(kernel))]);
            inst(eg, &rhs, &s).into_iter().collect()
        })],
    )
}

/// `lower-concat`: `(concat [kd,ad] ?x) = (erase (lagg g kernel:concat(kd,ad) (shuffle g ?x)))`
/// with `g` = every key dim but `kd`.
///
/// No condition: the shuffle on `g` puts each group's pieces on one site,
/// where the concat aggregation joins them along `ad` ordered by `kd`.
/// `g` and the kernel come from [`types::concat_as_aggregate`], the function
/// that types `concat` itself.
///
/// Arity audit: `g` is built from the input's arity (every dim but `kd`);
/// no key map.
pub fn lower_concat() -> RuleDef {
    let rhs = pat("(erase (lagg ?g ?kernel (shuffle ?g ?x)))").ast;
    def(
        "lower-concat",
        "(concat [kd,ad] ?x) = (erase (lagg g kernel:concat(kd,ad) (shuffle g ?x))), g = every key dim but kd",
        "none: the shuffle on g puts each group's pieces on one site.",
        vec![rewrite("lower-concat", "lower-concat", "(concat ?ds ?x)", Guard::Strict, move |eg, _, s| {
            let (ds, x) = (get(s, "?ds"), get(s, "?x"));
            let (Some(d), Some(lt)) = (dims(eg, ds), logical(eg, x)) else { return vec![] };
            let [kd, ad] = d[..] else { return vec![] };
            let (g, kernel) = types::concat_as_aggregate(&lt.rel, kd, ad);
            let s = extend(eg, s, vec![("?g", Param::Dims(g)), ("?kernel", Param::Kernel(kernel))]);
            inst(eg, &rhs, &s).into_iter().collect()
        })],
    )
}
