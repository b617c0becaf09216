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
                    // `[k0]`, `[k1]` drop a dim: valid after a filter `k0 == k1`
                    // or when the dropped dim has bound 1 (else the check
                    // rejects the node and another is drawn).
                    2 => *["[k1, k0]", "[k0, k1, 0..2]", "[k0 * 4 + k1]", "[k0]", "[k1]"].choose(rng).unwrap(),
                    1 => *["[k0 + 1]", "[k0, 0..2]", "[0, k0]"].choose(rng).unwrap(),
                    _ => continue,
                };
                json!({"op": "rekey", "input": a.name, "key": key})
            }
            6 | 7 => {
                let square = a.block.len() == 2 && a.block[0] == a.block[1];
                let choices: &[&str] = if square {
                    &["relu", "transpose", "scale(2)", "sigmoid", "neg", "diag"]
                } else {
                    &["relu", "scale(2)"]
                };
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

/// Programs as users write them over blocked matrices: products (a chain of
/// one to four matrices, bracketed at random), sometimes with a block mask
/// (a filter) on an operand, and over the result one or two of: its
/// diagonal (`diag(A·B)`: filter `k0 == k1`, rekey `[k0]`, `diag`), its
/// transpose (rekey `[k1, k0]`, `transpose`), its row sums (`rowSum`, then
/// the sum over block columns), `relu(· + Z)`, a block mask, a scale. Key
/// bounds 1–3, blocks 1–4 (square where the composition needs it).
pub fn composite_program<R: Rng>(rng: &mut R, sites: usize) -> Program {
    loop {
        if let Some(p) = try_composite(rng, sites) {
            return p;
        }
    }
}

/// A composite program under construction.
struct Composite {
    inputs: Map<String, Value>,
    nodes: Map<String, Value>,
}

impl Composite {
    fn input(&mut self, keys: [u32; 2], block: [usize; 2]) -> String {
        let name = format!("M{}", self.inputs.len());
        self.inputs.insert(name.clone(), json!({"key_bounds": keys, "array_bounds": block}));
        name
    }
    fn node(&mut self, v: Value) -> String {
        let name = format!("N{}", self.nodes.len());
        self.nodes.insert(name.clone(), v);
        name
    }
    fn product(&mut self, x: &str, y: &str) -> String {
        let j = self.node(
            json!({"op": "join", "left": x, "right": y, "left_keys": [1], "right_keys": [0], "kernel": "matMul"}),
        );
        self.node(json!({"op": "aggregate", "input": j, "group_by": [0, 2], "kernel": "matAdd"}))
    }
    fn filter(&mut self, x: &str, p: &str) -> String {
        self.node(json!({"op": "filter", "input": x, "predicate": p}))
    }
    fn rekey(&mut self, x: &str, k: &str) -> String {
        self.node(json!({"op": "rekey", "input": x, "key": k}))
    }
    fn transform(&mut self, x: &str, k: &str) -> String {
        self.node(json!({"op": "transform", "input": x, "kernel": k}))
    }
}

const MASKS: &[&str] = &["k0 == k1", "k0 <= k1", "k0 >= k1", "k1 < 2", "k0 != k1", "k0 + k1 < 3"];

/// The product of matrices `lo..hi` of the chain, bracketed at random.
fn bracketed<R: Rng>(rng: &mut R, c: &mut Composite, ms: &[String], lo: usize, hi: usize) -> String {
    if hi - lo == 1 {
        return ms[lo].clone();
    }
    let split = rng.random_range(lo + 1..hi);
    let l = bracketed(rng, c, ms, lo, split);
    let r = bracketed(rng, c, ms, split, hi);
    c.product(&l, &r)
}

fn try_composite<R: Rng>(rng: &mut R, sites: usize) -> Option<Program> {
    let mut c = Composite { inputs: Map::new(), nodes: Map::new() };
    let len = *[1usize, 2, 2, 2, 3, 4].choose(rng).unwrap();
    let square = rng.random_bool(0.6);
    let b0 = rng.random_range(1..=4);
    let f0 = rng.random_range(1..=3u32);
    let mut blocks = vec![b0];
    let mut fronts = vec![f0];
    for i in 1..=len {
        let last = i == len;
        blocks.push(if square || (last && rng.random_bool(0.5)) { b0 } else { rng.random_range(1..=4) });
        fronts.push(if last && rng.random_bool(0.6) { f0 } else { rng.random_range(1..=3) });
    }
    let mut ms: Vec<String> = Vec::new();
    for i in 0..len {
        let m = c.input([fronts[i], fronts[i + 1]], [blocks[i], blocks[i + 1]]);
        // A block mask on an operand, sometimes.
        let m = if rng.random_bool(0.15) { c.filter(&m, MASKS.choose(rng).unwrap()) } else { m };
        ms.push(m);
    }
    let mut x = bracketed(rng, &mut c, &ms, 0, len);
    let (out_front, out_block) = ([fronts[0], fronts[len]], [blocks[0], blocks[len]]);
    let finishers = ["diag", "transpose", "rowsum", "relu_plus", "mask", "scale", "none"];
    let mut outputs = Vec::new();
    for step in 0..rng.random_range(1..=2) {
        match *finishers.choose(rng).unwrap() {
            "diag" if out_block[0] == out_block[1] && out_front[0] == out_front[1] && step == 0 => {
                let f = c.filter(&x, "k0 == k1");
                let r = c.rekey(&f, "[k0]");
                outputs.push(c.transform(&r, "diag"));
            }
            "transpose" if step == 0 => {
                let r = c.rekey(&x, "[k1, k0]");
                x = c.transform(&r, "transpose");
            }
            "rowsum" => {
                let t = c.transform(&x, "rowSum");
                outputs.push(c.node(json!({"op": "aggregate", "input": t, "group_by": [0], "kernel": "matAdd"})));
            }
            "relu_plus" if step == 0 => {
                let z = c.input(out_front, out_block);
                let s = c.node(json!({"op": "join", "left": x, "right": z, "left_keys": [0, 1],
                                      "right_keys": [0, 1], "kernel": "matAdd"}));
                x = c.transform(&s, "relu");
            }
            "mask" => x = c.filter(&x, MASKS.choose(rng).unwrap()),
            "scale" => x = c.transform(&x, ["scale(2)", "neg"].choose(rng).unwrap()),
            _ => {}
        }
    }
    // The last result is an output too when nothing uses it (no dead nodes),
    // and sometimes anyway.
    let used = c.nodes.values().any(|n| ["input", "left", "right"].iter().any(|f| n.get(*f) == Some(&json!(x))));
    if outputs.is_empty() || !used || rng.random_bool(0.3) {
        outputs.push(x);
    }
    outputs.dedup();
    let p = Program::from_value(
        &json!({"inputs": c.inputs, "nodes": c.nodes, "outputs": outputs, "cluster": {"sites": sites}}),
    )
    .ok()?;
    check_program(&p).ok()?;
    Some(p)
}
