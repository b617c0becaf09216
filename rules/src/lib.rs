//! The rewrite rules of tra: Table 1 lowering, the paper's R1 (lambda
//! composition) and R2 (re-partition) rules, the distributed-matmul rules and
//! the contraction-order rules,
//! over the two-sort IA e-graph of `tra_optimizer::egraph` (see `tra_optimizer::egraph` for why two sorts).
//!
//! Every rule is a sound equality: P classes are equal exactly (sites
//! included), L classes up to site. Conditions read only the class analysis
//! (types, placements, parameters); every right-hand side is type-checked
//! node by node before it is added, so a rule never builds an ill-typed node,
//! and every applier is wrapped in [`tra_optimizer::rule::Named`] so that
//! errors and bookkeeping name the rule. See `README.md` for the policy and
//! the list.
//!
//! Each family file is a table: one function per rule whose body is one
//! [`build::Rule`] entry (name, [`Family`], why, patterns, named conditions
//! from [`cond`]); the equation and condition `tra rules` shows are derived
//! from the entry, and [`table`] renders the list that `README.md` holds.
//!
//! A rule is registered by its NAME ([`RuleDef::name`]); it may be made of
//! several egg rewrites, whose names (`R2-6/from-bcast-left`, …) are unique.
#![warn(missing_docs)]

pub mod build;
pub mod compose;
pub mod cond;
pub mod lower;
pub mod matmul;
pub mod order;
pub mod repartition;
pub mod table;

pub use build::conflict;
use tra_optimizer::rule::RuleDef;
pub use tra_optimizer::rule::{Family, Phase};

/// Every rule: the lowering rules (`lowering()`) first, then R1,
/// R2, matmul and the contraction-order rules (which run first, alone:
/// [`Phase::Ordering`]).
pub fn all() -> Vec<RuleDef> {
    let mut v = lower::rules();
    v.extend(compose::rules());
    v.extend(repartition::rules());
    v.extend(matmul::rules());
    v.extend(order::rules());
    v
}

/// The names of every rule, in the order of [`all`].
pub fn names() -> Vec<&'static str> {
    all().iter().map(|r| r.name).collect()
}

/// The rule with this name.
pub fn by_name(name: &str) -> Option<RuleDef> {
    all().into_iter().find(|r| r.name == name)
}

/// The lowering rules only (Table 1): the first phase of a run.
pub fn lowering() -> Vec<RuleDef> {
    all().into_iter().filter(|r| r.lowering()).collect()
}

/// The markdown table of every rule (what `tra rules --format md` prints).
pub fn markdown() -> String {
    table::markdown(&all())
}

/// Every egg rewrite of these rules, flattened.
pub fn rewrites(rules: Vec<RuleDef>) -> Vec<tra_optimizer::rule::TraRewrite> {
    rules.into_iter().flat_map(|r| r.rewrites).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn names_and_egg_names_are_unique() {
        let rules = all();
        let mut seen = HashSet::new();
        let mut egg_names = HashSet::new();
        for r in &rules {
            assert!(seen.insert(r.name), "rule {} registered twice", r.name);
            assert!(!r.rewrites.is_empty(), "rule {} has no rewrite", r.name);
            assert!(!r.equation.is_empty() && !r.condition.is_empty(), "rule {} lacks its text", r.name);
            for rw in &r.rewrites {
                assert!(egg_names.insert(rw.name), "egg rewrite {} appears twice", rw.name);
            }
        }
        assert_eq!(names().len(), rules.len());
        assert_eq!(by_name("R2-6").map(|r| r.family), Some(Family::R2));
        assert!(by_name("nope").is_none());
        assert!(lowering().iter().all(|r| r.family == Family::Lowering));
        assert_eq!(lowering().len(), 7);
    }
}
