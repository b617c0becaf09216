//! The HTTP service (`tra serve`): the contract of `docs/API.md` over axum.
//!
//! - `POST /v1/optimize`: a TRA program → the chosen IA plan, its cost, the
//!   alternatives, the rules that built it and the run's figures.
//! - `POST /v1/execute`: a program plus data → optimize, run the chosen plan on
//!   the thread executor, report floats moved (measured and predicted),
//!   timings per operator and the outputs (checksum, and the data when small).
//! - `GET /v1/rules`, `/v1/kernels`, `/v1/examples`, `/openapi.json`,
//!   `/healthz` (with the figures of every limit), and `/` (the web page).
//!
//! Optimize answers are cached by program, in a budget of bytes (see
//! [`cache`]), so asking again for the same plan costs a lookup.
//!
//! Every error is `{"error": {"code", "message", "at"}}` ([`ApiError`]).
//! Small requests must not be able to take the service down, so every cost
//! is bounded before it is paid:
//!
//! - the connection: [`listener`] (connection cap, header and body read
//!   timeouts, shutdown bounded in time) and [`hygiene`] (`Host`, content
//!   type, declared size), and a cap on requests in flight with load shedding;
//! - the CPU: parsing, type checking and optimization run on threads kept
//!   for them ([`cpu_pool`]), execution on blocking threads, behind
//!   [`admission::Slots`] (never on the async
//!   runtime, so `/healthz` always answers), each request under one
//!   [`Deadline`] checked cooperatively down to the key enumerations of the
//!   type checker and the kernel calls of the executor;
//! - the memory: executions are admitted by their estimated bytes into a
//!   global budget ([`admission`]), the answer cache and the executor's
//!   buffer pool have budgets of their own.
//!
//! Every limit that stops a request is named, with its value and its flag,
//! in the error message.

pub mod admission;
pub mod cache;
mod cluster_execute;
pub mod cpu_pool;
mod error;
mod execute;
pub mod flags;
pub mod hygiene;
pub mod listener;
mod npy_wire;
pub mod openapi;

pub use cache::{CacheStats, CachedAnswer};
pub use error::ApiError;

use axum::body::Bytes;
use axum::error_handling::HandleErrorLayer;
use axum::extract::{DefaultBodyLimit, FromRequest, Request, State};
use axum::http::{header, Method, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{BoxError, Json, Router};
use indexmap::IndexMap;
use serde_json::{json, Value};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tra_executor::threads::ThreadRuntime;
use tra_optimizer::check::check_plan;
use tra_optimizer::cost::{self, Weights};
use tra_optimizer::deadline::{self, Deadline};
use tra_optimizer::optimize::{optimize_with, Limits, OnRuleFailure, OptimizeAnswer};
use tra_optimizer::rule::RuleDef;
use tra_optimizer::{Plan, Program};

/// The web page served at `/`.
pub const INDEX_HTML: &str = include_str!("../../web/index.html");

/// The page's static files, served at `/web/<path>` and built into the binary
/// (so `tra serve` needs no files at run time): `(path, content type, bytes)`.
pub const WEB_ASSETS: &[(&str, &str, &[u8])] = &[
    ("style.css", "text/css; charset=utf-8", include_bytes!("../../web/style.css")),
    ("app.js", "text/javascript; charset=utf-8", include_bytes!("../../web/app.js")),
    ("dag.js", "text/javascript; charset=utf-8", include_bytes!("../../web/dag.js")),
    ("chart.js", "text/javascript; charset=utf-8", include_bytes!("../../web/chart.js")),
    ("editor.js", "text/javascript; charset=utf-8", include_bytes!("../../web/editor.js")),
    ("util.js", "text/javascript; charset=utf-8", include_bytes!("../../web/util.js")),
    ("explain.js", "text/javascript; charset=utf-8", include_bytes!("../../web/explain.js")),
    ("vendor/dagre.min.js", "text/javascript; charset=utf-8", include_bytes!("../../web/vendor/dagre.min.js")),
    ("vendor/dagre.LICENSE", "text/plain; charset=utf-8", include_bytes!("../../web/vendor/dagre.LICENSE")),
];

/// Every route of the service: `(method, path, summary)`. The router, the
/// OpenAPI document, and the 404/405 answers are all checked against it.
pub const ROUTES: &[(&str, &str, &str)] = &[
    ("GET", "/", "The web page: pick an example, edit it, optimize it"),
    ("GET", "/healthz", "Liveness: {\"status\": \"ok\"}"),
    ("GET", "/openapi.json", "This contract, as an OpenAPI 3.1 document"),
    ("GET", "/v1/rules", "The rewrite rules: name, family, equation, condition, why"),
    ("GET", "/v1/kernels", "The kernel catalog"),
    ("GET", "/v1/examples", "Example programs by name: {name: {description, program}}"),
    ("POST", "/v1/optimize", "Optimize a TRA program into a distributed IA plan"),
    ("POST", "/v1/execute", "Optimize a program and run the chosen plan on given or random data"),
    ("POST", "/v1/einsum", "Compile an einsum expression into a TRA program over blocked tensors and optimize it"),
];

/// How the service runs, and the limits that keep it safe. Every limit that
/// stops a request is named, with its value, in the error message; each is
/// a flag of `tra serve` (`README.md`, "The HTTP API").
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Address to listen on (default `127.0.0.1:8080`: local only).
    pub addr: SocketAddr,
    /// More names to accept in `Host` (see [`hygiene`]); bound to loopback
    /// only `localhost`, `127.0.0.1` and `[::1]` with the port are accepted.
    pub allowed_hosts: Vec<String>,
    /// Largest request body, in bytes (default 4 MiB); larger ones get 413 `body_too_large`.
    pub max_body_bytes: usize,
    /// Most e-graph nodes during optimization (default 100,000).
    pub max_egraph_nodes: usize,
    /// Most saturation iterations per phase (default 100).
    pub max_iterations: usize,
    /// Most wall time of one optimization, all of it: type checking,
    /// analysis, saturation (at most three quarters of it), extraction
    /// (default 10 s).
    pub optimize_time: Duration,
    /// Most bytes of the key sets one request's analysis may hold (filters
    /// and key maps leave relations whose keys are listed; default 256 MiB);
    /// past it the request gets 503 `limit_exceeded`.
    pub analysis_memory_bytes: u64,
    /// Most optimizations (and other CPU work: parsing, type checking,
    /// einsum compilation) running at once; others wait (default: the number of CPUs).
    pub max_concurrent_optimizations: usize,
    /// Most floats of input data an execution may use, and most floats any one
    /// relation of the program may hold (default 50 million); larger gets 413 `data_too_large`.
    pub max_execute_floats: u64,
    /// Most floats of one output `POST /v1/execute` returns as a `.npy`
    /// (`"return": {"format": "npy"}`; its dense or relation array, holes
    /// zero-filled; default 50 million); larger gets 413 `data_too_large`.
    pub max_return_floats: u64,
    /// Memory all executions in flight may use together, estimated from
    /// tuples, blocks and sites before they start (default 1 GiB); one
    /// execution larger than this gets 413 `data_too_large`, others wait.
    pub execute_memory_bytes: u64,
    /// Most sites an execution may simulate (default 1,024; optimizing
    /// accepts up to 4,096).
    pub max_execute_sites: usize,
    /// Most wall time of one execution, after its optimization (default 60 s).
    pub execute_time: Duration,
    /// Most executions running at once; others wait (default 2).
    pub max_concurrent_executions: usize,
    /// Run `/v1/execute` on these cluster workers instead of threads (`--hosts`).
    pub cluster: Option<std::sync::Arc<crate::cluster::ClusterTarget>>,
    /// Most requests waiting for a CPU slot or for execution memory; more
    /// get 503 `overloaded` with `Retry-After` (default 64).
    pub max_queued: usize,
    /// Most `POST` requests in flight (being read, waiting or working);
    /// more get 503 `overloaded` at once (default 128).
    pub max_requests: usize,
    /// Bytes of optimize answers kept for programs asked again (default 64 MiB; 0: none).
    pub answer_cache_bytes: usize,
    /// Most open connections (default 512); past it the oldest idle one is closed.
    pub max_connections: usize,
    /// Time a client has to send a request's headers (default 10 s).
    pub header_timeout: Duration,
    /// Time a client has to send a request's body (default 30 s; also the
    /// most time between two of its packets).
    pub body_timeout: Duration,
    /// Time requests in flight get to finish on shutdown before their work
    /// is cancelled (default 5 s).
    pub shutdown_grace: Duration,
    /// Answer 500 when a rewrite rule fails (breaks an invariant of the
    /// e-graph) instead of optimizing again without it and answering with a
    /// warning (default false; `tra serve --strict`).
    pub strict: bool,
    /// The cluster profile of a request that gives none (`tra serve
    /// --profile FILE`, as `tra calibrate` prints it); the defaults when absent.
    pub profile: Option<tra_optimizer::time::Profile>,
    /// The cost model of a request that names none (`tra serve
    /// --cost-model`); `network` when absent.
    pub cost_model: Option<tra_optimizer::time::CostModel>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            addr: SocketAddr::from(([127, 0, 0, 1], 8080)),
            allowed_hosts: Vec::new(),
            max_body_bytes: 4 * 1024 * 1024,
            max_egraph_nodes: 100_000,
            max_iterations: 100,
            optimize_time: Duration::from_secs(10),
            analysis_memory_bytes: 256 << 20,
            max_concurrent_optimizations: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(4),
            max_execute_floats: 50_000_000,
            max_return_floats: 50_000_000,
            execute_memory_bytes: 1 << 30,
            max_execute_sites: 1024,
            execute_time: Duration::from_secs(60),
            max_concurrent_executions: 2,
            cluster: None,
            max_queued: 64,
            max_requests: 128,
            answer_cache_bytes: 64 << 20,
            max_connections: 512,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(5),
            strict: false,
            profile: None,
            cost_model: None,
        }
    }
}

impl ServerConfig {
    /// The optimizer limits of this configuration.
    pub fn limits(&self) -> Limits {
        Limits {
            nodes: self.max_egraph_nodes,
            iterations: self.max_iterations,
            time: self.optimize_time,
            ..Limits::default()
        }
    }

    fn limits_text(&self) -> String {
        format!(
            "this server's limits: {} e-graph nodes, {} iterations, {} s of optimization",
            self.max_egraph_nodes,
            self.max_iterations,
            self.optimize_time.as_secs_f64()
        )
    }

    /// The deadline words of the optimize limit.
    fn optimize_limit_words(&self) -> String {
        format!("this server's optimize limit of {} s (--optimize-ms)", self.optimize_time.as_secs_f64())
    }
}

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

struct Inner {
    config: ServerConfig,
    rules: Arc<Vec<RuleDef>>,
    rules_json: Value,
    kernels_json: Value,
    examples_json: Value,
    openapi_json: Value,
    /// CPU work: parsing, type checking, optimization, einsum compilation.
    cpu_slots: admission::Slots,
    /// The threads that CPU work runs on, one per slot.
    cpu_threads: cpu_pool::CpuPool,
    execute_slots: admission::Slots,
    memory: Arc<admission::MemoryBudget>,
    answers: cache::AnswerCache,
    /// The executor of `/v1/execute`, with a bounded buffer pool.
    runtime: Arc<ThreadRuntime<f64>>,
    /// Set when the shutdown grace has passed: every deadline passes at once.
    cancel: Arc<AtomicBool>,
    connections: Arc<listener::Connections>,
}

/// Bytes of freed blocks the executor of `/v1/execute` keeps for reuse.
pub const EXECUTOR_POOL_BYTES: u64 = 64 << 20;

// The rule set is built once and shared by every optimization thread.
const _: fn() = || {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Arc<Vec<RuleDef>>>();
};

impl AppState {
    /// Build the state: the rule set (once), the static answers, the slots and budgets.
    pub fn new(config: ServerConfig) -> AppState {
        AppState::with_rules(config, tra_rules::all())
    }

    /// The same with another rule set (tests of a broken rule).
    pub fn with_rules(config: ServerConfig, rules: Vec<RuleDef>) -> AppState {
        let rules_json = Value::Array(
            rules
                .iter()
                .map(|r| {
                    json!({
                        "name": r.name, "family": r.family, "equation": r.equation,
                        "condition": r.condition, "why": r.why, "lowering": r.lowering(), "rewrites": r.rewrites.len(),
                    })
                })
                .collect(),
        );
        let kernels_json = serde_json::to_value(tra_optimizer::kernel::catalog()).expect("the catalog serializes");
        let inner = Inner {
            rules: Arc::new(rules),
            rules_json,
            kernels_json,
            examples_json: crate::examples::as_json(),
            openapi_json: openapi::document(&config),
            cpu_slots: admission::Slots::new("optimization", config.max_concurrent_optimizations, config.max_queued),
            cpu_threads: cpu_pool::CpuPool::new("tra-optimize", config.max_concurrent_optimizations),
            execute_slots: admission::Slots::new("execution", config.max_concurrent_executions, config.max_queued),
            memory: Arc::new(admission::MemoryBudget::new(config.execute_memory_bytes, config.max_queued)),
            answers: cache::AnswerCache::new(config.answer_cache_bytes),
            runtime: Arc::new(ThreadRuntime::with_threads_and_pool(
                std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
                EXECUTOR_POOL_BYTES,
            )),
            cancel: Arc::new(AtomicBool::new(false)),
            connections: Arc::default(),
            config,
        };
        AppState { inner: Arc::new(inner) }
    }

    /// The configuration.
    pub fn config(&self) -> &ServerConfig {
        &self.inner.config
    }

    /// A deadline `budget` from now (`what` names the limit in messages),
    /// cancelled when the server's shutdown grace ends.
    pub fn deadline(&self, budget: Duration, what: String) -> Deadline {
        let key_budget = self.config().analysis_memory_bytes;
        Deadline::after(budget, what).with_cancel(self.inner.cancel.clone()).with_key_budget(
            key_budget,
            format!(
                "this server's analysis memory limit of {} (--analysis-memory-bytes)",
                admission::human(key_budget)
            ),
        )
    }

    /// The deadline of one optimization started now.
    pub fn optimize_deadline(&self) -> Deadline {
        self.deadline(self.config().optimize_time, self.config().optimize_limit_words())
    }

    /// Run CPU work on one of the CPU threads ([`cpu_pool`]) behind a CPU slot, with `deadline`
    /// installed for it (see [`tra_optimizer::deadline`]); waiting for the
    /// slot counts against the deadline.
    pub async fn cpu<R: Send + 'static>(
        &self,
        deadline: &Deadline,
        work: impl FnOnce() -> Result<R, ApiError> + Send + 'static,
    ) -> Result<R, ApiError> {
        let permit = self.inner.cpu_slots.acquire(deadline).await?;
        let d = deadline.clone();
        self.inner
            .cpu_threads
            .run(move || {
                let _permit = permit;
                deadline::within(d, work)
            })
            .await
            .map_err(|e| ApiError::internal(format!("the optimizer crashed: {e}")))?
    }

    /// Optimize a program on this thread (a blocking one, under a deadline:
    /// call it inside [`AppState::cpu`]); a program asked before is answered
    /// from the cache.
    pub fn optimize_here(&self, program: &Program) -> Result<Arc<CachedAnswer>, ApiError> {
        let key = cache_key(program)?;
        match self.inner.answers.get(&key) {
            Some(hit) => Ok(hit),
            None => self.optimize_uncached(key, program),
        }
    }

    /// The program with the server's profile when it names none, and the
    /// server's cost model when `given`, the request's `cluster` object
    /// (`Value::Null` without one), has no `cost_model`.
    pub(crate) fn with_defaults(&self, given: &Value, mut program: Program) -> Program {
        let config = &self.inner.config;
        let mut cluster = program.cluster();
        if cluster.profile.is_none() {
            cluster.profile = config.profile;
        }
        if let Some(model) = config.cost_model.filter(|_| given.get("cost_model").is_none()) {
            cluster.cost_model = model;
        }
        if program.cluster.is_some() || cluster != tra_optimizer::Cluster::default() {
            program.cluster = Some(cluster);
        }
        program
    }

    /// Optimize a program the cache does not hold (blocking, as [`AppState::optimize_here`]).
    fn optimize_uncached(&self, key: String, program: &Program) -> Result<Arc<CachedAnswer>, ApiError> {
        let limited = |mut err: ApiError| {
            if err.status == StatusCode::SERVICE_UNAVAILABLE {
                err.message = format!("{} ({})", err.message, self.inner.config.limits_text());
            }
            err
        };
        let on_failure = if self.inner.config.strict { OnRuleFailure::Fail } else { OnRuleFailure::Retry };
        let answer =
            optimize_with(program, &self.inner.rules, &self.inner.config.limits(), on_failure).map_err(|e| {
                // A request stopped by a limit may have held much memory (key sets, a large e-graph).
                admission::give_back_freed_memory();
                limited(e.into())
            })?;
        let reports = answer_reports(program, &answer);
        let out = AnswerOut::new(&answer, &reports);
        if deadline::expired() {
            // The reports type-check every alternative: past the deadline they may be cut short.
            return Err(limited(ApiError::limit(format!("{} while writing the answer", deadline::reason()))));
        }
        let body = Bytes::from(serde_json::to_vec(&out).expect("JSON encodes"));
        let cached = Arc::new(CachedAnswer { body });
        // Only complete answers are kept: one cut short by the time limit
        // could come out better on a quieter machine.
        if answer.stats.stop_reason != "time_limit" {
            self.inner.answers.put(key, cached.clone());
        }
        Ok(cached)
    }

    /// Optimize a program on a CPU thread, under the configured limits,
    /// a CPU slot and the optimize deadline; a program asked before is
    /// answered from the cache.
    pub async fn optimize(&self, program: Program) -> Result<Arc<CachedAnswer>, ApiError> {
        let st = self.clone();
        self.cpu(&self.optimize_deadline(), move || st.optimize_here(&program)).await
    }

    /// Hits, misses and bytes of the answer cache.
    pub fn cache_stats(&self) -> CacheStats {
        self.inner.answers.stats()
    }

    /// The figures of every limit, for `/healthz`.
    pub fn health(&self) -> Value {
        let c = self.config();
        let (cpu_busy, cpu_waiting) = self.inner.cpu_slots.stats();
        let (exec_busy, exec_waiting) = self.inner.execute_slots.stats();
        json!({
            "status": "ok",
            "answer_cache": self.cache_stats(),
            "execution_memory": self.inner.memory.stats(),
            "executor_pool": {"held_bytes": self.inner.runtime.pool().stats().held_bytes, "budget_bytes": EXECUTOR_POOL_BYTES},
            "optimizations": {"running": cpu_busy, "waiting": cpu_waiting, "max": c.max_concurrent_optimizations},
            "executions": {"running": exec_busy, "waiting": exec_waiting, "max": c.max_concurrent_executions},
            "connections": self.inner.connections.stats(c.max_connections),
        })
    }
}

/// The cache key of a program: its parsed form, serialized again.
fn cache_key(program: &Program) -> Result<String, ApiError> {
    let failed = |e: serde_json::Error| ApiError::internal(format!("cannot key the program: {e}"));
    let mut key = serde_json::to_string(program).map_err(failed)?;
    // The dims' names change the labels of the answer (einsum's letters).
    if !program.dim_names.is_empty() {
        key.push_str(&serde_json::to_string(&program.dim_names).map_err(failed)?);
    }
    Ok(key)
}

/// The per-operator figures of a plan (`tra_optimizer::cost::plan_report`),
/// or `None` (`null`) if the plan does not type-check (which would be a bug, logged).
fn plan_figures(plan: &Plan, program: &Program) -> Option<IndexMap<String, cost::NodeReport>> {
    let cluster = program.cluster();
    match check_plan(plan, cluster.sites) {
        Ok(typed) => {
            let w = Weights { network: cluster.network_weight, compute: cluster.compute_weight };
            Some(cost::plan_report(plan, &typed, cluster.sites, w))
        }
        Err(e) => {
            tracing::warn!(target: "tra::http", at = %e.at, "an optimized plan does not type-check: {}", e.message);
            None
        }
    }
}

/// The `report` of every alternative of an answer, then that of the chosen
/// plan where it is not the first alternative's.
type Reports = Vec<Option<IndexMap<String, cost::NodeReport>>>;

/// The optimize answer as the service writes it, `report` on the answer and
/// on every alternative (`tra optimize --format json` prints it too).
pub fn answer_value(program: &Program, answer: &OptimizeAnswer) -> Value {
    let reports = answer_reports(program, answer);
    serde_json::to_value(AnswerOut::new(answer, &reports)).expect("an optimize answer serializes")
}

fn answer_reports(program: &Program, answer: &OptimizeAnswer) -> Reports {
    let mut reports: Reports = answer.alternatives.iter().map(|a| plan_figures(&a.plan, program)).collect();
    if !answer.alternatives.iter().any(|a| a.plan == answer.plan) {
        reports.push(plan_figures(&answer.plan, program));
    }
    reports
}

/// The optimize answer as the service writes it: the answer's fields, then
/// `report` (the chosen plan's per-operator figures), with a `report` added
/// to every alternative, serialized straight to bytes. Building the `Value` tree first
/// (a map per operator of every alternative) took about 6% of an uncached
/// request's processor time on a plain matmul.
#[derive(serde::Serialize)]
struct AnswerOut<'a> {
    plan: &'a Plan,
    cost: &'a tra_optimizer::optimize::PlanCost,
    site_loads: &'a [tra_optimizer::loads::SiteLoad],
    alternatives: Vec<AlternativeOut<'a>>,
    rules_applied: &'a [String],
    warnings: &'a [tra_optimizer::optimize::Warning],
    stats: &'a tra_optimizer::optimize::Stats,
    report: &'a Option<IndexMap<String, cost::NodeReport>>,
}

/// An alternative with its `report`.
#[derive(serde::Serialize)]
struct AlternativeOut<'a> {
    #[serde(flatten)]
    alternative: &'a tra_optimizer::optimize::Alternative,
    report: &'a Option<IndexMap<String, cost::NodeReport>>,
}

impl<'a> AnswerOut<'a> {
    /// `reports` from [`answer_reports`] of the same answer.
    fn new(answer: &'a OptimizeAnswer, reports: &'a Reports) -> AnswerOut<'a> {
        // Destructured, so that a field added to the answer cannot be left out here.
        let OptimizeAnswer { plan, cost, site_loads, alternatives, rules_applied, warnings, stats } = answer;
        let chosen = alternatives.iter().position(|a| a.plan == *plan).unwrap_or(alternatives.len());
        AnswerOut {
            plan,
            cost,
            site_loads,
            alternatives: alternatives
                .iter()
                .zip(reports)
                .map(|(alternative, report)| AlternativeOut { alternative, report })
                .collect(),
            rules_applied,
            warnings,
            stats,
            report: &reports[chosen],
        }
    }
}

/// The whole service as an axum router (useful for tests and embedding).
pub fn router(config: ServerConfig) -> Router {
    router_with_state(AppState::new(config))
}

/// The service with another rule set than every rule of `tra_rules` (tests
/// of how it answers when a rule is broken).
pub fn router_with_rules(config: ServerConfig, rules: Vec<RuleDef>) -> Router {
    router_with_state(AppState::with_rules(config, rules))
}

/// The router over a given state.
pub fn router_with_state(state: AppState) -> Router {
    let config = state.config().clone();
    let hygiene =
        hygiene::Hygiene::new(hygiene::HostPolicy::new(config.addr, &config.allowed_hosts), config.max_body_bytes);
    // The routes that take work: a cap on how many are in flight, shedding
    // the rest at once (GET routes and /healthz are never shed).
    let max_requests = config.max_requests.max(1);
    let work = Router::new()
        .route("/v1/optimize", post(optimize_handler))
        .route("/v1/execute", post(execute::execute_handler))
        .route("/v1/einsum", post(crate::einsum::einsum_handler))
        .route_layer(
            tower::ServiceBuilder::new()
                .layer(HandleErrorLayer::new(move |e: BoxError| async move { shed(e, max_requests) }))
                .layer(tower::load_shed::LoadShedLayer::new())
                .layer(tower::limit::ConcurrencyLimitLayer::new(max_requests)),
        );
    Router::new()
        .route("/", get(index))
        .route("/web/{*path}", get(web_asset))
        .route("/healthz", get(healthz))
        .route("/openapi.json", get(openapi_handler))
        .route("/v1/rules", get(rules_handler))
        .route("/v1/kernels", get(kernels_handler))
        .route("/v1/examples", get(examples_handler))
        .merge(work)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(config.max_body_bytes))
        .layer(tower_http::validate_request::ValidateRequestHeaderLayer::custom(hygiene))
        .layer(middleware::from_fn(log_request))
        .with_state(state)
}

/// The answer to a request shed by the cap on requests in flight.
fn shed(e: BoxError, max: usize) -> ApiError {
    if e.is::<tower::load_shed::error::Overloaded>() {
        admission::overloaded(
            format!("this server already has {max} requests in flight (--max-requests); try again later"),
            Duration::from_secs(1),
        )
    } else {
        ApiError::internal(format!("unexpected error in the request pipeline: {e}"))
    }
}

/// Bind `config.addr` and serve until Ctrl-C (or SIGTERM). Sets up logging
/// (`RUST_LOG`, default `info`) if nobody has yet.
pub async fn serve(config: ServerConfig) -> std::io::Result<()> {
    init_tracing();
    // The GEMM of `TRA_GEMM` (logged), or the error that it is missing, before serving.
    let gemm = tra_executor::threads::kernels::gemm_backend().map_err(|e| std::io::Error::other(e.to_string()))?;
    tracing::info!("GEMM: {}", gemm.describe());
    tracing::debug!("GEMM in full: {}", gemm.details());
    let listener = TcpListener::bind(config.addr).await?;
    serve_on(listener, config).await
}

/// Serve on a listener that is already bound (e.g. port 0 in tests; read the
/// address with `listener.local_addr()` first) until Ctrl-C (or SIGTERM).
/// The `Host` check uses the listener's address, not `config.addr`.
pub async fn serve_on(listener: TcpListener, config: ServerConfig) -> std::io::Result<()> {
    serve_with_shutdown(listener, config, shutdown_signal()).await
}

/// Serve on a bound listener until `shutdown` completes, then give the
/// requests in flight `config.shutdown_grace` to finish, cancel the work
/// still running, and return (see [`listener`]).
pub async fn serve_with_shutdown(
    listener: TcpListener,
    mut config: ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    config.addr = addr;
    tracing::info!(
        target: "tra::http",
        "listening on http://{addr} (body ≤ {} bytes, e-graph ≤ {} nodes, optimize ≤ {} s, execute ≤ {} s and {} of memory, \
         {} executions at once, {} connections)",
        config.max_body_bytes,
        config.max_egraph_nodes,
        config.optimize_time.as_secs_f64(),
        config.execute_time.as_secs_f64(),
        admission::human(config.execute_memory_bytes),
        config.max_concurrent_executions,
        config.max_connections,
    );
    if let Some(c) = &config.cluster {
        tracing::info!(target: "tra::http", "POST /v1/execute runs on the cluster {}", c.describe());
    }
    // What a request naming no cost model or profile gets.
    tracing::info!(
        target: "tra::http",
        "cost model of requests that name none: {}; profile: {}",
        config.cost_model.unwrap_or_default().as_str(),
        match &config.profile {
            Some(p) => serde_json::to_string(p).unwrap_or_default(),
            None => "the defaults".to_string(),
        }
    );
    let limits = listener::ConnLimits {
        max_connections: config.max_connections.max(1),
        header_timeout: config.header_timeout,
        body_timeout: config.body_timeout,
        grace: config.shutdown_grace,
    };
    let state = AppState::new(config);
    let (conns, cancel) = (state.inner.connections.clone(), state.inner.cancel.clone());
    listener::serve(listener, router_with_state(state), limits, conns, cancel, shutdown).await
}

/// Log to standard error, one line per request, filtered by `RUST_LOG`
/// (default `info,egg=warn`: egg logs every iteration at `info`). Does
/// nothing if a global subscriber is already set.
pub fn init_tracing() {
    init_tracing_with("info,egg=warn");
}

/// Logs to stderr at `default` level unless `RUST_LOG` says otherwise: the
/// one-shot commands use `warn`, so a job process's warnings and errors
/// (forwarded through `tracing`) reach the user without the service's chatter.
pub fn init_tracing_with(default: &str) {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!(target: "tra::http", "shutting down");
}

/// One log line per request: method, path, status, latency.
async fn log_request(req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let start = Instant::now();
    let res = next.run(req).await;
    let latency_ms = start.elapsed().as_secs_f64() * 1000.0;
    let status = res.status().as_u16();
    if res.status().is_server_error() {
        tracing::warn!(target: "tra::http", %method, %path, status, latency_ms, "request");
    } else {
        tracing::info!(target: "tra::http", %method, %path, status, latency_ms, "request");
    }
    res
}

/// A request body, read whole within the body timeout: 413
/// `body_too_large` past the limit, 408 `body_timeout` when it is not sent
/// in time, 400 `bad_json` when it is empty. The bytes are parsed later, on
/// a blocking thread ([`parse_json`]). The content type was checked by
/// [`hygiene`].
pub struct JsonBody(pub Bytes);

impl FromRequest<AppState> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let limit = state.config().max_body_bytes;
        let timeout = state.config().body_timeout;
        let timed_out = || {
            ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "body_timeout",
                "",
                format!("the request body was not received within {} s (--body-timeout-ms)", timeout.as_secs_f64()),
            )
        };
        let read = tokio::time::timeout(timeout, Bytes::from_request(req, state)).await.map_err(|_| timed_out())?;
        let bytes = read.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "body_too_large",
                    "",
                    format!(
                        "the request body is larger than this server's limit of {limit} bytes ({}) (--max-body-bytes)",
                        human_bytes(limit)
                    ),
                )
            } else if e.body_text().contains("timeout") {
                timed_out()
            } else {
                ApiError::bad_json(format!("cannot read the request body: {}", e.body_text()))
            }
        })?;
        if bytes.iter().all(|b| b.is_ascii_whitespace()) {
            return Err(ApiError::bad_json("the request body is empty: send a TRA program as JSON"));
        }
        Ok(JsonBody(bytes))
    }
}

/// A request body parsed as JSON (400 `bad_json` when it is not).
pub fn parse_json(bytes: &[u8]) -> Result<Value, ApiError> {
    let value = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad_json(format!("the request body is not valid JSON: {e}")))?;
    // JSON keeps the last of two equal keys: a second node `A` would replace
    // the first without a word.
    if let Some(d) = tra_optimizer::duplicate_keys::find(bytes) {
        return Err(ApiError::unprocessable("bad_field", d.at, d.message));
    }
    Ok(value)
}

/// A float as JSON: a number, or for the values JSON has no number for the
/// strings `"NaN"`, `"Infinity"` and `"-Infinity"` (never `null`, which would
/// read as a missing value). Input data accepts the same strings.
pub fn json_float(x: f64) -> Value {
    if x.is_nan() {
        json!("NaN")
    } else if x == f64::INFINITY {
        json!("Infinity")
    } else if x == f64::NEG_INFINITY {
        json!("-Infinity")
    } else {
        json!(x)
    }
}

/// Bodies up to this size are parsed on the async runtime (well under a
/// millisecond), so that a program asked again is answered from the cache
/// without waiting for a CPU slot; larger ones are parsed behind a slot.
const INLINE_PARSE_BYTES: usize = 64 << 10;

fn human_bytes(n: usize) -> String {
    if n >= 1 << 20 && n & ((1 << 20) - 1) == 0 {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n & ((1 << 10) - 1) == 0 {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} bytes")
    }
}

async fn index() -> Html<&'static str> {
    Html(INDEX_HTML)
}

/// A file of [`WEB_ASSETS`], or 404 `not_found`.
async fn web_asset(axum::extract::Path(path): axum::extract::Path<String>, method: Method, uri: Uri) -> Response {
    match WEB_ASSETS.iter().find(|(p, _, _)| *p == path) {
        Some((_, content_type, body)) => {
            ([(header::CONTENT_TYPE, *content_type), (header::CACHE_CONTROL, "no-cache")], *body).into_response()
        }
        None => not_found(method, uri).await.into_response(),
    }
}

async fn healthz(State(st): State<AppState>) -> Json<Value> {
    Json(st.health())
}

async fn openapi_handler(State(st): State<AppState>) -> Json<Value> {
    Json(st.inner.openapi_json.clone())
}

async fn rules_handler(State(st): State<AppState>) -> Json<Value> {
    Json(st.inner.rules_json.clone())
}

async fn kernels_handler(State(st): State<AppState>) -> Json<Value> {
    Json(st.inner.kernels_json.clone())
}

async fn examples_handler(State(st): State<AppState>) -> Json<Value> {
    Json(st.inner.examples_json.clone())
}

/// Top-level fields an optimize request may have besides a program's: an
/// execute request's `data` and `return`, not read, so that one body serves both.
const OPTIMIZE_ALSO: &[&str] = &["data", "return"];

async fn optimize_handler(State(st): State<AppState>, JsonBody(body): JsonBody) -> Result<Response, ApiError> {
    let answer = if body.len() <= INLINE_PARSE_BYTES {
        let value = parse_json(&body)?;
        let program = st.with_defaults(&value["cluster"], Program::from_request(&value, OPTIMIZE_ALSO)?);
        let key = cache_key(&program)?;
        match st.inner.answers.get(&key) {
            Some(hit) => hit,
            None => {
                let st2 = st.clone();
                st.cpu(&st.optimize_deadline(), move || st2.optimize_uncached(key, &program)).await?
            }
        }
    } else {
        let st2 = st.clone();
        st.cpu(&st.optimize_deadline(), move || {
            let value = parse_json(&body)?;
            let program = st2.with_defaults(&value["cluster"], Program::from_request(&value, OPTIMIZE_ALSO)?);
            st2.optimize_here(&program)
        })
        .await?
    };
    Ok(([(header::CONTENT_TYPE, "application/json")], answer.body.clone()).into_response())
}

fn route_list() -> String {
    let parts: Vec<String> = ROUTES.iter().map(|(m, p, _)| format!("{m} {p}")).collect();
    parts.join(", ")
}

async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        uri.path(),
        format!("no route {method} {}; the routes are: {}", uri.path(), route_list()),
    )
}

async fn method_not_allowed(method: Method, uri: Uri) -> Response {
    let allowed: Vec<&str> = ROUTES.iter().filter(|(_, p, _)| *p == uri.path()).map(|(m, _, _)| *m).collect();
    let err = ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        uri.path(),
        format!("{} does not accept {method}; use {}", uri.path(), allowed.join(" or ")),
    );
    let mut res = err.into_response();
    if let Ok(v) = header::HeaderValue::from_str(&allowed.join(", ")) {
        res.headers_mut().insert(header::ALLOW, v);
    }
    res
}

#[cfg(test)]
mod tests {
    use super::{answer_reports, plan_figures, AnswerOut};
    use serde_json::Value;
    use tra_optimizer::optimize::OptimizeAnswer;
    use tra_optimizer::Plan;

    /// [`plan_figures`] as JSON.
    fn plan_report(plan: &Plan, program: &Program) -> Value {
        serde_json::to_value(plan_figures(plan, program)).unwrap_or(Value::Null)
    }

    /// The optimize answer as JSON, with `report` added to the answer and to
    /// every alternative: `{node: {op, key_bounds, array_bounds, tuples,
    /// placement, network_floats, flops, total}}`. How the answer was written
    /// before `AnswerOut`: the reference it is tested against.
    fn answer_json(program: &Program, answer: &OptimizeAnswer) -> Value {
        let mut v = serde_json::to_value(answer).expect("an optimize answer serializes");
        let mut chosen = None;
        if let Some(alts) = v.get_mut("alternatives").and_then(|a| a.as_array_mut()) {
            for (alt, a) in alts.iter_mut().zip(&answer.alternatives) {
                let report = plan_report(&a.plan, program);
                if chosen.is_none() && a.plan == answer.plan {
                    chosen = Some(report.clone()); // the chosen plan is alternatives[0]: typed once
                }
                alt["report"] = report;
            }
        }
        v["report"] = chosen.unwrap_or_else(|| plan_report(&answer.plan, program));
        v
    }
    use tra_optimizer::optimize::{optimize, Limits};
    use tra_optimizer::Program;

    /// The bytes the service writes are those of the reference `Value`
    /// (fields, their order, numbers, `report`s), for every built-in example
    /// under both cost models, and for an answer whose chosen plan is not
    /// among its alternatives.
    #[test]
    fn the_answer_written_directly_is_the_reference_json() {
        let rules = tra_rules::all();
        for e in crate::examples::all() {
            for model in ["network", "time"] {
                let mut v = e.program.clone();
                v.as_object_mut().unwrap().entry("cluster").or_insert_with(|| serde_json::json!({}))["cost_model"] =
                    model.into();
                let program = Program::from_value(&v).unwrap();
                let mut answer = optimize(&program, &rules, &Limits::default()).unwrap();
                let check = |answer: &tra_optimizer::optimize::OptimizeAnswer| {
                    let reference = serde_json::to_vec(&answer_json(&program, answer)).unwrap();
                    let reports = answer_reports(&program, answer);
                    let direct = serde_json::to_vec(&AnswerOut::new(answer, &reports)).unwrap();
                    assert!(reference == direct, "{} under {model}: the answers differ", e.name);
                };
                check(&answer);
                answer.alternatives.remove(0);
                check(&answer);
            }
        }
    }
}
