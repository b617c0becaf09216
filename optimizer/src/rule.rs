//! How rules are described to the optimizer: a named rule (as the paper names
//! it) with its equation and condition, made of one or more egg rewrites.
//! The rules themselves live in the `tra-rules` crate.

use crate::egraph::{note_rule_changed_graph, set_current_rule, Ia, TraAnalysis, TraEGraph};
use egg::{Applier, Id, PatternAst, Rewrite, Subst, Symbol};

/// A rewrite over tra's e-graph.
pub type TraRewrite = Rewrite<Ia, TraAnalysis>;

/// When a family's rules run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Before lowering, alone, on the TRA (logical) operators only: the
    /// contraction orders of products. The graph is then pruned to the
    /// cheapest orders by flops and the written one
    /// ([`crate::order::prune`]), so that lowering and exploration see a
    /// bounded number of orders.
    Ordering,
    /// First, alone: every TRA operator gets an executable member before the
    /// other rules grow the graph.
    Lowering,
    /// Then every rule together, to saturation.
    Exploration,
}

/// A family of rules: the file it lives in, its title in the rule list, and
/// the phase it runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    /// Table 1 of the paper: each TRA operator lowered to IA.
    Lowering,
    /// R1, lambda composition (P level).
    R1,
    /// R2, re-partition.
    R2,
    /// The distributed-matmul plans (paper 004 §4.2).
    Matmul,
    /// Contraction order: reassociating products on the TRA sort.
    Order,
}

impl Family {
    /// Every family, in the order rules are listed.
    pub const ALL: [Family; 5] = [Family::Order, Family::Lowering, Family::R1, Family::R2, Family::Matmul];

    /// The short name (`lowering`, `R1`, `R2`, `matmul`).
    pub fn name(self) -> &'static str {
        match self {
            Family::Lowering => "lowering",
            Family::R1 => "R1",
            Family::R2 => "R2",
            Family::Matmul => "matmul",
            Family::Order => "order",
        }
    }

    /// A heading for the family in the rule list.
    pub fn title(self) -> &'static str {
        match self {
            Family::Lowering => "Lowering (Table 1; run first, alone)",
            Family::R1 => "R1: lambda composition (P level)",
            Family::R2 => "R2: re-partition",
            Family::Matmul => "matmul (paper 004 §4.2)",
            Family::Order => "Contraction order (TRA sort; run before lowering, alone, then pruned)",
        }
    }

    /// When its rules run.
    pub fn phase(self) -> Phase {
        match self {
            Family::Order => Phase::Ordering,
            Family::Lowering => Phase::Lowering,
            _ => Phase::Exploration,
        }
    }
}

impl std::fmt::Display for Family {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl PartialEq<&str> for Family {
    fn eq(&self, other: &&str) -> bool {
        self.name() == *other
    }
}

impl serde::Serialize for Family {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// One named rule. Built by `tra_rules::build::Rule`, which derives the
/// equation from the rule's patterns and the condition from its named
/// predicates.
pub struct RuleDef {
    /// The paper's name (`R2-6`, `lower-join`, `matmul-cmm`, …).
    pub name: &'static str,
    /// The family: the file it lives in, and its phase.
    pub family: Family,
    /// The equation, in the two-sort form.
    pub equation: String,
    /// When it applies.
    pub condition: String,
    /// Why it is sound (one line).
    pub why: &'static str,
    /// The egg rewrites that implement it (directions, variants).
    pub rewrites: Vec<TraRewrite>,
    /// Whether its appliers read the members of the classes its patterns
    /// bind, not only their analysis data (the incremental search then finds
    /// its matches again when a bound class gains a member).
    pub reads_members: bool,
}

impl RuleDef {
    /// True for the Table-1 lowering rules, which run first, alone (their
    /// family's phase is [`Phase::Lowering`]).
    pub fn lowering(&self) -> bool {
        self.family.phase() == Phase::Lowering
    }

    /// True for the contraction-order rules, which run before lowering,
    /// alone (their family's phase is [`Phase::Ordering`]).
    pub fn ordering(&self) -> bool {
        self.family.phase() == Phase::Ordering
    }
}

impl std::fmt::Debug for RuleDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuleDef")
            .field("name", &self.name)
            .field("family", &self.family)
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
