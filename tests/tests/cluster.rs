//! Differential test of the cluster runtime: random TRA programs, the
//! Table-1 plan, the optimizer's choice and every alternative, run as timely
//! processes over loopback TCP (2 × 1, 3 × 1 and 2 × 2 sites) and on the
//! thread runtime. Physical outputs must be equal bit for bit, site by site
//! (replicated tuples included), floats moved equal per exchange and equal to
//! the optimizer's prediction, the fused matmuls the cluster runtime streams
//! exactly those the time model prices as streamed, and a plan that fails on
//! threads must fail with the same error on the cluster.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet};
use tra_executor::cluster::{run_loopback, ClusterRun};
use tra_executor::reference::AnyLayout;
use tra_executor::threads::{PhysValue, RunOptions, TRelation, ThreadRun, ThreadRuntime};
use tra_optimizer::check::{check_plan, check_program};
use tra_optimizer::compile::compile;
use tra_optimizer::cost::{plan_report, Weights};
use tra_optimizer::optimize::{optimize, Limits};
use tra_optimizer::{Cluster, Plan, Program};
use tra_tests::gen::{random_program, GenOptions};

fn inputs_for(p: &Program, seed: u64, rt: &ThreadRuntime<f64>) -> BTreeMap<String, TRelation<f64>> {
    tra_tests::random_inputs(p, seed).iter().map(|(n, r)| (n.clone(), TRelation::from_relation(r, rt.pool()))).collect()
}

/// A tuple as compared: site (none: replicated), key, shape, the bits of its values.
type Row = (Option<usize>, Vec<u32>, Vec<usize>, Vec<u64>);

fn same(tag: &str, want: &PhysValue<f64>, got: &PhysValue<f64>) -> Result<(), String> {
    let list =
        |v: &PhysValue<f64>| -> Vec<Row> {
            let mut out = Vec::new();
            for (s, l) in v.sites.iter().enumerate() {
                out.extend(l.iter().map(|t| {
                    (Some(s), t.0.clone(), t.1.shape().to_vec(), t.1.as_slice().iter().map(|x| x.to_bits()).collect())
                }));
            }
            out.extend(v.everywhere.iter().map(|t| {
                (None, t.0.clone(), t.1.shape().to_vec(), t.1.as_slice().iter().map(|x| x.to_bits()).collect())
            }));
            out
        };
    let (w, g) = (list(want), list(got));
    if w.len() != g.len() {
        return Err(format!("{tag}: {} tuples on threads, {} on the cluster", w.len(), g.len()));
    }
    for (a, b) in w.iter().zip(&g) {
        if a != b {
            return Err(format!("{tag}: tuple {:?} at {:?} differs from {:?} at {:?}", a.1, a.0, b.1, b.0));
        }
    }
    Ok(())
}

/// Runs `plan` on threads and on the cluster and compares them; the number
/// of fused matmuls the cluster runtime streamed.
fn check(
    tag: &str,
    plan: &Plan,
    processes: usize,
    workers: usize,
    inputs: &BTreeMap<String, TRelation<f64>>,
    layout: AnyLayout,
    rt: &ThreadRuntime<f64>,
) -> usize {
    let sites = processes * workers;
    let want: Result<ThreadRun<f64>, String> =
        rt.run(plan, sites, inputs, &RunOptions { layout, ..RunOptions::default() }).map_err(|e| e.to_string());
    let got: Result<ClusterRun<f64>, String> =
        run_loopback(plan, processes, workers, inputs, layout).map_err(|e| e.message);
    match (want, got) {
        (Ok(want), Ok(got)) => {
            for o in &plan.outputs {
                same(&format!("{tag}, output {o}"), &want.outputs[o], &got.outputs[o])
                    .unwrap_or_else(|e| panic!("{e}\nplan:\n{}", plan.to_sexpr()));
            }
            assert_eq!(want.floats_moved, got.floats_moved, "{tag}: floats moved\n{}", plan.to_sexpr());
            let typed = check_plan(plan, sites).unwrap();
            let report = plan_report(plan, &typed, sites, Weights { network: 1.0, compute: 0.0 });
            for (n, m) in &got.floats_moved {
                assert_eq!(report[n].network_floats, *m, "{tag}: {n}: measured floats differ from the prediction");
            }
            // The time model prices a streamed pipeline by overlap: it must
            // be one the runtime really streams, and the other way round.
            let priced: BTreeSet<String> =
                tra_optimizer::time::streamed_pipelines(plan).into_iter().map(|p| p.aggregate).collect();
            let ran: BTreeSet<String> = got.nodes.iter().filter(|n| n.streamed).map(|n| n.name.clone()).collect();
            assert_eq!(
                priced,
                ran,
                "{tag}: the time model prices these as streamed (left), the cluster runtime streamed those (right)\n{}",
                plan.to_sexpr()
            );
            ran.len()
        }
        (Err(w), Err(g)) => {
            assert_eq!(w, g, "{tag}: different errors\n{}", plan.to_sexpr());
            0
        }
        (Ok(_), Err(e)) => panic!("{tag}: the cluster fails: {e}\n{}", plan.to_sexpr()),
        (Err(e), Ok(_)) => panic!("{tag}: threads fail ({e}), the cluster does not\n{}", plan.to_sexpr()),
    }
}

#[test]
fn random_programs_on_the_cluster_equal_threads() {
    let rt = ThreadRuntime::<f64>::with_threads(1);
    let rules = tra_rules::all();
    let limits = Limits { nodes: 20_000, time: std::time::Duration::from_secs(5), ..Limits::default() };
    let (mut runs, mut streamed) = (0, 0);
    for seed in 0..100u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let p = random_program(&mut rng, GenOptions { max_nodes: if seed % 3 == 0 { 8 } else { 5 }, sites: 3 });
        let inputs = inputs_for(&p, seed, &rt);
        let (processes, workers) = [(2, 1), (3, 1), (2, 2)][seed as usize % 3];
        let sites = processes * workers;
        let mut q = p.clone();
        q.cluster = Some(Cluster { sites, ..p.cluster() });
        let layout = AnyLayout::Seeded(seed ^ 5);
        let typed = check_program(&q).unwrap();
        streamed += check(
            &format!("seed {seed}, {processes}×{workers}, Table-1 plan"),
            &compile(&q, &typed),
            processes,
            workers,
            &inputs,
            layout,
            &rt,
        );
        let answer = optimize(&q, &rules, &limits).unwrap();
        for (i, alt) in answer.alternatives.iter().enumerate() {
            streamed += check(
                &format!("seed {seed}, {processes}×{workers}, alternative {i} ({})", alt.label),
                &alt.plan,
                processes,
                workers,
                &inputs,
                layout,
                &rt,
            );
            runs += 1;
        }
    }
    assert!(runs >= 24);
    eprintln!("{runs} alternatives run, {streamed} streamed fused matmuls");
}

/// The matmul shapes of the benchmarks (square, a common large dimension,
/// two large dimensions, thin, hashed inputs), small: every alternative on
/// the cluster, where the streamed pipelines must be the ones the time model
/// prices by overlap (`check`), and some must stream.
#[test]
fn every_matmul_alternative_streams_what_the_time_model_prices_as_streamed() {
    let rt = ThreadRuntime::<f64>::with_threads(1);
    let rules = tra_rules::all();
    let shapes: [([u32; 2], [u32; 2], &str); 5] = [
        ([4, 4], [4, 4], ""),
        ([2, 8], [8, 2], ""),
        ([8, 2], [2, 8], ""),
        ([8, 4], [4, 1], ""),
        ([2, 6], [6, 2], r#", "placement": {"hash": [1]}"#),
    ];
    let mut streamed = 0;
    for (i, (x, y, placement)) in shapes.iter().enumerate() {
        for (processes, model) in [(2, "network"), (3, "time")] {
            let p = Program::from_json(&format!(
                r#"{{"inputs": {{"X": {{"key_bounds": {x:?}, "array_bounds": [3, 2]{placement}}},
                                 "Y": {{"key_bounds": {y:?}, "array_bounds": [2, 3]{placement}}}}},
                    "nodes": {{"XY": {{"op": "join", "left": "X", "right": "Y", "left_keys": [1],
                                       "right_keys": [0], "kernel": "matMul"}},
                               "Z": {{"op": "aggregate", "input": "XY", "group_by": [0, 2], "kernel": "matAdd"}}}},
                    "outputs": ["Z"], "cluster": {{"sites": {processes}, "cost_model": "{model}"}}}}"#
            ))
            .unwrap();
            let inputs = inputs_for(&p, i as u64, &rt);
            let answer = optimize(&p, &rules, &Limits::default()).unwrap();
            for alt in &answer.alternatives {
                let tag = format!("shape {x:?}·{y:?}{placement}, {processes} processes, {}", alt.label);
                streamed += check(&tag, &alt.plan, processes, 1, &inputs, AnyLayout::Seeded(i as u64), &rt);
            }
        }
    }
    assert!(streamed >= 5, "only {streamed} alternatives streamed: the comparison would prove little");
}
