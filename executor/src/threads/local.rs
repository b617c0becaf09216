//! Helpers of the site-local operators, shared by the thread runtime
//! ([`super::runtime`]) and the cluster runtime (`crate::cluster::ops`), so
//! that both pair, filter, project, map, fold and name errors exactly alike —
//! one truth for the order of a join's pairs and of a fold's members, on which
//! bit-for-bit agreement of the two runtimes rests.

use super::kernels::{concat_pieces, fold, matmul_into_par, FastKernel, MatMulKind};
use super::{Block, Elem, Pool, SharedBlock, Tuple};
use crate::semantics::InterpError;
pub(crate) use crate::semantics::{
    bad, concat_count, concat_kernel, eval_key, eval_pred, join_key, kernel_err, project,
};
use rayon::prelude::*;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tra_optimizer::kernel::{KernelError, KernelRef};
use tra_optimizer::keyexpr::{Key, KeyFn, Predicate};

/// Where kernels run: the process's block pool and kernel threads.
#[derive(Clone, Copy)]
pub struct Exec<'a, T: Elem> {
    /// Blocks come from here.
    pub pool: &'a Pool<T>,
    /// Kernel calls run here, in parallel over output tuples or groups.
    pub workers: &'a rayon::ThreadPool,
    /// Where the catalog flops of finished kernel calls are counted, if anywhere.
    pub flops: Option<&'a AtomicU64>,
}

impl<T: Elem> Exec<'_, T> {
    /// Count the catalog flops of one call of `k` on operands of these shapes.
    fn count_flops(&self, k: &FastKernel, shapes: &[&[usize]]) {
        if let Some(f) = self.flops {
            f.fetch_add(k.kernel().flops(shapes), Ordering::Relaxed);
        }
    }
}

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

/// A member of an aggregation group: its key, whether it is replicated, its payload.
pub(crate) type Member<'a, P> = (&'a Key, bool, P);

/// Aggregation groups: group key and members.
pub(crate) type Groups<'a, P> = Vec<(Key, Vec<Member<'a, P>>)>;

/// The groups a local aggregation folds on one site (`every_part = false`:
/// the site's tuples with the replicated tuples of groups that have site
/// tuples somewhere) or once for all sites (`every_part = true`: groups with
/// replicated tuples only). Members in (key, site) order (a stable sort:
/// equal keys keep their order, i.e. the order of the sites they came from);
/// groups in key order.
pub(crate) fn agg_groups<'a, P: Copy>(
    node: &str,
    group_by: &[usize],
    own: &[Member<'a, P>],
    every: &[Member<'a, P>],
    at_groups: Option<&HashSet<Key>>,
    every_part: bool,
) -> Res<Groups<'a, P>> {
    let mut groups: BTreeMap<Key, Vec<Member<'a, P>>> = BTreeMap::new();
    if !every_part {
        for m in own {
            groups.entry(project(node, m.0, group_by)?).or_default().push(*m);
        }
    }
    for m in every {
        let g = project(node, m.0, group_by)?;
        let has_site_tuples = at_groups.is_some_and(|set| set.contains(&g));
        if has_site_tuples != every_part {
            groups.entry(g).or_default().push(*m);
        }
    }
    let mut out: Groups<'a, P> = groups.into_iter().collect();
    for (_, members) in out.iter_mut() {
        members.sort_by(|a, b| a.0.cmp(b.0).then(a.1.cmp(&b.1)));
    }
    Ok(out)
}

/// `local_map` of a list (output sorted by key): each tuple's keys from the
/// key expression, its blocks from the kernel, as many blocks as keys or one
/// block for all of them.
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
                        x.count_flops(k, &[t.1.shape()]);
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
                    return Err(bad(
                        node,
                        format!("kernel {} gave {} blocks, expected exactly one", k.kernel(), out.len()),
                    ));
                }
                x.count_flops(k, &[l.1.shape(), r.1.shape()]);
                Ok((key, Arc::new(out.pop().expect("one block"))))
            })
            .collect()
    });
    let mut out = results.into_iter().collect::<Res<Vec<_>>>()?;
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// The blocks of a local aggregation's groups: a concat kernel (`concat`:
/// `(key_dim, array_dim)`) joins the pieces of a group into `count` pieces,
/// any other kernel folds the group's members in member order (a group of
/// one block is that block, shared).
pub(crate) fn agg_blocks<T: Elem>(
    x: Exec<'_, T>,
    node: &str,
    k: &FastKernel,
    concat: Option<(usize, usize)>,
    count: u32,
    groups: Groups<'_, &SharedBlock<T>>,
) -> Res<Vec<Tuple<T>>> {
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
                        Arc::new(
                            concat_pieces(x.pool, &pieces, array_dim, count)
                                .map_err(|e| kernel_err(node, k.kernel(), e))?,
                        )
                    }
                    None if members.len() == 1 => {
                        // A group of one block is that block: share it.
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
                        let out = fold(k, x.pool, &blocks).map_err(|e| kernel_err(node, k.kernel(), e))?;
                        if x.flops.is_some() {
                            for _ in 1..blocks.len() {
                                x.count_flops(k, &[blocks[0].shape(), blocks[0].shape()]);
                            }
                        }
                        Arc::new(out)
                    }
                };
                Ok((g, block))
            })
            .collect()
    })
}

/// The blocks of a fused `local_aggregate(matAdd) ∘ local_join(matMul…)`'s
/// groups, in parallel over groups; each product is split over `split` tasks.
#[allow(clippy::too_many_arguments)]
pub(crate) fn matmul_groups<T: Elem>(
    x: Exec<'_, T>,
    node: &str,
    jname: &str,
    agg_kernel: &KernelRef,
    jk: &FastKernel,
    kind: MatMulKind,
    groups: Groups<'_, (&Tuple<T>, &Tuple<T>)>,
    split: usize,
) -> Res<Vec<Tuple<T>>> {
    x.workers.install(|| {
        groups
            .into_par_iter()
            .map(|(g, members)| {
                let blocks: Vec<(&Block<T>, &Block<T>)> = members.iter().map(|(_, _, (a, b))| (&*a.1, &*b.1)).collect();
                Ok((g, Arc::new(matmul_group(x, node, jname, agg_kernel, jk, kind, &blocks, split)?)))
            })
            .collect()
    })
}

/// One output block of the fused matmul: the sum of its members' products,
/// accumulated by GEMM in member order, each product split over `split` tasks.
#[allow(clippy::too_many_arguments)]
pub fn matmul_group<T: Elem>(
    x: Exec<'_, T>,
    node: &str,
    jname: &str,
    agg_kernel: &KernelRef,
    jk: &FastKernel,
    kind: MatMulKind,
    members: &[(&Block<T>, &Block<T>)],
    split: usize,
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
        matmul_into_par(kind, out.as_mut_slice(), a.as_slice(), a.shape(), b.as_slice(), b.shape(), n > 0, split);
        x.count_flops(jk, &[a.shape(), b.shape()]);
    }
    Ok(out)
}
