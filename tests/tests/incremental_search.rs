//! Incremental search (`tra_optimizer::schedule`) searches each rule only
//! near the classes that changed since the previous iteration. It must build
//! exactly the e-graph that searching every rule everywhere builds, and so
//! choose the same plans: compared on every built-in workload, on chains of
//! matmuls, and on random programs.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tra_optimizer::optimize::{optimize, Limits, OptimizeAnswer, Search};
use tra_optimizer::Program;
use tra_tests::gen::{random_program, GenOptions};

fn example(name: &str) -> Program {
    let path = format!("{}/../examples/{name}.json", env!("CARGO_MANIFEST_DIR"));
    Program::from_json(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn answer(p: &Program, search: Search) -> Result<OptimizeAnswer, String> {
    let limits = Limits { search, ..Limits::default() };
    optimize(p, &tra_rules::all(), &limits).map_err(|e| e.to_string())
}

/// Both searches on `p`: same graph size, same iterations, same plans.
fn same(what: &str, p: &Program) {
    let (full, incremental) = (answer(p, Search::Full), answer(p, Search::Incremental));
    let (full, incremental) = match (full, incremental) {
        (Ok(f), Ok(i)) => (f, i),
        (Err(f), Err(i)) => {
            assert_eq!(f, i, "{what}: both fail, alike");
            return;
        }
        (f, i) => panic!("{what}: full search {:?}, incremental {:?}", f.err(), i.err()),
    };
    let size = |a: &OptimizeAnswer| (a.stats.egraph_nodes, a.stats.egraph_classes, a.stats.iterations);
    assert_eq!(size(&full), size(&incremental), "{what}: (nodes, classes, iterations)");
    assert_eq!(full.stats.stop_reason, incremental.stats.stop_reason, "{what}");
    assert_eq!(full.plan, incremental.plan, "{what}: chosen plan");
    let alts = |a: &OptimizeAnswer| -> Vec<(String, u64, u64)> {
        a.alternatives.iter().map(|x| (x.label.clone(), x.cost.network_floats, x.cost.flops)).collect()
    };
    assert_eq!(alts(&full), alts(&incremental), "{what}: alternatives");
}

#[test]
fn incremental_search_builds_the_graph_full_search_builds_on_every_workload() {
    let dir = format!("{}/../examples", env!("CARGO_MANIFEST_DIR"));
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.strip_suffix(".json").map(str::to_string))
        .collect();
    names.sort();
    assert!(names.len() >= 10, "{names:?}");
    for name in &names {
        same(name, &example(name));
    }
}

#[test]
fn incremental_search_builds_the_graph_full_search_builds_on_chains() {
    for (grid, sites) in [(vec![4, 4, 4, 4], 4), (vec![16, 1, 16, 1], 4), (vec![2, 8, 1, 8, 2, 4], 3)] {
        let n = grid.len() - 1;
        let mut inputs = serde_json::Map::new();
        for i in 0..n {
            inputs.insert(
                format!("X{i}"),
                serde_json::json!({"key_bounds": [grid[i], grid[i + 1]], "array_bounds": [8, 8]}),
            );
        }
        let mut nodes = serde_json::Map::new();
        let mut prev = "X0".to_string();
        for i in 1..n {
            nodes.insert(
                format!("J{i}"),
                serde_json::json!({"op": "join", "left": prev, "right": format!("X{i}"),
                                   "left_keys": [1], "right_keys": [0], "kernel": "matMul"}),
            );
            nodes.insert(
                format!("M{i}"),
                serde_json::json!({"op": "aggregate", "input": format!("J{i}"), "group_by": [0, 2], "kernel": "matAdd"}),
            );
            prev = format!("M{i}");
        }
        let p = Program::from_value(&serde_json::json!({
            "inputs": inputs, "nodes": nodes, "outputs": [prev], "cluster": {"sites": sites}
        }))
        .unwrap();
        same(&format!("chain {grid:?} on {sites} sites"), &p);
    }
}

#[test]
fn incremental_search_builds_the_graph_full_search_builds_on_random_programs() {
    let cases: u64 = std::env::var("TRA_INCREMENTAL_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(60);
    let mut rng = ChaCha8Rng::seed_from_u64(0x5eed_1c2e);
    for case in 0..cases {
        let p = random_program(&mut rng, GenOptions { max_nodes: 6, sites: [1, 2, 3, 4][case as usize % 4] });
        same(&format!("random program {case}: {}", serde_json::to_string(&p).unwrap()), &p);
    }
}
