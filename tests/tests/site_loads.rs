//! Per-site loads (`tra_optimizer::loads`) against what the reference
//! interpreter does: random programs and composite ones are optimized under
//! the time model, and every alternative plan runs on the reference
//! interpreter; the bytes each site sends and receives in every exchange, and
//! the kernel flops each site computes and the block bytes its kernel calls
//! read and write in every local operator, counted from the sites and block
//! shapes of the tuples the run actually held, equal the optimizer's
//! prediction exactly.
//!
//! `TRA_LOADS_CASES` sets the number of random programs (default 80).

use indexmap::IndexMap;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use tra_executor::reference::{eval_ia, AnyLayout, IaRun, PhysRelation, Site};
use tra_optimizer::check::check_plan;
use tra_optimizer::loads::{plan_loads, LoadCache, SiteLoad, Writes};
use tra_optimizer::optimize::{optimize, Limits};
use tra_optimizer::time::CostModel;
use tra_optimizer::{Cluster, IaOp, KernelRef, Plan, Program};
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
                    let read = (l.iter().product::<usize>() + r.iter().product::<usize>()) as u64;
                    // One call per output tuple: both operands read, its block written.
                    for (_, s, n, _) in tuples(value) {
                        on(&mut loads, s, |x| {
                            x.flops += per;
                            x.memory_bytes += (read + n) * BYTES_PER_FLOAT;
                        });
                    }
                }
            }
            IaOp::LocalAggregate { input, group_by, kernel } => {
                let x = &run.values[input];
                let Some(shape) = x.tuples.first().map(|t| t.block.shape().to_vec()) else { continue };
                let concat = tra_optimizer::types::concat_params(kernel).is_some();
                let per = if concat { 0 } else { kernel.flops(&[&shape, &shape]) };
                let floats = shape.iter().product::<usize>() as u64;
                let sum = matches!(kernel, KernelRef::Named { name, args } if name == "matAdd" && args.is_empty());
                let products = matches!(plan.nodes.get(input), Some(IaOp::LocalJoin { kernel: KernelRef::Named { name, .. }, .. })
                    if name.starts_with("matMul"));
                let fused = sum && products;
                // Each output tuple folded the input tuples of its group on its site.
                for (g, s, _, _) in tuples(value) {
                    let n = tuples(x)
                        .filter(|(k, ks, _, _)| {
                            group_by.iter().map(|&d| k[d]).eq(g.iter().copied())
                                && (*ks == s || *ks == Site::Everywhere)
                        })
                        .count() as u64;
                    // A fold step reads two blocks and writes one; a concat
                    // reads and writes every piece; a sum of matrix products
                    // runs inside their GEMMs (the runtimes fuse it).
                    let bytes = if concat {
                        2 * n * floats
                    } else if fused {
                        0
                    } else {
                        3 * (n - 1) * floats
                    } * BYTES_PER_FLOAT;
                    on(&mut loads, s, |l| {
                        l.flops += (n - 1) * per;
                        l.memory_bytes += bytes;
                    });
                }
            }
            IaOp::LocalMap { input, kernel: Some(k), .. } => {
                // One call per input tuple: its block read, the blocks the
                // kernel makes written once (a key map that gives a block
                // several keys shares it).
                for (_, s, n, shape) in tuples(&run.values[input]) {
                    let per = k.flops(&[shape]);
                    let made = k.output_shape(&[shape]).unwrap().iter().product::<usize>() as u64
                        * k.outputs_per_call(&[shape]).unwrap() as u64;
                    on(&mut loads, s, |l| {
                        l.flops += per;
                        l.memory_bytes += (n + made) * BYTES_PER_FLOAT;
                    });
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
    for (i, alt) in answer.alternatives.iter().enumerate() {
        let typed = check_plan(&alt.plan, sites).unwrap();
        let mut totals = vec![SiteLoad::default(); sites];
        let (predicted, writes) =
            LoadCache::new(sites, BYTES_PER_FLOAT).plan_loads_and_writes(&alt.plan, &typed).unwrap();
        assert_eq!(predicted, plan_loads(&alt.plan, &typed, sites, BYTES_PER_FLOAT).unwrap());
        let run = eval_ia(&alt.plan, sites, &inputs, AnyLayout::RoundRobin)
            .unwrap_or_else(|e| panic!("{tag}, {}: {e}\n{}", alt.label, alt.plan.to_sexpr()));
        // The bytes each site writes of each output: its tuples' blocks,
        // a replicated tuple's on site 0 (the cluster runtime's worker 0).
        for name in &alt.plan.outputs {
            let mut wrote = vec![0u64; sites];
            for (_, s, n, _) in tuples(&run.values[name]) {
                wrote[match s {
                    Site::At(s) => s,
                    Site::Everywhere => 0,
                }] += n * BYTES_PER_FLOAT;
            }
            for (t, w) in totals.iter_mut().zip(&wrote) {
                t.output_bytes += w;
            }
            assert_eq!(
                writes.get(name),
                Some(&wrote),
                "{tag}, {}, {sites} sites, output {name}: predicted (left) vs measured bytes written per site\n{}",
                alt.label,
                alt.plan.to_sexpr()
            );
        }
        let got = measured(&alt.plan, &run, sites);
        for loads in got.values() {
            for (t, l) in totals.iter_mut().zip(loads) {
                *t += *l;
            }
        }
        // Every alternative's site loads are its plan's, writes included;
        // the answer's are the chosen plan's (alternatives[0]).
        assert_eq!(
            alt.site_loads,
            totals,
            "{tag}, {}, {sites} sites: the alternative's site loads (left) vs the reference's whole-plan loads\n{}",
            alt.label,
            alt.plan.to_sexpr()
        );
        if i == 0 {
            assert_eq!(answer.site_loads, alt.site_loads, "{tag}: the answer's site loads are the chosen plan's");
        }
        for (name, loads) in &got {
            assert_eq!(
                predicted[name].as_slice(),
                loads.as_slice(),
                "{tag}, {}, {sites} sites, operator {name}: predicted (left) vs measured per-site loads\n{}",
                alt.label,
                alt.plan.to_sexpr()
            );
        }
        overlap_is_bounded_by_its_stages(&format!("{tag}, {}", alt.label), &alt.plan, &predicted);
    }
    answer.alternatives.len()
}

/// The time model overlaps stages that do not wait for each other
/// (`tra_optimizer::time`): a plan never takes longer than its operators one
/// after another, nor less than its slowest operator alone. Checked under
/// profiles where links, processors, memory or latency bind.
fn overlap_is_bounded_by_its_stages(tag: &str, plan: &Plan, loads: &IndexMap<String, std::sync::Arc<Vec<SiteLoad>>>) {
    use tra_optimizer::time::{plan_seconds, stage_seconds, Profile};
    let base = Profile {
        link_bytes_per_second: 1e3,
        site_flops_per_second: 1e4,
        memory_bytes_per_second: 1e4,
        latency_seconds: 0.0,
        job_overhead_seconds: None,
        bytes_per_float: 4,
        exchange_cpu_bytes_per_second: None,
        output_bytes_per_second: None,
        machine_processors: None,
        site_threads: None,
        machine_sites: None,
    };
    let profiles = [
        base,
        Profile { latency_seconds: 1e3, ..base },
        Profile { exchange_cpu_bytes_per_second: Some(1e2), latency_seconds: 0.5, ..base },
        Profile { link_bytes_per_second: 1e9, memory_bytes_per_second: 1e2, ..base },
    ];
    for p in profiles {
        let (total, _) = plan_seconds(plan, loads, &Writes::new(), &p);
        let each = plan.nodes.iter().map(|(name, op)| {
            let exchange = matches!(op, IaOp::Shuffle { .. } | IaOp::Broadcast { .. });
            stage_seconds(exchange, &loads[name], &p).0
        });
        let (sum, max) = each.fold((0.0, 0.0f64), |(s, m), t| (s + t, m.max(t)));
        assert!(
            total <= sum * (1.0 + 1e-9) && total >= max * (1.0 - 1e-9),
            "{tag}: {total} s, not between its slowest operator ({max} s) and all in turn ({sum} s) under {p:?}\n{}",
            plan.to_sexpr()
        );
    }
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

/// Extraction's stage costs ([`tra_optimizer::stage_cost`]) and the exact
/// scorer price a plan by the same formula: for every join strategy, under a
/// profile where memory binds the element-wise stages and flops the products,
/// each local join and map of the extracted plan costs extraction exactly the
/// stage seconds the scorer gives it, no aggregation costs more, and the
/// plan's summed stage costs never
/// exceed its operators' stage times one after another (an exchange is
/// charged its cheapest physical source, a lower bound); the scorer, which
/// overlaps stages, gives at most that sum too.
#[test]
fn stage_costs_and_the_exact_scorer_agree() {
    use egg::Language;
    use egg::Runner;
    use tra_optimizer::egraph::{add_program, Ia, TraAnalysis, TraEGraph};
    use tra_optimizer::extract::choose_among;
    use tra_optimizer::optimize::{join_strategy, JoinStrategy, Scorer};
    use tra_optimizer::stage_cost::stage_costs;
    use tra_optimizer::time::{Profile, Resource};

    let profile = Profile {
        link_bytes_per_second: 1e8,
        site_flops_per_second: 3e10,
        memory_bytes_per_second: 2e9,
        latency_seconds: 0.005,
        job_overhead_seconds: None,
        bytes_per_float: 4,
        exchange_cpu_bytes_per_second: None,
        output_bytes_per_second: None,
        machine_processors: None,
        site_threads: None,
        machine_sites: None,
    };
    let programs = [
        // Thin matmul: partial sums of products are aggregated (memory-bound folds).
        (
            r#"{"inputs": {"X": {"key_bounds": [16, 4], "array_bounds": [64, 64]},
                           "Y": {"key_bounds": [4, 1], "array_bounds": [64, 64]}},
                "nodes": {"XY": {"op": "join", "left": "X", "right": "Y", "left_keys": [1], "right_keys": [0], "kernel": "matMul"},
                          "Z": {"op": "aggregate", "input": "XY", "group_by": [0, 2], "kernel": "matAdd"}},
                "outputs": ["Z"], "cluster": {"sites": 3}}"#,
            true,
        ),
        // diag(X+Y): an element-wise join only.
        (
            r#"{"inputs": {"X": {"key_bounds": [6, 6], "array_bounds": [32, 32]},
                           "Y": {"key_bounds": [6, 6], "array_bounds": [32, 32], "placement": {"hash": [1]}}},
                "nodes": {"S": {"op": "join", "left": "X", "right": "Y", "left_keys": [0, 1], "right_keys": [0, 1], "kernel": "matAdd"},
                          "D": {"op": "filter", "input": "S", "predicate": "k0 == k1"}},
                "outputs": ["D"], "cluster": {"sites": 4}}"#,
            false,
        ),
    ];
    for (text, products) in programs {
        let p = Program::from_json(text).unwrap();
        let typed = tra_optimizer::check::check_program(&p).unwrap();
        let sites = p.cluster().sites;
        let mut eg = TraEGraph::new(TraAnalysis::new(sites, p.inputs.clone()));
        let roots = add_program(&mut eg, &p, &typed.order);
        let rules = tra_rules::all();
        let lowering: Vec<_> = rules.iter().filter(|r| r.lowering()).flat_map(|r| r.rewrites.iter()).collect();
        let rest: Vec<_> = rules.iter().filter(|r| !r.ordering()).flat_map(|r| r.rewrites.iter()).collect();
        let analysis = || TraAnalysis::new(sites, IndexMap::new());
        let eg = Runner::<Ia, TraAnalysis, ()>::new(analysis()).with_egraph(eg).run(lowering.iter().copied()).egraph;
        let eg = Runner::<Ia, TraAnalysis, ()>::new(analysis())
            .with_egraph(eg)
            .with_node_limit(20_000)
            .run(rest.iter().copied())
            .egraph;
        let roots: IndexMap<String, egg::Id> = roots.into_iter().map(|(n, id)| (n, eg.find(id))).collect();
        let outputs: Vec<egg::Id> = roots.values().copied().collect();
        let costs = stage_costs(&eg, &profile, &outputs).unwrap().in_turn();
        // With a write rate, each plan costs extraction its busiest writer's
        // seconds more per output, once (charged to the output's `erase`).
        const WRITE_RATE: f64 = 2e7;
        let writing = Profile { output_bytes_per_second: Some(WRITE_RATE), ..profile };
        let with_writes = stage_costs(&eg, &writing, &outputs).unwrap().in_turn();
        let mut writes_compared = 0;
        let mut memory_bound = 0;
        let mut compute_bound = 0;
        let mut exact = 0;
        let strategies = [
            None,
            Some(JoinStrategy::BroadcastLeft),
            Some(JoinStrategy::BroadcastRight),
            Some(JoinStrategy::CoPartitioned),
            Some(JoinStrategy::Replicated),
        ];
        for only in strategies {
            let allow = |eg: &TraEGraph, _: egg::Id, n: &Ia| match (only, join_strategy(eg, n)) {
                (Some(want), Some(s)) => s == want || s == JoinStrategy::BroadcastBoth,
                _ => true,
            };
            let choice = choose_among(&eg, &costs, &allow);
            let Ok(extracted) = choice.plan(&eg, &roots) else { continue };
            let plan = extracted.to_plan(&p.inputs);
            let extracted_seconds: f64 = roots.values().map(|r| choice.cost_of(*r).unwrap().total).sum();
            let typed = check_plan(&plan, sites).unwrap();
            {
                // The same plan (only its own nodes allowed) under the costs with writes.
                let members: std::collections::HashSet<(egg::Id, Ia)> = extracted
                    .expr
                    .as_ref()
                    .iter()
                    .enumerate()
                    .map(|(i, n)| {
                        let canonical = n.clone().map_children(|c| eg.find(extracted.classes[usize::from(c)]));
                        (eg.find(extracted.classes[i]), canonical)
                    })
                    .collect();
                let same = |eg: &TraEGraph, c: egg::Id, n: &Ia| {
                    members.contains(&(eg.find(c), n.clone().map_children(|x| eg.find(x))))
                };
                let again = choose_among(&eg, &with_writes, &same);
                let (_, writes) = LoadCache::new(sites, BYTES_PER_FLOAT).plan_loads_and_writes(&plan, &typed).unwrap();
                let busiest: f64 = writes.values().map(|w| *w.iter().max().unwrap() as f64 / WRITE_RATE).sum();
                let charged: f64 =
                    roots.values().map(|r| again.cost_of(*r).unwrap().total).sum::<f64>() - extracted_seconds;
                assert!(busiest > 0.0, "{only:?}: the plan writes its output\n{}", plan.to_sexpr());
                assert!(
                    (charged - busiest).abs() <= 1e-9 * busiest,
                    "{only:?}: extraction charged {charged} s for writing, the busiest writer takes {busiest} s\n{}",
                    plan.to_sexpr()
                );
                writes_compared += 1;
            }
            let (scored, _, _) = Scorer::new(sites, profile).score(&plan).unwrap();
            let loads = plan_loads(&plan, &typed, sites, profile.bytes_per_float).unwrap();
            let in_turn: f64 = plan
                .nodes
                .iter()
                .map(|(name, op)| {
                    let exchange = matches!(op, IaOp::Shuffle { .. } | IaOp::Broadcast { .. });
                    tra_optimizer::time::stage_seconds(exchange, &loads[name], &profile).0
                })
                .sum();
            assert!(
                extracted_seconds <= in_turn * (1.0 + 1e-9) && scored <= in_turn * (1.0 + 1e-9),
                "{only:?}: stage costs sum to {extracted_seconds} s and the scorer gives {scored} s, \
                 over the operators' {in_turn} s in turn\n{}",
                plan.to_sexpr()
            );
            // Extraction's own cost of each local operator: its class's cost
            // less its operands' (these plans are trees).
            let class_cost = |i: egg::Id| choice.cost_of(extracted.classes[usize::from(i)]).map_or(0.0, |c| c.total);
            // Joins and maps apart from aggregations: (extracted, scored).
            let mut local: [(Vec<f64>, Vec<f64>); 2] = Default::default();
            for (i, node) in extracted.expr.as_ref().iter().enumerate() {
                if matches!(node, Ia::LJoin(_) | Ia::LAgg(_) | Ia::LMap(_)) {
                    let operands: f64 = egg::Language::children(node).iter().map(|c| class_cost(*c)).sum();
                    local[matches!(node, Ia::LAgg(_)) as usize].0.push(class_cost(egg::Id::from(i)) - operands);
                }
            }

            for (name, loads) in &loads {
                if matches!(
                    plan.nodes[name],
                    IaOp::LocalJoin { .. } | IaOp::LocalAggregate { .. } | IaOp::LocalMap { .. }
                ) {
                    let (t, _, resource) = tra_optimizer::time::stage_seconds(false, loads, &profile);
                    local[matches!(plan.nodes[name], IaOp::LocalAggregate { .. }) as usize].1.push(t);
                    match resource {
                        Resource::Memory => memory_bound += 1,
                        Resource::Compute => compute_bound += 1,
                        _ => {}
                    }
                }
            }
            // A join's or a map's stage is a function of the node: equal. An
            // aggregation whose operand class holds a matrix-product join is
            // charged as fused into it (the plan may read another member of
            // that class): at most the scorer's.
            for (kind, (mut e, mut s)) in local.into_iter().enumerate() {
                e.sort_by(f64::total_cmp);
                s.sort_by(f64::total_cmp);
                assert_eq!(e.len(), s.len(), "{}", plan.to_sexpr());
                for (e, s) in e.iter().zip(&s) {
                    let ok = if kind == 0 { (e - s).abs() <= 1e-9 * s.max(1e-9) } else { *e <= s * (1.0 + 1e-9) };
                    assert!(
                        ok,
                        "{only:?}: a local stage costs extraction {e} s, the scorer {s} s\n{}",
                        plan.to_sexpr()
                    );
                }
                exact += s.len();
            }
        }
        assert!(exact > 0, "{text}: local stages were compared");
        assert!(writes_compared > 0, "{text}: writes were compared");
        assert!(memory_bound > 0, "{text}: some stage is memory-bound");
        assert_eq!(compute_bound > 0, products, "{text}: the products (and only they) are compute-bound");
    }
}
