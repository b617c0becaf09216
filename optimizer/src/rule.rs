//! How rules are described to the optimizer: a named rule (as the paper names
//! it) with its equation and condition, made of one or more egg rewrites.
//! The rules themselves live in the `tra-rules` crate.

use crate::egraph::{note_rule_changed_graph, set_current_rule, Ia, TraAnalysis, TraEGraph};
use egg::{Applier, Id, PatternAst, Rewrite, Subst, Symbol};

/// A rewrite over tra's e-graph.
pub type TraRewrite = Rewrite<Ia, TraAnalysis>;

/// One named rule.
pub struct RuleDef {
    /// The paper's name (`R2-6`, `lower-join`, `matmul-cmm`, …).
    pub name: &'static str,
    /// The family (`lowering`, `R1`, `R2`, `matmul`, …): the file it lives in.
    pub family: &'static str,
    /// The equation, in the two-sort form.
    pub equation: &'static str,
    /// When it applies, and why that condition is the sound one.
    pub condition: &'static str,
    /// True for the Table-1 lowering rules, which run first, alone.
    pub lowering: bool,
    /// The egg rewrites that implement it (directions, variants).
    pub rewrites: Vec<TraRewrite>,
}

impl std::fmt::Debug for RuleDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuleDef")
            .field("name", &self.name)
            .field("equation", &self.equation)
            .field("condition", &self.condition)
            .field("rewrites", &self.rewrites.len())
            .finish()
    }
}

/// An applier that records which rule is applying while it adds nodes, so
/// that the analysis can name the rule in an error, and `rules_applied` can
/// name the rules that built the chosen plan.
#[derive(Debug, Clone)]
pub struct Named<A> {
    /// The rule name.
    pub rule: &'static str,
    /// The applier doing the work.
    pub inner: A,
}

impl<A: Applier<Ia, TraAnalysis>> Applier<Ia, TraAnalysis> for Named<A> {
    fn apply_one(
        &self,
        egraph: &mut TraEGraph,
        eclass: Id,
        subst: &Subst,
        searcher_ast: Option<&PatternAst<Ia>>,
        rule_name: Symbol,
    ) -> Vec<Id> {
        let prev = set_current_rule(self.rule);
        let out = self.inner.apply_one(egraph, eclass, subst, searcher_ast, rule_name);
        set_current_rule(prev);
        if !out.is_empty() {
            note_rule_changed_graph(self.rule);
        }
        out
    }

    fn apply_matches(&self, egraph: &mut TraEGraph, matches: &[egg::SearchMatches<Ia>], rule_name: Symbol) -> Vec<Id> {
        let prev = set_current_rule(self.rule);
        let out = self.inner.apply_matches(egraph, matches, rule_name);
        set_current_rule(prev);
        if !out.is_empty() {
            note_rule_changed_graph(self.rule);
        }
        out
    }

    fn vars(&self) -> Vec<egg::Var> {
        self.inner.vars()
    }
}
