//! How operators treat keys, for every executor alike: projection on key
//! dims, a join's output key, and the piece count of a concat aggregation.

use super::error::{bad, Res};
use tra_optimizer::kernel::KernelRef;
use tra_optimizer::keyexpr::Key;

/// `key` projected on `dims`, in that order.
pub(crate) fn project(node: &str, key: &[u32], dims: &[usize]) -> Res<Key> {
    dims.iter()
        .map(|&d| {
            key.get(d).copied().ok_or_else(|| {
                bad(node, format!("key dim {d} does not exist: key {key:?} has {} components", key.len()))
            })
        })
        .collect()
}

/// Join output key: the left key, then the right key without the dims `rk`.
pub(crate) fn join_key(left: &[u32], right: &[u32], rk: &[usize]) -> Key {
    let mut k = left.to_vec();
    k.extend(right.iter().enumerate().filter(|(i, _)| !rk.contains(i)).map(|(_, &c)| c));
    k
}

/// `Some((key_dim, array_dim))` when the kernel is `concat(key_dim, array_dim)`.
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

/// The piece count of a concat over a relation: max `key[key_dim]` + 1.
pub(crate) fn concat_count<'a>(node: &str, keys: impl Iterator<Item = &'a Key>, key_dim: usize) -> Res<u32> {
    let mut count = 0u32;
    for k in keys {
        let c = project(node, k, &[key_dim])?[0];
        let c1 = c.checked_add(1).ok_or_else(|| bad(node, format!("concat: piece index {c} is too large")))?;
        count = count.max(c1);
    }
    Ok(count)
}
