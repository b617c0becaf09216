//! What every rule file shares: reading parameters and types out of the class
//! analysis, building a right-hand side node by node with a type check before
//! each node is added, and the applier that unions the result with the
//! matched class (or, for `R2-4/canonical`, with another class it names).
//!
//! Every rewrite of this crate uses [`Build`] (wrapped in
//! [`tra_optimizer::rule::Named`]): a right-hand side is built only when each
//! of its new nodes type-checks ([`type_node`]), so that a rule can never
//! make the analysis panic on an ill-typed node; a condition that fails, or a
//! node that does not type, just skips the match.

use egg::{Applier, ENodeOrVar, Id, Language, Pattern, PatternAst, Rewrite, Subst, Symbol, Var};
use std::sync::Arc;
use tra_optimizer::egraph::{type_node, ClassData, Ia, LogicalType, Param, TraAnalysis, TraEGraph};
use tra_optimizer::kernel::KernelRef;
use tra_optimizer::keyexpr::{KeyFn, Predicate};
use tra_optimizer::rule::{Named, TraRewrite};
use tra_optimizer::types::PhysType;

// ---------------------------------------------------------------------------
// Reading the analysis.

/// The parameter of a leaf class.
pub(crate) fn param(eg: &TraEGraph, id: Id) -> Option<&Param> {
    eg[id].data.param()
}

/// A dim-list leaf.
pub(crate) fn dims(eg: &TraEGraph, id: Id) -> Option<&[usize]> {
    match param(eg, id)? {
        Param::Dims(d) => Some(d),
        _ => None,
    }
}

/// A kernel leaf (not `id`).
pub(crate) fn kernel(eg: &TraEGraph, id: Id) -> Option<&KernelRef> {
    match param(eg, id)? {
        Param::Kernel(k) => Some(k),
        _ => None,
    }
}

/// A key-expression leaf (not `id`).
pub(crate) fn key(eg: &TraEGraph, id: Id) -> Option<&KeyFn> {
    match param(eg, id)? {
        Param::Key(k) => Some(k),
        _ => None,
    }
}

/// A predicate leaf.
pub(crate) fn pred(eg: &TraEGraph, id: Id) -> Option<&Predicate> {
    match param(eg, id)? {
        Param::Pred(p) => Some(p),
        _ => None,
    }
}

/// True for the `id` leaf.
pub(crate) fn is_id_leaf(eg: &TraEGraph, id: Id) -> bool {
    matches!(param(eg, id), Some(Param::Id))
}

/// True when a local map's key leaf is the identity on keys of `arity`:
/// the `id` leaf, or a key expression `[k0, …, k{arity-1}]`.
pub(crate) fn is_identity_key(eg: &TraEGraph, id: Id, arity: usize) -> bool {
    match param(eg, id) {
        Some(Param::Id) => true,
        Some(Param::Key(k)) => k.is_identity(arity),
        _ => false,
    }
}

/// The physical type of a P class.
pub(crate) fn phys(eg: &TraEGraph, id: Id) -> Option<&PhysType> {
    eg[id].data.phys()
}

/// The logical type of an L class.
pub(crate) fn logical(eg: &TraEGraph, id: Id) -> Option<&LogicalType> {
    eg[id].data.logical()
}

/// A complete physical relation's type (None for a partial aggregate).
pub(crate) fn complete_phys(eg: &TraEGraph, id: Id) -> Option<&PhysType> {
    phys(eg, id).filter(|p| p.complete)
}

/// The key arity of a P or L class.
pub(crate) fn arity(eg: &TraEGraph, id: Id) -> Option<usize> {
    match &eg[id].data {
        ClassData::P(p) => Some(p.rel.key_arity()),
        ClassData::L(l) => Some(l.rel.key_arity()),
        ClassData::Param(_) => None,
    }
}

/// True when every element of `a` is in `b`.
pub(crate) fn subset(a: &[usize], b: &[usize]) -> bool {
    a.iter().all(|x| b.contains(x))
}

/// A pattern variable.
pub(crate) fn var(name: &str) -> Var {
    name.parse().unwrap_or_else(|e| panic!("bad pattern variable `{name}`: {e}"))
}

/// A pattern (rule text is static: a parse error is a bug in this crate).
pub(crate) fn pat(src: &str) -> Pattern<Ia> {
    src.parse().unwrap_or_else(|e| panic!("bad pattern `{src}`: {e}"))
}

/// The value bound to `v`.
pub(crate) fn get(subst: &Subst, v: &str) -> Id {
    subst[var(v)]
}

// ---------------------------------------------------------------------------
// Building right-hand sides.

/// Add a parameter leaf (always well-typed).
pub(crate) fn leaf(eg: &mut TraEGraph, p: Param) -> Id {
    eg.add(Ia::Param(p))
}

/// Add `node` (children already in the graph) if it type-checks; its class
/// otherwise. `None` when it is ill-typed: the caller skips the match.
pub(crate) fn add_checked(eg: &mut TraEGraph, node: Ia) -> Option<Id> {
    if let Some(id) = eg.lookup(node.clone()) {
        return Some(id);
    }
    type_node(eg, &node).ok()?;
    Some(eg.add(node))
}

/// Instantiate a right-hand side pattern with `subst`, type-checking every
/// node before it is added; `None` (nothing more added) at the first node
/// that does not type. Variables the substitution lacks also give `None`.
pub(crate) fn inst(eg: &mut TraEGraph, ast: &PatternAst<Ia>, subst: &Subst) -> Option<Id> {
    let nodes = ast.as_ref();
    let mut ids: Vec<Id> = Vec::with_capacity(nodes.len());
    for n in nodes {
        let id = match n {
            ENodeOrVar::Var(v) => *subst.get(*v)?,
            ENodeOrVar::ENode(node) => {
                let node = node.clone().map_children(|c| ids[usize::from(c)]);
                add_checked(eg, node)?
            }
        };
        ids.push(id);
    }
    ids.last().copied()
}

/// `subst` extended with parameter leaves bound to new variables.
pub(crate) fn extend(eg: &mut TraEGraph, subst: &Subst, binds: Vec<(&str, Param)>) -> Subst {
    let mut s = subst.clone();
    for (v, p) in binds {
        let id = leaf(eg, p);
        s.insert(var(v), id);
    }
    s
}

/// Why merging two classes with these analysis values would make the
/// analysis panic, if it would (the analysis's own test).
pub use tra_optimizer::egraph::conflict;

/// What to do when a right-hand side's type disagrees with the matched
/// class's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Guard {
    /// Union anyway: the analysis's `merge` panics, naming the rule. For rules
    /// whose two sides are typed by the same functions, a disagreement can
    /// only be an unsound rule, and must be loud.
    Strict,
    /// Skip the match. For rules whose two sides reach the same relation
    /// through different typing functions that may describe it differently
    /// (a join keeps its operands' frontiers, a filter or key map recomputes
    /// the frontier from the keys left; two descriptions of one hash
    /// placement): the values are equal, the descriptions are not, and a
    /// skipped union is always sound.
    SkipMismatch,
}

type BuildFn = dyn Fn(&mut TraEGraph, Id, &Subst) -> Vec<(Id, Id)> + Send + Sync;

/// An applier that runs a closure building zero or more right-hand sides
/// (with [`inst`] / [`add_checked`], after checking the rule's condition on
/// the class analysis), each paired with the class it equals (usually the
/// matched class), then unions each pair.
#[derive(Clone)]
pub(crate) struct Build {
    guard: Guard,
    f: Arc<BuildFn>,
}

impl Applier<Ia, TraAnalysis> for Build {
    fn apply_one(
        &self,
        egraph: &mut TraEGraph,
        eclass: Id,
        subst: &Subst,
        _searcher_ast: Option<&PatternAst<Ia>>,
        rule_name: Symbol,
    ) -> Vec<Id> {
        let key = (rule_name, eclass, subst.clone());
        if egraph.analysis.applied.contains(&key) {
            return Vec::new();
        }
        let built = (self.f)(egraph, eclass, subst);
        if !built.is_empty() {
            egraph.analysis.applied.insert(key);
        }
        let mut changed = Vec::new();
        for (class, rhs) in built {
            if self.guard == Guard::SkipMismatch && conflict(&egraph[class].data, &egraph[rhs].data).is_some() {
                continue;
            }
            if egraph.union(class, rhs) {
                changed.push(rhs);
            }
        }
        changed
    }
}

/// One egg rewrite: `lhs` searched, `f` builds the right-hand sides (each
/// equal to the matched class), the applier wrapped in [`Named`] so that
/// errors and bookkeeping name `rule`.
pub(crate) fn rewrite(
    rule: &'static str,
    egg_name: &str,
    lhs: &str,
    guard: Guard,
    f: impl Fn(&mut TraEGraph, Id, &Subst) -> Vec<Id> + Send + Sync + 'static,
) -> TraRewrite {
    rewrite_pairs(rule, egg_name, lhs, guard, move |eg, id, s| f(eg, id, s).into_iter().map(|r| (id, r)).collect())
}

/// Like [`rewrite`], for rules whose equalities are not with the matched
/// class itself: `f` gives the pairs of classes to union.
pub(crate) fn rewrite_pairs(
    rule: &'static str,
    egg_name: &str,
    lhs: &str,
    guard: Guard,
    f: impl Fn(&mut TraEGraph, Id, &Subst) -> Vec<(Id, Id)> + Send + Sync + 'static,
) -> TraRewrite {
    Rewrite::new(egg_name, pat(lhs), Named { rule, inner: Build { guard, f: Arc::new(f) } })
        .unwrap_or_else(|e| panic!("rule {egg_name}: {e}"))
}

/// A rewrite whose right-hand side is one pattern, built (type-checked) when
/// `cond` holds; `cond` may bind new parameter leaves to variables the
/// right-hand side uses.
pub(crate) fn rewrite_to(
    rule: &'static str,
    egg_name: &str,
    lhs: &str,
    rhs: &str,
    guard: Guard,
    cond: impl Fn(&TraEGraph, Id, &Subst) -> Option<Vec<(&'static str, Param)>> + Send + Sync + 'static,
) -> TraRewrite {
    let rhs = pat(rhs).ast;
    rewrite(rule, egg_name, lhs, guard, move |eg, id, s| {
        let Some(binds) = cond(eg, id, s) else { return vec![] };
        let s = extend(eg, s, binds);
        inst(eg, &rhs, &s).into_iter().collect()
    })
}

/// The condition that always holds and binds nothing.
pub(crate) fn always(_: &TraEGraph, _: Id, _: &Subst) -> Option<Vec<(&'static str, Param)>> {
    Some(vec![])
}
