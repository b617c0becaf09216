//! `POST /v1/execute`: optimize a program, then run the chosen plan on the
//! thread executor (`tra_executor::threads`, in `f64`) with the given (or
//! random) input data; the answer has the wall time of every operator and the
//! floats every shuffle and broadcast moved next to the optimizer's prediction.

use super::{ApiError, AppState, JsonBody};
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use ndarray::{ArrayD, Axis, IxDyn, Slice};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::time::Instant;
use tra_executor::reference::{all_keys, random_relation, AnyLayout, Block, InterpError, Relation};
use tra_executor::threads::{shared_f64_runtime, RunOptions, TRelation};
use tra_optimizer::check::check_program;
use tra_optimizer::types::RelType;
use tra_optimizer::Program;

/// Outputs with at most this many floats (in their dense form) are returned whole.
pub const MAX_RETURNED_FLOATS: u64 = 10_000;

/// The data of one input, as the request gives it.
enum InputData {
    /// Integers in [-3, 3] from a seeded generator.
    Random(u64),
    /// Already cut into blocks.
    Given(Relation),
}

pub(super) async fn execute_handler(
    State(st): State<AppState>,
    JsonBody(body): JsonBody,
) -> Result<Json<Value>, ApiError> {
    let program = Program::from_value(&body)?;
    let typed = check_program(&program)?;
    let config = st.config().clone();

    // Refuse too much work before doing any.
    let limit = config.max_execute_floats;
    let input_floats: u64 =
        program.inputs.keys().map(|n| typed.types[n.as_str()].floats()).fold(0u64, u64::saturating_add);
    if input_floats > limit {
        return Err(too_large(
            "data",
            format!(
                "the inputs hold {input_floats} floats together; this server executes at most {limit} floats of input"
            ),
        ));
    }
    for name in program.nodes.keys() {
        let floats = typed.types[name.as_str()].floats();
        if floats > limit {
            return Err(too_large(
                name,
                format!(
                    "node {name} holds {floats} floats; this server executes programs whose relations hold at most {limit} floats each"
                ),
            ));
        }
    }

    let data = read_data(&program, &typed.types, body.get("data"))?;

    let t_opt = Instant::now();
    let optimized = st.optimize(program.clone()).await?;
    let answer = &optimized.answer;
    let optimize_ms = t_opt.elapsed().as_secs_f64() * 1000.0;

    let permit = st
        .inner
        .execute_slots
        .clone()
        .acquire_owned()
        .await
        .map_err(|_| ApiError::internal("the execution queue is closed"))?;
    let plan = answer.plan.clone();
    let sites = program.cluster().sites;
    let out_types: BTreeMap<String, RelType> =
        program.outputs.iter().map(|o| (o.clone(), typed.types[o.as_str()].clone())).collect();
    let run = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        let inputs: BTreeMap<String, Relation> = data
            .into_iter()
            .map(|(name, d)| {
                let rel = match d {
                    InputData::Given(r) => r,
                    InputData::Random(seed) => {
                        let t = &typed.types[name.as_str()];
                        random_relation(&t.frontier, &t.array_bounds, seed)
                    }
                };
                (name, rel)
            })
            .collect();
        let rt = shared_f64_runtime();
        let inputs: BTreeMap<String, TRelation<f64>> =
            inputs.iter().map(|(n, r)| (n.clone(), TRelation::from_relation(r, rt.pool()))).collect();
        let start = Instant::now();
        let opts = RunOptions { layout: AnyLayout::RoundRobin, ..RunOptions::default() };
        let run = rt.run(&plan, sites, &inputs, &opts)?;
        let execute_ms = start.elapsed().as_secs_f64() * 1000.0;
        let outputs = run.erased_outputs()?;
        let summaries: Map<String, Value> = outputs
            .iter()
            .map(|(name, rel)| (name.clone(), summarize(&rel.to_relation(), &out_types[name.as_str()])))
            .collect();
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
        Ok::<_, InterpError>((timings, operators, run.floats_moved.clone(), run.total_floats_moved(), summaries))
    })
    .await
    .map_err(|e| ApiError::internal(format!("the executor crashed: {e}")))?;
    let (timings, operators, floats_moved, measured, outputs) = run.map_err(interp_error)?;

    Ok(Json(json!({
        "timings_ms": timings,
        "operators": operators,
        "optimize_ms": optimize_ms,
        "network_floats_measured": measured,
        "network_floats_predicted": answer.cost.network_floats,
        "floats_moved": floats_moved,
        "sites": sites,
        "plan": answer.plan,
        "cost": answer.cost,
        "report": optimized.json["report"],
        "outputs": outputs,
        "warnings": answer.warnings,
    })))
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
        other => ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            at,
            format!("internal error while executing the chosen plan: {other}"),
        ),
    }
}

/// Read `data`: per input `{"random": {"seed": N}}` or `{"dense": nested arrays}`.
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
                "`data` must be an object: per input {\"random\": {\"seed\": 7}} or {\"dense\": nested arrays}",
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
            Some(other) => {
                return Err(bad(format!(
                    "expected {{\"random\": {{\"seed\": 7}}}} or {{\"dense\": nested arrays}}, not {}",
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
            None => match v.as_f64() {
                Some(x) => {
                    out.push(x);
                    Ok(())
                }
                None => Err(format!("element {path:?} is {}, expected a number", truncate(&v.to_string(), 40))),
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

/// An output: checksum, bounds, tuple count, and the data when small (the
/// dense tensor when key arity == array rank, else the relation array;
/// missing tuples are zero-filled).
fn summarize(rel: &Relation, t: &RelType) -> Value {
    let checksum: f64 = rel.tuples.values().map(|b| b.sum()).sum();
    let kb: Vec<usize> = t.frontier.iter().map(|&f| f as usize).collect();
    let ab = t.array_bounds.clone();
    let total: u64 = kb.iter().chain(&ab).map(|&x| x as u64).fold(1u64, u64::saturating_mul);
    let dense = !kb.is_empty() && kb.len() == ab.len();
    let mut out = json!({
        "checksum": checksum,
        "key_bounds": kb,
        "array_bounds": ab,
        "tuples": rel.len(),
        "floats": rel.floats(),
    });
    if total <= MAX_RETURNED_FLOATS {
        let array = if dense { to_dense(rel, &kb, &ab) } else { to_relation_array(rel, &kb, &ab) };
        out["layout"] = json!(if dense { "dense" } else { "relation" });
        out["data"] = to_nested(&array);
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
            return json!(a.iter().next().copied().unwrap_or(0.0));
        }
        Value::Array(a.axis_iter(Axis(0)).map(rec).collect())
    }
    rec(a.view())
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

    #[test]
    fn small_outputs_carry_their_data() {
        let t = rel_type(&[2], &[3]);
        let rel = random_relation(&[2], &[3], 1);
        let s = summarize(&rel, &t);
        assert_eq!(s["layout"], "dense");
        assert_eq!(s["data"].as_array().unwrap().len(), 6);
        let sum: f64 = rel.tuples.values().map(|b| b.sum()).sum();
        assert_eq!(s["checksum"].as_f64().unwrap(), sum);
    }
}
