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
//!
//! The parts: `bootstrap` (connections between processes), `prepare`
//! (the plan checked and its fusions decided), `exchange` (shuffle,
//! broadcast, piece counts), `local` (the local operators),
//! `streamed_matmul` (a fused matmul that starts before its inputs are
//! complete), `gather` (outputs and figures). This module holds what they
//! share: the configuration and results of a run, the state of a process
//! and what its workers report, and the dataflow built from them.

mod bootstrap;
mod exchange;
mod gather;
mod local;
mod prepare;
mod streamed_matmul;

pub use bootstrap::{Comm, PeerWatch};

use self::exchange::{broadcast, concat_counts, shuffle};
use self::gather::{finish, gather, write_out};
use self::local::{binary_local, unary_local};
use self::prepare::{prepare, Prepared};
use self::streamed_matmul::{stream_plan, streamed_matmul};
use super::input::{self, InputData};
use super::ops::{bad, concat_kernel, Exec, Res};
use super::output::OutputFile;
use super::supervise::guarded;
use super::wire::{pool, Batch, Body, Item, EVERY_TAG};
use crate::panics::panic_message;
use crate::semantics::{AnyLayout, InterpError};
use crate::threads::{Elem, NodeStats, PhysValue, Tuple};
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::{ExchangeCore, Pipeline};
use timely::dataflow::operators::generic::{source, Operator};
use timely::dataflow::operators::Concatenate;
use timely::dataflow::{Scope, Stream};
use timely::worker::Worker;
use tra_optimizer::program::{IaOp, Operator as _, PlacementDecl, Plan};

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
    /// Bytes of blocks written (headers and zero fill aside).
    pub bytes: u64,
    /// Nanoseconds the writing thread was busy: opening the file, and for
    /// each tuple its write and its checksum (not the waits for the next
    /// tuple). What writing an output costs a site, beside its kernels.
    pub busy_ns: u64,
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
    /// Per output written to a file, what each site wrote (by site).
    pub written_by_site: BTreeMap<String, Vec<Written>>,
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
    /// Processor time (user and system, every thread) of each process from
    /// its start to its report, in milliseconds: what the job cost the
    /// processors, beside its wall time (`tra calibrate` reads how much
    /// processor time an exchange takes per byte from it).
    pub cpu_ms: Vec<f64>,
    /// What each process's machine did while the process ran the job
    /// (`None`: it could not tell).
    pub machines: Vec<Option<super::machine::MachineLoad>>,
}

/// What one exchange sent between processes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct WireStat {
    /// Payload bytes (block elements) sent from one process to another.
    pub bytes: u64,
    /// From its first item sent to its last one taken in by a worker (on
    /// any process), on the system clock: exact between the processes of
    /// one machine, as good as the clocks' synchronization between machines.
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
    /// [`process_cpu_ns`] when the process started the job.
    cpu_start_ns: u64,
    /// The machine's processor time when the process started the job.
    machine: Option<super::machine::MachineWatch>,
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

/// The processor time this process has used, user and system, all threads,
/// in nanoseconds (0 where the system cannot say).
pub fn process_cpu_ns() -> u64 {
    // SAFETY: getrusage fills the struct it is given; a zeroed rusage is a
    // valid value of it.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return 0;
    }
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
    ns(u.ru_utime) + ns(u.ru_stime)
}

/// Nanoseconds since the Unix epoch on the system clock: the ends of an
/// exchange's wire window, compared between processes.
fn wall_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct StepStat {
    busy_ns: u64,
    done_ns: u64,
    moved: u64,
    tuples: u64,
    /// An exchange: when it sent its first item (0: never), on the system
    /// clock ([`wall_ns`]: one clock for every process of a machine, where
    /// each process's own start differs by its connection set-up).
    first_ns: u64,
    /// An exchange: when its last item arrived (0: none arrived), on the
    /// system clock.
    last_ns: u64,
    /// An exchange: payload bytes sent to other processes.
    wire_bytes: u64,
    /// A fused matmul that ran streamed on this site (its output blocks
    /// computed as their members arrived).
    #[serde(default)]
    streamed: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct WorkerReport {
    site: usize,
    load_ns: u64,
    /// The processor time of this worker's process since it started
    /// ([`process_cpu_ns`]), when the worker reported.
    #[serde(default)]
    cpu_ns: u64,
    /// What the worker's machine did while the process ran the job.
    #[serde(default)]
    machine: Option<super::machine::MachineLoad>,
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
    // The GEMM asked for, or the error that it is missing, before connecting.
    crate::threads::kernels::gemm_backend().map_err(InterpError::from)?;
    let sites = processes * workers;
    let prep = prepare(plan, cfg.fuse, sites)?;
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
        cpu_start_ns: process_cpu_ns(),
        machine: super::machine::MachineWatch::start(),
        kernels,
        every: Mutex::new(HashMap::new()),
        replicated: Mutex::new(HashMap::new()),
        collected: Mutex::new(Collected::default()),
    });

    let (builders, others, heartbeats) = bootstrap::communication(comm)?;
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
        .start_handler(|_| crate::threads::kernels::warm_thread_buffers())
        .build()
        .map_err(|e| format!("cannot start kernel threads: {e}"))?;
    let pool = Arc::new(pool);
    *k = Some(pool.clone());
    Ok(pool)
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
    for &i in &p.prep.build_order {
        let step = &p.prep.steps[i];
        if step.skip.is_some() {
            continue;
        }
        let get = |n: &String| streams[n].clone();
        let s = match &step.op {
            IaOp::Shuffle { input, dims } => shuffle(p, me, i, get(input), dims.clone(), &report),
            IaOp::Broadcast { input } => broadcast(p, me, i, get(input), &report),
            IaOp::LocalFilter { input, .. } | IaOp::LocalMap { input, .. } => {
                unary_local(p, me, i, get(input), None, &report)
            }
            IaOp::LocalAggregate { input, kernel, .. } => {
                if let Some(j) = &step.fused {
                    let IaOp::LocalJoin { left, right, .. } = &p.prep.plan.nodes[j] else {
                        unreachable!("fused with a join")
                    };
                    match stream_plan(p, i, me) {
                        Some(plan) => {
                            report.borrow_mut().steps[i].streamed = true;
                            streamed_matmul(p, me, i, get(left), get(right), plan, &report)
                        }
                        None => binary_local(p, me, i, get(left), get(right), &report),
                    }
                } else if concat_kernel(&step.name, kernel).ok().flatten().is_some() {
                    let counts = concat_counts(p, me, i, get(input), &report);
                    unary_local(p, me, i, get(input), Some(counts), &report)
                } else {
                    unary_local(p, me, i, get(input), None, &report)
                }
            }
            IaOp::LocalJoin { left, right, .. } => binary_local(p, me, i, get(left), get(right), &report),
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
    let cpu_start_ns = p.cpu_start_ns;
    let machine = p.machine.clone();
    let done = all.unary_frontier::<CB<T>, _, _, _>(Pipeline, "report", move |cap, _| {
        let mut cap = Some(cap);
        move |(input, frontier), output| {
            input.for_each(|_, data| drop(data.take_items()));
            if frontier.is_empty() {
                if let Some(c) = cap.take() {
                    report.borrow_mut().cpu_ns = process_cpu_ns().saturating_sub(cpu_start_ns);
                    report.borrow_mut().machine = machine.as_ref().and_then(|m| m.load());
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
