//! A limit that stops an optimization is reported as a limit wherever it
//! strikes: while the program is typed, added to the e-graph, saturated,
//! extracted or scored. Never a crash, never an "internal error" (which
//! tells the user that tra has a bug).
//!
//! The deadline's and the key budget's checks sit deep in the type functions
//! (`crate::deadline`), so each stage that calls them must turn what they
//! report into `limit_exceeded`. Two such stages did not: a deadline passing
//! while the program's nodes were added to the e-graph unwound out of the
//! optimizer (`tra optimize` exited with status 101 and no message, the
//! server answered 500), and one passing while a candidate plan was checked
//! for scoring was "internal error: an extracted plan does not check".

use std::time::Duration;
use tra_optimizer::deadline::{self, Deadline};
use tra_optimizer::optimize::{optimize_with, Limits, OnRuleFailure, OptimizeError};
use tra_optimizer::time::CostModel;
use tra_optimizer::{ErrorCode, Program};

/// The outcome is an answer or a limit; the message of anything else.
fn answer_or_limit(r: Result<tra_optimizer::optimize::OptimizeAnswer, OptimizeError>) -> Result<(), String> {
    match r {
        Ok(_) | Err(OptimizeError::Limit(_)) => Ok(()),
        Err(OptimizeError::Program(e)) if e.code == ErrorCode::LimitExceeded => Ok(()),
        Err(e) => Err(format!("{e:?}")),
    }
}

/// A diagonal of a sum whose filter keeps 512 of 262 144 keys: typing it
/// enumerates keys (and checks the deadline), and its inputs' per-site
/// layouts are megabytes.
const DIAG: &str = r#"{
    "inputs": {"X": {"key_bounds": [512, 512], "array_bounds": [2, 2]},
               "Y": {"key_bounds": [512, 512], "array_bounds": [2, 2]}},
    "nodes": {"S": {"op": "join", "left": "X", "right": "Y", "left_keys": [0, 1], "right_keys": [0, 1], "kernel": "matAdd"},
              "F": {"op": "filter", "input": "S", "predicate": "k0 == k1"},
              "Z": {"op": "rekey", "input": "F", "key": "[k0]"}},
    "outputs": ["Z"], "cluster": {"sites": 4, "cost_model": "time"}}"#;

/// A key budget spent by the per-site layouts of the plans being scored
/// (the filter's own key sets are far smaller) is a limit naming the budget.
#[test]
fn a_key_budget_spent_while_plans_are_scored_is_a_limit() {
    let p = tra_tests::program(DIAG);
    let rules = tra_rules::all();
    let mut in_extraction = 0;
    for budget in [256 << 10, 1 << 20, 4 << 20] {
        let d = Deadline::after(Duration::from_secs(600), "a test's time")
            .with_key_budget(budget, format!("a test's budget of {budget} bytes"));
        let r = deadline::within(d, || optimize_with(&p, &rules, &Limits::default(), OnRuleFailure::Fail));
        match r {
            Err(OptimizeError::Limit(m)) => {
                assert!(m.contains("a test's budget"), "{budget}: {m}");
                // Stopped in extraction under `time`, the message says why
                // that model costs more, and which one costs less.
                if m.contains("during extraction") {
                    assert!(m.contains("under the time model") && m.contains(r#""cost_model": "network""#), "{m}");
                    in_extraction += 1;
                }
            }
            Err(e) => panic!("{budget} bytes: expected a limit, got {e:?}"),
            Ok(a) => panic!("{budget} bytes: expected a limit, got an answer costing {:?}", a.cost),
        }
    }
    assert!(in_extraction > 0, "no budget was spent in extraction");
}

/// Deadlines from nothing to more than enough, on programs that enumerate
/// keys, under both cost models: each optimization answers or stops at a
/// limit. (Which stage a deadline lands in depends on the machine's speed;
/// the claim holds for every one, so this cannot fail by timing alone.)
#[test]
fn a_deadline_anywhere_is_a_limit() {
    let rules = tra_rules::all();
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples");
    let mut programs = vec![("diag".to_string(), tra_tests::program(DIAG))];
    for name in ["diag-x-plus-y", "attention-head", "ffnn-google-speech"] {
        let text = std::fs::read_to_string(format!("{examples}/{name}.json")).unwrap();
        programs.push((name.to_string(), Program::from_json(&text).unwrap()));
    }
    let mut failures = Vec::new();
    for (name, program) in &programs {
        for model in [CostModel::Network, CostModel::Time] {
            let mut p = program.clone();
            let mut cluster = p.cluster();
            cluster.cost_model = model;
            p.cluster = Some(cluster);
            for us in [0, 50, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000] {
                let d = Deadline::after(Duration::from_micros(us), format!("a limit of {us} µs"));
                let r = deadline::within(d, || optimize_with(&p, &rules, &Limits::default(), OnRuleFailure::Retry));
                let answered = r.is_ok();
                if let Err(m) = answer_or_limit(r) {
                    failures.push(format!("{name}, {model:?}, {us} µs: {m}"));
                }
                if answered {
                    break;
                }
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
