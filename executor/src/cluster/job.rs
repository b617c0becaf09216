//! A cluster job as files: the plan, `.npy` inputs (each process reads its
//! own sites' tuples) and outputs, and the report process 0 makes of the run.
//!
//! **Outputs.** Every process writes its own blocks of an output, in place,
//! into one temporary file beside it (`NAME.npy.tra-<job>.part`); process 0
//! writes the header. Only when every process of the job has succeeded does
//! the job's supervisor (`tra run --processes`, or the worker of process 0
//! when the submitter says so) rename it over the output ([`commit_outputs`]):
//! an existing output is untouched by a job that fails, and a failed or
//! interrupted job leaves no temporary file ([`remove_partial_outputs`]).

use super::auth::Secret;
use super::dataflow::{run_process, ClusterRun, Comm, PeerWatch, RunConfig};
use super::heartbeat::SilenceHandler;
use super::input::InputData;
use super::output::OutputFile;
use crate::npy::{self, Layout};
use crate::semantics::AnyLayout;
use crate::threads::kernels::gemm_backend;
use crate::threads::{Dtype, Elem};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tra_optimizer::check::check_plan;
use tra_optimizer::program::Plan;

/// Where the tuples of inputs declared `any` go (serializable form of
/// [`AnyLayout`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum LayoutSpec {
    /// The `i`-th tuple in key order on site `i % sites`.
    #[default]
    RoundRobin,
    /// Drawn by a seeded generator.
    Seeded(u64),
    /// All on one site.
    OneSite(usize),
}

impl From<LayoutSpec> for AnyLayout {
    fn from(l: LayoutSpec) -> AnyLayout {
        match l {
            LayoutSpec::RoundRobin => AnyLayout::RoundRobin,
            LayoutSpec::Seeded(s) => AnyLayout::Seeded(s),
            LayoutSpec::OneSite(s) => AnyLayout::OneSite(s),
        }
    }
}

/// Everything every process of a job needs (the same for all of them).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobSpec {
    /// The IA plan (optimized once, by whoever submits the job).
    pub plan: Plan,
    /// Processes.
    pub processes: usize,
    /// Worker threads (sites) per process.
    pub workers: usize,
    /// `f32` or `f64`.
    pub dtype: String,
    /// Input `.npy` files by input name (paths as seen by every process).
    pub inputs: BTreeMap<String, PathBuf>,
    /// Output `.npy` files by output name (every process writes its blocks).
    pub outputs: BTreeMap<String, PathBuf>,
    /// Write every output as a dense tensor.
    #[serde(default)]
    pub dense: bool,
    /// Outputs written as dense tensors (the others in the relation layout,
    /// unless `dense`).
    #[serde(default)]
    pub dense_outputs: BTreeSet<String>,
    /// Placement of `any` inputs.
    #[serde(default)]
    pub layout: LayoutSpec,
    /// Fuse matmul aggregations.
    #[serde(default = "yes")]
    pub fuse: bool,
    /// Kernel threads per process (default: cores / processes on one machine,
    /// all cores otherwise; see the launcher).
    #[serde(default)]
    pub threads: Option<usize>,
    /// Test hook: local operators sleep this long when they fire.
    #[serde(default)]
    pub stall_ms: u64,
    /// Seconds to wait for the processes to connect.
    #[serde(default = "thirty")]
    pub connect_timeout_s: f64,
    /// A process that hears nothing from another for this many seconds
    /// fails the job (`worker N stopped responding`); see [`super::heartbeat`].
    #[serde(default = "default_peer_timeout")]
    pub peer_timeout_s: f64,
    /// Test hook: the job panics on worker 0 (see [`super::RunConfig::test_panic`]).
    #[serde(default)]
    pub test_panic: bool,
}

/// The default of [`JobSpec::peer_timeout_s`]: a stopped process is
/// noticed within about 5 s.
pub const DEFAULT_PEER_TIMEOUT_S: f64 = 5.0;

fn default_peer_timeout() -> f64 {
    DEFAULT_PEER_TIMEOUT_S
}

fn yes() -> bool {
    true
}
fn thirty() -> f64 {
    30.0
}

impl JobSpec {
    /// The layout output `name` is written in.
    pub fn output_layout(&self, name: &str) -> Layout {
        if self.dense || self.dense_outputs.contains(name) {
            Layout::Dense
        } else {
            Layout::Relation
        }
    }

    /// Sites of the job.
    pub fn sites(&self) -> usize {
        self.processes * self.workers
    }
}

/// What process 0 reports of a job.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobReport {
    /// Sites.
    pub sites: usize,
    /// Processes.
    pub processes: usize,
    /// Workers per process.
    pub workers: usize,
    /// Element type.
    pub dtype: String,
    /// The GEMM of process 0's matrix products
    /// ([`GemmBackend::describe`](crate::threads::kernels::GemmBackend::describe)).
    #[serde(default)]
    pub gemm: String,
    /// The same in full
    /// ([`GemmBackend::details`](crate::threads::kernels::GemmBackend::details)).
    #[serde(default)]
    pub gemm_detail: String,
    /// Wall time of the dataflow on process 0 (connecting, loading, running, gathering).
    pub run_ms: f64,
    /// The longest time a site took to read its inputs.
    pub load_ms: f64,
    /// Time to finish the outputs (every site writes its part while the job runs).
    pub write_ms: f64,
    /// Floats moved by all shuffles and broadcasts.
    pub network_floats: u64,
    /// Floats moved, per shuffle and broadcast.
    pub floats_moved: BTreeMap<String, u64>,
    /// Bytes sent between processes, and how long that took, per shuffle and broadcast.
    #[serde(default)]
    pub wire: BTreeMap<String, super::dataflow::WireStat>,
    /// Kernel threads of each process.
    #[serde(default)]
    pub threads: usize,
    /// Processor time of each process during the job, in milliseconds
    /// (user and system, every thread).
    #[serde(default)]
    pub cpu_ms: Vec<f64>,
    /// What each process's machine did while it ran the job (`None`: it
    /// could not tell), so that a calibration sees others busy there.
    #[serde(default)]
    pub machines: Vec<Option<super::machine::MachineLoad>>,
    /// Per node, in execution order (the thread runtime's `NodeStats` fields).
    pub nodes: Vec<serde_json::Value>,
    /// Per output: tuples, checksum, and where it was written.
    pub outputs: BTreeMap<String, serde_json::Value>,
}

/// How one process of a job reaches the others.
#[derive(Clone)]
pub struct Membership {
    /// Its index.
    pub process: usize,
    /// Every process's data address.
    pub addresses: Vec<String>,
    /// The job's token.
    pub token: u64,
    /// The job's key ([`super::auth::Secret::job_key`]).
    pub key: Secret,
    /// Listen here instead of at `addresses[process]`.
    pub listen: Option<String>,
    /// What to do when another process stops responding.
    pub on_silent: Option<SilenceHandler>,
}

/// Run one process's part of a job: every process writes its blocks of the
/// outputs into the temporary files; process 0 answers the report, the
/// others `None`. The outputs are not renamed here (see [`commit_outputs`]).
pub fn run_job(spec: &JobSpec, m: &Membership) -> Result<Option<JobReport>, String> {
    if m.addresses.len() != spec.processes {
        return Err(format!("{} addresses for {} processes", m.addresses.len(), spec.processes));
    }
    let comm = if spec.processes == 1 {
        Comm::Local { workers: spec.workers, serialize: false }
    } else {
        Comm::Cluster {
            process: m.process,
            addresses: m.addresses.clone(),
            workers: spec.workers,
            key: m.key.clone(),
            token: m.token,
            connect_timeout: Duration::from_secs_f64(spec.connect_timeout_s),
            listen: m.listen.clone(),
            watch: m.on_silent.clone().map(|on_silent| PeerWatch {
                silence: Duration::from_secs_f64(spec.peer_timeout_s.max(0.1)),
                on_silent,
            }),
        }
    };
    match Dtype::parse(&spec.dtype) {
        Some(Dtype::F32) => run_typed::<f32>(spec, &comm, m.token),
        Some(Dtype::F64) => run_typed::<f64>(spec, &comm, m.token),
        None => Err(format!("dtype {:?}: expected f32 or f64", spec.dtype)),
    }
}

/// Put a successful job's outputs in place: each temporary file renamed
/// over its output.
pub fn commit_outputs(spec: &JobSpec, token: u64) -> Result<(), String> {
    for (name, path) in &spec.outputs {
        // Remove the old file first: ext4 flushes a file renamed over another
        // to disk before answering (tens of ms for large outputs).
        let part = partial_path(path, token);
        if !part.exists() {
            return Err(format!("output `{name}`: {} is missing", part.display()));
        }
        let _ = std::fs::remove_file(path);
        std::fs::rename(&part, path)
            .map_err(|e| format!("output `{name}`: cannot rename {} to {}: {e}", part.display(), path.display()))?;
    }
    Ok(())
}

/// The name an output has while the job writes it (renamed when it is complete).
pub fn partial_path(path: &Path, token: u64) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(format!(".tra-{token:016x}.part"));
    PathBuf::from(s)
}

/// Remove what a failed job wrote of its outputs.
pub fn remove_partial_outputs(spec: &JobSpec, token: u64) {
    for path in spec.outputs.values() {
        let _ = std::fs::remove_file(partial_path(path, token));
    }
}

fn run_typed<T: Elem>(spec: &JobSpec, comm: &Comm, token: u64) -> Result<Option<JobReport>, String> {
    let inputs: BTreeMap<String, InputData<T>> =
        spec.inputs.iter().map(|(n, p)| (n.clone(), InputData::File(p.clone()))).collect();
    let default_threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    // Every site writes its own tuples of the outputs in place.
    let typed = check_plan(&spec.plan, spec.sites()).map_err(|e| format!("the plan does not check: {}", e.message))?;
    let mut files = BTreeMap::new();
    for (name, path) in &spec.outputs {
        let layout = spec.output_layout(name);
        let t = typed.types.get(name).ok_or_else(|| format!("output `{name}`: not an output of the plan"))?;
        if npy::layout_shape(layout, &t.rel.frontier, &t.rel.array_bounds).is_none() {
            return Err(format!(
                "output `{name}`: cannot be written dense: its key has {} dims but its blocks have rank {}",
                t.rel.frontier.len(),
                t.rel.array_bounds.len()
            ));
        }
        files.insert(
            name.clone(),
            OutputFile {
                path: partial_path(path, token),
                layout,
                key_bounds: t.rel.frontier.clone(),
                array_bounds: t.rel.array_bounds.clone(),
            },
        );
    }
    let cfg = RunConfig {
        layout: spec.layout.into(),
        fuse: spec.fuse,
        threads: spec.threads.unwrap_or(default_threads).max(1),
        stall_ms: spec.stall_ms,
        test_panic: spec.test_panic,
        files,
    };
    let run = run_process::<T>(&spec.plan, &inputs, comm, &cfg).map_err(|e| format!("error while running: {e}"))?;
    match run {
        None => Ok(None),
        Some(run) => finish_outputs(spec, &typed, run, cfg.threads).map(Some),
    }
}

fn finish_outputs<T: Elem>(
    spec: &JobSpec,
    typed: &tra_optimizer::check::TypedPlan,
    run: ClusterRun<T>,
    threads: usize,
) -> Result<JobReport, String> {
    use serde_json::json;
    let t_write = Instant::now();
    let mut outputs = BTreeMap::new();
    for (name, w) in &run.written {
        let t = &typed.types[name];
        let path = &spec.outputs[name];
        let layout = spec.output_layout(name);
        let keys: u64 = t.rel.frontier.iter().map(|&f| u64::from(f)).product();
        let by_site = run.written_by_site.get(name);
        let mut info = json!({
            "key_bounds": t.rel.frontier, "array_bounds": t.rel.array_bounds, "tuples": w.tuples,
            "checksum": {"sum": w.sum, "abs_sum": w.abs_sum},
            "path": path.display().to_string(), "layout": layout,
            "shape": npy::layout_shape(layout, &t.rel.frontier, &t.rel.array_bounds),
            "bytes": w.bytes,
            "site_bytes": by_site.map(|v| v.iter().map(|w| w.bytes).collect::<Vec<_>>()),
            "site_write_ms": by_site.map(|v| v.iter().map(|w| w.busy_ns as f64 / 1e6).collect::<Vec<_>>()),
        });
        if keys > w.tuples {
            info["zero_filled_keys"] = json!(keys - w.tuples);
        }
        outputs.insert(name.clone(), info);
    }
    for (name, value) in &run.outputs {
        let rel = value.erase().map_err(|e| format!("output `{name}`: {e}"))?;
        let t = &typed.types[name];
        let (sum, abs) =
            rel.tuples.iter().flat_map(|(_, b)| b.as_slice().iter()).fold((0.0f64, 0.0f64), |(s, a), &x| {
                let x = x.to_f64();
                (s + x, a + x.abs())
            });
        let info = json!({
            "key_bounds": t.rel.frontier, "array_bounds": t.rel.array_bounds, "tuples": rel.len(),
            "checksum": {"sum": sum, "abs_sum": abs},
        });
        outputs.insert(name.clone(), info);
    }
    let write_ms = t_write.elapsed().as_secs_f64() * 1e3;
    Ok(JobReport {
        sites: run.sites,
        processes: run.processes,
        workers: run.workers,
        dtype: T::DTYPE.name().to_string(),
        gemm: gemm_backend().map(|b| b.describe()).unwrap_or_else(|e| e.to_string()),
        gemm_detail: gemm_backend().map(|b| b.details()).unwrap_or_else(|e| e.to_string()),
        run_ms: run.wall_ms,
        load_ms: run.load_ms,
        write_ms,
        network_floats: run.total_floats_moved(),
        floats_moved: run.floats_moved.clone(),
        wire: run.wire.clone(),
        threads,
        cpu_ms: run.cpu_ms.clone(),
        machines: run.machines.clone(),
        nodes: run.nodes.iter().map(|n| serde_json::to_value(n).expect("JSON")).collect(),
        outputs,
    })
}
