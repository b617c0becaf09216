//! The data every executor computes on: tensor relations of `f64` blocks,
//! sites, physical relations (`(key, block, site)` triples) and the
//! projection of sites away ([`erase`]).
//!
//! [`Block`] here is the plain `ndarray` value of the reference interpreter
//! and of the catalog kernels ([`crate::kernels`]); the runtimes hold their
//! blocks in pooled buffers of `f32` or `f64` instead
//! ([`crate::threads::Block`]), converted to and from this one at their edges.
//! The two are different things (a value and a recycled buffer), hence two
//! types.

pub use crate::kernels::Block;

use super::error::{InterpError, Res};
use super::inputs::input_bounds;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::fmt;
use tra_optimizer::keyexpr::Key;
use tra_optimizer::program::InputDecl;

/// A tensor relation: a set of `(key, block)` pairs with unique keys.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Relation {
    /// The tuples, by key.
    pub tuples: BTreeMap<Key, Block>,
}

/// Where a physical tuple lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Site {
    /// On one site, `0..sites`.
    At(usize),
    /// One replicated copy on every site (the output of broadcast).
    Everywhere,
}

impl fmt::Display for Site {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Site::At(s) => write!(f, "site {s}"),
            Site::Everywhere => write!(f, "every site"),
        }
    }
}

/// One tuple of a physical relation.
#[derive(Debug, Clone, PartialEq)]
pub struct PhysTuple {
    /// The key.
    pub key: Key,
    /// The block.
    pub block: Block,
    /// Where it lives.
    pub site: Site,
}

/// A physical relation: `(key, block, site)` triples. The same key may occur on
/// several sites (partial aggregates). Operators of this module return their
/// tuples sorted by `(site, key)` (stable for equal pairs).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PhysRelation {
    /// The tuples.
    pub tuples: Vec<PhysTuple>,
}

/// What an evaluation of an IA plan computed: the reference interpreter's
/// `eval_ia` and the thread runtime's drop-in for it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct IaRun {
    /// The physical value of every plan output (a node or an input), by name.
    pub outputs: BTreeMap<String, PhysRelation>,
    /// The physical value of every input (as placed) and every node.
    pub values: BTreeMap<String, PhysRelation>,
    /// Floats moved by every broadcast and shuffle node.
    pub floats_moved: BTreeMap<String, u64>,
}

impl IaRun {
    /// Floats moved by all broadcasts and shuffles together.
    pub fn total_floats_moved(&self) -> u64 {
        self.floats_moved.values().sum()
    }

    /// Every output with its site projected away (see [`erase`]); an error names
    /// the output.
    pub fn erased_outputs(&self) -> Result<BTreeMap<String, Relation>, InterpError> {
        let mut out = BTreeMap::new();
        for (name, rel) in &self.outputs {
            out.insert(name.clone(), erase_named(Some(name), rel)?);
        }
        Ok(out)
    }
}

impl Relation {
    /// An empty relation.
    pub fn new() -> Relation {
        Relation::default()
    }

    /// A relation from `(key, block)` pairs; a repeated key is an error.
    pub fn from_tuples(tuples: impl IntoIterator<Item = (Key, Block)>) -> Result<Relation, String> {
        let mut out = BTreeMap::new();
        for (k, b) in tuples {
            if out.contains_key(&k) {
                return Err(format!("key {k:?} given twice"));
            }
            out.insert(k, b);
        }
        Ok(Relation { tuples: out })
    }

    /// Number of tuples.
    pub fn len(&self) -> usize {
        self.tuples.len()
    }

    /// True when there are no tuples.
    pub fn is_empty(&self) -> bool {
        self.tuples.is_empty()
    }

    /// The block of a key.
    pub fn get(&self, key: &[u32]) -> Option<&Block> {
        self.tuples.get(key)
    }

    /// Total number of floats in all blocks.
    pub fn floats(&self) -> u64 {
        self.tuples.values().map(|b| b.len() as u64).sum()
    }

    /// Cut a dense tensor into blocks of `block_shape` (same rank): the block
    /// with key `k` holds the elements `k[i]*block_shape[i] ..` along each axis.
    pub fn from_dense(dense: &Block, block_shape: &[usize]) -> Result<Relation, String> {
        let shape = dense.shape();
        if shape.len() != block_shape.len() {
            return Err(format!("tensor of rank {} cut into blocks of rank {}", shape.len(), block_shape.len()));
        }
        let mut counts = Vec::with_capacity(shape.len());
        for (i, (&n, &b)) in shape.iter().zip(block_shape).enumerate() {
            // An empty axis is one empty block.
            if (b == 0 && n != 0) || (b != 0 && n % b != 0) {
                return Err(format!("axis {i}: extent {n} is not a multiple of the block extent {b}"));
            }
            let c = match n.checked_div(b) {
                Some(c) => u32::try_from(c).map_err(|_| format!("axis {i}: too many blocks"))?,
                None => 1,
            };
            counts.push(c);
        }
        let mut tuples = BTreeMap::new();
        for key in all_keys(&counts) {
            let mut view = dense.view();
            for (axis, (&k, &b)) in key.iter().zip(block_shape).enumerate() {
                let start = k as usize * b;
                view.slice_axis_inplace(ndarray::Axis(axis), ndarray::Slice::from(start..start + b));
            }
            tuples.insert(key, view.to_owned());
        }
        Ok(Relation { tuples })
    }

    /// The dense tensor this relation cuts into blocks (inverse of
    /// [`Relation::from_dense`]): key arity must equal block rank, all blocks
    /// must have one shape and every key below the frontier must be present.
    pub fn to_dense(&self) -> Result<Block, String> {
        let Some((first_key, first)) = self.tuples.iter().next() else {
            return Err("an empty relation has no dense form".into());
        };
        let rank = first.ndim();
        if first_key.len() != rank {
            return Err(format!("key arity {} differs from block rank {rank}", first_key.len()));
        }
        let bshape = first.shape().to_vec();
        let mut frontier = vec![0u32; rank];
        for (k, b) in &self.tuples {
            if k.len() != rank {
                return Err(format!("key {k:?} has arity {}, expected {rank}", k.len()));
            }
            if b.shape() != bshape.as_slice() {
                return Err(format!("key {k:?}: block shape {:?} differs from {:?}", b.shape(), bshape));
            }
            for (f, &c) in frontier.iter_mut().zip(k) {
                *f = (*f).max(c.saturating_add(1));
            }
        }
        let expected = frontier.iter().try_fold(1usize, |acc, &f| acc.checked_mul(f as usize));
        if expected != Some(self.tuples.len()) {
            return Err(format!("the relation has holes: {} tuples below frontier {frontier:?}", self.tuples.len()));
        }
        let shape: Vec<usize> = frontier.iter().zip(&bshape).map(|(&f, &b)| f as usize * b).collect();
        let mut dense = Block::zeros(ndarray::IxDyn(&shape));
        for (k, b) in &self.tuples {
            let mut view = dense.view_mut();
            for (axis, (&c, &e)) in k.iter().zip(&bshape).enumerate() {
                let start = c as usize * e;
                view.slice_axis_inplace(ndarray::Axis(axis), ndarray::Slice::from(start..start + e));
            }
            view.assign(b);
        }
        Ok(dense)
    }
}

impl PhysRelation {
    /// Number of tuples (an `Everywhere` tuple counts once).
    pub fn len(&self) -> usize {
        self.tuples.len()
    }

    /// True when there are no tuples.
    pub fn is_empty(&self) -> bool {
        self.tuples.is_empty()
    }

    /// The tuples on site `s` (its own and the `Everywhere` ones).
    pub fn on_site(&self, s: usize) -> impl Iterator<Item = &PhysTuple> {
        self.tuples.iter().filter(move |t| t.site == Site::At(s) || t.site == Site::Everywhere)
    }

    /// The tuples sorted by `(site, key)` (stable for equal pairs).
    pub(crate) fn sorted(mut tuples: Vec<PhysTuple>) -> PhysRelation {
        tuples.sort_by(|a, b| (a.site, &a.key).cmp(&(b.site, &b.key)));
        PhysRelation { tuples }
    }
}

/// Every key below `bounds`, in lexicographic order (`[[]]` for no bounds,
/// nothing when a bound is zero).
pub fn all_keys(bounds: &[u32]) -> Vec<Key> {
    let mut out = Vec::new();
    if bounds.contains(&0) {
        return out;
    }
    let mut key = vec![0u32; bounds.len()];
    loop {
        out.push(key.clone());
        // Odometer: bump the last component, carrying to the left.
        let mut i = bounds.len();
        loop {
            if i == 0 {
                return out;
            }
            i -= 1;
            key[i] += 1;
            if key[i] < bounds[i] {
                break;
            }
            key[i] = 0;
        }
    }
}

/// A dense random relation: every key below `key_bounds`, blocks of shape
/// `array_bounds` holding integers in `[-3, 3]` (as floats, so sums and
/// products of a few of them are exact), from a ChaCha8 generator seeded with
/// `seed`.
pub fn random_relation(key_bounds: &[u32], array_bounds: &[usize], seed: u64) -> Relation {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    random_relation_with(&mut rng, key_bounds, array_bounds)
}

/// Random data for every input of a program or plan, as
/// [`random_relation`] makes it: input number `i` (in declaration order) from
/// seed `seed + i`. Bounds that do not fit are an error naming the input.
pub fn random_inputs<'a>(
    inputs: impl IntoIterator<Item = (&'a String, &'a InputDecl)>,
    seed: u64,
) -> Result<BTreeMap<String, Relation>, InterpError> {
    let mut out = BTreeMap::new();
    for (i, (name, decl)) in inputs.into_iter().enumerate() {
        let (key_bounds, array_bounds) = input_bounds(name, decl)?;
        out.insert(name.clone(), random_relation(&key_bounds, &array_bounds, seed.wrapping_add(i as u64)));
    }
    Ok(out)
}

/// [`random_relation`] drawing from a given generator.
pub fn random_relation_with<R: Rng + ?Sized>(rng: &mut R, key_bounds: &[u32], array_bounds: &[usize]) -> Relation {
    let mut tuples = BTreeMap::new();
    for key in all_keys(key_bounds) {
        let block = Block::from_shape_fn(ndarray::IxDyn(array_bounds), |_| f64::from(rng.random_range(-3i32..=3)));
        tuples.insert(key, block);
    }
    Relation { tuples }
}

/// Project the site away. An `Everywhere` tuple counts once; a key held more
/// than once (on two sites, or on a site and everywhere) is an error: the
/// physical relation is not a tensor relation (e.g. partial aggregates).
pub fn erase(p: &PhysRelation) -> Result<Relation, InterpError> {
    erase_named(None, p)
}

fn erase_named(node: Option<&String>, p: &PhysRelation) -> Res<Relation> {
    let mut by_key: BTreeMap<&Key, Vec<&PhysTuple>> = BTreeMap::new();
    for t in &p.tuples {
        by_key.entry(&t.key).or_default().push(t);
    }
    let mut out = BTreeMap::new();
    for (k, ts) in by_key {
        if ts.len() > 1 {
            return Err(InterpError::NotATensorRelation {
                node: node.cloned(),
                key: k.clone(),
                sites: ts.iter().map(|t| t.site).collect(),
            });
        }
        out.insert(k.clone(), ts[0].block.clone());
    }
    Ok(Relation { tuples: out })
}
