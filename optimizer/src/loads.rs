//! Per-site loads: for every operator of a plan, the bytes each site sends
//! and receives over its link and the flops each site computes.
//!
//! Why per site: the network model ([`crate::cost`]) counts what a plan moves
//! in total, which is exact but blind to *where* the work lands. A local join
//! whose tuples sit on 2 of 10 sites runs at the speed of those 2; a broadcast
//! from one site is bounded by that site's uplink. The time model
//! ([`crate::time`]) charges the busiest site, so it needs these figures.
//!
//! **How they are found.** Frontiers and placement functions are exact, so the
//! site of every tuple of every value is known before anything runs: inputs
//! are placed by their declared placement (an `any` input round-robin in key
//! order, as the runtimes place it), and each operator's output is derived
//! from its operands' layouts by the IA semantics of the reference
//! interpreter, on keys alone (no blocks). The layout of a value is the list of
//! its `(key, site)` pairs, with "every site" for a replicated tuple.
//!
//! **What is counted** (the runtimes do exactly this):
//! - `shuffle(dims)`: a tuple on site `a` bound for `b = h(key[dims])` costs
//!   its bytes on `a`'s outgoing link and `b`'s incoming link when `a ≠ b`; a
//!   tuple already on `b` does not use a link; a replicated tuple is kept
//!   where it is bound (every site holds a copy), so it moves nothing.
//! - `broadcast`: a tuple on site `a` leaves `a` once per other site
//!   (`sites − 1` copies on `a`'s uplink) and enters every other site once; a
//!   replicated tuple is already everywhere and moves nothing.
//! - `local_join`: one kernel call per output tuple, on the site where it is
//!   made; one made on every site (both operands replicated) counts on every
//!   site.
//! - `local_aggregate`: per (group, site), `n − 1` kernel calls for the `n`
//!   tuples folded there (a concat aggregation is a copy: no flops); a
//!   replicated group is folded on every site.
//! - `local_map`: one kernel call per input tuple on its site; `local_filter`
//!   is free.
//!
//! Besides flops, every kernel call is charged the **memory bytes** it reads
//! and writes: a join's call its two operand blocks and its output block, a
//! fold step of an aggregation its two operands and its result (three blocks
//! of the input's size), a concat aggregation a read and a write of every
//! piece it joins, a map's call its input block and every block it makes; a
//! `matAdd` aggregation of the products of a matrix-product join is charged
//! no bytes for its folds, as the runtimes run it fused (each output block
//! accumulated by GEMM in place), which also hides its flops' traffic. The
//! time model ([`crate::time`]) prices a site's local work by the slower of
//! its flops and these bytes (a roofline): a GEMM of 256² blocks does ~44
//! flops per byte and is bound by its flops, an element-wise kernel does
//! under one flop per 8 bytes and is bound by memory.
//!
//! These differ from the network model's "floats moved" in two ways the
//! network model makes on purpose (it is the paper's `Size(R)`): a tuple that
//! a shuffle keeps on its own site, and a broadcast's copy to its own site,
//! are not on any link here.
//!
//! Layouts are memoized by the structure of the sub-plan that makes them
//! ([`LoadCache`]), so the alternatives of one optimization share the work of
//! their common sub-plans.

use crate::check::TypedPlan;
use crate::kernel::KernelRef;
use crate::placement::site_of;
use crate::program::{IaOp, Operator, PlacementDecl, Plan};
use crate::types::{concat_params, PhysType};
use indexmap::IndexMap;
use rustc_hash::FxHashMap;
use serde::Serialize;
use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// The site of a tuple: one site, or every site (a replicated tuple).
pub const EVERYWHERE: u32 = u32::MAX;

/// No tuple (the end of a chain of tuples in a join's index).
const NO_TUPLE: u32 = u32::MAX;

/// The `(key, site)` pairs of a physical value ([`EVERYWHERE`] for a
/// replicated tuple). A partial aggregate holds a key once per site it is on.
/// Keys are stored end to end (one allocation for the whole value, not one
/// per key: a join of two 160-tuple relations makes thousands), and shared
/// by the layouts that hold the same keys in the same order on other sites
/// (a shuffle's, a broadcast's, a map's that keeps its keys): moving tuples
/// copies only their sites.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Layout {
    arity: usize,
    keys: Arc<Vec<u32>>,
    sites: Vec<u32>,
}

impl Layout {
    /// An empty layout of keys of `arity` dims, with room for `n` tuples.
    pub fn with_capacity(arity: usize, n: usize) -> Layout {
        Layout { arity, keys: Arc::new(Vec::with_capacity(arity * n)), sites: Vec::with_capacity(n) }
    }

    /// An empty layout of the keys of `self`, in its order, each to be
    /// given a site by [`Layout::push_site`]; the keys are shared, not
    /// copied.
    fn same_keys(&self) -> Layout {
        Layout { arity: self.arity, keys: self.keys.clone(), sites: Vec::with_capacity(self.sites.len()) }
    }

    /// The site of the next key of a layout made by [`Layout::same_keys`].
    fn push_site(&mut self, site: u32) {
        self.sites.push(site);
        debug_assert!(self.keys.len() >= self.arity * self.sites.len(), "more sites than keys");
    }

    /// Number of tuples.
    pub fn len(&self) -> usize {
        self.sites.len()
    }

    /// Bytes its keys and sites take; keys it shares with another layout
    /// are not counted (the one that made them was charged).
    pub fn bytes(&self) -> u64 {
        let keys = if Arc::strong_count(&self.keys) == 1 { self.keys.capacity() } else { 0 };
        ((keys + self.sites.capacity()) * std::mem::size_of::<u32>()) as u64
    }

    /// True when it holds no tuple.
    pub fn is_empty(&self) -> bool {
        self.sites.is_empty()
    }

    /// The dims of every key.
    pub fn arity(&self) -> usize {
        self.arity
    }

    /// Add a tuple (`key` of [`Layout::arity`] dims).
    pub fn push(&mut self, key: impl IntoIterator<Item = u32>, site: u32) {
        Arc::make_mut(&mut self.keys).extend(key);
        self.sites.push(site);
        debug_assert_eq!(self.keys.len(), self.arity * self.sites.len(), "a key of another arity");
    }

    /// The key and site of tuple `i`.
    fn get(&self, i: usize) -> (&[u32], u32) {
        (&self.keys[i * self.arity..(i + 1) * self.arity], self.sites[i])
    }

    /// The tuples' keys and sites, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u32], u32)> + '_ {
        let arity = self.arity;
        self.sites.iter().enumerate().map(move |(i, s)| (&self.keys[i * arity..(i + 1) * arity], *s))
    }
}

/// Charges a layout against the request's key budget while it is built, and
/// reads the deadline as it goes: a join or a key map can make far more
/// tuples than its operands hold (two inputs of 1024² keys make 10⁹
/// products), so charging a layout only once it is whole let one request
/// take the machine's memory. [`Growth::stop`] is true once the budget or
/// the deadline is spent ([`crate::deadline::expired`]); what was built is
/// then dropped.
struct Growth {
    /// Bytes of the layout charged so far.
    charged: u64,
    /// Tuples since the last look.
    n: u32,
}

impl Growth {
    /// Look every this many tuples (and at the first).
    const EVERY: u32 = 4096;

    fn new() -> Growth {
        Growth { charged: 0, n: Growth::EVERY - 1 }
    }

    /// One more tuple visited (made or not): every [`Growth::EVERY`] of
    /// them, charge what `layout` grew by and read the deadline.
    #[inline]
    fn stop(&mut self, layout: &Layout) -> bool {
        self.n += 1;
        if self.n < Growth::EVERY {
            return false;
        }
        self.n = 0;
        self.charge(layout);
        crate::deadline::expired()
    }

    /// Charge what `layout` grew by since the last charge.
    fn charge(&mut self, layout: &Layout) {
        let now = layout.bytes();
        if now > self.charged {
            crate::deadline::charge_layout_bytes(now - self.charged);
            self.charged = now;
        }
    }
}

/// A key's dims `dims`, without allocating for up to four of them (`None`
/// when a dim is outside the key).
type Projected = smallvec::SmallVec<[u32; 4]>;

#[inline]
fn project(key: &[u32], dims: &[usize]) -> Option<Projected> {
    // Filled in place, not collected into `Option<SmallVec>` nor pushed one
    // by one: this runs for every tuple of every join and aggregation, and
    // the generic collect was a quarter of a large program's extraction
    // under the time model.
    if dims.len() <= 4 {
        let mut buf = [0u32; 4];
        for (b, &d) in buf.iter_mut().zip(dims) {
            *b = *key.get(d)?;
        }
        return Some(Projected::from_buf_and_len(buf, dims.len()));
    }
    dims.iter().map(|&d| key.get(d).copied()).collect()
}

/// What one site does in one operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct SiteLoad {
    /// Bytes this site sends over its link.
    pub bytes_out: u64,
    /// Bytes this site receives over its link.
    pub bytes_in: u64,
    /// Floating-point operations this site computes.
    pub flops: u64,
    /// Bytes of blocks this site's kernel calls read and write in memory.
    pub memory_bytes: u64,
    /// Bytes of the plan's outputs this site writes into their files when
    /// the cluster runtime writes them (its own tuples; site 0 the
    /// replicated ones: [`LoadCache::plan_loads_and_writes`]). Set in a
    /// whole plan's loads ([`with_writes`]); an operator's loads leave it
    /// 0, and the time model charges writing apart (`write`).
    pub output_bytes: u64,
}

impl std::ops::AddAssign for SiteLoad {
    fn add_assign(&mut self, o: SiteLoad) {
        self.bytes_out = self.bytes_out.saturating_add(o.bytes_out);
        self.bytes_in = self.bytes_in.saturating_add(o.bytes_in);
        self.flops = self.flops.saturating_add(o.flops);
        self.memory_bytes = self.memory_bytes.saturating_add(o.memory_bytes);
        self.output_bytes = self.output_bytes.saturating_add(o.output_bytes);
    }
}

/// The per-site loads of one operator: one entry per site.
pub type OpLoads = Vec<SiteLoad>;

/// Per output of a plan, the bytes each site writes into its file (by
/// site).
pub type Writes = IndexMap<String, Vec<u64>>;

/// A value's layout and the per-site loads of the operator that made it.
#[derive(Debug)]
pub(crate) struct Evaluated {
    pub(crate) layout: Arc<Layout>,
    pub(crate) loads: Arc<OpLoads>,
    /// Whether its blocks are the products of a matrix-product join (a
    /// `matAdd` aggregation of them runs fused into the GEMMs).
    pub(crate) products: bool,
}

/// Why per-site loads could not be found (a plan that does not check, or a
/// key space too large to enumerate).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("per-site loads of `{node}`: {message}")]
pub struct LoadError {
    /// The operator (or input) at fault.
    pub node: String,
    /// What is wrong.
    pub message: String,
}

/// Layouts and loads of sub-plans already evaluated, by the structure of the
/// sub-plan (operator, parameters and operands' structure), at `sites` sites
/// and `bytes_per_float`.
pub struct LoadCache {
    sites: usize,
    bytes_per_float: u64,
    done: FxHashMap<u64, Arc<Evaluated>>,
}

impl LoadCache {
    /// An empty cache for plans on `sites` sites.
    pub fn new(sites: usize, bytes_per_float: u64) -> LoadCache {
        LoadCache { sites: sites.max(1), bytes_per_float, done: FxHashMap::default() }
    }

    /// The per-site loads of every operator of a checked plan, by name, in
    /// evaluation order.
    pub fn plan_loads(&mut self, plan: &Plan, typed: &TypedPlan) -> Result<IndexMap<String, Arc<OpLoads>>, LoadError> {
        Ok(self.evaluate(plan, typed)?.0)
    }

    /// [`LoadCache::plan_loads`], and per output of the plan the bytes of
    /// blocks each site writes into the output's file: the blocks of its
    /// tuples there, a replicated tuple's on site 0 only (the cluster
    /// runtime's worker 0 writes those).
    pub fn plan_loads_and_writes(
        &mut self,
        plan: &Plan,
        typed: &TypedPlan,
    ) -> Result<(IndexMap<String, Arc<OpLoads>>, Writes), LoadError> {
        let (loads, shape) = self.evaluate(plan, typed)?;
        let mut writes = IndexMap::new();
        for name in &plan.outputs {
            let (Some(key), Some(t)) = (shape.get(name.as_str()), typed.types.get(name)) else { continue };
            writes.insert(name.clone(), written_per_site(&self.done[key].layout, self.tuple_bytes(t), self.sites));
        }
        Ok((loads, writes))
    }

    /// The loads of every operator, and the structure key of every value.
    #[allow(clippy::type_complexity)]
    fn evaluate<'p>(
        &mut self,
        plan: &'p Plan,
        typed: &'p TypedPlan,
    ) -> Result<(IndexMap<String, Arc<OpLoads>>, HashMap<&'p str, u64>), LoadError> {
        let mut shape: HashMap<&str, u64> = HashMap::new();
        let mut out = IndexMap::new();
        for (name, decl) in &plan.inputs {
            let mut h = DefaultHasher::new();
            ("input", name).hash(&mut h);
            hash_debug(&mut h, decl);
            let key = h.finish();
            shape.insert(name, key);
            if !self.done.contains_key(&key) {
                let layout = self.input_layout(name, &decl.placement, &typed.types[name])?;
                let zero = Arc::new(vec![SiteLoad::default(); self.sites]);
                self.done.insert(key, Arc::new(Evaluated { layout: Arc::new(layout), loads: zero, products: false }));
            }
        }
        for name in &typed.order {
            let op = &plan.nodes[name];
            let mut h = DefaultHasher::new();
            op.hash(&mut h);
            for child in op.operands() {
                shape.get(child).hash(&mut h);
            }
            let key = h.finish();
            shape.insert(name, key);
            let done = match self.done.get(&key) {
                Some(d) => d.clone(),
                None => {
                    let operands: Vec<Arc<Evaluated>> =
                        op.operands().iter().map(|n| self.done[&shape[n]].clone()).collect();
                    let d = Arc::new(self.eval_op(name, op, &operands, &typed.types, true)?);
                    self.done.insert(key, d.clone());
                    d
                }
            };
            out.insert(name.clone(), done.loads.clone());
        }
        Ok((out, shape))
    }

    pub(crate) fn input_layout(
        &self,
        name: &str,
        placement: &PlacementDecl,
        t: &PhysType,
    ) -> Result<Layout, LoadError> {
        let keys = t.rel.key_list().map_err(|e| LoadError { node: name.to_string(), message: e.message })?;
        let s = self.sites;
        let mut layout = Layout::with_capacity(t.rel.key_arity(), keys.len());
        for (i, k) in keys.iter().enumerate() {
            let site = match placement {
                _ if s == 1 => 0,
                PlacementDecl::Hash(d) => site_of(k, d, s) as u32,
                PlacementDecl::Replicated => EVERYWHERE,
                PlacementDecl::Any => (i % s) as u32,
            };
            layout.push(k.iter().copied(), site);
        }
        crate::deadline::charge_layout_bytes(layout.bytes());
        Ok(layout)
    }

    pub(crate) fn eval_op(
        &self,
        node: &str,
        op: &IaOp,
        args: &[Arc<Evaluated>],
        types: &IndexMap<String, PhysType>,
        want_layout: bool,
    ) -> Result<Evaluated, LoadError> {
        let ty = |n: &String| &types[n.as_str()];
        let s = self.sites;
        let err = |message: String| LoadError { node: node.to_string(), message };
        let mut growth = Growth::new();
        let spent = || err(crate::deadline::reason());
        let mut loads = vec![SiteLoad::default(); s];
        // `calls` kernel calls of `f` flops and `m` memory bytes each.
        let work_at = |loads: &mut Vec<SiteLoad>, site: u32, calls: u64, (f, m): (u64, u64)| {
            let w = SiteLoad {
                flops: calls.saturating_mul(f),
                memory_bytes: calls.saturating_mul(m),
                ..SiteLoad::default()
            };
            if site == EVERYWHERE {
                loads.iter_mut().for_each(|l| *l += w);
            } else {
                loads[site as usize] += w;
            }
        };
        let layout: Layout = match op {
            IaOp::Broadcast { input } => {
                let bytes = self.tuple_bytes(ty(input));
                let others = s as u64 - 1;
                // Tuples leaving each site; every other site receives each.
                let mut from = vec![0u64; s];
                let mut moved = 0u64;
                for (_, site) in args[0].layout.iter() {
                    if site != EVERYWHERE {
                        from[site as usize] += 1;
                        moved += 1;
                    }
                }
                for (l, n) in loads.iter_mut().zip(&from) {
                    l.bytes_out += n * others * bytes;
                    l.bytes_in += (moved - n) * bytes;
                }
                let input = &args[0].layout;
                if want_layout {
                    Layout { sites: vec![EVERYWHERE; input.len()], ..input.same_keys() }
                } else {
                    Layout::default()
                }
            }
            IaOp::Shuffle { input, dims } => {
                let bytes = self.tuple_bytes(ty(input));
                let input = &args[0].layout;
                if let Some(d) = dims.iter().find(|&&d| d >= input.arity()) {
                    return Err(err(format!("shuffle dim {d} outside keys of {} dims", input.arity())));
                }
                // The same keys in the same order, on the sites of `dims`.
                let mut out = if want_layout { input.same_keys() } else { Layout::default() };
                for (k, site) in input.iter() {
                    if growth.stop(&out) {
                        return Err(spent());
                    }
                    let to = site_of(k, dims, s) as u32;
                    if site != EVERYWHERE && site != to {
                        loads[site as usize].bytes_out += bytes;
                        loads[to as usize].bytes_in += bytes;
                    }
                    if want_layout {
                        out.push_site(to);
                    }
                }
                out
            }
            IaOp::LocalJoin { left, right, left_keys, right_keys, kernel } => {
                let (lb, rb) = (&ty(left).rel.array_bounds, &ty(right).rel.array_bounds);
                let per = (kernel.flops(&[lb, rb]), self.call_bytes(kernel, &[lb, rb]));
                let (left_l, right_l) = (&args[0].layout, &args[1].layout);
                // The right tuples by join key, in their order: per key its
                // first and last tuple and how many, per tuple the next one
                // with its key (a chain, not a vector per key: a join on
                // every dim has as many keys as tuples).
                let mut index: FxHashMap<Projected, (u32, u32, usize)> =
                    FxHashMap::with_capacity_and_hasher(right_l.len(), Default::default());
                let mut next = vec![NO_TUPLE; right_l.len()];
                for (i, (k, _)) in right_l.iter().enumerate() {
                    let jk = project(k, right_keys)
                        .ok_or_else(|| err(format!("right key {k:?} has no dims {right_keys:?}")))?;
                    let i = i as u32;
                    match index.entry(jk) {
                        std::collections::hash_map::Entry::Occupied(mut e) => {
                            let (_, last, n) = e.get_mut();
                            next[*last as usize] = i;
                            *last = i;
                            *n += 1;
                        }
                        std::collections::hash_map::Entry::Vacant(e) => {
                            e.insert((i, i, 1));
                        }
                    }
                }
                // Each left tuple's first matching right tuple.
                let mut matched = Vec::with_capacity(left_l.len());
                let mut pairs = 0usize;
                for (lk, _) in left_l.iter() {
                    let jk = project(lk, left_keys)
                        .ok_or_else(|| err(format!("left key {lk:?} has no dims {left_keys:?}")))?;
                    let (first, _, n) = index.get(&jk).copied().unwrap_or((NO_TUPLE, NO_TUPLE, 0));
                    pairs = pairs.saturating_add(n);
                    matched.push(first);
                }
                let kept: Vec<usize> = (0..right_l.arity()).filter(|d| !right_keys.contains(d)).collect();
                // Room for every pair of matching keys (those on different
                // sites are not made), up to a million and to what the key
                // budget has left (a larger join is charged as it grows,
                // and stopped past the budget): growing by doubling copied
                // the largest layouts several times.
                let arity = left_l.arity() + kept.len();
                let tuple_bytes = (arity as u64 + 1) * std::mem::size_of::<u32>() as u64;
                let budgeted = crate::deadline::key_bytes_left().map_or(u64::MAX, |b| b / tuple_bytes);
                let room = if want_layout { (pairs as u64).min(1 << 20).min(budgeted) as usize } else { 0 };
                let mut out = Layout::with_capacity(arity, room);
                for ((lk, ls), &first) in left_l.iter().zip(&matched) {
                    let mut r = first;
                    while r != NO_TUPLE {
                        let (rk, rs) = right_l.get(r as usize);
                        r = next[r as usize];
                        if growth.stop(&out) {
                            return Err(spent());
                        }
                        let site = match (ls, rs) {
                            (a, b) if a == b => a,
                            (EVERYWHERE, b) => b,
                            (a, EVERYWHERE) => a,
                            _ => continue,
                        };
                        work_at(&mut loads, site, 1, per);
                        if want_layout {
                            // The left key, then the right key's dims that are not joined on.
                            out.push(lk.iter().copied().chain(kept.iter().map(|&d| rk[d])), site);
                        }
                    }
                }
                out
            }
            IaOp::LocalAggregate { input, group_by, kernel } => {
                let floats = ty(input).rel.block_floats();
                let concat = concat_params(kernel).is_some();
                // A fold step reads two blocks and writes one; a concat reads
                // and writes every piece once (charged per piece below).
                // A sum of products folds inside the GEMMs that make them
                // (the runtimes fuse it): no blocks of its own to move.
                let fold_floats = if args[0].products && is_mat_add(kernel) { 0 } else { 3u64.saturating_mul(floats) };
                let per = if concat {
                    (0, 0)
                } else {
                    (aggregate_flops(ty(input), kernel), fold_floats.saturating_mul(self.bytes_per_float))
                };
                let copy = if concat { 2u64.saturating_mul(floats).saturating_mul(self.bytes_per_float) } else { 0 };
                // The work of folding `n` members on one site.
                let fold = |n: u64| -> (u64, (u64, u64)) {
                    if concat {
                        (n, (0, copy))
                    } else {
                        (n.saturating_sub(1), per)
                    }
                };
                let mut groups: FxHashMap<Projected, Vec<u32>> = FxHashMap::default();
                for (k, site) in args[0].layout.iter() {
                    let g = project(k, group_by)
                        .ok_or_else(|| err(format!("key {k:?} has no group-by dims {group_by:?}")))?;
                    groups.entry(g).or_default().push(site);
                }
                let mut out = Layout::with_capacity(group_by.len(), 0);
                for (g, members) in groups {
                    if growth.stop(&out) {
                        return Err(spent());
                    }
                    let everywhere = members.iter().filter(|&&m| m == EVERYWHERE).count() as u64;
                    if everywhere == members.len() as u64 {
                        let (calls, w) = fold(everywhere);
                        work_at(&mut loads, EVERYWHERE, calls, w);
                        if want_layout {
                            out.push(g, EVERYWHERE);
                        }
                        continue;
                    }
                    let mut at: Vec<(u32, u64)> = Vec::new();
                    for m in members.iter().filter(|&&m| m != EVERYWHERE) {
                        match at.iter_mut().find(|(site, _)| site == m) {
                            Some((_, n)) => *n += 1,
                            None => at.push((*m, 1)),
                        }
                    }
                    if everywhere == 0 {
                        for (site, n) in at {
                            let (calls, w) = fold(n);
                            work_at(&mut loads, site, calls, w);
                            if want_layout {
                                out.push(g.iter().copied(), site);
                            }
                        }
                        continue;
                    }
                    // Replicated members are on every site: each site folds them
                    // with its own.
                    for site in 0..s as u32 {
                        let n = at.iter().find(|(x, _)| *x == site).map_or(0, |(_, n)| *n) + everywhere;
                        let (calls, w) = fold(n);
                        work_at(&mut loads, site, calls, w);
                        if want_layout {
                            out.push(g.iter().copied(), site);
                        }
                    }
                }
                out
            }
            IaOp::LocalFilter { predicate, .. } => {
                let input = &args[0].layout;
                let mut out = Layout::with_capacity(input.arity(), 0);
                for (k, site) in input.iter() {
                    if growth.stop(&out) {
                        return Err(spent());
                    }
                    if predicate.eval(k).map_err(|e| err(e.to_string()))? {
                        out.push(k.iter().copied(), site);
                    }
                }
                out
            }
            IaOp::LocalMap { input, key, kernel } => {
                let ib = &ty(input).rel.array_bounds;
                let per = kernel.as_ref().map_or((0, 0), |k| (k.flops(&[ib]), self.call_bytes(k, &[ib])));
                let input = &args[0].layout;
                let arity = key.as_ref().map_or(input.arity(), |f| f.output_arity());
                // Without a key map the keys stay as they are, shared.
                let mut out = match key {
                    None if want_layout => input.same_keys(),
                    _ => Layout::with_capacity(arity, 0),
                };
                for (k, site) in input.iter() {
                    if growth.stop(&out) {
                        return Err(spent());
                    }
                    work_at(&mut loads, site, 1, per);
                    if !want_layout {
                        continue;
                    }
                    match key {
                        Some(f) => {
                            for k in f.eval(k).map_err(|e| err(e.to_string()))? {
                                if growth.stop(&out) {
                                    return Err(spent());
                                }
                                out.push(k, site);
                            }
                        }
                        None => out.push_site(site),
                    }
                }
                out
            }
        };
        // Counted against the request's key budget: a plan over a large key
        // space holds a layout per operator, several plans one each.
        growth.charge(&layout);
        Ok(Evaluated { layout: Arc::new(layout), loads: Arc::new(loads), products: makes_products(op) })
    }

    /// Memory bytes of one call of `kernel` on blocks of these shapes: its
    /// operands read and the blocks it makes written.
    fn call_bytes(&self, kernel: &KernelRef, operands: &[&[usize]]) -> u64 {
        let floats = |shape: &[usize]| shape.iter().fold(1u64, |a, &d| a.saturating_mul(d as u64));
        let made = match (kernel.output_shape(operands), kernel.outputs_per_call(operands)) {
            (Ok(shape), Ok(n)) => floats(&shape).saturating_mul(n as u64),
            _ => 0,
        };
        let read = operands.iter().fold(0u64, |a, s| a.saturating_add(floats(s)));
        read.saturating_add(made).saturating_mul(self.bytes_per_float)
    }

    fn tuple_bytes(&self, t: &PhysType) -> u64 {
        t.rel.block_floats().saturating_mul(self.bytes_per_float)
    }
}

/// Feed a value's `Debug` text to a hasher without building the string (the
/// structure key of an input: its declaration does not implement `Hash`;
/// an input is keyed once per plan).
fn hash_debug(h: &mut DefaultHasher, value: &impl std::fmt::Debug) {
    struct Feed<'h>(&'h mut DefaultHasher);
    impl std::fmt::Write for Feed<'_> {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            self.0.write(s.as_bytes());
            Ok(())
        }
    }
    let _ = std::fmt::Write::write_fmt(&mut Feed(h), format_args!("{value:?}"));
    h.write_u8(0xff);
}

/// Whether an operator is a local join with a matrix-product kernel (whose
/// `matAdd` aggregation the runtimes run fused: each output block
/// accumulated by GEMM, the products never materialised).
pub fn makes_products(op: &IaOp) -> bool {
    matches!(op, IaOp::LocalJoin { kernel: KernelRef::Named { name, args }, .. }
        if args.is_empty() && matches!(name.as_str(), "matMul" | "matMulTN" | "matMulNT" | "matMulTT"))
}

fn is_mat_add(k: &KernelRef) -> bool {
    matches!(k, KernelRef::Named { name, args } if name == "matAdd" && args.is_empty())
}

/// Flops of one fold step of an aggregation kernel (a concat is a copy).
pub fn aggregate_flops(input: &PhysType, kernel: &KernelRef) -> u64 {
    if concat_params(kernel).is_some() {
        0
    } else {
        kernel.flops(&[&input.rel.array_bounds, &input.rel.array_bounds])
    }
}

/// The per-site loads of every operator of a checked plan (a fresh cache).
pub fn plan_loads(
    plan: &Plan,
    typed: &TypedPlan,
    sites: usize,
    bytes_per_float: u64,
) -> Result<IndexMap<String, Arc<OpLoads>>, LoadError> {
    LoadCache::new(sites, bytes_per_float).plan_loads(plan, typed)
}

/// Every site's load summed over the operators of a plan.
pub fn total_per_site(loads: &IndexMap<String, Arc<OpLoads>>, sites: usize) -> Vec<SiteLoad> {
    let mut out = vec![SiteLoad::default(); sites.max(1)];
    for op in loads.values() {
        for (o, l) in out.iter_mut().zip(op.iter()) {
            *o += *l;
        }
    }
    out
}

/// The bytes each site writes of an output laid out as `layout` (tuples of
/// `tuple_bytes` each) into its file: the blocks of its own tuples, a
/// replicated tuple's on site 0 only (the cluster runtime's worker 0 writes
/// those).
pub(crate) fn written_per_site(layout: &Layout, tuple_bytes: u64, sites: usize) -> Vec<u64> {
    let mut per_site = vec![0u64; sites.max(1)];
    for (_, site) in layout.iter() {
        let at = if site == EVERYWHERE { 0 } else { site as usize };
        per_site[at] = per_site[at].saturating_add(tuple_bytes);
    }
    per_site
}

/// A whole plan's per-site loads with the bytes each site writes into the
/// outputs' files added ([`SiteLoad::output_bytes`]).
pub fn with_writes(mut totals: Vec<SiteLoad>, writes: &Writes) -> Vec<SiteLoad> {
    for per_site in writes.values() {
        for (t, &b) in totals.iter_mut().zip(per_site) {
            t.output_bytes = t.output_bytes.saturating_add(b);
        }
    }
    totals
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::check_plan;

    fn loads_of(plan: &str, sites: usize) -> IndexMap<String, Arc<OpLoads>> {
        let plan = Plan::from_json(plan).unwrap();
        let typed = check_plan(&plan, sites).unwrap();
        plan_loads(&plan, &typed, sites, 4).unwrap()
    }

    /// A join whose output is far larger than the key budget stops once
    /// the budget is spent, not after its whole layout is built: two
    /// operands of 256² keys on one site make 2²⁴ products, 192 MiB of
    /// layout. (Charged only once whole, the layout of a matmul of two
    /// 1024²-key inputs, 10⁹ products, took the server's memory.)
    #[test]
    fn a_join_making_more_tuples_than_the_key_budget_stops_within_it() {
        use crate::deadline::{self, Deadline};
        let plan = Plan::from_json(
            r#"{"inputs": {"X": {"key_bounds": [256, 256], "array_bounds": [1, 1], "placement": {"hash": []}},
                           "Y": {"key_bounds": [256, 256], "array_bounds": [1, 1], "placement": {"hash": []}}},
                "nodes": {"J": {"op": "local_join", "left": "X", "right": "Y", "left_keys": [1], "right_keys": [0],
                                "kernel": "matMul"}},
                "outputs": ["J"]}"#,
        )
        .unwrap();
        let typed = check_plan(&plan, 2).unwrap();
        let budget = 4u64 << 20;
        let d = Deadline::after(std::time::Duration::from_secs(600), "a test's time")
            .with_key_budget(budget, "a test's budget");
        let (r, charged) = deadline::within(d, || (plan_loads(&plan, &typed, 2, 4), deadline::charged_bytes()));
        let e = r.expect_err("the budget is spent");
        assert_eq!(e.node, "J");
        assert!(e.message.contains("a test's budget"), "{e}");
        // The inputs' layouts (1.5 MiB), then the join's until the budget
        // is passed: its last doubling at most, never the 192 MiB.
        assert!(charged < 4 * budget, "charged {charged} bytes against a budget of {budget}");
    }

    #[test]
    fn a_broadcast_from_one_site_loads_its_uplink_with_every_copy() {
        // Every tuple of X on one site (hash on no dims): that site sends
        // each block to the 3 others; each other site receives all of X.
        let l = loads_of(
            r#"{"inputs": {"X": {"key_bounds": [5], "array_bounds": [2, 3], "placement": {"hash": []}}},
                "nodes": {"B": {"op": "broadcast", "input": "X"}}, "outputs": ["B"]}"#,
            4,
        );
        let src = crate::placement::site_of(&[0], &[], 4);
        let bytes = 5 * 6 * 4;
        for (s, load) in l["B"].iter().enumerate() {
            if s == src {
                assert_eq!((load.bytes_out, load.bytes_in), (3 * bytes, 0));
            } else {
                assert_eq!((load.bytes_out, load.bytes_in), (0, bytes));
            }
        }
    }

    #[test]
    fn a_shuffle_onto_the_same_placement_moves_nothing_and_a_join_computes_where_its_tuples_are() {
        let l = loads_of(
            r#"{"inputs": {"X": {"key_bounds": [6], "array_bounds": [2, 2], "placement": {"hash": [0]}},
                           "Y": {"key_bounds": [6], "array_bounds": [2, 2], "placement": {"hash": [0]}}},
                "nodes": {"S": {"op": "shuffle", "input": "X", "dims": [0]},
                          "J": {"op": "local_join", "left": "S", "right": "Y", "left_keys": [0], "right_keys": [0],
                                "kernel": "matMul"}},
                "outputs": ["J"]}"#,
            3,
        );
        assert!(l["S"].iter().all(|x| x.bytes_in == 0 && x.bytes_out == 0));
        let mut per_site = [0u64; 3];
        for k in 0..6u32 {
            per_site[crate::placement::site_of(&[k], &[0], 3)] += 16; // 2·2³ flops per matMul
        }
        assert_eq!(l["J"].iter().map(|x| x.flops).collect::<Vec<_>>(), per_site.to_vec());
    }

    #[test]
    fn kernel_calls_are_charged_their_blocks_and_a_sum_of_products_none() {
        // 4 products of 2×2 blocks on one site (k in 0..4), summed into one.
        let plan = |join: &str| {
            format!(
                r#"{{"inputs": {{"X": {{"key_bounds": [1, 4], "array_bounds": [2, 2], "placement": {{"hash": []}}}},
                                "Y": {{"key_bounds": [4, 1], "array_bounds": [2, 2], "placement": {{"hash": []}}}}}},
                    "nodes": {{"J": {{"op": "local_join", "left": "X", "right": "Y", "left_keys": [1], "right_keys": [0],
                                     "kernel": "{join}"}},
                              "S": {{"op": "local_aggregate", "input": "J", "group_by": [0, 2], "kernel": "matAdd"}}}},
                    "outputs": ["S"]}}"#
            )
        };
        let block = 2 * 2 * 4;
        let site = crate::placement::site_of(&[0], &[], 2);
        // Each join call reads two blocks and writes one.
        let l = loads_of(&plan("matMul"), 2);
        assert_eq!(l["J"][site].memory_bytes, 4 * 3 * block);
        // The runtimes fold a sum of products inside the GEMMs: no bytes.
        assert_eq!(l["S"][site].memory_bytes, 0);
        assert_eq!(l["S"][site].flops, 3 * 4);
        // A sum of element-wise results folds 3 times, 3 blocks each.
        let l = loads_of(&plan("matMul").replace("\"matMul\"", "\"matAdd\""), 2);
        assert_eq!(l["S"][site].memory_bytes, 3 * 3 * block);
        assert_eq!(l["S"][1 - site], SiteLoad::default());
    }
}
