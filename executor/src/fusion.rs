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

use crate::threads::kernels::MatMulKind;
use crate::threads::local::is_mat_add;
use std::collections::{BTreeMap, HashMap};
use tra_optimizer::program::{IaOp, Operator as _, Plan};

/// The joins that run fused into the aggregation that follows them: for each
/// such aggregation, by name, the name of its join.
pub(crate) fn fused_joins(plan: &Plan) -> BTreeMap<String, String> {
    let mut consumers: HashMap<&str, usize> = HashMap::new();
    for op in plan.nodes.values() {
        for operand in op.operands() {
            *consumers.entry(operand).or_default() += 1;
        }
    }
    let mut fused = BTreeMap::new();
    for (name, op) in &plan.nodes {
        let IaOp::LocalAggregate { input, kernel, .. } = op else { continue };
        let Some(IaOp::LocalJoin { kernel: join_kernel, .. }) = plan.nodes.get(input) else { continue };
        let fusable = is_mat_add(kernel)
            && MatMulKind::of(join_kernel).is_some()
            && consumers.get(input.as_str()) == Some(&1)
            && !plan.outputs.iter().any(|o| o == input);
        if fusable {
            fused.insert(name.clone(), input.clone());
        }
    }
    fused
}
