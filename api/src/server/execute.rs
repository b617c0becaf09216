//! `POST /v1/execute`: optimize a program, then run the chosen plan on the
//! thread executor (`tra_executor::threads`, in `f64`) with the given (or
//! random) input data; the answer has the wall time of every operator and the
//! floats every shuffle and broadcast moved next to the optimizer's prediction.
//!
//! Input data comes as nested JSON arrays or as a base64 `.npy` file
//! ([`super::npy_wire`]); outputs come back as nested arrays when small
//! (at most [`MAX_RETURNED_FLOATS`]) or, asked with `"return": {"format":
//! "npy"}`, every one as a base64 `.npy` up to `--max-return-floats`.

use super::admission::{self, Estimate};
use super::cache::CachedAnswer;
use super::npy_wire::{self, NpyInputError, ReturnSpec};
use super::{json_float, parse_json, ApiError, AppState, JsonBody};
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use indexmap::IndexMap;
use ndarray::{ArrayD, Axis, IxDyn, Slice};
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;
use tra_executor::fusion;
use tra_executor::reference::{all_keys, random_relation, AnyLayout, Block, InterpError, Relation};
use tra_executor::threads::{RunOptions, TRelation};
use tra_optimizer::check::{check_plan, check_program, TypedPlan};
use tra_optimizer::deadline::{self, Deadline};
use tra_optimizer::program::IaOp;
use tra_optimizer::types::RelType;
use tra_optimizer::{Plan, Program};

/// Outputs with at most this many floats (in their dense form) are returned
/// whole as nested JSON arrays (`"return": {"format": "json"}`, the default).
pub const MAX_RETURNED_FLOATS: u64 = 10_000;

/// The data of one input, as the request gives it.
enum InputData {
    /// Integers in [-3, 3] from a seeded generator.
    Random(u64),
    /// Already cut into blocks.
    Given(Relation),
}

/// A request checked, optimized and estimated: everything the run needs.
struct Prepared {
    data: BTreeMap<String, InputData>,
    types: indexmap::IndexMap<String, RelType>,
    outputs: Vec<String>,
    sites: usize,
    plan: Plan,
    answer: Value,
    estimate: Estimate,
    optimize_ms: f64,
    /// How the outputs are returned.
    ret: ReturnSpec,
}

pub(super) async fn execute_handler(
    State(st): State<AppState>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let config = st.config().clone();
    let start = Instant::now();
    // One deadline for the request: the optimization may use the optimize
    // limit, the run what is left of both.
    let deadline = st.deadline(
        config.optimize_time + config.execute_time,
        format!(
            "this server's limit of {} s for an execution, its optimization included (--optimize-ms, --execute-ms)",
            (config.optimize_time + config.execute_time).as_secs_f64()
        ),
    );
    let optimize_deadline = deadline.no_later_than(start + config.optimize_time, config.optimize_limit_words());
    let st2 = st.clone();
    let p = st.cpu(&optimize_deadline, move || prepare(&st2, &body)).await?;

    // Admission: room in the memory budget, then an execution slot.
    let reservation = st.inner.memory.reserve(&p.estimate, &deadline).await?;
    let permit = st.inner.execute_slots.acquire(&deadline).await?;
    let rt = st.inner.runtime.clone();
    let cluster = config.cluster.clone();
    let runtime = if cluster.is_some() { "cluster" } else { "threads" };
    let plan = p.plan.clone();
    let sites = p.sites;
    let run_deadline = deadline.clone();
    // The answer is made and serialized while the reservation is held: an
    // output returned as a `.npy` is counted in the estimate (its base64
    // text in the answer and in the body).
    let body = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        let _reservation = reservation;
        let r = deadline::within(run_deadline.clone(), || match &cluster {
            Some(c) => run_on_cluster(&p, c),
            None => run(&p, &rt, run_deadline),
        });
        let body = r.map_err(interp_error).and_then(|run| {
            serde_json::to_vec(&answer(&p, plan, sites, runtime, run))
                .map_err(|e| ApiError::internal(format!("cannot serialize the answer: {e}")))
        });
        crate::server::admission::give_back_freed_memory();
        body
    })
    .await
    .map_err(|e| ApiError::internal(format!("the executor crashed: {e}")))??;
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

/// The answer to an execution that ran.
fn answer(p: &Prepared, plan: Plan, sites: usize, runtime: &str, run: RunAnswer) -> Value {
    let (timings, operators, floats_moved, measured, outputs) = run;
    let measured_seconds = timings.get("total").and_then(|t| t.as_f64()).unwrap_or(0.0) / 1000.0;
    json!({
        "timings_ms": timings,
        "measured_seconds": measured_seconds,
        "operators": operators,
        "optimize_ms": p.optimize_ms,
        "network_floats_measured": measured,
        "network_floats_predicted": p.answer["cost"]["network_floats"],
        "floats_moved": floats_moved,
        "sites": sites,
        "plan": plan,
        "cost": p.answer["cost"],
        "report": p.answer["report"],
        "outputs": outputs,
        "estimated_memory_bytes": p.estimate.bytes,
        "runtime": runtime,
        "warnings": p.answer["warnings"],
    })
}

/// Parse, check, refuse too much work, read the data, optimize, and
/// estimate the run (on a blocking thread, under the optimize deadline).
fn prepare(st: &AppState, body: &[u8]) -> Result<Prepared, ApiError> {
    let config = st.config();
    let value = parse_json(body)?;
    let program = st.with_defaults(&value["cluster"], Program::from_request(&value, &["data", "return"])?);
    let ret = ReturnSpec::parse(value.get("return"))?;
    let typed = check_program(&program)?;
    let sites = program.cluster().sites;
    if sites > config.max_execute_sites {
        return Err(ApiError::unprocessable(
            "bad_field",
            "cluster.sites",
            format!(
                "cluster.sites is {sites}; this server executes programs on at most {} sites (--max-execute-sites), \
                 optimizing them (POST /v1/optimize) accepts up to 4096",
                config.max_execute_sites
            ),
        ));
    }

    // Refuse too much work before doing any.
    let limit = config.max_execute_floats;
    let input_floats: u64 =
        program.inputs.keys().map(|n| typed.types[n.as_str()].floats()).fold(0u64, u64::saturating_add);
    if input_floats > limit {
        return Err(too_large(
            "data",
            format!(
                "the inputs hold {input_floats} floats together; this server executes at most {limit} floats of input \
                 (--max-execute-floats)"
            ),
        ));
    }
    // A matrix product summed as it is made holds nothing: whether the
    // chosen plan does is checked once there is one.
    let fusable = fusion::fusable_program_joins(&program);
    for name in program.nodes.keys().filter(|n| !fusable.contains(*n)) {
        let floats = typed.types[name.as_str()].floats();
        if floats > limit {
            return Err(too_large(
                name,
                format!(
                    "node {name} holds {floats} floats; this server executes programs whose relations hold at most {limit} \
                     floats each (--max-execute-floats)"
                ),
            ));
        }
    }
    if ret.npy {
        for o in &program.outputs {
            let floats = returned_floats(&typed.types[o.as_str()]);
            if floats > config.max_return_floats {
                return Err(too_large(
                    o,
                    format!(
                        "output {o} holds {floats} floats (its {} array, holes zero-filled); this server returns \
                         outputs of at most {} floats each as .npy (--max-return-floats): raise it, e.g. tra serve \
                         --max-return-floats {floats}, to get this one",
                        if dense_layout(&typed.types[o.as_str()]) { "dense" } else { "relation" },
                        config.max_return_floats
                    ),
                ));
            }
        }
    }
    let inputs: Vec<&str> = program.inputs.keys().map(String::as_str).collect();
    let mut rough = admission::estimate_program(&inputs, &typed.types, &program.outputs, sites, &fusable);
    add_returned(&mut rough, &program.outputs, &typed.types, ret);
    if rough.bytes > config.execute_memory_bytes {
        return Err(admission::too_much_memory(&rough, config.execute_memory_bytes));
    }

    let data = read_data(&program, &typed.types, value.get("data"))?;

    let t_opt = Instant::now();
    let optimized = st.optimize_here(&program)?;
    let optimize_ms = t_opt.elapsed().as_secs_f64() * 1000.0;
    let answer = optimized.json();
    let plan = CachedAnswer::plan_of(&answer);
    let typed_plan = check_plan(&plan, sites).map_err(|e| {
        if e.code == tra_optimizer::ErrorCode::LimitExceeded {
            ApiError::from(e)
        } else {
            ApiError::internal(format!("the chosen plan does not check: {} at {}", e.message, e.at))
        }
    })?;
    let fused = fusion::fused_joins(&plan);
    if let Some(e) = products_held(&typed.types, &fusable, &plan, &typed_plan, &fused, &answer, limit) {
        return Err(e);
    }
    let mut estimate = admission::estimate_plan(&plan, &typed_plan, sites, &fused);
    add_returned(&mut estimate, &program.outputs, &typed.types, ret);
    if estimate.bytes > config.execute_memory_bytes {
        return Err(admission::too_much_memory(&estimate, config.execute_memory_bytes));
    }
    Ok(Prepared {
        data,
        types: typed.types,
        outputs: program.outputs.clone(),
        sites,
        plan,
        answer,
        estimate,
        optimize_ms,
        ret,
    })
}

/// The floats of an output's returned array: its dense tensor or relation
/// array, holes zero-filled.
fn returned_floats(t: &RelType) -> u64 {
    t.frontier
        .iter()
        .map(|&f| u64::from(f))
        .chain(t.array_bounds.iter().map(|&a| a as u64))
        .fold(1, u64::saturating_mul)
}

/// Whether an output is returned as its dense tensor (key arity == block
/// rank, at least one key dim), else as the relation array.
fn dense_layout(t: &RelType) -> bool {
    !t.frontier.is_empty() && t.frontier.len() == t.array_bounds.len()
}

/// Count in `e` the outputs returned as `.npy` (nothing for JSON: at most
/// 10,000 floats each).
fn add_returned(e: &mut Estimate, outputs: &[String], types: &IndexMap<String, RelType>, ret: ReturnSpec) {
    if ret.npy {
        for o in outputs {
            e.returned(o, returned_floats(&types[o.as_str()]), ret.dtype.size() as u64);
        }
    }
}

/// The refusal of a plan that holds the products of a matrix product over
/// the float limit: the program's join (its products deferred from the
/// check before optimizing) that the plan computes apart from its sum.
fn products_held(
    types: &IndexMap<String, RelType>,
    fusable: &BTreeSet<String>,
    plan: &Plan,
    typed_plan: &TypedPlan,
    fused: &BTreeMap<String, String>,
    answer: &Value,
    limit: u64,
) -> Option<ApiError> {
    let (join, floats) = fusable.iter().map(|n| (n, types[n.as_str()].floats())).find(|(_, f)| *f > limit)?;
    let (held, _) = plan.nodes.iter().find(|(name, op)| {
        matches!(op, IaOp::LocalJoin { .. })
            && !fused.values().any(|j| j == *name)
            && typed_plan.types[name.as_str()].rel.floats() > limit
    })?;
    let label = answer["alternatives"][0]["label"].as_str().unwrap_or("the chosen plan");
    Some(too_large(
        join,
        format!(
            "node {join} holds {floats} floats, and the chosen plan ({label}) holds them: its operator {held} makes the \
             products apart from their sum; this server executes programs whose relations hold at most {limit} floats \
             each (--max-execute-floats)"
        ),
    ))
}

/// Timings, operators, floats moved per exchange and in all, output summaries.
type RunAnswer = (Map<String, Value>, Value, BTreeMap<String, u64>, u64, Map<String, Value>);

/// Make the inputs, run the plan, summarize the outputs (on a blocking
/// thread, under the request's deadline).
fn run(
    p: &Prepared,
    rt: &tra_executor::threads::ThreadRuntime<f64>,
    deadline: Deadline,
) -> Result<RunAnswer, InterpError> {
    let stopped = |node: &str| InterpError::Stopped { node: node.to_string(), reason: deadline::reason() };
    let mut inputs: BTreeMap<String, TRelation<f64>> = BTreeMap::new();
    for (name, d) in &p.data {
        if deadline::expired() {
            return Err(stopped(name));
        }
        let rel = match d {
            InputData::Given(r) => TRelation::from_relation(r, rt.pool()),
            InputData::Random(seed) => {
                let t = &p.types[name.as_str()];
                TRelation::from_relation(&random_relation(&t.frontier, &t.array_bounds, *seed), rt.pool())
            }
        };
        inputs.insert(name.clone(), rel);
    }
    let start = Instant::now();
    let opts = RunOptions { layout: AnyLayout::RoundRobin, deadline: Some(deadline), ..RunOptions::default() };
    let run = rt.run(&p.plan, p.sites, &inputs, &opts)?;
    drop(inputs);
    let execute_ms = start.elapsed().as_secs_f64() * 1000.0;
    let outputs = run.erased_outputs()?;
    let summaries: Map<String, Value> = outputs
        .iter()
        .map(|(name, rel)| (name.clone(), summarize(&rel.to_relation(), &p.types[name.as_str()], p.ret)))
        .collect();
    debug_assert!(p.outputs.iter().all(|o| outputs.contains_key(o)));
    // `timings_ms`: the whole run and the wall time of every operator
    // (a join fused into its aggregation is counted there, and listed
    // with `fused_into` in `operators`).
    let mut timings = Map::new();
    timings.insert("total".into(), json!(execute_ms));
    for n in &run.report.nodes {
        if n.fused_into.is_none() {
            timings.insert(n.name.clone(), json!(n.wall_ms));
        }
    }
    let operators = serde_json::to_value(&run.report.nodes).unwrap_or(Value::Null);
    Ok((timings, operators, run.floats_moved.clone(), run.total_floats_moved(), summaries))
}

/// Run the plan on the warm workers of `tra serve --hosts` (the inputs made
/// here, as on threads; the figures are process 0's report).
fn run_on_cluster(p: &Prepared, cluster: &crate::cluster::ClusterTarget) -> Result<RunAnswer, InterpError> {
    let inputs: BTreeMap<String, Relation> = p
        .data
        .iter()
        .map(|(name, d)| {
            let rel = match d {
                InputData::Given(r) => r.clone(),
                InputData::Random(seed) => {
                    let t = &p.types[name.as_str()];
                    random_relation(&t.frontier, &t.array_bounds, *seed)
                }
            };
            (name.clone(), rel)
        })
        .collect();
    let out_types: BTreeMap<String, RelType> =
        p.outputs.iter().map(|o| (o.clone(), p.types[o.as_str()].clone())).collect();
    let ret = p.ret;
    super::cluster_execute::run(cluster, &p.plan, p.sites, &inputs, &out_types, &|rel, t| summarize(rel, t, ret))
}

fn too_large(at: &str, message: String) -> ApiError {
    ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "data_too_large", at, message)
}

fn interp_error(e: InterpError) -> ApiError {
    let at = e.node().unwrap_or("").to_string();
    match e {
        InterpError::BadInput { .. } | InterpError::MissingInput(_) => {
            ApiError::unprocessable("bad_field", format!("data.{at}"), e.to_string())
        }
        InterpError::Stopped { .. } => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "limit_exceeded",
            at,
            format!("the execution stopped before it finished: {e}"),
        ),
        other => ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            at,
            format!("internal error while executing the chosen plan: {other}"),
        ),
    }
}

/// Read `data`: per input `{"random": {"seed": N}}`, `{"dense": nested arrays}`
/// or `{"npy": base64 of a .npy file}`.
/// An input without an entry (or no `data` at all) gets random data with seed 0.
fn read_data(
    program: &Program,
    types: &indexmap::IndexMap<String, RelType>,
    data: Option<&Value>,
) -> Result<BTreeMap<String, InputData>, ApiError> {
    let empty = Map::new();
    let obj = match data {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(m)) => m,
        Some(_) => {
            return Err(ApiError::unprocessable(
                "bad_field",
                "data",
                "`data` must be an object: per input {\"random\": {\"seed\": 7}}, {\"dense\": nested arrays} or \
                 {\"npy\": base64 of a .npy file}",
            ))
        }
    };
    if let Some(name) = obj.keys().find(|n| !program.inputs.contains_key(n.as_str())) {
        let names: Vec<&str> = program.inputs.keys().map(|s| s.as_str()).collect();
        return Err(ApiError::unprocessable(
            "unknown_input",
            format!("data.{name}"),
            format!("data for `{name}`, which is not an input of the program (inputs: {})", names.join(", ")),
        ));
    }
    let mut out = BTreeMap::new();
    for name in program.inputs.keys() {
        let t = &types[name.as_str()];
        let at = format!("data.{name}");
        let bad = |m: String| ApiError::unprocessable("bad_field", at.clone(), format!("data for input {name}: {m}"));
        let d = match obj.get(name) {
            None => InputData::Random(0),
            Some(Value::Object(spec)) if spec.len() == 1 && spec.contains_key("random") => {
                let seed = match &spec["random"] {
                    Value::Null => 0,
                    Value::Object(r) => match r.get("seed") {
                        None => 0,
                        Some(s) => {
                            s.as_u64().ok_or_else(|| bad(format!("`seed` must be a non-negative integer, not {s}")))?
                        }
                    },
                    other => return Err(bad(format!("`random` must be an object like {{\"seed\": 7}}, not {other}"))),
                };
                InputData::Random(seed)
            }
            Some(Value::Object(spec)) if spec.len() == 1 && spec.contains_key("dense") => {
                let (shape, values) = nested_array(&spec["dense"]).map_err(|m| bad(format!("`dense`: {m}")))?;
                InputData::Given(cut(&shape, values, t).map_err(|m| {
                    ApiError::unprocessable("bounds_mismatch", at.clone(), format!("data for input {name}: {m}"))
                })?)
            }
            Some(Value::Object(spec)) if spec.len() == 1 && spec.contains_key("npy") => {
                let text = spec["npy"].as_str().ok_or_else(|| {
                    bad(format!(
                        "`npy` must be a string, the base64 text of a .npy file, not {}",
                        truncate(&spec["npy"].to_string(), 40)
                    ))
                })?;
                let (shape, values) =
                    npy_wire::read_input(text, &t.frontier, &t.array_bounds).map_err(|e| match e {
                        NpyInputError::Bad(m) => bad(m),
                        NpyInputError::Shape(m) => ApiError::unprocessable(
                            "bounds_mismatch",
                            at.clone(),
                            format!("data for input {name}: {m}"),
                        ),
                    })?;
                InputData::Given(cut(&shape, values, t).map_err(|m| {
                    ApiError::unprocessable("bounds_mismatch", at.clone(), format!("data for input {name}: {m}"))
                })?)
            }
            Some(other) => {
                return Err(bad(format!(
                    "expected {{\"random\": {{\"seed\": 7}}}}, {{\"dense\": nested arrays}} or {{\"npy\": base64 \
                     of a .npy file}}, not {}",
                    truncate(&other.to_string(), 80)
                )))
            }
        };
        out.insert(name.clone(), d);
    }
    Ok(out)
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(n).collect::<String>())
    }
}

/// The shape and the row-major values of nested JSON arrays of numbers.
fn nested_array(v: &Value) -> Result<(Vec<usize>, Vec<f64>), String> {
    let mut shape = Vec::new();
    let mut probe = v;
    while let Value::Array(items) = probe {
        shape.push(items.len());
        match items.first() {
            Some(first) => probe = first,
            None => break,
        }
    }
    let mut values = Vec::with_capacity(shape.iter().product());
    fn walk(v: &Value, shape: &[usize], path: &mut Vec<usize>, out: &mut Vec<f64>) -> Result<(), String> {
        match shape.split_first() {
            None => match float_of(v) {
                Some(x) => {
                    out.push(x);
                    Ok(())
                }
                None => Err(format!(
                    "element {path:?} is {}, expected a number (or \"NaN\", \"Infinity\", \"-Infinity\")",
                    truncate(&v.to_string(), 40)
                )),
            },
            Some((&n, rest)) => {
                let items =
                    v.as_array().ok_or_else(|| format!("element {path:?} is not an array: the nesting is ragged"))?;
                if items.len() != n {
                    return Err(format!(
                        "element {path:?} has {} items, expected {n}: the nesting is ragged",
                        items.len()
                    ));
                }
                for (i, item) in items.iter().enumerate() {
                    path.push(i);
                    walk(item, rest, path, out)?;
                    path.pop();
                }
                Ok(())
            }
        }
    }
    walk(v, &shape, &mut Vec::new(), &mut values)?;
    Ok((shape, values))
}

/// Cut an array into the tuples of an input: either the relation array of
/// shape `key_bounds ++ array_bounds`, or (key arity == array rank) the dense
/// tensor of shape `key_bounds[i] * array_bounds[i]`.
fn cut(shape: &[usize], values: Vec<f64>, t: &RelType) -> Result<Relation, String> {
    let kb: Vec<usize> = t.frontier.iter().map(|&f| f as usize).collect();
    let ab = &t.array_bounds;
    let relation_shape: Vec<usize> = kb.iter().chain(ab).copied().collect();
    let dense_shape: Option<Vec<usize>> =
        (kb.len() == ab.len()).then(|| kb.iter().zip(ab).map(|(k, a)| k * a).collect());
    // JSON cannot spell the shape of an empty array (numpy's tolist() of a
    // (0, 6) array is `[]`): an empty array is the empty relation array.
    let empty = values.is_empty() && relation_shape.contains(&0);
    let shape = if empty { relation_shape.as_slice() } else { shape };
    let array = ArrayD::from_shape_vec(IxDyn(shape), values).map_err(|e| e.to_string())?;
    if shape == relation_shape.as_slice() {
        let mut tuples = BTreeMap::new();
        for key in all_keys(&t.frontier) {
            let mut view = array.view();
            for &k in &key {
                view = view.index_axis_move(Axis(0), k as usize);
            }
            tuples.insert(key, view.to_owned());
        }
        return Ok(Relation { tuples });
    }
    if let Some(ds) = &dense_shape {
        if shape == ds.as_slice() {
            return Relation::from_dense(&array, ab);
        }
    }
    let mut expected = format!("the relation array of shape {relation_shape:?} (key_bounds ++ array_bounds)");
    if let Some(ds) = dense_shape {
        expected.push_str(&format!(" or the dense tensor of shape {ds:?}"));
    }
    Err(format!("an array of shape {shape:?}, expected {expected}"))
}

/// An output: checksum, bounds, tuple count, and its values (the dense
/// tensor when key arity == array rank, else the relation array; missing
/// tuples are zero-filled): as a base64 `.npy` when `ret` asks for it (the
/// size was checked against `--max-return-floats` before the run), else as
/// nested arrays when small, else a `note` saying how to get them.
fn summarize(rel: &Relation, t: &RelType, ret: ReturnSpec) -> Value {
    // Folded from +0.0: `Iterator::sum` of no floats is -0.0, which an empty
    // output would report.
    let checksum: f64 = rel.tuples.values().fold(0.0, |a, b| a + b.sum());
    let kb: Vec<usize> = t.frontier.iter().map(|&f| f as usize).collect();
    let ab = t.array_bounds.clone();
    let total = returned_floats(t);
    let dense = dense_layout(t);
    let mut out = json!({
        "checksum": json_float(checksum),
        "key_bounds": kb,
        "array_bounds": ab,
        "tuples": rel.len(),
        "floats": rel.floats(),
    });
    let layout = json!(if dense { "dense" } else { "relation" });
    if ret.npy {
        let array = if dense { to_dense(rel, &kb, &ab) } else { to_relation_array(rel, &kb, &ab) };
        let text = match array.as_slice() {
            Some(values) => npy_wire::encode_output(array.shape(), values.iter().copied(), ret.dtype),
            None => npy_wire::encode_output(array.shape(), array.iter().copied(), ret.dtype),
        };
        drop(array);
        out["layout"] = layout;
        out["npy"] = Value::String(text);
    } else if total <= MAX_RETURNED_FLOATS {
        let array = if dense { to_dense(rel, &kb, &ab) } else { to_relation_array(rel, &kb, &ab) };
        out["layout"] = layout;
        out["data"] = to_nested(&array);
    } else {
        out["note"] = json!(format!(
            "{total} floats, more than the {MAX_RETURNED_FLOATS} returned as JSON: ask for every output as a .npy \
             with \"return\": {{\"format\": \"npy\"}} (up to --max-return-floats)"
        ));
    }
    out
}

fn in_bounds(key: &[u32], kb: &[usize], b: &Block, ab: &[usize]) -> bool {
    key.len() == kb.len() && key.iter().zip(kb).all(|(&k, &f)| (k as usize) < f) && b.shape() == ab
}

fn to_relation_array(rel: &Relation, kb: &[usize], ab: &[usize]) -> Block {
    let shape: Vec<usize> = kb.iter().chain(ab).copied().collect();
    let mut array = Block::zeros(IxDyn(&shape));
    for (key, b) in &rel.tuples {
        if !in_bounds(key, kb, b, ab) {
            continue;
        }
        let mut view = array.view_mut();
        for &k in key {
            view = view.index_axis_move(Axis(0), k as usize);
        }
        view.assign(b);
    }
    array
}

fn to_dense(rel: &Relation, kb: &[usize], ab: &[usize]) -> Block {
    let shape: Vec<usize> = kb.iter().zip(ab).map(|(k, a)| k * a).collect();
    let mut array = Block::zeros(IxDyn(&shape));
    for (key, b) in &rel.tuples {
        if !in_bounds(key, kb, b, ab) {
            continue;
        }
        let mut view = array.view_mut();
        for (axis, (&k, &e)) in key.iter().zip(ab).enumerate() {
            let start = k as usize * e;
            view.slice_axis_inplace(Axis(axis), Slice::from(start..start + e));
        }
        view.assign(b);
    }
    array
}

/// Nested JSON arrays, row-major (a rank-0 array is a number).
fn to_nested(a: &Block) -> Value {
    fn rec(a: ndarray::ArrayViewD<'_, f64>) -> Value {
        if a.ndim() == 0 {
            return json_float(a.iter().next().copied().unwrap_or(0.0));
        }
        Value::Array(a.axis_iter(Axis(0)).map(rec).collect())
    }
    rec(a.view())
}

/// A float of input data: a number or one of the strings of [`json_float`].
fn float_of(v: &Value) -> Option<f64> {
    match v {
        Value::String(s) => match s.as_str() {
            "NaN" => Some(f64::NAN),
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        v => v.as_f64(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel_type(kb: &[u32], ab: &[usize]) -> RelType {
        RelType::dense(kb.to_vec(), ab.to_vec())
    }

    #[test]
    fn nested_arrays_read_shape_and_values() {
        let (shape, values) = nested_array(&json!([[1, 2, 3], [4, 5, 6]])).unwrap();
        assert_eq!(shape, vec![2, 3]);
        assert_eq!(values, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert!(nested_array(&json!([[1, 2], [3]])).unwrap_err().contains("ragged"));
        assert!(nested_array(&json!([[1, "a"], [3, 4]])).unwrap_err().contains("number"));
        assert_eq!(nested_array(&json!(5)).unwrap(), (vec![], vec![5.0]));
    }

    #[test]
    fn dense_and_relation_forms_cut_alike_and_round_trip() {
        // A 4×4 matrix in 2×2 keys of 2×2 blocks.
        let t = rel_type(&[2, 2], &[2, 2]);
        let dense: Vec<f64> = (0..16).map(f64::from).collect();
        let r1 = cut(&[4, 4], dense.clone(), &t).unwrap();
        assert_eq!(r1.get(&[1, 0]).unwrap().iter().copied().collect::<Vec<_>>(), vec![8.0, 9.0, 12.0, 13.0]);
        let rel_array = to_relation_array(&r1, &[2, 2], &[2, 2]);
        let r2 = cut(rel_array.shape(), rel_array.iter().copied().collect(), &t).unwrap();
        assert_eq!(r1, r2);
        let back = to_dense(&r1, &[2, 2], &[2, 2]);
        assert_eq!(back.iter().copied().collect::<Vec<_>>(), dense);
        assert!(cut(&[4, 5], vec![0.0; 20], &t).unwrap_err().contains("expected"));
    }

    /// A matmul of 4×4 keys of 2×2 blocks on 4 sites: inputs of 128 floats
    /// together, products (`XY`) of 256, the sum of 64.
    fn matmul_program() -> Program {
        Program::from_json(
            r#"{"inputs": {"X": {"key_bounds": [4, 4], "array_bounds": [2, 2]},
                           "Y": {"key_bounds": [4, 4], "array_bounds": [2, 2]}},
                "nodes": {"XY": {"op": "join", "left": "X", "right": "Y", "left_keys": [1], "right_keys": [0], "kernel": "matMul"},
                          "Z": {"op": "aggregate", "input": "XY", "group_by": [0, 2], "kernel": "matAdd"}},
                "outputs": ["Z"], "cluster": {"sites": 4}}"#,
        )
        .unwrap()
    }

    /// `X` and `Y` joined by `n0`, then `between` (nodes reading `n0`
    /// and named up to `last`), summed into `Z`.
    fn plan(between: &str, last: &str) -> Plan {
        Plan::from_json(&format!(
            r#"{{"inputs": {{"X": {{"key_bounds": [4, 4], "array_bounds": [2, 2], "placement": "replicated"}},
                            "Y": {{"key_bounds": [4, 4], "array_bounds": [2, 2], "placement": {{"hash": [1]}}}}}},
                "nodes": {{"n0": {{"op": "local_join", "left": "X", "right": "Y", "left_keys": [1], "right_keys": [0], "kernel": "matMul"}},
                          {between}
                          "Z": {{"op": "local_aggregate", "input": "{last}", "group_by": [0, 2], "kernel": "matAdd"}}}},
                "outputs": ["Z"]}}"#
        ))
        .unwrap()
    }

    /// The products of a matrix product are not counted against the float
    /// limit when the plan sums them as it makes them, and are when it
    /// holds them (here: shuffles them before the sum); then the refusal
    /// names the program's join and the plan's operator.
    #[test]
    fn a_matrix_product_counts_against_the_float_limit_only_where_the_plan_holds_it() {
        let program = matmul_program();
        let typed = check_program(&program).unwrap();
        let fusable = fusion::fusable_program_joins(&program);
        assert_eq!(fusable.iter().collect::<Vec<_>>(), ["XY"]);
        let answer = json!({"alternatives": [{"label": "BMM"}]});
        let held = |plan: &Plan, limit: u64| {
            let typed_plan = check_plan(plan, 4).unwrap_or_else(|e| panic!("{e:?}"));
            let fused = fusion::fused_joins(plan);
            products_held(&typed.types, &fusable, plan, &typed_plan, &fused, &answer, limit)
        };
        let summed = plan("", "n0");
        assert!(held(&summed, 200).is_none(), "fused: the 256 floats of products are never held");
        let shuffled = plan(r#""n1": {"op": "shuffle", "input": "n0", "dims": [0, 2]},"#, "n1");
        let e = held(&shuffled, 200).expect("the products are held before the shuffle");
        assert_eq!((e.status.as_u16(), e.code.as_str(), e.at.as_str()), (413, "data_too_large", "XY"));
        for part in ["node XY holds 256 floats", "(BMM)", "operator n0", "--max-execute-floats"] {
            assert!(e.message.contains(part), "{part} in: {}", e.message);
        }
        assert!(held(&shuffled, 256).is_none(), "within the limit");
    }

    #[test]
    fn small_outputs_carry_their_data() {
        let t = rel_type(&[2], &[3]);
        let rel = random_relation(&[2], &[3], 1);
        let s = summarize(&rel, &t, ReturnSpec::default());
        assert_eq!(s["layout"], "dense");
        assert_eq!(s["data"].as_array().unwrap().len(), 6);
        let sum: f64 = rel.tuples.values().map(|b| b.sum()).sum();
        assert_eq!(s["checksum"].as_f64().unwrap(), sum);
        let empty = summarize(&Relation::new(), &t, ReturnSpec::default());
        assert_eq!(empty["checksum"].to_string(), "0.0", "not -0.0");
    }
}
