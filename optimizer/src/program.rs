//! The program model: TRA programs (what front-ends send) and IA plans (what tra
//! answers), exactly as the API contract writes them, with JSON round-trip and a
//! readable s-expression form.
//!
//! A program is a DAG of named nodes over named inputs with one or more outputs.
//! Nodes are kept in the order the sender wrote them ([`IndexMap`]).

use crate::error::{ErrorCode, ProgramError, Result};
use crate::kernel::KernelRef;
use crate::keyexpr::{KeyFn, Predicate};
use crate::time::{CostModel, Profile};
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt::Write as _;

/// How an input relation is laid out over the sites, as the caller declares it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum PlacementDecl {
    /// Tuple with key `k` lives at site `h(k[dims])` (see [`crate::placement`]).
    Hash(Vec<usize>),
    /// Every tuple at every site.
    Replicated,
    /// Each tuple on some site, layout unknown: a plan may not rely on it.
    #[default]
    Any,
}

/// One input relation: its frontier (`key_bounds`), block shape and placement.
///
/// Bounds are read as signed integers so that a negative bound gets a clear
/// error naming the input rather than a JSON type error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputDecl {
    /// Per key dimension, the number of distinct values (max key + 1).
    pub key_bounds: Vec<i64>,
    /// The shape of every block.
    pub array_bounds: Vec<i64>,
    /// The declared placement; `any` when absent.
    #[serde(default, skip_serializing_if = "is_any")]
    pub placement: PlacementDecl,
}

fn is_any(p: &PlacementDecl) -> bool {
    *p == PlacementDecl::Any
}

/// The cluster the plan is for, and the weights of the cost `α·network + β·flops`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cluster {
    /// Number of sites (workers).
    #[serde(default = "default_sites")]
    pub sites: usize,
    /// α, the weight of a float moved over the network.
    #[serde(default = "one")]
    pub network_weight: f64,
    /// β, the weight of a floating-point operation.
    #[serde(default)]
    pub compute_weight: f64,
    /// Which figure the optimizer minimizes: `network` (α·network_floats +
    /// β·flops, the default) or `time` (predicted seconds under `profile`).
    #[serde(default, skip_serializing_if = "is_network")]
    pub cost_model: CostModel,
    /// The cluster's speeds, for predicted seconds (reported under either
    /// model); [`Profile::default`] when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<Profile>,
}

impl Cluster {
    /// The profile in use: the request's, or the defaults.
    pub fn profile(&self) -> Profile {
        self.profile.unwrap_or_default()
    }
}

fn is_network(m: &CostModel) -> bool {
    *m == CostModel::Network
}

fn default_sites() -> usize {
    4
}
fn one() -> f64 {
    1.0
}

impl Default for Cluster {
    fn default() -> Self {
        Cluster {
            sites: default_sites(),
            network_weight: 1.0,
            compute_weight: 0.0,
            cost_model: CostModel::Network,
            profile: None,
        }
    }
}

/// A TRA operator (paper 004 §2.1). Field names are the API's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum TraOp {
    /// Join on `left_keys[i] == right_keys[i]`; output key is the left key followed
    /// by the right key without its join dims; blocks combined by `kernel`.
    Join {
        /// Left operand.
        left: String,
        /// Right operand.
        right: String,
        /// Join dims of the left key.
        left_keys: Vec<usize>,
        /// Join dims of the right key, pairwise equal to `left_keys`.
        right_keys: Vec<usize>,
        /// Binary kernel applied to each matching pair.
        kernel: KernelRef,
    },
    /// Group by the `group_by` key dims (output key = those dims in order) and
    /// fold each group's blocks with a binary, associative, commutative kernel.
    Aggregate {
        /// Operand.
        input: String,
        /// Dims kept, in output order.
        group_by: Vec<usize>,
        /// Binary aggregation kernel.
        kernel: KernelRef,
    },
    /// Map every key through `key` (must stay unique).
    Rekey {
        /// Operand.
        input: String,
        /// Key expression, e.g. `[2*k0 + k1]`.
        key: KeyFn,
    },
    /// Keep the tuples whose key satisfies `predicate`.
    Filter {
        /// Operand.
        input: String,
        /// Predicate over key components, e.g. `k0 == k1`.
        predicate: Predicate,
    },
    /// Apply a unary kernel to every block.
    Transform {
        /// Operand.
        input: String,
        /// Unary kernel.
        kernel: KernelRef,
    },
    /// Cut every block along array dim `dim` into pieces of `size`; a new last key
    /// dim counts the pieces.
    Tile {
        /// Operand.
        input: String,
        /// Array dim to cut.
        dim: usize,
        /// Size of each piece along `dim`.
        size: usize,
    },
    /// Inverse of tile (the paper's stack): group by every key dim except
    /// `key_dim` and concatenate each group's blocks along `array_dim`, ordered
    /// by `key_dim`.
    Concat {
        /// Operand.
        input: String,
        /// Key dim that orders the pieces (removed from the key).
        key_dim: usize,
        /// Array dim along which pieces are joined.
        array_dim: usize,
    },
}

/// An IA operator (paper 004 §3). Field names are the API's.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum IaOp {
    /// Every tuple to every site.
    Broadcast {
        /// Operand.
        input: String,
    },
    /// Every tuple to site `h(key[dims])`.
    Shuffle {
        /// Operand.
        input: String,
        /// Partition dims (may be empty: everything to one site).
        dims: Vec<usize>,
    },
    /// Join of the tuples that are on the same site.
    LocalJoin {
        /// Left operand.
        left: String,
        /// Right operand.
        right: String,
        /// Join dims of the left key.
        left_keys: Vec<usize>,
        /// Join dims of the right key.
        right_keys: Vec<usize>,
        /// Binary kernel.
        kernel: KernelRef,
    },
    /// Aggregation per site and group.
    LocalAggregate {
        /// Operand.
        input: String,
        /// Dims kept.
        group_by: Vec<usize>,
        /// Binary aggregation kernel (or a concat kernel).
        kernel: KernelRef,
    },
    /// Filter on each site.
    LocalFilter {
        /// Operand.
        input: String,
        /// Predicate over the key.
        predicate: Predicate,
    },
    /// Map keys and blocks on each site; one tuple may give several (a key
    /// expression with a range component, a tiling kernel).
    LocalMap {
        /// Operand.
        input: String,
        /// Key expression; identity when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key: Option<KeyFn>,
        /// Unary kernel; identity when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kernel: Option<KernelRef>,
    },
}

/// A TRA program: the request of `/v1/optimize`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Program {
    /// Input relations by name.
    pub inputs: IndexMap<String, InputDecl>,
    /// Nodes by name.
    pub nodes: IndexMap<String, TraOp>,
    /// Names of the nodes (or inputs) whose values are wanted.
    pub outputs: Vec<String>,
    /// Cluster and cost weights; defaults when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<Cluster>,
    /// Names of each input's key dims, by input, that plan labels use in
    /// place of the paper's `i`, `j`, `k`: set by a front-end that knows
    /// them (einsum's index letters); not part of the JSON program.
    #[serde(skip)]
    pub dim_names: IndexMap<String, Vec<String>>,
}

/// An IA plan: the `plan` of the optimize answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Input relations by name, as in the request.
    pub inputs: IndexMap<String, InputDecl>,
    /// Nodes by name.
    pub nodes: IndexMap<String, IaOp>,
    /// Output names (the request's).
    pub outputs: Vec<String>,
}

/// The operator names of TRA, for error messages.
pub const TRA_OPS: &[&str] = &["join", "aggregate", "rekey", "filter", "transform", "tile", "concat"];
/// The operator names of IA, for error messages.
pub const IA_OPS: &[&str] = &["broadcast", "shuffle", "local_join", "local_aggregate", "local_filter", "local_map"];

/// Operators that name their operands: lets generic code walk any DAG.
pub trait Operator {
    /// The operands (names of inputs or nodes), in order.
    fn operands(&self) -> Vec<&str>;
    /// The `op` string.
    fn op_name(&self) -> &'static str;
}

impl Operator for TraOp {
    fn operands(&self) -> Vec<&str> {
        match self {
            TraOp::Join { left, right, .. } => vec![left, right],
            TraOp::Aggregate { input, .. }
            | TraOp::Rekey { input, .. }
            | TraOp::Filter { input, .. }
            | TraOp::Transform { input, .. }
            | TraOp::Tile { input, .. }
            | TraOp::Concat { input, .. } => vec![input],
        }
    }
    fn op_name(&self) -> &'static str {
        match self {
            TraOp::Join { .. } => "join",
            TraOp::Aggregate { .. } => "aggregate",
            TraOp::Rekey { .. } => "rekey",
            TraOp::Filter { .. } => "filter",
            TraOp::Transform { .. } => "transform",
            TraOp::Tile { .. } => "tile",
            TraOp::Concat { .. } => "concat",
        }
    }
}

impl Operator for IaOp {
    fn operands(&self) -> Vec<&str> {
        match self {
            IaOp::LocalJoin { left, right, .. } => vec![left, right],
            IaOp::Broadcast { input }
            | IaOp::Shuffle { input, .. }
            | IaOp::LocalAggregate { input, .. }
            | IaOp::LocalFilter { input, .. }
            | IaOp::LocalMap { input, .. } => vec![input],
        }
    }
    fn op_name(&self) -> &'static str {
        match self {
            IaOp::Broadcast { .. } => "broadcast",
            IaOp::Shuffle { .. } => "shuffle",
            IaOp::LocalJoin { .. } => "local_join",
            IaOp::LocalAggregate { .. } => "local_aggregate",
            IaOp::LocalFilter { .. } => "local_filter",
            IaOp::LocalMap { .. } => "local_map",
        }
    }
}

/// Parse the JSON text of a program node by node, so that an error names the
/// node (or input) at fault rather than a byte offset.
pub fn parse_nodes<Op: for<'de> Deserialize<'de>>(
    value: &serde_json::Value,
    ops: &[&str],
) -> Result<IndexMap<String, Op>> {
    let obj = value
        .as_object()
        .ok_or_else(|| ProgramError::new(ErrorCode::BadField, "nodes", "`nodes` must be an object of named nodes"))?;
    let mut out = IndexMap::new();
    for (name, v) in obj {
        let op = v.get("op").and_then(|o| o.as_str());
        match op {
            None => {
                return Err(ProgramError::new(
                    ErrorCode::BadField,
                    name.clone(),
                    format!("node {name}: missing `op` (one of {})", ops.join(", ")),
                ))
            }
            Some(o) if !ops.contains(&o) => {
                return Err(ProgramError::new(
                    ErrorCode::UnknownOp,
                    format!("{name}.op"),
                    format!("node {name}: unknown op `{o}`, expected one of {}", ops.join(", ")),
                ))
            }
            _ => {}
        }
        let node: Op = serde_json::from_value(v.clone()).map_err(|e| {
            // serde names the value, not the field, of a node that does not
            // parse: read the fields one by one for the one at fault.
            let (at, msg) = match field_at_fault(v) {
                Some((field, msg)) => (format!("{name}.{field}"), format!("{field}: {msg}")),
                None => (name.clone(), plain_serde(&e.to_string())),
            };
            let code = if msg.contains("expression") || msg.contains("predicate") {
                ErrorCode::BadExpression
            } else {
                ErrorCode::BadField
            };
            ProgramError::new(code, at, format!("node {name}: {msg}"))
        })?;
        out.insert(name.clone(), node);
    }
    Ok(out)
}

/// The first field of a node (an object) whose value does not parse as
/// that field's kind, with the reason.
fn field_at_fault(node: &serde_json::Value) -> Option<(String, String)> {
    fn check<T: for<'de> Deserialize<'de>>(v: &serde_json::Value) -> Option<String> {
        serde_json::from_value::<T>(v.clone()).err().map(|e| plain_serde(&e.to_string()))
    }
    node.as_object()?.iter().find_map(|(field, v)| {
        let why = match field.as_str() {
            "left" | "right" | "input" => check::<String>(v),
            "left_keys" | "right_keys" | "group_by" | "dims" => check::<Vec<usize>>(v),
            "dim" | "size" | "key_dim" | "array_dim" => check::<usize>(v),
            "kernel" if !v.is_null() => check::<KernelRef>(v),
            "key" if !v.is_null() => check::<KeyFn>(v),
            "predicate" => check::<Predicate>(v),
            _ => None,
        };
        why.map(|w| (field.clone(), w))
    })
}

/// serde's words for a value out of a Rust type's range, in the API's
/// (`expected usize` is `expected a whole number ≥ 0`).
fn plain_serde(message: &str) -> String {
    message
        .replace("expected usize", "expected a whole number ≥ 0")
        .replace("expected u64", "expected a whole number ≥ 0")
        .replace("expected u32", "expected a whole number ≥ 0 below 2³²")
        .replace("expected f64", "expected a number")
}

fn parse_inputs(value: &serde_json::Value) -> Result<IndexMap<String, InputDecl>> {
    let obj = value.as_object().ok_or_else(|| {
        ProgramError::new(ErrorCode::BadField, "inputs", "`inputs` must be an object of named inputs")
    })?;
    let mut out = IndexMap::new();
    for (name, v) in obj {
        check_bounds_fields(name, v)?;
        let decl: InputDecl = serde_json::from_value(v.clone())
            .map_err(|e| ProgramError::new(ErrorCode::BadField, name.clone(), format!("input {name}: {e}")))?;
        out.insert(name.clone(), decl);
    }
    Ok(out)
}

/// `key_bounds` and `array_bounds` of input `name` are lists of whole numbers:
/// an error names the element at fault (`X.array_bounds[1]`) rather than the
/// whole input, as a type error from serde would.
fn check_bounds_fields(name: &str, decl: &serde_json::Value) -> Result<()> {
    use serde_json::Value;
    for field in ["key_bounds", "array_bounds"] {
        let Some(v) = decl.get(field) else { continue };
        let Value::Array(items) = v else {
            return Err(ProgramError::new(
                ErrorCode::BadField,
                format!("{name}.{field}"),
                format!("input {name}: `{field}` must be a list of whole numbers, found {}", json_kind(v)),
            ));
        };
        for (i, x) in items.iter().enumerate() {
            if !x.is_i64() {
                let what = match x.as_f64() {
                    _ if x.is_u64() => format!("{x}, which is too large"),
                    // `50.0` or `1e12`: whole, but not written as an integer.
                    Some(f) if f.fract() == 0.0 && f.abs() < 1e18 => {
                        format!(
                            "{x}, written with a decimal point or an exponent: write it as the integer {}",
                            f as i64
                        )
                    }
                    _ => json_kind(x),
                };
                return Err(ProgramError::new(
                    ErrorCode::BadField,
                    format!("{name}.{field}[{i}]"),
                    format!("input {name}: {field}[{i}] must be a whole number, found {what}"),
                ));
            }
        }
    }
    Ok(())
}

/// What a JSON value is, for messages: `the string "a"`, `the number 2.5`.
fn json_kind(v: &serde_json::Value) -> String {
    use serde_json::Value;
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("the string {}", Value::String(s.clone())),
        Value::Array(_) => "a list".into(),
        Value::Object(_) => "an object".into(),
    }
}

/// A key written twice in one object of `text` (JSON keeps the last, so a
/// second node `A` would replace the first without a word), named.
fn refuse_duplicate_keys(text: &str) -> Result<()> {
    match crate::duplicate_keys::find(text.as_bytes()) {
        Some(d) => Err(ProgramError::new(ErrorCode::BadField, d.at, d.message)),
        None => Ok(()),
    }
}

fn top_field<'a>(obj: &'a serde_json::Map<String, serde_json::Value>, f: &str) -> Result<&'a serde_json::Value> {
    obj.get(f).ok_or_else(|| ProgramError::new(ErrorCode::BadField, f, format!("missing top-level field `{f}`")))
}

fn parse_outputs(value: &serde_json::Value) -> Result<Vec<String>> {
    let outputs: Vec<String> = serde_json::from_value(value.clone()).map_err(|e| {
        ProgramError::new(ErrorCode::BadField, "outputs", format!("`outputs` must be a list of names: {e}"))
    })?;
    // Answers are keyed by output name: a name listed twice would come back once.
    for (i, name) in outputs.iter().enumerate() {
        if outputs[..i].contains(name) {
            return Err(ProgramError::new(
                ErrorCode::BadField,
                format!("outputs[{i}]"),
                format!("output `{}` is listed twice in `outputs`", crate::error::shown(name)),
            ));
        }
    }
    Ok(outputs)
}

impl Program {
    /// Parse a program from JSON text; errors name the node or field at fault.
    /// This only reads the shape of the program: [`crate::check::check_program`]
    /// then checks that it makes sense.
    pub fn from_json(text: &str) -> Result<Program> {
        refuse_duplicate_keys(text)?;
        let value: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| ProgramError::new(ErrorCode::BadJson, "", format!("not valid JSON: {e}")))?;
        Program::from_value(&value)
    }

    /// Parse a program from a JSON value (see [`Program::from_json`]).
    pub fn from_value(value: &serde_json::Value) -> Result<Program> {
        Program::from_request(value, &[])
    }

    /// Parse a program that is part of a request with more top-level
    /// fields, `also` (the `data` of `/v1/execute`): any other field is
    /// refused, named (a misspelt `clsuter` or `dat` would otherwise be
    /// dropped without a word, and the answer be for another request).
    pub fn from_request(value: &serde_json::Value, also: &[&str]) -> Result<Program> {
        let obj = value
            .as_object()
            .ok_or_else(|| ProgramError::new(ErrorCode::BadJson, "", "a program must be a JSON object"))?;
        const FIELDS: [&str; 4] = ["inputs", "nodes", "outputs", "cluster"];
        if let Some(unknown) = obj.keys().find(|k| !FIELDS.contains(&k.as_str()) && !also.contains(&k.as_str())) {
            let known: Vec<String> = FIELDS.iter().chain(also).map(|f| format!("`{f}`")).collect();
            let near =
                FIELDS.iter().chain(also).find(|f| unknown.len() < 32 && crate::kernel::edit_distance(f, unknown) <= 2);
            let hint = near.map(|f| format!("; did you mean `{f}`?")).unwrap_or_default();
            return Err(ProgramError::new(
                ErrorCode::BadField,
                unknown.as_str(),
                format!(
                    "unknown top-level field `{}`{hint} (the fields are {})",
                    crate::error::shown(unknown),
                    known.join(", ")
                ),
            ));
        }
        let inputs = parse_inputs(top_field(obj, "inputs")?)?;
        let nodes = parse_nodes(top_field(obj, "nodes")?, TRA_OPS)?;
        let outputs = parse_outputs(top_field(obj, "outputs")?)?;
        let cluster = match obj.get("cluster") {
            None | Some(serde_json::Value::Null) => None,
            Some(c) => Some(serde_json::from_value(c.clone()).map_err(|e| cluster_error(c, e))?),
        };
        Ok(Program { inputs, nodes, outputs, cluster, dim_names: IndexMap::new() })
    }

    /// The cluster, with defaults filled in.
    pub fn cluster(&self) -> Cluster {
        self.cluster.unwrap_or_default()
    }

    /// The s-expression form (see [`sexpr`]).
    pub fn to_sexpr(&self) -> String {
        sexpr::render(&self.nodes, &self.outputs, sexpr::tra_head)
    }
}

/// Where a `cluster` that does not parse is wrong: the profile field at
/// fault when it is one (serde names the value, not the field, of a number
/// out of its type's range: `-1` for a count of threads), else `cluster`.
fn cluster_error(cluster: &serde_json::Value, e: serde_json::Error) -> ProgramError {
    let profile = cluster.get("profile").and_then(|p| field_alone_fails::<crate::time::Profile>(p, "cluster.profile"));
    let field = || field_alone_fails::<Cluster>(cluster, "cluster");
    let (at, why) = profile.or_else(field).unwrap_or_else(|| ("cluster".to_string(), plain_serde(&e.to_string())));
    ProgramError::new(ErrorCode::BadField, at.clone(), format!("{at}: {why}"))
}

/// The first field of `object` that does not parse as a `T` holding it alone
/// (the others defaulted), as `prefix.field`, with the reason. A nested
/// object is not a field's fault here (its own fields are read apart).
fn field_alone_fails<T: for<'de> Deserialize<'de>>(
    object: &serde_json::Value,
    prefix: &str,
) -> Option<(String, String)> {
    object.as_object()?.iter().filter(|(_, v)| !v.is_object()).find_map(|(field, value)| {
        let alone = serde_json::Value::Object([(field.clone(), value.clone())].into_iter().collect());
        let e = serde_json::from_value::<T>(alone).err()?;
        Some((format!("{prefix}.{field}"), plain_serde(&e.to_string())))
    })
}

impl Plan {
    /// Parse a plan from JSON text; errors name the node at fault.
    pub fn from_json(text: &str) -> Result<Plan> {
        refuse_duplicate_keys(text)?;
        let value: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| ProgramError::new(ErrorCode::BadJson, "", format!("not valid JSON: {e}")))?;
        let obj = value
            .as_object()
            .ok_or_else(|| ProgramError::new(ErrorCode::BadJson, "", "a plan must be a JSON object"))?;
        Ok(Plan {
            inputs: parse_inputs(top_field(obj, "inputs")?)?,
            nodes: parse_nodes(top_field(obj, "nodes")?, IA_OPS)?,
            outputs: parse_outputs(top_field(obj, "outputs")?)?,
        })
    }

    /// The s-expression form (see [`sexpr`]).
    pub fn to_sexpr(&self) -> String {
        sexpr::render(&self.nodes, &self.outputs, sexpr::ia_head)
    }
}

/// The number of operators on the longest path from an input to an output
/// (0 without operators), given the nodes in topological order.
pub fn depth<Op: Operator>(nodes: &IndexMap<String, Op>, order: &[String]) -> usize {
    let mut depth: HashMap<&str, usize> = HashMap::with_capacity(order.len());
    let mut deepest = 0;
    for name in order {
        let Some(op) = nodes.get(name) else { continue };
        let d = 1 + op.operands().iter().filter_map(|o| depth.get(o).copied()).max().unwrap_or(0);
        depth.insert(name, d);
        deepest = deepest.max(d);
    }
    deepest
}

/// Order the nodes so that every node comes after its operands, or report the
/// cycle. Operands that are not nodes (inputs, or unknown names) are ignored
/// here; checking reports unknown names.
pub fn topo_order<Op: Operator>(nodes: &IndexMap<String, Op>) -> Result<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Active,
        Done,
    }
    let mut mark = vec![Mark::New; nodes.len()];
    let mut order = Vec::with_capacity(nodes.len());
    // Iterative DFS, so that a very deep program cannot overflow the stack.
    for start in 0..nodes.len() {
        if mark[start] != Mark::New {
            continue;
        }
        let mut stack: Vec<(usize, usize)> = vec![(start, 0)];
        mark[start] = Mark::Active;
        while let Some(&mut (i, ref mut next)) = stack.last_mut() {
            let (_, op) = nodes.get_index(i).expect("index in range");
            let operands = op.operands();
            if *next < operands.len() {
                let child = operands[*next];
                *next += 1;
                if let Some(j) = nodes.get_index_of(child) {
                    match mark[j] {
                        Mark::New => {
                            mark[j] = Mark::Active;
                            stack.push((j, 0));
                        }
                        Mark::Active => {
                            let mut cycle: Vec<&str> = stack
                                .iter()
                                .skip_while(|(k, _)| *k != j)
                                .map(|(k, _)| nodes.get_index(*k).unwrap().0.as_str())
                                .collect();
                            cycle.push(child);
                            let name = nodes.get_index(i).unwrap().0;
                            return Err(ProgramError::new(
                                ErrorCode::Cycle,
                                name.clone(),
                                format!("node {name}: the nodes form a cycle: {}", cycle.join(" -> ")),
                            ));
                        }
                        Mark::Done => {}
                    }
                }
            } else {
                mark[i] = Mark::Done;
                order.push(nodes.get_index(i).unwrap().0.clone());
                stack.pop();
            }
        }
    }
    Ok(order)
}

/// The s-expression form of programs and plans: `(aggregate [0 2] matAdd (join
/// [1] [0] matMul X Y))`. Key expressions and predicates are quoted strings;
/// composed kernels are `(compose diag matAdd)`. A node used by several
/// consumers, or that is an output used elsewhere, is written once as
/// `(define NAME EXPR)` and referred to by name afterwards.
pub mod sexpr {
    use super::*;

    /// Head and parameters of a TRA node, e.g. `join [1] [0] matMul`.
    pub fn tra_head(op: &TraOp) -> String {
        match op {
            TraOp::Join { left_keys, right_keys, kernel, .. } => {
                format!("join {} {} {}", dims(left_keys), dims(right_keys), kernel.to_sexpr())
            }
            TraOp::Aggregate { group_by, kernel, .. } => format!("aggregate {} {}", dims(group_by), kernel.to_sexpr()),
            TraOp::Rekey { key, .. } => format!("rekey {:?}", key.to_string()),
            TraOp::Filter { predicate, .. } => format!("filter {:?}", predicate.to_string()),
            TraOp::Transform { kernel, .. } => format!("transform {}", kernel.to_sexpr()),
            TraOp::Tile { dim, size, .. } => format!("tile {dim} {size}"),
            TraOp::Concat { key_dim, array_dim, .. } => format!("concat {key_dim} {array_dim}"),
        }
    }

    /// Head and parameters of an IA node, e.g. `shuffle [0 2]`.
    pub fn ia_head(op: &IaOp) -> String {
        match op {
            IaOp::Broadcast { .. } => "broadcast".into(),
            IaOp::Shuffle { dims: d, .. } => format!("shuffle {}", dims(d)),
            IaOp::LocalJoin { left_keys, right_keys, kernel, .. } => {
                format!("local_join {} {} {}", dims(left_keys), dims(right_keys), kernel.to_sexpr())
            }
            IaOp::LocalAggregate { group_by, kernel, .. } => {
                format!("local_aggregate {} {}", dims(group_by), kernel.to_sexpr())
            }
            IaOp::LocalFilter { predicate, .. } => format!("local_filter {:?}", predicate.to_string()),
            IaOp::LocalMap { key, kernel, .. } => format!(
                "local_map {} {}",
                key.as_ref().map(|k| format!("{:?}", k.to_string())).unwrap_or_else(|| "id".into()),
                kernel.as_ref().map(|k| k.to_sexpr()).unwrap_or_else(|| "id".into())
            ),
        }
    }

    /// `[0 2]`.
    pub fn dims(d: &[usize]) -> String {
        let parts: Vec<String> = d.iter().map(|x| x.to_string()).collect();
        format!("[{}]", parts.join(" "))
    }

    /// Render a DAG: shared nodes as `(define ...)` lines, then each output.
    pub fn render<Op: Operator>(
        nodes: &IndexMap<String, Op>,
        outputs: &[String],
        head: impl Fn(&Op) -> String,
    ) -> String {
        let mut uses: IndexMap<&str, usize> = IndexMap::new();
        for op in nodes.values() {
            for o in op.operands() {
                *uses.entry(o).or_default() += 1;
            }
        }
        for o in outputs {
            *uses.entry(o.as_str()).or_default() += 1;
        }
        let shared = |n: &str| nodes.contains_key(n) && uses.get(n).copied().unwrap_or(0) > 1;
        let order = topo_order(nodes).unwrap_or_else(|_| nodes.keys().cloned().collect());
        let mut out = String::new();
        // Iterative rendering would be nicer for huge programs; programs deep
        // enough to matter are rejected by the checker's depth limit first.
        fn expr<Op: Operator>(
            n: &str,
            nodes: &IndexMap<String, Op>,
            head: &dyn Fn(&Op) -> String,
            shared: &dyn Fn(&str) -> bool,
            top: bool,
        ) -> String {
            match nodes.get(n) {
                Some(op) if top || !shared(n) => {
                    let mut s = format!("({}", head(op));
                    for c in op.operands() {
                        s.push(' ');
                        s.push_str(&expr(c, nodes, head, shared, false));
                    }
                    s.push(')');
                    s
                }
                _ => n.to_string(),
            }
        }
        for n in &order {
            if shared(n) {
                let _ = writeln!(out, "(define {n} {})", expr(n, nodes, &head, &shared, true));
            }
        }
        for o in outputs {
            if shared(o) && nodes.contains_key(o.as_str()) {
                if outputs.len() > 1 {
                    let _ = writeln!(out, "(output {o})");
                }
                continue;
            }
            let e = expr(o, nodes, &head, &shared, true);
            if outputs.len() > 1 {
                let _ = writeln!(out, "(output {o} {e})");
            } else {
                let _ = writeln!(out, "{e}");
            }
        }
        out.trim_end().to_string()
    }
}
