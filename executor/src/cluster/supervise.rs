//! Job processes: the body of one ([`child_main`]), a handle on one
//! ([`JobHost`]), watching a job's processes ([`watch`]), and running a job
//! as `N` fresh processes on loopback ([`run_local`]).
//!
//! **A job process serves jobs.** It reads [`Assignment`]s, one JSON line
//! each, from its standard input and answers an [`Outcome`] line for each on
//! its standard output, then waits for the next: a `tra worker` keeps one
//! started between jobs, with its kernel threads and buffer pools warm;
//! `tra run --processes N` starts `N` for one job. Its standard input is a
//! pipe from its supervisor: at end of file (the supervisor is gone, even
//! killed with SIGKILL) it removes what the current job wrote and stops.
//!
//! **Faults.** A job process whose job fails cleanly (a bad input, a kernel
//! error, a panic inside a kernel) answers the error and serves the next job.
//! One that cannot go on ends at once, after removing the job's temporary
//! output files and answering why:
//!
//! - a broken connection to another process of the job (timely's
//!   communication threads panic): [`exit::LOST_PEER`];
//! - another process silent for the job's `peer_timeout_s` (see
//!   [`super::heartbeat`]): [`exit::PEER_SILENT`], "worker 2 stopped
//!   responding";
//! - a panic on a timely worker thread outside tra's guarded kernel calls:
//!   [`exit::PANIC`];
//! - its supervisor gone: [`exit::ORPHANED`].
//!
//! The supervisor polls every 3 ms: on the first failure it gives the other
//! processes a moment to answer (their reasons tell the root cause from its
//! consequences), stops the ones still running, and reports the root cause
//! ("worker 2 died (signal 9) — job failed").

use super::auth::Secret;
use super::job::{remove_partial_outputs, run_job, JobReport, JobSpec, Membership};
use serde::{Deserialize, Serialize};
use std::cell::Cell;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::FromRawFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// The environment variable that marks a process as a job process.
pub const ENV_JOB_PROCESS: &str = "TRA_CLUSTER_JOB_PROCESS";

/// The prefix of an [`Outcome`] line on a job process's standard output
/// (other lines, such as a test harness's, are passed on to standard error).
const OUTCOME_PREFIX: &str = "tra-outcome ";

/// Exit codes of job processes.
pub mod exit {
    /// Its supervisor closed its input between jobs.
    pub const OK: i32 = 0;
    /// It could not start serving jobs.
    pub const BAD_START: i32 = 2;
    /// The connection to another process of the job broke (it died).
    pub const LOST_PEER: i32 = 3;
    /// The supervisor went away during a job.
    pub const ORPHANED: i32 = 4;
    /// Another process of the job stopped responding.
    pub const PEER_SILENT: i32 = 5;
    /// A worker thread panicked.
    pub const PANIC: i32 = 101;
}

/// One process's part of one job.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Assignment {
    /// Its process index.
    pub process: usize,
    /// Every process's `host:port` (timely data connections).
    pub addresses: Vec<String>,
    /// The job's token (shared by its processes).
    pub token: u64,
    /// The job's key, hex ([`Secret::job_key`]).
    pub key: String,
    /// Listen for the other processes here instead of at `addresses[process]`.
    #[serde(default)]
    pub listen: Option<String>,
    /// The job.
    pub spec: JobSpec,
}

/// What a job process answers for a job.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Outcome {
    /// The process.
    pub process: usize,
    /// The job's token.
    pub token: u64,
    /// Whether its part ran.
    pub ok: bool,
    /// Why not.
    #[serde(default)]
    pub error: Option<String>,
    /// How likely this failure is the root cause (lower: more), see [`Failure::rank`].
    #[serde(default)]
    pub rank: u8,
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
    std::env::var_os(ENV_JOB_PROCESS).is_some()
}

// ---------------------------------------------------------------------------
// The job process.

/// The job this process runs or last ran: what to remove if it must stop.
struct CurrentJob {
    process: usize,
    token: u64,
    spec: JobSpec,
    running: bool,
}

static CURRENT: Mutex<Option<CurrentJob>> = Mutex::new(None);
static PROTOCOL: Mutex<Option<File>> = Mutex::new(None);
/// The process index for messages (`usize::MAX` before the first job).
static PROCESS: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Run `f` (creating an output file) unless the process is stopping: a
/// process that stops holds the lock until it exits, so that no temporary
/// file is created after it removed them.
pub(crate) fn creating_output<R>(f: impl FnOnce() -> R) -> R {
    let _held = CURRENT.lock().unwrap_or_else(|e| e.into_inner());
    f()
}

fn send_outcome(o: &Outcome) {
    let line = format!("{OUTCOME_PREFIX}{}\n", serde_json::to_string(o).expect("JSON"));
    let mut p = PROTOCOL.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(f) = p.as_mut() {
        let _ = f.write_all(line.as_bytes());
        let _ = f.flush();
    }
}

/// Stop this job process now: remove the current job's temporary outputs
/// (if it is running), answer `error` for it, exit with `code`.
fn abandon(code: i32, error: Option<(String, u8)>) -> ! {
    // The lock may be held by the thread that panicked: do not wait for ever.
    let deadline = Instant::now() + Duration::from_secs(1);
    let guard = loop {
        match CURRENT.try_lock() {
            Ok(g) => break Some(g),
            Err(std::sync::TryLockError::Poisoned(p)) => break Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(std::sync::TryLockError::WouldBlock) => break None,
        }
    };
    if let Some(job) = guard.as_ref().and_then(|g| g.as_ref()) {
        // A job that has not been put in place by now never will be (its
        // outputs' temporary files are gone once it has).
        remove_partial_outputs(&job.spec, job.token);
        if let (true, Some((message, rank))) = (job.running, &error) {
            send_outcome(&Outcome {
                process: job.process,
                token: job.token,
                ok: false,
                error: Some(message.clone()),
                rank: *rank,
                report: None,
            });
        }
    }
    std::process::exit(code)
}

fn panic_text(info: &std::panic::PanicHookInfo<'_>) -> String {
    let msg = crate::panics::panic_message(info.payload());
    match info.location() {
        Some(l) => format!("{msg} (at {}:{})", l.file(), l.line()),
        None => msg,
    }
}

/// The panic hook of a job process: a broken connection or an unhandled
/// panic on a timely thread ends the process at once (see the module docs).
pub fn install_panic_hook() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let thread = std::thread::current();
        let name = thread.name().unwrap_or("");
        let text = panic_text(info);
        let process = PROCESS.load(Ordering::SeqCst);
        if name.starts_with("timely:send")
            || name.starts_with("timely:recv")
            || text.contains("timely communication error")
        {
            tracing::error!(process, "lost the connection to another process of the job ({text}); stopping");
            let m = format!("worker {process} lost its connection to another worker — job failed");
            abandon(exit::LOST_PEER, Some((m, 4)));
        }
        if name.starts_with("timely:work") && !GUARDED.with(|g| g.get()) {
            tracing::error!(process, "a worker thread panicked: {text}; stopping");
            let m = format!("worker {process} crashed: a worker thread panicked: {text} — job failed");
            abandon(exit::PANIC, Some((m, 1)));
        }
        if !GUARDED.with(|g| g.get()) && !name.starts_with("tra-kernel") {
            default(info);
        }
    }));
}

/// The body of a job process (`tra worker --child`, or a test binary that
/// re-executes itself): serve [`Assignment`]s from standard input until it
/// closes; answers the exit code.
pub fn child_main() -> i32 {
    install_panic_hook();
    // Answers go to the pipe that is standard output now; anything else
    // printed to standard output from here on goes to standard error.
    // SAFETY: plain descriptor calls on descriptors this process owns.
    let proto = unsafe {
        let fd = libc::dup(1);
        if fd < 0 || libc::dup2(2, 1) < 0 {
            tracing::error!("tra job process: cannot set up its standard output");
            return exit::BAD_START;
        }
        File::from_raw_fd(fd)
    };
    *PROTOCOL.lock().unwrap_or_else(|e| e.into_inner()) = Some(proto);
    let (tx, rx) = mpsc::channel::<Result<Assignment, String>>();
    let reader = std::thread::Builder::new().name("tra-job-input".into()).spawn(move || {
        let stdin = std::io::stdin();
        let mut lines = stdin.lock();
        loop {
            let mut line = String::new();
            match lines.read_line(&mut line) {
                Ok(0) | Err(_) => {
                    let running = CURRENT.lock().unwrap_or_else(|e| e.into_inner()).as_ref().is_some_and(|j| j.running);
                    if running {
                        tracing::warn!(
                            process = PROCESS.load(Ordering::SeqCst),
                            "the job's supervisor went away; stopping"
                        );
                        abandon(exit::ORPHANED, None);
                    }
                    abandon(exit::OK, None);
                }
                Ok(_) => {
                    let a = serde_json::from_str::<Assignment>(&line).map_err(|e| format!("not a job assignment: {e}"));
                    if tx.send(a).is_err() {
                        return;
                    }
                }
            }
        }
    });
    if reader.is_err() {
        return exit::BAD_START;
    }
    for a in rx {
        let a = match a {
            Ok(a) => a,
            Err(e) => {
                send_outcome(&Outcome { process: 0, token: 0, ok: false, error: Some(e), rank: 2, report: None });
                continue;
            }
        };
        let outcome = run_assignment(&a);
        send_outcome(&outcome);
    }
    exit::OK
}

fn run_assignment(a: &Assignment) -> Outcome {
    let process = a.process;
    PROCESS.store(process, Ordering::SeqCst);
    let fail = |e: String| Outcome { process, token: a.token, ok: false, error: Some(e), rank: 2, report: None };
    let key = match Secret::from_hex(&a.key, "the job's key") {
        Ok(k) => k,
        Err(e) => return fail(e.to_string()),
    };
    *CURRENT.lock().unwrap_or_else(|e| e.into_inner()) =
        Some(CurrentJob { process, token: a.token, spec: a.spec.clone(), running: true });
    let on_silent: super::heartbeat::SilenceHandler = Arc::new(move |peer: usize, silence: Duration| {
        let m = format!(
            "worker {peer} stopped responding (no heartbeat for {:.1} s; see --peer-timeout) — job failed",
            silence.as_secs_f64()
        );
        tracing::error!(process, "{m}");
        abandon(exit::PEER_SILENT, Some((m, 1)));
    });
    let m = Membership {
        process,
        addresses: a.addresses.clone(),
        token: a.token,
        key,
        listen: a.listen.clone(),
        on_silent: Some(on_silent),
    };
    let result = run_job(&a.spec, &m);
    let mut cur = CURRENT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(j) = cur.as_mut() {
        j.running = false;
    }
    if result.is_err() {
        remove_partial_outputs(&a.spec, a.token);
    }
    drop(cur);
    match result {
        Ok(report) => Outcome { process, token: a.token, ok: true, error: None, rank: 0, report },
        Err(e) => {
            tracing::warn!(process, "job {:016x}: {e}", a.token);
            fail(e)
        }
    }
}

// ---------------------------------------------------------------------------
// The supervisor's side.

/// How to start a job process: a program and its arguments.
#[derive(Debug, Clone)]
pub struct Launcher {
    /// The program (`tra`, or a test binary).
    pub program: PathBuf,
    /// Its arguments (`["worker", "--child"]`).
    pub args: Vec<String>,
    /// More environment.
    pub env: Vec<(String, String)>,
}

/// The `tra` binary's allocator (mimalloc) reads whether it may use
/// transparent huge pages from this variable.
pub const THP_ENV: &str = "MIMALLOC_ALLOW_THP";

impl Launcher {
    /// `tra worker --child` of the running `tra` binary.
    ///
    /// Its job processes run without transparent huge pages (`THP_ENV=0`,
    /// which makes the allocator turn them off for the process), unless
    /// `THP_ENV` is set in this environment, which then passes on. A job
    /// process touches its memory first in its first job, and a huge page
    /// costs a 2 MiB zeroing at that touch; on virtual machines that give
    /// free memory back to their host (free page reporting), fresh huge
    /// pages are also the host's fresh pages. On such a machine the first
    /// job of a warm 2-process cluster (a shuffle of 256 MiB) ran in
    /// 0.8–1.9 s against 0.3 s without huge pages, and later jobs, which
    /// reuse the memory, ran as fast either way; the blocks are copied and
    /// packed by the kernels, which gain little from larger pages.
    pub fn current_tra() -> Result<Launcher, String> {
        let program = std::env::current_exe().map_err(|e| format!("cannot find the tra binary: {e}"))?;
        let env = match std::env::var_os(THP_ENV) {
            Some(_) => Vec::new(),
            None => vec![(THP_ENV.to_string(), "0".to_string())],
        };
        Ok(Launcher { program, args: vec!["worker".into(), "--child".into()], env })
    }
}

/// A started job process.
pub struct JobHost {
    /// The process index it serves as (for messages).
    pub process: usize,
    child: Child,
    stdin: Option<ChildStdin>,
    outcomes: mpsc::Receiver<Outcome>,
    status: Option<ExitStatus>,
}

impl JobHost {
    /// Start a job process. It runs in its own process group: a Ctrl-C at
    /// the terminal reaches its supervisor, which stops it and cleans up.
    pub fn spawn(launcher: &Launcher, process: usize) -> Result<JobHost, String> {
        let mut cmd = Command::new(&launcher.program);
        cmd.args(&launcher.args)
            .env(ENV_JOB_PROCESS, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0);
        for (k, v) in &launcher.env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().map_err(|e| format!("cannot start {}: {e}", launcher.program.display()))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped");
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name(format!("tra-job-answers-{process}"))
            .spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { return };
                    // (A test harness may have begun the line.)
                    let answer = line.find(OUTCOME_PREFIX).map(|at| &line[at + OUTCOME_PREFIX.len()..]);
                    match answer.map(serde_json::from_str::<Outcome>) {
                        Some(Ok(o)) => {
                            if tx.send(o).is_err() {
                                return;
                            }
                        }
                        Some(Err(e)) => {
                            tracing::warn!(process, "job process {process}: an unreadable answer ({e}): {line}")
                        }
                        None if line.trim().is_empty() => {}
                        None => tracing::info!(process, "job process {process}: {line}"),
                    }
                }
            })
            .map_err(|e| format!("cannot start a thread: {e}"))?;
        Ok(JobHost { process, child, stdin, outcomes: rx, status: None })
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Give it a job.
    pub fn submit(&mut self, a: &Assignment) -> Result<(), String> {
        let mut line = serde_json::to_vec(a).expect("JSON");
        line.push(b'\n');
        let stdin = self.stdin.as_mut().ok_or("the job process's input is closed")?;
        stdin
            .write_all(&line)
            .and_then(|_| stdin.flush())
            .map_err(|e| format!("cannot hand the job to job process {}: {e}", self.child.id()))
    }

    /// Whether it has exited (its status, once).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status
    }

    /// Close its input: an idle job process exits (one running a job stops it).
    pub fn close(&mut self) {
        self.stdin = None;
    }

    /// Close its input and wait up to `grace` for it to exit, then kill it;
    /// reap it.
    pub fn stop(&mut self, grace: Duration) {
        self.close();
        let t = Instant::now();
        while self.exited().is_none() && t.elapsed() < grace {
            std::thread::sleep(Duration::from_millis(2));
        }
        self.kill();
    }

    /// Kill it (if it still runs) and reap it.
    pub fn kill(&mut self) {
        if self.exited().is_none() {
            let _ = self.child.kill();
            self.status = self.child.wait().ok();
        }
    }
}

impl Drop for JobHost {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A job process's failure, classified.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The process (`usize::MAX`: the job as a whole).
    pub process: usize,
    /// The message for the user.
    pub message: String,
    /// Lower is more likely the root cause: 0 died of a signal, 1 crashed or
    /// found a peer silent, 2 a job error, 3 orphaned, 4 lost a peer, 5 the
    /// job was stopped (timeout, cancelled).
    pub rank: u8,
}

/// Describe how job process `i` ended without answering.
pub fn classify(i: usize, status: ExitStatus) -> Failure {
    let (message, rank) = if let Some(sig) = status.signal() {
        let why = match sig {
            // Inputs and dense outputs are mapped (see `mapped`); their
            // lengths are checked first, so this is a file cut short meanwhile.
            libc::SIGBUS => " (SIGBUS: a file the job maps was cut short by another program while it ran)",
            _ => "",
        };
        (format!("worker {i} died (signal {sig}){why} — job failed"), 0)
    } else {
        match status.code() {
            Some(exit::LOST_PEER) => (format!("worker {i} lost its connection to another worker — job failed"), 4),
            Some(exit::ORPHANED) => (format!("worker {i} stopped: its supervisor went away — job failed"), 3),
            Some(exit::PEER_SILENT) => (format!("worker {i} found another worker silent — job failed"), 1),
            Some(exit::PANIC) => {
                (format!("worker {i} crashed (a worker thread panicked; see its message above) — job failed"), 1)
            }
            Some(c) => (format!("worker {i} exited with status {c} — job failed"), 1),
            None => (format!("worker {i} ended abnormally — job failed"), 1),
        }
    };
    Failure { process: i, message, rank }
}

/// Why [`watch`] stopped waiting without a failure of a process.
pub trait StopCheck {
    /// A reason to stop the job now, if there is one.
    fn stop_reason(&self) -> Option<String>;
}

impl<F: Fn() -> Option<String>> StopCheck for F {
    fn stop_reason(&self) -> Option<String> {
        self()
    }
}

/// Watch the job processes of one job (`token`) until each has answered,
/// one fails, the timeout passes or `stop` says so. Answers every outcome,
/// or the most likely root cause. Kills nothing: the caller stops the
/// processes that must stop.
pub fn watch(
    hosts: &mut [&mut JobHost],
    token: u64,
    timeout: Duration,
    stop: &dyn StopCheck,
) -> Result<Vec<Outcome>, Failure> {
    let start = Instant::now();
    let n = hosts.len();
    let mut answered: Vec<Option<Outcome>> = vec![None; n];
    let mut ended = vec![false; n];
    let mut failures: Vec<Failure> = Vec::new();
    let mut first_failure: Option<Instant> = None;
    loop {
        for (k, host) in hosts.iter_mut().enumerate() {
            if ended[k] {
                continue;
            }
            let mut outcome = host.outcomes.try_recv().ok();
            if outcome.is_none() {
                if let Some(st) = host.exited() {
                    // Its last answer may still be on the way.
                    outcome = host.outcomes.recv_timeout(Duration::from_millis(100)).ok();
                    if outcome.is_none() {
                        failures.push(classify(host.process, st));
                        first_failure.get_or_insert_with(Instant::now);
                        ended[k] = true;
                        continue;
                    }
                }
            }
            let Some(o) = outcome else { continue };
            if o.token != token && o.ok {
                continue; // a stale answer of an earlier job
            }
            ended[k] = true;
            if o.ok {
                answered[k] = Some(o);
            } else {
                let message = o.error.unwrap_or_else(|| format!("worker {} failed — job failed", host.process));
                failures.push(Failure { process: host.process, message, rank: o.rank });
                first_failure.get_or_insert_with(Instant::now);
            }
        }
        if ended.iter().all(|e| *e) {
            break;
        }
        if let Some(t) = first_failure {
            // Let the others answer for a moment (their reasons tell the
            // root cause apart from its consequences).
            if t.elapsed() > Duration::from_millis(300) {
                break;
            }
        } else if let Some(reason) = stop.stop_reason() {
            return Err(Failure { process: usize::MAX, message: reason, rank: 5 });
        } else if start.elapsed() > timeout {
            return Err(Failure {
                process: usize::MAX,
                message: format!(
                    "the job did not finish within {:.0} s (--timeout); stopped its {n} worker process(es)",
                    timeout.as_secs_f64()
                ),
                rank: 5,
            });
        }
        std::thread::sleep(Duration::from_millis(3));
    }
    if let Some(f) = failures.into_iter().min_by_key(|f| (f.rank, f.process)) {
        return Err(f);
    }
    Ok(answered.into_iter().map(|o| o.expect("every process answered")).collect())
}

/// Run a job as `spec.processes` fresh processes on this machine, talking
/// over loopback. `on_started` gets the process ids once all are started
/// (tests use it); `stop` is polled (a signal, say): when it gives a reason
/// the job is stopped. On success the outputs are put in place; on any
/// failure the processes are stopped and every temporary output file is
/// removed. Answers process 0's report.
pub fn run_local(
    spec: &JobSpec,
    launcher: &Launcher,
    timeout: Duration,
    stop: &dyn StopCheck,
    mut on_started: impl FnMut(&[u32]),
) -> Result<JobReport, String> {
    if spec.processes == 0 || spec.workers == 0 {
        return Err("a job needs at least one process and one worker per process".into());
    }
    let token: u64 = rand::random();
    let key = Secret::generate().job_key(token);
    let addresses = super::free_loopback_addresses(spec.processes)?;
    let mut hosts = Vec::with_capacity(spec.processes);
    for i in 0..spec.processes {
        let mut h = JobHost::spawn(launcher, i)?;
        h.submit(&Assignment {
            process: i,
            addresses: addresses.clone(),
            token,
            key: key.to_hex(),
            listen: None,
            spec: spec.clone(),
        })?;
        hosts.push(h);
    }
    let pids: Vec<u32> = hosts.iter().map(|h| h.pid()).collect();
    on_started(&pids);
    let mut refs: Vec<&mut JobHost> = hosts.iter_mut().collect();
    let result = watch(&mut refs, token, timeout, stop);
    let outcome = match result {
        Ok(outcomes) => super::job::commit_outputs(spec, token).and_then(|()| {
            outcomes
                .into_iter()
                .find(|o| o.process == 0)
                .and_then(|o| o.report)
                .ok_or_else(|| "worker 0 reported nothing".to_string())
        }),
        Err(f) => Err(f.message),
    };
    if outcome.is_ok() {
        for h in &mut hosts {
            h.stop(Duration::from_secs(2));
        }
    } else {
        for h in &mut hosts {
            h.kill();
        }
        remove_partial_outputs(spec, token);
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::classify;
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;

    /// A job process killed by a signal is the likeliest root cause; SIGBUS
    /// (a mapped file cut short) is said in words, SIGKILL by its number.
    #[test]
    fn a_death_by_signal_says_which() {
        let bus = classify(1, ExitStatus::from_raw(libc::SIGBUS));
        assert_eq!(bus.rank, 0);
        assert!(
            bus.message.starts_with("worker 1 died (signal 7) (SIGBUS: a file the job maps was cut short"),
            "{}",
            bus.message
        );
        let kill = classify(2, ExitStatus::from_raw(libc::SIGKILL));
        assert_eq!(kill.message, "worker 2 died (signal 9) — job failed");
    }
}
