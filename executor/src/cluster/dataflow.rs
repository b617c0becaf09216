//! One process of a cluster run: the IA plan as a timely dataflow.
//!
//! Every timely worker is one site (site index = timely worker index =
//! `process · workers + thread`). Each plan node is a timely stream of
//! [`Batch`]es; its operators are:
//!
//! - **input**: a source that emits the worker's own tuples (read from the
//!   `.npy` file: only its own) and, for a replicated input, the process's
//!   shared copy.
//! - **shuffle(dims)**: a routing operator that sends each tuple to worker
//!   `site_of(key, dims, sites)` — the optimizer's placement function — then a
//!   timely `exchange` on that destination. A replicated operand is sent from
//!   one copy: each worker keeps the replicated tuples that hash to itself.
//! - **broadcast**: one copy per *process*, not per worker: every tuple is
//!   exchanged to the first worker of each process (the leader), which, once
//!   its input is complete, sorts them into one list and shares it (an `Arc`,
//!   through a second, process-local exchange) with the workers of its process.
//! - **local operators** (join, aggregate, filter, map, the fused matmul): a
//!   timely operator that stashes its inputs and fires when their frontier is
//!   empty (the input is complete), computing what the thread runtime computes
//!   for that site ([`super::ops`]); the replicated part of a result is
//!   computed once per process and shared.
//! - a concat aggregation first exchanges every worker's piece count (a
//!   `Meta` record to every worker): the reference takes it from the whole
//!   relation.
//! - at the end each output is gathered on worker 0 (with the site of every
//!   tuple), and every worker sends worker 0 its figures: time per operator,
//!   floats moved, errors.
//!
//! **Floats moved** are counted where they are sent, as the cost model
//! defines them: a shuffle counts every tuple once (a replicated operand's
//! tuples once, by the worker they hash to); a broadcast counts every tuple
//! `sites` times (a replicated operand's once, by worker 0), whatever the
//! number of copies the network really carries (one per process).

use super::auth::{self, Secret};
use super::heartbeat::{Heartbeats, SilenceHandler};
use super::input::{self, InputData};
use super::ops::{self, bad, concat_count, concat_kernel, project, Exec, Res};
use super::output::OutputFile;
use super::supervise::guarded;
use super::wire::{pool, Batch, Body, Item, EVERY_TAG};
use crate::fusion::fused_joins;
use crate::panics::panic_message;
use crate::semantics::{evaluation_order, AnyLayout, InterpError};
use crate::threads::kernels::{FastKernel, MatMulKind};
use crate::threads::{Block, Elem, NodeStats, PhysValue, SharedBlock, Tuple};
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::net::{TcpListener, TcpStream};
use std::rc::Rc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::{ExchangeCore, Pipeline};
use timely::dataflow::operators::generic::{source, Operator};
use timely::dataflow::operators::Concatenate;
use timely::dataflow::{Scope, Stream};
use timely::worker::Worker;
use tra_optimizer::keyexpr::Key;
use tra_optimizer::placement::site_of;
use tra_optimizer::program::{topo_order, IaOp, Operator as _, PlacementDecl, Plan};

type S<'s, T> = Stream<'s, (), Batch<T>>;
type CB<T> = CapacityContainerBuilder<Batch<T>>;

fn route<T: Elem>(i: &Item<T>) -> u64 {
    u64::from(i.dest)
}

/// The exchange pact of every stream: routed on each item's `dest`.
type Pact<T> = ExchangeCore<CB<T>, fn(&Item<T>) -> u64>;

fn exchange<T: Elem>() -> Pact<T> {
    ExchangeCore::new(route::<T> as fn(&Item<T>) -> u64)
}

/// How this process talks to the others.
#[derive(Debug, Clone)]
pub enum Comm {
    /// Every site in this process (`workers` timely worker threads). With
    /// `serialize`, exchanges between workers go through bytes (timely's
    /// `ProcessBinary`), as they would between processes.
    Local {
        /// Worker threads (= sites).
        workers: usize,
        /// Serialize every exchange.
        serialize: bool,
    },
    /// One process of a cluster: timely's cluster mode over TCP.
    Cluster {
        /// This process's index.
        process: usize,
        /// `host:port` of every process, in order (timely's host file).
        addresses: Vec<String>,
        /// Worker threads per process.
        workers: usize,
        /// The job's key ([`Secret::job_key`]): every connection proves it,
        /// so a connection from another job or from outside is refused.
        key: Secret,
        /// The job's token (part of what connections prove).
        token: u64,
        /// How long to wait for the other processes to connect.
        connect_timeout: Duration,
        /// Listen here instead of at `addresses[process]` (`--bind`).
        listen: Option<String>,
        /// Heartbeats with the other processes, and what to do when one is silent.
        watch: Option<PeerWatch>,
    },
}

/// Heartbeats between job processes (see [`super::heartbeat`]).
#[derive(Clone)]
pub struct PeerWatch {
    /// A peer silent this long has stopped responding.
    pub silence: Duration,
    /// Called (from a heartbeat thread) with the silent peer's index.
    pub on_silent: SilenceHandler,
}

impl std::fmt::Debug for PeerWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PeerWatch {{ silence: {:?} }}", self.silence)
    }
}

impl Comm {
    fn shape(&self) -> (usize, usize, usize) {
        match self {
            Comm::Local { workers, .. } => (0, 1, *workers),
            Comm::Cluster { process, addresses, workers, .. } => (*process, addresses.len(), *workers),
        }
    }
}

/// How to run.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Where the tuples of inputs declared `any` go.
    pub layout: AnyLayout,
    /// Fuse `local_aggregate(matAdd) ∘ local_join(matMul…)` into accumulating GEMMs.
    pub fuse: bool,
    /// Kernel threads of this process (shared by its workers).
    pub threads: usize,
    /// Test hook: every local operator sleeps this long when it fires.
    pub stall_ms: u64,
    /// Test hook: worker 0 panics outside tra's guarded kernel calls (the job
    /// process stops; its supervisor must survive it).
    pub test_panic: bool,
    /// Outputs that every site writes in place into a file (see
    /// [`super::output`]) instead of gathering them on process 0.
    pub files: BTreeMap<String, OutputFile>,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            layout: AnyLayout::RoundRobin,
            fuse: true,
            threads: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            stall_ms: 0,
            test_panic: false,
            files: BTreeMap::new(),
        }
    }
}

/// What the sites wrote of an output (see [`RunConfig::files`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Written {
    /// Tuples written (a replicated tuple once).
    pub tuples: u64,
    /// Sum of the elements written.
    pub sum: f64,
    /// Sum of their absolute values.
    pub abs_sum: f64,
}

/// What a run computed and measured, on process 0.
#[derive(Debug, Clone)]
pub struct ClusterRun<T: Elem> {
    /// Sites (= processes × workers).
    pub sites: usize,
    /// Processes.
    pub processes: usize,
    /// Workers per process.
    pub workers: usize,
    /// The value of every plan output, with the site of every tuple (outputs
    /// written to files are not gathered: see `written`).
    pub outputs: BTreeMap<String, PhysValue<T>>,
    /// What was written of the outputs written to files.
    pub written: BTreeMap<String, Written>,
    /// Floats moved by every shuffle and broadcast (all processes together).
    pub floats_moved: BTreeMap<String, u64>,
    /// Per node, in execution order.
    pub nodes: Vec<NodeStats>,
    /// Wall time of the dataflow on this process (inputs loaded, outputs gathered).
    pub wall_ms: f64,
    /// The longest time a worker took to read its inputs.
    pub load_ms: f64,
    /// Per shuffle and broadcast: what crossed between processes.
    pub wire: BTreeMap<String, WireStat>,
}

/// What one exchange sent between processes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct WireStat {
    /// Payload bytes (block elements) sent from one process to another.
    pub bytes: u64,
    /// From its first item sent to its last received (on any process;
    /// process clocks are aligned to within the connection set-up).
    pub ms: f64,
}

impl<T: Elem> ClusterRun<T> {
    /// Floats moved by all exchanges.
    pub fn total_floats_moved(&self) -> u64 {
        self.floats_moved.values().sum()
    }
}

/// Why a run failed.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterError {
    /// The node (or input) at fault, when known.
    pub node: Option<String>,
    /// What went wrong (for a node, the message starts `node NAME:`).
    pub message: String,
}

impl std::fmt::Display for ClusterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ClusterError {}

impl From<InterpError> for ClusterError {
    fn from(e: InterpError) -> Self {
        ClusterError { node: e.node().map(str::to_string), message: e.to_string() }
    }
}

fn plain(message: impl Into<String>) -> ClusterError {
    ClusterError { node: None, message: message.into() }
}

// ---------------------------------------------------------------------------
// The plan, prepared.

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    At,
    Every,
    Mixed,
}

struct Step {
    name: String,
    op: IaOp,
    /// For a fused aggregation: the join it computes.
    fused: Option<String>,
    /// A join computed inside the aggregation that follows it.
    skip: Option<String>,
    kernel: Option<FastKernel>,
    join_kernel: Option<FastKernel>,
}

struct Prepared {
    plan: Plan,
    steps: Vec<Step>,
    /// For inputs that feed a fused matmul: the key dims in the order to read
    /// the blocks in (join dims fastest), so that whole groups arrive early.
    read_order: HashMap<String, Vec<usize>>,
}

fn prepare(plan: &Plan, fuse: bool) -> Result<Prepared, InterpError> {
    let order = evaluation_order(topo_order(&plan.nodes), plan.nodes.keys(), |n| plan.inputs.contains_key(n))?;
    for name in &order {
        for operand in plan.nodes[name].operands() {
            if !plan.inputs.contains_key(operand) && !plan.nodes.contains_key(operand) {
                return Err(InterpError::UnknownOperand { node: name.clone(), operand: operand.to_string() });
            }
        }
    }
    for o in &plan.outputs {
        if !plan.inputs.contains_key(o) && !plan.nodes.contains_key(o) {
            return Err(InterpError::UnknownOutput(o.clone()));
        }
    }
    // Where tuples can be: only on sites, only replicated, or both.
    let mut kinds: HashMap<&str, Kind> = HashMap::new();
    for (name, decl) in &plan.inputs {
        kinds.insert(name, if decl.placement == PlacementDecl::Replicated { Kind::Every } else { Kind::At });
    }
    for name in &order {
        let op = &plan.nodes[name];
        let k = |n: &String| kinds[n.as_str()];
        let kind = match op {
            IaOp::Broadcast { .. } => Kind::Every,
            IaOp::Shuffle { .. } => Kind::At,
            IaOp::LocalJoin { left, right, .. } => match (k(left), k(right)) {
                (Kind::Every, Kind::Every) => Kind::Every,
                (Kind::Mixed, _) | (_, Kind::Mixed) => Kind::Mixed,
                _ => Kind::At,
            },
            IaOp::LocalAggregate { input, .. } => {
                if k(input) == Kind::Mixed {
                    return Err(bad(
                        name,
                        "the cluster runtime cannot aggregate a relation that holds both site tuples and replicated tuples",
                    ));
                }
                k(input)
            }
            IaOp::LocalFilter { input, .. } | IaOp::LocalMap { input, .. } => k(input),
        };
        kinds.insert(name, kind);
    }
    let fusions = if fuse { fused_joins(plan) } else { BTreeMap::new() };
    let fused_into: HashMap<&str, &str> = fusions.iter().map(|(agg, join)| (join.as_str(), agg.as_str())).collect();
    let steps: Vec<Step> = order
        .iter()
        .map(|name| {
            let op = plan.nodes[name].clone();
            let kernel = match &op {
                IaOp::LocalJoin { kernel, .. } | IaOp::LocalAggregate { kernel, .. } => Some(FastKernel::new(kernel)),
                IaOp::LocalMap { kernel: Some(k), .. } => Some(FastKernel::new(k)),
                _ => None,
            };
            let fused = fusions.get(name).cloned();
            let join_kernel = fused.as_ref().map(|j| match &plan.nodes[j] {
                IaOp::LocalJoin { kernel, .. } => FastKernel::new(kernel),
                _ => unreachable!("a fused aggregation's operand is a join"),
            });
            let skip = fused_into.get(name.as_str()).map(|a| a.to_string());
            Step { name: name.clone(), op, fused, skip, kernel, join_kernel }
        })
        .collect();
    // Read the operands of fused matmuls with their join dims varying
    // fastest: a row of X and a column of Y complete early.
    let mut read_order: HashMap<String, Vec<usize>> = HashMap::new();
    for step in &steps {
        let Some(j) = &step.fused else { continue };
        let IaOp::LocalJoin { left, right, left_keys, right_keys, .. } = &plan.nodes[j] else { continue };
        for (operand, jdims) in [(left, left_keys), (right, right_keys)] {
            let source = match plan.nodes.get(operand) {
                None => operand,
                Some(IaOp::Shuffle { input, .. }) | Some(IaOp::Broadcast { input }) => input,
                Some(_) => continue,
            };
            let Some(decl) = plan.inputs.get(source) else { continue };
            let arity = decl.key_bounds.len();
            if jdims.iter().any(|&d| d >= arity) {
                continue;
            }
            let mut order: Vec<usize> = (0..arity).filter(|d| !jdims.contains(d)).collect();
            order.extend(jdims.iter().copied());
            read_order.entry(source.clone()).or_insert(order);
        }
    }
    Ok(Prepared { plan: plan.clone(), steps, read_order })
}

// ---------------------------------------------------------------------------
// Shared state of a process, and what workers report.

type Shared<T> = Arc<Vec<Tuple<T>>>;
type EveryCell<T> = Arc<OnceLock<Result<Shared<T>, InterpError>>>;

struct Proc<T: Elem> {
    prep: Prepared,
    inputs: BTreeMap<String, InputData<T>>,
    cfg: RunConfig,
    sites: usize,
    workers: usize,
    processes: usize,
    start: Instant,
    kernels: Arc<rayon::ThreadPool>,
    every: Mutex<HashMap<usize, EveryCell<T>>>,
    replicated: Mutex<HashMap<String, EveryCell<T>>>,
    collected: Mutex<Collected<T>>,
}

/// An output gathered on worker 0: each site's tuples, the replicated ones.
type Gathered<T> = (Vec<Vec<Tuple<T>>>, Vec<Tuple<T>>);

#[derive(Default)]
struct Collected<T: Elem> {
    outputs: BTreeMap<String, Gathered<T>>,
    reports: Vec<WorkerReport>,
}

/// One error a worker saw: `(stage, site)` orders errors as the thread
/// runtime does (the first failing node, then the first site).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ErrorRecord {
    stage: usize,
    site: usize,
    node: Option<String>,
    message: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct StepStat {
    busy_ns: u64,
    done_ns: u64,
    moved: u64,
    tuples: u64,
    /// An exchange: when it sent its first item (0: never).
    first_ns: u64,
    /// An exchange: payload bytes sent to other processes.
    wire_bytes: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct WorkerReport {
    site: usize,
    load_ns: u64,
    steps: Vec<StepStat>,
    errors: Vec<ErrorRecord>,
    written: BTreeMap<String, Written>,
}

type Report = Rc<RefCell<WorkerReport>>;

fn lock<X>(m: &Mutex<X>) -> std::sync::MutexGuard<'_, X> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `f`'s result, a panic in it an error of `node`.
fn caught<R>(node: &str, f: impl FnOnce() -> Res<R>) -> Res<R> {
    guarded(f).unwrap_or_else(|e| Err(bad(node, format!("panic: {}", panic_message(&*e)))))
}

impl<T: Elem> Proc<T> {
    fn exec(&self) -> Exec<'_, T> {
        Exec { pool: pool::<T>(), workers: &self.kernels, flops: None }
    }

    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// The replicated part of a step's value: computed by the first worker
    /// of this process that asks, shared by the others.
    fn every_part(&self, step: usize, f: impl FnOnce() -> Res<Vec<Tuple<T>>>) -> Res<Shared<T>> {
        let cell = lock(&self.every).entry(step).or_default().clone();
        let node = &self.prep.steps[step].name;
        cell.get_or_init(|| caught(node, f).map(Arc::new)).clone()
    }

    /// Wait the configured `stall_ms` before a step computes.
    fn stall(&self) {
        if self.cfg.stall_ms > 0 {
            std::thread::sleep(Duration::from_millis(self.cfg.stall_ms));
        }
    }

    /// Count step `i`'s busy time since `t0` and note it done now.
    fn step_done(&self, report: &Report, i: usize, t0: Instant) {
        let mut r = report.borrow_mut();
        r.steps[i].busy_ns += t0.elapsed().as_nanos() as u64;
        r.steps[i].done_ns = self.now_ns();
    }

    /// A replicated input, read once per process.
    fn replicated_input(&self, name: &str) -> Res<Shared<T>> {
        let cell = lock(&self.replicated).entry(name.to_string()).or_default().clone();
        cell.get_or_init(|| {
            let decl = &self.prep.plan.inputs[name];
            input::load(name, decl, &self.inputs[name], self.sites, self.cfg.layout, None, pool::<T>()).map(Arc::new)
        })
        .clone()
    }
}

fn record_error(report: &Report, stage: usize, site: usize, e: &InterpError) {
    report.borrow_mut().errors.push(ErrorRecord {
        stage,
        site,
        node: e.node().map(str::to_string),
        message: e.to_string(),
    });
}

// ---------------------------------------------------------------------------
// Stashing operator inputs.

#[derive(Default)]
struct Stash<T: Elem> {
    own: Vec<(u32, Tuple<T>)>,
    every: Vec<Shared<T>>,
    /// Replicated tuples delivered one by one (a broadcast's output), with
    /// their source site.
    every_tuples: Vec<(u32, Tuple<T>)>,
    meta: Vec<(u32, Vec<u8>)>,
}

impl<T: Elem> Stash<T> {
    fn absorb(&mut self, batch: &mut Batch<T>) {
        for it in batch.take_items() {
            match it.body {
                Body::Tuple(k, b) => self.own.push((it.tag, (k, b))),
                Body::Every(list) => self.every.push(list),
                Body::EveryTuple(k, b) => self.every_tuples.push((it.tag, (k, b))),
                Body::Meta(m) => self.meta.push((it.tag, m)),
            }
        }
    }

    /// The site's tuples in (key, source site) order, and the replicated ones.
    fn parts(&mut self) -> (Vec<Tuple<T>>, Shared<T>) {
        let mut own = std::mem::take(&mut self.own);
        own.sort_by(|a, b| a.1 .0.cmp(&b.1 .0).then(a.0.cmp(&b.0)));
        let own = own.into_iter().map(|(_, t)| t).collect();
        let every = match (self.every.len(), self.every_tuples.is_empty()) {
            (0, true) => Arc::default(),
            (1, true) => self.every.pop().expect("one"),
            _ => {
                // The thread runtime's broadcast order: by key, then source
                // site, the operand's own replicated tuples last.
                let mut all = std::mem::take(&mut self.every_tuples);
                for l in self.every.drain(..) {
                    all.extend(l.iter().map(|t| (EVERY_TAG, t.clone())));
                }
                all.sort_by(|a, b| a.1 .0.cmp(&b.1 .0).then(a.0.cmp(&b.0)));
                Arc::new(all.into_iter().map(|(_, t)| t).collect())
            }
        };
        (own, every)
    }
}

// ---------------------------------------------------------------------------
// Running.

/// Run this process's part of a plan. On process 0 the answer holds the
/// outputs and the figures of all processes; other processes answer `None`.
/// Every process must be given the same plan, inputs and configuration.
pub fn run_process<T: Elem>(
    plan: &Plan,
    inputs: &BTreeMap<String, InputData<T>>,
    comm: &Comm,
    cfg: &RunConfig,
) -> Result<Option<ClusterRun<T>>, ClusterError> {
    let (process, processes, workers) = comm.shape();
    if workers == 0 || processes == 0 {
        return Err(InterpError::NoSites.into());
    }
    let sites = processes * workers;
    let prep = prepare(plan, cfg.fuse)?;
    // Inputs: present, and well-formed before anything starts.
    for (name, decl) in &plan.inputs {
        let data = inputs.get(name).ok_or_else(|| InterpError::MissingInput(name.clone()))?;
        let (kb, ab) = input::bounds(name, decl)?;
        match data {
            InputData::Memory(rel) => input::check_memory(name, decl, rel)?,
            InputData::File(path) => {
                input::NpyRelationFile::open(path, &kb, &ab)
                    .map_err(|m| InterpError::BadInput { input: name.clone(), message: m })?;
            }
        }
        if let PlacementDecl::Hash(dims) = &decl.placement {
            if let Some(&d) = dims.iter().find(|&&d| d >= kb.len()) {
                return Err(InterpError::BadInput {
                    input: name.clone(),
                    message: format!("hash placement on key dim {d}, but keys have {} components", kb.len()),
                }
                .into());
            }
        }
    }
    let kernels = kernel_threads(cfg.threads.max(1)).map_err(plain)?;
    let proc_ = Arc::new(Proc {
        prep,
        inputs: inputs.clone(),
        cfg: cfg.clone(),
        sites,
        workers,
        processes,
        start: Instant::now(),
        kernels,
        every: Mutex::new(HashMap::new()),
        replicated: Mutex::new(HashMap::new()),
        collected: Mutex::new(Collected::default()),
    });

    let mut heartbeats: Option<Heartbeats> = None;
    let (builders, others) = match comm {
        Comm::Local { workers, serialize } => {
            let c = if *serialize {
                timely::CommunicationConfig::ProcessBinary(*workers)
            } else {
                timely::CommunicationConfig::Process(*workers)
            };
            c.try_build().map_err(plain)?
        }
        Comm::Cluster { process, addresses, workers, key, token, connect_timeout, listen, watch } => {
            let (sockets, beats) =
                connect(addresses, *process, listen.as_deref(), key, *token, *connect_timeout, watch.is_some())
                    .map_err(plain)?;
            heartbeats = watch.as_ref().map(|w| Heartbeats::start(beats, w.silence, w.on_silent.clone()));
            use timely::communication::allocator::zero_copy::initialize::initialize_networking_from_sockets;
            use timely::communication::allocator::ProcessBuilder;
            let hooks = timely::communication::Hooks::default();
            let locals = ProcessBuilder::new_typed_vector(*workers, hooks.refill.clone(), hooks.spill.clone());
            let (builders, guard) = initialize_networking_from_sockets(locals, sockets, *process, *workers, hooks)
                .map_err(|e| plain(format!("cannot start timely's networking: {e}")))?;
            let builders = builders.into_iter().map(timely::communication::AllocatorBuilder::Tcp).collect();
            (builders, Box::new(guard) as Box<dyn std::any::Any + Send>)
        }
    };
    let p2 = proc_.clone();
    let guards = timely::execute::execute_from(builders, others, timely::WorkerConfig::default(), move |worker| {
        worker_main(&p2, worker);
    })
    .map_err(plain)?;
    for r in guards.join() {
        r.map_err(|e| plain(format!("a worker thread failed: {e}")))?;
    }
    drop(heartbeats);
    let wall_ms = proc_.start.elapsed().as_secs_f64() * 1e3;
    if process != 0 {
        return Ok(None);
    }
    let collected = std::mem::take(&mut *lock(&proc_.collected));
    finish(&proc_, collected, wall_ms).map(Some)
}

/// The kernel threads of this process: kept between runs (a warm job
/// process starts no threads for a job), made anew when a run asks for
/// another number of them.
fn kernel_threads(n: usize) -> Result<Arc<rayon::ThreadPool>, String> {
    static KERNELS: Mutex<Option<Arc<rayon::ThreadPool>>> = Mutex::new(None);
    let mut k = lock(&KERNELS);
    if let Some(pool) = k.as_ref().filter(|p| p.current_num_threads() == n) {
        return Ok(pool.clone());
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .thread_name(|i| format!("tra-kernel-{i}"))
        .build()
        .map_err(|e| format!("cannot start kernel threads: {e}"))?;
    let pool = Arc::new(pool);
    *k = Some(pool.clone());
    Ok(pool)
}

/// Connect to every other process, each connection authenticated with the
/// job's key (see [`super::auth`]); the claim is the connecting process's
/// index and the channel (0: timely's data, 1: heartbeats). Answers
/// `sockets[j]`, the data connection to process `j`, and the heartbeat
/// connections when `heartbeats`.
#[allow(clippy::type_complexity)]
fn connect(
    addresses: &[String],
    me: usize,
    listen: Option<&str>,
    key: &Secret,
    token: u64,
    timeout: Duration,
    heartbeats: bool,
) -> Result<(Vec<Option<TcpStream>>, Vec<(usize, TcpStream)>), String> {
    let deadline = Instant::now() + timeout;
    let n = addresses.len();
    let channels: u8 = if heartbeats { 2 } else { 1 };
    let context = [b"tra peer".as_slice(), &token.to_le_bytes()].concat();
    let listen = listen.unwrap_or(addresses[me].as_str());
    let listener = TcpListener::bind(listen).map_err(|e| format!("process {me}: cannot listen on {listen}: {e}"))?;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let mut sockets: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
    let mut beats: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
    let mut pending_lower: Vec<(usize, u8)> = (0..me).flat_map(|j| (0..channels).map(move |c| (j, c))).collect();
    let mut missing_upper = (n - me - 1) * channels as usize;
    let mut last_err: HashMap<usize, String> = HashMap::new();
    let claim = |index: usize, channel: u8| -> Vec<u8> {
        let mut c = (index as u32).to_le_bytes().to_vec();
        c.push(channel);
        c
    };
    while !pending_lower.is_empty() || missing_upper > 0 {
        if Instant::now() > deadline {
            let mut waiting: Vec<String> = pending_lower
                .iter()
                .filter(|(_, c)| *c == 0)
                .map(|(j, _)| {
                    format!("process {j} at {} ({})", addresses[*j], last_err.get(j).cloned().unwrap_or_default())
                })
                .collect();
            if missing_upper > 0 {
                waiting.push(format!(
                    "{} connection(s) from processes with a higher index to {}",
                    missing_upper, addresses[me]
                ));
            }
            return Err(format!(
                "process {me}: the other processes did not all connect within {:.0} s: waiting for {}",
                timeout.as_secs_f64(),
                waiting.join("; ")
            ));
        }
        let mut progress = false;
        // Connect to the processes below us.
        pending_lower.retain(|&(j, channel)| {
            let attempt = (|| -> Result<TcpStream, String> {
                let addr = addresses[j].to_socket_addrs_first().map_err(|e| e.to_string())?;
                let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).map_err(|e| e.to_string())?;
                s.set_nodelay(true).map_err(|e| e.to_string())?;
                s.set_read_timeout(Some(Duration::from_secs(5))).map_err(|e| e.to_string())?;
                auth::connect(&mut s, key, &context, &claim(me, channel)).map_err(|e| e.to_string())?;
                s.set_read_timeout(None).map_err(|e| e.to_string())?;
                Ok(s)
            })();
            match attempt {
                Ok(s) => {
                    if channel == 0 {
                        sockets[j] = Some(s);
                    } else {
                        beats[j] = Some(s);
                    }
                    progress = true;
                    false
                }
                Err(e) => {
                    last_err.insert(j, e);
                    true
                }
            }
        });
        // Accept the processes above us.
        loop {
            match listener.accept() {
                Ok((mut s, from)) => {
                    progress = true;
                    let ok = (|| -> Result<(usize, u8), String> {
                        s.set_nonblocking(false).map_err(|e| e.to_string())?;
                        s.set_nodelay(true).map_err(|e| e.to_string())?;
                        s.set_read_timeout(Some(Duration::from_secs(5))).map_err(|e| e.to_string())?;
                        let (c, _) = auth::accept(&mut s, key, &context, 5).map_err(|e| e.to_string())?;
                        let idx = u32::from_le_bytes(c[0..4].try_into().expect("4")) as usize;
                        let channel = c[4];
                        if idx <= me || idx >= n || channel >= channels {
                            return Err(format!("claims to be process {idx}, channel {channel}"));
                        }
                        s.set_read_timeout(None).map_err(|e| e.to_string())?;
                        Ok((idx, channel))
                    })();
                    match ok {
                        Ok((idx, channel)) => {
                            let slot = if channel == 0 { &mut sockets[idx] } else { &mut beats[idx] };
                            if slot.is_none() {
                                missing_upper -= 1;
                            }
                            *slot = Some(s);
                        }
                        Err(e) => tracing::warn!(
                            process = me,
                            %from,
                            "refused a connection to the job's data port {}: {e}",
                            addresses[me]
                        ),
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(format!("process {me}: accepting connections on {}: {e}", addresses[me])),
            }
        }
        if !progress {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let beats = beats.into_iter().enumerate().filter_map(|(j, s)| s.map(|s| (j, s))).collect();
    Ok((sockets, beats))
}

trait FirstAddr {
    fn to_socket_addrs_first(&self) -> std::io::Result<std::net::SocketAddr>;
}

impl FirstAddr for String {
    fn to_socket_addrs_first(&self) -> std::io::Result<std::net::SocketAddr> {
        use std::net::ToSocketAddrs;
        self.as_str().to_socket_addrs()?.next().ok_or_else(|| std::io::Error::other(format!("{self}: no address")))
    }
}

fn worker_main<T: Elem>(p: &Arc<Proc<T>>, worker: &mut Worker) {
    let me = worker.index();
    if p.cfg.test_panic && me == 0 {
        panic!("test hook: this job panics on worker 0");
    }
    let nsteps = p.prep.steps.len();
    let report: Report = Rc::new(RefCell::new(WorkerReport {
        site: me,
        steps: vec![StepStat::default(); nsteps],
        ..WorkerReport::default()
    }));
    // This site's inputs: what to read (read by the input operators, a few
    // blocks per activation, so that sending overlaps reading).
    let mut loaded: BTreeMap<String, Pending<T>> = BTreeMap::new();
    for (name, decl) in &p.prep.plan.inputs {
        let t0 = Instant::now();
        let pending = if decl.placement == PlacementDecl::Replicated {
            match p.replicated_input(name) {
                Ok(list) => Pending::Ready(Vec::new(), list),
                Err(e) => Pending::Failed(e),
            }
        } else {
            match &p.inputs[name] {
                InputData::File(path) => {
                    match input::site_keys(name, decl, p.sites, p.cfg.layout, me).and_then(|(wanted, kb, ab)| {
                        input::NpyRelationFile::open(path, &kb, &ab)
                            .map(|f| (f, wanted))
                            .map_err(|m| InterpError::BadInput { input: name.clone(), message: m })
                    }) {
                        Ok((file, mut wanted)) => {
                            if let Some(order) = p.prep.read_order.get(name) {
                                wanted.sort_by(|a, b| order.iter().map(|&d| a.1[d]).cmp(order.iter().map(|&d| b.1[d])));
                            }
                            Pending::Blocks { name: name.clone(), file, wanted, next: 0 }
                        }
                        Err(e) => Pending::Failed(e),
                    }
                }
                data => match input::load(name, decl, data, p.sites, p.cfg.layout, Some(me), pool::<T>()) {
                    Ok(own) => Pending::Ready(own, Arc::default()),
                    Err(e) => Pending::Failed(e),
                },
            }
        };
        report.borrow_mut().load_ns += t0.elapsed().as_nanos() as u64;
        loaded.insert(name.clone(), pending);
    }
    worker.dataflow::<(), _, _>(|scope| build(scope, p, me, loaded, report));
}

/// An input of one site, before its input operator emits it.
enum Pending<T: Elem> {
    /// Tuples at hand (memory, replicated).
    Ready(Vec<Tuple<T>>, Shared<T>),
    /// Blocks still to read from a file, from `next` on.
    Blocks {
        name: String,
        file: input::NpyRelationFile,
        wanted: Vec<(usize, tra_optimizer::keyexpr::Key)>,
        next: usize,
    },
    /// It could not be read.
    Failed(InterpError),
}

/// The stage of a step in error ordering (inputs are stage 0).
fn stage(step: usize) -> usize {
    step + 1
}

fn build<'s, T: Elem>(
    scope: Scope<'s, ()>,
    p: &Arc<Proc<T>>,
    me: usize,
    loaded: BTreeMap<String, Pending<T>>,
    report: Report,
) {
    let mut streams: HashMap<String, S<'s, T>> = HashMap::new();
    for (name, pending) in loaded {
        let r1 = report.clone();
        let s = source::<(), CB<T>, _, _>(scope, &format!("input {name}"), move |cap, info| {
            let activator = scope.activator_for(info.address.clone());
            let mut cap = Some(cap);
            let mut pending = Some(pending);
            move |output| {
                let Some(c) = cap.as_ref() else { return };
                let t0 = Instant::now();
                let mut done = true;
                match pending.take() {
                    Some(Pending::Ready(own, every)) => {
                        let mut session = output.session(c);
                        for (k, b) in own {
                            session.give(Item::tuple(me, me as u32, k, b));
                        }
                        if !every.is_empty() {
                            session.give(Item::every(me, every));
                        }
                    }
                    Some(Pending::Failed(e)) => record_error(&r1, 0, me, &e),
                    Some(Pending::Blocks { name, file, wanted, next }) => {
                        // About 8 MiB per activation.
                        let per =
                            if file.reads_whole() { usize::MAX } else { (8usize << 20) / file.block_bytes().max(1) };
                        let end = next.saturating_add(per.max(1)).min(wanted.len());
                        match file.read_keys::<T>(&wanted[next..end], pool::<T>()) {
                            Ok(tuples) => {
                                let mut session = output.session(c);
                                for (k, b) in tuples {
                                    session.give(Item::tuple(me, me as u32, k, b));
                                }
                                if end < wanted.len() {
                                    pending = Some(Pending::Blocks { name, file, wanted, next: end });
                                    done = false;
                                }
                            }
                            Err(m) => record_error(&r1, 0, me, &InterpError::BadInput { input: name, message: m }),
                        }
                    }
                    None => {}
                }
                r1.borrow_mut().load_ns += t0.elapsed().as_nanos() as u64;
                if done {
                    cap = None;
                } else {
                    activator.activate();
                }
            }
        });
        streams.insert(name, s);
    }
    for i in 0..p.prep.steps.len() {
        let step = &p.prep.steps[i];
        if step.skip.is_some() {
            continue;
        }
        let get = |n: &String| streams[n].clone();
        let s = match &step.op {
            IaOp::Shuffle { input, dims } => shuffle(p, me, i, get(input), dims.clone(), &report),
            IaOp::Broadcast { input } => broadcast(p, me, i, get(input), &report),
            IaOp::LocalFilter { input, .. } | IaOp::LocalMap { input, .. } => {
                local1(p, me, i, get(input), None, &report)
            }
            IaOp::LocalAggregate { input, kernel, .. } => {
                if let Some(j) = &step.fused {
                    let IaOp::LocalJoin { left, right, .. } = &p.prep.plan.nodes[j] else {
                        unreachable!("fused with a join")
                    };
                    match stream_plan(p, i, me) {
                        Some(plan) => streamed_matmul(p, me, i, get(left), get(right), plan, &report),
                        None => local2(p, me, i, get(left), get(right), &report),
                    }
                } else if concat_kernel(&step.name, kernel).ok().flatten().is_some() {
                    let counts = concat_counts(p, me, i, get(input), &report);
                    local1(p, me, i, get(input), Some(counts), &report)
                } else {
                    local1(p, me, i, get(input), None, &report)
                }
            }
            IaOp::LocalJoin { left, right, .. } => local2(p, me, i, get(left), get(right), &report),
        };
        streams.insert(step.name.clone(), s);
    }
    // Outputs: written in place, or gathered on worker 0.
    let mut writers = Vec::new();
    for o in p.prep.plan.outputs.clone() {
        match p.cfg.files.get(&o) {
            Some(f) => writers.push(write_out(me, &o, f.clone(), streams[&o].clone(), &report)),
            None => gather(p, me, &o, streams[&o].clone()),
        }
    }
    // Figures, once everything upstream is complete.
    let mut consumed: HashMap<&str, bool> = HashMap::new();
    for step in &p.prep.steps {
        for o in step.op.operands() {
            consumed.insert(o, true);
        }
    }
    let mut terminal: Vec<S<'s, T>> =
        streams.iter().filter(|(n, _)| !consumed.contains_key(n.as_str())).map(|(_, s)| s.clone()).collect();
    terminal.extend(writers);
    let all = scope.concatenate(terminal);
    let p2 = p.clone();
    let done = all.unary_frontier::<CB<T>, _, _, _>(Pipeline, "report", move |cap, _| {
        let mut cap = Some(cap);
        move |(input, frontier), output| {
            input.for_each(|_, data| drop(data.take_items()));
            if frontier.is_empty() {
                if let Some(c) = cap.take() {
                    let json = serde_json::to_vec(&*report.borrow()).expect("JSON");
                    output.session(&c).give(Item::meta(0, me as u32, json));
                }
            }
        }
    });
    done.sink(exchange::<T>(), "collect reports", move |(input, _)| {
        input.for_each(|_, data| {
            for it in data.take_items() {
                if let Body::Meta(m) = it.body {
                    if let Ok(r) = serde_json::from_slice::<WorkerReport>(&m) {
                        lock(&p2.collected).reports.push(r);
                    }
                }
            }
        });
    });
}

/// The sending side of an exchange: every item of `input` goes on as `send`
/// says (it gives the items to send and returns the floats that counts as
/// moved); the step's moved floats and busy time are noted batch by batch.
fn send_on<'s, T: Elem>(
    p: &Arc<Proc<T>>,
    me: usize,
    input: S<'s, T>,
    i: usize,
    report: Report,
    mut send: impl FnMut(Item<T>, &mut dyn FnMut(Item<T>)) -> u64 + 'static,
) -> S<'s, T> {
    let name = p.prep.steps[i].name.clone();
    let (p, workers) = (p.clone(), p.workers);
    input.unary::<CB<T>, _, _, _>(Pipeline, &format!("{name}: route"), move |_, _| {
        move |input, output| {
            input.for_each(|cap, data| {
                let t0 = Instant::now();
                let first = p.now_ns();
                let mut session = output.session(&cap);
                let mut moved = 0u64;
                let mut wire = 0u64;
                for it in data.take_items() {
                    moved += send(it, &mut |item| {
                        if item.dest as usize / workers != me / workers {
                            wire += item.payload_bytes() as u64;
                        }
                        session.give(item)
                    });
                }
                let mut r = report.borrow_mut();
                r.steps[i].moved += moved;
                r.steps[i].wire_bytes += wire;
                if r.steps[i].first_ns == 0 {
                    r.steps[i].first_ns = first.max(1);
                }
                r.steps[i].busy_ns += t0.elapsed().as_nanos() as u64;
            });
        }
    })
}

fn shuffle<'s, T: Elem>(
    p: &Arc<Proc<T>>,
    me: usize,
    i: usize,
    input: S<'s, T>,
    dims: Vec<usize>,
    report: &Report,
) -> S<'s, T> {
    let sites = p.sites;
    let (r1, r2) = (report.clone(), report.clone());
    let p2 = p.clone();
    let name = p.prep.steps[i].name.clone();
    let mut failed = false;
    let routed = send_on(p, me, input, i, report.clone(), move |it, give| {
        let mut moved = 0u64;
        match it.body {
            Body::Tuple(k, b) => {
                if let Err(e) = project(&name, &k, &dims) {
                    if !failed {
                        record_error(&r1, stage(i), me, &e);
                        failed = true;
                    }
                    return 0;
                }
                moved += b.len() as u64;
                give(Item::tuple(site_of(&k, &dims, sites), me as u32, k, b));
            }
            Body::Every(list) => {
                for (k, b) in list.iter() {
                    if let Err(e) = project(&name, k, &dims) {
                        if !failed {
                            record_error(&r1, stage(i), me, &e);
                            failed = true;
                        }
                        break;
                    }
                    if site_of(k, &dims, sites) == me {
                        moved += b.len() as u64;
                        give(Item::tuple(me, EVERY_TAG, k.clone(), b.clone()));
                    }
                }
            }
            Body::EveryTuple(k, b) => match project(&name, &k, &dims) {
                Err(e) => {
                    if !failed {
                        record_error(&r1, stage(i), me, &e);
                        failed = true;
                    }
                }
                Ok(_) => {
                    if site_of(&k, &dims, sites) == me {
                        moved += b.len() as u64;
                        give(Item::tuple(me, EVERY_TAG, k, b));
                    }
                }
            },
            Body::Meta(_) => {}
        }
        moved
    });
    arrive_sorted(p2, me, i, routed, r2)
}

/// The receiving side of a shuffle: tuples are passed on as they arrive,
/// each with the site it came from (`tag`): every consumer orders a site's
/// tuples by (key, source site), the order of the thread runtime's site lists,
/// which the folds of later aggregations follow.
fn arrive_sorted<'s, T: Elem>(p: Arc<Proc<T>>, _me: usize, i: usize, routed: S<'s, T>, report: Report) -> S<'s, T> {
    let name = format!("{}: arrive", p.prep.steps[i].name);
    routed.unary_frontier::<CB<T>, _, _, _>(exchange::<T>(), &name, move |_, _| {
        let mut noted = false;
        let mut tuples = 0u64;
        move |(input, frontier), output| {
            input.for_each(|cap, data| {
                tuples += data.items.iter().filter(|it| matches!(it.body, Body::Tuple(..))).count() as u64;
                output.session(&cap).give_container(data);
            });
            if frontier.is_empty() && !noted {
                noted = true;
                let mut r = report.borrow_mut();
                r.steps[i].done_ns = p.now_ns();
                r.steps[i].tuples += tuples;
            }
        }
    })
}

/// The receiving side of a broadcast's second exchange: passes the shared
/// list on and notes when the input is complete.
fn arrive<'s, T: Elem>(p: Arc<Proc<T>>, i: usize, routed: S<'s, T>, report: Report) -> S<'s, T> {
    let name = format!("{}: arrive", p.prep.steps[i].name);
    routed.unary_frontier::<CB<T>, _, _, _>(exchange::<T>(), &name, move |_, _| {
        let mut noted = false;
        move |(input, frontier), output| {
            input.for_each(|cap, data| {
                output.session(&cap).give_container(data);
            });
            if frontier.is_empty() && !noted {
                noted = true;
                report.borrow_mut().steps[i].done_ns = p.now_ns();
            }
        }
    })
}

fn broadcast<'s, T: Elem>(p: &Arc<Proc<T>>, me: usize, i: usize, input: S<'s, T>, report: &Report) -> S<'s, T> {
    let (sites, workers, processes) = (p.sites, p.workers, p.processes);
    let name = p.prep.steps[i].name.clone();
    let routed = send_on(p, me, input, i, report.clone(), move |it, give| match it.body {
        Body::Tuple(k, b) => {
            for q in 0..processes {
                give(Item::tuple(q * workers, me as u32, k.clone(), b.clone()));
            }
            sites as u64 * b.len() as u64
        }
        Body::Every(list) => {
            let moved = if me == 0 { sites as u64 * list.iter().map(|t| t.1.len() as u64).sum::<u64>() } else { 0 };
            if me.is_multiple_of(workers) {
                give(Item::every(me, list));
            }
            moved
        }
        Body::EveryTuple(k, b) => {
            let moved = if me == 0 { sites as u64 * b.len() as u64 } else { 0 };
            if me.is_multiple_of(workers) {
                give(Item { dest: me as u32, tag: EVERY_TAG, body: Body::EveryTuple(k, b) });
            }
            moved
        }
        Body::Meta(_) => 0,
    });
    // The leader of each process passes every tuple on to the workers of its
    // process as it comes (one copy per process: the workers share the
    // block); each worker orders them by key and source site itself.
    let r2 = report.clone();
    let shared = routed.unary::<CB<T>, _, _, _>(exchange::<T>(), &format!("{name}: leader"), move |_, _| {
        move |input, output| {
            input.for_each(|cap, data| {
                let t0 = Instant::now();
                let mut session = output.session(&cap);
                let mut tuples = 0u64;
                for it in data.take_items() {
                    match it.body {
                        Body::Tuple(k, b) => {
                            tuples += 1;
                            for w in 0..workers {
                                session.give(Item {
                                    dest: (me + w) as u32,
                                    tag: it.tag,
                                    body: Body::EveryTuple(k.clone(), b.clone()),
                                });
                            }
                        }
                        Body::EveryTuple(k, b) => {
                            tuples += 1;
                            for w in 0..workers {
                                session.give(Item {
                                    dest: (me + w) as u32,
                                    tag: EVERY_TAG,
                                    body: Body::EveryTuple(k.clone(), b.clone()),
                                });
                            }
                        }
                        Body::Every(list) => {
                            tuples += list.len() as u64;
                            for w in 0..workers {
                                session.give(Item::every(me + w, list.clone()));
                            }
                        }
                        Body::Meta(_) => {}
                    }
                }
                let mut r = r2.borrow_mut();
                if me == 0 {
                    r.steps[i].tuples += tuples;
                }
                r.steps[i].busy_ns += t0.elapsed().as_nanos() as u64;
            });
        }
    });
    arrive(p.clone(), i, shared, report.clone())
}

/// Each worker's piece count of a concat aggregation, sent to every worker.
fn concat_counts<'s, T: Elem>(p: &Arc<Proc<T>>, me: usize, i: usize, input: S<'s, T>, report: &Report) -> S<'s, T> {
    let (p1, r1) = (p.clone(), report.clone());
    let name = p.prep.steps[i].name.clone();
    input.unary_frontier::<CB<T>, _, _, _>(Pipeline, &format!("{name}: piece count"), move |cap, _| {
        let mut cap = Some(cap);
        let mut count = 0u32;
        let mut failed = false;
        move |(input, frontier), output| {
            let step = &p1.prep.steps[i];
            let IaOp::LocalAggregate { kernel, .. } = &step.op else { unreachable!() };
            let key_dim = concat_kernel(&step.name, kernel).ok().flatten().map(|c| c.0).unwrap_or(0);
            input.for_each(|_, data| {
                for it in data.take_items() {
                    let keys: Vec<tra_optimizer::keyexpr::Key> = match &it.body {
                        Body::Tuple(k, _) | Body::EveryTuple(k, _) => vec![k.clone()],
                        Body::Every(list) => list.iter().map(|t| t.0.clone()).collect(),
                        Body::Meta(_) => vec![],
                    };
                    match concat_count(&step.name, keys.iter(), key_dim) {
                        Ok(c) => count = count.max(c),
                        Err(e) => {
                            if !failed {
                                record_error(&r1, stage(i), me, &e);
                                failed = true;
                            }
                        }
                    }
                }
            });
            if frontier.is_empty() {
                if let Some(c) = cap.take() {
                    let mut session = output.session(&c);
                    for w in 0..p1.sites {
                        session.give(Item::meta(w, me as u32, count.to_le_bytes().to_vec()));
                    }
                }
            }
        }
    })
}

fn fire_items<T: Elem>(
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
fn local1<'s, T: Elem>(
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
                    let items =
                        compute_step(&p1, me, i, &r1, take, |(own, every, count)| compute1(&p1, i, own, every, *count));
                    let mut session = output.session(&c);
                    for it in items {
                        session.give(it);
                    }
                }
            }
        }
    })
}

fn compute1<T: Elem>(
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
fn local2<'s, T: Elem>(
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
                    let items = compute_step(&p1, me, i, &r1, take, |(l, r)| compute2(&p1, i, l, r));
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

fn compute2<T: Elem>(p: &Proc<T>, i: usize, l: &Parts<T>, r: &Parts<T>) -> Res<(Vec<Tuple<T>>, Shared<T>)> {
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
        (IaOp::LocalAggregate { group_by, kernel: agg_kernel, .. }, Some(j)) => {
            let IaOp::LocalJoin { left_keys, right_keys, .. } = &p.prep.plan.nodes[j] else { unreachable!() };
            let jk = step.join_kernel.as_ref().expect("fused join kernel");
            let o = ops::fused_matmul(
                x,
                node,
                j,
                group_by,
                agg_kernel,
                left_keys,
                right_keys,
                jk,
                (&l.0, &l.1),
                (&r.0, &r.1),
                false,
            )?;
            let e = if both_every {
                p.every_part(i, || {
                    ops::fused_matmul(
                        x,
                        node,
                        j,
                        group_by,
                        agg_kernel,
                        left_keys,
                        right_keys,
                        jk,
                        (&[], &l.1),
                        (&[], &r.1),
                        true,
                    )
                })?
            } else {
                Arc::default()
            };
            Ok((o, e))
        }
        _ => unreachable!("not a binary local operator"),
    }
}

/// Write this site's tuples of an output into its file as they come (worker
/// 0 writes the replicated ones and the header); the answer completes once
/// everything is written.
fn write_out<'s, T: Elem>(me: usize, name: &str, file: OutputFile, s: S<'s, T>, report: &Report) -> S<'s, T> {
    let r1 = report.clone();
    let name = name.to_string();
    s.unary_frontier::<CB<T>, _, _, _>(Pipeline, &format!("write {name}"), move |cap, _| {
        let mut cap = Some(cap);
        let mut writer: Option<Result<super::output::OutWriter, String>> = None;
        let mut stat = Written::default();
        let mut failed = false;
        move |(input, frontier), _output| {
            let w = writer.get_or_insert_with(|| file.open::<T>(me == 0));
            input.for_each(|_, data| {
                for it in data.take_items() {
                    let tuples: Vec<Tuple<T>> = match it.body {
                        Body::Tuple(k, b) => vec![(k, b)],
                        Body::EveryTuple(k, b) if me == 0 => vec![(k, b)],
                        Body::Every(list) if me == 0 => list.iter().cloned().collect(),
                        _ => Vec::new(),
                    };
                    for (k, b) in tuples {
                        let r = match w {
                            Ok(w) => w.write(&k, &b),
                            Err(e) => Err(e.clone()),
                        };
                        match r {
                            Ok(()) => {
                                stat.tuples += 1;
                                for &x in b.as_slice() {
                                    let x = x.to_f64();
                                    stat.sum += x;
                                    stat.abs_sum += x.abs();
                                }
                            }
                            Err(e) if !failed => {
                                failed = true;
                                let e = InterpError::BadNode {
                                    node: name.clone(),
                                    message: format!("writing the output: {e}"),
                                };
                                record_error(&r1, usize::MAX, me, &e);
                            }
                            Err(_) => {}
                        }
                    }
                }
            });
            if frontier.is_empty() && cap.take().is_some() {
                r1.borrow_mut().written.insert(name.clone(), stat);
            }
        }
    })
}

/// Send an output's tuples (sorted, with their site) to worker 0, which keeps them.
fn gather<'s, T: Elem>(p: &Arc<Proc<T>>, me: usize, name: &str, s: S<'s, T>) {
    let routed = s.unary_frontier::<CB<T>, _, _, _>(Pipeline, &format!("gather {name}"), move |cap, _| {
        let mut cap = Some(cap);
        let mut stash = Stash::<T>::default();
        move |(input, frontier), output| {
            input.for_each(|_, data| stash.absorb(data));
            if frontier.is_empty() {
                if let Some(c) = cap.take() {
                    let (own, every) = stash.parts();
                    let mut session = output.session(&c);
                    for (k, b) in own {
                        session.give(Item::tuple(0, me as u32, k, b));
                    }
                    if me == 0 && !every.is_empty() {
                        session.give(Item::every(0, every));
                    }
                }
            }
        }
    });
    let p2 = p.clone();
    let name = name.to_string();
    routed.sink(exchange::<T>(), &format!("collect {name}"), move |(input, frontier)| {
        input.for_each(|_, data| {
            let mut c = lock(&p2.collected);
            let entry = c.outputs.entry(name.clone()).or_insert_with(|| (vec![Vec::new(); p2.sites], Vec::new()));
            for it in data.take_items() {
                match it.body {
                    Body::Tuple(k, b) => entry.0[it.tag as usize].push((k, b)),
                    Body::Every(list) => entry.1.extend(list.iter().cloned()),
                    Body::EveryTuple(k, b) => entry.1.push((k, b)),
                    Body::Meta(_) => {}
                }
            }
        });
        if frontier.is_empty() && me == 0 {
            lock(&p2.collected).outputs.entry(name.clone()).or_insert_with(|| (vec![Vec::new(); p2.sites], Vec::new()));
        }
    });
}

/// Process 0: the outputs and the figures of every worker.
fn finish<T: Elem>(p: &Proc<T>, c: Collected<T>, wall_ms: f64) -> Result<ClusterRun<T>, ClusterError> {
    let mut errors: Vec<ErrorRecord> = c.reports.iter().flat_map(|r| r.errors.iter().cloned()).collect();
    errors.sort_by_key(|e| (e.stage, e.site));
    if let Some(e) = errors.into_iter().next() {
        return Err(ClusterError { node: e.node, message: e.message });
    }
    if c.reports.len() != p.sites {
        return Err(plain(format!("only {} of {} sites reported", c.reports.len(), p.sites)));
    }
    let mut outputs = BTreeMap::new();
    for o in p.prep.plan.outputs.iter().filter(|o| !p.cfg.files.contains_key(*o)) {
        let (sites, every) = c.outputs.get(o).cloned().unwrap_or_else(|| (vec![Vec::new(); p.sites], Vec::new()));
        let mut every = every;
        every.sort_by(|a, b| a.0.cmp(&b.0));
        outputs.insert(
            o.clone(),
            PhysValue { sites: sites.into_iter().map(Arc::new).collect(), everywhere: Arc::new(every) },
        );
    }
    let n = p.prep.steps.len();
    let mut done = vec![0u64; n];
    let mut busy = vec![vec![0f64; p.sites]; n];
    let mut moved = vec![0u64; n];
    let mut tuples = vec![0u64; n];
    let mut load_ns = 0u64;
    let mut first = vec![u64::MAX; n];
    let mut wire_bytes = vec![0u64; n];
    for r in &c.reports {
        load_ns = load_ns.max(r.load_ns);
        for (i, st) in r.steps.iter().enumerate().take(n) {
            done[i] = done[i].max(st.done_ns);
            if st.first_ns > 0 {
                first[i] = first[i].min(st.first_ns);
            }
            wire_bytes[i] += st.wire_bytes;
            if r.site < p.sites {
                busy[i][r.site] = st.busy_ns as f64 / 1e6;
            }
            moved[i] += st.moved;
            tuples[i] += st.tuples;
        }
    }
    let index: HashMap<&str, usize> = p.prep.steps.iter().enumerate().map(|(i, s)| (s.name.as_str(), i)).collect();
    let mut floats_moved = BTreeMap::new();
    let mut wire = BTreeMap::new();
    let mut nodes = Vec::with_capacity(n);
    for (i, step) in p.prep.steps.iter().enumerate() {
        let exchange = matches!(step.op, IaOp::Shuffle { .. } | IaOp::Broadcast { .. });
        if exchange {
            floats_moved.insert(step.name.clone(), moved[i]);
            let ms = if first[i] == u64::MAX { 0.0 } else { done[i].saturating_sub(first[i]) as f64 / 1e6 };
            wire.insert(step.name.clone(), WireStat { bytes: wire_bytes[i], ms });
        }
        let operands: Vec<&str> = match &step.fused {
            Some(j) => p.prep.plan.nodes[j].operands(),
            None => step.op.operands(),
        };
        let start = operands.iter().filter_map(|o| index.get(o).map(|&j| done[j])).max().unwrap_or(load_ns);
        let wall = if step.skip.is_some() { 0.0 } else { done[i].saturating_sub(start) as f64 / 1e6 };
        nodes.push(NodeStats {
            name: step.name.clone(),
            op: step.op.op_name(),
            wall_ms: wall,
            site_ms: busy[i].clone(),
            floats_moved: exchange.then_some(moved[i]),
            tuples: step.skip.is_none().then_some(tuples[i]),
            fused_into: step.skip.clone(),
        });
    }
    let mut written: BTreeMap<String, Written> = BTreeMap::new();
    for r in &c.reports {
        for (o, w) in &r.written {
            let e = written.entry(o.clone()).or_default();
            e.tuples += w.tuples;
            e.sum += w.sum;
            e.abs_sum += w.abs_sum;
        }
    }
    Ok(ClusterRun {
        sites: p.sites,
        processes: p.processes,
        workers: p.workers,
        outputs,
        written,
        floats_moved,
        nodes,
        wall_ms,
        load_ms: load_ns as f64 / 1e6,
        wire,
    })
}

// ---------------------------------------------------------------------------
// The fused matmul, streamed.
//
// When both operands of a fused matmul come straight from inputs (an input,
// a shuffle of one, a broadcast of one), the keys each site will receive are
// known before any block arrives: the input files hold every key below the
// key bounds, and placement, shuffle and broadcast are functions of the key.
// The operator then knows every output block's members in advance (the same
// pairs in the same order as the batch computation) and computes each output
// block as soon as its members have arrived, while the rest is still being
// read and sent: bit for bit the batch result, with the exchange overlapping
// the GEMMs. The keys received are checked against the expected ones at the
// end (a difference is an error; it cannot happen for inputs read whole).

/// The keys a stream will hold on site `me` (own, replicated), when they are
/// known in advance.
fn expected_keys<T: Elem>(p: &Proc<T>, node: &str, me: usize) -> Option<(Vec<Key>, Vec<Key>)> {
    let input_keys = |name: &str| -> Option<Vec<Key>> {
        let decl = p.prep.plan.inputs.get(name)?;
        match p.inputs.get(name)? {
            InputData::File(_) => input::bounds(name, decl).ok().map(|(kb, _)| crate::semantics::all_keys(&kb)),
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

struct StreamPlan {
    groups: Vec<GroupPlan>,
    expected: [(Vec<Key>, Vec<Key>); 2],
}

/// The output blocks of a fused matmul on site `me` and their members, from
/// the keys its operands will hold, paired and grouped by the batch code.
fn stream_plan<T: Elem>(p: &Proc<T>, i: usize, me: usize) -> Option<StreamPlan> {
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

fn streamed_matmul<'s, T: Elem>(
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
        let (finished_tx, finished) = std::sync::mpsc::channel::<(usize, Res<Block<T>>)>();
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
                while let Ok((g, r)) = finished.try_recv() {
                    in_flight -= 1;
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
                        // The operator may be gone (the job failed): nothing to tell then.
                        let _ = tx.send((g, r));
                        let _ = wake.activate();
                    });
                }
            }
            if !complete || in_flight > 0 {
                r1.borrow_mut().steps[i].busy_ns += t0.elapsed().as_nanos() as u64;
                return;
            }
            let IaOp::LocalAggregate { kernel: agg_kernel, .. } = &step.op else { unreachable!() };
            let j = step.fused.as_deref().expect("fused");
            let jk = step.join_kernel.as_ref().expect("fused join kernel");

            // Complete: check what came, add the replicated part, finish.
            p1.stall();
            let (l, r) = (ls.parts(), rs.parts());
            let as_planned = lr.matches(&plan.expected[0]) && rr.matches(&plan.expected[1]);
            let mut items = Vec::new();
            if !as_planned && emitted == 0 && !failed {
                // Not what was planned: the batch computation, from everything.
                let result = caught(node, || compute2(&p1, i, &l, &r));
                items = fire_items(&p1, me, i, &r1, result);
            } else if !as_planned && !failed {
                let e = bad(node, "the cluster runtime received other tuples than the plan's inputs hold");
                record_error(&r1, stage(i), me, &e);
            } else if !failed {
                let both_every = !l.1.is_empty() && !r.1.is_empty();
                let every = if both_every {
                    let IaOp::LocalAggregate { group_by, .. } = &step.op else { unreachable!() };
                    let IaOp::LocalJoin { left_keys, right_keys, .. } = &p1.prep.plan.nodes[j] else { unreachable!() };
                    let x = p1.exec();
                    p1.every_part(i, || {
                        ops::fused_matmul(
                            x,
                            node,
                            j,
                            group_by,
                            agg_kernel,
                            left_keys,
                            right_keys,
                            jk,
                            (&[], &l.1),
                            (&[], &r.1),
                            true,
                        )
                    })
                } else {
                    Ok(Arc::default())
                };
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
