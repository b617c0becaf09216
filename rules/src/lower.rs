//! Family `lowering`: Table 1 of the paper, the translation of each TRA
//! operator (an L node) into IA (`erase` of a P expression).
//!
//! These rules run first, alone, so that every L class reached by the program
//! has an executable member before the other rules grow the graph. Each is an
//! equality of L classes: the TRA operator's value (up to site) equals the
//! erased IA plan's. Operands of local operators are P classes; a TRA operand
//! `x` is used through any of its P members `(erase ?p)`, or re-partitioned
//! (`shuffle`, `broadcast`) from the L class itself.
//!
//! Arity audit, for the whole family: no rule here has a condition; a key
//! map or dim list is copied unchanged and typed against the same input on
//! both sides, or (tile, concat) built from the input's own arity.

use crate::build::{complete_phys, dims, logical, rw, vars, Bound, Family, Rule, RuleDef};
use tra_optimizer::egraph::Param;
use tra_optimizer::types;

const FAMILY: Family = Family::Lowering;

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

/// `lower-aggregate`. Arity audit: `g` names dims of `x` on both sides
/// (shuffle and local aggregation read the same input).
pub fn lower_aggregate() -> RuleDef {
    Rule::new("lower-aggregate", FAMILY)
        .why("the shuffle on the group-by dims puts each group on one site, so the local aggregation is complete")
        .rw(rw("(aggregate ?g ?k ?x)", "(erase (lagg ?g ?k (shuffle ?g ?x)))"))
        .build()
}

/// `lower-join`. Arity audit: `jl` and `jr` name each operand's dims on
/// both sides.
pub fn lower_join() -> RuleDef {
    Rule::new("lower-join", FAMILY)
        .why("a broadcast operand is on every site, so each right tuple meets all its partners where it lives")
        .rw(rw("(join ?jl ?jr ?k ?a (erase ?pb))", "(erase (ljoin ?jl ?jr ?k (broadcast ?a) ?pb))"))
        .build()
}

/// `lower-rekey`. Arity audit: the key map is copied unchanged and typed
/// against the same input on both sides.
pub fn lower_rekey() -> RuleDef {
    Rule::new("lower-rekey", FAMILY)
        .why("a key map works tuple by tuple, wherever the tuple is")
        .rw(rw("(rekey ?f (erase ?p))", "(erase (lmap ?f id ?p))"))
        .build()
}

/// `lower-filter`. Arity audit: the predicate reads the same input's keys
/// on both sides.
pub fn lower_filter() -> RuleDef {
    Rule::new("lower-filter", FAMILY)
        .why("a filter works tuple by tuple, wherever the tuple is")
        .rw(rw("(filter ?pr (erase ?p))", "(erase (lfilter ?pr ?p))"))
        .build()
}

/// `lower-transform`. Arity audit: the key map is `id`, the identity on any
/// arity.
pub fn lower_transform() -> RuleDef {
    Rule::new("lower-transform", FAMILY)
        .why("a block kernel works tuple by tuple, wherever the tuple is")
        .rw(rw("(transform ?k (erase ?p))", "(erase (lmap id ?k ?p))"))
        .build()
}

/// `lower-tile`: the tile kernel gives `pieces = bound[dim] / size` blocks
/// per tuple, paired in order with the keys of the replicating key map. Key
/// and kernel come from [`types::tile_as_map`], the function that types
/// `tile` itself, so both sides have the same type by construction.
///
/// Arity audit: the replicating key map is built from the input's own arity
/// (`types::tile_as_map` on `p`'s type), not from the output's.
pub fn lower_tile() -> RuleDef {
    let [ds, p] = vars(["?ds", "?p"]);
    Rule::new("lower-tile", FAMILY)
        .why("tiling works tuple by tuple; the key map and kernel are those that type `tile` itself")
        .rw(rw("(tile ?ds (erase ?p))", "(erase (lmap ?key ?kernel ?p))").bind(
            &[("?key", "key:[k0,…,k{n-1},0..pieces]"), ("?kernel", "kernel:tile(dim,size)")],
            move |eg, _, s| {
                let (d, pt) = (dims(eg, s[ds])?, complete_phys(eg, s[p])?);
                let [dim, size] = d[..] else { return None };
                let (key, kernel) = types::tile_as_map(&pt.rel, dim, size).ok()?;
                Some(vec![Bound::Leaf(Param::Key(key)), Bound::Leaf(Param::Kernel(kernel))])
            },
        ))
        .build()
}

/// `lower-concat`: with `g` every key dim but `kd`, the shuffle on `g` puts
/// each group's pieces on one site, where the concat aggregation joins them
/// along `ad` ordered by `kd`. `g` and the kernel come from
/// [`types::concat_as_aggregate`], the function that types `concat` itself.
///
/// Arity audit: `g` is built from the input's arity (every dim but `kd`).
pub fn lower_concat() -> RuleDef {
    let [ds, x] = vars(["?ds", "?x"]);
    Rule::new("lower-concat", FAMILY)
        .why("the shuffle on every key dim but `kd` puts each group's pieces on one site")
        .rw(rw("(concat ?ds ?x)", "(erase (lagg ?g ?kernel (shuffle ?g ?x)))").bind(
            &[("?g", "g"), ("?kernel", "kernel:concat(kd,ad)")],
            move |eg, _, s| {
                let (d, lt) = (dims(eg, s[ds])?, logical(eg, s[x])?);
                let [kd, ad] = d[..] else { return None };
                let (g, kernel) = types::concat_as_aggregate(&lt.rel, kd, ad);
                Some(vec![Bound::Leaf(Param::Dims(g)), Bound::Leaf(Param::Kernel(kernel))])
            },
        ))
        .build()
}
