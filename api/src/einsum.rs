//! The einsum front-end over HTTP and on the command line
//! ([`tra_einsum`] compiles; this module serves and runs).
//!
//! - `POST /v1/einsum`: `{"expression": "ij,jk->ik", "inputs": {"A": {"shape":
//!   [m, k], "block": 1000}, "B": {"shape": [k, n]}}, "block": 1000, "output":
//!   "out", "cluster": {...}}` → `{"program", "optimize", "einsum"}`: the TRA
//!   program, the optimize answer (as `POST /v1/optimize` gives it), and what
//!   the compiler did (blocks, padding, the contraction order and its costs).
//!   Operands are in the order of `inputs`. `block` may be one number or one
//!   per axis; absent, the request's `block`, else 1000. Errors are the API's
//!   error object plus `position`, the 0-based character in the expression.
//! - `tra einsum EXPR --input A=a.npy … [--output NAME=out.npy] [--block N]
//!   [--sites N]`: reads dense `.npy` operands (in the order given), compiles,
//!   optimizes, runs the plan on the thread executor (or the reference
//!   interpreter), and writes the dense result, cropped back from the padded
//!   blocks to numpy's shape, in the inputs' element type (float32 or
//!   float64, chosen as `tra run` chooses it; on worker threads the plan is
//!   run as `tra run` runs it, in that type).

use crate::server::{ApiError, AppState, JsonBody, ServerConfig};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use ndarray::{ArrayD, Axis, IxDyn, Slice};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::OnceLock;
use std::time::Instant;
use tra_einsum::{
    compile, BlockSpec, Compiled, EinsumError, Operand, OperandInfo, Options, OutputInfo, Request, DEFAULT_BLOCK,
    DEFAULT_OUTPUT,
};
use tra_executor::npy;
use tra_executor::reference::{AnyLayout, Relation};
use tra_executor::semantics::all_keys;
use tra_executor::threads::{Dtype, Elem, Pool, RunOptions, TRelation, ThreadRuntime};
use tra_optimizer::optimize::{optimize_with, OnRuleFailure};
use tra_optimizer::rule::RuleDef;
use tra_optimizer::{Cluster, ProgramError};

/// The rule set, built once.
fn rules() -> &'static [RuleDef] {
    static RULES: OnceLock<Vec<RuleDef>> = OnceLock::new();
    RULES.get_or_init(tra_rules::all)
}

// ---------------------------------------------------------------------------
// Data: dense tensors ↔ blocked relations
// ---------------------------------------------------------------------------

/// An operand's dense tensor checked against its shape, with the size-1
/// broadcast axes that are not relation axes dropped.
fn relation_view<'a, T>(dense: &'a ArrayD<T>, op: &OperandInfo) -> Result<ndarray::ArrayViewD<'a, T>, String> {
    if dense.shape() != op.shape.as_slice() {
        return Err(format!("operand {}: data of shape {:?}, expected {:?}", op.name, dense.shape(), op.shape));
    }
    let mut view = dense.view();
    for axis in (0..op.shape.len()).rev() {
        if !op.relation_axes.contains(&axis) {
            view = view.index_axis_move(Axis(axis), 0);
        }
    }
    Ok(view)
}

/// The relation of an operand from its dense tensor: size-1 broadcast axes
/// dropped, zero-padded to whole blocks, cut into blocks.
pub fn operand_relation(dense: &ArrayD<f64>, op: &OperandInfo) -> Result<Relation, String> {
    let view = relation_view(dense, op)?;
    let padded_shape: Vec<usize> = op.key_bounds.iter().zip(&op.array_bounds).map(|(&k, &b)| k as usize * b).collect();
    let mut padded = ArrayD::<f64>::zeros(IxDyn(&padded_shape));
    {
        let mut corner = padded.view_mut();
        for (axis, &n) in view.shape().iter().enumerate() {
            corner.slice_axis_inplace(Axis(axis), Slice::from(0..n));
        }
        corner.assign(&view);
    }
    Relation::from_dense(&padded, &op.array_bounds).map_err(|e| format!("operand {}: {e}", op.name))
}

/// The dense result from the output relation, cropped to numpy's shape.
pub fn output_dense(rel: &Relation, out: &OutputInfo) -> Result<ArrayD<f64>, String> {
    let full = rel.to_dense().map_err(|e| format!("output {}: {e}", out.name))?;
    let mut view = full.view();
    for (axis, &n) in out.shape.iter().enumerate() {
        view.slice_axis_inplace(Axis(axis), Slice::from(0..n));
    }
    Ok(view.as_standard_layout().into_owned())
}

// ---------------------------------------------------------------------------
// HTTP
// ---------------------------------------------------------------------------

/// An einsum error as the API's error object, with `position` added.
fn einsum_error(e: &EinsumError) -> Response {
    let status = match e.code {
        tra_optimizer::ErrorCode::LimitExceeded => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::UNPROCESSABLE_ENTITY,
    };
    let body = json!({"error": {"code": e.code.as_str(), "message": e.message, "at": e.at, "position": e.position}});
    (status, Json(body)).into_response()
}

fn field_error(at: &str, msg: impl Into<String>) -> ApiError {
    ApiError::unprocessable("bad_field", at, msg)
}

fn positive(v: &Value, at: &str) -> Result<usize, ApiError> {
    v.as_u64()
        .filter(|&n| n >= 1 && n <= u32::MAX as u64)
        .map(|n| n as usize)
        .ok_or_else(|| field_error(at, format!("`{at}` must be a positive integer, got {v}")))
}

/// The request body as a compiler request.
pub fn parse_request(body: &Value) -> Result<Request, ApiError> {
    let obj = body.as_object().ok_or_else(|| {
        ApiError::bad_json(
            "an einsum request is a JSON object: {\"expression\", \"inputs\": {name: {\"shape\", \"block\"}}}",
        )
    })?;
    if let Some(k) = obj.keys().find(|k| !["expression", "inputs", "block", "output", "cluster"].contains(&k.as_str()))
    {
        return Err(field_error(
            k,
            format!("unknown field `{k}`; an einsum request has expression, inputs, block, output, cluster"),
        ));
    }
    let expression = obj
        .get("expression")
        .and_then(|e| e.as_str())
        .ok_or_else(|| field_error("expression", "`expression` must be an einsum string, e.g. \"ij,jk->ik\""))?
        .to_string();
    let inputs = obj.get("inputs").and_then(|i| i.as_object()).ok_or_else(|| {
        field_error(
            "inputs",
            "`inputs` must be an object of operands in expression order: {\"A\": {\"shape\": [2, 3]}}",
        )
    })?;
    let mut operands = Vec::new();
    for (name, v) in inputs {
        let at = format!("inputs.{name}");
        let o = v
            .as_object()
            .ok_or_else(|| field_error(&at, format!("input {name} must be {{\"shape\": [...], \"block\": N}}")))?;
        if let Some(k) = o.keys().find(|k| !["shape", "block"].contains(&k.as_str())) {
            return Err(field_error(&format!("{at}.{k}"), format!("input {name}: unknown field `{k}` (shape, block)")));
        }
        let shape_at = format!("{at}.shape");
        let shape = o
            .get("shape")
            .and_then(|s| s.as_array())
            .ok_or_else(|| field_error(&shape_at, format!("input {name}: `shape` must be a list of sizes")))?
            .iter()
            .map(|d| {
                d.as_u64().map(|n| n as usize).ok_or_else(|| {
                    field_error(&shape_at, format!("input {name}: sizes must be non-negative integers, got {d}"))
                })
            })
            .collect::<Result<Vec<usize>, _>>()?;
        let block_at = format!("{at}.block");
        let block = match o.get("block") {
            None | Some(Value::Null) => None,
            Some(Value::Array(items)) => {
                Some(BlockSpec::PerAxis(items.iter().map(|b| positive(b, &block_at)).collect::<Result<_, _>>()?))
            }
            Some(b) => Some(BlockSpec::All(positive(b, &block_at)?)),
        };
        operands.push(Operand { name: name.clone(), shape, block });
    }
    let block = match obj.get("block") {
        None | Some(Value::Null) => None,
        Some(b) => Some(positive(b, "block")?),
    };
    let output = match obj.get("output") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(v) => return Err(field_error("output", format!("`output` must be the output's name, got {v}"))),
    };
    let cluster = match obj.get("cluster") {
        None | Some(Value::Null) => None,
        Some(c) => Some(
            serde_json::from_value::<Cluster>(c.clone())
                .map_err(|e| field_error("cluster", format!("cluster: {e}")))?,
        ),
    };
    Ok(Request { expression, operands, block, output, cluster })
}

/// Order-search options under a server's limits.
fn server_options(config: &ServerConfig) -> Options<'static> {
    let mut o = Options::new(rules());
    o.limits.nodes = o.limits.nodes.min(config.max_egraph_nodes);
    o.limits.time = o.limits.time.min(config.optimize_time);
    // The contraction order may use a quarter of the optimize limit; the
    // rest is the optimization's.
    o.search_time = config.optimize_time / 4;
    o
}

/// What the compiler did, as JSON.
fn einsum_json(req: &Request, c: &Compiled) -> Value {
    json!({
        "expression": req.expression,
        "operands": c.operands,
        "output": c.output,
        "indices": c.indices,
        "order": c.order,
        "padding": c.padding,
    })
}

/// `POST /v1/einsum`.
pub async fn einsum_handler(State(st): State<AppState>, JsonBody(body): JsonBody) -> Response {
    match handle(&st, &body).await {
        Ok(v) => Json(v).into_response(),
        Err(r) => r,
    }
}

async fn handle(st: &AppState, body: &[u8]) -> Result<Value, Response> {
    let opts = server_options(st.config());
    let st2 = st.clone();
    let body = body.to_vec();
    // Parsing, compiling and optimizing: CPU work behind a slot, under the
    // optimize deadline (the order search may use a quarter of it).
    let answer = st
        .cpu(&st.optimize_deadline(), move || {
            let value = crate::server::parse_json(&body)?;
            let req = parse_request(&value)?;
            let mut compiled = match compile(&req, &opts) {
                Ok(c) => c,
                Err(e) => return Ok(Err(e)),
            };
            // The server's profile and cost model where the request names none.
            compiled.program = st2.with_defaults(&value["cluster"], compiled.program);
            let optimized = st2.optimize_here(&compiled.program)?;
            Ok(Ok(json!({
                "program": compiled.program,
                "optimize": optimized.json(),
                "einsum": einsum_json(&req, &compiled),
            })))
        })
        .await
        .map_err(|e| e.into_response())?;
    answer.map_err(|e| einsum_error(&e))
}

/// Adds `POST /v1/einsum` and its schemas to the OpenAPI document.
pub fn add_to_openapi(paths: &mut Value, schemas: &mut Value) {
    let r = |name: &str| json!({"$ref": format!("#/components/schemas/{name}")});
    schemas["EinsumRequest"] = json!({
        "type": "object",
        "description": "An einsum expression (numpy's syntax) and the operands' shapes, in expression order.",
        "properties": {
            "expression": {"type": "string", "description": "e.g. \"ij,jk->ik\", \"bij,bjk->bik\", \"ii->i\", \"ij,jk\" (implicit output)"},
            "inputs": {"type": "object", "description": "Operands in expression order",
                "additionalProperties": {"type": "object", "properties": {
                    "shape": {"type": "array", "items": {"type": "integer", "minimum": 0}},
                    "block": {"oneOf": [{"type": "integer", "minimum": 1}, {"type": "array", "items": {"type": "integer", "minimum": 1}}],
                        "description": "Block size, one or per axis; an index gets the smallest asked for it, at most its size"}},
                    "required": ["shape"], "additionalProperties": false}},
            "block": {"type": "integer", "minimum": 1, "default": DEFAULT_BLOCK, "description": "Default block size"},
            "output": {"type": "string", "default": DEFAULT_OUTPUT, "description": "Name of the output node"},
            "cluster": r("Cluster")
        },
        "required": ["expression", "inputs"],
        "additionalProperties": false
    });
    schemas["EinsumAnswer"] = json!({
        "type": "object",
        "properties": {
            "program": r("Program"),
            "optimize": r("OptimizeAnswer"),
            "einsum": {"type": "object", "description":
                "operands (relation bounds, axes kept), output (true shape, relation bounds, cropped), indices (size, \
                 block, blocks, padding, summed), order (method dp/greedy/pair/unary, steps with kernels and costs, cost, \
                 left_to_right_cost), padding (in words)"}
        },
        "required": ["program", "optimize", "einsum"]
    });
    let error = json!({"description": "An einsum mistake: the error object plus `position`, the 0-based character in the expression",
        "content": {"application/json": {"schema": r("Error")}}});
    paths["/v1/einsum"] = json!({"post": {
        "summary": "Compile an einsum expression into a TRA program over blocked tensors and optimize it",
        "description": "Paper 004 §2.2: a join on the shared indices with an einSum kernel, an aggregation summing the \
                        repeated ones; more than two operands are contracted pairwise in the order the cost model \
                        prefers. Last blocks are zero-padded; crop the result to `einsum.output.shape`.",
        "requestBody": {"required": true, "content": {"application/json": {"schema": r("EinsumRequest")}}},
        "responses": {
            "200": {"description": "The program, the optimize answer, what the compiler did",
                    "content": {"application/json": {"schema": r("EinsumAnswer")}}},
            "400": {"description": "Not JSON (bad_json)", "content": {"application/json": {"schema": r("Error")}}},
            "403": {"description": "A foreign Host on a loopback-bound server (host_not_allowed)", "content": {"application/json": {"schema": r("Error")}}},
            "408": {"description": "The body was not sent in time (body_timeout)", "content": {"application/json": {"schema": r("Error")}}},
            "413": {"description": "Body too large (body_too_large)", "content": {"application/json": {"schema": r("Error")}}},
            "415": {"description": "Not sent as Content-Type: application/json (unsupported_media_type)", "content": {"application/json": {"schema": r("Error")}}},
            "422": error,
            "500": {"description": "A bug in tra (internal), naming the rule that failed", "content": {"application/json": {"schema": r("Error")}}},
            "503": {"description": "A limit stopped the work (limit_exceeded), or the server is busy (overloaded, with Retry-After)", "content": {"application/json": {"schema": r("Error")}}}
        }
    }});
}

// ---------------------------------------------------------------------------
// CLI
// ---------------------------------------------------------------------------

/// Arguments of `tra einsum`.
#[derive(clap::Args, Debug, Clone)]
pub struct EinsumArgs {
    /// The expression, numpy's syntax: "ij,jk->ik", "bij,bjk->bik", "ii->i", "ij,jk" (implicit output).
    #[arg(allow_hyphen_values = true)]
    pub expression: String,
    /// An operand from a dense `.npy` file (float64 or float32), `NAME=FILE.npy`, once per operand, in
    /// the expression's order. The result is computed and written in their dtype (float32 only when
    /// every operand is float32, as numpy promotes).
    #[arg(long = "input", value_name = "NAME=FILE.npy")]
    pub inputs: Vec<String>,
    /// Where to write the dense result (the inputs' dtype, numpy's shape): `NAME=FILE.npy` or `FILE.npy`
    /// (the output node is then `out`).
    #[arg(long, value_name = "NAME=FILE.npy")]
    pub output: Option<String>,
    /// Block size (an index smaller than it is one block of its own size; last blocks are zero-padded).
    #[arg(long, default_value_t = DEFAULT_BLOCK)]
    pub block: usize,
    /// Sites (worker threads) of the plan.
    #[arg(long, default_value_t = 4)]
    pub sites: usize,
    /// Run on the thread executor (default) or the reference interpreter.
    #[arg(long, value_parser = ["threads", "reference"], default_value = "threads")]
    pub executor: String,
    /// Print the TRA program (JSON) in the summary.
    #[arg(long)]
    pub show_program: bool,
    /// Fail when a rewrite rule breaks an invariant of the optimizer, instead
    /// of optimizing again without it (and warning).
    #[arg(long)]
    pub strict: bool,
    /// Time and memory of the optimization (choosing the contraction order included).
    #[command(flatten)]
    pub bounds: crate::optimize_limits::OptimizeLimitArgs,
}

/// An einsum error for a terminal: the message and a caret under the position.
fn cli_error(e: &EinsumError) -> String {
    let at = if e.at.is_empty() { String::new() } else { format!(" at {}", e.at) };
    match e.pointer() {
        Some(p) => format!("error [{}]{at}: {}\n{p}", e.code.as_str(), e.message),
        None => format!("error [{}]{at}: {}", e.code.as_str(), e.message),
    }
}

fn program_error(e: &ProgramError) -> String {
    if e.at.is_empty() {
        format!("error [{}]: {}", e.code.as_str(), e.message)
    } else {
        format!("error [{}] at {}: {}", e.code.as_str(), e.at, e.message)
    }
}

fn to_nested(a: &ArrayD<f64>) -> Value {
    fn rec(a: ndarray::ArrayViewD<'_, f64>) -> Value {
        if a.ndim() == 0 {
            return crate::server::json_float(a.iter().next().copied().unwrap_or(0.0));
        }
        Value::Array(a.axis_iter(Axis(0)).map(rec).collect())
    }
    rec(a.view())
}

/// What running the plan gave: the dense result (cropped) in the element
/// type computed in, floats moved, and the load and run times.
struct Executed<T> {
    dense: ArrayD<T>,
    floats_moved: u64,
    load_ms: f64,
    run_ms: f64,
}

/// The operands' relations on the thread executor, cut straight from the
/// files' dense tensors into blocks of `pool` (size-1 broadcast axes
/// dropped, last blocks zero-padded), in the element type computed in.
pub fn operand_trelation<T: Elem>(dense: &ArrayD<T>, op: &OperandInfo, pool: &Pool<T>) -> Result<TRelation<T>, String> {
    let view = relation_view(dense, op)?;
    if view.ndim() != op.key_bounds.len() || view.ndim() != op.array_bounds.len() {
        return Err(format!(
            "internal error: operand {} has {} relation axes but key bounds {:?} and blocks {:?}",
            op.name,
            view.ndim(),
            op.key_bounds,
            op.array_bounds
        ));
    }
    let mut tuples = Vec::new();
    for key in all_keys(&op.key_bounds) {
        let mut src = view.view();
        let mut block = pool.take(&op.array_bounds);
        let mut dst = block.view_mut();
        let mut partial = false;
        for (axis, (&k, &b)) in key.iter().zip(&op.array_bounds).enumerate() {
            let n = src.shape()[axis];
            let (lo, hi) = ((k as usize * b).min(n), (k as usize * b + b).min(n));
            partial |= hi - lo < b;
            src.slice_axis_inplace(Axis(axis), Slice::from(lo..hi));
        }
        if partial {
            dst.fill(T::ZERO);
            for (axis, &n) in src.shape().to_vec().iter().enumerate() {
                dst.slice_axis_inplace(Axis(axis), Slice::from(0..n));
            }
        }
        dst.assign(&src);
        tuples.push((key, Arc::new(block)));
    }
    Ok(TRelation { tuples })
}

/// The dense result of the output relation on the thread executor, cropped
/// to numpy's shape (keys without a tuple are zeros).
fn output_dense_typed<T: Elem>(rel: &TRelation<T>, out: &OutputInfo) -> Result<ArrayD<T>, String> {
    let mut dense = ArrayD::<T>::from_elem(IxDyn(&out.shape), T::ZERO);
    for (key, block) in &rel.tuples {
        if key.len() != out.shape.len() || block.shape().len() != out.shape.len() {
            return Err(format!("output {}: tuple {key:?} does not fit its shape {:?}", out.name, out.shape));
        }
        let mut src = block.view();
        let mut dst = dense.view_mut();
        for (axis, (&k, &b)) in key.iter().zip(block.shape()).enumerate() {
            let n = out.shape[axis];
            let (lo, hi) = ((k as usize * b).min(n), (k as usize * b + b).min(n));
            dst.slice_axis_inplace(Axis(axis), Slice::from(lo..hi));
            src.slice_axis_inplace(Axis(axis), Slice::from(0..hi - lo));
        }
        dst.assign(&src);
    }
    Ok(dense)
}

/// Load the operands as `T` and run the plan: on worker threads in `T`, as
/// `tra run` does ([`ThreadRuntime`], its default options), or on the
/// reference interpreter (which computes in f64; its result is then
/// converted to `T`).
fn execute<T: Elem>(
    args: &EinsumArgs,
    plan: &tra_optimizer::Plan,
    compiled: &Compiled,
    paths: &[PathBuf],
) -> Result<Executed<T>, String> {
    let t_load = Instant::now();
    if args.executor == "reference" {
        let mut inputs: BTreeMap<String, Relation> = BTreeMap::new();
        for (op, path) in compiled.operands.iter().zip(paths) {
            let a = npy::read_array::<f64>(path).map_err(|e| format!("input `{}`: {e}", op.name))?;
            inputs.insert(op.name.clone(), operand_relation(&a, op)?);
        }
        let load_ms = t_load.elapsed().as_secs_f64() * 1e3;
        let t_run = Instant::now();
        let run = tra_executor::reference::eval_ia(plan, args.sites, &inputs, AnyLayout::RoundRobin)
            .map_err(|e| format!("error while running: {e}"))?;
        let run_ms = t_run.elapsed().as_secs_f64() * 1e3;
        let mut outs = run.erased_outputs().map_err(|e| format!("error while running: {e}"))?;
        let rel = outs
            .remove(&compiled.output.name)
            .ok_or_else(|| format!("internal error: no output {}", compiled.output.name))?;
        let dense = output_dense(&rel, &compiled.output)?.mapv(T::from_f64);
        return Ok(Executed { dense, floats_moved: run.total_floats_moved(), load_ms, run_ms });
    }
    let rt: ThreadRuntime<T> = ThreadRuntime::new();
    let mut inputs: BTreeMap<String, TRelation<T>> = BTreeMap::new();
    for (op, path) in compiled.operands.iter().zip(paths) {
        let a = npy::read_array::<T>(path).map_err(|e| format!("input `{}`: {e}", op.name))?;
        inputs.insert(op.name.clone(), operand_trelation(&a, op, rt.pool())?);
    }
    let load_ms = t_load.elapsed().as_secs_f64() * 1e3;
    let run =
        rt.run(plan, args.sites, &inputs, &RunOptions::default()).map_err(|e| format!("error while running: {e}"))?;
    drop(inputs);
    let value = run
        .outputs
        .get(&compiled.output.name)
        .ok_or_else(|| format!("internal error: no output {}", compiled.output.name))?;
    let rel = value.erase().map_err(|e| format!("output `{}`: {e}", compiled.output.name))?;
    let dense = output_dense_typed(&rel, &compiled.output)?;
    Ok(Executed { dense, floats_moved: run.total_floats_moved(), load_ms, run_ms: run.report.wall_ms })
}

/// Run `tra einsum`; the answer is a JSON summary (pretty-printed).
///
/// It computes in the inputs' element type, chosen as `tra run` chooses it
/// ([`crate::run::input_dtype`]: float32 files give float32, float64 files
/// float64; float32 and float64 together float64, as numpy promotes), runs
/// the plan the way `tra run` does, and writes the result in that type.
pub fn einsum_command(args: EinsumArgs) -> Result<String, String> {
    let t_start = Instant::now();
    if args.sites == 0 {
        return Err("--sites must be at least 1".into());
    }
    if args.block == 0 {
        return Err("--block must be at least 1".into());
    }
    // Operands, in order: their shapes from the headers (the data is read
    // once the plan is known, in the type computed in).
    let mut operands = Vec::new();
    let mut paths: Vec<PathBuf> = Vec::new();
    let mut files: BTreeMap<String, PathBuf> = BTreeMap::new();
    let mut dtypes: Vec<Option<Dtype>> = Vec::new();
    for item in &args.inputs {
        let (name, path) = item
            .split_once('=')
            .filter(|(n, p)| !n.is_empty() && !p.is_empty())
            .ok_or_else(|| format!("--input {item:?}: expected NAME=FILE.npy"))?;
        let path = PathBuf::from(path);
        let h = npy::read_file_header(&path).map_err(|e| format!("input `{name}`: {e}"))?;
        dtypes.push(h.dtype.float);
        operands.push(Operand { name: name.to_string(), shape: h.shape.clone(), block: None });
        files.insert(name.to_string(), path.clone());
        paths.push(path);
    }
    // The element type as `tra run` chooses it, except that float32 and
    // float64 operands together compute in float64 (numpy's promotion)
    // where `tra run` asks for --dtype.
    let mixed = {
        let kinds: std::collections::BTreeSet<&str> = dtypes.iter().flatten().map(|d| d.name()).collect();
        kinds.len() > 1
    };
    let dtype = crate::run::input_dtype(&files, mixed.then_some("f64"))?;
    let (out_name, out_path) = match &args.output {
        None => (None, None),
        Some(o) => match o.split_once('=') {
            Some((n, p)) if !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') => {
                (Some(n.to_string()), Some(PathBuf::from(p)))
            }
            _ => (None, Some(PathBuf::from(o))),
        },
    };
    let cluster = Cluster { sites: args.sites, ..Cluster::default() };
    let req = Request {
        expression: args.expression.clone(),
        operands,
        block: Some(args.block),
        output: out_name,
        cluster: Some(cluster),
    };
    // One deadline for choosing the contraction order and optimizing (the
    // order search falls back to its estimates once the deadline has passed).
    let on_failure = if args.strict { OnRuleFailure::Fail } else { OnRuleFailure::Retry };
    let (compiled, compile_ms, t_opt, answer) = args.bounds.within(|| {
        let compiled = compile(&req, &Options::new(rules())).map_err(|e| cli_error(&e))?;
        let compile_ms = t_start.elapsed().as_secs_f64() * 1e3;
        let t_opt = Instant::now();
        let answer = optimize_with(&compiled.program, rules(), &args.bounds.limits(), on_failure)
            .map_err(|e| program_error(&ProgramError::from(&e)))?;
        Ok::<_, String>((compiled, compile_ms, t_opt, answer))
    })?;
    for w in &answer.warnings {
        eprintln!("warning [{}] at {}: {}", w.code, w.at, w.message);
    }
    let optimize_ms = t_opt.elapsed().as_secs_f64() * 1e3;

    let (mut output, measured, load_ms, run_ms, write_ms) = match dtype {
        Dtype::F32 => finish(execute::<f32>(&args, &answer.plan, &compiled, &paths)?, &compiled, out_path.as_deref())?,
        Dtype::F64 => finish(execute::<f64>(&args, &answer.plan, &compiled, &paths)?, &compiled, out_path.as_deref())?,
    };
    output["dtype"] = json!(dtype.name());
    let mut summary = json!({
        "expression": args.expression,
        "executor": args.executor,
        "dtype": dtype.name(),
        "sites": args.sites,
        "block": args.block,
        "inputs": compiled.operands.iter().zip(&paths).map(|(o, p)| json!({
            "name": o.name, "path": p.display().to_string(), "shape": o.shape,
            "key_bounds": o.key_bounds, "array_bounds": o.array_bounds, "relation_axes": o.relation_axes,
        })).collect::<Vec<_>>(),
        "output": output,
        "indices": compiled.indices,
        "padding": compiled.padding,
        "order": compiled.order,
        "program": compiled.program.to_sexpr(),
        "plan": answer.plan.to_sexpr(),
        "strategy": answer.alternatives.first().map(|a| a.label.clone()),
        "cost": answer.cost,
        "network_floats_measured": measured,
        "network_floats_predicted": answer.cost.network_floats,
        "timings_ms": {
            "compile": compile_ms, "optimize": optimize_ms, "load": load_ms, "run": run_ms,
            "write": write_ms, "total": t_start.elapsed().as_secs_f64() * 1e3,
        },
        "warnings": answer.warnings,
    });
    if args.show_program {
        summary["program_json"] = serde_json::to_value(&compiled.program).expect("JSON");
    }
    Ok(serde_json::to_string_pretty(&summary).expect("JSON"))
}

/// The output's summary (checksum; the file written in `T`, or the values
/// when small), the floats moved, and the load, run and write times.
fn finish<T: Elem>(
    ex: Executed<T>,
    compiled: &Compiled,
    out_path: Option<&std::path::Path>,
) -> Result<(Value, u64, f64, f64, f64), String> {
    let dense = ex.dense;
    let (sum, abs) = dense.iter().fold((0.0f64, 0.0f64), |(s, a), &x| {
        let x = x.to_f64();
        (s + x, a + x.abs())
    });
    let mut output = json!({
        "name": compiled.output.name, "shape": compiled.output.shape,
        "relation": {"key_bounds": compiled.output.key_bounds, "array_bounds": compiled.output.array_bounds},
        "cropped": compiled.output.cropped,
        "checksum": {"sum": crate::server::json_float(sum), "abs_sum": crate::server::json_float(abs)},
    });
    let t_write = Instant::now();
    if let Some(path) = out_path {
        let std = dense.as_standard_layout();
        npy::write_array::<T>(path, dense.shape(), std.as_slice().expect("standard layout"))
            .map_err(|e| format!("output: {e}"))?;
        output["path"] = json!(path.display().to_string());
    } else if dense.len() <= 10_000 {
        output["data"] = to_nested(&dense.mapv(|x| x.to_f64()));
    }
    let write_ms = t_write.elapsed().as_secs_f64() * 1e3;
    Ok((output, ex.floats_moved, ex.load_ms, ex.run_ms, write_ms))
}
