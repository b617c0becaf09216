//! Which joins run inside the aggregation that consumes them: the one
//! fusion decision of the thread and the cluster runtimes.
//!
//! A `local_aggregate(matAdd)` whose operand is a `local_join` with a
//! matrix-product kernel runs as one operator — each output block `Σ A·B`
//! accumulated by GEMM into the output block, the products never
//! materialised — when the join's value is needed nowhere else: it has no
//! other consumer and is not a plan output. Both runtimes take this decision
//! from here, so that they fuse the same nodes and report the same
//! `fused_into` figures.
//!
//! The service's admission of an execution reads the same decision: a
//! fused join's products are never held, so they are not counted against
//! its limits ([`fusable_program_joins`] before a plan is chosen,
//! [`fused_joins`] after).

use crate::threads::kernels::MatMulKind;
use crate::threads::local::is_mat_add;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use tra_optimizer::kernel::KernelRef;
use tra_optimizer::program::{IaOp, Operator, Plan, Program, TraOp};

/// Whether a join with kernel `join` whose only consumer is an aggregation
/// with kernel `aggregate` runs fused into it.
fn fuses(join: &KernelRef, aggregate: &KernelRef) -> bool {
    is_mat_add(aggregate) && MatMulKind::of(join).is_some()
}

/// How many operators read each operand, by name.
fn consumers<'a, O: Operator + 'a>(ops: impl Iterator<Item = &'a O>) -> HashMap<&'a str, usize> {
    let mut consumers: HashMap<&str, usize> = HashMap::new();
    for op in ops {
        for operand in op.operands() {
            *consumers.entry(operand).or_default() += 1;
        }
    }
    consumers
}

/// The joins that run fused into the aggregation that follows them: for each
/// such aggregation, by name, the name of its join.
pub fn fused_joins(plan: &Plan) -> BTreeMap<String, String> {
    let consumers = consumers(plan.nodes.values());
    let mut fused = BTreeMap::new();
    for (name, op) in &plan.nodes {
        let IaOp::LocalAggregate { input, kernel, .. } = op else { continue };
        let Some(IaOp::LocalJoin { kernel: join_kernel, .. }) = plan.nodes.get(input) else { continue };
        if fuses(join_kernel, kernel)
            && consumers.get(input.as_str()) == Some(&1)
            && !plan.outputs.iter().any(|o| o == input)
        {
            fused.insert(name.clone(), input.clone());
        }
    }
    fused
}

/// The joins of a TRA program that a plan can run fused: a matrix product
/// read only by a sum of its products (and not an output). Whether the
/// chosen plan does depends on its strategy (a plan that shuffles the
/// products before summing them holds them): [`fused_joins`] of the plan says.
pub fn fusable_program_joins(program: &Program) -> BTreeSet<String> {
    let consumers = consumers(program.nodes.values());
    program
        .nodes
        .values()
        .filter_map(|op| {
            let TraOp::Aggregate { input, kernel, .. } = op else { return None };
            let Some(TraOp::Join { kernel: join_kernel, .. }) = program.nodes.get(input) else { return None };
            (fuses(join_kernel, kernel)
                && consumers.get(input.as_str()) == Some(&1)
                && !program.outputs.iter().any(|o| o == input))
            .then(|| input.clone())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::fused_joins;
    use tra_optimizer::program::Plan;

    /// A plan with `j = local_join(X, Y, join_kernel)` and
    /// `Z = local_aggregate(j, agg_kernel)`, plus `extra` nodes and outputs.
    fn plan(join_kernel: &str, agg_kernel: &str, extra: &str, outputs: &str) -> Plan {
        Plan::from_json(&format!(
            r#"{{"inputs": {{"X": {{"key_bounds": [2, 2], "array_bounds": [2, 2]}},
                             "Y": {{"key_bounds": [2, 2], "array_bounds": [2, 2]}}}},
                "nodes": {{"j": {{"op": "local_join", "left": "X", "right": "Y", "left_keys": [1],
                                  "right_keys": [0], "kernel": "{join_kernel}"}},
                          "Z": {{"op": "local_aggregate", "input": "j", "group_by": [0, 2], "kernel": "{agg_kernel}"}}
                          {extra}}},
                "outputs": [{outputs}]}}"#
        ))
        .unwrap()
    }

    #[test]
    fn a_sum_of_products_used_once_is_fused() {
        let fused = fused_joins(&plan("matMul", "matAdd", "", r#""Z""#));
        assert_eq!(fused.get("Z").map(String::as_str), Some("j"));
        assert_eq!(fused.len(), 1);
        assert_eq!(fused_joins(&plan("matMulTN", "matAdd", "", r#""Z""#)).len(), 1);
    }

    #[test]
    fn a_join_needed_elsewhere_or_another_kernel_is_not_fused() {
        let used_twice = r#", "m": {"op": "local_map", "input": "j", "kernel": "relu"}"#;
        assert!(fused_joins(&plan("matMul", "matAdd", used_twice, r#""Z", "m""#)).is_empty());
        assert!(fused_joins(&plan("matMul", "matAdd", "", r#""Z", "j""#)).is_empty());
        assert!(fused_joins(&plan("matAdd", "matAdd", "", r#""Z""#)).is_empty());
        assert!(fused_joins(&plan("matMul", "max", "", r#""Z""#)).is_empty());
    }
}
