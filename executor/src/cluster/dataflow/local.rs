//! The site-local operators as timely operators: each stashes its inputs
//! and fires once their frontier is empty, computing what the thread runtime
//! computes for that site ([`crate::cluster::ops`]); the replicated part of a
//! result is computed once per process and shared.

use super::{caught, exchange, record_error, stage, Proc, Report, Shared, Stash, CB, S};
use crate::cluster::ops::{self, concat_count, concat_kernel, Res};
use crate::cluster::wire::{Batch, Item};
use crate::threads::{Elem, Tuple};
use std::sync::Arc;
use std::time::Instant;
use timely::dataflow::channels::pact::Pipeline;
use timely::dataflow::operators::generic::Operator;
use tra_optimizer::program::IaOp;

pub(super) fn fire_items<T: Elem>(
    p: &Proc<T>,
    me: usize,
    i: usize,
    report: &Report,
    result: Res<(Vec<Tuple<T>>, Shared<T>)>,
) -> Vec<Item<T>> {
    match result {
        Ok((own, every)) => {
            let mut r = report.borrow_mut();
            r.steps[i].tuples += own.len() as u64 + if me == 0 { every.len() as u64 } else { 0 };
            let mut items: Vec<Item<T>> = own.into_iter().map(|(k, b)| Item::tuple(me, me as u32, k, b)).collect();
            if !every.is_empty() {
                items.push(Item::every(me, every));
            }
            let _ = p;
            items
        }
        Err(e) => {
            record_error(report, stage(i), me, &e);
            Vec::new()
        }
    }
}

/// A local operator's computation once its inputs are complete: the
/// configured stall, the inputs taken (`take`), `compute` on them (a panic an
/// error of the step), the step's time noted; the items to send.
fn compute_step<T: Elem, I>(
    p: &Proc<T>,
    me: usize,
    i: usize,
    report: &Report,
    take: impl FnOnce() -> I,
    compute: impl FnOnce(&I) -> Res<(Vec<Tuple<T>>, Shared<T>)>,
) -> Vec<Item<T>> {
    let t0 = Instant::now();
    p.stall();
    let inputs = take();
    let result = caught(&p.prep.steps[i].name, || compute(&inputs));
    let items = fire_items(p, me, i, report, result);
    drop(inputs);
    p.step_done(report, i, t0);
    items
}

/// A unary local operator (filter, map, aggregate), with the piece counts of
/// a concat aggregation as a second input.
pub(super) fn unary_local<'s, T: Elem>(
    p: &Arc<Proc<T>>,
    me: usize,
    i: usize,
    input: S<'s, T>,
    counts: Option<S<'s, T>>,
    report: &Report,
) -> S<'s, T> {
    let name = p.prep.steps[i].name.clone();
    let (p1, r1) = (p.clone(), report.clone());
    let counts = counts.unwrap_or_else(|| timely::dataflow::operators::generic::operator::empty(input.scope()));
    input.binary_frontier::<Batch<T>, CB<T>, _, _, _, _>(counts, Pipeline, exchange::<T>(), &name, move |cap, _| {
        let mut cap = Some(cap);
        let mut stash = Stash::<T>::default();
        move |(in1, f1), (in2, f2), output| {
            in1.for_each(|_, data| stash.absorb(data));
            in2.for_each(|_, data| stash.absorb(data));
            if f1.is_empty() && f2.is_empty() {
                if let Some(c) = cap.take() {
                    let take = || {
                        let (own, every) = stash.parts();
                        let count = stash
                            .meta
                            .iter()
                            .filter_map(|(_, m)| m.get(..4).map(|b| u32::from_le_bytes(b.try_into().expect("4"))))
                            .max();
                        (own, every, count)
                    };
                    let items = compute_step(&p1, me, i, &r1, take, |(own, every, count)| {
                        compute_unary(&p1, i, own, every, *count)
                    });
                    let mut session = output.session(&c);
                    for it in items {
                        session.give(it);
                    }
                }
            }
        }
    })
}

fn compute_unary<T: Elem>(
    p: &Proc<T>,
    i: usize,
    own: &[Tuple<T>],
    every: &Shared<T>,
    count: Option<u32>,
) -> Res<(Vec<Tuple<T>>, Shared<T>)> {
    let step = &p.prep.steps[i];
    let node = step.name.as_str();
    let x = p.exec();
    let every_empty = every.is_empty();
    match &step.op {
        IaOp::LocalFilter { predicate, .. } => {
            let o = ops::filter(node, predicate, own)?;
            let e = if every_empty { Arc::default() } else { p.every_part(i, || ops::filter(node, predicate, every))? };
            Ok((o, e))
        }
        IaOp::LocalMap { key, .. } => {
            let o = ops::map(x, node, key.as_ref(), step.kernel.as_ref(), own)?;
            let e = if every_empty {
                Arc::default()
            } else {
                p.every_part(i, || ops::map(x, node, key.as_ref(), step.kernel.as_ref(), every))?
            };
            Ok((o, e))
        }
        IaOp::LocalAggregate { group_by, kernel, .. } => {
            let k = step.kernel.as_ref().expect("aggregate kernel");
            let concat = concat_kernel(node, kernel)?;
            let count = match concat {
                Some((key_dim, _)) => count.unwrap_or(0).max(concat_count(node, every.iter().map(|t| &t.0), key_dim)?),
                None => 0,
            };
            let o = ops::aggregate(x, node, group_by, k, concat, count, own, false)?;
            let e = if every_empty {
                Arc::default()
            } else {
                p.every_part(i, || ops::aggregate(x, node, group_by, k, concat, count, every, true))?
            };
            Ok((o, e))
        }
        _ => unreachable!("not a unary local operator"),
    }
}

/// A binary local operator: a join, or an aggregation fused with its join.
pub(super) fn binary_local<'s, T: Elem>(
    p: &Arc<Proc<T>>,
    me: usize,
    i: usize,
    left: S<'s, T>,
    right: S<'s, T>,
    report: &Report,
) -> S<'s, T> {
    let name = p.prep.steps[i].name.clone();
    let (p1, r1) = (p.clone(), report.clone());
    left.binary_frontier::<Batch<T>, CB<T>, _, _, _, _>(right, Pipeline, Pipeline, &name, move |cap, _| {
        let mut cap = Some(cap);
        let mut ls = Stash::<T>::default();
        let mut rs = Stash::<T>::default();
        move |(in1, f1), (in2, f2), output| {
            in1.for_each(|_, data| ls.absorb(data));
            in2.for_each(|_, data| rs.absorb(data));
            if f1.is_empty() && f2.is_empty() {
                if let Some(c) = cap.take() {
                    let take = || (ls.parts(), rs.parts());
                    let items = compute_step(&p1, me, i, &r1, take, |(l, r)| compute_binary(&p1, i, l, r));
                    let mut session = output.session(&c);
                    for it in items {
                        session.give(it);
                    }
                }
            }
        }
    })
}

type Parts<T> = (Vec<Tuple<T>>, Shared<T>);

pub(super) fn compute_binary<T: Elem>(
    p: &Proc<T>,
    i: usize,
    l: &Parts<T>,
    r: &Parts<T>,
) -> Res<(Vec<Tuple<T>>, Shared<T>)> {
    let step = &p.prep.steps[i];
    let node = step.name.as_str();
    let x = p.exec();
    let both_every = !l.1.is_empty() && !r.1.is_empty();
    match (&step.op, &step.fused) {
        (IaOp::LocalJoin { left_keys, right_keys, .. }, _) => {
            let k = step.kernel.as_ref().expect("join kernel");
            let o = ops::join(x, node, left_keys, right_keys, k, (&l.0, &l.1), (&r.0, &r.1), false)?;
            let e = if both_every {
                p.every_part(i, || ops::join(x, node, left_keys, right_keys, k, (&[], &l.1), (&[], &r.1), true))?
            } else {
                Arc::default()
            };
            Ok((o, e))
        }
        (IaOp::LocalAggregate { .. }, Some(_)) => {
            let o = fused_matmul_part(p, i, (&l.0, &l.1), (&r.0, &r.1), false)?;
            Ok((o, fused_matmul_replicated(p, i, l, r)?))
        }
        _ => unreachable!("not a binary local operator"),
    }
}

/// Step `i`, a fused matmul, on one part of its operands: a site's own
/// tuples with the replicated ones (`replicated = false`), or the replicated
/// tuples of both sides (`replicated = true`).
fn fused_matmul_part<T: Elem>(
    p: &Proc<T>,
    i: usize,
    l: (&[Tuple<T>], &[Tuple<T>]),
    r: (&[Tuple<T>], &[Tuple<T>]),
    replicated: bool,
) -> Res<Vec<Tuple<T>>> {
    let step = &p.prep.steps[i];
    let (IaOp::LocalAggregate { group_by, kernel: agg_kernel, .. }, Some(j)) = (&step.op, &step.fused) else {
        unreachable!("a fused aggregation")
    };
    let IaOp::LocalJoin { left_keys, right_keys, .. } = &p.prep.plan.nodes[j] else {
        unreachable!("fused with a join")
    };
    let jk = step.join_kernel.as_ref().expect("fused join kernel");
    ops::fused_matmul(p.exec(), &step.name, j, group_by, agg_kernel, left_keys, right_keys, jk, l, r, replicated)
}

/// The replicated part of a fused matmul's result (step `i`): computed once
/// per process when both operands have replicated tuples, empty otherwise.
pub(super) fn fused_matmul_replicated<T: Elem>(p: &Proc<T>, i: usize, l: &Parts<T>, r: &Parts<T>) -> Res<Shared<T>> {
    if l.1.is_empty() || r.1.is_empty() {
        return Ok(Arc::default());
    }
    p.every_part(i, || fused_matmul_part(p, i, (&[], &l.1), (&[], &r.1), true))
}
