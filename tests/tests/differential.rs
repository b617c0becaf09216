//! Differential test: random TRA programs → optimize with every rule → run the
//! chosen plan and every alternative on the reference IA interpreter at the
//! program's site count → compare with direct interpretation of the TRA
//! program. Also checks that the measured floats moved equal the prediction.
//!
//! `TRA_DIFF_CASES` sets the number of programs (default 200).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tra_executor::reference::{compare, eval_ia, eval_tra, AnyLayout};
use tra_optimizer::optimize::{optimize, Limits};
use tra_tests::gen::{random_program, GenOptions};

fn cases() -> u64 {
    std::env::var("TRA_DIFF_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(200)
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
