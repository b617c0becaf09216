//! Checking programs and plans: names resolve, no cycles, kernels exist, and
//! every node has a type. Each error names the node (and field) at fault.

use crate::error::{ErrorCode, ProgramError, Result};
use crate::program::{topo_order, IaOp, Operator, Plan, Program, TraOp};
use crate::types::{self, PhysType, RelType, TypeError};
use indexmap::IndexMap;

/// The most nodes a program or plan may have.
pub const MAX_NODES: usize = 10_000;

/// The longest name of an input or node, in bytes: names are echoed in
/// errors, reports and plans.
pub const MAX_NAME_BYTES: usize = 256;

/// A checked TRA program: evaluation order and the type of every input and node.
#[derive(Debug, Clone)]
pub struct TypedProgram {
    /// Node names, operands first.
    pub order: Vec<String>,
    /// Types of inputs and nodes by name.
    pub types: IndexMap<String, RelType>,
}

/// A checked IA plan: evaluation order and the physical type of every value.
#[derive(Debug, Clone)]
pub struct TypedPlan {
    /// Node names, operands first.
    pub order: Vec<String>,
    /// Physical types of inputs and nodes by name.
    pub types: IndexMap<String, PhysType>,
}

fn at(node: &str, op: &str, e: TypeError) -> ProgramError {
    let at = match e.field {
        Some(f) => format!("{node}.{f}"),
        None => node.to_string(),
    };
    ProgramError::new(e.code, at, format!("{op} {node}: {}", e.message))
}

fn operand_fields(op: &str) -> &'static [&'static str] {
    match op {
        "join" | "local_join" => &["left", "right"],
        _ => &["input"],
    }
}

/// Structural checks shared by programs and plans: sizes, names, outputs, cycles.
fn check_structure<Op: Operator>(
    inputs: &IndexMap<String, crate::program::InputDecl>,
    nodes: &IndexMap<String, Op>,
    outputs: &[String],
) -> Result<Vec<String>> {
    if nodes.len() > MAX_NODES {
        return Err(ProgramError::new(
            ErrorCode::LimitExceeded,
            "nodes",
            format!("the program has {} nodes; the limit is {MAX_NODES}", nodes.len()),
        ));
    }
    let names = inputs.keys().map(|n| ("inputs", "an input", n)).chain(nodes.keys().map(|n| ("nodes", "a node", n)));
    for (field, what, name) in names {
        // An empty name would be reported at `at: ""`, which means the whole request.
        if name.is_empty() {
            return Err(ProgramError::new(ErrorCode::BadField, field, format!("{what}'s name is empty; name it")));
        }
        if name.len() > MAX_NAME_BYTES {
            return Err(ProgramError::new(
                ErrorCode::BadField,
                field,
                format!(
                    "{what}'s name `{}` is {} bytes long; names are at most {MAX_NAME_BYTES} bytes",
                    crate::error::shown(name),
                    name.len()
                ),
            ));
        }
    }
    for name in nodes.keys() {
        if inputs.contains_key(name) {
            return Err(ProgramError::new(
                ErrorCode::BadField,
                name.clone(),
                format!("node {name}: the name is also an input's"),
            ));
        }
    }
    for (name, op) in nodes {
        for (field, operand) in operand_fields(op.op_name()).iter().zip(op.operands()) {
            if !inputs.contains_key(operand) && !nodes.contains_key(operand) {
                return Err(ProgramError::new(
                    ErrorCode::UnknownInput,
                    format!("{name}.{field}"),
                    format!(
                        "{} {name}: `{field}` names `{operand}`, which is neither an input nor a node",
                        op.op_name()
                    ),
                ));
            }
        }
    }
    if outputs.is_empty() {
        return Err(ProgramError::new(ErrorCode::BadField, "outputs", "`outputs` is empty: name at least one node"));
    }
    for o in outputs {
        if !inputs.contains_key(o) && !nodes.contains_key(o) {
            return Err(ProgramError::new(
                ErrorCode::UnknownOutput,
                "outputs",
                format!("output `{o}` is neither an input nor a node"),
            ));
        }
    }
    topo_order(nodes)
}

/// The largest `network_weight` or `compute_weight`: far beyond any sensible
/// ratio, and small enough that a plan's weighted cost stays finite.
pub const MAX_WEIGHT: f64 = 1e100;

/// Check a TRA program and infer the type of every node.
pub fn check_program(p: &Program) -> Result<TypedProgram> {
    let order = check_structure(&p.inputs, &p.nodes, &p.outputs)?;
    let cluster = p.cluster();
    if cluster.sites == 0 || cluster.sites > 4096 {
        return Err(ProgramError::new(
            ErrorCode::BadField,
            "cluster.sites",
            format!("cluster.sites is {}; it must be between 1 and 4096", cluster.sites),
        ));
    }
    for (f, w) in [("network_weight", cluster.network_weight), ("compute_weight", cluster.compute_weight)] {
        // Bounded so that every plan's cost stays a finite number (a weight
        // of 1e308 made them all infinite, reported as `null`).
        if !(0.0..=MAX_WEIGHT).contains(&w) {
            return Err(ProgramError::new(
                ErrorCode::BadField,
                format!("cluster.{f}"),
                format!("cluster.{f} is {w:?}; it must be a number between 0 and {MAX_WEIGHT:e}"),
            ));
        }
    }
    if let Err((f, message)) = cluster.profile().check() {
        return Err(ProgramError::new(ErrorCode::BadField, format!("cluster.profile.{f}"), message));
    }
    let mut types: IndexMap<String, RelType> = IndexMap::new();
    for (name, decl) in &p.inputs {
        let t = types::input(decl).map_err(|e| at(name, "input", e))?;
        types.insert(name.clone(), t);
    }
    for name in &order {
        let op = &p.nodes[name];
        let t = infer_tra(op, &types).map_err(|e| at(name, op.op_name(), e))?;
        types.insert(name.clone(), t);
    }
    Ok(TypedProgram { order, types })
}

/// The type of one TRA node given its operands' types.
pub fn infer_tra(op: &TraOp, types: &IndexMap<String, RelType>) -> Result<RelType, TypeError> {
    match op {
        TraOp::Join { left, right, left_keys, right_keys, kernel } => {
            types::join(&types[left], &types[right], left_keys, right_keys, kernel)
        }
        TraOp::Aggregate { input, group_by, kernel } => types::aggregate(&types[input], group_by, kernel),
        TraOp::Rekey { input, key } => types::rekey(&types[input], key),
        TraOp::Filter { input, predicate } => types::filter(&types[input], predicate),
        TraOp::Transform { input, kernel } => types::transform(&types[input], kernel),
        TraOp::Tile { input, dim, size } => types::tile(&types[input], *dim, *size),
        TraOp::Concat { input, key_dim, array_dim } => types::concat(&types[input], *key_dim, *array_dim),
    }
}

/// Check an IA plan for `sites` sites and infer every node's physical type.
pub fn check_plan(p: &Plan, sites: usize) -> Result<TypedPlan> {
    let order = check_structure(&p.inputs, &p.nodes, &p.outputs)?;
    if sites == 0 {
        return Err(ProgramError::new(ErrorCode::BadField, "sites", "the number of sites must be at least 1"));
    }
    let mut types: IndexMap<String, PhysType> = IndexMap::new();
    for (name, decl) in &p.inputs {
        let t = types::input(decl).map_err(|e| at(name, "input", e))?;
        types.insert(name.clone(), PhysType::complete(t, types::input_placement(decl, sites)));
    }
    for name in &order {
        let op = &p.nodes[name];
        let t = infer_ia(op, &types, sites).map_err(|e| at(name, op.op_name(), e))?;
        types.insert(name.clone(), t);
    }
    Ok(TypedPlan { order, types })
}

/// The physical type of one IA node given its operands' types.
pub fn infer_ia(op: &IaOp, types: &IndexMap<String, PhysType>, sites: usize) -> Result<PhysType, TypeError> {
    match op {
        IaOp::Broadcast { input } => Ok(types::broadcast(&types[input])),
        IaOp::Shuffle { input, dims } => types::shuffle(&types[input], dims, sites),
        IaOp::LocalJoin { left, right, left_keys, right_keys, kernel } => {
            types::local_join(&types[left], &types[right], left_keys, right_keys, kernel, sites)
        }
        IaOp::LocalAggregate { input, group_by, kernel } => {
            types::local_aggregate(&types[input], group_by, kernel, sites)
        }
        IaOp::LocalFilter { input, predicate } => types::local_filter(&types[input], predicate),
        IaOp::LocalMap { input, key, kernel } => types::local_map_phys(&types[input], key.as_ref(), kernel.as_ref()),
    }
}
