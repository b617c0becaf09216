//! The IA e-graph: two sorts in one egg language.
//!
//! Two IA expressions are "equivalent" when their outputs agree after
//! projecting away the site. That relation is not a congruence for local
//! operators (a local aggregation over a relation that is not partitioned by
//! its group keys gives partial aggregates), so one e-class must never hold
//! both `R` and `shuffle(R)`. Instead:
//!
//! - **P (physical)** classes: equality is exact, sites included. Inputs and
//!   the local operators live here, and the operands of local operators are P
//!   classes. Each carries the frontier, block shape and **placement** as its
//!   analysis; they are class invariants and [`merge`](egg::Analysis::merge)
//!   asserts that they agree, so an unsound rule fails loudly at once.
//! - **L (logical)** classes: equality up to site. `(erase P)` is an L node;
//!   `(shuffle dims L)` and `(broadcast L)` are P nodes whose value depends only
//!   on the erased operand; the TRA operators are L nodes.
//!
//! Every operator is then a function of its operands' values in their own
//! sorts, and congruence is sound.
//!
//! Parameters (dim lists, key expressions, predicates, kernels, input names)
//! are leaf nodes ([`Param`]), so patterns can bind and share them.

use crate::error::ErrorCode;
use crate::kernel::KernelRef;
use crate::keyexpr::{KeyFn, Predicate};
use crate::program::{IaOp, InputDecl, Plan, Program};
use crate::types::{self, PhysType, Placement, RelType, TypeError};
use egg::{Analysis, DidMerge, EGraph, Id, Language, RecExpr};
use indexmap::IndexMap;
use std::any::Any;
use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// A parameter leaf: written `[0,2]`, `key:[k0,k1]`, `pred:k0==k1`,
/// `kernel:matMul`, `id` (identity key map or kernel) or an input name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Param {
    /// A list of dims.
    Dims(Vec<usize>),
    /// A key expression.
    Key(KeyFn),
    /// A predicate.
    Pred(Predicate),
    /// A kernel.
    Kernel(KernelRef),
    /// The identity (key map or kernel of a local map).
    Id,
    /// An input's name.
    Name(String),
}

impl fmt::Display for Param {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Param::Dims(d) => {
                let parts: Vec<String> = d.iter().map(|x| x.to_string()).collect();
                write!(f, "[{}]", parts.join(","))
            }
            Param::Key(k) => write!(f, "key:{}", k.to_string().replace(' ', "")),
            Param::Pred(p) => write!(f, "pred:{}", p.to_string().replace(' ', "")),
            Param::Kernel(k) => write!(f, "kernel:{k}"),
            Param::Id => write!(f, "id"),
            Param::Name(n) => write!(f, "{n}"),
        }
    }
}

impl FromStr for Param {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(rest) = s.strip_prefix('[') {
            let inner = rest.strip_suffix(']').ok_or_else(|| format!("bad dims `{s}`"))?;
            if inner.trim().is_empty() {
                return Ok(Param::Dims(vec![]));
            }
            let dims: Result<Vec<usize>, _> = inner.split(',').map(|x| x.trim().parse::<usize>()).collect();
            return dims.map(Param::Dims).map_err(|_| format!("bad dims `{s}`"));
        }
        if let Some(k) = s.strip_prefix("key:") {
            return KeyFn::parse(k).map(Param::Key).map_err(|e| e.to_string());
        }
        if let Some(p) = s.strip_prefix("pred:") {
            return Predicate::parse(p).map(Param::Pred).map_err(|e| e.to_string());
        }
        if let Some(k) = s.strip_prefix("kernel:") {
            return KernelRef::parse(k).map(Param::Kernel).map_err(|e| e.to_string());
        }
        if s == "id" {
            return Ok(Param::Id);
        }
        Ok(Param::Name(s.to_string()))
    }
}

#[allow(missing_docs)]
mod lang {
    use super::Param;
    use egg::{define_language, Id};
    define_language! {
        /// IA and TRA operators over two sorts (see the module doc).
        pub enum Ia {
            // L sort: TRA operators.
            "join" = Join([Id; 5]),
            "aggregate" = Aggregate([Id; 3]),
            "rekey" = Rekey([Id; 2]),
            "filter" = Filter([Id; 2]),
            "transform" = Transform([Id; 2]),
            "tile" = Tile([Id; 2]),
            "concat" = Concat([Id; 2]),
            // P -> L.
            "erase" = Erase(Id),
            // P sort.
            "input" = Input(Id),
            "shuffle" = Shuffle([Id; 2]),
            "broadcast" = Broadcast(Id),
            "ljoin" = LJoin([Id; 5]),
            "lagg" = LAgg([Id; 3]),
            "lfilter" = LFilter([Id; 2]),
            "lmap" = LMap([Id; 3]),
            Param(Param),
        }
    }
}
pub use lang::Ia;

pub mod nodes;
pub use nodes::{LeafError, NodeError};

/// The type of an L class: a relation up to site.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LogicalType {
    /// Frontier, block shape, key set (for a partial aggregate: its distinct keys).
    pub rel: RelType,
    /// False for an erased partial aggregate (a bag with duplicate keys).
    pub complete: bool,
    /// Exact tuple count (every partial copy counted).
    pub tuples: u64,
}

impl LogicalType {
    fn of(p: &PhysType) -> Self {
        LogicalType { rel: p.rel.clone(), complete: p.complete, tuples: p.tuples }
    }
    fn complete(rel: RelType) -> Self {
        let tuples = rel.tuples();
        LogicalType { rel, complete: true, tuples }
    }
    /// This relation as a physical one of unknown placement.
    pub fn as_phys(&self) -> PhysType {
        PhysType { rel: self.rel.clone(), placement: Placement::Any, complete: self.complete, tuples: self.tuples }
    }
    /// Floats in the relation: what a shuffle of it moves.
    pub fn floats(&self) -> u64 {
        self.tuples.saturating_mul(self.rel.block_floats())
    }
}

/// The analysis value of a class.
#[derive(Debug, Clone, PartialEq)]
pub enum ClassData {
    /// A parameter leaf.
    Param(Param),
    /// A physical relation.
    P(PhysType),
    /// A relation up to site.
    L(LogicalType),
}

impl ClassData {
    /// The physical type, for a P class.
    pub fn phys(&self) -> Option<&PhysType> {
        match self {
            ClassData::P(p) => Some(p),
            _ => None,
        }
    }
    /// The logical type, for an L class.
    pub fn logical(&self) -> Option<&LogicalType> {
        match self {
            ClassData::L(l) => Some(l),
            _ => None,
        }
    }
    /// The parameter, for a leaf class.
    pub fn param(&self) -> Option<&Param> {
        match self {
            ClassData::Param(p) => Some(p),
            _ => None,
        }
    }
}

thread_local! {
    static CURRENT_RULE: RefCell<&'static str> = const { RefCell::new("program") };
}

/// Name the rule whose application is adding nodes now (for error reports and
/// for `rules_applied`); returns the previous name.
pub fn set_current_rule(name: &'static str) -> &'static str {
    CURRENT_RULE.with(|c| std::mem::replace(&mut *c.borrow_mut(), name))
}

/// The rule whose application is adding nodes now.
pub fn current_rule() -> &'static str {
    CURRENT_RULE.with(|c| *c.borrow())
}

thread_local! {
    static CHANGED_THIS_ITERATION: RefCell<Vec<&'static str>> = const { RefCell::new(Vec::new()) };
    static MERGE_FAILURE: RefCell<Option<MergeFailure>> = const { RefCell::new(None) };
}

/// Note that `rule` changed the graph in the current iteration (the rules
/// blamed for a failed merge found while the graph is rebuilt, when no rule
/// is applying).
pub fn note_rule_changed_graph(rule: &'static str) {
    CHANGED_THIS_ITERATION.with(|c| {
        let mut c = c.borrow_mut();
        if !c.contains(&rule) {
            c.push(rule);
        }
    });
}

/// A rule's match: the rule's egg name, the matched class and the classes
/// its pattern's variables are bound to (in the order of the pattern's
/// variables), each canonical when the match was applied. A union earlier
/// in the same iteration can make two matches egg found one; the appliers
/// then build the second's right-hand side only once.
pub type MatchKey = (egg::Symbol, Id, smallvec::SmallVec<[Id; 8]>);

/// Forget the rules noted by [`note_rule_changed_graph`] (at the start of
/// each iteration).
pub fn start_iteration() {
    CHANGED_THIS_ITERATION.with(|c| c.borrow_mut().clear());
}

/// A merge the analysis refused: two classes whose types or placements
/// differ (an unsound rule). Recorded just before the analysis panics, while
/// the graph is still consistent, so that the caller that catches the panic
/// can say which rule and which part of the program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeFailure {
    /// The rule that was applying; when the merge came from rebuilding the
    /// graph (congruence), every rule that changed the graph in that
    /// iteration.
    pub rules: Vec<&'static str>,
    /// True when the merge came from rebuilding the graph (`rules` are then
    /// the suspects, not the rule that was applying).
    pub while_rebuilding: bool,
    /// The program nodes (inputs or nodes, by name) nearest above the two
    /// classes.
    pub at: Vec<String>,
    /// What differed.
    pub detail: String,
}

/// The merge failure recorded on this thread since the last call, if any.
pub fn take_merge_failure() -> Option<MergeFailure> {
    MERGE_FAILURE.with(|f| f.borrow_mut().take())
}

/// Why merging two classes with these analysis values would make the
/// analysis's [`merge`](egg::Analysis::merge) panic, if it would.
pub fn conflict(a: &ClassData, b: &ClassData) -> Option<String> {
    match (a, b) {
        (ClassData::Param(x), ClassData::Param(y)) => (x != y).then(|| format!("parameters {x} and {y}")),
        (ClassData::L(x), ClassData::L(y)) => (x != y).then(|| format!("logical types {x:?} and {y:?}")),
        (ClassData::P(x), ClassData::P(y)) => {
            if x.rel != y.rel {
                return Some(format!("relations {:?} and {:?}", x.rel, y.rel));
            }
            if (x.complete, x.tuples) != (y.complete, y.tuples) {
                return Some(format!(
                    "completeness ({}, {} tuples) and ({}, {} tuples)",
                    x.complete, x.tuples, y.complete, y.tuples
                ));
            }
            match (&x.placement, &y.placement) {
                (p, q) if p == q => None,
                (_, Placement::Any) | (Placement::Any, _) => None,
                (p, q) => Some(format!("placements {p} and {q}")),
            }
        }
        (x, y) => Some(format!("sorts of {x:?} and {y:?}")),
    }
}

/// The program nodes nearest above `classes` (breadth first through parent
/// e-nodes), by name; several at the same distance are all given.
fn program_nodes_above(eg: &TraEGraph, classes: &[Id]) -> Vec<String> {
    let named: HashMap<Id, Vec<&str>> = eg.analysis.program_nodes.iter().fold(HashMap::new(), |mut m, (name, id)| {
        m.entry(eg.find(*id)).or_default().push(name.as_str());
        m
    });
    let mut seen: std::collections::HashSet<Id> = classes.iter().map(|c| eg.find(*c)).collect();
    let mut frontier: Vec<Id> = seen.iter().copied().collect();
    // A bound on the walk: graphs of a million nodes are not walked whole.
    let mut budget = 100_000usize;
    while !frontier.is_empty() && budget > 0 {
        let mut found: Vec<String> =
            frontier.iter().filter_map(|c| named.get(c)).flatten().map(|n| n.to_string()).collect();
        if !found.is_empty() {
            found.sort();
            found.dedup();
            return found;
        }
        let mut next = Vec::new();
        for c in frontier {
            for p in eg[c].parents() {
                budget = budget.saturating_sub(1);
                let p = eg.find(p);
                if seen.insert(p) {
                    next.push(p);
                }
            }
        }
        frontier = next;
    }
    Vec::new()
}

/// A value computed by a [`ValueOracle`] for one class.
pub type OracleValue = Arc<dyn Any + Send + Sync>;

/// Evaluates every class on one small fixed input while the e-graph grows, so
/// that a rule that merges two classes whose values differ is caught at once,
/// naming the rule (Ruler's "cvec" idea). Used by the test suites; the
/// optimizer runs without one.
pub trait ValueOracle: Send + Sync {
    /// The value of one e-node given its children's values (in order), or an
    /// error (which is itself a finding: a node a rule built cannot run).
    fn eval(&self, eg: &TraEGraph, node: &Ia, children: &[OracleValue]) -> Result<OracleValue, String>;
    /// Whether two values of one class agree (`physical`: compare sites too).
    fn same(&self, a: &OracleValue, b: &OracleValue, physical: bool) -> Result<(), String>;
}

/// The analysis: types every class, and remembers which rule first built
/// each node.
#[derive(Clone)]
pub struct TraAnalysis {
    /// Number of sites.
    pub sites: usize,
    /// Input declarations by name.
    pub inputs: IndexMap<String, InputDecl>,
    /// For each node as first added (children as they were then): the rule that added it.
    pub origins: IndexMap<Ia, &'static str, rustc_hash::FxBuildHasher>,
    /// An optional value oracle (tests).
    pub oracle: Option<Arc<dyn ValueOracle>>,
    /// The oracle's value of each class.
    pub values: HashMap<Id, OracleValue>,
    /// Whether `merge` asserts that the two classes' types and placements
    /// agree (default true). Mutation tests turn it off to show that the
    /// execution-based soundness harness catches an unsound rule on its own.
    pub check_merges: bool,
    /// Rule applications that built something, by [`MatchKey`]: egg
    /// searches every rule again each iteration and finds the same matches
    /// again; an applier that already built its right-hand side for the same
    /// classes would only build the same nodes again, so it skips them.
    pub applied: rustc_hash::FxHashSet<MatchKey>,
    /// Matches a rule turned down on the analysis data alone (a condition
    /// that does not hold, a right-hand side that does not type), by the
    /// same key: while no class's data changes, they would be turned down
    /// again, so the applier skips them. Valid for [`TraAnalysis::data_epoch`]
    /// `rejected_epoch` only.
    pub rejected: rustc_hash::FxHashSet<MatchKey>,
    /// Every class egg changed (new, merged into, or with new analysis
    /// data), in order: where the incremental search looks for new matches
    /// ([`crate::schedule`]).
    pub touched: Vec<Id>,
    /// The classes whose analysis data changed (a placement learnt), in
    /// order: a match turned down on the old data may hold now
    /// ([`crate::delta`]).
    pub data_changed: Vec<Id>,
    /// The [`TraAnalysis::data_epoch`] the last `modify` saw: `merge` counts
    /// a change, and egg calls `modify` on the class right after.
    modify_epoch: u64,
    /// The classes the contraction-order phase added that hold no operator
    /// the program wrote (the intermediates of other orders), as
    /// [`crate::order::prune`] built them: extraction leaves them out to
    /// find the best plan in the written order.
    pub other_order: Vec<Id>,
    /// The classes [`crate::order::prune`] built that hold an operator the
    /// program wrote (a class of both kinds, after a union, is written).
    pub written_order: Vec<Id>,
    /// The [`TraAnalysis::data_epoch`] at which `rejected` was filled.
    pub rejected_epoch: u64,
    /// Counts the merges that changed a class's data (a placement learnt):
    /// a match turned down before may hold after.
    pub data_epoch: u64,
    /// The program's inputs and nodes by name, with the class each was added
    /// as ([`add_program`]): a failed merge is reported at the program node
    /// nearest above the merged classes.
    pub program_nodes: Vec<(String, Id)>,
    /// A node typed by [`add_typed`] just before egg adds it, with its type:
    /// `make` takes it instead of typing the node a second time.
    typed: Option<(Ia, ClassData)>,
}

impl fmt::Debug for TraAnalysis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TraAnalysis").field("sites", &self.sites).field("inputs", &self.inputs).finish()
    }
}

impl TraAnalysis {
    /// An analysis for programs over these inputs on `sites` sites.
    pub fn new(sites: usize, inputs: IndexMap<String, InputDecl>) -> Self {
        TraAnalysis {
            sites,
            inputs,
            origins: IndexMap::default(),
            oracle: None,
            values: HashMap::new(),
            check_merges: true,
            applied: Default::default(),
            rejected: Default::default(),
            touched: Vec::new(),
            data_changed: Vec::new(),
            modify_epoch: 0,
            other_order: Vec::new(),
            written_order: Vec::new(),
            rejected_epoch: 0,
            data_epoch: 0,
            program_nodes: Vec::new(),
            typed: None,
        }
    }

    /// The same, checking every class's members against a value oracle.
    pub fn with_oracle(sites: usize, inputs: IndexMap<String, InputDecl>, oracle: Arc<dyn ValueOracle>) -> Self {
        TraAnalysis { oracle: Some(oracle), ..TraAnalysis::new(sites, inputs) }
    }
}

/// The rule that first built a node (for reports).
fn origin_of(eg: &TraEGraph, node: &Ia) -> &'static str {
    let canon = node.clone().map_children(|c| eg.find(c));
    eg.analysis
        .origins
        .iter()
        .find(|(n, _)| (*n).clone().map_children(|c| eg.find(c)) == canon)
        .map(|(_, r)| *r)
        .unwrap_or("program")
}

/// Evaluate every member of a class with the oracle and check they agree.
fn check_class_values(eg: &mut TraEGraph, id: Id) {
    let Some(oracle) = eg.analysis.oracle.clone() else { return };
    let id = eg.find(id);
    let physical = matches!(eg[id].data, ClassData::P(_));
    if matches!(eg[id].data, ClassData::Param(_)) {
        return;
    }
    let nodes = eg[id].nodes.clone();
    let mut first: Option<(OracleValue, Ia)> = eg.analysis.values.get(&id).cloned().map(|v| (v, nodes[0].clone()));
    for node in &nodes {
        let children: Option<Vec<OracleValue>> = node
            .children()
            .iter()
            .map(|c| {
                let c = eg.find(*c);
                if matches!(eg[c].data, ClassData::Param(_)) {
                    Some(Arc::new(()) as OracleValue)
                } else {
                    eg.analysis.values.get(&c).cloned()
                }
            })
            .collect();
        let Some(children) = children else { continue };
        let value = match oracle.eval(eg, node, &children) {
            Ok(v) => v,
            Err(e) => panic!(
                "value check: node {} (built by rule {}) cannot be evaluated: {e}",
                enode_string(eg, node),
                origin_of(eg, node)
            ),
        };
        match &first {
            None => first = Some((value, node.clone())),
            Some((v, n)) => {
                if let Err(e) = oracle.same(v, &value, physical) {
                    panic!(
                        "value check: a class holds {} (rule {}) and {} (rule {}), whose values differ: {e}",
                        enode_string(eg, n),
                        origin_of(eg, n),
                        enode_string(eg, node),
                        origin_of(eg, node)
                    );
                }
            }
        }
    }
    if let Some((v, _)) = first {
        eg.analysis.values.insert(id, v);
    }
}

/// The e-graph type of tra.
pub type TraEGraph = EGraph<Ia, TraAnalysis>;

/// Read a parameter leaf as the kind `as_kind` gives, or panic naming the rule
/// that built the node (typing a node whose parameter is of the wrong kind is a
/// bug of that rule).
fn read<'a, T>(eg: &'a TraEGraph, id: Id, as_kind: impl FnOnce(&'a Param) -> Result<T, LeafError>) -> T {
    nodes::leaf(eg, id).and_then(as_kind).unwrap_or_else(|e| panic!("rule {}: {e}", current_rule()))
}
fn dims(eg: &TraEGraph, id: Id) -> &[usize] {
    read(eg, id, Param::as_dims)
}
fn kernel(eg: &TraEGraph, id: Id) -> &KernelRef {
    read(eg, id, Param::as_kernel)
}
fn opt_kernel(eg: &TraEGraph, id: Id) -> Option<&KernelRef> {
    read(eg, id, Param::as_kernel_or_id)
}
fn opt_key(eg: &TraEGraph, id: Id) -> Option<&KeyFn> {
    read(eg, id, Param::as_key_or_id)
}
fn pred(eg: &TraEGraph, id: Id) -> &Predicate {
    read(eg, id, Param::as_pred)
}
fn p_of(eg: &TraEGraph, id: Id) -> &PhysType {
    eg[id]
        .data
        .phys()
        .unwrap_or_else(|| panic!("rule {}: an operand that must be physical (P) is {:?}", current_rule(), eg[id].data))
}
fn l_of(eg: &TraEGraph, id: Id) -> &LogicalType {
    eg[id]
        .data
        .logical()
        .unwrap_or_else(|| panic!("rule {}: an operand that must be logical (L) is {:?}", current_rule(), eg[id].data))
}
fn complete_rel(eg: &TraEGraph, id: Id) -> &RelType {
    let l = l_of(eg, id);
    assert!(l.complete, "rule {}: a TRA operator's operand is a partial aggregate", current_rule());
    &l.rel
}

/// The type of a node given its operands' classes, or why it is ill-typed.
/// Rules use this to check a right-hand side before building it.
pub fn type_node(eg: &TraEGraph, node: &Ia) -> Result<ClassData, TypeError> {
    let s = eg.analysis.sites;
    Ok(match node {
        Ia::Param(p) => ClassData::Param(p.clone()),
        Ia::Join([jl, jr, k, a, b]) => ClassData::L(LogicalType::complete(types::join(
            complete_rel(eg, *a),
            complete_rel(eg, *b),
            dims(eg, *jl),
            dims(eg, *jr),
            kernel(eg, *k),
        )?)),
        Ia::Aggregate([g, k, x]) => {
            ClassData::L(LogicalType::complete(types::aggregate(complete_rel(eg, *x), dims(eg, *g), kernel(eg, *k))?))
        }
        Ia::Rekey([f, x]) => {
            ClassData::L(LogicalType::complete(types::local_map(complete_rel(eg, *x), opt_key(eg, *f), None)?))
        }
        Ia::Filter([p, x]) => ClassData::L(LogicalType::complete(types::filter(complete_rel(eg, *x), pred(eg, *p))?)),
        Ia::Transform([k, x]) => {
            ClassData::L(LogicalType::complete(types::transform(complete_rel(eg, *x), kernel(eg, *k))?))
        }
        Ia::Tile([ds, x]) => {
            let d = dims(eg, *ds);
            ClassData::L(LogicalType::complete(types::tile(complete_rel(eg, *x), d[0], d[1])?))
        }
        Ia::Concat([ds, x]) => {
            let d = dims(eg, *ds);
            ClassData::L(LogicalType::complete(types::concat(complete_rel(eg, *x), d[0], d[1])?))
        }
        Ia::Erase(p) => ClassData::L(LogicalType::of(p_of(eg, *p))),
        Ia::Input(n) => {
            let name = read(eg, *n, Param::as_name);
            let decl = eg.analysis.inputs.get(name).ok_or_else(|| TypeError {
                code: ErrorCode::UnknownInput,
                field: None,
                message: format!("unknown input `{name}`"),
            })?;
            ClassData::P(PhysType::complete(types::input(decl)?, types::input_placement(decl, s)))
        }
        Ia::Shuffle([d, x]) => ClassData::P(types::shuffle(&l_of(eg, *x).as_phys(), dims(eg, *d), s)?),
        Ia::Broadcast(x) => ClassData::P(types::broadcast(&l_of(eg, *x).as_phys())),
        Ia::LJoin([jl, jr, k, a, b]) => ClassData::P(types::local_join(
            p_of(eg, *a),
            p_of(eg, *b),
            dims(eg, *jl),
            dims(eg, *jr),
            kernel(eg, *k),
            s,
        )?),
        Ia::LAgg([g, k, x]) => ClassData::P(types::local_aggregate(p_of(eg, *x), dims(eg, *g), kernel(eg, *k), s)?),
        Ia::LFilter([p, x]) => ClassData::P(types::local_filter(p_of(eg, *x), pred(eg, *p))?),
        Ia::LMap([f, k, x]) => ClassData::P(types::local_map_phys(p_of(eg, *x), opt_key(eg, *f), opt_kernel(eg, *k))?),
    })
}

/// Add `node` (children already in the graph) if it type-checks, typing it
/// once; its class if it is already there. Rules build right-hand sides with
/// this, so that an ill-typed node is skipped instead of reaching `make`.
pub fn add_typed(eg: &mut TraEGraph, mut node: Ia) -> Result<Id, TypeError> {
    // Canonicalizes `node`'s children in place.
    if let Some(id) = eg.lookup(&mut node) {
        return Ok(id);
    }
    let data = type_node(eg, &node)?;
    eg.analysis.typed = Some((node.clone(), data));
    let id = eg.add(node);
    eg.analysis.typed = None;
    Ok(id)
}

impl Analysis<Ia> for TraAnalysis {
    type Data = ClassData;

    fn make(egraph: &mut TraEGraph, enode: &Ia, _id: Id) -> ClassData {
        let typed = match egraph.analysis.typed.take() {
            Some((node, data)) if node == *enode => Ok(data),
            _ => type_node(egraph, enode),
        };
        let data = match typed {
            Ok(d) => d,
            Err(e) => {
                // Typing stopped by the request's deadline, not an ill-typed node:
                // leave egg (which cannot take an error here) without a panic message.
                crate::deadline::unwind_if_expired();
                panic!("rule {} built an ill-typed node {}: {}", current_rule(), enode_string(egraph, enode), e.message)
            }
        };
        egraph.analysis.origins.entry(enode.clone()).or_insert_with(current_rule);
        data
    }

    fn modify(egraph: &mut TraEGraph, id: Id) {
        let a = &mut egraph.analysis;
        a.touched.push(id);
        if a.modify_epoch != a.data_epoch {
            a.modify_epoch = a.data_epoch;
            a.data_changed.push(id);
        }
        check_class_values(egraph, id);
    }

    fn pre_union(egraph: &TraEGraph, id1: Id, id2: Id, _why: &Option<egg::Justification>) {
        if !egraph.analysis.check_merges {
            return;
        }
        let (a, b) = (egraph.find(id1), egraph.find(id2));
        if a == b {
            return;
        }
        if let Some(detail) = conflict(&egraph[a].data, &egraph[b].data) {
            // `merge` panics next; record who and where while the graph is whole.
            let rule = current_rule();
            let while_rebuilding = rule == "program";
            let rules = if while_rebuilding { CHANGED_THIS_ITERATION.with(|c| c.borrow().clone()) } else { vec![rule] };
            let at = program_nodes_above(egraph, &[a, b]);
            MERGE_FAILURE.with(|f| *f.borrow_mut() = Some(MergeFailure { rules, while_rebuilding, at, detail }));
        }
    }

    fn merge(&mut self, a: &mut ClassData, b: ClassData) -> DidMerge {
        if !self.check_merges {
            // No assertion (mutation tests): keep `a`, learning a placement
            // where `a`'s is unknown.
            if let (ClassData::P(x), ClassData::P(y)) = (&mut *a, &b) {
                if x.placement == Placement::Any && y.placement != Placement::Any {
                    x.placement = y.placement.clone();
                    self.data_epoch += 1;
                    return DidMerge(true, false);
                }
            }
            return DidMerge(false, *a != b);
        }
        match (&mut *a, b) {
            (ClassData::Param(x), ClassData::Param(y)) => {
                assert_eq!(*x, y, "rule {}: merged two different parameters", current_rule());
                DidMerge(false, false)
            }
            (ClassData::L(x), ClassData::L(y)) => {
                assert_eq!(*x, y, "rule {}: merged two logical classes whose types differ", current_rule());
                DidMerge(false, false)
            }
            (ClassData::P(x), ClassData::P(y)) => {
                assert_eq!(x.rel, y.rel, "rule {}: merged physical classes whose relations differ", current_rule());
                assert_eq!(
                    (x.complete, x.tuples),
                    (y.complete, y.tuples),
                    "rule {}: merged physical classes whose completeness differs",
                    current_rule()
                );
                match (&x.placement, &y.placement) {
                    (p, q) if p == q => DidMerge(false, false),
                    (_, Placement::Any) => DidMerge(false, true),
                    (Placement::Any, _) => {
                        x.placement = y.placement;
                        self.data_epoch += 1;
                        DidMerge(true, false)
                    }
                    (p, q) => panic!(
                        "rule {}: merged physical classes whose placements differ ({p} and {q}): an unsound rewrite",
                        current_rule()
                    ),
                }
            }
            (x, y) => panic!("rule {}: merged classes of different sorts: {x:?} and {y:?}", current_rule()),
        }
    }
}

fn enode_string(eg: &TraEGraph, n: &Ia) -> String {
    let mut s = format!("({}", n);
    for c in n.children() {
        match eg[*c].data.param() {
            Some(p) => s.push_str(&format!(" {p}")),
            None => s.push_str(&format!(" #{c}")),
        }
    }
    s.push(')');
    s
}

/// Add a TRA program to an e-graph as L nodes (those the outputs read);
/// returns each output's class.
pub fn add_program(eg: &mut TraEGraph, p: &Program, order: &[String]) -> IndexMap<String, Id> {
    // Only what an output reads: an input or node no output depends on is
    // never computed, and would only fill the e-graph (60,000 unused inputs
    // made 180,000 e-nodes).
    let mut needed: std::collections::HashSet<&str> = p.outputs.iter().map(String::as_str).collect();
    for name in order.iter().rev() {
        if needed.contains(name.as_str()) {
            needed.extend(crate::program::Operator::operands(&p.nodes[name]));
        }
    }
    let mut ids: HashMap<&str, Id> = HashMap::new();
    for name in p.inputs.keys().filter(|n| needed.contains(n.as_str())) {
        let n = eg.add(Ia::Param(Param::Name(name.clone())));
        let i = eg.add(Ia::Input(n));
        let e = eg.add(Ia::Erase(i));
        ids.insert(name, e);
        eg.analysis.program_nodes.push((name.clone(), e));
    }
    for name in order.iter().filter(|n| needed.contains(n.as_str())) {
        let op = &p.nodes[name];
        let node = nodes::tra_node(op, |prm| eg.add(Ia::Param(prm)), |operand| ids[operand]);
        let id = eg.add(node);
        ids.insert(name, id);
        eg.analysis.program_nodes.push((name.clone(), id));
    }
    p.outputs.iter().map(|o| (o.clone(), ids[o.as_str()])).collect()
}

/// An extracted plan: a RecExpr holding every output's P expression
/// (P nodes and parameters only, `erase` removed), and the root of each output.
#[derive(Debug, Clone)]
pub struct ExtractedPlan {
    /// The expression DAG.
    pub expr: RecExpr<Ia>,
    /// Output name → index of its root in `expr`.
    pub roots: IndexMap<String, Id>,
    /// The e-class each node of `expr` was taken from.
    pub classes: Vec<Id>,
}

impl ExtractedPlan {
    /// The API plan: one named node per IA operator; outputs keep their names.
    pub fn to_plan(&self, inputs: &IndexMap<String, InputDecl>) -> Plan {
        let nodes_in = self.expr.as_ref();
        let mut names: HashMap<Id, String> = HashMap::new();
        let mut nodes: IndexMap<String, IaOp> = IndexMap::new();
        // Output roots get the output names: the P node under the root's `erase`.
        // An output whose node already carries another output's name gets an
        // identity local map of its own (added after the walk).
        let mut aliases: Vec<(String, Id)> = Vec::new();
        for (o, r) in &self.roots {
            let mut r = *r;
            while let Ia::Erase(x) = &nodes_in[usize::from(r)] {
                r = *x;
            }
            if let Ia::Input(n) = &nodes_in[usize::from(r)] {
                if matches!(&nodes_in[usize::from(*n)], Ia::Param(Param::Name(nm)) if nm == o) {
                    continue;
                }
                aliases.push((o.clone(), r));
                continue;
            }
            if let std::collections::hash_map::Entry::Vacant(e) = names.entry(r) {
                e.insert(o.clone());
            } else {
                aliases.push((o.clone(), r));
            }
        }
        let mut counter = 0usize;
        let prm = |id: Id| match &nodes_in[usize::from(id)] {
            Ia::Param(p) => Ok(p),
            n => Err(LeafError { expected: "a parameter", found: n.to_string() }),
        };
        for (i, node) in nodes_in.iter().enumerate() {
            let id = Id::from(i);
            let op = match node {
                Ia::Param(_) => continue,
                Ia::Input(n) => {
                    if let Ok(nm) = prm(*n).and_then(Param::as_name) {
                        names.insert(id, nm.to_string());
                    }
                    continue;
                }
                Ia::Erase(x) => {
                    let n = names[x].clone();
                    names.insert(id, n);
                    continue;
                }
                node => {
                    let operands: Vec<&str> = nodes::operands(node).iter().map(|c| names[c].as_str()).collect();
                    // An extracted plan is built from P nodes the analysis typed.
                    nodes::ia_op(node, prm, &operands).unwrap_or_else(|e| panic!("an extracted plan: {e}"))
                }
            };
            let name = names.get(&id).cloned().unwrap_or_else(|| loop {
                let n = format!("n{counter}");
                counter += 1;
                if !inputs.contains_key(&n) && !self.roots.contains_key(&n) {
                    break n;
                }
            });
            names.insert(id, name.clone());
            nodes.insert(name, op);
        }
        for (o, r) in aliases {
            nodes.insert(o, IaOp::LocalMap { input: names[&r].clone(), key: None, kernel: None });
        }
        Plan { inputs: inputs.clone(), nodes, outputs: self.roots.keys().cloned().collect() }
    }
}
