//! Random, well-typed TRA programs: joins (elementwise and matmul-shaped),
//! aggregations, filters, rekeys, transforms, tiles and concats, chains of
//! matmuls, shared sub-plans and several outputs.

use rand::seq::IndexedRandom;
use rand::Rng;
use serde_json::{json, Map, Value};
use tra_optimizer::check::check_program;
use tra_optimizer::types::RelType;
use tra_optimizer::Program;

#[derive(Clone)]
struct Rel {
    name: String,
    frontier: Vec<u32>,
    block: Vec<usize>,
}

/// Options for the generator.
#[derive(Debug, Clone, Copy)]
pub struct GenOptions {
    /// Most nodes.
    pub max_nodes: usize,
    /// Sites in the cluster.
    pub sites: usize,
}

impl Default for GenOptions {
    fn default() -> Self {
        GenOptions { max_nodes: 6, sites: 3 }
    }
}

fn rel_of(name: &str, t: &RelType) -> Rel {
    Rel { name: name.to_string(), frontier: t.frontier.clone(), block: t.array_bounds.clone() }
}

/// A random well-typed program; `inputs` placements are random too.
pub fn random_program<R: Rng>(rng: &mut R, opts: GenOptions) -> Program {
    loop {
        if let Some(p) = try_random_program(rng, opts) {
            return p;
        }
    }
}

fn try_random_program<R: Rng>(rng: &mut R, opts: GenOptions) -> Option<Program> {
    let n = *[2usize, 2, 3].choose(rng).unwrap();
    let mut inputs = Map::new();
    let mut pool: Vec<Rel> = Vec::new();
    let bounds = [1u32, 2, 3, 4];
    let shared = *bounds.choose(rng).unwrap();
    for (i, name) in ["A", "B", "C"].iter().enumerate().take(rng.random_range(1..=3)) {
        let arity = if i == 0 { 2 } else { rng.random_range(1..=2) };
        let frontier: Vec<u32> =
            (0..arity).map(|_| if rng.random_bool(0.6) { shared } else { *bounds.choose(rng).unwrap() }).collect();
        let placement = match rng.random_range(0..4) {
            0 => json!("any"),
            1 => json!("replicated"),
            2 => json!({"hash": [rng.random_range(0..arity)]}),
            _ => json!({"hash": (0..arity).collect::<Vec<_>>()}),
        };
        inputs
            .insert(name.to_string(), json!({"key_bounds": frontier, "array_bounds": [n, n], "placement": placement}));
        pool.push(Rel { name: name.to_string(), frontier, block: vec![n, n] });
    }
    let mut nodes = Map::new();
    let want = rng.random_range(1..=opts.max_nodes);
    let mut made = 0;
    let mut attempts = 0;
    while made < want && attempts < 50 {
        attempts += 1;
        // Prefer recent nodes, so that programs are deep rather than wide.
        let a = if pool.len() > 1 && rng.random_bool(0.7) {
            pool[pool.len() - 1 - rng.random_range(0..pool.len().min(2))].clone()
        } else {
            pool.choose(rng).unwrap().clone()
        };
        let name = format!("N{made}");
        let node = match rng.random_range(0..10) {
            0..=2 => {
                // Join: matmul-shaped or elementwise, with a compatible partner.
                let partners: Vec<&Rel> = pool
                    .iter()
                    .filter(|b| {
                        b.block == a.block
                            && (a.frontier == b.frontier
                                || (a.frontier.len() == 2 && b.frontier.len() == 2 && a.frontier[1] == b.frontier[0])
                                || (!a.frontier.is_empty() && !b.frontier.is_empty() && a.frontier[0] == b.frontier[0]))
                    })
                    .collect();
                let Some(b) = partners.choose(rng).map(|b| (*b).clone()) else { continue };
                if a.block.len() != 2 || b.block.len() != 2 || a.block[1] != b.block[0] {
                    continue;
                }
                if a.frontier.len() == 2
                    && b.frontier.len() == 2
                    && a.frontier[1] == b.frontier[0]
                    && rng.random_bool(0.6)
                {
                    json!({"op": "join", "left": a.name, "right": b.name, "left_keys": [1], "right_keys": [0], "kernel": "matMul"})
                } else if a.frontier == b.frontier && a.block == b.block {
                    let keys: Vec<usize> = (0..a.frontier.len()).collect();
                    let k = *["matAdd", "elemMul", "matSub"].choose(rng).unwrap();
                    json!({"op": "join", "left": a.name, "right": b.name, "left_keys": keys, "right_keys": keys, "kernel": k})
                } else if !a.frontier.is_empty()
                    && !b.frontier.is_empty()
                    && a.frontier[0] == b.frontier[0]
                    && a.block == b.block
                {
                    json!({"op": "join", "left": a.name, "right": b.name, "left_keys": [0], "right_keys": [0], "kernel": "matAdd"})
                } else {
                    continue;
                }
            }
            3 => {
                let arity = a.frontier.len();
                let mut dims: Vec<usize> = (0..arity).filter(|_| rng.random_bool(0.5)).collect();
                if rng.random_bool(0.3) {
                    dims.reverse();
                }
                json!({"op": "aggregate", "input": a.name, "group_by": dims, "kernel": "matAdd"})
            }
            4 => {
                let arity = a.frontier.len();
                if arity == 0 {
                    continue;
                }
                let d = rng.random_range(0..arity);
                let pred = if arity >= 2 && rng.random_bool(0.5) {
                    "k0 == k1".to_string()
                } else {
                    format!("k{d} < {}", rng.random_range(1..=a.frontier[d].max(1)))
                };
                json!({"op": "filter", "input": a.name, "predicate": pred})
            }
            5 => {
                let key = match a.frontier.len() {
                    2 => *["[k1, k0]", "[k0, k1, 0..2]", "[k0 * 4 + k1]"].choose(rng).unwrap(),
                    1 => *["[k0 + 1]", "[k0, 0..2]", "[0, k0]"].choose(rng).unwrap(),
                    _ => continue,
                };
                json!({"op": "rekey", "input": a.name, "key": key})
            }
            6 | 7 => {
                let square = a.block.len() == 2 && a.block[0] == a.block[1];
                let choices: &[&str] =
                    if square { &["relu", "transpose", "scale(2)", "sigmoid", "neg"] } else { &["relu", "scale(2)"] };
                json!({"op": "transform", "input": a.name, "kernel": choices.choose(rng).unwrap()})
            }
            8 => {
                if a.block.len() != 2 || a.block[1] % 2 != 0 && a.block[1] != 1 {
                    continue;
                }
                let size = if a.block[1] % 2 == 0 { a.block[1] / 2 } else { 1 };
                json!({"op": "tile", "input": a.name, "dim": 1, "size": size})
            }
            _ => {
                let arity = a.frontier.len();
                if arity < 2 || a.block.len() != 2 {
                    continue;
                }
                json!({"op": "concat", "input": a.name, "key_dim": arity - 1, "array_dim": rng.random_range(0..2)})
            }
        };
        nodes.insert(name.clone(), node);
        let candidate = json!({"inputs": inputs, "nodes": nodes, "outputs": [name], "cluster": {"sites": opts.sites}});
        let p = Program::from_value(&candidate).ok()?;
        match check_program(&p) {
            Ok(t) => {
                pool.push(rel_of(&name, &t.types[&name]));
                made += 1;
            }
            Err(_) => {
                nodes.remove(&name);
            }
        }
    }
    if made == 0 {
        return None;
    }
    // Outputs: every node no other node uses (at most three), so nothing is dead.
    let used: std::collections::BTreeSet<String> = nodes
        .values()
        .flat_map(|n| {
            ["input", "left", "right"]
                .into_iter()
                .filter_map(move |f| n.get(f).and_then(|v| v.as_str()).map(String::from))
        })
        .collect();
    let mut outputs: Vec<Value> =
        (0..made).rev().map(|i| format!("N{i}")).filter(|n| !used.contains(n)).take(3).map(Value::from).collect();
    if outputs.is_empty() {
        outputs.push(Value::from(format!("N{}", made - 1)));
    }
    let p = Program::from_value(
        &json!({"inputs": inputs, "nodes": nodes, "outputs": outputs, "cluster": {"sites": opts.sites}}),
    )
    .ok()?;
    check_program(&p).ok()?;
    Some(p)
}
