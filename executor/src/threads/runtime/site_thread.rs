//! What a site thread does: walk the plan's steps in lockstep with the
//! other site threads, doing the part of each of its sites — route and
//! collect for the exchanges, the kernel calls of the local operators (on the
//! shared kernel threads, in chunks between looks at the deadline), the fused
//! matmul.

use super::{lock, Aux, Ctx, Fused, Gate, List, Routed, StepRole, CHUNK};
use crate::panics::panic_message;
use crate::semantics::InterpError;
use crate::threads::elem::Elem;
use crate::threads::kernels::{FastKernel, MatMulKind};
use crate::threads::local::{
    agg_blocks, agg_groups, bad, concat_count, concat_kernel, filter, join_blocks, join_pairs, map, matmul_groups,
    project, Groups, Member, Res,
};
use crate::threads::pool::SharedBlock;
use crate::threads::relation::Tuple;
use std::collections::HashSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use tra_optimizer::kernel::KernelRef;
use tra_optimizer::keyexpr::Key;
use tra_optimizer::placement::site_of;
use tra_optimizer::program::IaOp;

impl<T: Elem> Ctx<'_, T> {
    pub(super) fn thread_main(&self, t: usize) {
        // Should this thread unwind, the others must not wait for it.
        struct AbortOnUnwind<'g>(&'g Gate);
        impl Drop for AbortOnUnwind<'_> {
            fn drop(&mut self) {
                if std::thread::panicking() {
                    self.0.abort();
                }
            }
        }
        let _guard = AbortOnUnwind(&self.barrier);
        let sites = self.sites_of(t);
        for (i, step) in self.steps.iter().enumerate() {
            let t0 = Instant::now();
            let slot = &self.slots[step.slot];
            let timed = |s: usize, f: &mut dyn FnMut()| {
                let t1 = Instant::now();
                f();
                slot.busy_ns[s].fetch_add(t1.elapsed().as_nanos() as u64, Ordering::Relaxed);
            };
            if !step.skip {
                match step.role {
                    StepRole::Shuffle => {
                        // Phase 1: every site of this thread routes its tuples.
                        let mut kept = Vec::with_capacity(sites.len());
                        for &s in &sites {
                            let mut mine = None;
                            timed(s, &mut || {
                                if !self.stopped(i, s) {
                                    mine = self.guarded(i, s, || self.shuffle_route(i, s));
                                }
                            });
                            kept.push(mine);
                        }
                        if !self.barrier.wait() {
                            return;
                        }
                        // Phase 2: every site collects its inbox.
                        for (&s, mut mine) in sites.iter().zip(kept) {
                            if mine.is_some() {
                                timed(s, &mut || {
                                    if let Some(m) = mine.take() {
                                        self.shuffle_collect(i, s, m)
                                    }
                                });
                            }
                        }
                    }
                    StepRole::Broadcast => {
                        for &s in &sites {
                            timed(s, &mut || {
                                if !self.stopped(i, s) {
                                    self.guarded(i, s, || self.broadcast(i, s));
                                }
                            });
                        }
                    }
                    StepRole::Local => {
                        for &s in &sites {
                            timed(s, &mut || {
                                if !self.stopped(i, s) {
                                    self.guarded(i, s, || self.local(i, s));
                                }
                            });
                        }
                    }
                }
            }
            if !self.barrier.wait() {
                return;
            }
            if t == 0 {
                slot.wall_ns.store(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
                if let Some(p) = &self.progress {
                    p.nodes_done.fetch_add(1, Ordering::Relaxed);
                }
            }
            if self.failed_at.load(Ordering::SeqCst) <= i {
                return;
            }
            for &s in &sites {
                // Every inbox has been collected: the outboxes go.
                lock(&slot.outbox[s]).clear();
                for &r in &step.release {
                    *lock(&self.slots[r].own[s]) = None;
                }
            }
            if t == 0 {
                for &r in &step.release {
                    *lock(&self.slots[r].every) = None;
                }
            }
        }
    }

    fn store(&self, step: usize, s: usize, own: Vec<Tuple<T>>) {
        let slot = &self.slots[self.steps[step].slot];
        slot.tuples.fetch_add(own.len() as u64, Ordering::Relaxed);
        *lock(&slot.own[s]) = Some(Arc::new(own));
    }

    /// The replicated part of a node's value, computed by the first site that
    /// asks (the others wait for it and share it).
    fn every_once(&self, step: usize, f: impl FnOnce() -> Res<Vec<Tuple<T>>>) -> Res<()> {
        let slot = &self.slots[self.steps[step].slot];
        let mut g = lock(&slot.every);
        if g.is_none() {
            let r = catch_unwind(AssertUnwindSafe(f))
                .unwrap_or_else(|p| Err(bad(&self.steps[step].name, format!("panic: {}", panic_message(&*p)))));
            match r {
                Ok(v) => {
                    slot.tuples.fetch_add(v.len() as u64, Ordering::Relaxed);
                    *g = Some(Arc::new(v));
                }
                Err(e) => {
                    *g = Some(Arc::default());
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    // -----------------------------------------------------------------------
    // Exchanges.

    fn broadcast(&self, i: usize, s: usize) -> Res<()> {
        let step = &self.steps[i];
        let x = step.args[0];
        let sites = self.sites as u64;
        let slot = &self.slots[step.slot];
        let mut moved = sites * floats(&self.own(x, s));
        if s == 0 {
            moved += sites * floats(&self.every(x));
        }
        slot.moved.fetch_add(moved, Ordering::Relaxed);
        self.store(i, s, Vec::new());
        self.every_once(i, || {
            let mut all: Vec<Tuple<T>> = Vec::new();
            for t in 0..self.sites {
                all.extend(self.own(x, t).iter().cloned());
            }
            all.extend(self.every(x).iter().cloned());
            all.sort_by(|a, b| a.0.cmp(&b.0));
            Ok(all)
        })
    }

    /// Phase 1 of a shuffle on site `s`: route the site's tuples into its
    /// outbox, sorted by destination; the replicated tuples bound for `s`
    /// itself are returned (kept here).
    fn shuffle_route(&self, i: usize, s: usize) -> Res<Vec<Tuple<T>>> {
        let step = &self.steps[i];
        let IaOp::Shuffle { dims, .. } = &self.plan.nodes[&step.name] else { unreachable!() };
        let x = step.args[0];
        let slot = &self.slots[step.slot];
        let mut routed: Routed<T> = Vec::new();
        let mut moved = 0u64;
        for t in self.own(x, s).iter() {
            project(&step.name, &t.0, dims)?;
            moved += t.1.len() as u64;
            routed.push((site_of(&t.0, dims, self.sites), Some(t.clone())));
        }
        // Stable: the tuples for one destination keep their order.
        routed.sort_by_key(|r| r.0);
        let mut mine = Vec::new();
        for t in self.every(x).iter() {
            project(&step.name, &t.0, dims)?;
            if site_of(&t.0, dims, self.sites) == s {
                moved += t.1.len() as u64;
                mine.push(t.clone());
            }
        }
        slot.moved.fetch_add(moved, Ordering::Relaxed);
        *lock(&slot.outbox[s]) = routed;
        Ok(mine)
    }

    /// Phase 2 of a shuffle on site `s` (after the barrier): the tuples every
    /// site routed here, in source-site order, then the kept replicated ones.
    fn shuffle_collect(&self, i: usize, s: usize, mine: Vec<Tuple<T>>) {
        let slot = &self.slots[self.steps[i].slot];
        let mut got: Vec<Tuple<T>> = Vec::new();
        for src in 0..self.sites {
            let mut out = lock(&slot.outbox[src]);
            if out.is_empty() {
                continue;
            }
            let lo = out.partition_point(|r| r.0 < s);
            let hi = out.partition_point(|r| r.0 <= s);
            got.extend(out[lo..hi].iter_mut().filter_map(|r| r.1.take()));
        }
        got.extend(mine);
        got.sort_by(|a, b| a.0.cmp(&b.0));
        self.store(i, s, got);
        if s == 0 {
            *lock(&slot.every) = Some(Arc::default());
        }
    }

    /// `f` over `items` in chunks of [`CHUNK`], the deadline checked before
    /// each chunk; the results concatenated in order (one call without a deadline).
    fn in_chunks<I, R>(&self, i: usize, items: Vec<I>, f: impl Fn(Vec<I>) -> Res<Vec<R>>) -> Res<Vec<R>> {
        if self.deadline.is_none() || items.len() <= CHUNK {
            return f(items);
        }
        let mut out = Vec::with_capacity(items.len());
        let mut it = items.into_iter().peekable();
        while it.peek().is_some() {
            self.check_deadline(i)?;
            out.extend(f(it.by_ref().take(CHUNK).collect())?);
        }
        Ok(out)
    }

    /// An error once the run's deadline has passed (step `i` was running).
    fn check_deadline(&self, i: usize) -> Res<()> {
        match &self.deadline {
            Some(d) if d.passed() => Err(InterpError::Stopped { node: self.steps[i].name.clone(), reason: d.reason() }),
            _ => Ok(()),
        }
    }

    /// [`Self::in_chunks`] for operators whose output is sorted by key.
    fn in_sorted_chunks<I>(
        &self,
        i: usize,
        items: Vec<I>,
        f: impl Fn(Vec<I>) -> Res<Vec<Tuple<T>>>,
    ) -> Res<Vec<Tuple<T>>> {
        let chunked = self.deadline.is_some() && items.len() > CHUNK; // else one call, already sorted
        let mut out = self.in_chunks(i, items, f)?;
        if chunked {
            out.sort_by(|a, b| a.0.cmp(&b.0)); // stable: as one call would order them
        }
        Ok(out)
    }

    // -----------------------------------------------------------------------
    // Local operators.

    fn local(&self, i: usize, s: usize) -> Res<()> {
        let step = &self.steps[i];
        let node = step.name.as_str();
        let op = &self.plan.nodes[node];
        if let Some(f) = &step.fused {
            return self.fused_matmul(i, s, f);
        }
        match op {
            IaOp::LocalFilter { predicate, .. } => {
                let x = step.args[0];
                let own = filter(node, predicate, &self.own(x, s))?;
                self.store(i, s, own);
                self.every_once(i, || filter(node, predicate, &self.every(x)))
            }
            IaOp::LocalMap { key, .. } => {
                let x = step.args[0];
                let kernel = step.kernel.as_ref();
                let run = |list: List<T>| -> Res<Vec<Tuple<T>>> {
                    if self.deadline.is_none() || list.len() <= CHUNK {
                        return map(self.exec(), node, key.as_ref(), kernel, &list);
                    }
                    let mut out = Vec::with_capacity(list.len());
                    for c in list.chunks(CHUNK) {
                        self.check_deadline(i)?;
                        out.extend(map(self.exec(), node, key.as_ref(), kernel, c)?);
                    }
                    out.sort_by(|a, b| a.0.cmp(&b.0)); // stable: as one call would order them
                    Ok(out)
                };
                let own = run(self.own(x, s))?;
                self.store(i, s, own);
                self.every_once(i, || run(self.every(x)))
            }
            IaOp::LocalJoin { left_keys, right_keys, .. } => {
                let (l, r) = (step.args[0], step.args[1]);
                let k = step.kernel.as_ref().expect("join kernel");
                let (lo, le, ro, re) = (self.own(l, s), self.every(l), self.own(r, s), self.every(r));
                let pairs = join_pairs(node, left_keys, right_keys, &lo, &le, &ro, &re, false)?;
                let own = self.in_sorted_chunks(i, pairs, |c| join_blocks(self.exec(), node, k, c))?;
                self.store(i, s, own);
                self.every_once(i, || {
                    let pairs = join_pairs(node, left_keys, right_keys, &[], &le, &[], &re, true)?;
                    self.in_sorted_chunks(i, pairs, |c| join_blocks(self.exec(), node, k, c))
                })
            }
            IaOp::LocalAggregate { group_by, kernel, .. } => {
                let x = step.args[0];
                let k = step.kernel.as_ref().expect("aggregate kernel");
                let concat = concat_kernel(node, kernel)?;
                let (own, every) = (self.own(x, s), self.every(x));
                let aux = self.aux(i, || {
                    let mut aux = Aux::default();
                    if let Some((key_dim, _)) = concat {
                        let mut count = 0u32;
                        for t in 0..self.sites {
                            count = count.max(concat_count(node, self.own(x, t).iter().map(|t| &t.0), key_dim)?);
                        }
                        aux.concat_count = count.max(concat_count(node, every.iter().map(|t| &t.0), key_dim)?);
                    }
                    if !every.is_empty() && self.any_own(x) {
                        let mut set = HashSet::new();
                        for t in 0..self.sites {
                            for tu in self.own(x, t).iter() {
                                set.insert(project(node, &tu.0, group_by)?);
                            }
                        }
                        aux.at_groups = Some(set);
                    }
                    Ok(aux)
                })?;
                let own_items: Vec<(&Key, bool, &SharedBlock<T>)> = own.iter().map(|t| (&t.0, false, &t.1)).collect();
                let every_items: Vec<(&Key, bool, &SharedBlock<T>)> =
                    every.iter().map(|t| (&t.0, true, &t.1)).collect();
                let fold = |groups| {
                    self.in_chunks(i, groups, |c| agg_blocks(self.exec(), node, k, concat, aux.concat_count, c))
                };
                let out = fold(agg_groups(node, group_by, &own_items, &every_items, aux.at_groups.as_ref(), false)?)?;
                self.store(i, s, out);
                self.every_once(i, || {
                    fold(agg_groups(node, group_by, &[], &every_items, aux.at_groups.as_ref(), true)?)
                })
            }
            IaOp::Broadcast { .. } | IaOp::Shuffle { .. } => unreachable!("exchanges are not local"),
        }
    }

    fn aux(&self, i: usize, f: impl FnOnce() -> Res<Aux>) -> Res<Arc<Aux>> {
        let slot = &self.slots[self.steps[i].slot];
        let mut g = lock(&slot.aux);
        if let Some(a) = &*g {
            return Ok(a.clone());
        }
        let a = Arc::new(f()?);
        *g = Some(a.clone());
        Ok(a)
    }

    /// `local_aggregate(g, matAdd, local_join(lk, rk, matMul…, L, R))` in one
    /// operator: every output block is the sum of its products, accumulated
    /// by GEMM.
    fn fused_matmul(&self, i: usize, s: usize, f: &Fused) -> Res<()> {
        let step = &self.steps[i];
        let node = step.name.as_str();
        let IaOp::LocalAggregate { group_by, kernel: agg_kernel, .. } = &self.plan.nodes[node] else { unreachable!() };
        let IaOp::LocalJoin { left_keys, right_keys, kernel, .. } = &self.plan.nodes[&f.join] else { unreachable!() };
        let jname = f.join.as_str();
        let kind = MatMulKind::of(kernel).expect("a matrix product");
        let (l, r) = (f.left, f.right);
        let (lo, le, ro, re) = (self.own(l, s), self.every(l), self.own(r, s), self.every(r));
        let own_pairs = join_pairs(jname, left_keys, right_keys, &lo, &le, &ro, &re, false)?;
        let every_pairs = join_pairs(jname, left_keys, right_keys, &[], &le, &[], &re, true)?;
        let aux = self.aux(i, || {
            let mut aux = Aux::default();
            let any_own = (0..self.sites).any(|t| !self.own(l, t).is_empty() || !self.own(r, t).is_empty());
            if !every_pairs.is_empty() && any_own {
                let mut set = HashSet::new();
                for t in 0..self.sites {
                    let (lo, ro) = (self.own(l, t), self.own(r, t));
                    for (key, _, _) in join_pairs(jname, left_keys, right_keys, &lo, &le, &ro, &re, false)? {
                        set.insert(project(node, &key, group_by)?);
                    }
                }
                aux.at_groups = Some(set);
            }
            Ok(aux)
        })?;
        let own_items: Vec<Member<'_, (&Tuple<T>, &Tuple<T>)>> =
            own_pairs.iter().map(|p| (&p.0, false, (p.1, p.2))).collect();
        let every_items: Vec<Member<'_, (&Tuple<T>, &Tuple<T>)>> =
            every_pairs.iter().map(|p| (&p.0, true, (p.1, p.2))).collect();
        let groups = agg_groups(node, group_by, &own_items, &every_items, aux.at_groups.as_ref(), false)?;
        let jk = step.join_kernel.clone().unwrap_or_else(|| FastKernel::new(kernel));
        let own = self.matmul_groups(node, jname, &jk, agg_kernel, kind, groups)?;
        self.store(i, s, own);
        self.every_once(i, || {
            let groups = agg_groups(node, group_by, &[], &every_items, aux.at_groups.as_ref(), true)?;
            self.matmul_groups(node, jname, &jk, agg_kernel, kind, groups)
        })
    }

    fn matmul_groups(
        &self,
        node: &str,
        jname: &str,
        jk: &FastKernel,
        agg_kernel: &KernelRef,
        kind: MatMulKind,
        groups: Groups<'_, (&Tuple<T>, &Tuple<T>)>,
    ) -> Res<Vec<Tuple<T>>> {
        // Parallel over output blocks, single-threaded products; only when a
        // site has fewer output blocks than kernel threads is a product split.
        let threads = self.workers.current_num_threads();
        let split = if groups.is_empty() || groups.len() >= threads { 1 } else { threads / groups.len() };
        let i = self.steps.iter().position(|s| s.name == node).expect("a step of the plan");
        self.in_chunks(i, groups, |c| matmul_groups(self.exec(), node, jname, agg_kernel, jk, kind, c, split))
    }
}

fn floats<T: Elem>(list: &[Tuple<T>]) -> u64 {
    list.iter().map(|t| t.1.len() as u64).sum()
}
