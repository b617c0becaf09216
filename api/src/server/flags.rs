//! The flags of `tra serve`: every limit of [`ServerConfig`], with its
//! default, as `tra serve --help` shows it.

use super::ServerConfig;
use std::time::Duration;

/// Serve the HTTP API and the web page (loopback unless told otherwise).
///
/// Every request is bounded before its cost is paid: the body by
/// --max-body-bytes (a larger Content-Length is refused before reading), its
/// CPU work by --optimize-ms and --execute-ms (one deadline per request,
/// checked in type checking, analysis, saturation, extraction and
/// execution), executions by the memory they need (estimated from tuples,
/// blocks and sites) within --execute-memory-bytes, and the connections by
/// --max-connections and the header and body timeouts. Requests that must
/// wait queue (at most --max-queued) until their deadline, then get 503
/// with Retry-After. Bound to loopback, only requests for localhost,
/// `127.0.0.1` or `[::1]` (with the port) are answered, and POST bodies must be
/// sent as application/json, so that web pages cannot use the service.
#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub addr: std::net::SocketAddr,
    /// Also answer requests for this host name (`NAME` or `NAME:PORT`; repeat
    /// for several). Bound to loopback, other names get 403; bound to another
    /// address, Host is checked only when this is given.
    #[arg(long = "allow-host", value_name = "NAME")]
    pub allow_host: Vec<String>,
    /// Largest request body, in bytes (413 above it).
    #[arg(long, default_value_t = 4 << 20)]
    pub max_body_bytes: usize,
    /// Most e-graph nodes per optimization.
    #[arg(long, default_value_t = 100_000)]
    pub max_egraph_nodes: usize,
    /// Most wall time of one optimization (type checking, analysis,
    /// saturation, extraction), in milliseconds (503 past it).
    #[arg(long, default_value_t = 10_000)]
    pub optimize_ms: u64,
    /// Most bytes of key sets one request's analysis may hold (filters and
    /// key maps list the keys they keep), with the per-site layouts of its
    /// candidate plans (a key's site per tuple); 503 past it.
    #[arg(long, default_value_t = 256 << 20)]
    pub analysis_memory_bytes: u64,
    /// Most wall time of one execution after its optimization, in milliseconds (503 past it).
    #[arg(long, default_value_t = 60_000)]
    pub execute_ms: u64,
    /// Most floats of data one `/v1/execute` may hold (input data, and any one
    /// relation; a matrix product summed as it is made holds none of its products).
    #[arg(long, default_value_t = 50_000_000)]
    pub max_execute_floats: u64,
    /// Most floats of one output `/v1/execute` returns as a `.npy`
    /// (`"return": {"format": "npy"}`; 413 above it).
    #[arg(long, default_value_t = 50_000_000)]
    pub max_return_floats: u64,
    /// Memory, in bytes, the executions in flight may use together, estimated
    /// before they start (one larger than this gets 413; others wait).
    #[arg(long, default_value_t = 1 << 30)]
    pub execute_memory_bytes: u64,
    /// Most sites one `/v1/execute` may simulate (422 above it).
    #[arg(long, default_value_t = 1024)]
    pub max_execute_sites: usize,
    /// Most executions at once (more wait).
    #[arg(long, default_value_t = 2)]
    pub max_concurrent_executions: usize,
    /// Most optimizations (and other CPU work) at once, 1 to 512; default: one per core.
    /// The service keeps one thread for each.
    #[arg(long, value_parser = cpu_slots)]
    pub max_concurrent_optimizations: Option<usize>,
    /// Most requests waiting for a CPU slot or execution memory (503 with Retry-After beyond).
    #[arg(long, default_value_t = 64)]
    pub max_queued: usize,
    /// Most POST requests in flight (503 with Retry-After beyond).
    #[arg(long, default_value_t = 128)]
    pub max_requests: usize,
    /// Bytes of optimize answers kept for programs asked again (0 turns the
    /// cache off); the use is reported by /healthz.
    #[arg(long, default_value_t = 64 << 20)]
    pub answer_cache_bytes: usize,
    /// Most open connections; a new one past it closes the oldest idle one.
    #[arg(long, default_value_t = 512)]
    pub max_connections: usize,
    /// Time a client has to send a request's headers, in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    pub header_timeout_ms: u64,
    /// Time a client has to send a request's body, in milliseconds.
    #[arg(long, default_value_t = 30_000)]
    pub body_timeout_ms: u64,
    /// Time requests in flight get to finish on shutdown, in milliseconds.
    #[arg(long, default_value_t = 5_000)]
    pub shutdown_grace_ms: u64,
    /// The cluster profile (JSON, as `tra calibrate` prints it) used by the
    /// time cost model for requests that give no `cluster.profile`.
    #[arg(long, value_name = "FILE")]
    pub profile: Option<String>,
    /// The cost model of requests that name no `cluster.cost_model`:
    /// `network` (floats moved, the paper's model) or `time` (predicted
    /// seconds under the profile; with --profile of this cluster, the plan
    /// that is fastest on it). Default: network.
    #[arg(long, value_parser = ["network", "time"])]
    pub cost_model: Option<String>,
    /// Where `POST /v1/execute` runs: threads, or the workers of a host file.
    #[command(flatten)]
    pub cluster: crate::cluster::ServeClusterArgs,
}

impl ServeArgs {
    /// The configuration these flags give.
    pub fn config(&self) -> Result<ServerConfig, String> {
        let d = ServerConfig::default();
        Ok(ServerConfig {
            cluster: self.cluster.target()?,
            addr: self.addr,
            allowed_hosts: self.allow_host.clone(),
            max_body_bytes: self.max_body_bytes,
            max_egraph_nodes: self.max_egraph_nodes,
            optimize_time: Duration::from_millis(self.optimize_ms),
            analysis_memory_bytes: self.analysis_memory_bytes,
            execute_time: Duration::from_millis(self.execute_ms),
            max_execute_floats: self.max_execute_floats,
            max_return_floats: self.max_return_floats,
            execute_memory_bytes: self.execute_memory_bytes,
            max_execute_sites: self.max_execute_sites,
            max_concurrent_executions: self.max_concurrent_executions,
            max_concurrent_optimizations: self.max_concurrent_optimizations.unwrap_or(d.max_concurrent_optimizations),
            max_queued: self.max_queued,
            max_requests: self.max_requests,
            answer_cache_bytes: self.answer_cache_bytes,
            max_connections: self.max_connections,
            header_timeout: Duration::from_millis(self.header_timeout_ms),
            body_timeout: Duration::from_millis(self.body_timeout_ms),
            shutdown_grace: Duration::from_millis(self.shutdown_grace_ms),
            profile: self.profile.as_deref().map(crate::cost_model::read_profile).transpose()?,
            cost_model: self.cost_model.as_deref().map(crate::cost_model::named),
            ..d
        })
    }
}

/// `--max-concurrent-optimizations`: the service starts a thread per slot,
/// so the count is bounded.
fn cpu_slots(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n @ 1..=512) => Ok(n),
        Ok(n) => Err(format!("{n} is not between 1 and 512")),
        Err(e) => Err(e.to_string()),
    }
}
