//! Type and frontier inference for every TRA and IA operator (paper 000 §5.3).
//!
//! The integrity constraints of tensor relations (unique keys, no holes) make
//! every size exact: a dense relation with frontier `f` holds `∏f` tuples of
//! `∏b` floats. Filters and key maps can leave holes; their output key set is
//! computed by brute force over the key space (which is small: tens of
//! thousands of tuples is very large), and kept explicitly.
//!
//! The same functions serve the program checker ([`crate::check`]) and the
//! e-graph analysis, so a class's type is computed exactly like a node's.

use crate::error::ErrorCode;
use crate::kernel::KernelRef;
use crate::keyexpr::{Key, KeyFn, Predicate};
use crate::placement::site_of;
use crate::program::{InputDecl, PlacementDecl};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// The most keys a brute-force enumeration (filter, key map, partial
/// aggregate) may visit.
pub const ENUMERATION_LIMIT: u64 = 1 << 20;

/// A type error without its location; the checker adds the node and field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeError {
    /// What kind of error.
    pub code: ErrorCode,
    /// The field at fault (`left_keys`, `kernel`, …), if one is.
    pub field: Option<&'static str>,
    /// What is wrong, without the node name.
    pub message: String,
}

impl TypeError {
    fn new(code: ErrorCode, field: Option<&'static str>, message: impl Into<String>) -> Self {
        TypeError { code, field, message: message.into() }
    }
}

type TResult<T> = Result<T, TypeError>;

/// The error of a key enumeration stopped by the request's deadline
/// ([`crate::deadline`]).
fn deadline_passed() -> TypeError {
    TypeError::new(ErrorCode::LimitExceeded, None, format!("{} while enumerating keys", crate::deadline::reason()))
}

/// Tick a [`crate::deadline::Ticker`] in a loop over keys; an error once the deadline has passed.
#[inline]
fn tick(t: &mut crate::deadline::Ticker) -> TResult<()> {
    if t.tick() {
        return Err(deadline_passed());
    }
    Ok(())
}

/// Which keys a relation holds.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum KeySet {
    /// Every key below the frontier.
    Dense,
    /// Exactly these keys, sorted and unique (a relation with holes).
    Explicit(Arc<Vec<Key>>),
}

/// The type of a tensor relation: key frontier, block shape and key set.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RelType {
    /// Per key dimension, max key + 1 (0 for an empty relation).
    pub frontier: Vec<u32>,
    /// Shape of every block.
    pub array_bounds: Vec<usize>,
    /// Which keys are present.
    pub keys: KeySet,
}

/// Where the tuples of a physical relation live.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Placement {
    /// Tuple with key `k` at site `h(k[dims])`.
    Hash(Vec<usize>),
    /// Every tuple at every site.
    Replicated,
    /// Each tuple on some site; nothing may be assumed.
    Any,
}

impl std::fmt::Display for Placement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Placement::Hash(d) => write!(f, "hash{d:?}"),
            Placement::Replicated => write!(f, "replicated"),
            Placement::Any => write!(f, "any"),
        }
    }
}

/// The type of a physical relation: its (erased) relation type, its placement,
/// and whether it is complete. A partial aggregate (a local aggregation over a
/// relation not partitioned by the group keys) has the same key on several
/// sites: it is not a tensor relation, and `tuples` counts every copy.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PhysType {
    /// The relation type (for a partial aggregate: its distinct keys).
    pub rel: RelType,
    /// Where tuples live.
    pub placement: Placement,
    /// False for partial aggregates.
    pub complete: bool,
    /// Exact tuple count of the erased relation (every partial copy counted).
    pub tuples: u64,
}

fn checked_product(xs: impl IntoIterator<Item = u64>) -> Option<u64> {
    xs.into_iter().try_fold(1u64, |a, x| a.checked_mul(x))
}

impl RelType {
    /// A dense relation.
    pub fn dense(frontier: Vec<u32>, array_bounds: Vec<usize>) -> Self {
        RelType { frontier, array_bounds, keys: KeySet::Dense }
    }

    /// Number of key dimensions.
    pub fn key_arity(&self) -> usize {
        self.frontier.len()
    }

    /// Number of tuples (saturating; checked types never saturate).
    pub fn tuples(&self) -> u64 {
        match &self.keys {
            KeySet::Dense => checked_product(self.frontier.iter().map(|&f| u64::from(f))).unwrap_or(u64::MAX),
            KeySet::Explicit(k) => k.len() as u64,
        }
    }

    /// Floats in one block.
    pub fn block_floats(&self) -> u64 {
        checked_product(self.array_bounds.iter().map(|&b| b as u64)).unwrap_or(u64::MAX)
    }

    /// Floats in the whole relation.
    pub fn floats(&self) -> u64 {
        self.tuples().saturating_mul(self.block_floats())
    }

    /// The keys, enumerated (in lexicographic order), if there are at most
    /// [`ENUMERATION_LIMIT`].
    pub fn key_list(&self) -> TResult<Arc<Vec<Key>>> {
        match &self.keys {
            KeySet::Explicit(k) => Ok(k.clone()),
            KeySet::Dense => {
                let n = self.tuples();
                if n > ENUMERATION_LIMIT {
                    return Err(TypeError::new(
                        ErrorCode::LimitExceeded,
                        None,
                        format!(
                            "the key space {:?} has {n} keys, too many to enumerate (limit {ENUMERATION_LIMIT})",
                            self.frontier
                        ),
                    ));
                }
                let mut out = Vec::with_capacity(n as usize);
                let mut ticker = crate::deadline::Ticker::default();
                if n > 0 {
                    let mut k = vec![0u32; self.frontier.len()];
                    loop {
                        tick(&mut ticker)?;
                        out.push(k.clone());
                        // Odometer increment, last dim fastest.
                        let mut d = k.len();
                        loop {
                            if d == 0 {
                                return Ok(Arc::new(out));
                            }
                            d -= 1;
                            k[d] += 1;
                            if k[d] < self.frontier[d] {
                                break;
                            }
                            k[d] = 0;
                        }
                    }
                }
                Ok(Arc::new(out))
            }
        }
    }

    /// Visit every key (in lexicographic order) without materialising them,
    /// if there are at most [`ENUMERATION_LIMIT`].
    pub fn for_each_key(&self, mut f: impl FnMut(&[u32])) -> TResult<()> {
        let mut ticker = crate::deadline::Ticker::default();
        match &self.keys {
            KeySet::Explicit(k) => {
                for k in k.iter() {
                    tick(&mut ticker)?;
                    f(k);
                }
                Ok(())
            }
            KeySet::Dense => {
                let n = self.tuples();
                if n > ENUMERATION_LIMIT {
                    return self.key_list().map(|_| ());
                }
                if n == 0 {
                    return Ok(());
                }
                let mut k = vec![0u32; self.frontier.len()];
                loop {
                    tick(&mut ticker)?;
                    f(&k);
                    let mut d = k.len();
                    loop {
                        if d == 0 {
                            return Ok(());
                        }
                        d -= 1;
                        k[d] += 1;
                        if k[d] < self.frontier[d] {
                            break;
                        }
                        k[d] = 0;
                    }
                }
            }
        }
    }

    /// The relation type whose keys are exactly `keys` (any order, no
    /// duplicates): frontier = max + 1 per dim; dense when there are no holes.
    pub fn from_keys(arity: usize, mut keys: Vec<Key>, array_bounds: Vec<usize>) -> RelType {
        keys.sort_unstable();
        keys.dedup();
        let mut frontier = vec![0u32; arity];
        for k in &keys {
            for (f, &c) in frontier.iter_mut().zip(k) {
                *f = (*f).max(c + 1);
            }
        }
        let dense_count = checked_product(frontier.iter().map(|&f| u64::from(f)));
        let keys = if dense_count == Some(keys.len() as u64) && (arity > 0 || !keys.is_empty()) {
            KeySet::Dense
        } else {
            // Shared with an equal set of the same request, and counted
            // against its key budget (crate::deadline).
            KeySet::Explicit(crate::deadline::share_keys(keys))
        };
        RelType { frontier, array_bounds, keys }
    }
}

impl PhysType {
    /// A complete physical relation.
    pub fn complete(rel: RelType, placement: Placement) -> Self {
        let tuples = rel.tuples();
        PhysType { rel, placement, complete: true, tuples }
    }

    /// Floats in the erased relation (every partial copy counted): what a
    /// shuffle of it moves.
    pub fn floats(&self) -> u64 {
        self.tuples.saturating_mul(self.rel.block_floats())
    }
}

fn check_dims(dims: &[usize], arity: usize, field: &'static str, what: &str) -> TResult<()> {
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
        if b <= 0 {
            return Err(TypeError::new(
                ErrorCode::BadBounds,
                Some("array_bounds"),
                format!("array bound {i} is {b}: array bounds must be positive"),
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
    for (&a, &b) in lk.iter().zip(rk) {
        if l.frontier[a] != r.frontier[b] {
            return Err(TypeError::new(
                ErrorCode::BoundsMismatch,
                Some("right_keys"),
                format!("left key dim {a} has bound {}, right key dim {b} has bound {}", l.frontier[a], r.frontier[b]),
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

// ---------------------------------------------------------------------------
// IA operators.

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
