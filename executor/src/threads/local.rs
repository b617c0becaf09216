//! Helpers of the site-local operators, shared by the thread runtime
//! ([`super::runtime`]) and the cluster runtime (`crate::cluster::ops`), so
//! that both pair, filter, project and name errors exactly alike — one truth
//! for the order of a join's pairs, on which bit-for-bit agreement of the two
//! runtimes rests.

use super::{Elem, Tuple};
use crate::reference::InterpError;
use std::collections::HashMap;
use tra_optimizer::kernel::{KernelError, KernelRef};
use tra_optimizer::keyexpr::{Key, KeyFn, Predicate};

/// A result of a local operator.
pub(crate) type Res<T> = Result<T, InterpError>;

/// One pair of a local join: the output key, the left and the right tuple.
pub(crate) type Pair<'a, T> = (Key, &'a Tuple<T>, &'a Tuple<T>);

/// Whether a kernel is plain `matAdd`.
pub(crate) fn is_mat_add(k: &KernelRef) -> bool {
    matches!(k, KernelRef::Named { name, args } if name == "matAdd" && args.is_empty())
}

/// The pairs a local join makes on one site (`every = false`: the site's own
/// output) or on all sites at once (`every = true`: replicated × replicated),
/// in the reference's order: left tuples in (site, key) order, each with its
/// matches in (site, key) order.
#[allow(clippy::too_many_arguments)]
pub(crate) fn join_pairs<'a, T: Elem>(
    node: &str,
    lk: &[usize],
    rk: &[usize],
    l_own: &'a [Tuple<T>],
    l_every: &'a [Tuple<T>],
    r_own: &'a [Tuple<T>],
    r_every: &'a [Tuple<T>],
    every: bool,
) -> Res<Vec<Pair<'a, T>>> {
    if lk.len() != rk.len() {
        return Err(bad(node, format!("{} left join dims but {} right join dims", lk.len(), rk.len())));
    }
    let index = |list: &'a [Tuple<T>]| -> Res<HashMap<Key, Vec<&'a Tuple<T>>>> {
        let mut m: HashMap<Key, Vec<&'a Tuple<T>>> = HashMap::new();
        for t in list {
            m.entry(project(node, &t.0, rk)?).or_default().push(t);
        }
        Ok(m)
    };
    let (ro, re) = (index(r_own)?, index(r_every)?);
    let mut out = Vec::new();
    let none: Vec<&Tuple<T>> = Vec::new();
    if every {
        for l in l_every {
            let jk = project(node, &l.0, lk)?;
            for r in re.get(&jk).unwrap_or(&none) {
                out.push((join_key(&l.0, &r.0, rk), l, *r));
            }
        }
        return Ok(out);
    }
    for l in l_own {
        let jk = project(node, &l.0, lk)?;
        for r in ro.get(&jk).unwrap_or(&none).iter().chain(re.get(&jk).unwrap_or(&none)) {
            out.push((join_key(&l.0, &r.0, rk), l, *r));
        }
    }
    for l in l_every {
        let jk = project(node, &l.0, lk)?;
        for r in ro.get(&jk).unwrap_or(&none) {
            out.push((join_key(&l.0, &r.0, rk), l, *r));
        }
    }
    Ok(out)
}

/// `local_filter` of a list of tuples.
pub(crate) fn filter<T: Elem>(node: &str, p: &Predicate, input: &[Tuple<T>]) -> Res<Vec<Tuple<T>>> {
    let mut out = Vec::new();
    for t in input {
        if eval_pred(node, p, &t.0)? {
            out.push(t.clone());
        }
    }
    Ok(out)
}

/// An error at a plan node.
pub(crate) fn bad(node: &str, message: impl Into<String>) -> InterpError {
    InterpError::BadNode { node: node.to_string(), message: message.into() }
}

/// A kernel's error at a plan node.
pub(crate) fn kernel_err(node: &str, kernel: &KernelRef, e: KernelError) -> InterpError {
    InterpError::Kernel { node: node.to_string(), kernel: kernel.to_string(), source: e }
}

/// A key projected on some of its dims (an error names the node).
pub(crate) fn project(node: &str, key: &[u32], dims: &[usize]) -> Res<Key> {
    dims.iter()
        .map(|&d| {
            key.get(d).copied().ok_or_else(|| {
                bad(node, format!("key dim {d} does not exist: key {key:?} has {} components", key.len()))
            })
        })
        .collect()
}

/// The key of a join's output tuple: the left key, then the right key's non-join dims.
pub(crate) fn join_key(left: &[u32], right: &[u32], rk: &[usize]) -> Key {
    let mut k = left.to_vec();
    k.extend(right.iter().enumerate().filter(|(i, _)| !rk.contains(i)).map(|(_, &c)| c));
    k
}

/// A key expression applied to a key (an error names the node).
pub(crate) fn eval_key(node: &str, f: &KeyFn, key: &[u32]) -> Res<Vec<Key>> {
    f.eval(key).map_err(|e| InterpError::KeyEval { node: node.to_string(), key: key.to_vec(), source: e })
}

/// A predicate on a key (an error names the node).
pub(crate) fn eval_pred(node: &str, p: &Predicate, key: &[u32]) -> Res<bool> {
    p.eval(key).map_err(|e| InterpError::KeyEval { node: node.to_string(), key: key.to_vec(), source: e })
}

/// `(key_dim, array_dim)` of a concat kernel, `None` for any other kernel.
pub(crate) fn concat_kernel(node: &str, kernel: &KernelRef) -> Res<Option<(usize, usize)>> {
    match kernel {
        KernelRef::Named { name, args } if name == "concat" => {
            let parsed: Vec<Option<usize>> = args.iter().map(|a| a.parse::<usize>().ok()).collect();
            match parsed.as_slice() {
                [Some(k), Some(a)] => Ok(Some((*k, *a))),
                _ => Err(bad(node, format!("kernel {kernel}: concat takes two naturals (key_dim, array_dim)"))),
            }
        }
        _ => Ok(None),
    }
}

/// The piece count of a concat over these keys (max piece index + 1).
pub(crate) fn concat_count<'a>(node: &str, keys: impl Iterator<Item = &'a Key>, key_dim: usize) -> Res<u32> {
    let mut count = 0u32;
    for k in keys {
        let c = project(node, k, &[key_dim])?[0];
        let c1 = c.checked_add(1).ok_or_else(|| bad(node, format!("concat: piece index {c} is too large")))?;
        count = count.max(c1);
    }
    Ok(count)
}
