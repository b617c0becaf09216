//! The HTTP service (`tra serve`): the contract of `API.md` over axum.
//!
//! - `POST /v1/optimize`: a TRA program → the chosen IA plan, its cost, the
//!   alternatives, the rules that built it and the run's figures.
//! - `POST /v1/execute`: a program plus data → optimize, run the chosen plan on
//!   the thread executor, report floats moved (measured and predicted),
//!   timings per operator and the outputs (checksum, and the data when small).
//!
//! Optimize answers are cached by program (see [`cache`]), so asking again
//! for the same plan costs a lookup, not a saturation.
//! - `GET /v1/rules`, `/v1/kernels`, `/v1/examples`, `/openapi.json`,
//!   `/healthz`, and `/` (the web page).
//!
//! Every error is `{"error": {"code", "message", "at"}}` ([`ApiError`]).
//! CPU work (optimization, execution) runs on blocking threads, never on the
//! async runtime, behind semaphores, under the limits of [`ServerConfig`].

pub mod cache;
mod error;
mod execute;
pub mod openapi;

pub use cache::{CacheStats, CachedAnswer};
pub use error::ApiError;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, FromRequest, Request, State};
use axum::http::{header, Method, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tra_optimizer::check::check_plan;
use tra_optimizer::cost::{self, Weights};
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
    ("vendor/dagre.min.js", "text/javascript; charset=utf-8", include_bytes!("../../web/vendor/dagre.min.js")),
    ("vendor/dagre.LICENSE", "text/plain; charset=utf-8", include_bytes!("../../web/vendor/dagre.LICENSE")),
];

/// Every route of the service: `(method, path, summary)`. The router, the
/// OpenAPI document, and the 404/405 answers are all checked against it.
pub const ROUTES: &[(&str, &str, &str)] = &[
    ("GET", "/", "The web page: pick an example, edit it, optimize it"),
    ("GET", "/healthz", "Liveness: {\"status\": \"ok\"}"),
    ("GET", "/openapi.json", "This contract, as an OpenAPI 3.1 document"),
    ("GET", "/v1/rules", "The rewrite rules: name, family, equation, condition"),
    ("GET", "/v1/kernels", "The kernel catalog"),
    ("GET", "/v1/examples", "Example programs by name: {name: {description, program}}"),
    ("POST", "/v1/optimize", "Optimize a TRA program into a distributed IA plan"),
    ("POST", "/v1/execute", "Optimize a program and run the chosen plan on given or random data"),
    ("POST", "/v1/einsum", "Compile an einsum expression into a TRA program over blocked tensors and optimize it"),
];

/// How the service runs, and the limits that keep it safe. Every limit that
/// stops a request is named, with its value, in the error message.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Address to listen on (default `127.0.0.1:8080`: local only).
    pub addr: SocketAddr,
    /// Largest request body, in bytes (default 4 MiB); larger ones get 413 `body_too_large`.
    pub max_body_bytes: usize,
    /// Most e-graph nodes during optimization (default 100,000).
    pub max_egraph_nodes: usize,
    /// Most saturation iterations per phase (default 100).
    pub max_iterations: usize,
    /// Most wall time of saturation per request (default 10 s).
    pub optimize_time: Duration,
    /// Most optimizations running at once; others wait (default: the number of CPUs).
    pub max_concurrent_optimizations: usize,
    /// Most floats of input data an execution may use, and most floats any one
    /// relation of the program may hold (default 50 million); larger gets 413 `data_too_large`.
    pub max_execute_floats: u64,
    /// Most executions running at once; others wait (default 2).
    pub max_concurrent_executions: usize,
    /// Optimize answers kept for programs asked again (default 256; 0: none).
    pub answer_cache: usize,
    /// Answer 500 when a rewrite rule fails (breaks an invariant of the
    /// e-graph) instead of optimizing again without it and answering with a
    /// warning (default false; `tra serve --strict`).
    pub strict: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            addr: SocketAddr::from(([127, 0, 0, 1], 8080)),
            max_body_bytes: 4 * 1024 * 1024,
            max_egraph_nodes: 100_000,
            max_iterations: 100,
            optimize_time: Duration::from_secs(10),
            max_concurrent_optimizations: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(4),
            max_execute_floats: 50_000_000,
            max_concurrent_executions: 2,
            answer_cache: 256,
            strict: false,
        }
    }
}

impl ServerConfig {
    /// The optimizer limits of this configuration.
    pub fn limits(&self) -> Limits {
        Limits { nodes: self.max_egraph_nodes, iterations: self.max_iterations, time: self.optimize_time }
    }

    fn limits_text(&self) -> String {
        format!(
            "this server's limits: {} e-graph nodes, {} iterations, {} s of optimization",
            self.max_egraph_nodes,
            self.max_iterations,
            self.optimize_time.as_secs_f64()
        )
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
    optimize_slots: Arc<Semaphore>,
    execute_slots: Arc<Semaphore>,
    answers: cache::AnswerCache,
}

// The rule set is built once and shared by every blocking optimization.
const _: fn() = || {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Arc<Vec<RuleDef>>>();
};

impl AppState {
    /// Build the state: the rule set (once), the static answers, the semaphores.
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
                        "condition": r.condition, "lowering": r.lowering, "rewrites": r.rewrites.len(),
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
            optimize_slots: Arc::new(Semaphore::new(config.max_concurrent_optimizations.max(1))),
            execute_slots: Arc::new(Semaphore::new(config.max_concurrent_executions.max(1))),
            answers: cache::AnswerCache::new(config.answer_cache),
            config,
        };
        AppState { inner: Arc::new(inner) }
    }

    /// The configuration.
    pub fn config(&self) -> &ServerConfig {
        &self.inner.config
    }

    /// Optimize a program on a blocking thread, under the configured limits
    /// and the optimization semaphore; a program asked before is answered
    /// from the cache. Gives the answer, its JSON (the answer plus a
    /// per-operator `report` of the chosen plan and of each alternative) and
    /// that JSON encoded.
    pub async fn optimize(&self, program: Program) -> Result<Arc<CachedAnswer>, ApiError> {
        let key =
            serde_json::to_string(&program).map_err(|e| ApiError::internal(format!("cannot key the program: {e}")))?;
        if let Some(hit) = self.inner.answers.get(&key) {
            return Ok(hit);
        }
        let permit = self
            .inner
            .optimize_slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| ApiError::internal("the optimization queue is closed"))?;
        let rules = self.inner.rules.clone();
        let limits = self.inner.config.limits();
        let on_failure = if self.inner.config.strict { OnRuleFailure::Fail } else { OnRuleFailure::Retry };
        let answer = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            optimize_with(&program, &rules, &limits, on_failure).map(|answer| {
                let json = answer_json(&program, &answer);
                let body = Bytes::from(serde_json::to_vec(&json).expect("JSON encodes"));
                Arc::new(CachedAnswer { answer, json, body })
            })
        })
        .await
        .map_err(|e| ApiError::internal(format!("the optimizer crashed: {e}")))?;
        let answer = answer.map_err(|e| {
            let mut err = ApiError::from(e);
            if err.status == StatusCode::SERVICE_UNAVAILABLE {
                err.message = format!("{} ({})", err.message, self.inner.config.limits_text());
            }
            err
        })?;
        // Only complete answers are kept: one cut short by the time limit
        // could come out better on a quieter machine.
        if answer.answer.stats.stop_reason != "time_limit" {
            self.inner.answers.put(key, answer.clone());
        }
        Ok(answer)
    }

    /// Hits and misses of the answer cache.
    pub fn cache_stats(&self) -> CacheStats {
        self.inner.answers.stats()
    }
}

/// The per-operator figures of a plan (`tra_optimizer::cost::plan_report`),
/// or `null` if the plan does not type-check (which would be a bug, logged).
fn plan_report(plan: &Plan, program: &Program) -> Value {
    let cluster = program.cluster();
    match check_plan(plan, cluster.sites) {
        Ok(typed) => {
            let w = Weights { network: cluster.network_weight, compute: cluster.compute_weight };
            serde_json::to_value(cost::plan_report(plan, &typed, cluster.sites, w)).unwrap_or(Value::Null)
        }
        Err(e) => {
            tracing::warn!(target: "tra::http", at = %e.at, "an optimized plan does not type-check: {}", e.message);
            Value::Null
        }
    }
}

/// The optimize answer as JSON, with `report` added to the answer and to
/// every alternative: `{node: {op, key_bounds, array_bounds, tuples,
/// placement, network_floats, flops, total}}`.
pub fn answer_json(program: &Program, answer: &OptimizeAnswer) -> Value {
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

/// The whole service as an axum router (useful for tests and embedding).
pub fn router(config: ServerConfig) -> Router {
    router_with_rules(config, tra_rules::all())
}

/// The service with another rule set than every rule of `tra_rules` (tests
/// of how it answers when a rule is broken).
pub fn router_with_rules(config: ServerConfig, rules: Vec<RuleDef>) -> Router {
    let body_limit = config.max_body_bytes;
    let state = AppState::with_rules(config, rules);
    Router::new()
        .route("/", get(index))
        .route("/web/{*path}", get(web_asset))
        .route("/healthz", get(healthz))
        .route("/openapi.json", get(openapi_handler))
        .route("/v1/rules", get(rules_handler))
        .route("/v1/kernels", get(kernels_handler))
        .route("/v1/examples", get(examples_handler))
        .route("/v1/optimize", post(optimize_handler))
        .route("/v1/execute", post(execute::execute_handler))
        .route("/v1/einsum", post(crate::einsum::einsum_handler))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(middleware::from_fn(log_request))
        .with_state(state)
}

/// Bind `config.addr` and serve until Ctrl-C (or SIGTERM). Sets up logging
/// (`RUST_LOG`, default `info`) if nobody has yet.
pub async fn serve(config: ServerConfig) -> std::io::Result<()> {
    init_tracing();
    let listener = TcpListener::bind(config.addr).await?;
    serve_on(listener, config).await
}

/// Serve on a listener that is already bound (e.g. port 0 in tests; read the
/// address with `listener.local_addr()` first) until Ctrl-C (or SIGTERM).
/// `config.addr` is ignored.
pub async fn serve_on(listener: TcpListener, config: ServerConfig) -> std::io::Result<()> {
    serve_with_shutdown(listener, config, shutdown_signal()).await
}

/// Serve on a bound listener until `shutdown` completes, then finish the
/// requests in flight.
pub async fn serve_with_shutdown(
    listener: TcpListener,
    config: ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    tracing::info!(
        target: "tra::http",
        "listening on http://{addr} (body ≤ {} bytes, e-graph ≤ {} nodes, optimize ≤ {} s, execute ≤ {} floats, {} executions at once)",
        config.max_body_bytes,
        config.max_egraph_nodes,
        config.optimize_time.as_secs_f64(),
        config.max_execute_floats,
        config.max_concurrent_executions
    );
    axum::serve(listener, router(config)).with_graceful_shutdown(shutdown).await
}

/// Log to standard error, one line per request, filtered by `RUST_LOG`
/// (default `info,egg=warn`: egg logs every iteration at `info`). Does
/// nothing if a global subscriber is already set.
pub fn init_tracing() {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,egg=warn"));
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

/// A request body read as JSON: 413 `body_too_large` past the limit, 400
/// `bad_json` when it is not JSON. The content type is not checked.
pub struct JsonBody(pub Value);

impl FromRequest<AppState> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let limit = state.config().max_body_bytes;
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "body_too_large",
                    "",
                    format!(
                        "the request body is larger than this server's limit of {limit} bytes ({})",
                        human_bytes(limit)
                    ),
                )
            } else {
                ApiError::bad_json(format!("cannot read the request body: {}", e.body_text()))
            }
        })?;
        if bytes.iter().all(|b| b.is_ascii_whitespace()) {
            return Err(ApiError::bad_json("the request body is empty: send a TRA program as JSON"));
        }
        serde_json::from_slice(&bytes)
            .map(JsonBody)
            .map_err(|e| ApiError::bad_json(format!("the request body is not valid JSON: {e}")))
    }
}

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

async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
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

async fn optimize_handler(State(st): State<AppState>, JsonBody(body): JsonBody) -> Result<Response, ApiError> {
    let program = Program::from_value(&body)?;
    let answer = st.optimize(program).await?;
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
