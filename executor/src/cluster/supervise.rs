//! Job processes: the body of one ([`child_main`]), and the supervisor that
//! starts `N` of them on loopback and watches them ([`run_local`]).
//!
//! **Faults.** A job process that dies (killed, crashed) takes the job down
//! everywhere within seconds, with no process left behind:
//!
//! - the others see its TCP connections close: timely's communication
//!   threads panic ("timely communication error"), and the panic hook
//!   installed here ends the process at once with [`exit::LOST_PEER`]
//!   (instead of leaving the worker threads waiting for progress forever);
//! - a panic in a timely worker thread outside tra's guarded kernel calls
//!   ends the process too ([`exit::PANIC`]);
//! - a job process whose supervisor goes away (its standard input, a pipe
//!   from the supervisor, reaches end of file) stops ([`exit::ORPHANED`]);
//! - the supervisor polls its children every 3 ms: on the first failure it
//!   gives the others a moment to exit, kills those still running, reaps them
//!   all and reports the root cause ("worker 2 died (signal 9) — job
//!   failed"); a job that runs past its timeout is stopped the same way.

use super::job::{run_job, JobReport, JobSpec};
use serde::{Deserialize, Serialize};
use std::cell::Cell;
use std::io::Read;
use std::os::fd::AsFd;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The environment variable that carries a job process's [`Assignment`].
pub const ENV_ASSIGNMENT: &str = "TRA_CLUSTER_ASSIGNMENT";

/// Exit codes of job processes.
pub mod exit {
    /// The job ran; process 0 wrote the outputs.
    pub const OK: i32 = 0;
    /// The job failed with an error (a bad input, a kernel error): the
    /// message is in the process's result file.
    pub const JOB_ERROR: i32 = 2;
    /// The connection to another process of the job broke (it died).
    pub const LOST_PEER: i32 = 3;
    /// The supervisor went away.
    pub const ORPHANED: i32 = 4;
    /// A worker thread panicked.
    pub const PANIC: i32 = 101;
}

/// What one job process is to do.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Assignment {
    /// Its process index.
    pub process: usize,
    /// Every process's `host:port` (timely data connections).
    pub addresses: Vec<String>,
    /// The job's token (shared by its processes).
    pub token: u64,
    /// The job spec (JSON file).
    pub job: PathBuf,
    /// Where to write its [`Outcome`].
    pub result: PathBuf,
    /// Stop when standard input reaches end of file (the supervisor is gone).
    #[serde(default)]
    pub watch_stdin: bool,
}

/// What a job process leaves in its result file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Outcome {
    /// The process.
    pub process: usize,
    /// Whether its part ran.
    pub ok: bool,
    /// Why not.
    #[serde(default)]
    pub error: Option<String>,
    /// Process 0's report.
    #[serde(default)]
    pub report: Option<JobReport>,
}

thread_local! {
    /// Set while tra runs kernels under `catch_unwind` on a timely worker
    /// thread: a panic there becomes an error of the node, not a crash.
    pub(crate) static GUARDED: Cell<bool> = const { Cell::new(false) };
}

/// `catch_unwind`, telling the panic hook that the panic is handled.
pub(crate) fn guarded<R>(f: impl FnOnce() -> R) -> std::thread::Result<R> {
    let before = GUARDED.with(|g| g.replace(true));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    GUARDED.with(|g| g.set(before));
    r
}

/// Whether this process was started as a job process.
pub fn is_job_process() -> bool {
    std::env::var_os(ENV_ASSIGNMENT).is_some()
}

fn panic_text(info: &std::panic::PanicHookInfo<'_>) -> String {
    let p = info.payload();
    let msg = p
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic".into());
    match info.location() {
        Some(l) => format!("{msg} (at {}:{})", l.file(), l.line()),
        None => msg,
    }
}

/// The panic hook of a job process: a broken connection or an unhandled
/// panic on a timely thread ends the process at once (see the module docs).
pub fn install_panic_hook(process: usize) {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let thread = std::thread::current();
        let name = thread.name().unwrap_or("");
        let text = panic_text(info);
        if name.starts_with("timely:send")
            || name.starts_with("timely:recv")
            || text.contains("timely communication error")
        {
            eprintln!("tra worker {process}: lost the connection to another worker of the job ({text}); stopping");
            std::process::exit(exit::LOST_PEER);
        }
        if name.starts_with("timely:work") && !GUARDED.with(|g| g.get()) {
            eprintln!("tra worker {process}: a worker thread panicked: {text}; stopping");
            std::process::exit(exit::PANIC);
        }
        if !GUARDED.with(|g| g.get()) && !name.starts_with("tra-kernel") {
            default(info);
        }
    }));
}

fn write_outcome(path: &Path, o: &Outcome) {
    let tmp = path.with_extension("tmp");
    if std::fs::write(&tmp, serde_json::to_vec(o).expect("JSON")).is_ok() {
        let _ = std::fs::rename(&tmp, path);
    }
}

/// The body of a job process (`tra worker --child`, or a test binary that
/// re-executes itself): reads its [`Assignment`] from the environment, runs
/// its part of the job, writes its [`Outcome`], and answers the exit code.
pub fn child_main() -> i32 {
    let a: Assignment = match std::env::var(ENV_ASSIGNMENT)
        .map_err(|e| e.to_string())
        .and_then(|s| serde_json::from_str(&s).map_err(|e| e.to_string()))
    {
        Ok(a) => a,
        Err(e) => {
            eprintln!("tra worker: no valid job assignment in ${ENV_ASSIGNMENT}: {e}");
            return exit::JOB_ERROR;
        }
    };
    install_panic_hook(a.process);
    if a.watch_stdin {
        let process = a.process;
        std::thread::Builder::new()
            .name("tra-watch-stdin".into())
            .spawn(move || {
                let mut buf = [0u8; 64];
                let mut stdin = std::io::stdin();
                loop {
                    match stdin.read(&mut buf) {
                        Ok(0) | Err(_) => {
                            eprintln!("tra worker {process}: the job's supervisor went away; stopping");
                            std::process::exit(exit::ORPHANED);
                        }
                        Ok(_) => {}
                    }
                }
            })
            .expect("thread");
    }
    let spec: Result<JobSpec, String> = std::fs::read(&a.job)
        .map_err(|e| format!("cannot read the job {}: {e}", a.job.display()))
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| format!("the job {} is not valid: {e}", a.job.display())));
    let result = spec.and_then(|spec| run_job(&spec, a.process, &a.addresses, a.token));
    match result {
        Ok(report) => {
            write_outcome(&a.result, &Outcome { process: a.process, ok: true, error: None, report });
            exit::OK
        }
        Err(e) => {
            eprintln!("tra worker {}: {e}", a.process);
            write_outcome(&a.result, &Outcome { process: a.process, ok: false, error: Some(e), report: None });
            exit::JOB_ERROR
        }
    }
}

/// How to start a job process: a program and its arguments (the
/// [`Assignment`] goes in the environment).
#[derive(Debug, Clone)]
pub struct Launcher {
    /// The program (`tra`, or a test binary).
    pub program: PathBuf,
    /// Its arguments (`["worker", "--child"]`).
    pub args: Vec<String>,
    /// More environment.
    pub env: Vec<(String, String)>,
    /// Send the job processes' standard output to our standard error (timely
    /// reports connection retries there); otherwise discard it.
    pub stdout_to_stderr: bool,
}

impl Launcher {
    /// `tra worker --child` of the running `tra` binary.
    pub fn current_tra() -> Result<Launcher, String> {
        let program = std::env::current_exe().map_err(|e| format!("cannot find the tra binary: {e}"))?;
        Ok(Launcher { program, args: vec!["worker".into(), "--child".into()], env: Vec::new(), stdout_to_stderr: true })
    }

    /// Start one job process.
    pub fn spawn(&self, a: &Assignment) -> Result<Child, String> {
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .env(ENV_ASSIGNMENT, serde_json::to_string(a).expect("JSON"))
            .stdin(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        // Job processes print nothing on purpose, but timely reports connection
        // retries on standard output: send that to our standard error.
        match std::io::stderr().as_fd().try_clone_to_owned() {
            Ok(fd) if self.stdout_to_stderr => cmd.stdout(Stdio::from(fd)),
            _ => cmd.stdout(Stdio::null()),
        };
        cmd.spawn().map_err(|e| format!("cannot start {}: {e}", self.program.display()))
    }
}

/// A job process's end, classified.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The process.
    pub process: usize,
    /// How it ended.
    pub status: Option<ExitStatus>,
    /// The message for the user.
    pub message: String,
    /// Lower is more likely the root cause.
    pub rank: u8,
}

/// Describe how job process `i` ended (`None` when it succeeded).
pub fn classify(i: usize, status: ExitStatus, result_file: Option<&Path>) -> Option<Failure> {
    if status.success() {
        return None;
    }
    let reported = result_file
        .and_then(|p| std::fs::read(p).ok())
        .and_then(|b| serde_json::from_slice::<Outcome>(&b).ok())
        .and_then(|o| o.error);
    let (message, rank) = if let Some(sig) = status.signal() {
        (format!("worker {i} died (signal {sig}) — job failed"), 0)
    } else {
        match status.code() {
            Some(exit::JOB_ERROR) => (reported.unwrap_or_else(|| format!("worker {i} failed — job failed")), 2),
            Some(exit::LOST_PEER) => (format!("worker {i} lost its connection to another worker — job failed"), 4),
            Some(exit::ORPHANED) => (format!("worker {i} stopped: its supervisor went away — job failed"), 3),
            Some(exit::PANIC) => {
                (format!("worker {i} crashed (a worker thread panicked; see its message above) — job failed"), 1)
            }
            Some(c) => (format!("worker {i} exited with status {c} — job failed"), 1),
            None => (format!("worker {i} ended abnormally — job failed"), 1),
        }
    };
    Some(Failure { process: i, status: Some(status), message, rank })
}

/// Watch job processes until all succeed, one fails, the timeout passes or
/// `cancel` is set. On failure every process still running is killed, and
/// every process is reaped before this returns.
pub fn watch(
    children: &mut [(usize, Child)],
    results: &[PathBuf],
    timeout: Duration,
    cancel: &AtomicBool,
) -> Result<(), Failure> {
    let start = Instant::now();
    let mut done: Vec<Option<ExitStatus>> = vec![None; children.len()];
    let mut failures: Vec<Failure> = Vec::new();
    let mut first_failure: Option<Instant> = None;
    let mut stop_reason: Option<Failure> = None;
    loop {
        for (k, (i, child)) in children.iter_mut().enumerate() {
            if done[k].is_some() {
                continue;
            }
            if let Ok(Some(st)) = child.try_wait() {
                done[k] = Some(st);
                if let Some(f) = classify(*i, st, results.get(k).map(|p| p.as_path())) {
                    failures.push(f);
                    first_failure.get_or_insert_with(Instant::now);
                }
            }
        }
        if done.iter().all(|d| d.is_some()) {
            break;
        }
        if let Some(t) = first_failure {
            // Let the others exit on their own for a moment (their statuses
            // tell the root cause apart from its consequences), then stop them.
            if t.elapsed() > Duration::from_millis(300) {
                break;
            }
        } else if cancel.load(Ordering::SeqCst) {
            stop_reason =
                Some(Failure { process: usize::MAX, status: None, message: "the job was cancelled".into(), rank: 5 });
            break;
        } else if start.elapsed() > timeout {
            stop_reason = Some(Failure {
                process: usize::MAX,
                status: None,
                message: format!(
                    "the job did not finish within {:.0} s (--timeout); stopped its {} worker process(es)",
                    timeout.as_secs_f64(),
                    children.len()
                ),
                rank: 5,
            });
            break;
        }
        std::thread::sleep(Duration::from_millis(3));
    }
    // Stop and reap everything still running.
    for (k, (_, child)) in children.iter_mut().enumerate() {
        if done[k].is_none() {
            let _ = child.kill();
        }
        let _ = child.wait();
    }
    if let Some(f) = failures.into_iter().min_by_key(|f| (f.rank, f.process)) {
        return Err(f);
    }
    match stop_reason {
        Some(f) => Err(f),
        None => Ok(()),
    }
}

/// A fresh directory for a job's files.
pub fn job_dir(token: u64) -> Result<PathBuf, String> {
    let dir = std::env::temp_dir().join(format!("tra-job-{}-{token:016x}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    Ok(dir)
}

/// Run a job as `spec.processes` processes on this machine, talking over
/// loopback. `on_started` gets the process ids once all are started (tests
/// use it to kill one). Answers process 0's report.
pub fn run_local(
    spec: &JobSpec,
    launcher: &Launcher,
    timeout: Duration,
    mut on_started: impl FnMut(&[u32]),
) -> Result<JobReport, String> {
    if spec.processes == 0 || spec.workers == 0 {
        return Err("a job needs at least one process and one worker per process".into());
    }
    let token: u64 = rand::random();
    let dir = job_dir(token)?;
    let result = (|| {
        let job = dir.join("job.json");
        std::fs::write(&job, serde_json::to_vec(spec).expect("JSON"))
            .map_err(|e| format!("cannot write {}: {e}", job.display()))?;
        let addresses = super::free_loopback_addresses(spec.processes)?;
        let results: Vec<PathBuf> = (0..spec.processes).map(|i| dir.join(format!("result-{i}.json"))).collect();
        let mut children: Vec<(usize, Child)> = Vec::new();
        for (i, res) in results.iter().enumerate() {
            let a = Assignment {
                process: i,
                addresses: addresses.clone(),
                token,
                job: job.clone(),
                result: res.clone(),
                watch_stdin: true,
            };
            match launcher.spawn(&a) {
                Ok(c) => children.push((i, c)),
                Err(e) => {
                    for (_, c) in children.iter_mut() {
                        let _ = c.kill();
                        let _ = c.wait();
                    }
                    return Err(e);
                }
            }
        }
        let pids: Vec<u32> = children.iter().map(|(_, c)| c.id()).collect();
        on_started(&pids);
        watch(&mut children, &results, timeout, &AtomicBool::new(false)).map_err(|f| {
            super::job::remove_partial_outputs(spec, token);
            f.message
        })?;
        let outcome: Outcome = std::fs::read(&results[0])
            .map_err(|e| format!("worker 0 left no result: {e}"))
            .and_then(|b| serde_json::from_slice(&b).map_err(|e| format!("worker 0 left an unreadable result: {e}")))?;
        match (outcome.ok, outcome.report) {
            (true, Some(r)) => Ok(r),
            (_, _) => Err(outcome.error.unwrap_or_else(|| "worker 0 reported nothing".into())),
        }
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}
