//! Real machines: a `tra worker` on each machine of a host file, and the
//! client side of `tra run FILE --hosts hosts.txt`.
//!
//! **Host file.** One line per process, in process order: `HOST:PORT`, the
//! address timely's data connections use (timely's own host-file format);
//! optionally followed by the worker's job port (default `PORT + 1000`).
//! Blank lines and lines starting with `#` are skipped.
//!
//! **Worker** (`tra worker --process I --hosts hosts.txt`): listens on its
//! job port, at the host file's address (never on every interface unless
//! told with `--bind`), and keeps one job process started and warm (its
//! kernel threads and buffer pools stay up between jobs, see
//! [`super::supervise`]). Every connection must prove the cluster secret
//! ([`super::auth`]); one that does not is refused and logged. A job's paths
//! must lie in the worker's data directories ([`super::confine`]). The
//! worker runs one job at a time (a job sent meanwhile is answered "busy":
//! the client tries again), hands it to its job process, watches it and
//! reports back; if the client goes away or the job fails, it stops the job
//! process, removes the job's temporary files and starts a fresh job process
//! for the next job. A job that fails cleanly (a bad input) keeps the job
//! process warm.
//!
//! **Client**: sends the job (the optimized plan, input and output paths as
//! every machine sees them) to every worker, and waits for all of them. The
//! first failure (a job process that died or stopped responding, a worker
//! that cannot be reached or whose connection drops) fails the job: the
//! client closes every connection, every worker stops its part, and the
//! client reports the root cause. When every process has succeeded, the
//! client tells worker 0 to put the outputs in place (rename the temporary
//! files over them). This small JSON-lines protocol only starts and stops
//! jobs: all data moves over timely's connections.

use super::auth::{self, Secret, Session};
use super::confine::DataDirs;
use super::job::{commit_outputs, remove_partial_outputs, JobReport, JobSpec};
use super::supervise::{watch, Assignment, JobHost, Launcher};
use serde::{Deserialize, Serialize};
use std::io::BufReader;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// What the job port's connections prove (see [`auth`]).
const CONTEXT: &[u8] = b"tra job port";

/// One process of a host file.
#[derive(Debug, Clone, PartialEq)]
pub struct Host {
    /// `host:port` of timely's data connections.
    pub data: String,
    /// `host:port` of the worker's job port.
    pub control: String,
}

/// Read a host file.
pub fn read_hosts(path: &Path) -> Result<Vec<Host>, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("cannot read the host file {}: {e}", path.display()))?;
    parse_hosts(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Parse the lines of a host file.
pub fn parse_hosts(text: &str) -> Result<Vec<Host>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut parts = line.split_whitespace();
        let data = parts.next().expect("non-empty").to_string();
        let (host, port) = data.rsplit_once(':').ok_or_else(|| format!("line {}: {data:?} is not HOST:PORT", n + 1))?;
        let port: u16 = port.parse().map_err(|_| format!("line {}: {port:?} is not a port", n + 1))?;
        let control_port: u16 = match parts.next() {
            Some(c) => c.parse().map_err(|_| format!("line {}: job port {c:?} is not a port", n + 1))?,
            None => {
                port.checked_add(1000).ok_or_else(|| format!("line {}: port {port} + 1000 is not a port", n + 1))?
            }
        };
        out.push(Host { data: data.clone(), control: format!("{host}:{control_port}") });
    }
    if out.is_empty() {
        return Err("no hosts listed".into());
    }
    Ok(out)
}

/// `addr` with its host replaced by `bind` (`--bind 0.0.0.0`).
fn rebind(addr: &str, bind: Option<&str>) -> String {
    match (bind, addr.rsplit_once(':')) {
        (Some(b), Some((_, port))) => format!("{b}:{port}"),
        _ => addr.to_string(),
    }
}

/// A request on the job port.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "request", rename_all = "snake_case")]
pub enum Request {
    /// Run a job (boxed: a job is far larger than the other requests).
    Job(Box<JobRequest>),
    /// Put a finished job's outputs in place (to worker 0, once every
    /// process has succeeded).
    Commit {
        /// The job.
        token: u64,
    },
    /// Say who you are and whether you are busy.
    Status,
    /// Stop the worker.
    Shutdown,
}

/// A job sent to a worker.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobRequest {
    /// The job.
    pub job: JobSpec,
    /// Its token.
    pub token: u64,
    /// Every process's data address, as the client's host file has it.
    pub addresses: Vec<String>,
    /// Job timeout in seconds.
    pub timeout_s: f64,
}

/// What a worker answers.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum AgentEvent {
    /// The job process took the job.
    Started {
        /// Process index.
        process: usize,
        /// The job process's id on that machine.
        pid: u32,
    },
    /// The job process finished its part.
    Done {
        /// Process index.
        process: usize,
        /// Process 0's report (boxed: it is much larger than the other
        /// answers).
        report: Option<Box<JobReport>>,
    },
    /// The outputs are in place.
    Committed {
        /// Process index.
        process: usize,
    },
    /// It failed.
    Failed {
        /// Process index.
        process: usize,
        /// Why.
        error: String,
        /// How likely this is the root cause (lower: more), see [`super::supervise::Failure`].
        #[serde(default)]
        rank: u8,
    },
    /// Another job is running.
    Busy {
        /// Process index.
        process: usize,
    },
    /// The answer to [`Request::Status`] and [`Request::Shutdown`].
    Status {
        /// Process index.
        process: usize,
        /// The worker's process id.
        pid: u32,
        /// Whether a job is running.
        busy: bool,
        /// Jobs run since it started.
        jobs: u64,
        /// The warm job process, if one is up.
        job_process: Option<u32>,
        /// Its data directories.
        data_dirs: Vec<String>,
    },
}

/// How a worker runs.
pub struct WorkerConfig {
    /// Its process index (its line in the host file).
    pub process: usize,
    /// The host file.
    pub hosts: Vec<Host>,
    /// The cluster secret.
    pub secret: Secret,
    /// Where jobs may read and write.
    pub data_dirs: DataDirs,
    /// Listen on this host instead of the host file's (`0.0.0.0`: every interface).
    pub bind: Option<String>,
    /// How to start its job process.
    pub launcher: Launcher,
    /// The longest a job may run, whatever the client asks.
    pub max_job_seconds: f64,
    /// Accept the test hooks of a job (`stall_ms`, `test_panic`).
    pub allow_test_hooks: bool,
}

struct Worker {
    cfg: WorkerConfig,
    /// The warm job process (`None` while none is started).
    host: Mutex<Option<JobHost>>,
    /// Held while a job runs.
    running: Mutex<()>,
    jobs: std::sync::atomic::AtomicU64,
    stop: AtomicBool,
}

impl Worker {
    /// The warm job process, started if there is none (or it ended).
    fn ready_host(&self) -> Result<std::sync::MutexGuard<'_, Option<JobHost>>, String> {
        let mut h = self.host.lock().unwrap_or_else(|e| e.into_inner());
        if h.as_mut().is_some_and(|h| h.exited().is_some()) {
            *h = None;
        }
        if h.is_none() {
            *h = Some(JobHost::spawn(&self.cfg.launcher, self.cfg.process)?);
        }
        Ok(h)
    }

    /// Stop the job process (a failed or cancelled job may have left it
    /// waiting on its peers) and start a fresh one for the next job.
    fn replace_host(&self) {
        let mut h = self.host.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(mut old) = h.take() {
            old.kill();
        }
        match JobHost::spawn(&self.cfg.launcher, self.cfg.process) {
            Ok(new) => *h = Some(new),
            Err(e) => tracing::error!(process = self.cfg.process, "cannot start a job process: {e}"),
        }
    }
}

/// Serve jobs until a shutdown request.
pub fn serve(cfg: WorkerConfig) -> Result<(), String> {
    let process = cfg.process;
    let me = cfg
        .hosts
        .get(process)
        .ok_or_else(|| format!("--process {process}: the host file lists {} process(es)", cfg.hosts.len()))?
        .clone();
    let listen = rebind(&me.control, cfg.bind.as_deref());
    let listener = TcpListener::bind(&listen).map_err(|e| {
        format!("worker {process}: cannot listen on {listen}: {e} (is this machine `{}` of the host file? --bind HOST listens elsewhere)", me.control)
    })?;
    let first = JobHost::spawn(&cfg.launcher, process)?;
    tracing::info!(
        process,
        "waiting for jobs on {listen} (data on {}; {} processes in the host file; data directories {}; job process {} warm)",
        rebind(&me.data, cfg.bind.as_deref()),
        cfg.hosts.len(),
        cfg.data_dirs.dirs().iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", "),
        first.pid()
    );
    let worker = Arc::new(Worker {
        cfg,
        host: Mutex::new(Some(first)),
        running: Mutex::new(()),
        jobs: Default::default(),
        stop: AtomicBool::new(false),
    });
    for conn in listener.incoming() {
        if worker.stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(stream) = conn else { continue };
        let (w, listen) = (worker.clone(), listen.clone());
        let spawned = std::thread::Builder::new().name("tra-worker-conn".into()).spawn(move || {
            let peer = stream.peer_addr().map(|a| a.to_string()).unwrap_or_else(|_| "?".into());
            if let Err(e) = serve_connection(&w, stream) {
                tracing::warn!(process = w.cfg.process, %peer, "{e}");
            }
            if w.stop.load(Ordering::SeqCst) {
                // Wake the accept loop up so that it sees the request.
                let _ = TcpStream::connect_timeout(
                    &listen
                        .to_socket_addrs()
                        .ok()
                        .and_then(|mut a| a.next())
                        .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 0))),
                    Duration::from_millis(200),
                );
            }
        });
        if spawned.is_err() {
            tracing::error!(process = worker.cfg.process, "cannot start a thread for a connection");
        }
    }
    if let Some(mut h) = worker.host.lock().unwrap_or_else(|e| e.into_inner()).take() {
        h.stop(Duration::from_secs(2));
    }
    tracing::info!(process = worker.cfg.process, "stopped");
    Ok(())
}

fn send(stream: &mut TcpStream, session: &Mutex<Session>, ev: &AgentEvent) -> std::io::Result<()> {
    let text = serde_json::to_string(ev).expect("JSON");
    let line = session.lock().unwrap_or_else(|e| e.into_inner()).seal(&text);
    std::io::Write::write_all(stream, &line)
}

fn serve_connection(w: &Worker, mut stream: TcpStream) -> Result<(), String> {
    let process = w.cfg.process;
    let peer = stream.peer_addr().map(|a| a.to_string()).unwrap_or_else(|_| "?".into());
    stream.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
    let (_, mut session) = auth::accept(&mut stream, &w.cfg.secret, CONTEXT, 0)
        .map_err(|e| format!("refused a connection to the job port from {peer}: {e}"))?;
    let mut reader = BufReader::new(stream.try_clone().map_err(|e| e.to_string())?);
    let text = session
        .receive(&mut reader)
        .map_err(|e| format!("refused a request from {peer}: {e}"))?
        .ok_or_else(|| format!("{peer} sent no request"))?;
    let session = Arc::new(Mutex::new(session));
    let request: Request = match serde_json::from_str(&text) {
        Ok(r) => r,
        Err(e) => {
            let error = format!("worker {process}: not a request: {e}");
            let _ = send(&mut stream, &session, &AgentEvent::Failed { process, error: error.clone(), rank: 2 });
            return Err(error);
        }
    };
    match request {
        Request::Status | Request::Shutdown => {
            let shutdown = matches!(request, Request::Shutdown);
            let busy = w.running.try_lock().is_err();
            // While a job runs its job process is held: say none then.
            let job_process = w.host.try_lock().ok().and_then(|h| h.as_ref().map(|h| h.pid()));
            let ev = AgentEvent::Status {
                process,
                pid: std::process::id(),
                busy,
                jobs: w.jobs.load(Ordering::SeqCst),
                job_process,
                data_dirs: w.cfg.data_dirs.dirs().iter().map(|d| d.display().to_string()).collect(),
            };
            send(&mut stream, &session, &ev).map_err(|e| e.to_string())?;
            if shutdown {
                tracing::info!(process, %peer, "shutting down on request");
                w.stop.store(true, Ordering::SeqCst);
            }
            Ok(())
        }
        Request::Commit { .. } => {
            let error = format!("worker {process}: nothing to commit outside a job's connection");
            let _ = send(&mut stream, &session, &AgentEvent::Failed { process, error: error.clone(), rank: 2 });
            Err(error)
        }
        Request::Job(req) => {
            let Ok(_running) = w.running.try_lock() else {
                tracing::info!(process, %peer, "job {:016x}: busy with another job", req.token);
                return send(&mut stream, &session, &AgentEvent::Busy { process }).map_err(|e| e.to_string());
            };
            serve_job(w, stream, reader, session, *req, &peer)
        }
    }
}

/// Check a job against this worker: its hosts, its limits, its paths.
fn admit(w: &Worker, req: &JobRequest) -> Result<JobSpec, String> {
    let process = w.cfg.process;
    let mine: Vec<String> = w.cfg.hosts.iter().map(|h| h.data.clone()).collect();
    if req.addresses != mine || req.job.processes != mine.len() {
        return Err(format!(
            "worker {process}: the job's hosts ({}) differ from this worker's host file ({})",
            req.addresses.join(", "),
            mine.join(", ")
        ));
    }
    let spec = &req.job;
    if !w.cfg.allow_test_hooks && (spec.stall_ms > 0 || spec.test_panic) {
        return Err(format!("worker {process}: this worker does not accept jobs with test hooks"));
    }
    if !(1..=1024).contains(&spec.workers) || spec.threads.is_some_and(|t| !(1..=1024).contains(&t)) {
        return Err(format!(
            "worker {process}: {} workers and {:?} threads per process: each must be between 1 and 1024",
            spec.workers, spec.threads
        ));
    }
    for (what, v) in [("connect_timeout_s", spec.connect_timeout_s), ("peer_timeout_s", spec.peer_timeout_s)] {
        if !(0.1..=3600.0).contains(&v) {
            return Err(format!("worker {process}: {what} {v} is not between 0.1 and 3600 s"));
        }
    }
    w.cfg.data_dirs.confine(spec).map_err(|e| format!("worker {process}: {e}"))
}

/// What the client says while its job runs.
enum ClientSays {
    Commit(u64),
    Gone,
}

fn serve_job(
    w: &Worker,
    mut stream: TcpStream,
    mut reader: BufReader<TcpStream>,
    session: Arc<Mutex<Session>>,
    req: JobRequest,
    peer: &str,
) -> Result<(), String> {
    let process = w.cfg.process;
    let token = req.token;
    let fail = |stream: &mut TcpStream, error: String, rank: u8| {
        let _ = send(stream, &session, &AgentEvent::Failed { process, error: error.clone(), rank });
        Err(format!("job {token:016x}: {error}"))
    };
    let spec = match admit(w, &req) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(process, %peer, "refused job {token:016x}: {e}");
            return fail(&mut stream, e, 2);
        }
    };
    w.jobs.fetch_add(1, Ordering::SeqCst);
    tracing::info!(process, %peer, "job {token:016x}: starting");
    // The client's next words (or its going away) arrive on this channel.
    let (tx, says) = mpsc::channel::<ClientSays>();
    {
        let session = session.clone();
        let _ = reader.get_ref().set_read_timeout(None);
        std::thread::spawn(move || loop {
            let mut line = String::new();
            let msg = match std::io::BufRead::read_line(&mut reader, &mut line) {
                Ok(0) | Err(_) => ClientSays::Gone,
                Ok(_) => {
                    let text = session.lock().unwrap_or_else(|e| e.into_inner()).open(&line);
                    match text.ok().and_then(|t| serde_json::from_str::<Request>(&t).ok()) {
                        Some(Request::Commit { token }) => ClientSays::Commit(token),
                        _ => ClientSays::Gone,
                    }
                }
            };
            let end = matches!(msg, ClientSays::Gone);
            if tx.send(msg).is_err() || end {
                return;
            }
        });
    }
    let assignment = Assignment {
        process,
        addresses: req.addresses.clone(),
        token,
        key: w.cfg.secret.job_key(token).to_hex(),
        listen: w.cfg.bind.as_deref().map(|b| rebind(&req.addresses[process], Some(b))),
        spec: spec.clone(),
    };
    let timeout = Duration::from_secs_f64(req.timeout_s.clamp(1.0, w.cfg.max_job_seconds.max(1.0)));
    let result = (|| -> Result<Option<JobReport>, (String, u8)> {
        let mut guard = w.ready_host().map_err(|e| (e, 2))?;
        let host = guard.as_mut().expect("started");
        host.submit(&assignment).map_err(|e| (e, 2))?;
        let _ = send(&mut stream, &session, &AgentEvent::Started { process, pid: host.pid() });
        let gone = std::cell::Cell::new(false);
        let stop = || -> Option<String> {
            if gone.get() || matches!(says.try_recv(), Ok(ClientSays::Gone) | Ok(ClientSays::Commit(_))) {
                gone.set(true);
                return Some("the client went away; the job is cancelled".into());
            }
            None
        };
        let mut hosts = [host];
        let outcomes = watch(&mut hosts, token, timeout, &stop).map_err(|f| (f.message, f.rank))?;
        Ok(outcomes.into_iter().next().and_then(|o| o.report))
    })();
    match result {
        Ok(report) => {
            tracing::info!(process, "job {token:016x}: done");
            send(&mut stream, &session, &AgentEvent::Done { process, report: report.map(Box::new) })
                .map_err(|e| format!("job {token:016x}: cannot answer the client: {e}"))?;
            if process != 0 {
                return Ok(());
            }
            // Worker 0 puts the outputs in place once the client says every
            // process succeeded; a client that goes away leaves none.
            match says.recv_timeout(Duration::from_secs(60)) {
                Ok(ClientSays::Commit(t)) if t == token => match commit_outputs(&spec, token) {
                    Ok(()) => {
                        tracing::info!(process, "job {token:016x}: outputs in place");
                        send(&mut stream, &session, &AgentEvent::Committed { process }).map_err(|e| e.to_string())
                    }
                    Err(e) => {
                        remove_partial_outputs(&spec, token);
                        fail(&mut stream, e, 2)
                    }
                },
                _ => {
                    remove_partial_outputs(&spec, token);
                    tracing::warn!(process, "job {token:016x}: the client did not confirm; outputs left as they were");
                    Ok(())
                }
            }
        }
        Err((e, rank)) => {
            // A job that failed cleanly (an error the job process answered)
            // leaves it warm; one stopped, crashed or cancelled may have left
            // it waiting on its peers: a fresh one serves the next job.
            let clean = rank == 2
                && w.host.lock().unwrap_or_else(|e| e.into_inner()).as_mut().is_some_and(|h| h.exited().is_none());
            if !clean {
                w.replace_host();
            }
            remove_partial_outputs(&spec, token);
            tracing::warn!(process, "job {token:016x}: {e}");
            fail(&mut stream, e, rank)
        }
    }
}

/// An authenticated connection to a worker's job port.
struct Link {
    stream: TcpStream,
    session: Arc<Mutex<Session>>,
}

fn open_link(i: usize, h: &Host, secret: &Secret) -> Result<(Link, BufReader<TcpStream>), String> {
    let addr = h
        .control
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| format!("worker {i}: cannot resolve {}", h.control))?;
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(|e| {
        format!(
            "cannot reach the tra worker of process {i} at {}: {e} (start it there with `tra worker --process {i} --hosts HOSTS`)",
            h.control
        )
    })?;
    let _ = s.set_nodelay(true);
    s.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
    let session = auth::connect(&mut s, secret, CONTEXT, b"")
        .map_err(|e| format!("the tra worker of process {i} at {}: {e}", h.control))?;
    s.set_read_timeout(None).map_err(|e| e.to_string())?;
    let reader = BufReader::new(s.try_clone().map_err(|e| e.to_string())?);
    Ok((Link { stream: s, session: Arc::new(Mutex::new(session)) }, reader))
}

impl Link {
    fn send(&mut self, r: &Request) -> Result<(), String> {
        let text = serde_json::to_string(r).expect("JSON");
        let line = self.session.lock().unwrap_or_else(|e| e.into_inner()).seal(&text);
        std::io::Write::write_all(&mut self.stream, &line).map_err(|e| e.to_string())
    }
}

/// Read one sealed event.
fn receive(reader: &mut BufReader<TcpStream>, session: &Mutex<Session>) -> Result<Option<AgentEvent>, String> {
    let mut line = String::new();
    match std::io::BufRead::read_line(reader, &mut line) {
        Ok(0) | Err(_) => return Ok(None),
        Ok(_) => {}
    }
    let text = session.lock().unwrap_or_else(|e| e.into_inner()).open(&line).map_err(|e| e.to_string())?;
    serde_json::from_str::<AgentEvent>(&text).map(Some).map_err(|e| format!("unreadable answer {text:?}: {e}"))
}

/// Ask one worker a question that has one answer (status, shutdown).
pub fn ask(i: usize, h: &Host, secret: &Secret, r: &Request) -> Result<AgentEvent, String> {
    let (mut link, mut reader) = open_link(i, h, secret)?;
    link.send(r)?;
    link.stream.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
    receive(&mut reader, &link.session)?.ok_or_else(|| format!("worker {i} at {} closed the connection", h.control))
}

/// Why one attempt at a job did not give a report.
enum Attempt {
    Busy(usize),
    Failed(String),
}

/// Run a job on the workers of a host file; answers process 0's report.
/// Workers busy with another job are tried again (with a random pause)
/// until `timeout`.
pub fn run_hosts(spec: &JobSpec, hosts: &[Host], secret: &Secret, timeout: Duration) -> Result<JobReport, String> {
    if spec.processes != hosts.len() {
        return Err(format!("the job has {} processes but the host file lists {}", spec.processes, hosts.len()));
    }
    let start = Instant::now();
    loop {
        match run_hosts_once(spec, hosts, secret, timeout) {
            Ok(r) => return Ok(r),
            Err(Attempt::Failed(e)) => return Err(e),
            Err(Attempt::Busy(i)) => {
                if start.elapsed() > timeout {
                    return Err(format!(
                        "worker {i} ({}) stayed busy with other jobs for {:.0} s (--timeout)",
                        hosts[i].control,
                        timeout.as_secs_f64()
                    ));
                }
                std::thread::sleep(Duration::from_millis(rand::random_range(20..200)));
            }
        }
    }
}

fn run_hosts_once(spec: &JobSpec, hosts: &[Host], secret: &Secret, timeout: Duration) -> Result<JobReport, Attempt> {
    let token: u64 = rand::random();
    let req = Request::Job(Box::new(JobRequest {
        job: spec.clone(),
        token,
        addresses: hosts.iter().map(|h| h.data.clone()).collect(),
        timeout_s: timeout.as_secs_f64(),
    }));
    // Reach every worker first.
    let mut links = Vec::new();
    let (tx, rx) = mpsc::channel::<(usize, Result<Option<AgentEvent>, String>)>();
    let close_all = |links: &[Link]| {
        for l in links {
            let _ = l.stream.shutdown(Shutdown::Both);
        }
    };
    for (i, h) in hosts.iter().enumerate() {
        let reached = open_link(i, h, secret).and_then(|(mut link, reader)| {
            link.send(&req)
                .map_err(|e| format!("worker {i} at {}: cannot send the job: {e}", h.control))
                .map(|()| (link, reader))
        });
        // Workers reached already stop their part when their connection closes.
        let (link, mut reader) = match reached {
            Ok(r) => r,
            Err(e) => {
                close_all(&links);
                return Err(Attempt::Failed(e));
            }
        };
        let (tx, session) = (tx.clone(), link.session.clone());
        std::thread::spawn(move || loop {
            let ev = receive(&mut reader, &session);
            // Worker 0 answers once more after `done`: `committed`.
            let last = match &ev {
                Ok(Some(AgentEvent::Started { .. })) => false,
                Ok(Some(AgentEvent::Done { .. })) => i != 0,
                _ => true,
            };
            if tx.send((i, ev)).is_err() || last {
                return;
            }
        });
        links.push(link);
    }
    drop(tx);
    let start = Instant::now();
    let mut finished = vec![false; hosts.len()];
    let mut report: Option<JobReport> = None;
    // (rank, process, message) of every failure seen; after the first, wait a
    // moment for the others (the root cause is usually among them).
    let mut failures: Vec<(u8, usize, String)> = Vec::new();
    let mut first_failure: Option<Instant> = None;
    let deadline = timeout + Duration::from_secs(10);
    let outcome = loop {
        if let Some(t) = first_failure {
            if t.elapsed() > Duration::from_millis(500) || finished.iter().all(|f| *f) {
                failures.sort();
                break Err(failures[0].2.clone());
            }
        }
        if finished.iter().all(|f| *f) {
            break Ok(());
        }
        let Some(left) = deadline.checked_sub(start.elapsed()) else {
            break Err(format!("the job did not finish within {:.0} s", timeout.as_secs_f64()));
        };
        let left = if first_failure.is_some() { left.min(Duration::from_millis(50)) } else { left };
        match rx.recv_timeout(left) {
            Ok((_, Ok(Some(AgentEvent::Started { .. })))) => {}
            Ok((i, Ok(Some(AgentEvent::Busy { .. })))) => {
                close_all(&links);
                return Err(Attempt::Busy(i));
            }
            Ok((i, Ok(Some(AgentEvent::Done { report: r, .. })))) => {
                finished[i] = true;
                if i == 0 {
                    report = r.map(|r| *r);
                }
            }
            Ok((i, Ok(Some(AgentEvent::Failed { error, rank, .. })))) => {
                finished[i] = true;
                failures.push((rank, i, format!("worker {i} ({}): {error}", hosts[i].control)));
                first_failure.get_or_insert_with(Instant::now);
            }
            Ok((i, Ok(Some(other)))) => {
                finished[i] = true;
                failures.push((2, i, format!("worker {i} ({}): unexpected answer {other:?}", hosts[i].control)));
                first_failure.get_or_insert_with(Instant::now);
            }
            Ok((i, Err(e))) => {
                finished[i] = true;
                failures.push((2, i, format!("worker {i} ({}): {e}", hosts[i].control)));
                first_failure.get_or_insert_with(Instant::now);
            }
            Ok((i, Ok(None))) => {
                if !finished[i] {
                    finished[i] = true;
                    let msg =
                        format!("lost contact with the tra worker of process {i} at {} — job failed", hosts[i].control);
                    failures.push((0, i, msg));
                    first_failure.get_or_insert_with(Instant::now);
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) if first_failure.is_some() => {}
            Err(_) => break Err(format!("the job did not finish within {:.0} s", timeout.as_secs_f64())),
        }
    };
    if let Err(e) = outcome {
        // Closing the connections stops every job process still running.
        close_all(&links);
        return Err(Attempt::Failed(e));
    }
    // Every process succeeded: worker 0 puts the outputs in place.
    let committed = links[0].send(&Request::Commit { token }).and_then(|()| loop {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok((0, Ok(Some(AgentEvent::Committed { .. })))) => return Ok(()),
            Ok((0, Ok(Some(AgentEvent::Failed { error, .. })))) => return Err(error),
            Ok((0, other)) => return Err(format!("no confirmation: {other:?}")),
            Ok(_) => {}
            Err(_) => return Err("no confirmation within 60 s".into()),
        }
    });
    close_all(&links);
    committed
        .map_err(|e| Attempt::Failed(format!("worker 0 ({}): putting the outputs in place: {e}", hosts[0].control)))?;
    report.ok_or_else(|| Attempt::Failed("worker 0 sent no report".to_string()))
}

/// The host file's data addresses, for messages.
pub fn describe(hosts: &[Host]) -> String {
    hosts.iter().map(|h| h.data.clone()).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_files() {
        let h = parse_hosts("# cluster\n10.0.0.1:2101\n\n10.0.0.2:2101 3000\n").unwrap();
        assert_eq!(h.len(), 2);
        assert_eq!(h[0], Host { data: "10.0.0.1:2101".into(), control: "10.0.0.1:3101".into() });
        assert_eq!(h[1].control, "10.0.0.2:3000");
        assert!(parse_hosts("nohostport\n").is_err());
        assert!(parse_hosts("\n# nothing\n").is_err());
        assert_eq!(rebind("10.0.0.1:2101", Some("0.0.0.0")), "0.0.0.0:2101");
        assert_eq!(rebind("10.0.0.1:2101", None), "10.0.0.1:2101");
    }
}
