//! `tra calibrate`: measure the speeds the time cost model needs on the
//! cluster runtime itself, exactly as `tra run` uses it — job processes
//! started the way `tra run --processes N` starts them (on this machine, over
//! loopback), or the `tra worker`s of a host file as `tra run --hosts FILE`
//! reaches them — with the executor's own kernels, blocks of the size the
//! programs use, and timely exchanges; and print the `profile` object of a
//! request.
//!
//! Measuring through the runtime that will run the plans, rather than an
//! idealised kernel or socket test, is what makes the predictions honest: the
//! job processes get the same number of kernel threads as in `tra run` (on
//! one machine its cores divided among the processes), the GEMM works on the
//! block size of the programs (a 512² GEMM runs at a higher rate than 256²
//! ones), and the link rate includes the serialization and framing of the
//! exchange of blocks.
//!
//! Three jobs, each repeated and the best kept (the least disturbed):
//! - **GEMM**: a fused matmul of `--block`² `f32` blocks, as the plans'
//!   matrix products run (a site-local join with `matMul` summed by a
//!   `matAdd` aggregation, streamed): each output block sums the products of
//!   up to 8 blocks of a row of A with the 8 broadcast blocks of B, ~2.5
//!   GFLOP per site. Each site's flops are known exactly
//!   ([`tra_optimizer::loads`]); its rate is those flops over the time the
//!   site spent computing the step (its kernel threads' time on the
//!   GEMMs), and the profile takes the median site. Measured as a join
//!   whose every product is an output block of its own (as before), the
//!   rate read 0.59–0.85e11 flop/s per site on fresh job processes against
//!   0.95–1.5e11 on warm ones: each product's new block is memory touched
//!   for the first time, and the plans' fused matmuls allocate one block
//!   per output, not per product. The rate is that of the GEMM the job processes use (the
//!   system's OpenBLAS or the built-in one, `TRA_GEMM`), which is reported
//!   with it.
//! - **Memory**: a site-local aggregation with `matAdd` (an element-wise
//!   kernel, ~one flop per 12 bytes) of `--block`² blocks, 64 MiB of them per
//!   site in groups of 8 (fewer for blocks over 8 MiB). Each site's bytes read and written by its kernel
//!   calls are known exactly ([`tra_optimizer::loads`]); its rate is those
//!   bytes over the site's time in the operator, the median site again.
//! - **Link**: shuffles of `--block`² blocks (4 and 32 MiB per site) from a
//!   round-robin layout to a hash layout (all-to-all). For each, the bytes
//!   that crossed between processes, per process, and the time from the
//!   first sent to the last received; the link rate is the slope between the
//!   two sizes, so that an exchange's fixed cost is not mistaken for a slow
//!   link (a single 16 MiB shuffle read about 60% of the slope on loopback).
//! - **Processor time of an exchange**: the same two shuffles' processor
//!   time (user and system, every thread of each job process, divided by
//!   its kernel threads), per byte that crossed: the slope between the two
//!   again. Over loopback it is the processors that move the bytes, and a
//!   streamed matmul's GEMMs wait for them; over a network link slower than
//!   that, the exchange runs beside the GEMMs. The figure counts the whole
//!   shuffle job's work per crossed byte, reading its input and writing its
//!   output included, and those are most of it: over loopback (2 processes,
//!   32 MiB per site) a control job reading and writing the same without
//!   the exchange took about 42 of the shuffle job's 54 ms per process, and
//!   the rate with the control's time taken out read 2.0e9 and 7.4e9 B/s
//!   against 3.1e8. Tried as the profile's figure, that fitted the chosen
//!   plans' times better (within 30% on 20 of 20 shapes in two passes,
//!   against 10) and chose worse (regret at most 1.10 on 11 of 20, against
//!   15): where it chose differently, its plan measured slower (on thin,
//!   CMM, whose exchanges cost it more over loopback than their own
//!   processor and link time explain; elsewhere near-ties), and the larger
//!   figure stands for that (`bench/README.md`).
//! - **Latency**: a chain of six shuffles of one float per site, each
//!   waiting for the one before: the mean time of all but the first (the
//!   first also waits for the job to start), or that line's intercept (the
//!   fixed cost of a large exchange) if longer.
//! - **Job overhead**: a plan of one local operator on one float per site,
//!   its run less reading its inputs: what every job takes whatever it does
//!   (starting the dataflow, the processes agreeing that each operator has
//!   finished). On two processes over loopback about 8 ms, where an exchange
//!   of ready operands adds about 0.1 ms; taking a single small shuffle's
//!   time as the latency charged those 8 ms per level of exchange.
//!
//! - **Shared processors**: when every job process ran on one machine (the
//!   same boot id), the machine's processors and each process's kernel
//!   threads (`machine_processors`, `site_threads`, and the processes,
//!   `machine_sites`). The rates above are
//!   those of every site computing at once; where the sites' threads
//!   outnumber the processors (hosts of one machine, each process with all
//!   its cores: three on two processors in the emulated network), a site
//!   computing alone ran a local matmul 2.7 times as fast as that, and the
//!   model then shortens the processor time of stages where fewer compute
//!   (`Profile::processor_speedup`).
//!
//! **A busy machine is reported.** Each measurement keeps the best of its
//! repetitions, which filters out a moment's disturbance but not another
//! program that keeps the processors busy throughout. Each job process reads
//! its machine's processor time (`/proc/stat`) and its own (`getrusage`) at
//! the start and end of its part of every job and reports both
//! ([`MachineLoad`]); the calibration sums them per machine (processes on one
//! machine share its boot id) over all its jobs. When other programs took
//! more than a tenth of a machine's processors, or the hypervisor more than
//! a tenth (steal), it says so in a warning naming the machine (this one, or
//! the hosts of the host file on it) and the share, and the profile should
//! be measured again. Nothing is said for a machine where a job process
//! could use fewer processors than the machine has (a container on a larger
//! host: the others' time may be on processors the calibration never used).
//! On a quiet 2-core machine the others' share read 0–6%. Variation it
//! cannot see is not caught: on a two-core virtual machine, calibrations the
//! same day read 4.4e10–7.3e10 GEMM flop/s per site (256² blocks, both
//! processes multiplying at once) with no steal and nothing else running.
//!
//! The inputs are `.npy` files written into `--dir` (with `--hosts`, a
//! directory every worker sees at the same path, inside their `--data-dir`;
//! by default the host file's directory), removed afterwards.

use crate::cluster::{all_loopback, cluster_secret};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tra_executor::cluster::agent::{self, Host};
use tra_executor::cluster::auth::Secret;
use tra_executor::cluster::job::{JobReport, JobSpec, LayoutSpec, DEFAULT_PEER_TIMEOUT_S};
use tra_executor::cluster::machine::{machine_id, MachineLoad, MachineTotals};
use tra_executor::cluster::supervise::{self, Launcher};
use tra_optimizer::check::check_plan;
use tra_optimizer::loads::{plan_loads, SiteLoad};
use tra_optimizer::time::Profile;
use tra_optimizer::Plan;

/// Arguments of `tra calibrate`.
#[derive(clap::Args, Debug, Clone)]
pub struct CalibrateArgs {
    /// Timely processes to measure (each one site), started on this machine
    /// and talking over loopback, as `tra run --processes N` does.
    #[arg(long, default_value_t = 2)]
    pub processes: usize,
    /// Measure the `tra worker`s of a host file instead (one site each), as
    /// `tra run --hosts FILE` reaches them.
    #[arg(long, value_name = "HOSTS")]
    pub hosts: Option<PathBuf>,
    /// The cluster secret for --hosts (default: $TRA_CLUSTER_SECRET, or the
    /// file `secret` beside the host file).
    #[arg(long, value_name = "FILE", requires = "hosts")]
    pub secret_file: Option<PathBuf>,
    /// Where to write the calibration's input files (removed afterwards).
    /// With --hosts it must be the same path on every machine and inside the
    /// workers' --data-dir (default: the host file's directory); otherwise
    /// the system's temporary directory.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Side of the square blocks to measure with: the block size of the
    /// programs the profile is for (a GEMM's rate depends on it).
    #[arg(long, default_value_t = 256)]
    pub block: usize,
    /// Repetitions of each measurement (the best is kept).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
}

/// What one calibration found, with the figures behind it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Calibration {
    /// The profile to give requests (`cluster.profile`, `tra serve --profile`).
    pub profile: Profile,
    /// Per-site GEMM rates of the best run, flops per second.
    pub site_flops_per_second: Vec<f64>,
    /// The GEMM that rate was measured with (process 0's: OpenBLAS or the
    /// built-in one, `TRA_GEMM`), one short line.
    pub gemm: String,
    /// The same in full (the library and its build, or each library tried
    /// and why it was not taken; `docs/gemm.md`).
    pub gemm_detail: String,
    /// Per-site memory rates of the best run (a `matAdd` aggregation), bytes
    /// per second.
    pub memory_bytes_per_second: Vec<f64>,
    /// Per-site rates of writing a dense output into its file in the best
    /// run, bytes per second.
    pub output_bytes_per_second: Vec<f64>,
    /// The latency of a small exchange of ready operands (the chain of
    /// shuffles), seconds.
    pub exchange_latency_seconds: f64,
    /// The fixed cost of a large exchange (the intercept of the shuffles'
    /// time against their bytes), seconds.
    pub exchange_intercept_seconds: f64,
    /// Seconds the whole calibration took.
    pub seconds: f64,
    /// What made the figures doubtful (another program busy on this machine
    /// while they were measured).
    pub warnings: Vec<String>,
}

/// The share of the machine's processors that others may take while a
/// calibration measures before it warns.
const BUSY_WARNING: f64 = 0.10;

/// The processor time of the machines the calibration's jobs ran on, over
/// those jobs, summed per machine from what each job process saw
/// ([`MachineTotals`]), with the hosts of the processes on each.
#[derive(Debug, Default)]
struct Watch {
    machines: BTreeMap<String, (MachineTotals, BTreeSet<String>)>,
}

impl Watch {
    /// Add one job's report; `hosts[i]` names process `i`'s host.
    fn add(&mut self, machines: &[Option<MachineLoad>], hosts: &[String]) {
        for (machine, job) in MachineTotals::of_job(machines) {
            let (t, names) = self.machines.entry(machine).or_default();
            t.add(&job);
            names.extend(job.processes.iter().filter_map(|&i| hosts.get(i).cloned()));
        }
    }

    /// The processors of the one machine all `processes` job processes ran
    /// on (those a process could use, in a container on a larger host),
    /// if they all ran on one.
    fn one_machine(&self, processes: usize) -> Option<usize> {
        match self.machines.values().collect::<Vec<_>>()[..] {
            [(t, _)] if t.processes.len() == processes => {
                let usable = if t.usable == usize::MAX || t.usable == 0 { t.processors } else { t.usable };
                (usable > 0).then_some(usable)
            }
            _ => None,
        }
    }

    /// The warnings about every machine that others kept busy.
    fn warnings(&self) -> Vec<String> {
        let here = machine_id();
        self.machines
            .iter()
            .flat_map(|(id, (t, hosts))| {
                let which = if *id == here || hosts.is_empty() {
                    format!("this machine's {} processors", t.processors)
                } else {
                    let hosts: Vec<&str> = hosts.iter().map(String::as_str).collect();
                    format!("the {} processors of the machine of {}", t.processors, hosts.join(", "))
                };
                busy_warnings(t, &which)
            })
            .collect()
    }
}

/// The warnings about one machine, `which` saying which in words: others
/// busy, or the hypervisor's steal, above [`BUSY_WARNING`] of its processors
/// over the jobs' time (nothing when that cannot be told:
/// [`MachineTotals::others_and_steal`]).
fn busy_warnings(t: &MachineTotals, which: &str) -> Vec<String> {
    let Some((others, steal)) = t.others_and_steal() else { return Vec::new() };
    let mut out = Vec::new();
    if others > BUSY_WARNING {
        out.push(format!(
            "other programs used {:.0}% of {which} while the calibration measured: the figures are likely too \
             slow; measure again when the machine is quiet",
            100.0 * others,
        ));
    }
    if steal > BUSY_WARNING {
        out.push(format!(
            "the hypervisor took {:.0}% of {which} (steal time) while the calibration measured: the figures are \
             likely too slow; measure again when the host is quiet",
            100.0 * steal,
        ));
    }
    out
}

/// Shuffles in the chain that measures an exchange's latency.
const LATENCY_CHAIN: usize = 6;

fn plan(json: serde_json::Value) -> Result<Plan, String> {
    Plan::from_json(&json.to_string()).map_err(|e| format!("internal error: calibration plan: {e}"))
}

/// Where the calibration jobs run.
enum Target {
    Local { processes: usize },
    Hosts { hosts: Vec<Host>, secret: Secret },
}

impl Target {
    fn processes(&self) -> usize {
        match self {
            Target::Local { processes } => *processes,
            Target::Hosts { hosts, .. } => hosts.len(),
        }
    }

    /// Kernel threads per job process, as `tra run` chooses them: processes
    /// of one machine share its cores; a machine of its own uses them all.
    fn threads(&self) -> Option<usize> {
        let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        match self {
            Target::Hosts { hosts, .. } if !all_loopback(hosts) => None,
            _ => Some((cores / self.processes()).max(1)),
        }
    }
}

/// The calibration's input and output files, removed when dropped.
struct Files {
    dir: PathBuf,
    made: Vec<PathBuf>,
    remove_dir: bool,
}

impl Files {
    fn path(&mut self, name: &str) -> PathBuf {
        let p = self.dir.join(format!("tra-calibrate-{}-{name}.npy", std::process::id()));
        self.made.push(p.clone());
        p
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        for p in &self.made {
            let _ = std::fs::remove_file(p);
        }
        if self.remove_dir {
            let _ = std::fs::remove_dir(&self.dir);
        }
    }
}

/// Run `p` with random `f32` inputs (written once per plan) on the target.
struct Runner<'a> {
    target: &'a Target,
    files: Files,
    /// The GEMM of the last job's process 0, and in full.
    gemm: String,
    gemm_detail: String,
    /// The machines' processor time over the jobs.
    watch: Watch,
    /// The kernel threads of each job process (the last job's).
    threads: usize,
}

impl Runner<'_> {
    fn job(&mut self, p: &Plan) -> Result<JobSpec, String> {
        let mut inputs = BTreeMap::new();
        for (i, (name, d)) in p.inputs.iter().enumerate() {
            let shape: Vec<usize> =
                d.key_bounds.iter().map(|&k| k as usize).chain(d.array_bounds.iter().map(|&a| a as usize)).collect();
            let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ (i as u64 + 1);
            let data: Vec<f32> = (0..shape.iter().product::<usize>())
                .map(|_| {
                    state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    ((state >> 40) as f32 / (1u64 << 24) as f32) - 0.5
                })
                .collect();
            let path = self.files.path(name);
            tra_executor::npy::write_array(&path, &shape, &data)
                .map_err(|e| format!("cannot write a calibration input: {e}"))?;
            inputs.insert(name.clone(), path);
        }
        let outputs = p.outputs.iter().map(|o| (o.clone(), self.files.path(o))).collect();
        Ok(JobSpec {
            plan: p.clone(),
            processes: self.target.processes(),
            workers: 1,
            dtype: "f32".into(),
            inputs,
            outputs,
            dense: false,
            dense_outputs: Default::default(),
            layout: LayoutSpec::RoundRobin,
            fuse: true,
            threads: self.target.threads(),
            stall_ms: 0,
            connect_timeout_s: 30.0,
            peer_timeout_s: DEFAULT_PEER_TIMEOUT_S,
            test_panic: false,
        })
    }

    /// Run the single-operator plan `p` `reps` times; each site's rate is its
    /// amount of work in operator `op` (`amount` of its exact per-site load)
    /// over the time the site spent in it. The rates of the run whose median
    /// site was fastest (the least disturbed).
    fn site_rates(
        &mut self,
        p: &Plan,
        op: &str,
        reps: usize,
        amount: impl Fn(&SiteLoad) -> u64,
    ) -> Result<Vec<f64>, String> {
        self.site_rates_timed_at(p, op, op, reps, amount)
    }

    /// [`Runner::site_rates`] with the work counted at operator `op` and the
    /// time read at operator `timed` (a fused matmul's time is its
    /// aggregation's, its flops are its join's).
    fn site_rates_timed_at(
        &mut self,
        p: &Plan,
        op: &str,
        timed: &str,
        reps: usize,
        amount: impl Fn(&SiteLoad) -> u64,
    ) -> Result<Vec<f64>, String> {
        let n = self.target.processes();
        let typed = check_plan(p, n).map_err(|e| format!("internal error: {e}"))?;
        let loads = plan_loads(p, &typed, n, 4).map_err(|e| e.to_string())?[op].clone();
        let spec = self.job(p)?;
        let mut best: Vec<f64> = Vec::new();
        for _ in 0..reps {
            let r = self.run(&spec)?;
            let site_ms: Vec<f64> = serde_json::from_value(node(&r, timed)?["site_ms"].clone())
                .map_err(|e| format!("internal error: timings of `{timed}`: {e}"))?;
            let rates: Vec<f64> = loads
                .iter()
                .zip(&site_ms)
                .filter(|(l, ms)| amount(l) > 0 && **ms > 0.0)
                .map(|(l, ms)| amount(l) as f64 / (ms / 1000.0))
                .collect();
            if median(&rates) > median(&best) {
                best = rates;
            }
        }
        Ok(best)
    }

    fn run(&mut self, spec: &JobSpec) -> Result<JobReport, String> {
        let timeout = Duration::from_secs(300);
        let r = match self.target {
            Target::Local { .. } => supervise::run_local(spec, &Launcher::current_tra()?, timeout, &|| None, |_| {}),
            Target::Hosts { hosts, secret } => agent::run_hosts(spec, hosts, secret, timeout),
        }
        .map_err(|e| format!("calibration run failed: {e}"))?;
        self.gemm.clone_from(&r.gemm);
        self.gemm_detail.clone_from(&r.gemm_detail);
        self.threads = r.threads;
        let hosts: Vec<String> = match self.target {
            Target::Local { .. } => Vec::new(),
            Target::Hosts { hosts, .. } => hosts.iter().map(|h| h.control.clone()).collect(),
        };
        self.watch.add(&r.machines, &hosts);
        Ok(r)
    }
}

/// A node's figures in a job report.
fn node<'a>(r: &'a JobReport, name: &str) -> Result<&'a serde_json::Value, String> {
    r.nodes
        .iter()
        .find(|n| n["name"] == name)
        .ok_or_else(|| format!("internal error: no timing for calibration node `{name}`"))
}

/// Measure the cluster that `args` names.
pub fn calibrate(args: &CalibrateArgs) -> Result<Calibration, String> {
    let target = match &args.hosts {
        Some(h) => {
            Target::Hosts { hosts: agent::read_hosts(h)?, secret: cluster_secret(args.secret_file.as_deref(), h)? }
        }
        None => Target::Local { processes: args.processes },
    };
    let n = target.processes();
    if !(1..=64).contains(&n) {
        return Err(format!("{n} processes: calibration measures between 1 and 64"));
    }
    let b = args.block;
    if !(16..=4096).contains(&b) {
        return Err(format!("--block {b}: between 16 and 4096"));
    }
    let reps = args.reps.clamp(1, 20);
    let (dir, remove_dir) = match (&args.dir, &args.hosts) {
        (Some(d), _) => (d.clone(), false),
        (None, Some(h)) => {
            (h.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf(), false)
        }
        (None, None) => {
            let d = std::env::temp_dir().join(format!("tra-calibrate-{}", std::process::id()));
            std::fs::create_dir_all(&d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
            (d, true)
        }
    };
    let dir = std::path::absolute(&dir).map_err(|e| format!("--dir {}: {e}", dir.display()))?;
    let start = Instant::now();
    let mut runner = Runner {
        target: &target,
        files: Files { dir, made: Vec::new(), remove_dir },
        gemm: String::new(),
        gemm_detail: String::new(),
        watch: Watch::default(),
        threads: 0,
    };

    // GEMM: ~2.5 GFLOP per site, as the plans' matrix products run: a
    // fused, streamed matmul whose output blocks each sum the products of
    // up to 8 pairs (row i of A's blocks times the broadcast blocks of B),
    // on their own site.
    let per_site = (2.5e9 / (2.0 * (b as f64).powi(3))).ceil().clamp(2.0, 512.0) as usize;
    let depth = per_site.min(8);
    let rows = per_site.div_ceil(depth);
    let gemm = plan(serde_json::json!({
        "inputs": {"A": {"key_bounds": [rows * n, depth], "array_bounds": [b, b], "placement": {"hash": [0]}},
                   "B": {"key_bounds": [depth], "array_bounds": [b, b]}},
        "nodes": {"Bb": {"op": "broadcast", "input": "B"},
                  "C": {"op": "local_join", "left": "A", "right": "Bb", "left_keys": [1], "right_keys": [0],
                        "kernel": "matMul"},
                  "D": {"op": "local_aggregate", "input": "C", "group_by": [0], "kernel": "matAdd"}},
        "outputs": ["D"]}))?;
    let best_rates = runner.site_rates_timed_at(&gemm, "C", "D", reps, |l| l.flops)?;
    let site_flops = median(&best_rates);
    let (gemm_backend, gemm_detail) = (runner.gemm.clone(), runner.gemm_detail.clone());
    tracing::debug!("GEMM in full: {gemm_detail}");

    // Memory: a matAdd aggregation (element-wise: bound by the bytes its
    // calls read and write, not by its flops), 64 MiB of blocks per site in
    // groups of 8 on their own site.
    let blocks = ((64usize << 20) / (b * b * 4)).max(2);
    let members = blocks.min(8);
    let groups = (blocks / members).max(1);
    let fold = plan(serde_json::json!({
        "inputs": {"M": {"key_bounds": [groups * n, members], "array_bounds": [b, b], "placement": {"hash": [0]}}},
        "nodes": {"S": {"op": "local_aggregate", "input": "M", "group_by": [0], "kernel": "matAdd"}},
        "outputs": ["S"]}))?;
    let memory_rates = runner.site_rates(&fold, "S", reps, |l| l.memory_bytes)?;
    let memory = median(&memory_rates);

    // Link bandwidth: an all-to-all shuffle of 4 MiB and of 32 MiB of blocks
    // per site. The rate is the slope between the two (extra bytes over
    // extra time, per site), so the fixed cost of an exchange — starting it,
    // the skew between processes, the last block's round trip — does not
    // count as bandwidth; that fixed cost (the line's intercept) is the
    // latency, unless a shuffle of one float per site takes longer.
    let per_block = b * b * 4;
    let mut points = Vec::new();
    let mut cpu_points = Vec::new();
    for mib in [4usize, 32] {
        let blocks = ((mib << 20) / per_block).max(2) * n;
        let shuffle = plan(serde_json::json!({
            "inputs": {"X": {"key_bounds": [blocks], "array_bounds": [b, b]}},
            "nodes": {"S": {"op": "shuffle", "input": "X", "dims": [0]}},
            "outputs": ["S"]}))?;
        let spec = runner.job(&shuffle)?;
        let mut best: Option<(f64, f64)> = None;
        let mut least_cpu = f64::INFINITY;
        for _ in 0..reps {
            let r = runner.run(&spec)?;
            if let Some(w) = r.wire.get("S") {
                if w.ms > 0.0 && w.bytes > 0 && best.is_none_or(|(_, s)| w.ms / 1000.0 < s) {
                    best = Some((w.bytes as f64 / n as f64, w.ms / 1000.0));
                }
            }
            // Processor seconds per process, per kernel thread: the share of
            // a site's processors the job took.
            if r.cpu_ms.len() == n && r.threads > 0 && r.cpu_ms.iter().all(|&c| c > 0.0) {
                let per_process = r.cpu_ms.iter().sum::<f64>() / n as f64 / 1000.0;
                least_cpu = least_cpu.min(per_process / r.threads as f64);
            }
        }
        if let Some((bytes, _)) = best {
            cpu_points.push((bytes, least_cpu));
        }
        points.extend(best);
    }
    // The processor time an exchanged byte costs a site: the slope of the
    // processor time between the two shuffles (the job's fixed work —
    // starting, reading the plan, connecting — cancels out).
    let exchange_cpu = match cpu_points[..] {
        [(b0, c0), (b1, c1)] if b1 > b0 && c1 > c0 && c1.is_finite() => Some((b1 - b0) / (c1 - c0)),
        _ => None,
    };
    let (link, intercept) = match points[..] {
        [(b0, t0), (b1, t1)] if b1 > b0 && t1 > t0 => {
            let rate = (b1 - b0) / (t1 - t0);
            (rate, (t0 - b0 / rate).max(0.0))
        }
        // Disturbed so much that the larger shuffle was not slower: the
        // larger one's plain rate.
        [_, (b1, t1)] => (b1 / t1, 0.0),
        _ => (0.0, 0.0),
    };

    // Writing outputs: a dense output (as a matmul's is by default), 32 MiB
    // of fresh blocks per site (a `relu` of an input), each site's writing
    // thread's busy time over the bytes it wrote (`site_write_ms`,
    // `site_bytes` of the report). The sites' bytes over their busy time,
    // summed, in the fastest run: site 0 also opens and preallocates the
    // file, so the sites' rates differ, and the rate is the mean cost of a
    // byte.
    let columns = 8usize;
    let rows = ((32usize << 20) / (b * b * 4 * columns)).max(1) * n;
    let write = plan(serde_json::json!({
        "inputs": {"W": {"key_bounds": [rows, columns], "array_bounds": [b, b], "placement": {"hash": [0]}}},
        "nodes": {"O": {"op": "local_map", "input": "W", "kernel": "relu"}},
        "outputs": ["O"]}))?;
    let mut spec = runner.job(&write)?;
    spec.dense_outputs.insert("O".to_string());
    let mut write_rates: Vec<f64> = Vec::new();
    let mut output_write = 0.0f64;
    for _ in 0..reps {
        let r = runner.run(&spec)?;
        let o = r.outputs.get("O").ok_or("internal error: the write job reported no output `O`")?;
        let figures = |field: &str| -> Vec<f64> {
            o[field].as_array().map(|a| a.iter().filter_map(serde_json::Value::as_f64).collect()).unwrap_or_default()
        };
        let sites: Vec<(f64, f64)> = figures("site_bytes")
            .into_iter()
            .zip(figures("site_write_ms"))
            .filter(|&(bytes, ms)| bytes > 0.0 && ms > 0.0)
            .map(|(bytes, ms)| (bytes, ms / 1000.0))
            .collect();
        let (bytes, seconds) = sites.iter().fold((0.0, 0.0), |(b, t), &(x, y)| (b + x, t + y));
        if seconds > 0.0 && bytes / seconds > output_write {
            output_write = bytes / seconds;
            write_rates = sites.iter().map(|(b, t)| b / t).collect();
        }
    }

    // The fixed time of a job, whatever its plan does: a plan of one local
    // operator on one float per site, its run less its reading of the
    // inputs. Measured on two processes over loopback it is 8–30 ms (the
    // processes agreeing that each operator has finished), where an exchange
    // of ready operands adds under 1 ms.
    let local = plan(serde_json::json!({
        "inputs": {"X": {"key_bounds": [n], "array_bounds": [1], "placement": {"hash": [0]}}},
        "nodes": {"S": {"op": "local_aggregate", "input": "X", "group_by": [0], "kernel": "matAdd"}},
        "outputs": ["S"]}))?;
    let spec = runner.job(&local)?;
    let mut job_overhead = f64::INFINITY;
    for _ in 0..reps.max(3) {
        let r = runner.run(&spec)?;
        job_overhead = job_overhead.min((r.run_ms - r.load_ms).max(0.0) / 1000.0);
    }

    // Latency of one exchange: a chain of shuffles of one float per site,
    // each waiting for the one before (alternate key dims, so every one
    // moves). The first also waits for the job's start, which the overhead
    // above counts; each later one takes an exchange's own fixed time. The
    // mean of the later ones, in the least disturbed run.
    let mut chain = serde_json::Map::new();
    let mut prev = "X".to_string();
    for i in 0..LATENCY_CHAIN {
        let name = format!("S{i}");
        chain.insert(name.clone(), serde_json::json!({"op": "shuffle", "input": prev, "dims": [(i + 1) % 2]}));
        prev = name;
    }
    let chain = plan(serde_json::json!({
        "inputs": {"X": {"key_bounds": [2 * n, 2 * n], "array_bounds": [1], "placement": {"hash": [0]}}},
        "nodes": chain,
        "outputs": [prev]}))?;
    let spec = runner.job(&chain)?;
    let mut exchange_latency = f64::INFINITY;
    for _ in 0..reps.max(3) {
        let r = runner.run(&spec)?;
        let mut walls = Vec::with_capacity(LATENCY_CHAIN - 1);
        for i in 1..LATENCY_CHAIN {
            walls.extend(node(&r, &format!("S{i}"))?["wall_ms"].as_f64());
        }
        if walls.len() == LATENCY_CHAIN - 1 {
            exchange_latency = exchange_latency.min(walls.iter().sum::<f64>() / walls.len() as f64 / 1000.0);
        }
    }
    // A large exchange's fixed cost (the line's intercept: starting it, the
    // last block's round trip) when it is more than a small one's.
    let latency = exchange_latency.max(intercept);

    // Sites sharing one machine's processors: where fewer compute, each gets
    // more of it (`Profile::processor_speedup`).
    let shared = runner.watch.one_machine(target.processes()).and_then(|c| {
        let c = u32::try_from(c).ok()?;
        let k = u32::try_from(runner.threads).ok().filter(|&k| k > 0)?;
        Some((c, k, u32::try_from(target.processes()).ok()?))
    });
    let defaults = Profile::default();
    let profile = Profile {
        link_bytes_per_second: if link > 0.0 { link } else { defaults.link_bytes_per_second },
        site_flops_per_second: if site_flops > 0.0 { site_flops } else { defaults.site_flops_per_second },
        memory_bytes_per_second: if memory > 0.0 { memory } else { defaults.memory_bytes_per_second },
        latency_seconds: if latency.is_finite() { latency } else { defaults.latency_seconds },
        job_overhead_seconds: job_overhead.is_finite().then_some(job_overhead),
        bytes_per_float: 4,
        exchange_cpu_bytes_per_second: exchange_cpu,
        output_bytes_per_second: (output_write > 0.0 && output_write.is_finite()).then_some(output_write),
        machine_processors: shared.map(|(c, _, _)| c),
        site_threads: shared.map(|(_, k, _)| k),
        machine_sites: shared.map(|(_, _, n)| n),
    };
    Ok(Calibration {
        profile,
        site_flops_per_second: best_rates,
        gemm: gemm_backend,
        gemm_detail,
        memory_bytes_per_second: memory_rates,
        output_bytes_per_second: write_rates,
        exchange_latency_seconds: exchange_latency,
        exchange_intercept_seconds: intercept,
        seconds: start.elapsed().as_secs_f64(),
        warnings: runner.watch.warnings(),
    })
}

fn median(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::{busy_warnings, Watch};
    use tra_executor::cluster::machine::{MachineLoad, MachineTotals};

    fn load(machine: &str, wall_s: f64, busy_s: f64, steal_s: f64, own_s: f64, usable: usize) -> Option<MachineLoad> {
        Some(MachineLoad { machine: machine.into(), processors: 2, usable, wall_s, busy_s, steal_s, own_s })
    }

    #[test]
    fn a_calibration_beside_another_busy_program_is_warned_about() {
        let at = |busy: f64, steal: f64, usable: usize| MachineTotals {
            processors: 2,
            usable,
            wall: 10.0,
            busy,
            steal,
            own: 12.0,
            processes: vec![0, 1],
        };
        // 10 s on 2 processors; the calibration's job processes used 12 s.
        assert!(busy_warnings(&at(13.0, 0.5, 2), "this machine's 2 processors").is_empty());
        let w = busy_warnings(&at(19.0, 0.0, 2), "this machine's 2 processors");
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("other programs used 35% of this machine's 2 processors"), "{w:?}");
        let w = busy_warnings(&at(12.0, 3.0, 2), "this machine's 2 processors");
        assert!(w.len() == 1 && w[0].contains("hypervisor took 15%"), "{w:?}");
        assert!(busy_warnings(&MachineTotals { wall: 0.0, ..at(19.0, 0.0, 2) }, "x").is_empty());
        // A container allowed 1 of the host's 2 processors: the others' time
        // may be on the other one.
        assert!(busy_warnings(&at(19.0, 3.0, 1), "x").is_empty());
    }

    /// Job processes that all ran on one machine share its processors (the
    /// profile's `machine_processors`); on several machines, none does.
    #[test]
    fn processes_of_one_machine_are_told_from_processes_of_several() {
        let three = ["a".to_string(), "b".to_string(), "c".to_string()];
        let mut one = Watch::default();
        one.add(
            &[load("m1", 1.0, 1.9, 0.0, 0.9, 2), load("m1", 1.0, 1.9, 0.0, 0.9, 2), load("m1", 1.0, 1.9, 0.0, 0.9, 2)],
            &three,
        );
        assert_eq!(one.one_machine(3), Some(2));
        // A container allowed 1 of the machine's 2 processors.
        let mut boxed = Watch::default();
        boxed.add(&[load("m1", 1.0, 1.0, 0.0, 0.9, 1), load("m1", 1.0, 1.0, 0.0, 0.9, 1)], &three[..2]);
        assert_eq!(boxed.one_machine(2), Some(1));
        // One machine per process, or a process that did not say.
        let mut two = Watch::default();
        two.add(&[load("m1", 1.0, 1.9, 0.0, 0.9, 2), load("m2", 1.0, 1.9, 0.0, 0.9, 2)], &three[..2]);
        assert_eq!(two.one_machine(2), None);
        let mut unknown = Watch::default();
        unknown.add(&[load("m1", 1.0, 1.9, 0.0, 0.9, 2), None], &three[..2]);
        assert_eq!(unknown.one_machine(2), None);
    }

    #[test]
    fn the_jobs_are_summed_per_machine_and_a_busy_remote_machine_is_named() {
        let mut w = Watch::default();
        let hosts = ["a:7000".to_string(), "b:7000".to_string(), "c:7000".to_string()];
        // Two processes on machine m1 (each sees the machine's 1.9 s busy,
        // 0.9 s its own), one on m2, quiet.
        w.add(
            &[load("m1", 1.0, 1.9, 0.0, 0.9, 2), load("m1", 1.0, 1.9, 0.0, 0.9, 2), load("m2", 1.0, 1.0, 0.0, 0.95, 2)],
            &hosts,
        );
        assert!(w.warnings().is_empty(), "{:?}", w.warnings());
        // Then others take 0.8 s of m2's processors in a job as long: with
        // the first job's 0.05 s, 0.85 of 2 processors over 2 s, 21% (a
        // process that could not tell is left out).
        w.add(
            &[
                load("m1", 1.0, 1.9, 0.0, 0.9, 2),
                load("m1", 1.0, 1.9, 0.0, 0.9, 2),
                load("m2", 1.0, 1.75, 0.0, 0.95, 2),
                None,
            ],
            &hosts,
        );
        let m1 = &w.machines["m1"].0;
        assert_eq!((m1.wall, m1.busy, m1.own), (2.0, 3.8, 3.6));
        let warnings = w.warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].starts_with("other programs used 21% of the 2 processors of the machine of c:7000 "),
            "{warnings:?}"
        );
    }
}
