//! Inputs: their declared bounds, the check of their tuples against the
//! declaration, and their placement on sites — one definition for the
//! reference interpreter and both runtimes, so that every executor starts a
//! plan from the same physical relations.

use super::error::{InterpError, Res};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tra_optimizer::keyexpr::Key;
use tra_optimizer::placement::site_of;
use tra_optimizer::program::{InputDecl, PlacementDecl};

/// Where the tuples of an input declared `any` live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnyLayout {
    /// The `i`-th tuple in key order goes to site `i % sites`.
    RoundRobin,
    /// Each tuple, in key order, to a site drawn by a ChaCha8 generator with this seed.
    Seeded(u64),
    /// Every tuple on this site (must be `< sites`).
    OneSite(usize),
}

/// Key and array bounds of an input's declaration, checked.
pub fn input_bounds(name: &str, decl: &InputDecl) -> Res<(Vec<u32>, Vec<usize>)> {
    let err = |message: String| InterpError::BadInput { input: name.to_string(), message };
    let mut key_bounds = Vec::with_capacity(decl.key_bounds.len());
    for &b in &decl.key_bounds {
        key_bounds.push(u32::try_from(b).map_err(|_| err(format!("key bound {b} is not a valid bound")))?);
    }
    let mut array_bounds = Vec::with_capacity(decl.array_bounds.len());
    for &b in &decl.array_bounds {
        array_bounds.push(usize::try_from(b).map_err(|_| err(format!("array bound {b} is not a valid bound")))?);
    }
    Ok((key_bounds, array_bounds))
}

/// Check an input's tuples (each key with its block's shape, in the order
/// held) against the input's declaration: keys unique and sorted, key arity,
/// keys below the key bounds, block shapes — the one check of the reference
/// interpreter and of the thread and cluster runtimes.
pub(crate) fn check_input_tuples<'a>(
    name: &str,
    decl: &InputDecl,
    tuples: impl Iterator<Item = (&'a Key, &'a [usize])> + Clone,
) -> Res<()> {
    let err = |message: String| InterpError::BadInput { input: name.to_string(), message };
    let (key_bounds, array_bounds) = input_bounds(name, decl)?;
    let mut previous: Option<&Key> = None;
    for (k, _) in tuples.clone() {
        if let Some(p) = previous.filter(|p| *p >= k) {
            return Err(err(format!("keys {p:?} and {k:?} are not unique and sorted")));
        }
        previous = Some(k);
    }
    for (k, shape) in tuples {
        if k.len() != key_bounds.len() {
            return Err(err(format!("key {k:?} has {} components, declared {}", k.len(), key_bounds.len())));
        }
        if let Some(d) = (0..k.len()).find(|&d| k[d] >= key_bounds[d]) {
            return Err(err(format!("key {k:?}: component {d} is not below its bound {}", key_bounds[d])));
        }
        if shape != array_bounds.as_slice() {
            return Err(err(format!("key {k:?}: block shape {shape:?}, declared {array_bounds:?}")));
        }
    }
    Ok(())
}

/// The site of every tuple of an input, given its keys in key order (`None`:
/// replicated): hashed by the optimizer's placement function, replicated, or
/// for `any` by the layout (round robin, seeded random in key order, one
/// site). The one placement of inputs for the reference and both runtimes.
pub fn input_sites<'a>(
    name: &str,
    keys: impl IntoIterator<Item = &'a Key>,
    placement: &PlacementDecl,
    sites: usize,
    layout: AnyLayout,
) -> Result<Vec<Option<usize>>, InterpError> {
    if sites == 0 {
        return Err(InterpError::NoSites);
    }
    let err = |message: String| InterpError::BadInput { input: name.to_string(), message };
    let mut rng = match layout {
        AnyLayout::Seeded(seed) => Some(ChaCha8Rng::seed_from_u64(seed)),
        _ => None,
    };
    let mut out = Vec::new();
    for (i, k) in keys.into_iter().enumerate() {
        out.push(match placement {
            PlacementDecl::Hash(dims) => {
                if let Some(&d) = dims.iter().find(|&&d| d >= k.len()) {
                    return Err(err(format!(
                        "hash placement on key dim {d}, but key {k:?} has {} components",
                        k.len()
                    )));
                }
                Some(site_of(k, dims, sites))
            }
            PlacementDecl::Replicated => None,
            PlacementDecl::Any => match layout {
                AnyLayout::RoundRobin => Some(i % sites),
                AnyLayout::Seeded(_) => Some(rng.as_mut().expect("seeded").random_range(0..sites)),
                AnyLayout::OneSite(s) if s < sites => Some(s),
                AnyLayout::OneSite(s) => {
                    return Err(err(format!("layout: site {s} does not exist among {sites} sites")))
                }
            },
        });
    }
    Ok(out)
}
