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
//! **Fusion** (decided by `crate::fusion`, as in the cluster runtime). A `local_aggregate(matAdd)` whose operand is a `local_join` with
//! a matrix-product kernel used by nothing else runs as one operator: each
//! output block is `Σ A·B`, accumulated by GEMM into the output block
//! (`C += A·B`), without materialising the products.
//!
//! The walk itself — what a site thread does at each step — is
//! `site_thread`; this module holds the run's options and figures, the
//! steps and the state the site threads share. The runtime's relations are
//! [`super::relation`].
//!
//! **Deadline.** [`RunOptions::deadline`] is checked before every node, between
//! the sites of a thread, and between chunks of a node's kernel calls; past
//! it the run stops with [`InterpError::Stopped`].

mod site_thread;

use super::elem::Elem;
use super::kernels::FastKernel;
use super::pool::{Pool, PoolStats};
use super::relation::{place, PhysValue, TRelation, Tuple};
use crate::fusion::fused_joins;
use crate::panics::panic_message;
use crate::semantics::{check_input_tuples, evaluation_order, AnyLayout, InterpError};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;
use tra_optimizer::deadline::Deadline;
use tra_optimizer::keyexpr::Key;
use tra_optimizer::program::{topo_order, IaOp, Operator, Plan};

use super::local::{bad, Exec, Res};

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
    /// Time each site spent computing it (for a matmul the cluster runtime
    /// streamed, the worker's own time and its kernel threads' time on the
    /// GEMMs).
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
    /// A fused matmul that the cluster runtime streamed on every site: its
    /// output blocks computed as their members arrived, the exchanges of its
    /// operands overlapping its GEMMs (never on the thread runtime).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub streamed: bool,
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
    /// The GEMM of the matrix products, one short line
    /// ([`GemmBackend::describe`](crate::threads::kernels::GemmBackend::describe)).
    pub gemm: String,
    /// The same in full: the library and its build, or each library tried
    /// and why it was not taken
    /// ([`GemmBackend::details`](crate::threads::kernels::GemmBackend::details)).
    pub gemm_detail: String,
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
            .start_handler(|_| crate::threads::kernels::warm_thread_buffers())
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
        // The GEMM asked for, or the error that it is missing, before anything runs.
        let gemm = crate::threads::kernels::gemm_backend()?;
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
                streamed: false,
            });
        }
        let pool = self.pool.stats();
        let report = RunReport {
            sites,
            site_threads: site_threads(sites),
            threads: self.threads,
            dtype: T::DTYPE.name(),
            gemm: gemm.describe(),
            gemm_detail: gemm.details(),
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
}
