//! The site-local operators of the cluster runtime: what one worker computes
//! for `local_join`, `local_aggregate`, `local_filter`, `local_map` and the
//! fused `local_aggregate(matAdd) ∘ local_join(matMul…)`, from its own tuples
//! and its process's replicated tuples.
//!
//! The semantics are the thread runtime's ([`crate::threads::runtime`]),
//! which are the reference interpreter's: the same pairs in the same order,
//! the same fold order (members in (key, site) order, replicated last), the
//! same kernels, so results are bit for bit those of the thread runtime.
//! Pairing, filtering, mapping, folding, key projection and errors are the
//! thread runtime's own code (`crate::threads::local`); grouping here leaves
//! out the part of the thread runtime's grouping that mixed relations need
//! (the cluster runtime rejects plans that could hold a relation with both
//! site and replicated tuples: from inputs that are each hashed, `any` or
//! replicated, no IA operator makes one).

use crate::threads::kernels::{FastKernel, MatMulKind};
use crate::threads::{Elem, SharedBlock, Tuple};
use tra_optimizer::kernel::KernelRef;
use tra_optimizer::keyexpr::Key;

use crate::threads::local::{agg_blocks, agg_groups, matmul_groups, Groups};
pub(crate) use crate::threads::local::{bad, concat_count, concat_kernel, filter, join_pairs, project, Member, Res};
pub use crate::threads::local::{join_blocks, map, matmul_group, Exec};

/// Groups of `members` by the key projected on `group_by`, groups in key
/// order, members in (key, replicated) order (a stable sort: equal keys keep
/// their order, i.e. the order of the sites they came from).
pub(crate) fn groups<'a, P: Copy>(node: &str, group_by: &[usize], members: &[Member<'a, P>]) -> Res<Groups<'a, P>> {
    agg_groups(node, group_by, members, &[], None, false)
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
    agg_blocks(x, node, k, concat, count, groups(node, group_by, &members)?)
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
    matmul_groups(x, node, jname, agg_kernel, jk, kind, groups(node, group_by, &items)?, 1)
}
