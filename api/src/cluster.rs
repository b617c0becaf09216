//! The command line of the cluster runtime:
//!
//! - `tra run FILE … --processes N [--workers W]`: optimize for `N × W`
//!   sites, start `N` job processes on this machine (loopback), watch them,
//!   answer the same JSON summary as `tra run` on threads;
//! - `tra run FILE … --hosts hosts.txt`: the same on the `tra worker`s of a
//!   host file (one per machine, or a local cluster from `tra cluster up`);
//! - `tra worker --process I --hosts hosts.txt`: the worker of machine `I`;
//!   `tra worker --child` is a job process (started by the two above);
//! - `tra cluster up|status|down`: `N` warm workers on this machine;
//! - `tra secret FILE`: a new cluster secret;
//! - [`ClusterTarget`]: `tra serve --hosts FILE` runs `POST /v1/execute` there.
//!
//! The executor side is `tra_executor::cluster`.

use crate::run::{read_program, report, RunArgs};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tra_executor::cluster::agent::{self, AgentEvent, Host, Request, WorkerConfig};
use tra_executor::cluster::auth::{Secret, ENV_SECRET};
use tra_executor::cluster::confine::DataDirs;
use tra_executor::cluster::job::{JobReport, JobSpec, LayoutSpec, DEFAULT_PEER_TIMEOUT_S};
use tra_executor::cluster::supervise::{self, Launcher};
use tra_optimizer::check::check_plan;
use tra_optimizer::cost::{plan_report, Weights};
use tra_optimizer::{Cluster, Program};

/// The cluster options of `tra run` (flatten them into its arguments).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ClusterArgs {
    /// Run on N fresh processes of this machine, talking over loopback
    /// (timely's cluster mode); sites = N × --workers. Every process writes
    /// its own blocks of an output into a temporary file, put in place once
    /// every process has succeeded; Ctrl-C or a failure leaves no file.
    #[arg(long, value_name = "N", conflicts_with = "hosts")]
    pub processes: Option<usize>,
    /// Run on the `tra worker`s of a host file (one line `HOST:PORT` per
    /// process; `tra cluster up` writes one for this machine). Input and
    /// output paths must be valid on every machine and inside the workers'
    /// --data-dir: every process writes its own blocks of an output, and
    /// worker 0 puts the output in place once every process has succeeded.
    #[arg(long, value_name = "HOSTS")]
    pub hosts: Option<PathBuf>,
    /// The cluster secret for --hosts (default: $TRA_CLUSTER_SECRET, or the
    /// file `secret` beside the host file).
    #[arg(long, value_name = "FILE", requires = "hosts")]
    pub secret_file: Option<PathBuf>,
    /// Sites (timely worker threads) per process (default: --sites divided
    /// by the processes, or 1).
    #[arg(long, value_name = "W")]
    pub workers: Option<usize>,
    /// Stop a cluster job that runs longer than this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 3600.0)]
    pub timeout: f64,
    /// Fail the job when a process hears nothing from another for this many
    /// seconds (a stopped or frozen process: `worker 2 stopped responding`).
    #[arg(long, value_name = "SECONDS", default_value_t = DEFAULT_PEER_TIMEOUT_S)]
    pub peer_timeout: f64,
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

/// The cluster secret: `--secret-file`, else `$TRA_CLUSTER_SECRET`, else
/// the file `secret` beside the host file.
pub fn cluster_secret(flag: Option<&Path>, hosts_file: &Path) -> Result<Secret, String> {
    if let Some(f) = flag {
        return Secret::read_file(f).map_err(|e| e.to_string());
    }
    if let Ok(hex) = std::env::var(ENV_SECRET) {
        return Secret::from_hex(&hex, &format!("${ENV_SECRET}")).map_err(|e| e.to_string());
    }
    let beside = hosts_file.parent().unwrap_or(Path::new(".")).join("secret");
    if beside.exists() {
        return Secret::read_file(&beside).map_err(|e| e.to_string());
    }
    Err(format!(
        "no cluster secret: pass --secret-file FILE (make one with `tra secret FILE` and copy it to every machine), \
         set ${ENV_SECRET}, or put it in {}",
        beside.display()
    ))
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
    /// The cluster secret (default: $TRA_CLUSTER_SECRET, or the file
    /// `secret` beside the host file). Jobs that do not prove it are refused.
    #[arg(long, value_name = "FILE")]
    pub secret_file: Option<PathBuf>,
    /// A directory jobs may read inputs from and write outputs to (repeat
    /// for more; default: the current directory). Paths outside, with `..`,
    /// or through symbolic links leading outside are refused.
    #[arg(long = "data-dir", value_name = "DIR")]
    pub data_dirs: Vec<PathBuf>,
    /// Listen on this address instead of the host file's (for the job port
    /// and the data connections), e.g. `0.0.0.0` for every interface.
    #[arg(long, value_name = "HOST")]
    pub bind: Option<String>,
    /// The longest a job may run here, whatever the client asks (seconds).
    #[arg(long, value_name = "SECONDS", default_value_t = 86_400.0)]
    pub max_job_seconds: f64,
    /// Be one job process (started by `tra run --processes` or by a worker).
    #[arg(long, hide = true)]
    pub child: bool,
}

/// `tra worker`: serve jobs as process `--process` of the host file, or
/// (with `--child`) be a job process.
pub fn worker_command(args: WorkerArgs) -> Result<(), String> {
    crate::server::init_tracing();
    if args.child || supervise::is_job_process() {
        std::process::exit(supervise::child_main());
    }
    let (Some(process), Some(hosts_file)) = (args.process, args.hosts) else {
        return Err("tra worker needs --process I and --hosts FILE".into());
    };
    // The GEMM its job processes will use (logged), or the error that it is missing.
    let gemm = tra_executor::threads::kernels::gemm_backend().map_err(|e| format!("worker {process}: {e}"))?;
    tracing::info!(process, "GEMM: {}", gemm.describe());
    tracing::debug!(process, "GEMM in full: {}", gemm.details());
    let hosts = agent::read_hosts(&hosts_file)?;
    let secret = cluster_secret(args.secret_file.as_deref(), &hosts_file)?;
    let dirs = if args.data_dirs.is_empty() {
        vec![std::env::current_dir().map_err(|e| format!("the current directory: {e}"))?]
    } else {
        args.data_dirs
    };
    agent::serve(WorkerConfig {
        process,
        hosts,
        secret,
        data_dirs: DataDirs::new(&dirs)?,
        bind: args.bind,
        launcher: Launcher::current_tra()?,
        max_job_seconds: args.max_job_seconds,
        allow_test_hooks: std::env::var_os("TRA_CLUSTER_ALLOW_TEST_HOOKS").is_some(),
    })
}

/// Arguments of `tra secret`.
#[derive(clap::Args, Debug, Clone)]
pub struct SecretArgs {
    /// Where to write the new secret (mode 0600; an existing file is kept).
    pub file: PathBuf,
}

/// `tra secret FILE`: a fresh cluster secret.
pub fn secret_command(args: SecretArgs) -> Result<String, String> {
    Secret::write_new_file(&args.file).map_err(|e| e.to_string())?;
    Ok(format!(
        "wrote a new cluster secret to {} (mode 600): copy it to every machine of the cluster and pass it with --secret-file",
        args.file.display()
    ))
}

/// `tra cluster …`.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum ClusterCommand {
    /// Start N warm workers on this machine (loopback), with a fresh secret
    /// and a host file in --dir; `tra run --hosts DIR/hosts.txt` and
    /// `tra serve --hosts DIR/hosts.txt` use them.
    Up {
        /// Worker processes.
        #[arg(long, value_name = "N")]
        processes: usize,
        /// Where the host file, the secret and the logs go.
        #[arg(long, value_name = "DIR", default_value = ".tra-cluster")]
        dir: PathBuf,
        /// A directory jobs may read and write (repeat for more; default:
        /// the current directory); DIR/scratch is always one.
        #[arg(long = "data-dir", value_name = "DIR")]
        data_dirs: Vec<PathBuf>,
    },
    /// Say whether the workers of a cluster are up and busy.
    Status {
        /// The cluster's directory.
        #[arg(long, value_name = "DIR", default_value = ".tra-cluster")]
        dir: PathBuf,
    },
    /// Stop the workers of a cluster.
    Down {
        /// The cluster's directory.
        #[arg(long, value_name = "DIR", default_value = ".tra-cluster")]
        dir: PathBuf,
    },
}

fn statuses(hosts: &[Host], secret: &Secret, r: &Request) -> Vec<Result<AgentEvent, String>> {
    hosts.iter().enumerate().map(|(i, h)| agent::ask(i, h, secret, r)).collect()
}

/// `tra cluster up|status|down`.
pub fn cluster_command(cmd: ClusterCommand) -> Result<String, String> {
    use serde_json::json;
    match cmd {
        ClusterCommand::Up { processes, dir, data_dirs } => {
            if processes == 0 {
                return Err("--processes must be at least 1".into());
            }
            let hosts_file = dir.join("hosts.txt");
            let secret_file = dir.join("secret");
            if let (Ok(hosts), Ok(secret)) = (agent::read_hosts(&hosts_file), Secret::read_file(&secret_file)) {
                if statuses(&hosts, &secret, &Request::Status).iter().any(|s| s.is_ok()) {
                    return Err(format!(
                        "a cluster is already up in {} (stop it with `tra cluster down --dir {}`)",
                        dir.display(),
                        dir.display()
                    ));
                }
            }
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir.join("scratch"))
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            let _ = std::fs::remove_file(&secret_file);
            let secret = Secret::write_new_file(&secret_file).map_err(|e| e.to_string())?;
            let ports = tra_executor::cluster::free_loopback_addresses(2 * processes)?;
            let lines: Vec<String> = (0..processes)
                .map(|i| format!("{} {}", ports[i], ports[processes + i].rsplit_once(':').expect("host:port").1))
                .collect();
            std::fs::write(&hosts_file, format!("# tra cluster up --processes {processes}\n{}\n", lines.join("\n")))
                .map_err(|e| format!("cannot write {}: {e}", hosts_file.display()))?;
            let hosts = agent::read_hosts(&hosts_file)?;
            let mut dirs = if data_dirs.is_empty() {
                vec![std::env::current_dir().map_err(|e| format!("the current directory: {e}"))?]
            } else {
                data_dirs
            };
            dirs.push(dir.join("scratch"));
            DataDirs::new(&dirs)?;
            let tra = std::env::current_exe().map_err(|e| format!("cannot find the tra binary: {e}"))?;
            let mut pids = Vec::new();
            for i in 0..processes {
                let log_path = dir.join(format!("worker-{i}.log"));
                let log = std::fs::File::create(&log_path)
                    .map_err(|e| format!("cannot create {}: {e}", log_path.display()))?;
                let mut cmd = std::process::Command::new(&tra);
                cmd.args(["worker", "--process", &i.to_string(), "--hosts"])
                    .arg(&hosts_file)
                    .arg("--secret-file")
                    .arg(&secret_file);
                for d in &dirs {
                    cmd.arg("--data-dir").arg(d);
                }
                use std::os::unix::process::CommandExt;
                let child = cmd
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::null())
                    .stderr(log)
                    .process_group(0)
                    .spawn()
                    .map_err(|e| format!("cannot start worker {i}: {e}"))?;
                pids.push(child.id());
            }
            // Ready when every worker answers.
            let t = Instant::now();
            loop {
                let st = statuses(&hosts, &secret, &Request::Status);
                if st.iter().all(|s| s.is_ok()) {
                    break;
                }
                if t.elapsed() > Duration::from_secs(20) {
                    let _ = statuses(&hosts, &secret, &Request::Shutdown);
                    let why: Vec<String> = st.into_iter().filter_map(|s| s.err()).collect();
                    return Err(format!(
                        "the workers did not come up within 20 s ({}); see {}/worker-*.log",
                        why.join("; "),
                        dir.display()
                    ));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            Ok(serde_json::to_string_pretty(&json!({
                "processes": processes,
                "hosts": hosts_file.display().to_string(),
                "secret_file": secret_file.display().to_string(),
                "worker_pids": pids,
                "data_dirs": dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>(),
                "run": format!("tra run PROGRAM --input … --output … --hosts {}", hosts_file.display()),
                "serve": format!("tra serve --hosts {}", hosts_file.display()),
                "stop": format!("tra cluster down --dir {}", dir.display()),
            }))
            .expect("JSON"))
        }
        ClusterCommand::Status { ref dir } | ClusterCommand::Down { ref dir } => {
            let down = matches!(cmd, ClusterCommand::Down { .. });
            let hosts_file = dir.join("hosts.txt");
            let hosts = agent::read_hosts(&hosts_file)?;
            let secret = cluster_secret(None, &hosts_file)?;
            let r = if down { Request::Shutdown } else { Request::Status };
            let answers = statuses(&hosts, &secret, &r);
            if down {
                // Gone once the job ports no longer answer.
                let t = Instant::now();
                while t.elapsed() < Duration::from_secs(5)
                    && statuses(&hosts, &secret, &Request::Status).iter().any(|s| s.is_ok())
                {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            let rows: Vec<serde_json::Value> = answers
                .into_iter()
                .enumerate()
                .map(|(i, a)| match a {
                    Ok(AgentEvent::Status { pid, busy, jobs, job_process, data_dirs, .. }) => json!({
                        "process": i, "up": !down, "pid": pid, "busy": busy, "jobs": jobs,
                        "job_process": job_process, "data_dirs": data_dirs, "job_port": hosts[i].control,
                    }),
                    Ok(other) => json!({"process": i, "up": !down, "answer": format!("{other:?}")}),
                    Err(e) => json!({"process": i, "up": false, "error": e, "job_port": hosts[i].control}),
                })
                .collect();
            Ok(serde_json::to_string_pretty(&json!({"hosts": hosts_file.display().to_string(), "workers": rows}))
                .expect("JSON"))
        }
    }
}

fn absolute(p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir().map(|d| d.join(p)).unwrap_or_else(|_| p.to_path_buf())
    }
}

/// Whether every host of a host file is this machine's loopback (one
/// machine: its processes share its cores).
pub fn all_loopback(hosts: &[Host]) -> bool {
    hosts.iter().all(|h| {
        let host = h.data.rsplit_once(':').map(|(a, _)| a).unwrap_or("");
        host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
    })
}

/// Test hooks read from the environment by the job's submitter.
fn test_hooks() -> (u64, bool) {
    let stall = std::env::var("TRA_CLUSTER_TEST_STALL_MS").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
    (stall, std::env::var_os("TRA_CLUSTER_TEST_PANIC").is_some())
}

/// The signal that interrupted `tra run --processes`, once one has.
fn interrupt_flag() -> Arc<AtomicUsize> {
    let flag = Arc::new(AtomicUsize::new(0));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM, signal_hook::consts::SIGHUP] {
        let _ = signal_hook::flag::register_usize(sig, flag.clone(), sig as usize);
    }
    flag
}

fn signal_name(sig: usize) -> &'static str {
    match sig as i32 {
        signal_hook::consts::SIGINT => "SIGINT",
        signal_hook::consts::SIGTERM => "SIGTERM",
        signal_hook::consts::SIGHUP => "SIGHUP",
        _ => "a signal",
    }
}

/// `tra run` with `--processes` or `--hosts`: the JSON summary.
pub fn run_cluster_command(args: &RunArgs, cluster: &ClusterArgs) -> Result<String, String> {
    let t_start = Instant::now();
    crate::server::init_tracing_with("warn,egg=warn");
    let hosts = match &cluster.hosts {
        Some(h) => Some(agent::read_hosts(h)?),
        None => None,
    };
    let secret = match &cluster.hosts {
        Some(h) => Some(cluster_secret(cluster.secret_file.as_deref(), h)?),
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
    if !(cluster.peer_timeout >= 0.1 && cluster.peer_timeout <= 3600.0) {
        return Err(format!("--peer-timeout {}: must be between 0.1 and 3600 seconds", cluster.peer_timeout));
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
    args.cost.apply(&mut p)?;
    let (inputs, outputs, dtype) = crate::run::files_and_dtype(&p, args)?;
    let layouts = crate::run::output_layouts(&p, args, &outputs)?;

    let choice = crate::run::PlanChoice { plan: cluster.plan.clone(), alternative: cluster.alternative.clone() };
    // A given plan is run as it is: nothing to optimize (as on threads).
    let (answer, optimize_ms) = match choice.plan {
        Some(_) => (None, 0.0),
        None => crate::run::optimize_timed(&p, args.strict, &args.bounds).map(|(a, ms)| (Some(a), ms))?,
    };
    let chosen = crate::run::choose_plan(&p, answer.as_ref(), &choice)?;
    let (plan, label, predicted_floats) = (chosen.plan, chosen.label, chosen.network_floats);
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let threads = match (args.threads, &hosts) {
        (Some(t), _) => Some(t),
        // Processes of one machine share its cores.
        (None, None) => Some((cores / processes).max(1)),
        (None, Some(h)) if all_loopback(h) => Some((cores / processes).max(1)),
        (None, Some(_)) => None,
    };
    let (stall_ms, test_panic) = test_hooks();
    let spec = JobSpec {
        plan: plan.clone(),
        processes,
        workers,
        dtype: dtype.name().to_string(),
        inputs: inputs.iter().map(|(n, p)| (n.clone(), absolute(p))).collect(),
        outputs: outputs.iter().map(|(n, p)| (n.clone(), absolute(p))).collect(),
        dense: false,
        dense_outputs: layouts
            .iter()
            .filter(|(_, &l)| l == tra_executor::npy::Layout::Dense)
            .map(|(n, _)| n.clone())
            .collect(),
        layout: LayoutSpec::RoundRobin,
        fuse: true,
        threads,
        stall_ms,
        connect_timeout_s: 30.0,
        peer_timeout_s: cluster.peer_timeout,
        test_panic,
    };
    let timeout = Duration::from_secs_f64(cluster.timeout.max(1.0));
    let t_run = Instant::now();
    let job: JobReport = match (&hosts, &secret) {
        (Some(h), Some(secret)) => agent::run_hosts(&spec, h, secret, timeout)?,
        _ => {
            // Ctrl-C, SIGTERM, SIGHUP: stop the job processes, remove the
            // temporary outputs, exit as the signal asks.
            let interrupted = interrupt_flag();
            let stop = || match interrupted.load(Ordering::SeqCst) {
                0 => None,
                sig => Some(format!("interrupted by {}", signal_name(sig))),
            };
            let result = supervise::run_local(&spec, &Launcher::current_tra()?, timeout, &stop, |_| {});
            let sig = interrupted.load(Ordering::SeqCst);
            match result {
                Err(e) if sig != 0 => {
                    eprintln!("{e}: stopped the {processes} job processes; no output was written");
                    std::process::exit(128 + sig as i32);
                }
                r => r?,
            }
        }
    };
    let job_ms = t_run.elapsed().as_secs_f64() * 1e3;
    let ran = Ran { label, predicted_floats };
    summary(&p, answer.as_ref(), &ran, &spec, &job, args, optimize_ms, job_ms, t_start, hosts.as_deref())
}

/// The plan that ran: its label and predicted floats.
struct Ran {
    label: Option<String>,
    predicted_floats: u64,
}

#[allow(clippy::too_many_arguments)]
fn summary(
    p: &Program,
    answer: Option<&tra_optimizer::optimize::OptimizeAnswer>,
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
    // A run of a given plan (`--plan`) has no optimizer answer: no alternatives, no warnings.
    let alternatives: Vec<serde_json::Value> = answer.map(crate::summary::alternatives_json).unwrap_or_default();
    let out = json!({
        "program": args.file,
        "runtime": "cluster",
        "processes": spec.processes,
        "workers_per_process": spec.workers,
        "hosts": hosts.map(agent::describe),
        "sites": sites,
        "threads_per_process": spec.threads,
        "dtype": job.dtype,
        "gemm": job.gemm,
        "gemm_detail": job.gemm_detail,
        "plan": spec.plan.to_sexpr(),
        "strategy": ran.label,
        "chosen_strategy": answer.and_then(|a| a.alternatives.first()).map(|a| a.label.clone()),
        "alternatives": alternatives,
        "cost_model": answer.map(|a| a.stats.cost_model),
        "network_floats_measured": job.network_floats,
        "network_floats_predicted": predicted_total,
        "floats_match": job.network_floats == predicted_total,
        "wire": job.wire,
        "cpu_ms_per_process": job.cpu_ms,
        // The largest share of a machine's processors others (or the
        // hypervisor) took while the job ran: how much to doubt its timings.
        "others_busy": tra_executor::cluster::machine::others_busy(&job.machines),
        "timings_ms": {
            "optimize": optimize_ms, "job": job_ms, "run": job.run_ms, "load": job.load_ms, "write": job.write_ms,
            "total": t_start.elapsed().as_secs_f64() * 1e3,
        },
        "operators": operators,
        "outputs": job.outputs,
        "warnings": answer.map_or(&[][..], |a| &a.warnings),
    });
    Ok(serde_json::to_string_pretty(&out).expect("JSON"))
}

/// The cluster options of `tra serve`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ServeClusterArgs {
    /// Run `POST /v1/execute` on the warm `tra worker`s of this host file
    /// (`tra cluster up` makes one for this machine) instead of threads.
    #[arg(long = "hosts", value_name = "HOSTS")]
    pub hosts: Option<PathBuf>,
    /// The cluster secret (default: $TRA_CLUSTER_SECRET, or `secret` beside the host file).
    #[arg(long, value_name = "FILE", requires = "hosts")]
    pub secret_file: Option<PathBuf>,
    /// Where request data goes for the workers to read: a directory every
    /// worker sees at the same path, inside their --data-dir (default:
    /// `scratch` beside the host file).
    #[arg(long, value_name = "DIR", requires = "hosts")]
    pub scratch_dir: Option<PathBuf>,
}

impl ServeClusterArgs {
    /// The cluster to execute on, if one is named.
    pub fn target(&self) -> Result<Option<Arc<ClusterTarget>>, String> {
        match &self.hosts {
            None => Ok(None),
            Some(h) => ClusterTarget::open(h, self.secret_file.as_deref(), self.scratch_dir.as_deref())
                .map(|t| Some(Arc::new(t))),
        }
    }
}

/// A cluster that `tra serve --hosts FILE` runs `POST /v1/execute` on: the
/// request's data goes to `.npy` files in a scratch directory that every
/// worker can read (and that lies in their `--data-dir`s), the job runs on
/// the warm workers, the outputs are read back, and the files removed.
#[derive(Debug)]
pub struct ClusterTarget {
    hosts: Vec<Host>,
    hosts_file: PathBuf,
    secret: Secret,
    scratch: PathBuf,
    timeout: Duration,
}

impl ClusterTarget {
    /// The workers of a host file, their secret (`--secret-file`, or as for
    /// `tra run --hosts`), and the scratch directory (default: `scratch`
    /// beside the host file, as `tra cluster up` makes it).
    pub fn open(
        hosts_file: &Path,
        secret_file: Option<&Path>,
        scratch: Option<&Path>,
    ) -> Result<ClusterTarget, String> {
        let hosts = agent::read_hosts(hosts_file)?;
        let secret = cluster_secret(secret_file, hosts_file)?;
        let scratch = match scratch {
            Some(s) => s.to_path_buf(),
            None => hosts_file.parent().unwrap_or(Path::new(".")).join("scratch"),
        };
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&scratch)
            .map_err(|e| format!("the scratch directory {}: {e}", scratch.display()))?;
        let scratch =
            scratch.canonicalize().map_err(|e| format!("the scratch directory {}: {e}", scratch.display()))?;
        Ok(ClusterTarget {
            hosts,
            hosts_file: absolute(hosts_file),
            secret,
            scratch,
            timeout: Duration::from_secs(3600),
        })
    }

    /// Processes of the cluster.
    pub fn processes(&self) -> usize {
        self.hosts.len()
    }

    /// For the log: the host file and its processes.
    pub fn describe(&self) -> String {
        format!("{} ({} processes: {})", self.hosts_file.display(), self.hosts.len(), agent::describe(&self.hosts))
    }

    /// Run a plan for `sites` sites (a multiple of the processes) on
    /// in-memory inputs, in `f64`: process 0's report and the outputs.
    pub fn execute(
        &self,
        plan: &tra_optimizer::Plan,
        sites: usize,
        inputs: &BTreeMap<String, tra_executor::reference::Relation>,
    ) -> Result<(JobReport, BTreeMap<String, tra_executor::reference::Relation>), String> {
        use tra_executor::npy::{self, Layout};
        use tra_executor::threads::{Pool, TRelation};
        let processes = self.hosts.len();
        if sites == 0 || !sites.is_multiple_of(processes) {
            return Err(format!(
                "this server runs on a cluster of {processes} processes: cluster.sites ({sites}) must be a multiple of {processes}"
            ));
        }
        let typed =
            check_plan(plan, sites).map_err(|e| format!("internal error: the plan does not check: {}", report(&e)))?;
        let dir = self.scratch.join(format!("execute-{:016x}", rand::random::<u64>()));
        std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        struct Remove<'a>(&'a Path);
        impl Drop for Remove<'_> {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(self.0);
            }
        }
        let _remove = Remove(&dir);
        let pool = Pool::<f64>::new();
        let mut in_files = BTreeMap::new();
        for (name, rel) in inputs {
            let t = &typed.types[name];
            let path = dir.join(format!("in-{name}.npy"));
            let r = TRelation::from_relation(rel, &pool);
            npy::write_relation(&path, &r, &t.rel.frontier, &t.rel.array_bounds, Layout::Relation)
                .map_err(|e| format!("input `{name}`: {e}"))?;
            in_files.insert(name.clone(), path);
        }
        let out_files: BTreeMap<String, PathBuf> =
            plan.outputs.iter().map(|o| (o.clone(), dir.join(format!("out-{o}.npy")))).collect();
        let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        let spec = JobSpec {
            plan: plan.clone(),
            processes,
            workers: sites / processes,
            dtype: "f64".into(),
            inputs: in_files,
            outputs: out_files.clone(),
            dense: false,
            dense_outputs: Default::default(),
            layout: LayoutSpec::RoundRobin,
            fuse: true,
            threads: all_loopback(&self.hosts).then_some((cores / processes).max(1)),
            stall_ms: 0,
            connect_timeout_s: 30.0,
            peer_timeout_s: DEFAULT_PEER_TIMEOUT_S,
            test_panic: false,
        };
        let job = agent::run_hosts(&spec, &self.hosts, &self.secret, self.timeout)?;
        let mut outputs = BTreeMap::new();
        for (name, path) in &out_files {
            let t = &typed.types[name];
            let (rel, _, _) = npy::read_relation::<f64>(path, &t.rel.frontier, &t.rel.array_bounds, &pool)
                .map_err(|e| format!("output `{name}`: {e}"))?;
            outputs.insert(name.clone(), rel.to_relation());
        }
        Ok((job, outputs))
    }
}
