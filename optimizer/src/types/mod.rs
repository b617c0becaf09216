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
//!
//! [`logical`] holds the rules of the TRA operators (and the site-local
//! maps they share with IA), [`physical`] those of the IA operators that move
//! or place tuples; this module the types they compute.

pub mod logical;
pub mod physical;

pub use logical::*;
pub use physical::*;

use crate::error::ErrorCode;
use crate::keyexpr::Key;
use std::sync::Arc;

/// The most keys a brute-force enumeration (filter, key map, partial
/// aggregate) may visit.
pub const ENUMERATION_LIMIT: u64 = 1 << 20;

/// A type error without its location; the checker adds the node and field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
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
