//! Per-site loads (`tra_optimizer::loads`) against what the reference
//! interpreter does: random programs and composite ones are optimized under
//! the time model, and every alternative plan runs on the reference
//! interpreter; the bytes each site sends and receives in every exchange, and
//! the kernel flops each site computes in every local operator, counted from
//! the sites and block shapes of the tuples the run actually held, equal the
//! optimizer's prediction exactly.
//!
//! `TRA_LOADS_CASES` sets the number of random programs (default 80).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use tra_executor::reference::{eval_ia, AnyLayout, IaRun, PhysRelation, Site};
use tra_optimizer::check::check_plan;
use tra_optimizer::loads::{plan_loads, SiteLoad};
use tra_optimizer::optimize::{optimize, Limits};
use tra_optimizer::time::CostModel;
use tra_optimizer::{Cluster, IaOp, Plan, Program};
use tra_tests::gen::{composite_program, random_program, GenOptions};

const BYTES_PER_FLOAT: u64 = 4;

fn cases() -> u64 {
    std::env::var("TRA_LOADS_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(80)
}

/// The tuples of a value as `(key, site)` with their block's floats and shape.
fn tuples(r: &PhysRelation) -> impl Iterator<Item = (&Vec<u32>, Site, u64, &[usize])> {
    r.tuples.iter().map(|t| (&t.key, t.site, t.block.len() as u64, t.block.shape()))
}

fn on(loads: &mut [SiteLoad], site: Site, f: impl Fn(&mut SiteLoad)) {
    match site {
        Site::At(s) => f(&mut loads[s]),
        Site::Everywhere => loads.iter_mut().for_each(f),
    }
}

/// Per-site loads of every operator, counted from the reference run's values.
fn measured(plan: &Plan, run: &IaRun, sites: usize) -> BTreeMap<String, Vec<SiteLoad>> {
    let mut out = BTreeMap::new();
    for (name, op) in &plan.nodes {
        let mut loads = vec![SiteLoad::default(); sites];
        let value = &run.values[name];
        match op {
            IaOp::Shuffle { input, .. } => {
                // Every output tuple came from an input copy of its key; the
                // copies a key had on other sites crossed links (a replicated
                // copy was already there). Keys of a partial aggregate
                // appear once per site: pair them in order.
                let mut copies: BTreeMap<&Vec<u32>, Vec<(Site, u64)>> = BTreeMap::new();
                for (k, s, n, _) in tuples(&run.values[input]) {
                    copies.entry(k).or_default().push((s, n));
                }
                let mut dests: BTreeMap<&Vec<u32>, Vec<Site>> = BTreeMap::new();
                for (k, s, _, _) in tuples(value) {
                    dests.entry(k).or_default().push(s);
                }
                for (k, from) in copies {
                    let to = &dests[k];
                    assert_eq!(to.len(), from.len(), "{name}: a shuffle keeps every copy of {k:?}");
                    for ((src, n), dst) in from.iter().zip(to) {
                        let (Site::At(a), Site::At(b)) = (*src, *dst) else { continue };
                        if a != b {
                            loads[a].bytes_out += n * BYTES_PER_FLOAT;
                            loads[b].bytes_in += n * BYTES_PER_FLOAT;
                        }
                    }
                }
            }
            IaOp::Broadcast { input } => {
                for (_, s, n, _) in tuples(&run.values[input]) {
                    if let Site::At(a) = s {
                        for (b, l) in loads.iter_mut().enumerate() {
                            if b == a {
                                l.bytes_out += (sites as u64 - 1) * n * BYTES_PER_FLOAT;
                            } else {
                                l.bytes_in += n * BYTES_PER_FLOAT;
                            }
                        }
                    }
                }
            }
            IaOp::LocalJoin { left, right, kernel, .. } => {
                let l = run.values[left].tuples.first().map(|t| t.block.shape().to_vec());
                let r = run.values[right].tuples.first().map(|t| t.block.shape().to_vec());
                if let (Some(l), Some(r)) = (l, r) {
                    let per = kernel.flops(&[&l, &r]);
                    for (_, s, _, _) in tuples(value) {
                        on(&mut loads, s, |x| x.flops += per);
                    }
                }
            }
            IaOp::LocalAggregate { input, group_by, kernel } => {
                let x = &run.values[input];
                let Some(shape) = x.tuples.first().map(|t| t.block.shape().to_vec()) else { continue };
                let concat = tra_optimizer::types::concat_params(kernel).is_some();
                let per = if concat { 0 } else { kernel.flops(&[&shape, &shape]) };
                // Each output tuple folded the input tuples of its group on its site.
                for (g, s, _, _) in tuples(value) {
                    let n = tuples(x)
                        .filter(|(k, ks, _, _)| {
                            group_by.iter().map(|&d| k[d]).eq(g.iter().copied())
                                && (*ks == s || *ks == Site::Everywhere)
                        })
                        .count() as u64;
                    on(&mut loads, s, |l| l.flops += (n - 1) * per);
                }
            }
            IaOp::LocalMap { input, kernel: Some(k), .. } => {
                for (_, s, _, shape) in tuples(&run.values[input]) {
                    let per = k.flops(&[shape]);
                    on(&mut loads, s, |l| l.flops += per);
                }
            }
            IaOp::LocalMap { kernel: None, .. } | IaOp::LocalFilter { .. } => {}
        }
        out.insert(name.clone(), loads);
    }
    out
}

/// Optimize under the time model and check every alternative's loads.
fn check(tag: &str, p: &Program, seed: u64) -> usize {
    let sites = p.cluster().sites;
    let mut p = p.clone();
    p.cluster = Some(Cluster { cost_model: CostModel::Time, ..p.cluster() });
    let rules = tra_rules::all();
    let Ok(answer) = optimize(&p, &rules, &Limits::default()) else { return 0 };
    let inputs = tra_tests::random_inputs(&p, seed);
    for alt in &answer.alternatives {
        let typed = check_plan(&alt.plan, sites).unwrap();
        let predicted = plan_loads(&alt.plan, &typed, sites, BYTES_PER_FLOAT).unwrap();
        let run = eval_ia(&alt.plan, sites, &inputs, AnyLayout::RoundRobin)
            .unwrap_or_else(|e| panic!("{tag}, {}: {e}\n{}", alt.label, alt.plan.to_sexpr()));
        let got = measured(&alt.plan, &run, sites);
        for (name, loads) in &got {
            assert_eq!(
                predicted[name].as_slice(),
                loads.as_slice(),
                "{tag}, {}, {sites} sites, operator {name}: predicted (left) vs measured per-site loads\n{}",
                alt.label,
                alt.plan.to_sexpr()
            );
        }
    }
    answer.alternatives.len()
}

#[test]
fn per_site_loads_equal_the_reference_interpreters_on_random_programs() {
    let mut plans = 0;
    for seed in 0..cases() {
        let mut rng = ChaCha8Rng::seed_from_u64(0x10ad ^ seed);
        let sites = rng.random_range(1..=7);
        let p = random_program(&mut rng, GenOptions { max_nodes: 6, sites });
        plans += check(&format!("random seed {seed}"), &p, seed);
    }
    assert!(plans as u64 >= cases(), "every program has at least one plan checked");
}

#[test]
fn per_site_loads_equal_the_reference_interpreters_on_composite_programs() {
    let mut plans = 0;
    for seed in 0..cases() / 2 {
        let mut rng = ChaCha8Rng::seed_from_u64(0xc0de ^ seed);
        let sites = rng.random_range(2..=6);
        let p = composite_program(&mut rng, sites);
        plans += check(&format!("composite seed {seed}"), &p, seed);
    }
    assert!(plans > 0);
}

#[test]
fn the_comparison_sees_a_wrong_prediction() {
    // Loads must fail to match when the prediction is for another site count.
    let p = tra_tests::program(tra_tests::DIAG_OF_PRODUCT);
    let p = Program { cluster: Some(Cluster { sites: 3, cost_model: CostModel::Time, ..p.cluster() }), ..p };
    let answer = optimize(&p, &tra_rules::all(), &Limits::default()).unwrap();
    let inputs = tra_tests::random_inputs(&p, 1);
    let plan = &answer.plan;
    let run = eval_ia(plan, 3, &inputs, AnyLayout::RoundRobin).unwrap();
    let got = measured(plan, &run, 3);
    let typed = check_plan(plan, 2).unwrap();
    let wrong = plan_loads(plan, &typed, 2, BYTES_PER_FLOAT).unwrap();
    assert!(got.iter().any(|(n, l)| wrong[n].as_slice() != l.as_slice()));
}
