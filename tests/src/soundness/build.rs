//! A few helpers to write rules in the test crate (the mutants): the same
//! shape as the rules crate's private `support` module — patterns, a
//! right-hand side instantiated node by node with a type check before each
//! node is added, and an applier wrapped in [`Named`] so that the analysis
//! credits the nodes to the rule's name.

use egg::{Applier, ENodeOrVar, Id, Language, Pattern, PatternAst, Rewrite, Subst, Symbol, Var};
use std::sync::Arc;
use tra_optimizer::egraph::{type_node, Ia, Param, TraAnalysis, TraEGraph};
use tra_optimizer::kernel::KernelRef;
use tra_optimizer::keyexpr::Predicate;
use tra_optimizer::rule::{Named, RuleDef, TraRewrite};
use tra_optimizer::types::PhysType;

/// A pattern variable.
pub fn var(name: &str) -> Var {
    name.parse().unwrap_or_else(|e| panic!("bad pattern variable `{name}`: {e}"))
}

/// A pattern.
pub fn pat(src: &str) -> Pattern<Ia> {
    src.parse().unwrap_or_else(|e| panic!("bad pattern `{src}`: {e}"))
}

/// The class bound to `v`.
pub fn get(subst: &Subst, v: &str) -> Id {
    subst[var(v)]
}

/// A dim-list leaf.
pub fn dims(eg: &TraEGraph, id: Id) -> Option<Vec<usize>> {
    match eg[id].data.param()? {
        Param::Dims(d) => Some(d.clone()),
        _ => None,
    }
}

/// A kernel leaf.
pub fn kernel(eg: &TraEGraph, id: Id) -> Option<KernelRef> {
    match eg[id].data.param()? {
        Param::Kernel(k) => Some(k.clone()),
        _ => None,
    }
}

/// A predicate leaf.
pub fn pred(eg: &TraEGraph, id: Id) -> Option<Predicate> {
    match eg[id].data.param()? {
        Param::Pred(p) => Some(p.clone()),
        _ => None,
    }
}

/// True when a key leaf is the identity on keys of `arity` (`id` or `[k0, …]`).
pub fn identity_key(eg: &TraEGraph, id: Id, arity: usize) -> bool {
    match eg[id].data.param() {
        Some(Param::Id) => true,
        Some(Param::Key(k)) => k.is_identity(arity),
        _ => false,
    }
}

/// The type of a complete P class.
pub fn complete_phys(eg: &TraEGraph, id: Id) -> Option<&PhysType> {
    eg[id].data.phys().filter(|p| p.complete)
}

/// The key arity of a P or L class.
pub fn arity(eg: &TraEGraph, id: Id) -> Option<usize> {
    eg[id].data.phys().map(|p| p.rel.key_arity()).or_else(|| eg[id].data.logical().map(|l| l.rel.key_arity()))
}

/// Add `node` if it type-checks (its class if it is there already).
pub fn add_checked(eg: &mut TraEGraph, node: Ia) -> Option<Id> {
    if let Some(id) = eg.lookup(node.clone()) {
        return Some(id);
    }
    type_node(eg, &node).ok()?;
    Some(eg.add(node))
}

/// Instantiate a right-hand side, type-checking every node; `None` at the
/// first node that does not type.
pub fn inst(eg: &mut TraEGraph, ast: &PatternAst<Ia>, subst: &Subst) -> Option<Id> {
    let mut ids: Vec<Id> = Vec::with_capacity(ast.as_ref().len());
    for n in ast.as_ref() {
        let id = match n {
            ENodeOrVar::Var(v) => *subst.get(*v)?,
            ENodeOrVar::ENode(node) => add_checked(eg, node.clone().map_children(|c| ids[usize::from(c)]))?,
        };
        ids.push(id);
    }
    ids.last().copied()
}

/// `subst` with parameter leaves bound to new variables.
pub fn with(eg: &mut TraEGraph, subst: &Subst, binds: Vec<(&str, Param)>) -> Subst {
    let mut s = subst.clone();
    for (v, p) in binds {
        let id = eg.add(Ia::Param(p));
        s.insert(var(v), id);
    }
    s
}

type BuildFn = dyn Fn(&mut TraEGraph, Id, &Subst) -> Vec<Id> + Send + Sync;

/// Unions every right-hand side the closure builds with the matched class
/// (no type guard: an unsound union is left to the analysis and the harness).
#[derive(Clone)]
pub struct Build(Arc<BuildFn>);

impl Applier<Ia, TraAnalysis> for Build {
    fn apply_one(
        &self,
        egraph: &mut TraEGraph,
        eclass: Id,
        subst: &Subst,
        _searcher_ast: Option<&PatternAst<Ia>>,
        _rule_name: Symbol,
    ) -> Vec<Id> {
        let mut changed = Vec::new();
        for rhs in (self.0)(egraph, eclass, subst) {
            if egraph.union(eclass, rhs) {
                changed.push(rhs);
            }
        }
        changed
    }
}

/// One egg rewrite credited to `rule`.
pub fn rewrite(
    rule: &'static str,
    egg_name: &str,
    lhs: &str,
    f: impl Fn(&mut TraEGraph, Id, &Subst) -> Vec<Id> + Send + Sync + 'static,
) -> TraRewrite {
    Rewrite::new(egg_name, pat(lhs), Named { rule, inner: Build(Arc::new(f)) })
        .unwrap_or_else(|e| panic!("rewrite {egg_name}: {e}"))
}

/// A rewrite to one right-hand side pattern, built when `cond` holds (it may
/// bind parameter leaves the right-hand side uses).
pub fn rewrite_to(
    rule: &'static str,
    egg_name: &str,
    lhs: &str,
    rhs: &str,
    cond: impl Fn(&TraEGraph, Id, &Subst) -> Option<Vec<(&'static str, Param)>> + Send + Sync + 'static,
) -> TraRewrite {
    let rhs = pat(rhs).ast;
    rewrite(rule, egg_name, lhs, move |eg, id, s| {
        let Some(binds) = cond(eg, id, s) else { return vec![] };
        let s = with(eg, s, binds);
        inst(eg, &rhs, &s).into_iter().collect()
    })
}

/// A rule definition in the test crate.
pub fn rule(name: &'static str, equation: &'static str, condition: &'static str, rewrites: Vec<TraRewrite>) -> RuleDef {
    RuleDef { name, family: "mutant", equation, condition, lowering: name.starts_with("lower-"), rewrites }
}
