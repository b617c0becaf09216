//! Every equality the rules derive holds on data (Ruler's cvec
//! idea, with the reference interpreter of `tra-executor` as the oracle).
//!
//! After saturation, every executable e-node of every class is evaluated on
//! one random input (its operands are taken from plans extracted with random
//! costs) and all members of a class must agree: P classes *exactly*, sites
//! included, L classes as bags (a partial aggregate's copies counted). Then
//! whole plans extracted at random from each output class must compute the
//! TRA program's result.

mod common;
use common::programs::{diag, distances, ffnn, frontier_mismatch, holes, matmul_nodes_program, program_for};
use common::run;
use egg::{CostFunction, Extractor, Id, Language, RecExpr};
use std::collections::{BTreeMap, HashSet};
use tra_executor::reference::{self, AnyLayout, PhysRelation, Relation, Site};
use tra_optimizer::egraph::{ExtractedPlan, Ia};
use tra_optimizer::Program;

/// Random positive costs per e-node (by seed); TRA operators cannot be
/// executed and cost infinity.
struct RandomCost(u64);

impl CostFunction<Ia> for RandomCost {
    type Cost = f64;
    fn cost<C: FnMut(Id) -> f64>(&mut self, enode: &Ia, mut costs: C) -> f64 {
        use std::hash::{Hash, Hasher};
        let own = if is_tra(enode) {
            f64::INFINITY
        } else {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            (self.0, format!("{enode:?}")).hash(&mut h);
            1.0 + (h.finish() % 1000) as f64
        };
        enode.fold(own, |s, c| s + costs(c))
    }
}

fn is_tra(n: &Ia) -> bool {
    matches!(
        n,
        Ia::Join(_) | Ia::Aggregate(_) | Ia::Rekey(_) | Ia::Filter(_) | Ia::Transform(_) | Ia::Tile(_) | Ia::Concat(_)
    )
}

fn random_inputs(p: &Program) -> BTreeMap<String, Relation> {
    p.inputs
        .iter()
        .enumerate()
        .map(|(i, (n, d))| {
            let kb: Vec<u32> = d.key_bounds.iter().map(|&b| b as u32).collect();
            let ab: Vec<usize> = d.array_bounds.iter().map(|&b| b as usize).collect();
            (n.clone(), reference::random_relation(&kb, &ab, 7 + i as u64))
        })
        .collect()
}

/// Append `e` to `expr`; the index of its root.
fn append(expr: &mut RecExpr<Ia>, e: &RecExpr<Ia>) -> Id {
    let base = expr.as_ref().len();
    for n in e.as_ref() {
        expr.add(n.clone().map_children(|c| Id::from(usize::from(c) + base)));
    }
    Id::from(expr.as_ref().len() - 1)
}

/// Evaluate the P expression rooted at `root` (an `erase` root is looked
/// through).
fn eval(
    p: &Program,
    expr: &RecExpr<Ia>,
    mut root: Id,
    inputs: &BTreeMap<String, Relation>,
    layout: AnyLayout,
) -> PhysRelation {
    let sites = p.cluster().sites;
    if let Ia::Erase(x) = &expr[root] {
        root = *x;
    }
    if let Ia::Input(n) = &expr[root] {
        let name = expr[*n].to_string();
        return reference::place(&inputs[&name], &p.inputs[&name].placement, sites, layout).expect("input");
    }
    let mut roots = indexmap::IndexMap::new();
    roots.insert("__out".to_string(), root);
    let classes = vec![Id::from(0usize); expr.as_ref().len()];
    let plan = ExtractedPlan { expr: expr.clone(), roots, classes }.to_plan(&p.inputs);
    let run = reference::eval_ia(&plan, sites, inputs, layout).unwrap_or_else(|e| panic!("{expr}: {e}"));
    run.outputs["__out"].clone()
}

/// Sorted by (site, key); on one site `Everywhere` is site 0.
fn normal(a: &PhysRelation, sites: usize) -> Vec<(Site, Vec<u32>, Vec<i64>)> {
    let mut v: Vec<(Site, Vec<u32>, Vec<i64>)> = a
        .tuples
        .iter()
        .map(|t| {
            let site = if sites == 1 { Site::At(0) } else { t.site };
            (site, t.key.clone(), t.block.iter().map(|x| (x * 1e6).round() as i64).collect())
        })
        .collect();
    v.sort();
    v
}

/// The relation as a bag of (key, block), sites projected away.
fn bag(a: &PhysRelation) -> Vec<(Vec<u32>, Vec<i64>)> {
    let mut v: Vec<(Vec<u32>, Vec<i64>)> =
        a.tuples.iter().map(|t| (t.key.clone(), t.block.iter().map(|x| (x * 1e6).round() as i64).collect())).collect();
    v.sort();
    v
}

fn classes_agree(name: &str, json: &str, seeds: u64, layout: AnyLayout) {
    let r = run(json);
    let p = Program::from_json(json).expect("program");
    let sites = p.cluster().sites;
    let inputs = random_inputs(&p);
    for seed in 0..seeds {
        let ex = Extractor::new(&r.eg, RandomCost(seed));
        for class in r.eg.classes() {
            if class.data.param().is_some() {
                continue;
            }
            let mut values: Vec<(String, PhysRelation)> = Vec::new();
            for node in class.nodes.iter().filter(|n| !is_tra(n)) {
                let mut expr = RecExpr::default();
                let mut executable = true;
                let node = node.clone().map_children(|c| {
                    let (cost, e) = ex.find_best(c);
                    executable &= cost.is_finite();
                    append(&mut expr, &e)
                });
                if !executable {
                    continue;
                }
                let root = expr.add(node);
                let v = eval(&p, &expr, root, &inputs, layout);
                values.push((expr.to_string(), v));
            }
            for w in values.windows(2) {
                let same = if class.data.phys().is_some() {
                    normal(&w[0].1, sites) == normal(&w[1].1, sites)
                } else {
                    bag(&w[0].1) == bag(&w[1].1)
                };
                assert!(
                    same,
                    "{name}: class {} ({:?}) holds two different values:\n  {}\n  {}",
                    class.id, class.data, w[0].0, w[1].0
                );
            }
        }
    }
}

fn plans_compute_the_program(name: &str, json: &str, seeds: u64) {
    let r = run(json);
    let p = Program::from_json(json).expect("program");
    let inputs = random_inputs(&p);
    let expected = reference::eval_tra(&p, &inputs).expect("the TRA program runs");
    let mut seen = HashSet::new();
    for seed in 0..seeds {
        let ex = Extractor::new(&r.eg, RandomCost(seed));
        let mut expr = RecExpr::default();
        let mut roots = BTreeMap::new();
        for (o, id) in &r.roots {
            let (cost, e) = ex.find_best(*id);
            assert!(cost.is_finite(), "{name}: output {o} has no executable plan");
            roots.insert(o.clone(), append(&mut expr, &e));
        }
        if !seen.insert(expr.to_string()) {
            continue;
        }
        for layout in [AnyLayout::RoundRobin, AnyLayout::Seeded(seed), AnyLayout::OneSite(0)] {
            for (o, root) in &roots {
                let got = reference::erase(&eval(&p, &expr, *root, &inputs, layout))
                    .unwrap_or_else(|e| panic!("{name}: the plan for {o} is not a tensor relation: {e}\n{expr}"));
                if let Err(e) = reference::compare(&expected[o], &got, 1e-9) {
                    panic!("{name}: the plan for {o} computes a different relation: {e}\n{expr}");
                }
            }
        }
    }
}

fn all_programs() -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = Vec::new();
    for name in tra_rules::names() {
        v.push((format!("program for {name}"), program_for(name)));
    }
    for sites in [1, 2, 3] {
        v.push((
            format!("matmul, X hashed on [1], Y on [0], {sites} sites"),
            matmul_nodes_program(sites, r#"{"hash": [1]}"#, r#"{"hash": [0]}"#),
        ));
        v.push((
            format!("matmul, X hashed on [0], Y replicated, {sites} sites"),
            matmul_nodes_program(sites, r#"{"hash": [0]}"#, r#""replicated""#),
        ));
    }
    v.push(("diag, unplaced".into(), diag("")));
    for sites in [1, 3] {
        v.push((format!("ffnn at {sites} sites"), ffnn(sites)));
        v.push((format!("distances at {sites} sites"), distances(sites)));
        v.push((format!("holes at {sites} sites"), holes(sites)));
        v.push((format!("frontier mismatch at {sites} sites"), frontier_mismatch(sites)));
    }
    v
}

#[test]
fn every_class_holds_one_value() {
    for (name, json) in all_programs() {
        classes_agree(&name, &json, 2, AnyLayout::RoundRobin);
        classes_agree(&name, &json, 1, AnyLayout::Seeded(3));
    }
}

#[test]
fn extracted_plans_compute_the_program() {
    for (name, json) in all_programs() {
        plans_compute_the_program(&name, &json, 40);
    }
}
