//! The command line of the cluster runtime:
//!
//! - `tra run FILE … --processes N [--workers W]`: optimize for `N × W`
//!   sites, start `N` job processes on this machine (loopback), watch them,
//!   answer the same JSON summary as `tra run` on threads;
//! - `tra run FILE … --hosts hosts.txt`: the same on the `tra worker`s of a
//!   host file (one per machine);
//! - `tra worker --process I --hosts hosts.txt`: the agent of machine `I`;
//!   `tra worker --child` is a job process (started by the two above).
//!
//! The executor side is `tra_executor::cluster`.

use crate::run::{read_program, report, RunArgs};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tra_executor::cluster::agent;
use tra_executor::cluster::job::{JobReport, JobSpec, LayoutSpec};
use tra_executor::cluster::supervise::{self, Launcher};
use tra_optimizer::check::check_plan;
use tra_optimizer::cost::{plan_report, Weights};
use tra_optimizer::{Cluster, Program};

/// The cluster options of `tra run` (flatten them into its arguments).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ClusterArgs {
    /// Run on N processes of this machine, talking over loopback (timely's
    /// cluster mode); sites = N × --workers.
    #[arg(long, value_name = "N", conflicts_with = "hosts")]
    pub processes: Option<usize>,
    /// Run on the `tra worker`s of a host file (one line `HOST:PORT` per
    /// process); input paths must be valid on every machine, outputs are
    /// written by process 0.
    #[arg(long, value_name = "HOSTS")]
    pub hosts: Option<PathBuf>,
    /// Sites (timely worker threads) per process (default: --sites divided
    /// by the processes, or 1).
    #[arg(long, value_name = "W")]
    pub workers: Option<usize>,
    /// Stop a cluster job that runs longer than this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 3600.0)]
    pub timeout: f64,
    /// Run the cheapest alternative plan whose label contains this text
    /// (`BMM`, `CMM`, `RMM`, …) instead of the optimizer's choice (benchmarks;
    /// on threads too).
    #[arg(long, value_name = "TEXT", conflicts_with = "plan")]
    pub alternative: Option<String>,
    /// Run this IA plan (JSON, as `tra optimize` writes plans) instead of
    /// optimizing the program; its inputs and outputs must be the program's
    /// (benchmarks; on threads too).
    #[arg(long, value_name = "PLAN.json")]
    pub plan: Option<PathBuf>,
}

impl ClusterArgs {
    /// Whether the run is to go to a cluster.
    pub fn active(&self) -> bool {
        self.processes.is_some() || self.hosts.is_some()
    }
}

/// Arguments of `tra worker`.
#[derive(clap::Args, Debug, Clone)]
pub struct WorkerArgs {
    /// This machine's process index: its line in the host file, from 0.
    #[arg(long, required_unless_present = "child")]
    pub process: Option<usize>,
    /// The host file (the same on every machine and for `tra run --hosts`).
    #[arg(long, value_name = "HOSTS", required_unless_present = "child")]
    pub hosts: Option<PathBuf>,
    /// Be one job process (started by `tra run --processes` or by a worker;
    /// the assignment is in $TRA_CLUSTER_ASSIGNMENT).
    #[arg(long, hide = true)]
    pub child: bool,
}

/// `tra worker`: serve jobs as process `--process` of the host file, or
/// (with `--child`) run one job process and exit with its status.
pub fn worker_command(args: WorkerArgs) -> Result<(), String> {
    if args.child || supervise::is_job_process() {
        std::process::exit(supervise::child_main());
    }
    let (Some(process), Some(hosts)) = (args.process, args.hosts) else {
        return Err("tra worker needs --process I and --hosts FILE".into());
    };
    let hosts = agent::read_hosts(&hosts)?;
    agent::serve(process, &hosts, &Launcher::current_tra()?)
}

fn absolute(p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir().map(|d| d.join(p)).unwrap_or_else(|_| p.to_path_buf())
    }
}

/// `tra run` with `--processes` or `--hosts`: the JSON summary.
pub fn run_cluster_command(args: &RunArgs, cluster: &ClusterArgs) -> Result<String, String> {
    let t_start = Instant::now();
    let hosts = match &cluster.hosts {
        Some(h) => Some(agent::read_hosts(h)?),
        None => None,
    };
    let processes = match (&hosts, cluster.processes) {
        (Some(h), _) => h.len(),
        (None, Some(n)) => n,
        (None, None) => return Err("pass --processes N or --hosts FILE".into()),
    };
    if processes == 0 {
        return Err("--processes must be at least 1".into());
    }
    let workers = match (cluster.workers, args.sites) {
        (Some(0), _) => return Err("--workers must be at least 1".into()),
        (Some(w), Some(s)) if s != w * processes => {
            return Err(format!("--sites {s} differs from {processes} processes × --workers {w}"))
        }
        (Some(w), _) => w,
        (None, Some(s)) if s == 0 || s % processes != 0 => {
            return Err(format!("--sites {s} is not a multiple of the {processes} processes"))
        }
        (None, Some(s)) => s / processes,
        (None, None) => 1,
    };
    let sites = processes * workers;
    let mut p = read_program(&args.file)?;
    p.cluster = Some(Cluster { sites, ..p.cluster() });
    let (inputs, outputs, dtype) = crate::run::files_and_dtype(&p, args)?;

    let (answer, optimize_ms) = crate::run::optimize_timed(&p, args.strict)?;
    let choice = crate::run::PlanChoice { plan: cluster.plan.clone(), alternative: cluster.alternative.clone() };
    let chosen = crate::run::choose_plan(&p, Some(&answer), &choice)?;
    let (plan, label, predicted_floats) = (chosen.plan, chosen.label, chosen.network_floats);
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let threads = match (args.threads, &hosts) {
        (Some(t), _) => Some(t),
        // Processes of one machine share its cores.
        (None, None) => Some((cores / processes).max(1)),
        (None, Some(_)) => None,
    };
    let spec = JobSpec {
        plan: plan.clone(),
        processes,
        workers,
        dtype: dtype.name().to_string(),
        inputs: inputs.iter().map(|(n, p)| (n.clone(), absolute(p))).collect(),
        outputs: outputs.iter().map(|(n, p)| (n.clone(), absolute(p))).collect(),
        dense: args.dense,
        layout: LayoutSpec::RoundRobin,
        fuse: true,
        threads,
        stall_ms: std::env::var("TRA_CLUSTER_TEST_STALL_MS").ok().and_then(|s| s.parse().ok()).unwrap_or(0),
        connect_timeout_s: 30.0,
    };
    let timeout = Duration::from_secs_f64(cluster.timeout.max(1.0));
    let t_run = Instant::now();
    let job: JobReport = match &hosts {
        None => supervise::run_local(&spec, &Launcher::current_tra()?, timeout, |_| {})?,
        Some(h) => agent::run_hosts(&spec, h, timeout)?,
    };
    let job_ms = t_run.elapsed().as_secs_f64() * 1e3;
    let ran = Ran { label, predicted_floats };
    summary(&p, &answer, &ran, &spec, &job, args, optimize_ms, job_ms, t_start, hosts.as_deref())
}

/// The plan that ran: its label and predicted floats.
struct Ran {
    label: Option<String>,
    predicted_floats: u64,
}

#[allow(clippy::too_many_arguments)]
fn summary(
    p: &Program,
    answer: &tra_optimizer::optimize::OptimizeAnswer,
    ran: &Ran,
    spec: &JobSpec,
    job: &JobReport,
    args: &RunArgs,
    optimize_ms: f64,
    job_ms: f64,
    t_start: Instant,
    hosts: Option<&[agent::Host]>,
) -> Result<String, String> {
    use serde_json::json;
    let cluster = p.cluster();
    let sites = spec.sites();
    let typed = check_plan(&spec.plan, sites)
        .map_err(|e| format!("internal error: the chosen plan does not check: {}", report(&e)))?;
    let predicted = plan_report(
        &spec.plan,
        &typed,
        sites,
        Weights { network: cluster.network_weight, compute: cluster.compute_weight },
    );
    let operators: Vec<serde_json::Value> = job
        .nodes
        .iter()
        .map(|n| {
            let mut v = n.clone();
            if let Some(pred) = n["name"].as_str().and_then(|name| predicted.get(name)) {
                if !n["floats_moved"].is_null() {
                    v["predicted_floats"] = json!(pred.network_floats);
                }
                v["predicted_flops"] = json!(pred.flops);
                v["placement"] = json!(pred.placement);
            }
            v
        })
        .collect();
    let predicted_total = ran.predicted_floats;
    let alternatives: Vec<serde_json::Value> = answer
        .alternatives
        .iter()
        .map(|a| json!({"label": a.label, "network_floats": a.cost.network_floats, "flops": a.cost.flops}))
        .collect();
    let out = json!({
        "program": args.file,
        "runtime": "cluster",
        "processes": spec.processes,
        "workers_per_process": spec.workers,
        "hosts": hosts.map(agent::describe),
        "sites": sites,
        "threads_per_process": spec.threads,
        "dtype": job.dtype,
        "plan": spec.plan.to_sexpr(),
        "strategy": ran.label,
        "chosen_strategy": answer.alternatives.first().map(|a| a.label.clone()),
        "alternatives": alternatives,
        "network_floats_measured": job.network_floats,
        "network_floats_predicted": predicted_total,
        "floats_match": job.network_floats == predicted_total,
        "timings_ms": {
            "optimize": optimize_ms, "job": job_ms, "run": job.run_ms, "load": job.load_ms, "write": job.write_ms,
            "total": t_start.elapsed().as_secs_f64() * 1e3,
        },
        "operators": operators,
        "outputs": job.outputs,
        "warnings": answer.warnings,
    });
    Ok(serde_json::to_string_pretty(&out).expect("JSON"))
}
