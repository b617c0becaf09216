//! The cost model: `α · network_floats + β · flops` (paper 004 §4.3; v3 uses
//! network floats alone, `α = 1, β = 0`, and flops break ties).
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

use crate::egraph::{ClassData, Ia, Param, TraEGraph};
use crate::types::{concat_params, Placement};
use egg::Id;
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
}

/// The weights of the cost.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Weights {
    /// α.
    pub network: f64,
    /// β.
    pub compute: f64,
}

impl Cost {
    /// A cost from its parts.
    pub fn new(network_floats: u64, flops: u64, w: Weights) -> Cost {
        Cost { network_floats, flops, total: w.network * network_floats as f64 + w.compute * flops as f64 }
    }
    /// The sum of two costs.
    pub fn add(self, o: Cost) -> Cost {
        Cost {
            network_floats: self.network_floats.saturating_add(o.network_floats),
            flops: self.flops.saturating_add(o.flops),
            total: self.total + o.total,
        }
    }
    /// Total order used by extraction: total, then flops, then network floats.
    pub fn key(&self) -> (f64, u64, u64) {
        (self.total, self.flops, self.network_floats)
    }
    /// Whether `self` is cheaper than `o`.
    pub fn lt(&self, o: &Cost) -> bool {
        let (a, b) = (self.key(), o.key());
        a.0 < b.0 || (a.0 == b.0 && (a.1, a.2) < (b.1, b.2))
    }
}

fn kernel_of(eg: &TraEGraph, id: Id) -> Option<&crate::kernel::KernelRef> {
    match eg[id].data.param() {
        Some(Param::Kernel(k)) => Some(k),
        _ => None,
    }
}

/// The cost of one e-node, or `None` if it is not executable (a TRA operator).
pub fn node_cost(eg: &TraEGraph, class: Id, node: &Ia, w: Weights) -> Option<Cost> {
    let s = eg.analysis.sites as u64;
    let phys = |id: Id| eg[id].data.phys().expect("a physical operand");
    let replicated_factor = |id: Id| if phys(id).placement == Placement::Replicated { s } else { 1 };
    let (net, flops) = match node {
        Ia::Param(_) | Ia::Input(_) | Ia::Erase(_) => (0, 0),
        Ia::Join(_) | Ia::Aggregate(_) | Ia::Rekey(_) | Ia::Filter(_) | Ia::Transform(_) | Ia::Tile(_) | Ia::Concat(_) => {
            return None
        }
        Ia::Shuffle([_, x]) => (eg[*x].data.logical().expect("logical operand").floats(), 0),
        Ia::Broadcast(x) => (s.saturating_mul(eg[*x].data.logical().expect("logical operand").floats()), 0),
        Ia::LJoin([_, _, k, a, b]) => {
            let out = phys(class);
            let (pa, pb) = (phys(*a), phys(*b));
            let per = kernel_of(eg, *k).map(|k| k.flops(&[&pa.rel.array_bounds, &pb.rel.array_bounds])).unwrap_or(0);
            let both_replicated = pa.placement == Placement::Replicated && pb.placement == Placement::Replicated;
            let factor = if both_replicated { s } else { 1 };
            (0, out.tuples.saturating_mul(per).saturating_mul(factor))
        }
        Ia::LAgg([_, k, x]) => {
            let out = phys(class);
            let input = phys(*x);
            let kernel = kernel_of(eg, *k);
            let per = match kernel {
                Some(k) if concat_params(k).is_none() => k.flops(&[&input.rel.array_bounds, &input.rel.array_bounds]),
                _ => 0,
            };
            let folds = input.tuples.saturating_sub(out.tuples);
            (0, folds.saturating_mul(per).saturating_mul(replicated_factor(*x)))
        }
        Ia::LFilter(_) => (0, 0),
        Ia::LMap([_, k, x]) => {
            let input = phys(*x);
            let per = kernel_of(eg, *k).map(|k| k.flops(&[&input.rel.array_bounds])).unwrap_or(0);
            (0, input.tuples.saturating_mul(per).saturating_mul(replicated_factor(*x)))
        }
    };
    Some(Cost::new(net, flops, w))
}

/// Whether a class is a P class (used by extraction to skip leaves quickly).
pub fn is_phys(data: &ClassData) -> bool {
    matches!(data, ClassData::P(_))
}
