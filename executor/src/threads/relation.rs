//! The thread runtime's relations: tuples of shared, pooled blocks, a
//! relation of them ([`TRelation`]), a node's value across sites
//! ([`PhysValue`]), and the placement of an input on sites.

use super::elem::Elem;
use super::pool::SharedBlock;
use crate::semantics::{input_sites, AnyLayout, InterpError, Res, Site};
use std::sync::Arc;
use tra_optimizer::keyexpr::Key;
use tra_optimizer::program::PlacementDecl;

/// A tuple: key and shared block.
pub type Tuple<T> = (Key, SharedBlock<T>);

/// A tensor relation of shared blocks: tuples sorted by key, keys unique.
#[derive(Debug, Clone, Default)]
pub struct TRelation<T: Elem> {
    /// The tuples, sorted by key.
    pub tuples: Vec<Tuple<T>>,
}

impl<T: Elem> TRelation<T> {
    /// A relation from tuples in any order; a repeated key is an error.
    pub fn new(mut tuples: Vec<Tuple<T>>) -> Result<TRelation<T>, String> {
        tuples.sort_by(|a, b| a.0.cmp(&b.0));
        if let Some(w) = tuples.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(format!("key {:?} given twice", w[0].0));
        }
        Ok(TRelation { tuples })
    }

    /// Number of tuples.
    pub fn len(&self) -> usize {
        self.tuples.len()
    }

    /// True without tuples.
    pub fn is_empty(&self) -> bool {
        self.tuples.is_empty()
    }

    /// The block of a key.
    pub fn get(&self, key: &[u32]) -> Option<&SharedBlock<T>> {
        self.tuples.binary_search_by(|t| t.0.as_slice().cmp(key)).ok().map(|i| &self.tuples[i].1)
    }

    /// Floats in all blocks.
    pub fn floats(&self) -> u64 {
        self.tuples.iter().map(|t| t.1.len() as u64).sum()
    }
}

/// The physical value of a node: each site's own tuples, and the replicated
/// tuples every site holds (one shared copy). Each list is sorted by key.
#[derive(Debug, Clone)]
pub struct PhysValue<T: Elem> {
    /// Site `s`'s tuples (the reference's `Site::At(s)`).
    pub sites: Vec<Arc<Vec<Tuple<T>>>>,
    /// Tuples on every site (the reference's `Site::Everywhere`).
    pub everywhere: Arc<Vec<Tuple<T>>>,
}

impl<T: Elem> PhysValue<T> {
    /// Project the site away; a key held more than once (partial aggregates)
    /// is an error, as in the reference's `erase`.
    pub fn erase(&self) -> Result<TRelation<T>, InterpError> {
        self.erase_named(None)
    }

    pub(crate) fn erase_named(&self, node: Option<&str>) -> Result<TRelation<T>, InterpError> {
        let mut all: Vec<(&Key, Site, &SharedBlock<T>)> = Vec::new();
        for (s, list) in self.sites.iter().enumerate() {
            all.extend(list.iter().map(|(k, b)| (k, Site::At(s), b)));
        }
        all.extend(self.everywhere.iter().map(|(k, b)| (k, Site::Everywhere, b)));
        all.sort_by(|a, b| a.0.cmp(b.0).then(a.1.cmp(&b.1)));
        let mut out: Vec<Tuple<T>> = Vec::with_capacity(all.len());
        let mut i = 0;
        while i < all.len() {
            let mut j = i + 1;
            while j < all.len() && all[j].0 == all[i].0 {
                j += 1;
            }
            if j - i > 1 {
                return Err(InterpError::NotATensorRelation {
                    node: node.map(str::to_string),
                    key: all[i].0.clone(),
                    sites: all[i..j].iter().map(|t| t.1).collect(),
                });
            }
            out.push((all[i].0.clone(), all[i].2.clone()));
            i = j;
        }
        Ok(TRelation { tuples: out })
    }

    /// Number of tuples (a replicated tuple counts once).
    pub fn tuples(&self) -> u64 {
        self.sites.iter().map(|l| l.len() as u64).sum::<u64>() + self.everywhere.len() as u64
    }
}

/// Place an input: `(each site's tuples, replicated tuples)`, as the
/// reference's `place`.
#[allow(clippy::type_complexity)]
pub(crate) fn place<T: Elem>(
    name: &str,
    rel: &TRelation<T>,
    placement: &PlacementDecl,
    sites: usize,
    layout: AnyLayout,
) -> Res<(Vec<Vec<Tuple<T>>>, Vec<Tuple<T>>)> {
    let placed = input_sites(name, rel.tuples.iter().map(|t| &t.0), placement, sites, layout)?;
    let mut own: Vec<Vec<Tuple<T>>> = vec![Vec::new(); sites];
    let mut every = Vec::new();
    for ((k, b), site) in rel.tuples.iter().zip(placed) {
        match site {
            Some(s) => own[s].push((k.clone(), b.clone())),
            None => every.push((k.clone(), b.clone())),
        }
    }
    Ok((own, every))
}
