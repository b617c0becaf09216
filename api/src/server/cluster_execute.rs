//! `POST /v1/execute` on a cluster (`tra serve --hosts FILE`): the chosen
//! plan runs on the warm `tra worker`s of the host file (see
//! [`crate::cluster::ClusterTarget`]); the answer has the same fields as on
//! threads, the figures taken from process 0's report.

use crate::cluster::ClusterTarget;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use tra_executor::reference::{InterpError, Relation};
use tra_optimizer::types::RelType;
use tra_optimizer::Plan;

/// What the handler answers: timings, operators, floats moved per exchange,
/// their total, and the output summaries.
pub(super) type Executed = (Map<String, Value>, Value, BTreeMap<String, u64>, u64, Map<String, Value>);

/// Run `plan` on the cluster; `summarize` describes an output as on threads.
pub(super) fn run(
    cluster: &ClusterTarget,
    plan: &Plan,
    sites: usize,
    inputs: &BTreeMap<String, Relation>,
    out_types: &BTreeMap<String, RelType>,
    summarize: &dyn Fn(&Relation, &RelType) -> Value,
) -> Result<Executed, InterpError> {
    let (job, outputs) = cluster.execute(plan, sites, inputs).map_err(|message| InterpError::BadNode {
        node: String::new(),
        message: format!("on the cluster: {message}"),
    })?;
    let mut timings = Map::new();
    timings.insert("total".into(), json!(job.run_ms));
    for n in &job.nodes {
        if n["fused_into"].is_null() {
            if let (Some(name), Some(ms)) = (n["name"].as_str(), n["wall_ms"].as_f64()) {
                timings.insert(name.to_string(), json!(ms));
            }
        }
    }
    let summaries =
        outputs.iter().map(|(name, rel)| (name.clone(), summarize(rel, &out_types[name.as_str()]))).collect();
    Ok((timings, Value::Array(job.nodes.clone()), job.floats_moved.clone(), job.network_floats, summaries))
}
