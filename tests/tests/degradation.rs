//! Graceful degradation: a rule set with a deliberately unsound rule (a
//! mutant of `tra_tests::soundness::mutants`) in place of the real one.
//!
//! - Strict (`optimize`, tests, `--strict`): the failure is an internal
//!   error naming the rule and the program node.
//! - Retrying (`optimize_with(.., OnRuleFailure::Retry)`, the service and the
//!   command line): the answer is the plan found without the failing rule —
//!   the same as optimizing without it from the start — with one warning
//!   naming the rule and the node, and it computes the program's result.
//! - When optimizing again without the rule fails too (the broken rule is a
//!   lowering rule, without which there is no plan), the answer is an
//!   internal error naming the rule.

use tra_executor::reference::{compare, eval_ia, eval_tra, AnyLayout};
use tra_optimizer::optimize::{optimize, optimize_with, Limits, OnRuleFailure, OptimizeError};
use tra_optimizer::rule::RuleDef;
use tra_optimizer::{Cluster, Program};
use tra_tests::soundness::mutants;

/// Every rule, with the mutant of this name in place of the rule it replaces.
fn with_mutant(name: &str) -> (Vec<RuleDef>, &'static str) {
    let m = mutants::all().into_iter().find(|m| m.name == name).unwrap_or_else(|| panic!("no mutant {name}"));
    let rules = tra_rules::all().into_iter().map(|r| if r.name == m.replaces { (m.make)() } else { r }).collect();
    (rules, m.replaces)
}

/// Every rule but `name`.
fn without(name: &str) -> Vec<RuleDef> {
    tra_rules::all().into_iter().filter(|r| r.name != name).collect()
}

fn diag_of_product(sites: usize) -> Program {
    let mut p = tra_tests::program(tra_tests::DIAG_OF_PRODUCT);
    p.cluster = Some(Cluster { sites, ..p.cluster() });
    p
}

#[test]
fn an_unsound_rule_fails_strictly_naming_the_rule_and_the_node() {
    let (rules, rule) = with_mutant("R1-4 judging the key map by its output arity");
    match optimize(&diag_of_product(3), &rules, &Limits::default()) {
        Err(OptimizeError::Internal(m)) => {
            assert!(m.contains("rule R1-4") && m.contains("at program node D"), "{m}");
            assert_eq!(rule, "R1-4");
        }
        other => panic!("expected an internal error naming R1-4, got {other:?}"),
    }
}

#[test]
fn an_unsound_rule_is_left_out_with_a_warning() {
    let (rules, rule) = with_mutant("R1-4 judging the key map by its output arity");
    for sites in 1..=7 {
        let p = diag_of_product(sites);
        let answer = optimize_with(&p, &rules, &Limits::default(), OnRuleFailure::Retry)
            .unwrap_or_else(|e| panic!("{sites} sites: {e}"));
        assert_eq!(answer.warnings.len(), 1, "{sites} sites: {:?}", answer.warnings);
        let w = &answer.warnings[0];
        assert_eq!((w.code.as_str(), w.rule.as_str(), w.at.as_str()), ("rule_failed", rule, "D"), "{w:?}");
        assert!(w.message.contains("rule R1-4") && w.message.contains("merged"), "{}", w.message);
        assert!(!answer.rules_applied.iter().any(|r| r == rule), "{:?}", answer.rules_applied);
        // The answer is the one found without the rule from the start.
        let reference = optimize(&p, &without(rule), &Limits::default()).expect("optimizes without the rule");
        assert_eq!(answer.plan, reference.plan, "{sites} sites");
        assert_eq!(answer.cost.network_floats, reference.cost.network_floats);
        // And it computes diag(A·B).
        let inputs = tra_tests::random_inputs(&p, 7);
        let want = eval_tra(&p, &inputs).unwrap();
        for alt in &answer.alternatives {
            let got = eval_ia(&alt.plan, sites, &inputs, AnyLayout::Seeded(3)).unwrap().erased_outputs().unwrap();
            compare(&want["D"], &got["D"], 1e-9).unwrap_or_else(|e| panic!("{sites} sites, {}: {e}", alt.label));
        }
    }
}

#[test]
fn a_program_the_broken_rule_never_touches_gets_no_warning() {
    let (rules, _) = with_mutant("R1-4 judging the key map by its output arity");
    let p = tra_tests::matmul_program(3, 2, 3, 2, 4);
    let answer = optimize_with(&p, &rules, &Limits::default(), OnRuleFailure::Retry).unwrap();
    assert!(answer.warnings.is_empty(), "{:?}", answer.warnings);
    assert_eq!(answer.plan, optimize(&p, &tra_rules::all(), &Limits::default()).unwrap().plan);
}

#[test]
fn when_the_retry_fails_too_the_error_names_the_rule() {
    // Without lower-aggregate, an aggregation has no executable plan at all.
    let (rules, rule) = with_mutant("lower-aggregate without its shuffle");
    let p = tra_tests::program(
        r#"{
        "inputs": {"X": {"key_bounds": [3, 4], "array_bounds": [2, 2], "placement": {"hash": [1]}}},
        "nodes": {"S": {"op": "aggregate", "input": "X", "group_by": [0], "kernel": "matAdd"}},
        "outputs": ["S"], "cluster": {"sites": 3}
    }"#,
    );
    for on_failure in [OnRuleFailure::Retry, OnRuleFailure::Fail] {
        match optimize_with(&p, &rules, &Limits::default(), on_failure) {
            Err(OptimizeError::Internal(m)) => {
                assert!(m.contains(&format!("rule {rule}")), "{m}");
                if on_failure == OnRuleFailure::Retry {
                    assert!(m.contains(&format!("optimizing again without {rule}")), "{m}");
                }
            }
            other => panic!("{on_failure:?}: expected an internal error naming {rule}, got {other:?}"),
        }
    }
}

#[test]
fn a_rule_that_panics_in_its_applier_is_left_out_too() {
    // Not a failed merge: a bug inside the rule's own code (as once
    // `KeyFn::replicate` on an empty range in matmul-rmm). The rule is named;
    // the node is not known.
    use tra_rules::build::{Family, Rule, Rw};
    let broken = || {
        Rule::new("R2-6", Family::R2)
            .why("a rule whose applier panics")
            .rw(Rw::apply("(erase (ljoin ?jl ?jr ?k ?a ?b))", "…", |_, _, _| panic!("a bug in the applier"))
                .named("panics"))
            .build()
    };
    let rules: Vec<RuleDef> =
        tra_rules::all().into_iter().map(|r| if r.name == "R2-6" { broken() } else { r }).collect();
    let p = tra_tests::matmul_program(2, 3, 2, 2, 3);
    let answer = optimize_with(&p, &rules, &Limits::default(), OnRuleFailure::Retry).unwrap();
    assert_eq!(answer.warnings.len(), 1, "{:?}", answer.warnings);
    assert_eq!((answer.warnings[0].rule.as_str(), answer.warnings[0].at.as_str()), ("R2-6", ""));
    assert!(answer.warnings[0].message.contains("a bug in the applier"), "{:?}", answer.warnings[0]);
    assert_eq!(answer.plan, optimize(&p, &without("R2-6"), &Limits::default()).unwrap().plan);
    match optimize(&p, &rules, &Limits::default()) {
        Err(OptimizeError::Internal(m)) => assert!(m.contains("a bug in the applier"), "{m}"),
        other => panic!("expected an internal error, got {other:?}"),
    }
}
