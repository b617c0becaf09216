//! The fused matmul, streamed.
//!
//! When both operands of a fused matmul come straight from inputs (an input,
//! a shuffle of one, a broadcast of one), the keys each site will receive are
//! known before any block arrives: the input files hold every key below the
//! key bounds, and placement, shuffle and broadcast are functions of the key.
//! The operator then knows every output block's members in advance (the same
//! pairs in the same order as the batch computation) and computes each output
//! block as soon as its members have arrived, while the rest is still being
//! read and sent: bit for bit the batch result, with the exchange overlapping
//! the GEMMs. The keys received are checked against the expected ones at the
//! end (a difference is an error; it cannot happen for inputs read whole).

use super::local::{compute_binary, fire_items, fused_matmul_replicated};
use super::{caught, record_error, stage, Proc, Report, Stash, CB, S};
use crate::cluster::input::{self, InputData};
use crate::cluster::ops::{self, bad, Res};
use crate::cluster::wire::{pool, Batch, Body, Item};
use crate::semantics::all_keys;
use crate::threads::kernels::MatMulKind;
use crate::threads::{Block, Elem, SharedBlock, Tuple};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;
use timely::dataflow::channels::pact::Pipeline;
use timely::dataflow::operators::generic::Operator;
use tra_optimizer::keyexpr::Key;
use tra_optimizer::placement::site_of;
use tra_optimizer::program::{IaOp, PlacementDecl};

/// The keys a stream will hold on site `me` (own, replicated), when they are
/// known in advance.
fn expected_keys<T: Elem>(p: &Proc<T>, node: &str, me: usize) -> Option<(Vec<Key>, Vec<Key>)> {
    let input_keys = |name: &str| -> Option<Vec<Key>> {
        let decl = p.prep.plan.inputs.get(name)?;
        match p.inputs.get(name)? {
            InputData::File(_) => input::bounds(name, decl).ok().map(|(kb, _)| all_keys(&kb)),
            InputData::Memory(rel) => Some(rel.tuples.iter().map(|t| t.0.clone()).collect()),
        }
    };
    if let Some(decl) = p.prep.plan.inputs.get(node) {
        let keys = input_keys(node)?;
        if decl.placement == PlacementDecl::Replicated {
            return Some((Vec::new(), keys));
        }
        let sites = input::sites_of_tuples(node, &keys, &decl.placement, p.sites, p.cfg.layout).ok()?;
        let own = keys.into_iter().zip(sites).filter(|(_, s)| *s == Some(me)).map(|(k, _)| k).collect();
        return Some((own, Vec::new()));
    }
    match p.prep.plan.nodes.get(node)? {
        IaOp::Shuffle { input: x, dims } if p.prep.plan.inputs.contains_key(x) => {
            let keys = input_keys(x)?;
            if keys.iter().any(|k| dims.iter().any(|&d| d >= k.len())) {
                return None;
            }
            Some((keys.into_iter().filter(|k| site_of(k, dims, p.sites) == me).collect(), Vec::new()))
        }
        IaOp::Broadcast { input: x } if p.prep.plan.inputs.contains_key(x) => Some((Vec::new(), input_keys(x)?)),
        _ => None,
    }
}

/// One output block: its key and its members (left key, left replicated?,
/// right key, right replicated?) in accumulation order.
type GroupPlan = (Key, Vec<(Key, bool, Key, bool)>);

pub(super) struct StreamPlan {
    groups: Vec<GroupPlan>,
    expected: [(Vec<Key>, Vec<Key>); 2],
}

/// The output blocks of a fused matmul on site `me` and their members, from
/// the keys its operands will hold, paired and grouped by the batch code.
pub(super) fn stream_plan<T: Elem>(p: &Proc<T>, i: usize, me: usize) -> Option<StreamPlan> {
    let step = &p.prep.steps[i];
    let j = step.fused.as_ref()?;
    let IaOp::LocalJoin { left, right, left_keys, right_keys, .. } = &p.prep.plan.nodes[j] else { return None };
    let IaOp::LocalAggregate { group_by, .. } = &step.op else { return None };
    let l = expected_keys(p, left, me)?;
    let r = expected_keys(p, right, me)?;
    if !l.1.is_empty() && !r.1.is_empty() {
        return None; // replicated × replicated: the batch code handles it
    }
    let dummy: SharedBlock<T> = Arc::new(pool::<T>().take(&[0]));
    let tuples = |keys: &[Key]| -> Vec<Tuple<T>> { keys.iter().map(|k| (k.clone(), dummy.clone())).collect() };
    let (lo, le, ro, re) = (tuples(&l.0), tuples(&l.1), tuples(&r.0), tuples(&r.1));
    let pairs = ops::join_pairs(j, left_keys, right_keys, &lo, &le, &ro, &re, false).ok()?;
    let within = |t: &Tuple<T>, list: &[Tuple<T>]| list.as_ptr_range().contains(&(t as *const Tuple<T>));
    let items: Vec<ops::Member<'_, (&Tuple<T>, &Tuple<T>)>> = pairs.iter().map(|p| (&p.0, false, (p.1, p.2))).collect();
    let groups = ops::groups(&step.name, group_by, &items).ok()?;
    let groups = groups
        .into_iter()
        .map(|(g, members)| {
            let m = members
                .iter()
                .map(|(_, _, (a, b))| (a.0.clone(), within(a, &le), b.0.clone(), within(b, &re)))
                .collect();
            (g, m)
        })
        .collect();
    Some(StreamPlan { groups, expected: [l, r] })
}

/// Blocks received so far by one side.
#[derive(Default)]
struct Received<T: Elem> {
    own: HashMap<Key, SharedBlock<T>>,
    every: HashMap<Key, SharedBlock<T>>,
    duplicate: bool,
}

impl<T: Elem> Received<T> {
    fn note(&mut self, batch: &Batch<T>) {
        for it in &batch.items {
            match &it.body {
                Body::Tuple(k, b) => self.duplicate |= self.own.insert(k.clone(), b.clone()).is_some(),
                Body::EveryTuple(k, b) => self.duplicate |= self.every.insert(k.clone(), b.clone()).is_some(),
                Body::Every(list) => {
                    for (k, b) in list.iter() {
                        self.duplicate |= self.every.insert(k.clone(), b.clone()).is_some();
                    }
                }
                Body::Meta(_) => {}
            }
        }
    }

    fn get(&self, k: &Key, every: bool) -> Option<&SharedBlock<T>> {
        if every {
            self.every.get(k)
        } else {
            self.own.get(k)
        }
    }

    fn matches(&self, expected: &(Vec<Key>, Vec<Key>)) -> bool {
        !self.duplicate
            && self.own.len() == expected.0.len()
            && self.every.len() == expected.1.len()
            && expected.0.iter().all(|k| self.own.contains_key(k))
            && expected.1.iter().all(|k| self.every.contains_key(k))
    }
}

pub(super) fn streamed_matmul<'s, T: Elem>(
    p: &Arc<Proc<T>>,
    me: usize,
    i: usize,
    left: S<'s, T>,
    right: S<'s, T>,
    plan: StreamPlan,
    report: &Report,
) -> S<'s, T> {
    let name = p.prep.steps[i].name.clone();
    let (p1, r1) = (p.clone(), report.clone());
    let scope = left.scope();
    left.binary_frontier::<Batch<T>, CB<T>, _, _, _, _>(right, Pipeline, Pipeline, &name, move |cap, info| {
        // Output blocks are computed on the kernel threads while this worker
        // goes on receiving and passing on blocks (other sites wait for
        // them); a finished block wakes the operator up.
        let wake = scope.worker().sync_activator_for(info.address.to_vec());
        // Each finished block comes with the kernel thread's time on it: the
        // site's time computing the step (`site_ms`) is the worker's own
        // plus its kernel threads'.
        let (finished_tx, finished) = std::sync::mpsc::channel::<(usize, Res<Block<T>>, u64)>();
        let mut cap = Some(cap);
        let (mut ls, mut rs) = (Stash::<T>::default(), Stash::<T>::default());
        let (mut lr, mut rr) = (Received::<T>::default(), Received::<T>::default());
        let mut started = vec![false; plan.groups.len()];
        let mut in_flight = 0usize;
        let mut emitted = 0u64;
        let mut failed = false;
        move |(in1, f1), (in2, f2), output| {
            let Some(c) = cap.as_ref() else { return };
            in1.for_each(|_, data| {
                lr.note(data);
                ls.absorb(data);
            });
            in2.for_each(|_, data| {
                rr.note(data);
                rs.absorb(data);
            });
            let t0 = Instant::now();
            let complete = f1.is_empty() && f2.is_empty();
            let step = &p1.prep.steps[i];
            let node = step.name.as_str();
            // Blocks the kernel threads finished.
            {
                let mut session = output.session(c);
                while let Ok((g, r, kernel_ns)) = finished.try_recv() {
                    in_flight -= 1;
                    r1.borrow_mut().steps[i].busy_ns += kernel_ns;
                    match r {
                        Ok(b) => {
                            emitted += 1;
                            session.give(Item::tuple(me, me as u32, plan.groups[g].0.clone(), Arc::new(b)));
                        }
                        Err(e) => {
                            if !failed {
                                record_error(&r1, stage(i), me, &e);
                            }
                            failed = true;
                        }
                    }
                }
            }
            // Start the output blocks whose members are all here, as many
            // as there are kernel threads.
            let threads = p1.cfg.threads.max(1);
            if !failed {
                for (g, (_, members)) in plan.groups.iter().enumerate() {
                    if in_flight >= threads {
                        break;
                    }
                    if started[g]
                        || !members
                            .iter()
                            .all(|(lk, le, rk, re)| lr.get(lk, *le).is_some() && rr.get(rk, *re).is_some())
                    {
                        continue;
                    }
                    started[g] = true;
                    in_flight += 1;
                    let blocks: Vec<(SharedBlock<T>, SharedBlock<T>)> = members
                        .iter()
                        .map(|(lk, le, rk, re)| {
                            (lr.get(lk, *le).expect("here").clone(), rr.get(rk, *re).expect("here").clone())
                        })
                        .collect();
                    let (p2, tx, wake) = (p1.clone(), finished_tx.clone(), wake.clone());
                    p1.kernels.spawn(move || {
                        let began = Instant::now();
                        let step = &p2.prep.steps[i];
                        let node = step.name.as_str();
                        let IaOp::LocalAggregate { kernel: agg_kernel, .. } = &step.op else {
                            unreachable!("an aggregation")
                        };
                        let j = step.fused.as_deref().expect("fused");
                        let jk = step.join_kernel.as_ref().expect("fused join kernel");
                        let r = caught(node, || {
                            let kind = MatMulKind::of(jk.kernel()).expect("a matrix product");
                            let pairs: Vec<(&Block<T>, &Block<T>)> = blocks.iter().map(|(a, b)| (&**a, &**b)).collect();
                            ops::matmul_group(p2.exec(), node, j, agg_kernel, jk, kind, &pairs, 1)
                        });
                        drop(blocks);
                        let kernel_ns = began.elapsed().as_nanos() as u64;
                        // The operator may be gone (the job failed): nothing to tell then.
                        let _ = tx.send((g, r, kernel_ns));
                        let _ = wake.activate();
                    });
                }
            }
            if !complete || in_flight > 0 {
                r1.borrow_mut().steps[i].busy_ns += t0.elapsed().as_nanos() as u64;
                return;
            }
            // Complete: check what came, add the replicated part, finish.
            p1.stall();
            let (l, r) = (ls.parts(), rs.parts());
            let as_planned = lr.matches(&plan.expected[0]) && rr.matches(&plan.expected[1]);
            let mut items = Vec::new();
            if !as_planned && emitted == 0 && !failed {
                // Not what was planned: the batch computation, from everything.
                let result = caught(node, || compute_binary(&p1, i, &l, &r));
                items = fire_items(&p1, me, i, &r1, result);
            } else if !as_planned && !failed {
                let e = bad(node, "the cluster runtime received other tuples than the plan's inputs hold");
                record_error(&r1, stage(i), me, &e);
            } else if !failed {
                let every = fused_matmul_replicated(&p1, i, &l, &r);
                items = fire_items(&p1, me, i, &r1, every.map(|e| (Vec::new(), e)));
                r1.borrow_mut().steps[i].tuples += emitted;
            }
            drop((l, r));
            p1.step_done(&r1, i, t0);
            let mut session = output.session(c);
            for it in items {
                session.give(it);
            }
            drop(session);
            cap = None;
        }
    })
}
