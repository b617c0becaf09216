//! The cost model: `α · network_floats + β · flops` (paper 004 §4.3; v3 uses
//! network floats alone, `α = 1, β = 0`, and flops break ties; extraction then
//! breaks ties by network floats and by the number of operators that do work).
//!
//! **What "floats moved" counts.** Every float an exchange delivers, counted
//! once per delivery, whether or not the destination is the site it came from:
//!
//! - `shuffle(dims, x)` delivers every tuple of the erased operand `x` once:
//!   `tuples(x) · ∏b` floats. From a replicated operand each tuple is sent
//!   once (from one copy); a partial aggregate sends every partial copy.
//! - `broadcast(x)` delivers every tuple of `x` to each of the `s` sites:
//!   `s · tuples(x) · ∏b` floats.
//!
//! This is the paper's `Size(R)` and `s · Size(R)`. Because tensor relations
//! have no holes, and partial aggregates are counted exactly (by evaluating the
//! placement function over the key space), the figure is exact, and every
//! executor measures the same quantity.
//!
//! **Flops.** Local join: one kernel call per output tuple; local aggregation:
//! one kernel call per tuple folded into a group (input tuples − output
//! tuples); local map: one call per input tuple; filters are free. An operator
//! over a replicated operand runs on every site, so its flops count `s` times.

use crate::check::TypedPlan;
use crate::egraph::{ClassData, Ia, Param, TraEGraph};
use crate::kernel::KernelRef;
use crate::program::{IaOp, Operator, Plan};
use crate::types::{concat_params, PhysType, Placement};
use egg::Id;
use indexmap::IndexMap;
use serde::Serialize;

/// The cost of a plan or operator.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Cost {
    /// Floats delivered by shuffles and broadcasts.
    pub network_floats: u64,
    /// Floating-point operations of the kernels.
    pub flops: u64,
    /// `α · network_floats + β · flops`.
    pub total: f64,
    /// Operators that do work (exchanges, local joins, aggregations and
    /// maps): the last tie-break, so that of two plans equal in everything
    /// else the one with fewer passes over the data wins (a chain of maps
    /// fused into two runs rather than four). Not reported.
    #[serde(skip)]
    pub operators: u64,
}

/// The weights of the cost.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Weights {
    /// α.
    pub network: f64,
    /// β.
    pub compute: f64,
}

/// The sum of two costs (counts saturate).
impl std::ops::Add for Cost {
    type Output = Cost;
    fn add(self, o: Cost) -> Cost {
        Cost {
            network_floats: self.network_floats.saturating_add(o.network_floats),
            flops: self.flops.saturating_add(o.flops),
            total: self.total + o.total,
            operators: self.operators.saturating_add(o.operators),
        }
    }
}

impl Cost {
    /// A cost from its parts.
    pub fn new(network_floats: u64, flops: u64, w: Weights) -> Cost {
        Cost {
            network_floats,
            flops,
            total: w.network * network_floats as f64 + w.compute * flops as f64,
            operators: 0,
        }
    }
    /// Total order used by extraction: total, then flops, then network
    /// floats, then operators.
    pub fn key(&self) -> (f64, u64, u64, u64) {
        (self.total, self.flops, self.network_floats, self.operators)
    }
    /// Whether `self` is cheaper than `o`.
    pub fn lt(&self, o: &Cost) -> bool {
        let (a, b) = (self.key(), o.key());
        a.0 < b.0 || (a.0 == b.0 && (a.1, a.2, a.3) < (b.1, b.2, b.3))
    }
}

/// What the cost of one operator depends on.
pub enum OpShape<'a> {
    /// A shuffle of a relation of this many floats.
    Shuffle(u64),
    /// A broadcast of a relation of this many floats.
    Broadcast(u64),
    /// A local join: output, operands, kernel.
    Join(&'a PhysType, &'a PhysType, &'a PhysType, &'a KernelRef),
    /// A local aggregation: output, operand, kernel.
    Aggregate(&'a PhysType, &'a PhysType, &'a KernelRef),
    /// A local map: operand, kernel (none: keys only).
    Map(&'a PhysType, Option<&'a KernelRef>),
    /// Inputs, filters, erasure: free.
    Free,
}

/// `(network floats, flops)` of one operator on `sites` sites.
pub fn op_cost(op: OpShape<'_>, sites: usize) -> (u64, u64) {
    let s = sites as u64;
    let factor = |p: &PhysType| if p.placement == Placement::Replicated { s } else { 1 };
    match op {
        OpShape::Free => (0, 0),
        OpShape::Shuffle(floats) => (floats, 0),
        OpShape::Broadcast(floats) => (s.saturating_mul(floats), 0),
        OpShape::Join(out, a, b, k) => {
            let per = k.flops(&[&a.rel.array_bounds, &b.rel.array_bounds]);
            let both = a.placement == Placement::Replicated && b.placement == Placement::Replicated;
            (0, out.tuples.saturating_mul(per).saturating_mul(if both { s } else { 1 }))
        }
        OpShape::Aggregate(out, input, k) => {
            let per = if concat_params(k).is_some() {
                0
            } else {
                k.flops(&[&input.rel.array_bounds, &input.rel.array_bounds])
            };
            let folds = input.tuples.saturating_sub(out.tuples);
            (0, folds.saturating_mul(per).saturating_mul(factor(input)))
        }
        OpShape::Map(input, k) => {
            let per = k.map(|k| k.flops(&[&input.rel.array_bounds])).unwrap_or(0);
            (0, input.tuples.saturating_mul(per).saturating_mul(factor(input)))
        }
    }
}

fn kernel_of(eg: &TraEGraph, id: Id) -> Option<&KernelRef> {
    crate::egraph::nodes::leaf(eg, id).and_then(Param::as_kernel).ok()
}

/// The cost of one e-node, or `None` if it is not executable (a TRA operator).
pub fn node_cost(eg: &TraEGraph, class: Id, node: &Ia, w: Weights) -> Option<Cost> {
    let phys = |id: Id| eg[id].data.phys().expect("a physical operand");
    let logical = |id: Id| eg[id].data.logical().expect("a logical operand");
    let shape = match node {
        Ia::Param(_) | Ia::Input(_) | Ia::Erase(_) | Ia::LFilter(_) => OpShape::Free,
        Ia::Join(_)
        | Ia::Aggregate(_)
        | Ia::Rekey(_)
        | Ia::Filter(_)
        | Ia::Transform(_)
        | Ia::Tile(_)
        | Ia::Concat(_) => return None,
        Ia::Shuffle([_, x]) => OpShape::Shuffle(logical(*x).floats()),
        Ia::Broadcast(x) => OpShape::Broadcast(logical(*x).floats()),
        Ia::LJoin([_, _, k, a, b]) => OpShape::Join(phys(class), phys(*a), phys(*b), kernel_of(eg, *k)?),
        Ia::LAgg([_, k, x]) => OpShape::Aggregate(phys(class), phys(*x), kernel_of(eg, *k)?),
        Ia::LMap([_, k, x]) => OpShape::Map(phys(*x), kernel_of(eg, *k)),
    };
    let works = !matches!(shape, OpShape::Free);
    let (net, flops) = op_cost(shape, eg.analysis.sites);
    Some(Cost { operators: u64::from(works), ..Cost::new(net, flops, w) })
}

/// Per-operator figures of a checked plan, for reports and the web page.
#[derive(Debug, Clone, Serialize)]
pub struct NodeReport {
    /// The operator.
    pub op: &'static str,
    /// Output key frontier.
    pub key_bounds: Vec<u32>,
    /// Output block shape.
    pub array_bounds: Vec<usize>,
    /// Output tuples (partial copies counted).
    pub tuples: u64,
    /// Output placement, in words.
    pub placement: String,
    /// Floats this operator moves.
    pub network_floats: u64,
    /// Flops of this operator.
    pub flops: u64,
    /// Its weighted cost.
    pub total: f64,
}

/// The cost of every operator of a checked plan (same model as extraction).
pub fn plan_report(plan: &Plan, typed: &TypedPlan, sites: usize, w: Weights) -> IndexMap<String, NodeReport> {
    let mut out = IndexMap::new();
    for name in &typed.order {
        let op = &plan.nodes[name];
        let t = &typed.types[name];
        let ty = |n: &String| &typed.types[n];
        let shape = match op {
            IaOp::Shuffle { input, .. } => OpShape::Shuffle(ty(input).floats()),
            IaOp::Broadcast { input } => OpShape::Broadcast(ty(input).floats()),
            IaOp::LocalJoin { left, right, kernel, .. } => OpShape::Join(t, ty(left), ty(right), kernel),
            IaOp::LocalAggregate { input, kernel, .. } => OpShape::Aggregate(t, ty(input), kernel),
            IaOp::LocalMap { input, kernel, .. } => OpShape::Map(ty(input), kernel.as_ref()),
            IaOp::LocalFilter { .. } => OpShape::Free,
        };
        let (net, flops) = op_cost(shape, sites);
        let c = Cost::new(net, flops, w);
        out.insert(
            name.clone(),
            NodeReport {
                op: op.op_name(),
                key_bounds: t.rel.frontier.clone(),
                array_bounds: t.rel.array_bounds.clone(),
                tuples: t.tuples,
                placement: t.placement.to_string(),
                network_floats: net,
                flops,
                total: c.total,
            },
        );
    }
    out
}

/// Whether a class is a P class (used by extraction to skip leaves quickly).
pub fn is_phys(data: &ClassData) -> bool {
    matches!(data, ClassData::P(_))
}
