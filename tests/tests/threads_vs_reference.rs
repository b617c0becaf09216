//! Differential test of the thread executor: random TRA programs, optimized
//! with every rule at 1–7 sites; the chosen plan and every alternative run on
//! the thread runtime and on the reference IA interpreter. The physical
//! outputs must agree (same sites, same keys, blocks within 1e-9), the erased
//! outputs must equal the TRA interpreter's, and the floats every shuffle and
//! broadcast moved must equal the optimizer's prediction exactly, node by
//! node and in total. Table-1 plans (no rewriting) are checked the same way.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use tra_executor::reference::{self, compare, eval_tra, AnyLayout, PhysRelation, Relation};
use tra_executor::threads;
use tra_optimizer::check::{check_plan, check_program};
use tra_optimizer::compile::compile;
use tra_optimizer::cost::{plan_report, Weights};
use tra_optimizer::optimize::{optimize, Limits};
use tra_optimizer::{Cluster, Plan};
use tra_tests::gen::{random_program, GenOptions};

fn compare_phys(expected: &PhysRelation, actual: &PhysRelation) -> Result<(), String> {
    let sites = |r: &PhysRelation| r.tuples.iter().map(|t| (t.site, t.key.clone())).collect::<Vec<_>>();
    if sites(expected) != sites(actual) {
        return Err(format!("tuples differ:\nreference {:?}\nthreads   {:?}", sites(expected), sites(actual)));
    }
    for (e, a) in expected.tuples.iter().zip(&actual.tuples) {
        let one = |b: &reference::Block| Relation { tuples: [(e.key.clone(), b.clone())].into_iter().collect() };
        compare(&one(&e.block), &one(&a.block), 1e-9).map_err(|m| format!("{}: {m}", e.site))?;
    }
    Ok(())
}

/// Run one plan both ways and check everything; `predicted_total` is the
/// optimizer's figure for the plan, when there is one.
fn check_run(
    tag: &str,
    plan: &Plan,
    sites: usize,
    inputs: &BTreeMap<String, Relation>,
    tra: &BTreeMap<String, Relation>,
    predicted_total: Option<u64>,
    seed: u64,
) {
    let typed =
        check_plan(plan, sites).unwrap_or_else(|e| panic!("{tag}: the plan does not check: {e}\n{}", plan.to_sexpr()));
    let layout = AnyLayout::Seeded(seed ^ sites as u64);
    let want = reference::eval_ia(plan, sites, inputs, layout)
        .unwrap_or_else(|e| panic!("{tag}: reference: {e}\n{}", plan.to_sexpr()));
    let got = threads::eval_ia(plan, sites, inputs, layout)
        .unwrap_or_else(|e| panic!("{tag}: threads: {e}\n{}", plan.to_sexpr()));
    for o in &plan.outputs {
        compare_phys(&want.outputs[o], &got.outputs[o])
            .unwrap_or_else(|e| panic!("{tag}, output {o}: physical outputs differ: {e}\nplan:\n{}", plan.to_sexpr()));
    }
    let erased = got.erased_outputs().unwrap_or_else(|e| panic!("{tag}: {e}"));
    for (o, v) in tra {
        compare(v, &erased[o], 1e-9).unwrap_or_else(|e| panic!("{tag}, output {o}: {e}\nplan:\n{}", plan.to_sexpr()));
    }
    let report = plan_report(plan, &typed, sites, Weights { network: 1.0, compute: 0.0 });
    let mut total = 0;
    for (name, r) in &report {
        if r.op == "shuffle" || r.op == "broadcast" {
            assert_eq!(got.floats_moved[name], r.network_floats, "{tag}: floats moved by {name}\n{}", plan.to_sexpr());
            assert_eq!(want.floats_moved[name], r.network_floats, "{tag}: reference floats moved by {name}");
            total += r.network_floats;
        }
    }
    assert_eq!(got.total_floats_moved(), total, "{tag}: total floats moved");
    if let Some(p) = predicted_total {
        assert_eq!(
            got.total_floats_moved(),
            p,
            "{tag}: measured floats differ from the optimizer's prediction\n{}",
            plan.to_sexpr()
        );
    }
}

fn check_program_all_sites(seed: u64, max_nodes: usize) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let p = random_program(&mut rng, GenOptions { max_nodes, sites: 3 });
    let inputs = tra_tests::random_inputs(&p, seed);
    let tra = eval_tra(&p, &inputs).unwrap_or_else(|e| panic!("seed {seed}: TRA: {e}\n{}", p.to_sexpr()));
    let limits = Limits { nodes: 20_000, time: std::time::Duration::from_secs(5), ..Limits::default() };
    let rules = tra_rules::all();
    for sites in 1..=7 {
        let mut q = p.clone();
        q.cluster = Some(Cluster { sites, ..p.cluster() });
        // Table 1, no rewriting.
        let typed = check_program(&q).unwrap();
        let table1 = compile(&q, &typed);
        check_run(&format!("seed {seed}, {sites} sites, Table-1 plan"), &table1, sites, &inputs, &tra, None, seed);
        // The optimizer's choice and every alternative.
        let answer = optimize(&q, &rules, &limits)
            .unwrap_or_else(|e| panic!("seed {seed}, {sites} sites: optimize: {e}\n{}", p.to_sexpr()));
        assert_eq!(answer.alternatives[0].cost.network_floats, answer.cost.network_floats);
        check_run(
            &format!("seed {seed}, {sites} sites, chosen plan"),
            &answer.plan,
            sites,
            &inputs,
            &tra,
            Some(answer.cost.network_floats),
            seed,
        );
        for (i, alt) in answer.alternatives.iter().enumerate() {
            let tag = format!("seed {seed}, {sites} sites, alternative {i} ({})", alt.label);
            check_run(&tag, &alt.plan, sites, &inputs, &tra, Some(alt.cost.network_floats), seed);
        }
    }
}

#[test]
fn random_programs_on_threads_agree_with_the_reference() {
    for seed in 0..100 {
        check_program_all_sites(seed, if seed % 3 == 0 { 9 } else { 6 });
    }
}

#[test]
fn matmul_workloads_measured_floats_equal_predicted() {
    for (i, j, k, sites) in [(4, 4, 4, 2), (2, 6, 2, 3), (6, 1, 6, 4), (3, 3, 3, 7), (4, 4, 4, 1)] {
        let p = tra_tests::matmul_program(i, j, k, 3, sites);
        let inputs = tra_tests::random_inputs(&p, 11);
        let tra = eval_tra(&p, &inputs).unwrap();
        let answer = optimize(&p, &tra_rules::all(), &Limits::default()).unwrap();
        check_run(
            &format!("matmul {i}x{j}x{k} on {sites}"),
            &answer.plan,
            sites,
            &inputs,
            &tra,
            Some(answer.cost.network_floats),
            3,
        );
        for alt in &answer.alternatives {
            check_run(
                &format!("matmul {i}x{j}x{k} on {sites}: {}", alt.label),
                &alt.plan,
                sites,
                &inputs,
                &tra,
                Some(alt.cost.network_floats),
                3,
            );
        }
    }
}

/// The workloads of `examples/` (shrunk to small key bounds and blocks, as
/// `tra_tests::soundness::workloads` shrinks them): every alternative the
/// optimizer gives runs on threads, computes the TRA program's result, and
/// moves exactly the floats the optimizer predicted.
#[test]
fn example_workloads_measured_floats_equal_predicted() {
    let rules = tra_rules::all();
    let examples = tra_tests::soundness::workloads::shrunk_examples();
    assert!(examples.len() >= 4);
    for (name, p) in examples {
        let sites = p.cluster().sites;
        let inputs = tra_tests::random_inputs(&p, 3);
        let tra = eval_tra(&p, &inputs).unwrap_or_else(|e| panic!("{name}: {e}"));
        let answer = optimize(&p, &rules, &Limits::default()).unwrap_or_else(|e| panic!("{name}: optimize: {e}"));
        check_run(
            &format!("{name}, chosen plan"),
            &answer.plan,
            sites,
            &inputs,
            &tra,
            Some(answer.cost.network_floats),
            1,
        );
        for alt in &answer.alternatives {
            let tag = format!("{name}, {}", alt.label);
            check_run(&tag, &alt.plan, sites, &inputs, &tra, Some(alt.cost.network_floats), 1);
        }
    }
}
