//! Type and frontier rules of the TRA operators: inputs, joins, aggregations,
//! key maps, filters, transforms, tiles and concats (and the site-local map
//! that IA shares with them).

use super::{checked_product, tick, KeySet, Placement, RelType, TResult, TypeError, ENUMERATION_LIMIT};
use crate::error::ErrorCode;
use crate::kernel::KernelRef;
use crate::keyexpr::{Key, KeyFn, Predicate};
use crate::program::{InputDecl, PlacementDecl};
use std::collections::{BTreeMap, BTreeSet};

pub(super) fn check_dims(dims: &[usize], arity: usize, field: &'static str, what: &str) -> TResult<()> {
    let mut seen = BTreeSet::new();
    for &d in dims {
        if d >= arity {
            return Err(TypeError::new(
                ErrorCode::DimOutOfRange,
                Some(field),
                format!("{what} dim {d} is out of range for a key of arity {arity}"),
            ));
        }
        if !seen.insert(d) {
            return Err(TypeError::new(ErrorCode::BadField, Some(field), format!("{what} dim {d} is listed twice")));
        }
    }
    Ok(())
}

fn kernel_err(e: crate::kernel::KernelError) -> TypeError {
    use crate::kernel::KernelError as K;
    let code = match &e {
        K::Unknown(_) => ErrorCode::UnknownKernel,
        K::BadUse(_) => ErrorCode::BadField,
        K::BadShape(_) => ErrorCode::BadKernelShape,
    };
    TypeError::new(code, Some("kernel"), e.to_string())
}

fn check_kernel(kernel: &KernelRef, arity: usize) -> TResult<()> {
    kernel.check().map_err(kernel_err)?;
    if kernel.arity() != arity {
        return Err(TypeError::new(
            ErrorCode::BadField,
            Some("kernel"),
            format!("kernel {kernel} takes {} operand(s), this operator gives it {arity}", kernel.arity()),
        ));
    }
    Ok(())
}

fn single_output(kernel: &KernelRef, shapes: &[&[usize]]) -> TResult<Vec<usize>> {
    let shape = kernel.output_shape(shapes).map_err(kernel_err)?;
    let n = kernel.outputs_per_call(shapes).map_err(kernel_err)?;
    if n != 1 {
        return Err(TypeError::new(
            ErrorCode::BadField,
            Some("kernel"),
            format!("kernel {kernel} gives {n} blocks per call; only a local map can pair several blocks with keys"),
        ));
    }
    Ok(shape)
}

/// The concat kernel's parameters, if `kernel` is `concat(key_dim,array_dim)`.
pub fn concat_params(kernel: &KernelRef) -> Option<(usize, usize)> {
    match kernel {
        KernelRef::Named { name, args } if name == "concat" && args.len() == 2 => {
            Some((args[0].parse().ok()?, args[1].parse().ok()?))
        }
        _ => None,
    }
}

/// The type of an input, after checking its declaration.
pub fn input(decl: &InputDecl) -> TResult<RelType> {
    let mut frontier = Vec::with_capacity(decl.key_bounds.len());
    for (i, &b) in decl.key_bounds.iter().enumerate() {
        if b <= 0 || b > i64::from(u32::MAX) {
            return Err(TypeError::new(
                ErrorCode::BadBounds,
                Some("key_bounds"),
                format!("key bound {i} is {b}: key bounds must be between 1 and {}", u32::MAX),
            ));
        }
        frontier.push(b as u32);
    }
    let mut array_bounds = Vec::with_capacity(decl.array_bounds.len());
    for (i, &b) in decl.array_bounds.iter().enumerate() {
        // 0 is an empty axis: every block is empty (numpy's zero-size arrays).
        if b < 0 {
            return Err(TypeError::new(
                ErrorCode::BadBounds,
                Some("array_bounds"),
                format!("array bound {i} is {b}: array bounds must not be negative"),
            ));
        }
        array_bounds.push(b as usize);
    }
    let t = RelType::dense(frontier, array_bounds);
    let tuples = checked_product(t.frontier.iter().map(|&f| u64::from(f)));
    let floats =
        tuples.and_then(|n| checked_product(t.array_bounds.iter().map(|&b| b as u64)).and_then(|b| n.checked_mul(b)));
    if floats.is_none() {
        return Err(TypeError::new(
            ErrorCode::BadBounds,
            Some("key_bounds"),
            format!(
                "the relation's size overflows: key bounds {:?} × array bounds {:?} is more than 2^64 floats",
                decl.key_bounds, decl.array_bounds
            ),
        ));
    }
    if let PlacementDecl::Hash(d) = &decl.placement {
        check_dims(d, t.key_arity(), "placement", "placement hash")?;
    }
    Ok(t)
}

/// The placement an input declaration gives.
pub fn input_placement(decl: &InputDecl, sites: usize) -> Placement {
    if sites == 1 {
        return Placement::Replicated;
    }
    match &decl.placement {
        PlacementDecl::Hash(d) => Placement::Hash(d.clone()),
        PlacementDecl::Replicated => Placement::Replicated,
        PlacementDecl::Any => Placement::Any,
    }
}

/// Join: output key = left key ++ right key without the right join dims.
pub fn join(l: &RelType, r: &RelType, lk: &[usize], rk: &[usize], kernel: &KernelRef) -> TResult<RelType> {
    if lk.len() != rk.len() {
        return Err(TypeError::new(
            ErrorCode::BadField,
            Some("right_keys"),
            format!("left_keys has {} dims but right_keys has {}", lk.len(), rk.len()),
        ));
    }
    check_dims(lk, l.key_arity(), "left_keys", "left key")?;
    check_dims(rk, r.key_arity(), "right_keys", "right key")?;
    // Two complete relations must agree on the joined bounds (anything else
    // is a mistake). A relation with holes (a filter's result, a mask) joins
    // anything: the join is an inner join on keys, missing keys match
    // nothing, and the frontier below is that of the keys that do match.
    let complete = l.keys == KeySet::Dense && r.keys == KeySet::Dense;
    for (&a, &b) in lk.iter().zip(rk) {
        if complete && l.frontier[a] != r.frontier[b] {
            return Err(TypeError::new(
                ErrorCode::BoundsMismatch,
                Some("right_keys"),
                format!(
                    "left key dim {a} has bound {}, right key dim {b} has bound {} (both relations are complete; \
                     only a relation with holes, such as a mask, joins one of other bounds)",
                    l.frontier[a], r.frontier[b]
                ),
            ));
        }
    }
    check_kernel(kernel, 2)?;
    let bounds = single_output(kernel, &[&l.array_bounds, &r.array_bounds])?;
    let rest: Vec<usize> = (0..r.key_arity()).filter(|d| !rk.contains(d)).collect();
    let mut frontier = l.frontier.clone();
    frontier.extend(rest.iter().map(|&d| r.frontier[d]));
    if l.keys == KeySet::Dense && r.keys == KeySet::Dense {
        let t = RelType::dense(frontier, bounds);
        if t.tuples() == u64::MAX {
            return Err(TypeError::new(ErrorCode::BadBounds, None, "the join's output size overflows"));
        }
        return Ok(t);
    }
    let (lkeys, rkeys) = (l.key_list()?, r.key_list()?);
    let mut index: BTreeMap<Vec<u32>, Vec<&Key>> = BTreeMap::new();
    let mut ticker = crate::deadline::Ticker::default();
    for k in rkeys.iter() {
        tick(&mut ticker)?;
        index.entry(rk.iter().map(|&d| k[d]).collect()).or_default().push(k);
    }
    let mut out = Vec::new();
    let mut ticker = crate::deadline::Ticker::default();
    for a in lkeys.iter() {
        tick(&mut ticker)?;
        let jk: Vec<u32> = lk.iter().map(|&d| a[d]).collect();
        if let Some(bs) = index.get(&jk) {
            for b in bs {
                if out.len() as u64 >= ENUMERATION_LIMIT {
                    return Err(TypeError::new(
                        ErrorCode::LimitExceeded,
                        None,
                        format!("the join has more than {ENUMERATION_LIMIT} keys to enumerate"),
                    ));
                }
                let mut k = a.clone();
                k.extend(rest.iter().map(|&d| b[d]));
                out.push(k);
            }
        }
    }
    // The frontier of a relation with holes is that of the keys it really has
    // (max + 1), so that every way of computing a relation gives one type.
    let _ = frontier;
    Ok(RelType::from_keys(l.key_arity() + rest.len(), out, bounds))
}

/// Aggregation: output key = the group-by dims, in order.
pub fn aggregate(x: &RelType, group_by: &[usize], kernel: &KernelRef) -> TResult<RelType> {
    check_dims(group_by, x.key_arity(), "group_by", "group-by")?;
    kernel.check().map_err(kernel_err)?;
    let bounds = if let Some((kd, ad)) = concat_params(kernel) {
        concat_bounds(x, kd, ad, Some(group_by))?
    } else {
        check_kernel(kernel, 2)?;
        if !kernel.is_assoc_comm() {
            return Err(TypeError::new(
                ErrorCode::BadField,
                Some("kernel"),
                format!("kernel {kernel} is not associative and commutative, so it cannot aggregate"),
            ));
        }
        let out = single_output(kernel, &[&x.array_bounds, &x.array_bounds])?;
        if out != x.array_bounds {
            return Err(TypeError::new(
                ErrorCode::BadKernelShape,
                Some("kernel"),
                format!(
                    "kernel {kernel} maps blocks {:?} to {out:?}; aggregation needs the same shape",
                    x.array_bounds
                ),
            ));
        }
        out
    };
    let frontier: Vec<u32> = group_by.iter().map(|&d| x.frontier[d]).collect();
    if x.keys == KeySet::Dense {
        return Ok(RelType::dense(frontier, bounds));
    }
    let list = x.key_list()?;
    let mut keys: Vec<Key> = Vec::with_capacity(list.len());
    let mut ticker = crate::deadline::Ticker::default();
    for k in list.iter() {
        tick(&mut ticker)?;
        keys.push(group_by.iter().map(|&d| k[d]).collect());
    }
    let _ = frontier;
    Ok(RelType::from_keys(group_by.len(), keys, bounds))
}

fn concat_bounds(x: &RelType, kd: usize, ad: usize, group_by: Option<&[usize]>) -> TResult<Vec<usize>> {
    if kd >= x.key_arity() {
        return Err(TypeError::new(
            ErrorCode::DimOutOfRange,
            Some("key_dim"),
            format!("key dim {kd} is out of range for a key of arity {}", x.key_arity()),
        ));
    }
    if ad >= x.array_bounds.len() {
        return Err(TypeError::new(
            ErrorCode::DimOutOfRange,
            Some("array_dim"),
            format!("array dim {ad} is out of range for blocks of rank {}", x.array_bounds.len()),
        ));
    }
    if let Some(g) = group_by {
        let expected: Vec<usize> = (0..x.key_arity()).filter(|&d| d != kd).collect();
        if g != expected.as_slice() {
            return Err(TypeError::new(
                ErrorCode::BadField,
                Some("group_by"),
                format!("a concat({kd},{ad}) aggregation must group by every other key dim, {expected:?}, not {g:?}"),
            ));
        }
    }
    let mut b = x.array_bounds.clone();
    b[ad] = b[ad]
        .checked_mul(x.frontier[kd] as usize)
        .ok_or_else(|| TypeError::new(ErrorCode::BadBounds, None, "the concatenated block size overflows"))?;
    Ok(b)
}

fn map_keys(x: &RelType, f: &KeyFn, field: &'static str) -> TResult<(Vec<(usize, Key)>, usize)> {
    if let Some(&d) = f.dims_read().iter().next_back() {
        if d >= x.key_arity() {
            return Err(TypeError::new(
                ErrorCode::DimOutOfRange,
                Some(field),
                format!("`{f}` reads k{d}, but the key has arity {}", x.key_arity()),
            ));
        }
    }
    let keys = x.key_list().map_err(|e| TypeError { field: Some(field), ..e })?;
    let fan = f.fanout();
    if (keys.len() as u64).saturating_mul(fan) > ENUMERATION_LIMIT {
        return Err(TypeError::new(
            ErrorCode::LimitExceeded,
            Some(field),
            format!("`{f}` gives {} × {fan} keys, too many to enumerate (limit {ENUMERATION_LIMIT})", keys.len()),
        ));
    }
    let mut out = Vec::with_capacity(keys.len() * fan as usize);
    let mut ticker = crate::deadline::Ticker::default();
    for (i, k) in keys.iter().enumerate() {
        tick(&mut ticker).map_err(|e| TypeError { field: Some(field), ..e })?;
        let ys = f
            .eval(k)
            .map_err(|e| TypeError::new(ErrorCode::BadKeyMap, Some(field), format!("`{f}` on key {k:?}: {e}")))?;
        out.extend(ys.into_iter().map(|y| (i, y)));
    }
    Ok((out, keys.len()))
}

fn unique_keys(x: &RelType, mapped: &[(usize, Key)], f: &KeyFn, field: &'static str) -> TResult<()> {
    let keys = x.key_list()?;
    let mut seen: std::collections::HashMap<&Key, usize> = std::collections::HashMap::with_capacity(mapped.len());
    let mut ticker = crate::deadline::Ticker::default();
    for (i, y) in mapped {
        tick(&mut ticker).map_err(|e| TypeError { field: Some(field), ..e })?;
        if let Some(&j) = seen.get(y) {
            return Err(TypeError::new(
                ErrorCode::BadKeyMap,
                Some(field),
                if i == &j {
                    format!("`{f}` maps key {:?} to {y:?} twice: output keys must be unique", keys[*i])
                } else {
                    format!(
                        "`{f}` maps keys {:?} and {:?} both to {y:?}: output keys must be unique",
                        keys[j], keys[*i]
                    )
                },
            ));
        }
        seen.insert(y, *i);
    }
    Ok(())
}

/// Rekey: every key through `f`; keys must stay unique.
pub fn rekey(x: &RelType, f: &KeyFn) -> TResult<RelType> {
    local_map(x, Some(f), None)
}

/// Filter: the keys satisfying `p`.
pub fn filter(x: &RelType, p: &Predicate) -> TResult<RelType> {
    if let Some(&d) = p.dims_read().iter().next_back() {
        if d >= x.key_arity() {
            return Err(TypeError::new(
                ErrorCode::DimOutOfRange,
                Some("predicate"),
                format!("`{p}` reads k{d}, but the key has arity {}", x.key_arity()),
            ));
        }
    }
    let keys = x.key_list().map_err(|e| TypeError { field: Some("predicate"), ..e })?;
    let mut out = Vec::new();
    let mut ticker = crate::deadline::Ticker::default();
    for k in keys.iter() {
        tick(&mut ticker).map_err(|e| TypeError { field: Some("predicate"), ..e })?;
        let keep = p
            .eval(k)
            .map_err(|e| TypeError::new(ErrorCode::BadKeyMap, Some("predicate"), format!("`{p}` on key {k:?}: {e}")))?;
        if keep {
            out.push(k.clone());
        }
    }
    Ok(RelType::from_keys(x.key_arity(), out, x.array_bounds.clone()))
}

/// Transform: a unary kernel on every block.
pub fn transform(x: &RelType, kernel: &KernelRef) -> TResult<RelType> {
    check_kernel(kernel, 1)?;
    let bounds = single_output(kernel, &[&x.array_bounds])?;
    Ok(RelType { array_bounds: bounds, ..x.clone() })
}

/// The key expression and kernel that implement `tile(dim, size)` as a local
/// map: `[k0, …, k{n-1}, 0..pieces]` paired with the kernel `tile(dim,size)`.
pub fn tile_as_map(x: &RelType, dim: usize, size: usize) -> TResult<(KeyFn, KernelRef)> {
    if dim >= x.array_bounds.len() {
        return Err(TypeError::new(
            ErrorCode::DimOutOfRange,
            Some("dim"),
            format!("array dim {dim} is out of range for blocks of rank {}", x.array_bounds.len()),
        ));
    }
    if size == 0 || !x.array_bounds[dim].is_multiple_of(size) {
        return Err(TypeError::new(
            ErrorCode::BadField,
            Some("size"),
            format!("tile size {size} does not divide array dim {dim} of bound {}", x.array_bounds[dim]),
        ));
    }
    if x.array_bounds[dim] == 0 {
        return Err(TypeError::new(
            ErrorCode::BadField,
            Some("dim"),
            format!("array dim {dim} is empty (bound 0): there are no pieces to tile it into"),
        ));
    }
    let pieces = (x.array_bounds[dim] / size) as u32;
    let key = KeyFn::replicate(x.key_arity(), x.key_arity(), pieces);
    let kernel = KernelRef::Named { name: "tile".into(), args: vec![dim.to_string(), size.to_string()] };
    Ok((key, kernel))
}

/// Tile: cut blocks along `dim` into pieces of `size`; a new last key dim.
pub fn tile(x: &RelType, dim: usize, size: usize) -> TResult<RelType> {
    let (key, kernel) = tile_as_map(x, dim, size)?;
    local_map(x, Some(&key), Some(&kernel))
}

/// The group-by dims and kernel that implement `concat(key_dim, array_dim)`
/// as an aggregation.
pub fn concat_as_aggregate(x: &RelType, key_dim: usize, array_dim: usize) -> (Vec<usize>, KernelRef) {
    let group: Vec<usize> = (0..x.key_arity()).filter(|&d| d != key_dim).collect();
    let kernel = KernelRef::Named { name: "concat".into(), args: vec![key_dim.to_string(), array_dim.to_string()] };
    (group, kernel)
}

/// Concat: the inverse of tile.
pub fn concat(x: &RelType, key_dim: usize, array_dim: usize) -> TResult<RelType> {
    concat_bounds(x, key_dim, array_dim, None)?;
    let (group, kernel) = concat_as_aggregate(x, key_dim, array_dim);
    aggregate(x, &group, &kernel)
}

/// A local map's relation type: keys through `key` (identity when `None`),
/// blocks through `kernel`; a kernel giving `n` blocks pairs with a key
/// expression giving `n` keys.
pub fn local_map(x: &RelType, key: Option<&KeyFn>, kernel: Option<&KernelRef>) -> TResult<RelType> {
    let (bounds, per_call) = match kernel {
        None => (x.array_bounds.clone(), 1),
        Some(k) => {
            check_kernel(k, 1)?;
            let shapes: [&[usize]; 1] = [&x.array_bounds];
            (k.output_shape(&shapes).map_err(kernel_err)?, k.outputs_per_call(&shapes).map_err(kernel_err)?)
        }
    };
    let fan = key.map(|k| k.fanout()).unwrap_or(1);
    if per_call != 1 && per_call as u64 != fan {
        return Err(TypeError::new(
            ErrorCode::BadField,
            Some("kernel"),
            format!("the kernel gives {per_call} blocks per tuple but the key expression gives {fan} keys"),
        ));
    }
    match key {
        None => Ok(RelType { array_bounds: bounds, ..x.clone() }),
        Some(f) if f.is_identity(x.key_arity()) => Ok(RelType { array_bounds: bounds, ..x.clone() }),
        Some(f) if x.keys == KeySet::Dense && is_dense_permutation(f, x.key_arity()) => {
            // Every input dim passes through exactly once, the rest are ranges
            // `0..n`: a bijection onto a dense key space, no enumeration needed.
            let frontier = f
                .passthrough()
                .iter()
                .zip(f.ranges())
                .map(|(p, r)| match (p, r) {
                    (Some(i), _) => x.frontier[*i],
                    (None, Some((_, hi))) => hi,
                    _ => unreachable!("checked by is_dense_permutation"),
                })
                .collect();
            Ok(RelType::dense(frontier, bounds))
        }
        Some(f) => {
            let (mapped, _) = map_keys(x, f, "key")?;
            unique_keys(x, &mapped, f, "key")?;
            Ok(RelType::from_keys(f.output_arity(), mapped.into_iter().map(|(_, k)| k).collect(), bounds))
        }
    }
}

/// A key map whose components are each input dim exactly once, or ranges
/// starting at 0.
fn is_dense_permutation(f: &KeyFn, arity: usize) -> bool {
    let mut seen = vec![false; arity];
    for (p, r) in f.passthrough().into_iter().zip(f.ranges()) {
        match (p, r) {
            (Some(i), _) if i < arity && !seen[i] => seen[i] = true,
            (None, Some((0, _))) => {}
            _ => return false,
        }
    }
    seen.into_iter().all(|s| s)
}
