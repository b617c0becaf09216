//! Every registered rule fires on a program designed for it, and the full
//! rule set saturates on each of these programs without a merge panicking.

mod common;
use common::programs::program_for;
use common::{run, saturated};

#[test]
fn every_rule_fires_and_saturates() {
    let mut failures = Vec::new();
    for name in tra_rules::names() {
        let r = run(&program_for(name));
        if r.fired(name) == 0 {
            failures.push(format!("{name} did not fire (applied: {:?})", r.applied));
        }
        if !saturated(&r.stop) || !saturated(&r.lower_stop) {
            failures.push(format!("{name}: no saturation ({:?}, {} nodes)", r.stop, r.nodes()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
