//! The reference interpreter: plain, single-threaded, obviously correct
//! evaluation of TRA programs ([`eval_tra`]) and of IA plans ([`eval_ia`]), with
//! sites as explicit `(key, array, site)` triples. It is the oracle for every
//! other executor, for every rewrite rule and for the cost model's float counts,
//! so it favours plainness over speed everywhere.
//!
//! # Semantics (paper 004 §2.1 and §3)
//!
//! Keys are `Vec<u32>`, blocks are `ndarray` arrays (numpy convention: dimension
//! 0 is the row axis).
//!
//! TRA:
//! - `join(lk, rk, f)`: every pair with `l.key[lk[i]] == r.key[rk[i]]` for all
//!   `i`; output key = left key ++ (right key without the dims `rk`, in order);
//!   block = `f(l, r)`.
//! - `aggregate(g, f)`: group by the key projected on `g` (in that order) and
//!   fold each group's blocks with `f`, in ascending key order
//!   (`((b0 f b1) f b2) …`; a group of one block is that block). With the kernel
//!   `concat(key_dim, array_dim)`, each group's blocks are joined along
//!   `array_dim` ordered by `key[key_dim]` (`kernels::concat_pieces`); the number
//!   of pieces is the maximum of `key[key_dim]` over the whole input relation
//!   plus one; a piece missing from a group is zero-filled (the catalog's
//!   definition), a piece present twice is an error.
//! - `rekey(f)`: each key `k` becomes every key of `f(k)` (several when `f` has a
//!   range component), all with the same block; two tuples that get the same key
//!   are an error (key uniqueness broken).
//! - `filter(p)`, `transform(f)`: per tuple; a transform kernel must give exactly
//!   one block.
//! - `tile(dim, size)`: key `k` becomes `k ++ [j]` with block piece `j` of
//!   `tile(dim,size)` applied to the block.
//! - `concat(key_dim, array_dim)`: the aggregation with the concat kernel above,
//!   grouping by every key dim except `key_dim`, in order.
//!
//! IA (a tuple with [`Site::Everywhere`] is one copy present on every site):
//! - `broadcast`: every tuple becomes `Everywhere`; it moves `sites ×` the floats
//!   of every input tuple (an `Everywhere` input tuple counts once).
//! - `shuffle(dims)`: every tuple goes to `At(site_of(key, dims, sites))`; it
//!   moves the floats of every input tuple once (an `Everywhere` tuple is sent
//!   once), whether or not a tuple stays on the site it was on: that is the cost
//!   model's definition.
//! - `local_join`: joins the pairs that share a site: `(At s, At s)`,
//!   `(Everywhere, At s)` and `(At s, Everywhere)` give `At s`;
//!   `(Everywhere, Everywhere)` gives `Everywhere`. Keys and blocks as in TRA.
//! - `local_aggregate(g, f)`: groups by (projected key, site). Rule for
//!   `Everywhere` tuples: a group (projected key) whose tuples are all
//!   `Everywhere` is aggregated once and gives an `Everywhere` tuple (every site
//!   computes the same value). A group that has at least one `At` tuple is
//!   aggregated on every site `s` in `0..sites` separately, over its `At s`
//!   tuples together with all its `Everywhere` tuples (they are on site `s` too),
//!   giving an `At s` tuple for every site where that set is non-empty. This is
//!   exactly what a real site would compute. The concat kernel as in TRA, its
//!   piece count taken from the whole input relation.
//! - `local_filter`, `local_map(key, kernel)`: per tuple, site unchanged. The
//!   output keys are `key(k)` (identity when absent), the blocks `kernel(b)`
//!   (identity when absent); `n` blocks and `n` keys are paired by position, one
//!   block goes to every output key, any other combination is an error.
//! - inputs are placed by [`place`]; [`erase`] projects the site away and fails
//!   on a key held more than once (partial aggregates are not a tensor relation).
//!
//! Every error names the node (or input) at fault; nothing here panics on any
//! program, plan or data (kernel implementations aside).

pub use crate::semantics::{
    all_keys, erase, input_bounds, input_sites, random_inputs, random_relation, random_relation_with, AnyLayout, Block,
    IaRun, InterpError, PhysRelation, PhysTuple, Relation, Site,
};

use crate::semantics::{
    bad, check_input_tuples, concat_count, concat_kernel, eval_key, eval_pred, evaluation_order, join_key, kernel_err,
    project, Res,
};
use ndarray::Dimension as _;
use std::collections::BTreeMap;
use tra_optimizer::kernel::KernelRef;
use tra_optimizer::keyexpr::{Key, KeyFn, Predicate};
use tra_optimizer::placement::site_of;
use tra_optimizer::program::{topo_order, IaOp, InputDecl, PlacementDecl, Plan, Program, TraOp};

// ---------------------------------------------------------------------------
// Comparing results
// ---------------------------------------------------------------------------

fn truncated(b: &Block) -> String {
    let s = format!("{b}");
    const MAX: usize = 800;
    if s.len() <= MAX {
        s
    } else {
        let mut end = MAX;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{} … ({} more characters)", &s[..end], s.len() - end)
    }
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    if a == b || (a.is_nan() && b.is_nan()) {
        return true;
    }
    (a - b).abs() <= tol * (1.0 + a.abs())
}

/// Compare two relations: same keys, same block shapes, and every element
/// within `|e - a| <= tol * (1 + |e|)` (NaN equals NaN). The message names the
/// first difference and shows both blocks (truncated).
pub fn compare(expected: &Relation, actual: &Relation, tol: f64) -> Result<(), String> {
    if let Some(k) = expected.tuples.keys().find(|k| !actual.tuples.contains_key(*k)) {
        return Err(format!(
            "key {k:?} expected but missing ({} tuples expected, {} actual)",
            expected.len(),
            actual.len()
        ));
    }
    if let Some(k) = actual.tuples.keys().find(|k| !expected.tuples.contains_key(*k)) {
        return Err(format!(
            "key {k:?} present but not expected ({} tuples expected, {} actual)",
            expected.len(),
            actual.len()
        ));
    }
    for (k, e) in &expected.tuples {
        let a = &actual.tuples[k];
        if e.shape() != a.shape() {
            return Err(format!(
                "key {k:?}: block shape {:?} expected, {:?} actual\nexpected:\n{}\nactual:\n{}",
                e.shape(),
                a.shape(),
                truncated(e),
                truncated(a)
            ));
        }
        for ((idx, &x), &y) in e.indexed_iter().zip(a.iter()) {
            if !close(x, y, tol) {
                return Err(format!(
                    "key {k:?}: element {:?}: expected {x}, actual {y}\nexpected:\n{}\nactual:\n{}",
                    idx.slice(),
                    truncated(e),
                    truncated(a)
                ));
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Kernels, applied
// ---------------------------------------------------------------------------

/// Apply a kernel; any number of blocks back.
fn apply_n(node: &str, kernel: &KernelRef, operands: &[&Block]) -> Res<Vec<Block>> {
    crate::kernels::apply(kernel, operands).map_err(|e| kernel_err(node, kernel, e))
}

/// Apply a kernel that must give exactly one block.
fn apply1(node: &str, kernel: &KernelRef, operands: &[&Block]) -> Res<Block> {
    let mut out = apply_n(node, kernel, operands)?;
    if out.len() != 1 {
        return Err(bad(node, format!("kernel {kernel} gave {} blocks, expected exactly one", out.len())));
    }
    Ok(out.pop().expect("one block"))
}

fn check_join_dims(node: &str, lk: &[usize], rk: &[usize]) -> Res<()> {
    if lk.len() != rk.len() {
        return Err(bad(node, format!("{} left join dims but {} right join dims", lk.len(), rk.len())));
    }
    Ok(())
}

/// Fold blocks (already in ascending key order) with a binary kernel
/// ([`crate::kernels::fold`]).
fn fold_blocks(node: &str, kernel: &KernelRef, blocks: &[&Block]) -> Res<Block> {
    crate::kernels::fold(kernel, blocks).map_err(|e| kernel_err(node, kernel, e))
}

/// Join one group's pieces `(index, block)` along `array_dim` with
/// [`crate::kernels::concat_pieces`] (missing pieces are zero-filled, a
/// repeated index is an error).
fn concat_group(
    node: &str,
    kernel: &KernelRef,
    mut pieces: Vec<(u32, &Block)>,
    count: u32,
    array_dim: usize,
) -> Res<Block> {
    pieces.sort_by_key(|(i, _)| *i);
    crate::kernels::concat_pieces(&pieces, array_dim, count).map_err(|e| kernel_err(node, kernel, e))
}

fn concat_kernel_ref(key_dim: usize, array_dim: usize) -> KernelRef {
    KernelRef::Named { name: "concat".into(), args: vec![key_dim.to_string(), array_dim.to_string()] }
}

// ---------------------------------------------------------------------------
// TRA
// ---------------------------------------------------------------------------

fn tra_join(
    node: &str,
    left: &Relation,
    right: &Relation,
    lk: &[usize],
    rk: &[usize],
    kernel: &KernelRef,
) -> Res<Relation> {
    check_join_dims(node, lk, rk)?;
    let mut index: BTreeMap<Key, Vec<(&Key, &Block)>> = BTreeMap::new();
    for (k, b) in &right.tuples {
        index.entry(project(node, k, rk)?).or_default().push((k, b));
    }
    let mut out = BTreeMap::new();
    for (lkey, lb) in &left.tuples {
        let jk = project(node, lkey, lk)?;
        for (rkey, rb) in index.get(&jk).map(Vec::as_slice).unwrap_or(&[]) {
            let key = join_key(lkey, rkey, rk);
            let block = apply1(node, kernel, &[lb, rb])?;
            if out.insert(key.clone(), block).is_some() {
                return Err(InterpError::DuplicateKey { node: node.to_string(), key });
            }
        }
    }
    Ok(Relation { tuples: out })
}

fn tra_aggregate(node: &str, input: &Relation, group_by: &[usize], kernel: &KernelRef) -> Res<Relation> {
    if let Some((key_dim, array_dim)) = concat_kernel(node, kernel)? {
        return tra_concat_by(node, input, group_by, key_dim, array_dim);
    }
    let mut groups: BTreeMap<Key, Vec<&Block>> = BTreeMap::new();
    for (k, b) in &input.tuples {
        groups.entry(project(node, k, group_by)?).or_default().push(b);
    }
    let mut out = BTreeMap::new();
    for (g, blocks) in groups {
        out.insert(g, fold_blocks(node, kernel, &blocks)?);
    }
    Ok(Relation { tuples: out })
}

fn tra_concat_by(node: &str, input: &Relation, group_by: &[usize], key_dim: usize, array_dim: usize) -> Res<Relation> {
    let count = concat_count(node, input.tuples.keys(), key_dim)?;
    let mut groups: BTreeMap<Key, Vec<(u32, &Block)>> = BTreeMap::new();
    for (k, b) in &input.tuples {
        let piece = project(node, k, &[key_dim])?[0];
        groups.entry(project(node, k, group_by)?).or_default().push((piece, b));
    }
    let mut out = BTreeMap::new();
    for (g, pieces) in groups {
        let block = concat_group(node, &concat_kernel_ref(key_dim, array_dim), pieces, count, array_dim)?;
        out.insert(g, block);
    }
    Ok(Relation { tuples: out })
}

fn tra_concat(node: &str, input: &Relation, key_dim: usize, array_dim: usize) -> Res<Relation> {
    let Some(arity) = input.tuples.keys().next().map(Vec::len) else {
        return Ok(Relation::new());
    };
    if key_dim >= arity {
        return Err(bad(node, format!("concat: key dim {key_dim} does not exist in keys of arity {arity}")));
    }
    let group_by: Vec<usize> = (0..arity).filter(|&d| d != key_dim).collect();
    tra_concat_by(node, input, &group_by, key_dim, array_dim)
}

fn tra_rekey(node: &str, input: &Relation, key: &KeyFn) -> Res<Relation> {
    let mut out = BTreeMap::new();
    for (k, b) in &input.tuples {
        for nk in eval_key(node, key, k)? {
            if out.insert(nk.clone(), b.clone()).is_some() {
                return Err(InterpError::DuplicateKey { node: node.to_string(), key: nk });
            }
        }
    }
    Ok(Relation { tuples: out })
}

fn tra_filter(node: &str, input: &Relation, predicate: &Predicate) -> Res<Relation> {
    let mut out = BTreeMap::new();
    for (k, b) in &input.tuples {
        if eval_pred(node, predicate, k)? {
            out.insert(k.clone(), b.clone());
        }
    }
    Ok(Relation { tuples: out })
}

fn tra_transform(node: &str, input: &Relation, kernel: &KernelRef) -> Res<Relation> {
    let mut out = BTreeMap::new();
    for (k, b) in &input.tuples {
        out.insert(k.clone(), apply1(node, kernel, &[b])?);
    }
    Ok(Relation { tuples: out })
}

fn tile_kernel(dim: usize, size: usize) -> KernelRef {
    KernelRef::Named { name: "tile".into(), args: vec![dim.to_string(), size.to_string()] }
}

fn tra_tile(node: &str, input: &Relation, dim: usize, size: usize) -> Res<Relation> {
    let kernel = tile_kernel(dim, size);
    let mut out = BTreeMap::new();
    for (k, b) in &input.tuples {
        for (j, piece) in apply_n(node, &kernel, &[b])?.into_iter().enumerate() {
            let j = u32::try_from(j).map_err(|_| bad(node, "tile: too many pieces"))?;
            let mut nk = k.clone();
            nk.push(j);
            out.insert(nk, piece);
        }
    }
    Ok(Relation { tuples: out })
}

fn eval_tra_op(node: &str, op: &TraOp, values: &BTreeMap<String, Relation>) -> Res<Relation> {
    let get = |name: &String| -> Res<&Relation> {
        values.get(name).ok_or_else(|| InterpError::UnknownOperand { node: node.to_string(), operand: name.clone() })
    };
    match op {
        TraOp::Join { left, right, left_keys, right_keys, kernel } => {
            tra_join(node, get(left)?, get(right)?, left_keys, right_keys, kernel)
        }
        TraOp::Aggregate { input, group_by, kernel } => tra_aggregate(node, get(input)?, group_by, kernel),
        TraOp::Rekey { input, key } => tra_rekey(node, get(input)?, key),
        TraOp::Filter { input, predicate } => tra_filter(node, get(input)?, predicate),
        TraOp::Transform { input, kernel } => tra_transform(node, get(input)?, kernel),
        TraOp::Tile { input, dim, size } => tra_tile(node, get(input)?, *dim, *size),
        TraOp::Concat { input, key_dim, array_dim } => tra_concat(node, get(input)?, *key_dim, *array_dim),
    }
}

/// Check that input data matches its declaration: key arity, keys below the
/// key bounds, block shapes. (Density is not required.)
fn check_input(name: &str, decl: &InputDecl, rel: &Relation) -> Res<()> {
    check_input_tuples(name, decl, rel.tuples.iter().map(|(k, b)| (k, b.shape())))
}

/// Evaluate every input and node of a TRA program; the map holds the inputs
/// (as given) and every node's value.
pub fn eval_tra_all(
    p: &Program,
    inputs: &BTreeMap<String, Relation>,
) -> Result<BTreeMap<String, Relation>, InterpError> {
    let mut values: BTreeMap<String, Relation> = BTreeMap::new();
    for (name, decl) in &p.inputs {
        let rel = inputs.get(name).ok_or_else(|| InterpError::MissingInput(name.clone()))?;
        check_input(name, decl, rel)?;
        values.insert(name.clone(), rel.clone());
    }
    let order = evaluation_order(topo_order(&p.nodes), p.nodes.keys(), |n| p.inputs.contains_key(n))?;
    for name in order {
        let op = &p.nodes[name.as_str()];
        let value = eval_tra_op(&name, op, &values)?;
        values.insert(name, value);
    }
    Ok(values)
}

/// Evaluate a TRA program: the value of each of its outputs, by name.
pub fn eval_tra(p: &Program, inputs: &BTreeMap<String, Relation>) -> Result<BTreeMap<String, Relation>, InterpError> {
    let values = eval_tra_all(p, inputs)?;
    let mut out = BTreeMap::new();
    for o in &p.outputs {
        let v = values.get(o).ok_or_else(|| InterpError::UnknownOutput(o.clone()))?;
        out.insert(o.clone(), v.clone());
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// IA
// ---------------------------------------------------------------------------

/// Place a relation on `sites` sites: `Hash(dims)` puts the tuple with key `k`
/// at `site_of(k, dims, sites)`, `Replicated` makes every tuple `Everywhere`,
/// `Any` follows `layout`.
pub fn place(
    rel: &Relation,
    placement: &PlacementDecl,
    sites: usize,
    layout: AnyLayout,
) -> Result<PhysRelation, InterpError> {
    place_named("(unnamed)", rel, placement, sites, layout)
}

fn place_named(
    name: &str,
    rel: &Relation,
    placement: &PlacementDecl,
    sites: usize,
    layout: AnyLayout,
) -> Res<PhysRelation> {
    let placed = input_sites(name, rel.tuples.keys(), placement, sites, layout)?;
    let tuples = rel
        .tuples
        .iter()
        .zip(placed)
        .map(|((k, b), s)| PhysTuple { key: k.clone(), block: b.clone(), site: s.map_or(Site::Everywhere, Site::At) })
        .collect();
    Ok(PhysRelation::sorted(tuples))
}

fn floats(b: &Block) -> u64 {
    b.len() as u64
}

fn ia_broadcast(input: &PhysRelation, sites: usize) -> (PhysRelation, u64) {
    let mut moved = 0u64;
    let mut tuples = Vec::with_capacity(input.len());
    for t in &input.tuples {
        moved += sites as u64 * floats(&t.block);
        tuples.push(PhysTuple { key: t.key.clone(), block: t.block.clone(), site: Site::Everywhere });
    }
    (PhysRelation::sorted(tuples), moved)
}

fn ia_shuffle(node: &str, input: &PhysRelation, dims: &[usize], sites: usize) -> Res<(PhysRelation, u64)> {
    let mut moved = 0u64;
    let mut tuples = Vec::with_capacity(input.len());
    for t in &input.tuples {
        project(node, &t.key, dims)?; // checks the dims exist
        moved += floats(&t.block);
        let site = Site::At(site_of(&t.key, dims, sites));
        tuples.push(PhysTuple { key: t.key.clone(), block: t.block.clone(), site });
    }
    Ok((PhysRelation::sorted(tuples), moved))
}

/// The site where two tuples meet, if they do.
fn meet(a: Site, b: Site) -> Option<Site> {
    match (a, b) {
        (Site::At(x), Site::At(y)) => (x == y).then_some(Site::At(x)),
        (Site::Everywhere, s) | (s, Site::Everywhere) => Some(s),
    }
}

fn ia_local_join(
    node: &str,
    left: &PhysRelation,
    right: &PhysRelation,
    lk: &[usize],
    rk: &[usize],
    kernel: &KernelRef,
) -> Res<PhysRelation> {
    check_join_dims(node, lk, rk)?;
    let mut index: BTreeMap<Key, Vec<&PhysTuple>> = BTreeMap::new();
    for t in &right.tuples {
        index.entry(project(node, &t.key, rk)?).or_default().push(t);
    }
    let mut tuples = Vec::new();
    for l in &left.tuples {
        let jk = project(node, &l.key, lk)?;
        for r in index.get(&jk).map(Vec::as_slice).unwrap_or(&[]) {
            if let Some(site) = meet(l.site, r.site) {
                let block = apply1(node, kernel, &[&l.block, &r.block])?;
                tuples.push(PhysTuple { key: join_key(&l.key, &r.key, rk), block, site });
            }
        }
    }
    Ok(PhysRelation::sorted(tuples))
}

fn ia_local_aggregate(
    node: &str,
    input: &PhysRelation,
    group_by: &[usize],
    kernel: &KernelRef,
    sites: usize,
) -> Res<PhysRelation> {
    let concat = concat_kernel(node, kernel)?;
    let count = match concat {
        Some((key_dim, _)) => concat_count(node, input.tuples.iter().map(|t| &t.key), key_dim)?,
        None => 0,
    };
    // Tuples by projected key; each group in ascending (key, site) order.
    let mut groups: BTreeMap<Key, Vec<&PhysTuple>> = BTreeMap::new();
    for t in &input.tuples {
        groups.entry(project(node, &t.key, group_by)?).or_default().push(t);
    }
    let mut tuples = Vec::new();
    for (g, mut members) in groups {
        members.sort_by(|a, b| (&a.key, a.site).cmp(&(&b.key, b.site)));
        // (site, the members present there)
        let mut per_site: Vec<(Site, Vec<&PhysTuple>)> = Vec::new();
        if members.iter().all(|t| t.site == Site::Everywhere) {
            per_site.push((Site::Everywhere, members));
        } else {
            for s in 0..sites {
                let here: Vec<&PhysTuple> =
                    members.iter().copied().filter(|t| t.site == Site::At(s) || t.site == Site::Everywhere).collect();
                if !here.is_empty() {
                    per_site.push((Site::At(s), here));
                }
            }
        }
        for (site, here) in per_site {
            let block = match concat {
                Some((key_dim, array_dim)) => {
                    let mut pieces = Vec::with_capacity(here.len());
                    for t in &here {
                        pieces.push((project(node, &t.key, &[key_dim])?[0], &t.block));
                    }
                    concat_group(node, kernel, pieces, count, array_dim)?
                }
                None => {
                    let blocks: Vec<&Block> = here.iter().map(|t| &t.block).collect();
                    fold_blocks(node, kernel, &blocks)?
                }
            };
            tuples.push(PhysTuple { key: g.clone(), block, site });
        }
    }
    Ok(PhysRelation::sorted(tuples))
}

fn ia_local_filter(node: &str, input: &PhysRelation, predicate: &Predicate) -> Res<PhysRelation> {
    let mut tuples = Vec::new();
    for t in &input.tuples {
        if eval_pred(node, predicate, &t.key)? {
            tuples.push(t.clone());
        }
    }
    Ok(PhysRelation::sorted(tuples))
}

fn ia_local_map(
    node: &str,
    input: &PhysRelation,
    key: Option<&KeyFn>,
    kernel: Option<&KernelRef>,
) -> Res<PhysRelation> {
    let mut tuples = Vec::new();
    for t in &input.tuples {
        let keys = match key {
            Some(f) => eval_key(node, f, &t.key)?,
            None => vec![t.key.clone()],
        };
        let blocks = match kernel {
            Some(k) => apply_n(node, k, &[&t.block])?,
            None => vec![t.block.clone()],
        };
        if blocks.len() == keys.len() {
            for (k, b) in keys.into_iter().zip(blocks) {
                tuples.push(PhysTuple { key: k, block: b, site: t.site });
            }
        } else if blocks.len() == 1 {
            for k in keys {
                tuples.push(PhysTuple { key: k, block: blocks[0].clone(), site: t.site });
            }
        } else {
            return Err(bad(
                node,
                format!(
                    "local_map on key {:?}: the key expression gives {} keys but the kernel gives {} blocks \
                     (expected as many blocks as keys, or one block)",
                    t.key,
                    keys.len(),
                    blocks.len()
                ),
            ));
        }
    }
    Ok(PhysRelation::sorted(tuples))
}

/// Value of one IA node, and the floats it moved (broadcast and shuffle only).
fn eval_ia_op(
    node: &str,
    op: &IaOp,
    values: &BTreeMap<String, PhysRelation>,
    sites: usize,
) -> Res<(PhysRelation, Option<u64>)> {
    let get = |name: &String| -> Res<&PhysRelation> {
        values.get(name).ok_or_else(|| InterpError::UnknownOperand { node: node.to_string(), operand: name.clone() })
    };
    Ok(match op {
        IaOp::Broadcast { input } => {
            let (r, moved) = ia_broadcast(get(input)?, sites);
            (r, Some(moved))
        }
        IaOp::Shuffle { input, dims } => {
            let (r, moved) = ia_shuffle(node, get(input)?, dims, sites)?;
            (r, Some(moved))
        }
        IaOp::LocalJoin { left, right, left_keys, right_keys, kernel } => {
            (ia_local_join(node, get(left)?, get(right)?, left_keys, right_keys, kernel)?, None)
        }
        IaOp::LocalAggregate { input, group_by, kernel } => {
            (ia_local_aggregate(node, get(input)?, group_by, kernel, sites)?, None)
        }
        IaOp::LocalFilter { input, predicate } => (ia_local_filter(node, get(input)?, predicate)?, None),
        IaOp::LocalMap { input, key, kernel } => {
            (ia_local_map(node, get(input)?, key.as_ref(), kernel.as_ref())?, None)
        }
    })
}

/// Evaluate an IA plan on `sites` sites. Inputs are placed by [`place`] with
/// their declared placement (`layout` for `any`); every node is evaluated.
pub fn eval_ia(
    plan: &Plan,
    sites: usize,
    inputs: &BTreeMap<String, Relation>,
    layout: AnyLayout,
) -> Result<IaRun, InterpError> {
    if sites == 0 {
        return Err(InterpError::NoSites);
    }
    let mut run = IaRun::default();
    for (name, decl) in &plan.inputs {
        let rel = inputs.get(name).ok_or_else(|| InterpError::MissingInput(name.clone()))?;
        check_input(name, decl, rel)?;
        run.values.insert(name.clone(), place_named(name, rel, &decl.placement, sites, layout)?);
    }
    let order = evaluation_order(topo_order(&plan.nodes), plan.nodes.keys(), |n| plan.inputs.contains_key(n))?;
    for name in order {
        let op = &plan.nodes[name.as_str()];
        let (value, moved) = eval_ia_op(&name, op, &run.values, sites)?;
        if let Some(m) = moved {
            run.floats_moved.insert(name.clone(), m);
        }
        run.values.insert(name, value);
    }
    for o in &plan.outputs {
        let v = run.values.get(o).ok_or_else(|| InterpError::UnknownOutput(o.clone()))?;
        run.outputs.insert(o.clone(), v.clone());
    }
    Ok(run)
}
