//! The cluster runtime: the same IA plans over several processes (and
//! machines), on timely dataflow's cluster mode.
//!
//! - [`dataflow`]: one process's part of a run — the plan as a timely
//!   dataflow (SHUF is an `exchange` routed by the optimizer's placement
//!   function, BCAST one copy per process, local operators fire when their
//!   input is complete), outputs and figures gathered on process 0; split into
//!   bootstrap, plan preparation, exchanges, local operators, the streamed
//!   matmul and the gathering of results.
//! - [`ops`]: the local operators, bit for bit the thread runtime's.
//! - [`wire`]: the stream container: blocks as raw bytes, batches closed by size.
//! - [`input`]: which tuples each site holds; each process reads only its own
//!   from the `.npy` files; [`output`]: each site writes its own tuples of the
//!   outputs in place.
//! - [`job`]: a job as files (plan, `.npy` inputs and outputs, put in place
//!   only when every process succeeded) and what a job process reports.
//! - [`supervise`]: job processes (each serves jobs, warm between them),
//!   watching and stopping them: `N` fresh local processes on loopback, or
//!   one warm one per machine under [`agent`]s; a process that dies fails
//!   the job everywhere within seconds, and nothing is left behind.
//! - [`machine`]: the machine's processor time over a job, beside the
//!   process's own (a calibration warns when others were busy).
//! - [`heartbeat`]: a process that stops responding fails the job within
//!   seconds too.
//! - [`auth`]: the cluster secret and the challenge-response every
//!   connection passes; [`confine`]: the directories a worker's jobs may use.
//! - [`agent`]: `tra worker` on each machine of a host file, and the client
//!   side of `tra run --hosts`.

pub mod agent;
pub mod auth;
pub mod confine;
pub mod dataflow;
pub mod heartbeat;
pub mod input;
pub mod job;
pub mod machine;
mod mapped;
pub mod ops;
pub mod output;
pub mod supervise;
pub mod wire;

pub use dataflow::{run_process, ClusterError, ClusterRun, Comm, PeerWatch, RunConfig};
pub use input::InputData;
pub use job::{JobReport, JobSpec};

use crate::semantics::AnyLayout;
use crate::threads::{Elem, TRelation};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tra_optimizer::program::Plan;

/// Run a plan as `processes` timely processes of `workers` workers each,
/// all inside this OS process (one thread per process, talking over
/// loopback TCP exactly as separate processes do): for tests.
pub fn run_loopback<T: Elem>(
    plan: &Plan,
    processes: usize,
    workers: usize,
    inputs: &BTreeMap<String, TRelation<T>>,
    layout: AnyLayout,
) -> Result<ClusterRun<T>, ClusterError> {
    let addresses = free_loopback_addresses(processes).map_err(|e| ClusterError { node: None, message: e })?;
    let data: BTreeMap<String, InputData<T>> =
        inputs.iter().map(|(n, r)| (n.clone(), InputData::Memory(Arc::new(r.clone())))).collect();
    let cfg = RunConfig { layout, threads: 2, ..RunConfig::default() };
    let token = rand::random::<u64>();
    let key = auth::Secret::generate().job_key(token);
    let handles: Vec<_> = (0..processes)
        .map(|process| {
            let comm = Comm::Cluster {
                process,
                addresses: addresses.clone(),
                workers,
                key: key.clone(),
                token,
                connect_timeout: Duration::from_secs(30),
                listen: None,
                watch: None,
            };
            let (plan, data, cfg) = (plan.clone(), data.clone(), cfg.clone());
            std::thread::Builder::new()
                .name(format!("tra-process-{process}"))
                .spawn(move || run_process(&plan, &data, &comm, &cfg))
                .expect("thread")
        })
        .collect();
    let mut first = None;
    for h in handles {
        match h.join() {
            Ok(Ok(Some(run))) => first = Some(Ok(run)),
            Ok(Ok(None)) => {}
            Ok(Err(e)) => {
                if first.as_ref().is_none_or(|f: &Result<_, _>| f.is_ok()) {
                    first = Some(Err(e));
                }
            }
            Err(_) => first = Some(Err(ClusterError { node: None, message: "a process thread panicked".into() })),
        }
    }
    first.unwrap_or_else(|| Err(ClusterError { node: None, message: "process 0 gave no result".into() }))
}

/// `n` loopback addresses with ports that were free a moment ago, chosen
/// below the usual ephemeral range (32768 and up), so that the outgoing
/// connections of other processes cannot take them before they are bound.
///
/// A port is handed out once per OS process: two runs started side by side
/// (tests in one binary, local clusters of one server) never race for the
/// same port between this probe and the process that binds it.
pub fn free_loopback_addresses(n: usize) -> Result<Vec<String>, String> {
    static HANDED_OUT: std::sync::Mutex<Option<std::collections::HashSet<u16>>> = std::sync::Mutex::new(None);
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|p| p.into_inner());
    let handed_out = handed_out.get_or_insert_with(Default::default);
    if handed_out.len() > 15_000 {
        // Almost every port of the range was used once: those runs are long over.
        handed_out.clear();
    }
    let mut out = Vec::with_capacity(n);
    let mut held = Vec::with_capacity(n);
    for _ in 0..2000 {
        if out.len() == n {
            break;
        }
        let port: u16 = rand::random_range(12000..32000);
        if handed_out.contains(&port) {
            continue;
        }
        if let Ok(l) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            handed_out.insert(port);
            out.push(format!("127.0.0.1:{port}"));
            held.push(l);
        }
    }
    if out.len() < n {
        // Fall back on ports the system picks.
        while out.len() < n {
            let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("cannot find a free port: {e}"))?;
            out.push(l.local_addr().map_err(|e| e.to_string())?.to_string());
            held.push(l);
        }
    }
    Ok(out)
}
