//! Larger programs: one SGD step of a two-layer network,
//! a distance computation with filters and maps, a long matmul chain. The full
//! rule set must saturate on each without a merge panicking, and every output
//! must get an executable member. The optimizer's driver (default scheduler,
//! DAG extraction) runs on every test program with these rules.

mod common;
use common::programs::{chain, diag, distances, ffnn, frontier_mismatch, holes, program_for};
use common::{run, saturated};

fn check(name: &str, json: &str, outputs: &[&str]) {
    let t = std::time::Instant::now();
    let r = run(json);
    assert!(saturated(&r.stop), "{name}: {:?} after {} iterations, {} nodes", r.stop, r.iterations, r.nodes());
    for o in outputs {
        assert!(!r.search_root(o, "(erase ?p)").is_empty(), "{name}: output {o} has no executable member");
    }
    eprintln!("{name}: {} iterations, {} nodes, {:?}", r.iterations, r.nodes(), t.elapsed());
}

#[test]
fn sgd_step_of_a_two_layer_network() {
    for sites in [1, 3, 8] {
        check(&format!("ffnn at {sites} sites"), &ffnn(sites), &["W1n", "W2n"]);
    }
}

#[test]
fn distances_with_filters_and_maps() {
    for sites in [1, 4, 7] {
        check(&format!("distances at {sites} sites"), &distances(sites), &["out"]);
    }
}

#[test]
fn chain_of_twelve_matmuls() {
    check("chain of 12 matmuls", &chain(12, 4), &["m12"]);
}

#[test]
fn relations_with_holes() {
    for sites in [1, 2, 5] {
        check(&format!("holes at {sites} sites"), &holes(sites), &["r2", "zd"]);
        check(&format!("frontier mismatch at {sites} sites"), &frontier_mismatch(sites), &["r2"]);
    }
}

#[test]
fn the_optimizer_driver_runs_on_every_test_program() {
    use tra_optimizer::optimize::{optimize, Limits};
    let mut programs: Vec<(String, String)> =
        tra_rules::names().into_iter().map(|n| (format!("program for {n}"), program_for(n))).collect();
    programs.push(("diag".into(), diag("")));
    for sites in [1, 3] {
        programs.push((format!("ffnn at {sites} sites"), ffnn(sites)));
        programs.push((format!("distances at {sites} sites"), distances(sites)));
        programs.push((format!("holes at {sites} sites"), holes(sites)));
    }
    programs.push(("chain of 6 matmuls".into(), chain(6, 5)));
    for (name, json) in programs {
        let p = tra_optimizer::Program::from_json(&json).expect("program");
        let answer = optimize(&p, &tra_rules::all(), &Limits::default())
            .unwrap_or_else(|e| panic!("{name}: the optimizer failed: {e}"));
        assert_eq!(answer.stats.stop_reason, "saturated", "{name}");
    }
}
