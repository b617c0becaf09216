//! A cluster job as files: the plan, `.npy` inputs (each process reads its
//! own sites' tuples) and outputs (written by process 0), and the report
//! process 0 makes of the run.

use super::dataflow::{run_process, ClusterRun, Comm, RunConfig};
use super::input::InputData;
use super::output::OutputFile;
use crate::npy::{self, Layout};
use crate::reference::AnyLayout;
use crate::threads::{Dtype, Elem};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
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
    /// Output `.npy` files by output name (written by process 0).
    pub outputs: BTreeMap<String, PathBuf>,
    /// Write outputs as dense tensors.
    #[serde(default)]
    pub dense: bool,
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
}

fn yes() -> bool {
    true
}
fn thirty() -> f64 {
    30.0
}

impl JobSpec {
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
    /// Per node, in execution order (the thread runtime's `NodeStats` fields).
    pub nodes: Vec<serde_json::Value>,
    /// Per output: tuples, checksum, and where it was written.
    pub outputs: BTreeMap<String, serde_json::Value>,
}

/// Run process `process` of a job. Process 0 writes the outputs and answers
/// the report; the others answer `None`.
pub fn run_job(spec: &JobSpec, process: usize, addresses: &[String], token: u64) -> Result<Option<JobReport>, String> {
    if addresses.len() != spec.processes {
        return Err(format!("{} addresses for {} processes", addresses.len(), spec.processes));
    }
    let comm = if spec.processes == 1 {
        Comm::Local { workers: spec.workers, serialize: false }
    } else {
        Comm::Cluster {
            process,
            addresses: addresses.to_vec(),
            workers: spec.workers,
            token,
            connect_timeout: Duration::from_secs_f64(spec.connect_timeout_s),
        }
    };
    let result = match Dtype::parse(&spec.dtype) {
        Some(Dtype::F32) => run_typed::<f32>(spec, &comm, token),
        Some(Dtype::F64) => run_typed::<f64>(spec, &comm, token),
        None => Err(format!("dtype {:?}: expected f32 or f64", spec.dtype)),
    };
    if result.is_err() && process == 0 {
        remove_partial_outputs(spec, token);
    }
    result
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
    let layout = if spec.dense { Layout::Dense } else { Layout::Relation };
    let mut files = BTreeMap::new();
    for (name, path) in &spec.outputs {
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
        files,
    };
    let run = run_process::<T>(&spec.plan, &inputs, comm, &cfg).map_err(|e| format!("error while running: {e}"))?;
    match run {
        None => Ok(None),
        Some(run) => finish_outputs(spec, &typed, layout, token, run).map(Some),
    }
}

fn finish_outputs<T: Elem>(
    spec: &JobSpec,
    typed: &tra_optimizer::check::TypedPlan,
    layout: Layout,
    token: u64,
    run: ClusterRun<T>,
) -> Result<JobReport, String> {
    use serde_json::json;
    let t_write = Instant::now();
    let mut outputs = BTreeMap::new();
    for (name, w) in &run.written {
        let t = &typed.types[name];
        let path = &spec.outputs[name];
        // Remove the old file first: ext4 flushes a file renamed over another
        // to disk before answering (tens of ms for large outputs).
        let _ = std::fs::remove_file(path);
        std::fs::rename(partial_path(path, token), path)
            .map_err(|e| format!("output `{name}`: cannot rename to {}: {e}", path.display()))?;
        let keys: u64 = t.rel.frontier.iter().map(|&f| u64::from(f)).product();
        let mut info = json!({
            "key_bounds": t.rel.frontier, "array_bounds": t.rel.array_bounds, "tuples": w.tuples,
            "checksum": {"sum": w.sum, "abs_sum": w.abs_sum},
            "path": path.display().to_string(), "layout": layout,
            "shape": npy::layout_shape(layout, &t.rel.frontier, &t.rel.array_bounds),
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
        run_ms: run.wall_ms,
        load_ms: run.load_ms,
        write_ms,
        network_floats: run.total_floats_moved(),
        floats_moved: run.floats_moved.clone(),
        nodes: run.nodes.iter().map(|n| serde_json::to_value(n).expect("JSON")).collect(),
        outputs,
    })
}
