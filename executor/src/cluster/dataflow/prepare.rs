//! The plan, prepared: checked (operands and outputs exist, no node named
//! like an input, no aggregation of a relation that is both on sites and
//! replicated), in evaluation order, with its fused matmuls (see
//! [`crate::fusion`]) and the order to read their operands in.

use crate::fusion::fused_joins;
use crate::semantics::{bad, evaluation_order, InterpError};
use crate::threads::kernels::FastKernel;
use std::collections::{BTreeMap, HashMap};
use tra_optimizer::program::{topo_order, IaOp, Operator as _, PlacementDecl, Plan};

/// Where a node's tuples can be.
#[derive(Debug, Clone, Copy, PartialEq)]
enum TupleSites {
    /// Only on sites.
    OnSites,
    /// Only replicated.
    Replicated,
    /// Some on sites, some replicated (a join of the two kinds).
    Mixed,
}

/// A node of the plan as the cluster runtime runs it.
pub(super) struct PreparedNode {
    /// The node's name.
    pub(super) name: String,
    /// What it computes.
    pub(super) op: IaOp,
    /// For a fused aggregation: the join it computes.
    pub(super) fused: Option<String>,
    /// A join computed inside the aggregation that follows it.
    pub(super) skip: Option<String>,
    /// The node's kernel, compiled.
    pub(super) kernel: Option<FastKernel>,
    /// For a fused aggregation: its join's kernel, compiled.
    pub(super) join_kernel: Option<FastKernel>,
}

/// The plan, checked, in evaluation order, with its fusions decided.
pub(super) struct Prepared {
    /// The plan.
    pub(super) plan: Plan,
    /// Its nodes in evaluation order (a run's steps).
    pub(super) steps: Vec<PreparedNode>,
    /// For inputs that feed a fused matmul: the key dims in the order to read
    /// the blocks in (join dims fastest), so that whole groups arrive early.
    pub(super) read_order: HashMap<String, Vec<usize>>,
}

/// Check the plan and decide, once per process, how each node runs.
pub(super) fn prepare(plan: &Plan, fuse: bool) -> Result<Prepared, InterpError> {
    let order = evaluation_order(topo_order(&plan.nodes), plan.nodes.keys(), |n| plan.inputs.contains_key(n))?;
    for name in &order {
        for operand in plan.nodes[name].operands() {
            if !plan.inputs.contains_key(operand) && !plan.nodes.contains_key(operand) {
                return Err(InterpError::UnknownOperand { node: name.clone(), operand: operand.to_string() });
            }
        }
    }
    for o in &plan.outputs {
        if !plan.inputs.contains_key(o) && !plan.nodes.contains_key(o) {
            return Err(InterpError::UnknownOutput(o.clone()));
        }
    }
    // Where tuples can be: only on sites, only replicated, or both.
    let mut kinds: HashMap<&str, TupleSites> = HashMap::new();
    for (name, decl) in &plan.inputs {
        kinds.insert(
            name,
            if decl.placement == PlacementDecl::Replicated { TupleSites::Replicated } else { TupleSites::OnSites },
        );
    }
    for name in &order {
        let op = &plan.nodes[name];
        let k = |n: &String| kinds[n.as_str()];
        let kind = match op {
            IaOp::Broadcast { .. } => TupleSites::Replicated,
            IaOp::Shuffle { .. } => TupleSites::OnSites,
            IaOp::LocalJoin { left, right, .. } => match (k(left), k(right)) {
                (TupleSites::Replicated, TupleSites::Replicated) => TupleSites::Replicated,
                (TupleSites::Mixed, _) | (_, TupleSites::Mixed) => TupleSites::Mixed,
                _ => TupleSites::OnSites,
            },
            IaOp::LocalAggregate { input, .. } => {
                if k(input) == TupleSites::Mixed {
                    return Err(bad(
                        name,
                        "the cluster runtime cannot aggregate a relation that holds both site tuples and replicated tuples",
                    ));
                }
                k(input)
            }
            IaOp::LocalFilter { input, .. } | IaOp::LocalMap { input, .. } => k(input),
        };
        kinds.insert(name, kind);
    }
    let fusions = if fuse { fused_joins(plan) } else { BTreeMap::new() };
    let fused_into: HashMap<&str, &str> = fusions.iter().map(|(agg, join)| (join.as_str(), agg.as_str())).collect();
    let steps: Vec<PreparedNode> = order
        .iter()
        .map(|name| {
            let op = plan.nodes[name].clone();
            let kernel = match &op {
                IaOp::LocalJoin { kernel, .. } | IaOp::LocalAggregate { kernel, .. } => Some(FastKernel::new(kernel)),
                IaOp::LocalMap { kernel: Some(k), .. } => Some(FastKernel::new(k)),
                _ => None,
            };
            let fused = fusions.get(name).cloned();
            let join_kernel = fused.as_ref().map(|j| match &plan.nodes[j] {
                IaOp::LocalJoin { kernel, .. } => FastKernel::new(kernel),
                _ => unreachable!("a fused aggregation's operand is a join"),
            });
            let skip = fused_into.get(name.as_str()).map(|a| a.to_string());
            PreparedNode { name: name.clone(), op, fused, skip, kernel, join_kernel }
        })
        .collect();
    // Read the operands of fused matmuls with their join dims varying
    // fastest: a row of X and a column of Y complete early.
    let mut read_order: HashMap<String, Vec<usize>> = HashMap::new();
    for step in &steps {
        let Some(j) = &step.fused else { continue };
        let IaOp::LocalJoin { left, right, left_keys, right_keys, .. } = &plan.nodes[j] else { continue };
        for (operand, jdims) in [(left, left_keys), (right, right_keys)] {
            let source = match plan.nodes.get(operand) {
                None => operand,
                Some(IaOp::Shuffle { input, .. }) | Some(IaOp::Broadcast { input }) => input,
                Some(_) => continue,
            };
            let Some(decl) = plan.inputs.get(source) else { continue };
            let arity = decl.key_bounds.len();
            if jdims.iter().any(|&d| d >= arity) {
                continue;
            }
            let mut order: Vec<usize> = (0..arity).filter(|d| !jdims.contains(d)).collect();
            order.extend(jdims.iter().copied());
            read_order.entry(source.clone()).or_insert(order);
        }
    }
    Ok(Prepared { plan: plan.clone(), steps, read_order })
}
