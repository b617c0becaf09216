//! The site-local operators of the cluster runtime: what one worker computes
//! for `local_join`, `local_aggregate`, `local_filter`, `local_map` and the
//! fused `local_aggregate(matAdd) ∘ local_join(matMul…)`, from its own tuples
//! and its process's replicated tuples.
//!
//! The semantics are the thread runtime's ([`crate::threads::runtime`]),
//! which are the reference interpreter's: the same pairs in the same order,
//! the same fold order (members in (key, site) order, replicated last), the
//! same kernels ([`FastKernel`], [`fold`], [`concat_pieces`], [`matmul_into`]),
//! so results are bit for bit those of the thread runtime. Pairing, filtering,
//! key projection and errors are the thread runtime's own
//! ([`crate::threads::local`]); grouping here leaves out the part of the
//! thread runtime's `agg_groups` that mixed relations need (the cluster
//! runtime rejects plans that could hold a relation with both site and
//! replicated tuples: from inputs that are each hashed, `any` or replicated,
//! no IA operator makes one).

use crate::threads::kernels::{concat_pieces, fold, matmul_into, FastKernel, MatMulKind};
use crate::threads::{Block, Elem, Pool, SharedBlock, Tuple};
use rayon::prelude::*;
use std::collections::BTreeMap;
use std::sync::Arc;
use tra_optimizer::kernel::{KernelError, KernelRef};
use tra_optimizer::keyexpr::{Key, KeyFn};

pub(crate) use crate::threads::local::{
    bad, concat_count, concat_kernel, filter, is_mat_add, join_pairs, kernel_err, project, Pair, Res,
};
use crate::threads::local::eval_key;

/// Where kernels run: the process's block pool and kernel threads.
#[derive(Clone, Copy)]
pub struct Exec<'a, T: Elem> {
    /// Blocks come from here.
    pub pool: &'a Pool<T>,
    /// Kernel calls run here, in parallel over output tuples or groups.
    pub workers: &'a rayon::ThreadPool,
}






/// A member of a group: its key, whether it is replicated, what it carries.
pub(crate) type Member<'a, P> = (&'a Key, bool, P);

/// Groups of `members` by the key projected on `group_by`, groups in key
/// order, members in (key, replicated) order (a stable sort: equal keys keep
/// their order, i.e. the order of the sites they came from).
pub(crate) fn groups<'a, P: Copy>(
    node: &str,
    group_by: &[usize],
    members: &[Member<'a, P>],
) -> Res<Vec<(Key, Vec<Member<'a, P>>)>> {
    let mut groups: BTreeMap<Key, Vec<Member<'a, P>>> = BTreeMap::new();
    for m in members {
        groups.entry(project(node, m.0, group_by)?).or_default().push(*m);
    }
    let mut out: Vec<_> = groups.into_iter().collect();
    for (_, ms) in out.iter_mut() {
        ms.sort_by(|a, b| a.0.cmp(b.0).then(a.1.cmp(&b.1)));
    }
    Ok(out)
}


/// `local_map` of a list (output sorted by key, as the thread runtime's).
pub fn map<T: Elem>(
    x: Exec<'_, T>,
    node: &str,
    key: Option<&KeyFn>,
    kernel: Option<&FastKernel>,
    input: &[Tuple<T>],
) -> Res<Vec<Tuple<T>>> {
    let results: Vec<Res<Vec<Tuple<T>>>> = x.workers.install(|| {
        input
            .par_iter()
            .map(|t| {
                let keys = match key {
                    Some(f) => eval_key(node, f, &t.0)?,
                    None => vec![t.0.clone()],
                };
                let blocks: Vec<SharedBlock<T>> = match kernel {
                    Some(k) => {
                        let out = k.apply(x.pool, &[&t.1]).map_err(|e| kernel_err(node, k.kernel(), e))?;
                        out.into_iter().map(Arc::new).collect()
                    }
                    None => vec![t.1.clone()],
                };
                if blocks.len() == keys.len() {
                    Ok(keys.into_iter().zip(blocks).collect())
                } else if blocks.len() == 1 {
                    Ok(keys.into_iter().map(|k| (k, blocks[0].clone())).collect())
                } else {
                    Err(bad(
                        node,
                        format!(
                            "local_map on key {:?}: the key expression gives {} keys but the kernel gives {} blocks \
                             (expected as many blocks as keys, or one block)",
                            t.0,
                            keys.len(),
                            blocks.len()
                        ),
                    ))
                }
            })
            .collect()
    });
    let mut out = Vec::new();
    for r in results {
        out.extend(r?);
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// The blocks of a local join's pairs (output sorted by key).
pub fn join_blocks<T: Elem>(x: Exec<'_, T>, node: &str, k: &FastKernel, pairs: Vec<Pair<'_, T>>) -> Res<Vec<Tuple<T>>> {
    let results: Vec<Res<Tuple<T>>> = x.workers.install(|| {
        pairs
            .into_par_iter()
            .map(|(key, l, r)| {
                let mut out = k.apply(x.pool, &[&l.1, &r.1]).map_err(|e| kernel_err(node, k.kernel(), e))?;
                if out.len() != 1 {
                    return Err(bad(node, format!("kernel {} gave {} blocks, expected exactly one", k.kernel(), out.len())));
                }
                Ok((key, Arc::new(out.pop().expect("one block"))))
            })
            .collect()
    });
    let mut out = results.into_iter().collect::<Res<Vec<_>>>()?;
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// `local_join` on one site: the site's output and (when `every`) the
/// replicated × replicated output.
#[allow(clippy::too_many_arguments)]
pub fn join<T: Elem>(
    x: Exec<'_, T>,
    node: &str,
    lk: &[usize],
    rk: &[usize],
    k: &FastKernel,
    l: (&[Tuple<T>], &[Tuple<T>]),
    r: (&[Tuple<T>], &[Tuple<T>]),
    every: bool,
) -> Res<Vec<Tuple<T>>> {
    let pairs = if every {
        join_pairs(node, lk, rk, &[], l.1, &[], r.1, true)?
    } else {
        join_pairs(node, lk, rk, l.0, l.1, r.0, r.1, false)?
    };
    join_blocks(x, node, k, pairs)
}

/// `local_aggregate` of one list (a site's tuples, or the replicated ones):
/// `count` is the global piece count of a concat kernel.
#[allow(clippy::too_many_arguments)]
pub fn aggregate<T: Elem>(
    x: Exec<'_, T>,
    node: &str,
    group_by: &[usize],
    k: &FastKernel,
    concat: Option<(usize, usize)>,
    count: u32,
    list: &[Tuple<T>],
    replicated: bool,
) -> Res<Vec<Tuple<T>>> {
    let members: Vec<(&Key, bool, &SharedBlock<T>)> = list.iter().map(|t| (&t.0, replicated, &t.1)).collect();
    let groups = groups(node, group_by, &members)?;
    x.workers.install(|| {
        groups
            .into_par_iter()
            .map(|(g, members)| {
                let block = match concat {
                    Some((key_dim, array_dim)) => {
                        let mut pieces: Vec<(u32, &Block<T>)> = Vec::with_capacity(members.len());
                        for (key, _, b) in &members {
                            pieces.push((project(node, key, &[key_dim])?[0], b));
                        }
                        pieces.sort_by_key(|(i, _)| *i);
                        Arc::new(concat_pieces(x.pool, &pieces, array_dim, count).map_err(|e| kernel_err(node, k.kernel(), e))?)
                    }
                    None if members.len() == 1 => {
                        k.kernel().check().map_err(|e| kernel_err(node, k.kernel(), e))?;
                        if k.kernel().arity() != 2 {
                            let e = KernelError::BadUse(format!(
                                "fold needs a binary kernel, {} takes {} operand(s)",
                                k.kernel(),
                                k.kernel().arity()
                            ));
                            return Err(kernel_err(node, k.kernel(), e));
                        }
                        members[0].2.clone()
                    }
                    None => {
                        let blocks: Vec<&Block<T>> = members.iter().map(|m| &**m.2).collect();
                        Arc::new(fold(k, x.pool, &blocks).map_err(|e| kernel_err(node, k.kernel(), e))?)
                    }
                };
                Ok((g, block))
            })
            .collect()
    })
}

/// `local_aggregate(g, matAdd, local_join(lk, rk, matMul…, L, R))` on one
/// site (`every = false`) or on the replicated parts (`every = true`): every
/// output block is the sum of its products, accumulated by GEMM.
#[allow(clippy::too_many_arguments)]
pub fn fused_matmul<T: Elem>(
    x: Exec<'_, T>,
    node: &str,
    jname: &str,
    group_by: &[usize],
    agg_kernel: &KernelRef,
    lk: &[usize],
    rk: &[usize],
    jk: &FastKernel,
    l: (&[Tuple<T>], &[Tuple<T>]),
    r: (&[Tuple<T>], &[Tuple<T>]),
    every: bool,
) -> Res<Vec<Tuple<T>>> {
    let kind = MatMulKind::of(jk.kernel()).expect("a matrix product");
    let pairs = if every {
        join_pairs(jname, lk, rk, &[], l.1, &[], r.1, true)?
    } else {
        join_pairs(jname, lk, rk, l.0, l.1, r.0, r.1, false)?
    };
    let items: Vec<Member<'_, (&Tuple<T>, &Tuple<T>)>> = pairs.iter().map(|p| (&p.0, every, (p.1, p.2))).collect();
    let groups = groups(node, group_by, &items)?;
    x.workers.install(|| {
        groups
            .into_par_iter()
            .map(|(g, members)| {
                let blocks: Vec<(&Block<T>, &Block<T>)> = members.iter().map(|(_, _, (a, b))| (&*a.1, &*b.1)).collect();
                Ok((g, Arc::new(matmul_group(x, node, jname, agg_kernel, jk, kind, &blocks)?)))
            })
            .collect()
    })
}

/// One output block of the fused matmul: the sum of its members' products,
/// accumulated by GEMM in member order (the thread runtime's code).
#[allow(clippy::too_many_arguments)]
pub fn matmul_group<T: Elem>(
    x: Exec<'_, T>,
    node: &str,
    jname: &str,
    agg_kernel: &KernelRef,
    jk: &FastKernel,
    kind: MatMulKind,
    members: &[(&Block<T>, &Block<T>)],
) -> Res<Block<T>> {
    let mut shape: Option<Vec<usize>> = None;
    for (a, b) in members {
        let sh = jk.kernel().output_shape(&[a.shape(), b.shape()]).map_err(|e| kernel_err(jname, jk.kernel(), e))?;
        match &shape {
            None => shape = Some(sh),
            Some(first) if *first != sh => {
                let e = agg_kernel.output_shape(&[first, &sh]).err().unwrap_or_else(|| {
                    KernelError::BadShape(format!("matAdd: operand shapes differ: {first:?} and {sh:?}"))
                });
                return Err(kernel_err(node, agg_kernel, e));
            }
            _ => {}
        }
    }
    let shape = shape.ok_or_else(|| bad(node, "a group without members"))?;
    let mut out = x.pool.take(&shape);
    for (n, (a, b)) in members.iter().enumerate() {
        matmul_into(kind, out.as_mut_slice(), a.as_slice(), a.shape(), b.as_slice(), b.shape(), n > 0);
    }
    Ok(out)
}
