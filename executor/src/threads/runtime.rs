//! The thread runtime: the sites of a plan on a few worker threads, in
//! lockstep over the plan.
//!
//! Sites are simulated, not given a thread each: at most one site thread
//! per core (fewer when there are fewer sites), site `s` served by thread
//! `s mod threads`, so that a plan for 4,096 sites starts a handful of
//! threads, not 4,096. Every site thread walks the plan's nodes in the same
//! order, doing the part of each of its sites. For a local operator that is
//! the site's own part; for a shuffle each site routes its tuples into an
//! outbox (sorted by destination, so that it costs its tuples, not the
//! number of sites), the threads meet at a barrier and each site collects its
//! inbox; a broadcast publishes one replicated list that every site shares. Blocks are `Arc`s: an exchange moves pointers, never floats,
//! and a replicated relation is one copy however many sites hold it. Every
//! node ends at a barrier, after which any site may read any site's value
//! (needed for the few operators whose reference semantics are global: a
//! concat's piece count, the aggregation of replicated tuples).
//!
//! The kernel work of a site (one kernel call per output tuple or group) runs
//! on a shared pool of worker threads, one per core, so that sites with more
//! work than others do not leave cores idle; each kernel call is
//! single-threaded.
//!
//! Semantics are those of the reference interpreter ([`crate::reference`]),
//! including [`Site::Everywhere`](crate::semantics::Site::Everywhere) for replicated tuples, partial aggregates,
//! the order of folds, `local_map`'s pairing of blocks and keys and the count
//! of floats moved: every test compares the two.
//!
//! **Fusion.** A `local_aggregate(matAdd)` whose operand is a `local_join` with
//! a matrix-product kernel used by nothing else runs as one operator: each
//! output block is `Σ A·B`, accumulated by GEMM into the output block
//! (`C += A·B`), without materialising the products.
//!
//! **Deadline.** [`RunOptions::deadline`] is checked before every node, between
//! the sites of a thread, and between chunks of a node's kernel calls; past
//! it the run stops with [`InterpError::Stopped`].

use super::elem::Elem;
use super::kernels::{FastKernel, MatMulKind};
use super::pool::{Pool, PoolStats, SharedBlock};
use crate::fusion::fused_joins;
use crate::panics::panic_message;
use crate::semantics::{check_input_tuples, evaluation_order, AnyLayout, InterpError};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;
use tra_optimizer::deadline::Deadline;
use tra_optimizer::kernel::KernelRef;
use tra_optimizer::keyexpr::Key;
use tra_optimizer::placement::site_of;
use tra_optimizer::program::{topo_order, IaOp, Operator, PlacementDecl, Plan};

use super::local::{
    agg_blocks, agg_groups, bad, concat_count, concat_kernel, filter, join_blocks, join_pairs, map, matmul_groups,
    project, Exec, Groups, Member, Res,
};

/// A tuple: key and shared block.
pub type Tuple<T> = (Key, SharedBlock<T>);

/// A tensor relation of shared blocks: tuples sorted by key, keys unique.
#[derive(Debug, Clone, Default)]
pub struct TRelation<T: Elem> {
    /// The tuples, sorted by key.
    pub tuples: Vec<Tuple<T>>,
}

impl<T: Elem> TRelation<T> {
    /// A relation from tuples in any order; a repeated key is an error.
    pub fn new(mut tuples: Vec<Tuple<T>>) -> Result<TRelation<T>, String> {
        tuples.sort_by(|a, b| a.0.cmp(&b.0));
        if let Some(w) = tuples.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(format!("key {:?} given twice", w[0].0));
        }
        Ok(TRelation { tuples })
    }

    /// Number of tuples.
    pub fn len(&self) -> usize {
        self.tuples.len()
    }

    /// True without tuples.
    pub fn is_empty(&self) -> bool {
        self.tuples.is_empty()
    }

    /// The block of a key.
    pub fn get(&self, key: &[u32]) -> Option<&SharedBlock<T>> {
        self.tuples.binary_search_by(|t| t.0.as_slice().cmp(key)).ok().map(|i| &self.tuples[i].1)
    }

    /// Floats in all blocks.
    pub fn floats(&self) -> u64 {
        self.tuples.iter().map(|t| t.1.len() as u64).sum()
    }
}

/// The physical value of a node: each site's own tuples, and the replicated
/// tuples every site holds (one shared copy). Each list is sorted by key.
#[derive(Debug, Clone)]
pub struct PhysValue<T: Elem> {
    /// Site `s`'s tuples (the reference's `Site::At(s)`).
    pub sites: Vec<Arc<Vec<Tuple<T>>>>,
    /// Tuples on every site (the reference's `Site::Everywhere`).
    pub everywhere: Arc<Vec<Tuple<T>>>,
}

impl<T: Elem> PhysValue<T> {
    /// Project the site away; a key held more than once (partial aggregates)
    /// is an error, as in the reference's `erase`.
    pub fn erase(&self) -> Result<TRelation<T>, InterpError> {
        self.erase_named(None)
    }

    pub(crate) fn erase_named(&self, node: Option<&str>) -> Result<TRelation<T>, InterpError> {
        use crate::semantics::Site;
        let mut all: Vec<(&Key, Site, &SharedBlock<T>)> = Vec::new();
        for (s, list) in self.sites.iter().enumerate() {
            all.extend(list.iter().map(|(k, b)| (k, Site::At(s), b)));
        }
        all.extend(self.everywhere.iter().map(|(k, b)| (k, Site::Everywhere, b)));
        all.sort_by(|a, b| a.0.cmp(b.0).then(a.1.cmp(&b.1)));
        let mut out: Vec<Tuple<T>> = Vec::with_capacity(all.len());
        let mut i = 0;
        while i < all.len() {
            let mut j = i + 1;
            while j < all.len() && all[j].0 == all[i].0 {
                j += 1;
            }
            if j - i > 1 {
                return Err(InterpError::NotATensorRelation {
                    node: node.map(str::to_string),
                    key: all[i].0.clone(),
                    sites: all[i..j].iter().map(|t| t.1).collect(),
                });
            }
            out.push((all[i].0.clone(), all[i].2.clone()));
            i = j;
        }
        Ok(TRelation { tuples: out })
    }

    /// Number of tuples (a replicated tuple counts once).
    pub fn tuples(&self) -> u64 {
        self.sites.iter().map(|l| l.len() as u64).sum::<u64>() + self.everywhere.len() as u64
    }
}

/// Progress counters a caller may watch while a run goes on.
#[derive(Debug, Default)]
pub struct Progress {
    /// Catalog flops of the kernel calls finished so far.
    pub flops_done: AtomicU64,
    /// Plan nodes finished so far.
    pub nodes_done: AtomicU64,
}

/// How to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Where the tuples of inputs declared `any` go.
    pub layout: AnyLayout,
    /// Fuse `local_aggregate(matAdd) ∘ local_join(matMul…)` into accumulating GEMMs.
    pub fuse: bool,
    /// Keep the value of every node (not only the outputs) in the result.
    pub keep_values: bool,
    /// Counters to update while running.
    pub progress: Option<Arc<Progress>>,
    /// Stop (with [`InterpError::Stopped`]) once this has passed.
    pub deadline: Option<Deadline>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions { layout: AnyLayout::RoundRobin, fuse: true, keep_values: false, progress: None, deadline: None }
    }
}

/// The most site threads a run starts: one per core, and at most one per site.
pub fn site_threads(sites: usize) -> usize {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    sites.clamp(1, cores)
}

/// Figures of one plan node.
#[derive(Debug, Clone, serde::Serialize)]
pub struct NodeStats {
    /// The node.
    pub name: String,
    /// Its operator.
    pub op: &'static str,
    /// Wall time from the start of the node on all sites to its end on all sites.
    pub wall_ms: f64,
    /// Time each site spent computing it.
    pub site_ms: Vec<f64>,
    /// Floats moved (shuffles and broadcasts).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub floats_moved: Option<u64>,
    /// Tuples of its value (a replicated tuple once); absent when fused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tuples: Option<u64>,
    /// The node this one was fused into (its time is counted there).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fused_into: Option<String>,
}

/// What a run measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunReport {
    /// Sites of the plan.
    pub sites: usize,
    /// Threads the sites ran on (at most one per core).
    pub site_threads: usize,
    /// Kernel threads.
    pub threads: usize,
    /// Element type.
    pub dtype: &'static str,
    /// Wall time of the whole run (placing inputs included).
    pub wall_ms: f64,
    /// Floats moved by all shuffles and broadcasts.
    pub network_floats: u64,
    /// Per node, in execution order.
    pub nodes: Vec<NodeStats>,
    /// Buffer pool counters after the run.
    pub pool: PoolStats,
    /// Block bytes allocated fresh during this run (0 when everything came from the pool).
    pub fresh_block_bytes: u64,
}

/// What a run computed.
#[derive(Debug, Clone)]
pub struct ThreadRun<T: Elem> {
    /// The value of every plan output.
    pub outputs: BTreeMap<String, PhysValue<T>>,
    /// Inputs and nodes (only with [`RunOptions::keep_values`]; fused joins absent).
    pub values: BTreeMap<String, PhysValue<T>>,
    /// Floats moved by every shuffle and broadcast.
    pub floats_moved: BTreeMap<String, u64>,
    /// Timings and counters.
    pub report: RunReport,
}

impl<T: Elem> ThreadRun<T> {
    /// Floats moved by all exchanges.
    pub fn total_floats_moved(&self) -> u64 {
        self.floats_moved.values().sum()
    }

    /// Every output with the site projected away.
    pub fn erased_outputs(&self) -> Result<BTreeMap<String, TRelation<T>>, InterpError> {
        self.outputs.iter().map(|(n, v)| Ok((n.clone(), v.erase_named(Some(n))?))).collect()
    }
}

/// The thread executor: a buffer pool and a pool of kernel threads, reused
/// across runs.
pub struct ThreadRuntime<T: Elem> {
    pool: Pool<T>,
    workers: rayon::ThreadPool,
    threads: usize,
}

impl<T: Elem> Default for ThreadRuntime<T> {
    fn default() -> Self {
        ThreadRuntime::new()
    }
}

impl<T: Elem> ThreadRuntime<T> {
    /// One kernel thread per core.
    pub fn new() -> ThreadRuntime<T> {
        let n = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        ThreadRuntime::with_threads(n)
    }

    /// `threads` kernel threads (at least one, at most [`MAX_KERNEL_THREADS`]).
    pub fn with_threads(threads: usize) -> ThreadRuntime<T> {
        ThreadRuntime::with_threads_and_pool(threads, u64::MAX)
    }

    /// `threads` kernel threads (at least one, at most [`MAX_KERNEL_THREADS`])
    /// and a buffer pool that keeps at most `pool_bytes` of freed blocks (a
    /// long-running server must not keep every block it ever computed).
    pub fn with_threads_and_pool(threads: usize, pool_bytes: u64) -> ThreadRuntime<T> {
        let threads = threads.clamp(1, MAX_KERNEL_THREADS);
        let workers = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("tra-kernel-{i}"))
            .build()
            .expect("cannot start kernel threads");
        ThreadRuntime { pool: Pool::with_limit(pool_bytes), workers, threads }
    }

    /// The buffer pool (make input blocks from it so they are reused too).
    pub fn pool(&self) -> &Pool<T> {
        &self.pool
    }

    /// Kernel threads.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Run an IA plan on `sites` sites. Inputs are placed by their declared
    /// placement (`opts.layout` for `any`), exactly as the reference places them.
    pub fn run(
        &self,
        plan: &Plan,
        sites: usize,
        inputs: &BTreeMap<String, TRelation<T>>,
        opts: &RunOptions,
    ) -> Result<ThreadRun<T>, InterpError> {
        let start = Instant::now();
        let fresh_before = self.pool.stats().fresh_bytes;
        if sites == 0 {
            return Err(InterpError::NoSites);
        }
        // Inputs, checked and placed.
        let mut names: Vec<String> = Vec::new();
        let mut index: HashMap<String, usize> = HashMap::new();
        let mut slots: Vec<Slot<T>> = Vec::new();
        for (name, decl) in &plan.inputs {
            let rel = inputs.get(name).ok_or_else(|| InterpError::MissingInput(name.clone()))?;
            check_input_tuples(name, decl, rel.tuples.iter().map(|(k, b)| (k, b.shape())))?;
            let (own, every) = place(name, rel, &decl.placement, sites, opts.layout)?;
            let slot = Slot::new(sites);
            for (s, list) in own.into_iter().enumerate() {
                *lock(&slot.own[s]) = Some(Arc::new(list));
            }
            *lock(&slot.every) = Some(Arc::new(every));
            index.insert(name.clone(), slots.len());
            names.push(name.clone());
            slots.push(slot);
        }
        let order = evaluation_order(topo_order(&plan.nodes), plan.nodes.keys(), |n| plan.inputs.contains_key(n))?;
        for name in &order {
            index.insert(name.clone(), slots.len());
            names.push(name.clone());
            slots.push(Slot::new(sites));
        }
        // Operands must exist.
        for name in &order {
            for operand in plan.nodes[name].operands() {
                if !index.contains_key(operand) {
                    return Err(InterpError::UnknownOperand { node: name.clone(), operand: operand.to_string() });
                }
            }
        }
        for o in &plan.outputs {
            if !index.contains_key(o) {
                return Err(InterpError::UnknownOutput(o.clone()));
            }
        }

        // Steps: every node, with fused joins marked.
        let fusions = if opts.fuse { fused_joins(plan) } else { BTreeMap::new() };
        let mut steps: Vec<Step> = Vec::with_capacity(order.len());
        let mut fused_join: HashMap<String, String> = HashMap::new();
        for name in &order {
            let op = &plan.nodes[name];
            let slot = index[name];
            let mut step = Step::new(name, op, slot, &index);
            if let Some(join) = fusions.get(name) {
                let IaOp::LocalJoin { left, right, kernel: jk, .. } = &plan.nodes[join] else {
                    unreachable!("a fused aggregation's operand is a join")
                };
                step.fused = Some(Fused { join: join.clone(), left: index[left], right: index[right] });
                step.join_kernel = Some(FastKernel::new(jk));
                step.reads = vec![index[left], index[right]];
                fused_join.insert(join.clone(), name.clone());
            }
            steps.push(step);
        }
        for step in steps.iter_mut() {
            if fused_join.contains_key(&step.name) {
                step.skip = true;
                step.reads.clear();
            }
        }
        // Release each value after its last reader (unless kept).
        let mut last_read: HashMap<usize, usize> = HashMap::new();
        for (i, step) in steps.iter().enumerate() {
            for &r in &step.reads {
                last_read.insert(r, i);
            }
        }
        let keep: HashSet<usize> = plan.outputs.iter().map(|o| index[o]).collect();
        for (&slot, &i) in &last_read {
            if !opts.keep_values && !keep.contains(&slot) {
                steps[i].release.push(slot);
            }
        }

        let ctx = Ctx {
            plan,
            sites,
            steps: &steps,
            slots: &slots,
            pool: &self.pool,
            workers: &self.workers,
            threads: site_threads(sites),
            barrier: Gate::new(site_threads(sites)),
            failed_at: AtomicUsize::new(usize::MAX),
            error: Mutex::new(None),
            progress: opts.progress.clone(),
            deadline: opts.deadline.clone(),
        };
        std::thread::scope(|scope| {
            let mut handles = Vec::with_capacity(ctx.threads);
            for t in 0..ctx.threads {
                let ctx = &ctx;
                let spawned = std::thread::Builder::new()
                    .name(format!("tra-sites-{t}"))
                    .stack_size(SITE_STACK)
                    .spawn_scoped(scope, move || ctx.thread_main(t));
                match spawned {
                    Ok(h) => handles.push(h),
                    Err(e) => {
                        // The threads already started must not wait for this one.
                        ctx.fail(
                            0,
                            t,
                            InterpError::BadNode {
                                node: "(sites)".into(),
                                message: format!("cannot start site thread {t} of {}: {e}", ctx.threads),
                            },
                        );
                        ctx.barrier.abort();
                        break;
                    }
                }
            }
            for h in handles {
                if h.join().is_err() {
                    ctx.fail(usize::MAX, 0, bad("?", "a site thread panicked"));
                }
            }
        });
        if let Some((_, _, e)) = lock(&ctx.error).take() {
            return Err(e);
        }

        // Results.
        let value = |slot: &Slot<T>| PhysValue {
            sites: slot.own.iter().map(|m| lock(m).clone().unwrap_or_default()).collect(),
            everywhere: lock(&slot.every).clone().unwrap_or_default(),
        };
        let mut outputs = BTreeMap::new();
        for o in &plan.outputs {
            outputs.insert(o.clone(), value(&slots[index[o]]));
        }
        let mut values = BTreeMap::new();
        if opts.keep_values {
            for (i, name) in names.iter().enumerate() {
                if !fused_join.contains_key(name) {
                    values.insert(name.clone(), value(&slots[i]));
                }
            }
        }
        let mut floats_moved = BTreeMap::new();
        let mut nodes = Vec::with_capacity(steps.len());
        for step in &steps {
            let slot = &slots[step.slot];
            let moved = matches!(step.role, StepRole::Shuffle | StepRole::Broadcast)
                .then(|| slot.moved.load(Ordering::Relaxed));
            if let Some(m) = moved {
                floats_moved.insert(step.name.clone(), m);
            }
            let tuples = (!step.skip).then(|| slot.tuples.load(Ordering::Relaxed));
            nodes.push(NodeStats {
                name: step.name.clone(),
                op: plan.nodes[&step.name].op_name(),
                wall_ms: slot.wall_ns.load(Ordering::Relaxed) as f64 / 1e6,
                site_ms: slot.busy_ns.iter().map(|b| b.load(Ordering::Relaxed) as f64 / 1e6).collect(),
                floats_moved: moved,
                tuples,
                fused_into: fused_join.get(&step.name).cloned(),
            });
        }
        let pool = self.pool.stats();
        let report = RunReport {
            sites,
            site_threads: site_threads(sites),
            threads: self.threads,
            dtype: T::DTYPE.name(),
            wall_ms: start.elapsed().as_secs_f64() * 1e3,
            network_floats: floats_moved.values().sum(),
            nodes,
            pool,
            fresh_block_bytes: pool.fresh_bytes - fresh_before,
        };
        Ok(ThreadRun { outputs, values, floats_moved, report })
    }
}

/// The most kernel threads a runtime starts (`tra run --threads` above it is refused).
pub const MAX_KERNEL_THREADS: usize = 1024;

/// Stack of a site thread (kernels run on the kernel threads).
const SITE_STACK: usize = 1 << 20;

/// Kernel calls of one node and site between two looks at the deadline.
const CHUNK: usize = 256;

/// A barrier that can be abandoned: when a site cannot go on (its thread did
/// not start, or it unwound), the others are released instead of waiting
/// forever.
struct Gate {
    n: usize,
    state: Mutex<(usize, u64, bool)>,
    cv: Condvar,
}

impl Gate {
    fn new(n: usize) -> Gate {
        Gate { n, state: Mutex::new((0, 0, false)), cv: Condvar::new() }
    }

    /// Wait for every site; false when the gate was abandoned.
    fn wait(&self) -> bool {
        let mut g = lock(&self.state);
        if g.2 {
            return false;
        }
        g.0 += 1;
        if g.0 == self.n {
            g.0 = 0;
            g.1 += 1;
            self.cv.notify_all();
            return true;
        }
        let generation = g.1;
        while g.1 == generation && !g.2 {
            g = self.cv.wait(g).unwrap_or_else(|e| e.into_inner());
        }
        !g.2 || g.1 != generation
    }

    fn abort(&self) {
        let mut g = lock(&self.state);
        g.2 = true;
        self.cv.notify_all();
    }
}

fn lock<X>(m: &Mutex<X>) -> std::sync::MutexGuard<'_, X> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

// ---------------------------------------------------------------------------
// Plan steps and shared state.

#[derive(Debug, Clone, Copy, PartialEq)]
/// What a step does: an exchange of one of two kinds, or site-local work.
enum StepRole {
    Broadcast,
    Shuffle,
    Local,
}

struct Fused {
    join: String,
    left: usize,
    right: usize,
}

struct Step {
    name: String,
    role: StepRole,
    slot: usize,
    /// Operand slots, in operand order.
    args: Vec<usize>,
    /// Slots this step reads (operands, or a fused join's operands).
    reads: Vec<usize>,
    /// Slots to release after this step.
    release: Vec<usize>,
    /// A join computed inside the next aggregation.
    skip: bool,
    fused: Option<Fused>,
    kernel: Option<FastKernel>,
    join_kernel: Option<FastKernel>,
}

impl Step {
    fn new(name: &str, op: &IaOp, slot: usize, index: &HashMap<String, usize>) -> Step {
        let args: Vec<usize> = op.operands().iter().map(|o| index[*o]).collect();
        let role = match op {
            IaOp::Broadcast { .. } => StepRole::Broadcast,
            IaOp::Shuffle { .. } => StepRole::Shuffle,
            _ => StepRole::Local,
        };
        let kernel = match op {
            IaOp::LocalJoin { kernel, .. } | IaOp::LocalAggregate { kernel, .. } => Some(FastKernel::new(kernel)),
            IaOp::LocalMap { kernel: Some(k), .. } => Some(FastKernel::new(k)),
            _ => None,
        };
        Step {
            name: name.to_string(),
            role,
            slot,
            reads: args.clone(),
            args,
            release: Vec::new(),
            skip: false,
            fused: None,
            kernel,
            join_kernel: None,
        }
    }
}

type List<T> = Arc<Vec<Tuple<T>>>;

/// The tuples one site routed in a shuffle, with their destinations, sorted
/// by destination (each taken by its destination when collected).
type Routed<T> = Vec<(usize, Option<Tuple<T>>)>;

/// Global facts about an aggregation's input, computed once.
#[derive(Default)]
struct Aux {
    /// The piece count of a concat aggregation.
    concat_count: u32,
    /// Group keys that have a tuple on some site (only when the input also
    /// has replicated tuples).
    at_groups: Option<HashSet<Key>>,
}

struct Slot<T: Elem> {
    own: Vec<Mutex<Option<List<T>>>>,
    every: Mutex<Option<List<T>>>,
    aux: Mutex<Option<Arc<Aux>>>,
    /// Per source site: the tuples it routed.
    outbox: Vec<Mutex<Routed<T>>>,
    moved: AtomicU64,
    tuples: AtomicU64,
    busy_ns: Vec<AtomicU64>,
    wall_ns: AtomicU64,
}

impl<T: Elem> Slot<T> {
    fn new(sites: usize) -> Slot<T> {
        Slot {
            own: (0..sites).map(|_| Mutex::new(None)).collect(),
            every: Mutex::new(None),
            aux: Mutex::new(None),
            outbox: (0..sites).map(|_| Mutex::new(Vec::new())).collect(),
            moved: AtomicU64::new(0),
            tuples: AtomicU64::new(0),
            busy_ns: (0..sites).map(|_| AtomicU64::new(0)).collect(),
            wall_ns: AtomicU64::new(0),
        }
    }
}

struct Ctx<'a, T: Elem> {
    plan: &'a Plan,
    sites: usize,
    steps: &'a [Step],
    slots: &'a [Slot<T>],
    pool: &'a Pool<T>,
    workers: &'a rayon::ThreadPool,
    /// Site threads (site `s` on thread `s mod threads`).
    threads: usize,
    barrier: Gate,
    /// The first step any site failed at: every site stops after that
    /// step's barrier (a site that fails a later step while a slow one is
    /// still checking an earlier one must not make it stop early).
    failed_at: AtomicUsize,
    /// (step, site, error): the first by step, then site, wins.
    error: Mutex<Option<(usize, usize, InterpError)>>,
    progress: Option<Arc<Progress>>,
    deadline: Option<Deadline>,
}

impl<'a, T: Elem> Ctx<'a, T> {
    fn fail(&self, step: usize, site: usize, e: InterpError) {
        let mut slot = lock(&self.error);
        let replace = match &*slot {
            None => true,
            Some((st, si, _)) => (step, site) < (*st, *si),
        };
        if replace {
            *slot = Some((step, site, e));
        }
        self.failed_at.fetch_min(step, Ordering::SeqCst);
    }

    fn guarded<R>(&self, step: usize, site: usize, f: impl FnOnce() -> Res<R>) -> Option<R> {
        match catch_unwind(AssertUnwindSafe(f)) {
            Ok(Ok(r)) => Some(r),
            Ok(Err(e)) => {
                self.fail(step, site, e);
                None
            }
            Err(p) => {
                self.fail(step, site, bad(&self.steps[step].name, format!("panic: {}", panic_message(&*p))));
                None
            }
        }
    }

    fn own(&self, slot: usize, s: usize) -> List<T> {
        lock(&self.slots[slot].own[s]).clone().unwrap_or_default()
    }

    fn every(&self, slot: usize) -> List<T> {
        lock(&self.slots[slot].every).clone().unwrap_or_default()
    }

    fn any_own(&self, slot: usize) -> bool {
        (0..self.sites).any(|s| !self.own(slot, s).is_empty())
    }

    /// Where this run's kernels run, counting their flops into the progress.
    fn exec(&self) -> Exec<'_, T> {
        Exec { pool: self.pool, workers: self.workers, flops: self.progress.as_ref().map(|p| &p.flops_done) }
    }

    /// The sites site thread `t` serves: `t`, `t + threads`, …
    fn sites_of(&self, t: usize) -> Vec<usize> {
        (t..self.sites).step_by(self.threads).collect()
    }

    /// Whether site `s` must not do step `i`: the deadline has passed (the
    /// run then fails at this step).
    fn stopped(&self, i: usize, s: usize) -> bool {
        match &self.deadline {
            Some(d) if d.passed() => {
                self.fail(i, s, InterpError::Stopped { node: self.steps[i].name.clone(), reason: d.reason() });
                true
            }
            _ => false,
        }
    }

    fn thread_main(&self, t: usize) {
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

// ---------------------------------------------------------------------------
// Operator helpers (the reference's, on shared blocks).

/// Place an input: `(each site's tuples, replicated tuples)`, as the
/// reference's `place`.
#[allow(clippy::type_complexity)]
fn place<T: Elem>(
    name: &str,
    rel: &TRelation<T>,
    placement: &PlacementDecl,
    sites: usize,
    layout: AnyLayout,
) -> Res<(Vec<Vec<Tuple<T>>>, Vec<Tuple<T>>)> {
    let placed = crate::semantics::input_sites(name, rel.tuples.iter().map(|t| &t.0), placement, sites, layout)?;
    let mut own: Vec<Vec<Tuple<T>>> = vec![Vec::new(); sites];
    let mut every = Vec::new();
    for ((k, b), site) in rel.tuples.iter().zip(placed) {
        match site {
            Some(s) => own[s].push((k.clone(), b.clone())),
            None => every.push((k.clone(), b.clone())),
        }
    }
    Ok((own, every))
}
