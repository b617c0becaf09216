//! Real machines: a `tra worker` agent on each machine of a host file, and
//! the client side of `tra run FILE --hosts hosts.txt`.
//!
//! **Host file.** One line per process, in process order: `HOST:PORT`, the
//! address timely's data connections use (timely's own host-file format);
//! optionally followed by the agent's control port (default `PORT + 1000`).
//! Blank lines and lines starting with `#` are skipped.
//!
//! **Agent** (`tra worker --process I --hosts hosts.txt`): listens on its
//! control port and runs one job at a time: it starts a job process (the
//! same one `tra run --processes` starts, see [`super::supervise`]) with the
//! data addresses of the host file, watches it, and reports back; if the
//! client goes away it kills the job process. The agent keeps serving jobs
//! after a job fails.
//!
//! **Client**: sends the job (the optimized plan, input and output paths as
//! every machine sees them) to every agent, and waits for all of them. The
//! first failure (a job process that died, an agent that cannot be reached
//! or whose connection drops) fails the job: the client closes every
//! connection, every agent kills its job process, and the client reports
//! the root cause. This small JSON-lines protocol only starts and stops
//! jobs: all data moves over timely's connections.

use super::job::{JobReport, JobSpec};
use super::supervise::{job_dir, watch, Assignment, Launcher, Outcome};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One process of a host file.
#[derive(Debug, Clone, PartialEq)]
pub struct Host {
    /// `host:port` of timely's data connections.
    pub data: String,
    /// `host:port` of the agent's control connection.
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
            Some(c) => c.parse().map_err(|_| format!("line {}: control port {c:?} is not a port", n + 1))?,
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

/// A job sent to an agent.
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

/// What an agent says about a job.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum AgentEvent {
    /// The job process started.
    Started {
        /// Process index.
        process: usize,
        /// Its process id on that machine.
        pid: u32,
    },
    /// The job process finished its part.
    Done {
        /// Process index.
        process: usize,
        /// Process 0's report.
        report: Option<JobReport>,
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
}

fn send(stream: &mut TcpStream, ev: &AgentEvent) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(ev).expect("JSON");
    line.push(b'\n');
    stream.write_all(&line)
}

/// Serve jobs as process `process` of the host file, for ever.
pub fn serve(process: usize, hosts: &[Host], launcher: &Launcher) -> Result<(), String> {
    let me = hosts
        .get(process)
        .ok_or_else(|| format!("--process {process}: the host file lists {} process(es)", hosts.len()))?;
    let listener = TcpListener::bind(&me.control)
        .or_else(|_| {
            // Listen on every interface when the host name is not local.
            let port = me.control.rsplit_once(':').map(|(_, p)| p).unwrap_or("0");
            TcpListener::bind(format!("0.0.0.0:{port}"))
        })
        .map_err(|e| format!("worker {process}: cannot listen on {}: {e}", me.control))?;
    eprintln!(
        "tra worker {process}: waiting for jobs on {} (data on {}; {} processes in the host file)",
        me.control,
        me.data,
        hosts.len()
    );
    for conn in listener.incoming() {
        let Ok(stream) = conn else { continue };
        if let Err(e) = serve_one(process, hosts, launcher, stream) {
            eprintln!("tra worker {process}: {e}");
        }
    }
    Ok(())
}

fn serve_one(process: usize, hosts: &[Host], launcher: &Launcher, mut stream: TcpStream) -> Result<(), String> {
    stream.set_read_timeout(Some(Duration::from_secs(30))).map_err(|e| e.to_string())?;
    let mut reader = BufReader::new(stream.try_clone().map_err(|e| e.to_string())?);
    let mut line = String::new();
    reader.read_line(&mut line).map_err(|e| format!("reading a job: {e}"))?;
    let req: JobRequest = match serde_json::from_str(&line) {
        Ok(r) => r,
        Err(e) => {
            let _ = send(
                &mut stream,
                &AgentEvent::Failed { process, error: format!("worker {process}: not a job: {e}"), rank: 2 },
            );
            return Err(format!("not a job: {e}"));
        }
    };
    let fail = |stream: &mut TcpStream, error: String, rank: u8| {
        let _ = send(stream, &AgentEvent::Failed { process, error: error.clone(), rank });
        Err(error)
    };
    let mine: Vec<String> = hosts.iter().map(|h| h.data.clone()).collect();
    if req.addresses != mine || req.job.processes != hosts.len() {
        return fail(
            &mut stream,
            format!(
                "worker {process}: the job's hosts ({}) differ from this worker's host file ({})",
                req.addresses.join(", "),
                mine.join(", ")
            ),
            2,
        );
    }
    eprintln!("tra worker {process}: job {:016x}: starting", req.token);
    let dir = job_dir(req.token)?;
    let result = (|| -> Result<Option<JobReport>, (String, u8)> {
        let job = dir.join("job.json");
        std::fs::write(&job, serde_json::to_vec(&req.job).expect("JSON"))
            .map_err(|e| (format!("cannot write {}: {e}", job.display()), 2))?;
        let res = dir.join(format!("result-{process}.json"));
        let a = Assignment {
            process,
            addresses: req.addresses.clone(),
            token: req.token,
            job,
            result: res.clone(),
            watch_stdin: true,
        };
        let child = launcher.spawn(&a).map_err(|e| (e, 2))?;
        let _ = send(&mut stream, &AgentEvent::Started { process, pid: child.id() });
        // The client going away cancels the job.
        let cancel = Arc::new(AtomicBool::new(false));
        {
            let cancel = cancel.clone();
            let mut r = reader;
            let _ = r.get_ref().set_read_timeout(None);
            std::thread::spawn(move || {
                let mut buf = String::new();
                let _ = r.read_line(&mut buf);
                cancel.store(true, Ordering::SeqCst);
            });
        }
        let mut children = vec![(process, child)];
        let timeout = Duration::from_secs_f64(req.timeout_s.max(1.0));
        match watch(&mut children, std::slice::from_ref(&res), timeout, &cancel) {
            Ok(()) => {
                let outcome: Option<Outcome> = std::fs::read(&res).ok().and_then(|b| serde_json::from_slice(&b).ok());
                Ok(outcome.and_then(|o| o.report))
            }
            Err(f) => {
                super::job::remove_partial_outputs(&req.job, req.token);
                Err((f.message, f.rank))
            }
        }
    })();
    let _ = std::fs::remove_dir_all(&dir);
    match result {
        Ok(report) => {
            eprintln!("tra worker {process}: job {:016x}: done", req.token);
            send(&mut stream, &AgentEvent::Done { process, report })
                .map_err(|e| format!("cannot answer the client: {e}"))
        }
        Err((e, rank)) => {
            eprintln!("tra worker {process}: job {:016x}: {e}", req.token);
            fail(&mut stream, e, rank)
        }
    }
}

/// Run a job on the agents of a host file; answers process 0's report.
pub fn run_hosts(spec: &JobSpec, hosts: &[Host], timeout: Duration) -> Result<JobReport, String> {
    if spec.processes != hosts.len() {
        return Err(format!("the job has {} processes but the host file lists {}", spec.processes, hosts.len()));
    }
    let token: u64 = rand::random();
    let req = JobRequest {
        job: spec.clone(),
        token,
        addresses: hosts.iter().map(|h| h.data.clone()).collect(),
        timeout_s: timeout.as_secs_f64(),
    };
    let mut line = serde_json::to_vec(&req).expect("JSON");
    line.push(b'\n');
    // Reach every agent first.
    let mut streams = Vec::new();
    for (i, h) in hosts.iter().enumerate() {
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
        s.write_all(&line).map_err(|e| format!("worker {i} at {}: cannot send the job: {e}", h.control))?;
        streams.push(s);
    }
    let (tx, rx) = mpsc::channel::<(usize, Option<AgentEvent>)>();
    for (i, s) in streams.iter().enumerate() {
        let s = s.try_clone().map_err(|e| e.to_string())?;
        let tx = tx.clone();
        std::thread::spawn(move || {
            let mut r = BufReader::new(s);
            loop {
                let mut line = String::new();
                match r.read_line(&mut line) {
                    Ok(0) | Err(_) => {
                        let _ = tx.send((i, None));
                        return;
                    }
                    Ok(_) => {
                        let ev = serde_json::from_str::<AgentEvent>(&line).ok();
                        let end = !matches!(ev, Some(AgentEvent::Started { .. }));
                        let unreadable = AgentEvent::Failed {
                            process: i,
                            error: format!("worker {i}: unreadable answer {line:?}"),
                            rank: 2,
                        };
                        let _ = tx.send((i, ev.or(Some(unreadable))));
                        if end {
                            return;
                        }
                    }
                }
            }
        });
    }
    drop(tx);
    let start = Instant::now();
    let mut finished = vec![false; hosts.len()];
    let mut report: Option<JobReport> = None;
    // (rank, process, message) of every failure seen; after the first, wait a
    // moment for the others (the root cause is usually among them).
    let mut failures: Vec<(u8, usize, String)> = Vec::new();
    let mut first_failure: Option<Instant> = None;
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
        let left = (timeout + Duration::from_secs(10)).checked_sub(start.elapsed());
        let Some(left) = left else {
            break Err(format!("the job did not finish within {:.0} s", timeout.as_secs_f64()));
        };
        let left = if first_failure.is_some() { left.min(Duration::from_millis(50)) } else { left };
        match rx.recv_timeout(left) {
            Ok((_, Some(AgentEvent::Started { .. }))) => {}
            Ok((i, Some(AgentEvent::Done { report: r, .. }))) => {
                finished[i] = true;
                if i == 0 {
                    report = r;
                }
            }
            Ok((i, Some(AgentEvent::Failed { error, rank, .. }))) => {
                finished[i] = true;
                failures.push((rank, i, format!("worker {i} ({}): {error}", hosts[i].control)));
                first_failure.get_or_insert_with(Instant::now);
            }
            Ok((i, None)) => {
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
    // Closing the connections stops every job process still running.
    for s in &streams {
        let _ = s.shutdown(std::net::Shutdown::Both);
    }
    outcome?;
    report.ok_or_else(|| "worker 0 sent no report".to_string())
}

/// The default host-file path for messages.
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
    }
}
