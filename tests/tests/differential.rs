//! Differential test: random TRA programs → optimize with every rule → run the
//! chosen plan and every alternative on the reference IA interpreter at the
//! program's site count → compare with direct interpretation of the TRA
//! program. Also checks that the measured floats moved equal the prediction.
//! Composite programs as users write them (`tra_tests::gen::composite_program`:
//! diag, transpose and row sums of products, `relu(X·Y + Z)`, chains bracketed
//! at random, block masks) run on both executors, the thread runtime and the
//! reference interpreter, against the TRA interpreter; so do the programs
//! that once crashed the optimizer (`diag(A·B)` and its minimal form), on
//! every site count from 1 to 7.
//!
//! `TRA_DIFF_CASES` sets the number of random programs (default 200) and
//! `TRA_COMPOSITE_CASES` of composite ones (default 60); `TRA_SOAK=1` makes
//! both ten times larger.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use tra_executor::reference::{compare, eval_ia, eval_tra, AnyLayout, Relation};
use tra_optimizer::optimize::{optimize, Limits};
use tra_optimizer::{Cluster, Plan, Program};
use tra_tests::gen::{composite_program, random_program, GenOptions};

fn soak() -> u64 {
    if std::env::var_os("TRA_SOAK").is_some() {
        10
    } else {
        1
    }
}

fn cases() -> u64 {
    std::env::var("TRA_DIFF_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(200) * soak()
}

fn composite_cases() -> u64 {
    std::env::var("TRA_COMPOSITE_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(60) * soak()
}

/// Run `plan` on the reference interpreter and on the thread runtime: both
/// erased outputs equal the TRA interpreter's `expected`, both move exactly
/// `predicted` floats.
fn check_both_executors(
    tag: &str,
    program: &Program,
    plan: &Plan,
    inputs: &BTreeMap<String, Relation>,
    expected: &BTreeMap<String, Relation>,
    predicted: u64,
    seed: u64,
) {
    let sites = program.cluster().sites;
    let layout = AnyLayout::Seeded(seed);
    for (executor, run) in [
        ("reference", eval_ia(plan, sites, inputs, layout)),
        ("threads", tra_executor::threads::eval_ia(plan, sites, inputs, layout)),
    ] {
        let context = || {
            format!("{tag}, {executor}, {sites} sites\nprogram:\n{}\nplan:\n{}", program.to_sexpr(), plan.to_sexpr())
        };
        let run = run.unwrap_or_else(|e| panic!("{}: {e}", context()));
        let got = run.erased_outputs().unwrap_or_else(|e| panic!("{}: {e}", context()));
        for o in &program.outputs {
            compare(&expected[o], &got[o], 1e-9).unwrap_or_else(|e| panic!("{}\noutput {o}: {e}", context()));
        }
        assert_eq!(run.total_floats_moved(), predicted, "{}: floats moved differ from the prediction", context());
    }
}

/// Optimize (strict: a rule failure fails the test) and run the chosen plan
/// and every alternative on both executors.
fn check_program_everywhere(tag: &str, p: &Program, seed: u64) -> usize {
    let inputs = tra_tests::random_inputs(p, seed.wrapping_mul(31));
    let expected = eval_tra(p, &inputs).unwrap_or_else(|e| panic!("{tag}: TRA interpreter: {e}\n{}", p.to_sexpr()));
    let answer = optimize(p, &tra_rules::all(), &Limits::default())
        .unwrap_or_else(|e| panic!("{tag}: optimize failed: {e}\n{}", p.to_sexpr()));
    assert!(answer.warnings.is_empty(), "{tag}: {:?}", answer.warnings);
    assert_eq!(answer.plan, answer.alternatives[0].plan, "the chosen plan is alternatives[0]");
    for alt in &answer.alternatives {
        let tag = format!("{tag}, {}", alt.label);
        check_both_executors(&tag, p, &alt.plan, &inputs, &expected, alt.cost.network_floats, seed);
    }
    answer.alternatives.len()
}

#[test]
fn composite_programs_agree_on_both_executors() {
    let mut plans = 0;
    for seed in 0..composite_cases() {
        let mut rng = ChaCha8Rng::seed_from_u64(0xc0_3905 ^ seed);
        let sites = rng.random_range(1..=7);
        let p = composite_program(&mut rng, sites);
        plans += check_program_everywhere(&format!("composite seed {seed}"), &p, seed);
    }
    assert!(plans as u64 >= composite_cases());
}

#[test]
fn programs_that_crashed_the_optimizer_run_on_every_site_count() {
    for (name, json) in [("diag(A·B)", tra_tests::DIAG_OF_PRODUCT), ("minimal form", tra_tests::MINIMAL_FORM)] {
        let base = tra_tests::program(json);
        for sites in 1..=7 {
            let mut p = base.clone();
            p.cluster = Some(Cluster { sites, ..base.cluster() });
            let plans = check_program_everywhere(&format!("{name} on {sites} sites"), &p, sites as u64);
            assert!(plans >= 1);
        }
    }
}

#[test]
fn optimized_plans_agree_with_the_tra_interpreter() {
    let rules = tra_rules::all();
    let mut plans_run = 0;
    for seed in 0..cases() {
        let mut rng = ChaCha8Rng::seed_from_u64(0xd1ff ^ seed);
        let sites = rng.random_range(1..=7);
        let p = random_program(&mut rng, GenOptions { max_nodes: 6, sites });
        let inputs = tra_tests::random_inputs(&p, seed.wrapping_mul(31));
        let expected = eval_tra(&p, &inputs).unwrap();
        let answer = optimize(&p, &rules, &Limits::default())
            .unwrap_or_else(|e| panic!("seed {seed}: optimize failed: {e}\n{}", p.to_sexpr()));
        assert_eq!(answer.stats.stop_reason, "saturated", "seed {seed}\n{}", p.to_sexpr());
        assert_eq!(answer.plan, answer.alternatives[0].plan, "the chosen plan is alternatives[0]");
        for alt in &answer.alternatives {
            let run = eval_ia(&alt.plan, sites, &inputs, AnyLayout::Seeded(seed))
                .unwrap_or_else(|e| panic!("seed {seed}, {}: {e}\n{}", alt.label, alt.plan.to_sexpr()));
            let got = run.erased_outputs().unwrap_or_else(|e| {
                panic!(
                    "seed {seed}, {} at {sites} sites: {e}\nprogram:\n{}\nplan:\n{}",
                    alt.label,
                    p.to_sexpr(),
                    alt.plan.to_sexpr()
                )
            });
            for o in &p.outputs {
                compare(&expected[o], &got[o], 1e-9).unwrap_or_else(|e| {
                    panic!(
                        "seed {seed}, {} at {sites} sites, output {o}: {e}\nprogram:\n{}\nplan:\n{}\nrules: {:?}",
                        alt.label,
                        p.to_sexpr(),
                        alt.plan.to_sexpr(),
                        answer.rules_applied
                    )
                });
            }
            assert_eq!(
                run.total_floats_moved(),
                alt.cost.network_floats,
                "seed {seed}, {}: measured floats moved differ from the prediction\n{}",
                alt.label,
                alt.plan.to_sexpr()
            );
            plans_run += 1;
        }
    }
    assert!(plans_run as u64 >= cases(), "every program runs at least its chosen plan");
}

/// The workloads of `examples/`, shrunk to small key bounds and blocks
/// (`tra_tests::soundness::workloads`): every alternative plan the optimizer
/// gives computes the TRA program's result and moves the predicted floats.
#[test]
fn shrunk_workloads_agree_with_the_tra_interpreter() {
    let rules = tra_rules::all();
    for (name, p) in tra_tests::soundness::workloads::shrunk_examples() {
        let sites = p.cluster().sites;
        let inputs = tra_tests::random_inputs(&p, 3 * 31);
        let expected = eval_tra(&p, &inputs).unwrap_or_else(|e| panic!("{name}: {e}"));
        let answer =
            optimize(&p, &rules, &Limits::default()).unwrap_or_else(|e| panic!("{name}: optimize failed: {e}"));
        for alt in &answer.alternatives {
            for layout in [AnyLayout::Seeded(1), AnyLayout::RoundRobin] {
                let run = eval_ia(&alt.plan, sites, &inputs, layout)
                    .unwrap_or_else(|e| panic!("{name}, {}: {e}\n{}", alt.label, alt.plan.to_sexpr()));
                let got = run
                    .erased_outputs()
                    .unwrap_or_else(|e| panic!("{name}, {}: {e}\n{}", alt.label, alt.plan.to_sexpr()));
                for o in &p.outputs {
                    compare(&expected[o], &got[o], 1e-9).unwrap_or_else(|e| {
                        panic!("{name}, {}, output {o}: {e}\nplan:\n{}", alt.label, alt.plan.to_sexpr())
                    });
                }
                assert_eq!(run.total_floats_moved(), alt.cost.network_floats, "{name}, {}: floats moved", alt.label);
            }
        }
    }
}
