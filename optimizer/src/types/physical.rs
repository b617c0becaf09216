//! Type and placement rules of the IA operators: broadcast, shuffle and the
//! site-local join, aggregation, filter and map, with the count of partial
//! aggregates a shuffle moves.

use super::logical::{aggregate, check_dims, concat_params, filter, join, local_map};
use super::{PhysType, Placement, RelType, TResult, TypeError, ENUMERATION_LIMIT};
use crate::error::ErrorCode;
use crate::kernel::KernelRef;
use crate::keyexpr::{KeyFn, Predicate};
use crate::placement::site_of;

fn partial_input(op: &str, x: &PhysType) -> TResult<()> {
    if !x.complete {
        return Err(TypeError::new(
            ErrorCode::BadField,
            None,
            format!("the input of {op} is a partial aggregate (the same key on several sites); only a shuffle or a broadcast may consume it"),
        ));
    }
    Ok(())
}

/// Broadcast: every tuple to every site.
pub fn broadcast(x: &PhysType) -> PhysType {
    PhysType { placement: Placement::Replicated, ..x.clone() }
}

/// Shuffle: tuple with key `k` to site `h(k[dims])`.
pub fn shuffle(x: &PhysType, dims: &[usize], sites: usize) -> TResult<PhysType> {
    check_dims(dims, x.rel.key_arity(), "dims", "shuffle")?;
    let placement = if sites == 1 { Placement::Replicated } else { Placement::Hash(dims.to_vec()) };
    Ok(PhysType { placement, ..x.clone() })
}

/// Whether a local join of relations placed like this joins every matching
/// pair (and so equals the TRA join after erasing sites).
pub fn co_located(l: &Placement, r: &Placement, lk: &[usize], rk: &[usize], sites: usize) -> bool {
    match (l, r) {
        _ if sites == 1 => true,
        (Placement::Replicated, _) | (_, Placement::Replicated) => true,
        (Placement::Hash(dl), Placement::Hash(dr)) => {
            dl.len() == dr.len() && dl.iter().zip(dr).all(|(a, b)| lk.iter().zip(rk).any(|(x, y)| x == a && y == b))
        }
        _ => false,
    }
}

/// Position of right key dim `d` in the join output (join dims map to the
/// left's position).
pub fn join_output_dim(d: usize, left_arity: usize, lk: &[usize], rk: &[usize]) -> usize {
    if let Some(i) = rk.iter().position(|&x| x == d) {
        lk[i]
    } else {
        left_arity + (0..d).filter(|x| !rk.contains(x)).count()
    }
}

/// Local join: only tuples on the same site join. The operands must be
/// co-located for the join, or the result would depend on the layout.
pub fn local_join(
    l: &PhysType,
    r: &PhysType,
    lk: &[usize],
    rk: &[usize],
    kernel: &KernelRef,
    sites: usize,
) -> TResult<PhysType> {
    partial_input("local_join", l)?;
    partial_input("local_join", r)?;
    let rel = join(&l.rel, &r.rel, lk, rk, kernel)?;
    if !co_located(&l.placement, &r.placement, lk, rk, sites) {
        return Err(TypeError::new(
            ErrorCode::BadField,
            None,
            format!(
                "the operands are not co-located for the join (left is {}, right is {}, join keys {lk:?} = {rk:?}): the result would depend on the layout",
                l.placement, r.placement
            ),
        ));
    }
    let placement = match (&l.placement, &r.placement) {
        (Placement::Replicated, Placement::Replicated) => Placement::Replicated,
        (Placement::Replicated, Placement::Hash(dr)) => {
            Placement::Hash(dr.iter().map(|&d| join_output_dim(d, l.rel.key_arity(), lk, rk)).collect())
        }
        (Placement::Hash(dl), _) => Placement::Hash(dl.clone()),
        _ => Placement::Any,
    };
    Ok(PhysType::complete(rel, placement))
}

/// Local aggregation: per site and group. Over a relation hashed on dims that
/// are not all group-by dims, the result is a partial aggregate whose exact
/// tuple count is found by evaluating the placement function.
pub fn local_aggregate(x: &PhysType, group_by: &[usize], kernel: &KernelRef, sites: usize) -> TResult<PhysType> {
    let rel = aggregate(&x.rel, group_by, kernel)?;
    let whole_groups = match &x.placement {
        Placement::Replicated => Some(Placement::Replicated),
        Placement::Hash(d) if d.iter().all(|a| group_by.contains(a)) => {
            Some(Placement::Hash(d.iter().map(|a| group_by.iter().position(|g| g == a).unwrap()).collect()))
        }
        _ => None,
    };
    if let Some(placement) = whole_groups {
        // Every group is whole on one site (or on every site): the result is
        // complete, even over a shuffled partial aggregate (the second phase).
        return Ok(PhysType::complete(rel, placement));
    }
    partial_input("local_aggregate", x)?;
    match &x.placement {
        Placement::Hash(d) => {
            if concat_params(kernel).is_some() {
                return Err(TypeError::new(
                    ErrorCode::BadField,
                    None,
                    format!("a concat aggregation needs its groups whole on one site; the input is hashed on {d:?}"),
                ));
            }
            let tuples = partial_tuples(&x.rel, group_by, d, sites)?;
            let complete = tuples == rel.tuples();
            Ok(PhysType { rel, placement: Placement::Any, complete, tuples })
        }
        _ => Err(TypeError::new(
            ErrorCode::BadField,
            None,
            "the input's placement is unknown, so a local aggregation's result would depend on the layout; shuffle it on the group-by dims first",
        )),
    }
}

/// (relation, group_by, hashed dims, sites): what a partial-aggregate count depends on.
type PartialCountKey = (RelType, Vec<usize>, Vec<usize>, usize);

thread_local! {
    /// Partial-aggregate counts already computed: the e-graph types many
    /// aggregations of the same relation with the same placement.
    static PARTIAL_COUNTS: std::cell::RefCell<std::collections::HashMap<PartialCountKey, u64>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// The exact number of tuples of a local aggregation by `group_by` over a
/// relation hashed on `dims` over `sites` sites: the distinct (group, site)
/// pairs, found by evaluating the placement function over the key space.
pub fn partial_tuples(x: &RelType, group_by: &[usize], dims: &[usize], sites: usize) -> TResult<u64> {
    let key = (x.clone(), group_by.to_vec(), dims.to_vec(), sites);
    if let Some(n) = PARTIAL_COUNTS.with(|c| c.borrow().get(&key).copied()) {
        return Ok(n);
    }
    // Count the distinct (group, site) pairs: each is one partial tuple.
    // Groups are numbered in mixed radix over the input frontier.
    let mut pairs: Vec<u64> = Vec::with_capacity(x.tuples().min(ENUMERATION_LIMIT) as usize);
    x.for_each_key(|k| {
        let group = group_by.iter().fold(0u64, |acc, &g| acc * u64::from(x.frontier[g]) + u64::from(k[g]));
        pairs.push(group * sites as u64 + site_of(k, dims, sites) as u64);
    })?;
    pairs.sort_unstable();
    pairs.dedup();
    let n = pairs.len() as u64;
    PARTIAL_COUNTS.with(|c| {
        let mut c = c.borrow_mut();
        if c.len() > 4096 {
            c.clear();
        }
        c.insert(key, n);
    });
    Ok(n)
}

/// Local filter: placement unchanged.
pub fn local_filter(x: &PhysType, p: &Predicate) -> TResult<PhysType> {
    partial_input("local_filter", x)?;
    Ok(PhysType::complete(filter(&x.rel, p)?, x.placement.clone()))
}

/// Local map: placement kept where the hashed dims pass through the key map.
pub fn local_map_phys(x: &PhysType, key: Option<&KeyFn>, kernel: Option<&KernelRef>) -> TResult<PhysType> {
    partial_input("local_map", x)?;
    let rel = local_map(&x.rel, key, kernel)?;
    let placement = match (&x.placement, key) {
        (p, None) => p.clone(),
        (Placement::Hash(d), Some(f)) => {
            let pass = f.passthrough();
            let pos: Option<Vec<usize>> = d.iter().map(|a| pass.iter().position(|p| *p == Some(*a))).collect();
            match pos {
                Some(pos) => Placement::Hash(pos),
                None => Placement::Any,
            }
        }
        (p, Some(_)) => p.clone(),
    };
    Ok(PhysType::complete(rel, placement))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::concat_as_aggregate;

    fn matrix(frontier: [u32; 2], placement: Placement) -> PhysType {
        PhysType::complete(RelType::dense(frontier.to_vec(), vec![2, 2]), placement)
    }

    /// A local join of operands that are not co-located on the join keys is
    /// ill-typed, so no rule can build one: a join lowered without its
    /// broadcast (the mutant the soundness harness cannot even build) is
    /// refused wherever it would lose pairs.
    #[test]
    fn a_local_join_of_operands_not_co_located_is_refused() {
        let mm = KernelRef::parse("matMul").unwrap();
        let (x, y) = (matrix([3, 4], Placement::Hash(vec![0])), matrix([4, 5], Placement::Hash(vec![1])));
        let e = local_join(&x, &y, &[1], &[0], &mm, 4).unwrap_err();
        assert!(e.message.contains("not co-located"), "{}", e.message);
        // Co-partitioned on the join dim, or one operand on every site.
        let (xj, yj) = (matrix([3, 4], Placement::Hash(vec![1])), matrix([4, 5], Placement::Hash(vec![0])));
        assert!(local_join(&xj, &yj, &[1], &[0], &mm, 4).is_ok());
        assert!(local_join(&broadcast(&x), &y, &[1], &[0], &mm, 4).is_ok());
        // One site: everything is co-located.
        assert!(local_join(&x, &y, &[1], &[0], &mm, 1).is_ok());
    }

    /// A concat aggregation over a relation whose groups are spread over
    /// sites is ill-typed: lowering `concat` with a shuffle that includes
    /// the pieces' key dim cannot be built.
    #[test]
    fn a_concat_aggregation_of_groups_split_over_sites_is_refused() {
        // Pieces along key dim 1, grouped by dim 0.
        let x = matrix([3, 4], Placement::Hash(vec![0, 1]));
        let (g, concat) = concat_as_aggregate(&x.rel, 1, 0);
        let e = local_aggregate(&x, &g, &concat, 4).unwrap_err();
        assert!(e.message.contains("groups whole on one site"), "{}", e.message);
        let whole = shuffle(&x, &g, 4).unwrap();
        assert!(local_aggregate(&whole, &g, &concat, 4).unwrap().complete);
    }
}
