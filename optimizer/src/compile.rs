//! TRA → IA compilation by paper 004's Table 1: the plan the optimizer starts
//! from. Every TRA node becomes one or a few IA nodes; the last of them keeps
//! the TRA node's name, so the plan's outputs are the program's.
//!
//! | TRA | IA |
//! |---|---|
//! | `aggregate(g, k, R)` | `local_aggregate(g, k, shuffle(g, R))` |
//! | `join(jl, jr, k, R, S)` | `local_join(jl, jr, k, broadcast(R), S)` |
//! | `rekey(f, R)` | `local_map(f, id, R)` |
//! | `filter(p, R)` | `local_filter(p, R)` |
//! | `transform(k, R)` | `local_map(id, k, R)` |
//! | `tile(d, s, R)` | `local_map([k0…, 0..n], tile(d,s), R)` |
//! | `concat(kd, ad, R)` | `local_aggregate(g, concat(kd,ad), shuffle(g, R))`, `g` = every key dim but `kd` |
//!
//! The paper's Table 1 shuffles a stack (concat) on `keyDim`; that scatters
//! each group over the sites. The sound form shuffles on the group dims `g`.
//! An aggregation to a single tuple (`g` empty) shuffles on no dims: every
//! tuple to one site.

use crate::check::TypedProgram;
use crate::program::{IaOp, Plan, Program, TraOp};
use crate::types;
use indexmap::IndexMap;

/// Compile a checked program to its Table-1 IA plan.
pub fn compile(p: &Program, typed: &TypedProgram) -> Plan {
    let mut nodes: IndexMap<String, IaOp> = IndexMap::new();
    let taken = |n: &str, nodes: &IndexMap<String, IaOp>| {
        nodes.contains_key(n) || p.nodes.contains_key(n) || p.inputs.contains_key(n)
    };
    let fresh = |base: String, nodes: &IndexMap<String, IaOp>| {
        if !taken(&base, nodes) {
            return base;
        }
        (2..).map(|i| format!("{base}{i}")).find(|n| !taken(n, nodes)).unwrap()
    };
    for name in &typed.order {
        let op = match &p.nodes[name] {
            TraOp::Aggregate { input, group_by, kernel } => {
                let s = fresh(format!("{name}_shuffle"), &nodes);
                nodes.insert(s.clone(), IaOp::Shuffle { input: input.clone(), dims: group_by.clone() });
                IaOp::LocalAggregate { input: s, group_by: group_by.clone(), kernel: kernel.clone() }
            }
            TraOp::Join { left, right, left_keys, right_keys, kernel } => {
                let b = fresh(format!("{name}_broadcast"), &nodes);
                nodes.insert(b.clone(), IaOp::Broadcast { input: left.clone() });
                IaOp::LocalJoin {
                    left: b,
                    right: right.clone(),
                    left_keys: left_keys.clone(),
                    right_keys: right_keys.clone(),
                    kernel: kernel.clone(),
                }
            }
            TraOp::Rekey { input, key } => {
                IaOp::LocalMap { input: input.clone(), key: Some(key.clone()), kernel: None }
            }
            TraOp::Filter { input, predicate } => {
                IaOp::LocalFilter { input: input.clone(), predicate: predicate.clone() }
            }
            TraOp::Transform { input, kernel } => {
                IaOp::LocalMap { input: input.clone(), key: None, kernel: Some(kernel.clone()) }
            }
            TraOp::Tile { input, dim, size } => {
                let (key, kernel) =
                    types::tile_as_map(&typed.types[input], *dim, *size).expect("checked programs have valid tiles");
                IaOp::LocalMap { input: input.clone(), key: Some(key), kernel: Some(kernel) }
            }
            TraOp::Concat { input, key_dim, array_dim } => {
                let (group, kernel) = types::concat_as_aggregate(&typed.types[input], *key_dim, *array_dim);
                let s = fresh(format!("{name}_shuffle"), &nodes);
                nodes.insert(s.clone(), IaOp::Shuffle { input: input.clone(), dims: group.clone() });
                IaOp::LocalAggregate { input: s, group_by: group, kernel }
            }
        };
        nodes.insert(name.clone(), op);
    }
    Plan { inputs: p.inputs.clone(), nodes, outputs: p.outputs.clone() }
}
