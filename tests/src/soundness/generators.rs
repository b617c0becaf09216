//! One generator per rule: a function from a random generator to a small,
//! well-typed TRA program (with its site count, 1–7) built so that, after
//! lowering (and the few helper rules listed with it), the graph holds the
//! rule's left-hand side with random key bounds (1–5 per dimension), block
//! shapes, kernels, predicates, key maps and input placements. The
//! parameters are drawn so that many instances satisfy the rule's condition
//! and some do not (the rule must then leave them alone; a mutant that drops
//! the condition must be caught on them).

use rand::seq::IndexedRandom;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Map, Value};
use tra_optimizer::check::check_program;
use tra_optimizer::Program;

/// A generator: a random program whose lowering exposes the rule's left-hand side.
pub type GenFn = fn(&mut ChaCha8Rng) -> Option<Program>;

/// How one rule is exercised.
pub struct RuleGen {
    /// The program generator.
    pub gen: GenFn,
    /// Rules (besides the lowering rules and the rule itself) run with it,
    /// to expose its left-hand side.
    pub helpers: &'static [&'static str],
}

/// The generator of a rule, by its name; `None` when there is none (the
/// coverage guard fails on that).
pub fn for_rule(name: &str) -> Option<RuleGen> {
    let g = |gen: GenFn, helpers: &'static [&'static str]| Some(RuleGen { gen, helpers });
    match name {
        "lower-aggregate" => g(aggregate_program, &[]),
        "lower-join" => g(join_program, &[]),
        "lower-rekey" => g(rekey_program, &[]),
        "lower-filter" => g(filter_program, &[]),
        "lower-transform" => g(transform_program, &[]),
        "lower-tile" => g(tile_program, &[]),
        "lower-concat" => g(concat_program, &[]),
        "R1-1" => g(filter_filter, &[]),
        "R1-2" => g(map_map, &[]),
        "R1-3" => g(map_filter, &[]),
        "R1-4" => g(aggregate_map, &["R2-3"]),
        "R1-5" => g(aggregate_filter, &[]),
        "R1-6" => g(join_filter, &["R2-6"]),
        "R1-7" => g(join_map, &["R1-2"]),
        "map-identity" => g(identity_rekey, &["R1-7"]),
        "R2-1" => g(join_and_aggregate, &["R2-4", "R2-6", "R2-7"]),
        "R2-2" => g(join_filter, &["R1-6", "R2-6"]),
        "R2-3" => g(map_then_repartition, &[]),
        "R2-4" => g(placed_inputs, &[]),
        "agg-subset" => g(multi_dim_aggregate, &[]),
        "R2-5" => g(two_phase, &["agg-subset"]),
        "R2-6" => g(join_program, &[]),
        "R2-7" => g(join_then_aggregate, &["agg-subset"]),
        "R2-7b" => g(join_then_aggregate, &["R2-6", "agg-subset"]),
        "matmul-bmm" | "matmul-cmm" | "matmul-rmm" => g(matmul, &[]),
        _ => None,
    }
}

/// A program under construction.
pub struct B<'r> {
    rng: &'r mut ChaCha8Rng,
    inputs: Map<String, Value>,
    nodes: Map<String, Value>,
    sites: usize,
    count: usize,
}

const AGG: &[&str] = &["matAdd", "max", "min", "elemMul"];
const ELEM2: &[&str] = &["matAdd", "matSub", "elemMul", "max", "min"];
const SAME_SHAPE: &[&str] = &["relu", "neg", "scale(2)", "sigmoid"];

impl<'r> B<'r> {
    fn new(rng: &'r mut ChaCha8Rng) -> B<'r> {
        let sites = rng.random_range(1..=7);
        B { rng, inputs: Map::new(), nodes: Map::new(), sites, count: 0 }
    }
    fn kb(&mut self) -> u32 {
        self.rng.random_range(1..=5)
    }
    fn keys(&mut self, arity: usize) -> Vec<u32> {
        (0..arity).map(|_| self.kb()).collect()
    }
    fn ext(&mut self) -> usize {
        self.rng.random_range(1..=3)
    }
    fn block2(&mut self) -> Vec<usize> {
        vec![self.ext(), self.ext()]
    }
    fn coin(&mut self, p: f64) -> bool {
        self.rng.random_bool(p)
    }
    fn pick<T: Clone>(&mut self, xs: &[T]) -> T {
        xs.choose(self.rng).expect("non-empty").clone()
    }
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        self.rng.random_range(lo..=hi)
    }
    /// A random subset of `0..n` (non-empty when asked), in random or sorted order.
    fn subset(&mut self, n: usize, non_empty: bool) -> Vec<usize> {
        loop {
            let mut d: Vec<usize> = (0..n).filter(|_| self.rng.random_bool(0.5)).collect();
            if self.rng.random_bool(0.3) {
                use rand::seq::SliceRandom;
                d.shuffle(self.rng);
            }
            if !non_empty || !d.is_empty() || n == 0 {
                return d;
            }
        }
    }
    fn placement(&mut self, arity: usize) -> Value {
        match self.rng.random_range(0..5) {
            0 => json!("any"),
            1 => json!("replicated"),
            _ if arity == 0 => json!("any"),
            _ => json!({"hash": self.subset(arity, true)}),
        }
    }
    /// An operand: an input with a random placement, sometimes filtered
    /// (a relation with holes, whose frontier and key set the typing
    /// recomputes).
    fn input(&mut self, keys: Vec<u32>, block: Vec<usize>) -> String {
        let n = keys.len();
        let p = self.placement(n);
        let x = self.input_placed(keys, block, p);
        if n > 0 && self.coin(0.2) {
            let pr = self.predicate(n);
            return self.filter(&x, pr);
        }
        x
    }
    fn input_placed(&mut self, keys: Vec<u32>, block: Vec<usize>, placement: Value) -> String {
        let name = format!("I{}", self.inputs.len());
        self.inputs.insert(name.clone(), json!({"key_bounds": keys, "array_bounds": block, "placement": placement}));
        name
    }
    fn node(&mut self, v: Value) -> String {
        let name = format!("N{}", self.count);
        self.count += 1;
        self.nodes.insert(name.clone(), v);
        name
    }
    fn finish(self, outputs: &[&str]) -> Option<Program> {
        let v =
            json!({"inputs": self.inputs, "nodes": self.nodes, "outputs": outputs, "cluster": {"sites": self.sites}});
        let p = Program::from_value(&v).ok()?;
        check_program(&p).ok()?;
        Some(p)
    }

    fn aggregate(&mut self, x: &str, group_by: Vec<usize>, kernel: &str) -> String {
        self.node(json!({"op": "aggregate", "input": x, "group_by": group_by, "kernel": kernel}))
    }
    fn join(&mut self, l: &str, r: &str, lk: Vec<usize>, rk: Vec<usize>, kernel: &str) -> String {
        self.node(json!({"op": "join", "left": l, "right": r, "left_keys": lk, "right_keys": rk, "kernel": kernel}))
    }
    fn filter(&mut self, x: &str, predicate: String) -> String {
        self.node(json!({"op": "filter", "input": x, "predicate": predicate}))
    }
    fn rekey(&mut self, x: &str, key: &str) -> String {
        self.node(json!({"op": "rekey", "input": x, "key": key}))
    }
    fn transform(&mut self, x: &str, kernel: &str) -> String {
        self.node(json!({"op": "transform", "input": x, "kernel": kernel}))
    }

    /// A random predicate over keys of `arity` dims.
    fn predicate(&mut self, arity: usize) -> String {
        let one = |b: &mut B| -> String {
            let d = b.rng.random_range(0..arity);
            let e = b.rng.random_range(0..arity);
            let c = b.rng.random_range(0..=4);
            match b.rng.random_range(0..7) {
                0 => format!("k{d} < {c}"),
                1 => format!("k{d} >= {c}"),
                2 => format!("k{d} == {c}"),
                3 => format!("k{d} == k{e}"),
                4 => format!("k{d} != k{e}"),
                5 => format!("k{d} + k{e} < {}", c + 1),
                _ => format!("k{d} % 2 == 0"),
            }
        };
        match self.rng.random_range(0..5) {
            0 => format!("{} && {}", one(self), one(self)),
            1 => format!("{} || {}", one(self), one(self)),
            _ => one(self),
        }
    }

    /// A random key map for keys of `arity` dims (not always unique: the
    /// program check then rejects the attempt).
    fn key_map(&mut self, arity: usize) -> &'static str {
        match arity {
            1 => self.pick(&["[k0 + 1]", "[k0, 0..2]", "[0, k0]", "[2 * k0]", "[k0]", "[k0, k0]"]),
            2 => self.pick(&[
                "[k1, k0]",
                "[k0, k1, 0..2]",
                "[k0 * 5 + k1]",
                "[k1, k0, 1]",
                "[k0 + k1, k1]",
                "[k0, k1]",
                "[k1, 0..2, k0]",
            ]),
            _ => self.pick(&["[k2, k0, k1]", "[k0, k1, k2]", "[k0 * 5 + k1, k2]", "[k1, k0, k2]"]),
        }
    }

    /// A unary kernel that accepts blocks of this shape and gives one block.
    fn unary(&mut self, block: &[usize]) -> String {
        let mut choices: Vec<&str> = SAME_SHAPE.to_vec();
        if block.len() == 2 {
            choices.extend(["transpose", "rowSum", "colSum"]);
            if block[0] == block[1] {
                choices.push("diag");
            }
        }
        self.pick(&choices).to_string()
    }

    /// A random join of two new inputs: (name, output arity, output block).
    fn random_join(&mut self) -> (String, usize, Vec<usize>) {
        match self.rng.random_range(0..5) {
            0 | 1 => {
                // Matmul-shaped.
                let (i, j, k) = (self.kb(), self.kb(), self.kb());
                let (a, b, c) = (self.ext(), self.ext(), self.ext());
                let x = self.input(vec![i, j], vec![a, b]);
                let y = self.input(vec![j, k], vec![b, c]);
                (self.join(&x, &y, vec![1], vec![0], "matMul"), 3, vec![a, c])
            }
            2 => {
                // Elementwise on every dim.
                let n = self.range(1, 2);
                let keys = self.keys(n);
                let block = self.block2();
                let x = self.input(keys.clone(), block.clone());
                let y = self.input(keys, block.clone());
                let k = self.pick(ELEM2);
                let dims: Vec<usize> = (0..n).collect();
                (self.join(&x, &y, dims.clone(), dims, k), n, block)
            }
            3 => {
                // On one dim, elementwise: (i, j) ⋈ (i, k) → (i, j, k).
                let (i, j, k) = (self.kb(), self.kb(), self.kb());
                let block = self.block2();
                let x = self.input(vec![i, j], block.clone());
                let y = self.input(vec![i, k], block.clone());
                let kern = self.pick(ELEM2);
                (self.join(&x, &y, vec![0], vec![0], kern), 3, block)
            }
            _ => {
                // Matrix and vector: (i, j) ⋈ (j) → (i, j).
                let (i, j) = (self.kb(), self.kb());
                let (a, b) = (self.ext(), self.ext());
                let x = self.input(vec![i, j], vec![a, b]);
                let v = self.input(vec![j], vec![b]);
                let k = self.pick(&["matVecAdd", "matVecSub"]);
                (self.join(&x, &v, vec![1], vec![0], k), 2, vec![a, b])
            }
        }
    }
}

/// Retry a generator until it gives a well-typed program.
pub fn generate(gen: GenFn, rng: &mut ChaCha8Rng) -> Program {
    for _ in 0..1000 {
        if let Some(p) = gen(rng) {
            return p;
        }
    }
    panic!("a generator gave no well-typed program in 1000 attempts")
}

fn aggregate_program(rng: &mut ChaCha8Rng) -> Option<Program> {
    let mut b = B::new(rng);
    let n = b.range(1, 3);
    let keys = b.keys(n);
    let block = b.block2();
    let x = b.input(keys, block);
    let g = b.subset(n, false);
    let k = b.pick(AGG);
    let a = b.aggregate(&x, g, k);
    b.finish(&[&a])
}

fn join_program(rng: &mut ChaCha8Rng) -> Option<Program> {
    let mut b = B::new(rng);
    let (j, _, _) = b.random_join();
    b.finish(&[&j])
}

fn rekey_program(rng: &mut ChaCha8Rng) -> Option<Program> {
    let mut b = B::new(rng);
    let n = b.range(1, 3);
    let keys = b.keys(n);
    let block = b.block2();
    let x = b.input(keys, block);
    let f = b.key_map(n);
    let r = b.rekey(&x, f);
    b.finish(&[&r])
}

fn filter_program(rng: &mut ChaCha8Rng) -> Option<Program> {
    let mut b = B::new(rng);
    let n = b.range(1, 3);
    let keys = b.keys(n);
    let block = b.block2();
    let x = b.input(keys, block);
    let p = b.predicate(n);
    let f = b.filter(&x, p);
    b.finish(&[&f])
}

fn transform_program(rng: &mut ChaCha8Rng) -> Option<Program> {
    let mut b = B::new(rng);
    let n = b.range(1, 2);
    let keys = b.keys(n);
    let block = b.block2();
    let x = b.input(keys, block.clone());
    let k = b.unary(&block);
    let t = b.transform(&x, &k);
    b.finish(&[&t])
}

fn tile_program(rng: &mut ChaCha8Rng) -> Option<Program> {
    let mut b = B::new(rng);
    let n = b.range(1, 2);
    let keys = b.keys(n);
    let block = vec![b.pick(&[1usize, 2, 4, 6]), b.pick(&[1usize, 2, 3, 4, 6])];
    let x = b.input(keys, block.clone());
    let dim = b.range(0, 1);
    let divisors: Vec<usize> = (1..=block[dim]).filter(|s| block[dim] % s == 0).collect();
    let size = b.pick(&divisors);
    let t = b.node(json!({"op": "tile", "input": x, "dim": dim, "size": size}));
    if b.coin(0.5) {
        // And back.
        let ad = b.range(0, 1);
        let c = b.node(json!({"op": "concat", "input": t, "key_dim": n, "array_dim": ad}));
        return b.finish(&[&c]);
    }
    b.finish(&[&t])
}

fn concat_program(rng: &mut ChaCha8Rng) -> Option<Program> {
    let mut b = B::new(rng);
    let n = b.range(1, 3);
    let keys = b.keys(n);
    let block = b.block2();
    let x = b.input(keys, block);
    let kd = b.range(0, n - 1);
    let ad = b.range(0, 1);
    let c = b.node(json!({"op": "concat", "input": x, "key_dim": kd, "array_dim": ad}));
    b.finish(&[&c])
}

fn filter_filter(rng: &mut ChaCha8Rng) -> Option<Program> {
    let mut b = B::new(rng);
    let n = b.range(1, 3);
    let keys = b.keys(n);
    let block = b.block2();
    let mut x = b.input(keys, block);
    for _ in 0..b.range(2, 3) {
        let p = b.predicate(n);
        x = b.filter(&x, p);
    }
    b.finish(&[&x])
}

/// A rekey or a transform of `x` (arity `n`, block `block`); the new arity and block.
fn random_map(b: &mut B, x: &str, n: usize, block: &[usize]) -> (String, usize, Vec<usize>) {
    if b.coin(0.5) {
        let f = b.key_map(n);
        let arity = tra_optimizer::KeyFn::parse(f).map(|k| k.output_arity()).unwrap_or(n);
        (b.rekey(x, f), arity, block.to_vec())
    } else {
        let k = b.unary(block);
        let out = tra_optimizer::KernelRef::parse(&k)
            .ok()
            .and_then(|kr| kr.output_shape(&[block]).ok())
            .unwrap_or_else(|| block.to_vec());
        (b.transform(x, &k), n, out)
    }
}

fn map_map(rng: &mut ChaCha8Rng) -> Option<Program> {
    let mut b = B::new(rng);
    let n = b.range(1, 2);
    let keys = b.keys(n);
    let block = b.block2();
    let x = b.input(keys, block.clone());
    let (m1, n1, b1) = random_map(&mut b, &x, n, &block);
    let (m2, _, _) = random_map(&mut b, &m1, n1, &b1);
    b.finish(&[&m2])
}

fn map_filter(rng: &mut ChaCha8Rng) -> Option<Program> {
    let mut b = B::new(rng);
    let n = b.range(1, 2);
    let keys = b.keys(n);
    let block = b.block2();
    let x = b.input(keys, block.clone());
    let (m, n1, _) = match b.range(0, 2) {
        0 => {
            let id: String = format!("[{}]", (0..n).map(|i| format!("k{i}")).collect::<Vec<_>>().join(", "));
            (b.rekey(&x, &id), n, block.clone())
        }
        _ => random_map(&mut b, &x, n, &block),
    };
    let p = b.predicate(n1);
    let f = b.filter(&m, p);
    b.finish(&[&f])
}

/// Pairs (map kernel, aggregation kernel) where the map distributes over the
/// aggregation, and some where it does not.
fn map_over_agg(b: &mut B, square: bool) -> (String, &'static str) {
    let mut pairs: Vec<(&str, &str)> = vec![
        ("scale(2)", "matAdd"),
        ("neg", "matAdd"),
        ("relu", "max"),
        ("relu", "min"),
        ("transpose", "matAdd"),
        ("transpose", "max"),
        // Not distributive: the rule must not fire.
        ("relu", "matAdd"),
        ("neg", "max"),
        ("sigmoid", "matAdd"),
        ("relu", "elemMul"),
        ("neg", "min"),
    ];
    if square {
        pairs.extend([("diag", "matAdd"), ("diag", "elemMul"), ("diag", "min")]);
    }
    let (m, a) = b.pick(&pairs);
    (m.to_string(), a)
}

fn aggregate_map(rng: &mut ChaCha8Rng) -> Option<Program> {
    let mut b = B::new(rng);
    let n = b.range(1, 3);
    let mut g = b.subset(n, false);
    if g.len() == n && b.coin(0.8) {
        g.pop();
    }
    // Groups of several tuples: the dims aggregated away have bounds ≥ 2.
    let keys: Vec<u32> = (0..n).map(|d| if g.contains(&d) { b.kb() } else { b.range(2, 5) as u32 }).collect();
    let block = b.block2();
    let square = block[0] == block[1];
    let x = b.input(keys, block);
    let (m, agg) = map_over_agg(&mut b, square);
    let out = if b.coin(0.5) {
        // Push-down: a map over an aggregation.
        let a = b.aggregate(&x, g, agg);
        b.transform(&a, &m)
    } else {
        // Pull-up: an aggregation over a map (exposed by R2-3).
        let t = b.transform(&x, &m);
        b.aggregate(&t, g, agg)
    };
    b.finish(&[&out])
}

fn aggregate_filter(rng: &mut ChaCha8Rng) -> Option<Program> {
    let mut b = B::new(rng);
    let n = b.range(1, 3);
    let keys = b.keys(n);
    let block = b.block2();
    let x = b.input(keys, block);
    let g = b.subset(n, true);
    let k = b.pick(AGG);
    let a = b.aggregate(&x, g.clone(), k);
    let p = b.predicate(g.len());
    let f = b.filter(&a, p);
    b.finish(&[&f])
}

fn join_filter(rng: &mut ChaCha8Rng) -> Option<Program> {
    let mut b = B::new(rng);
    let (j, n, _) = b.random_join();
    let p = b.predicate(n);
    let f = b.filter(&j, p);
    b.finish(&[&f])
}

fn join_map(rng: &mut ChaCha8Rng) -> Option<Program> {
    let mut b = B::new(rng);
    let (j, n, block) = b.random_join();
    let k = b.unary(&block);
    let t = b.transform(&j, &k);
    let out = if b.coin(0.4) {
        let f = b.key_map(n);
        b.rekey(&t, f)
    } else {
        t
    };
    b.finish(&[&out])
}

fn identity_rekey(rng: &mut ChaCha8Rng) -> Option<Program> {
    let mut b = B::new(rng);
    let (x, n) = if b.coin(0.5) {
        let n = b.range(1, 3);
        let keys = b.keys(n);
        let block = b.block2();
        (b.input(keys, block), n)
    } else {
        let (j, n, block) = b.random_join();
        let k = b.unary(&block);
        (b.transform(&j, &k), n)
    };
    let f = if b.coin(0.7) {
        format!("[{}]", (0..n).map(|i| format!("k{i}")).collect::<Vec<_>>().join(", "))
    } else {
        b.key_map(n).to_string()
    };
    let r = b.rekey(&x, &f);
    b.finish(&[&r])
}

fn join_and_aggregate(rng: &mut ChaCha8Rng) -> Option<Program> {
    let mut b = B::new(rng);
    let (j, n, _) = b.random_join();
    let g = b.subset(n, false);
    let k = b.pick(AGG);
    let a = b.aggregate(&j, g, k);
    b.finish(&[&a])
}

fn map_then_repartition(rng: &mut ChaCha8Rng) -> Option<Program> {
    let mut b = B::new(rng);
    let n = b.range(1, 2);
    let keys = b.keys(n);
    let block = b.block2();
    let x = b.input(keys, block.clone());
    let (m, n1, b1) = random_map(&mut b, &x, n, &block);
    let mut outs = Vec::new();
    if b.coin(0.6) {
        let g = b.subset(n1, true);
        let k = b.pick(AGG);
        outs.push(b.aggregate(&m, g, k));
    }
    if outs.is_empty() || b.coin(0.5) {
        // Join the map's result with a fresh input of the same type (its
        // frontier is the map's: read it from the program check).
        let probe = json!({"inputs": b.inputs, "nodes": b.nodes, "outputs": [m], "cluster": {"sites": b.sites}});
        let typed = check_program(&Program::from_value(&probe).ok()?).ok()?;
        let t = &typed.types[&m];
        if t.frontier.contains(&0) {
            return None;
        }
        let y = b.input(t.frontier.clone(), b1.clone());
        let dims: Vec<usize> = (0..n1).collect();
        let k = b.pick(ELEM2);
        outs.push(b.join(&m, &y, dims.clone(), dims, k));
    }
    let refs: Vec<&str> = outs.iter().map(String::as_str).collect();
    b.finish(&refs)
}

fn placed_inputs(rng: &mut ChaCha8Rng) -> Option<Program> {
    let mut b = B::new(rng);
    let n = b.range(1, 3);
    let keys = b.keys(n);
    let block = b.block2();
    let g = b.subset(n, true);
    // Often placed on a subset of the group-by dims (the rule's condition).
    let placement = match b.range(0, 3) {
        0 => {
            let mut d: Vec<usize> = g.iter().copied().filter(|_| b.coin(0.6)).collect();
            if d.is_empty() {
                d.push(g[0]);
            }
            json!({"hash": d})
        }
        1 => json!({"hash": g.clone()}),
        _ => b.placement(n),
    };
    let x = b.input_placed(keys.clone(), block.clone(), placement);
    let k = b.pick(AGG);
    let a = b.aggregate(&x, g, k);
    let mut outs = vec![a];
    if b.coin(0.5) {
        // A replicated left operand of a join.
        let r = b.input_placed(keys.clone(), block.clone(), json!("replicated"));
        let y = b.input(keys, block);
        let dims: Vec<usize> = (0..n).collect();
        let k = b.pick(ELEM2);
        outs.push(b.join(&r, &y, dims.clone(), dims, k));
    }
    let refs: Vec<&str> = outs.iter().map(String::as_str).collect();
    b.finish(&refs)
}

fn multi_dim_aggregate(rng: &mut ChaCha8Rng) -> Option<Program> {
    let mut b = B::new(rng);
    let n = b.range(2, 3);
    let keys = b.keys(n);
    let block = b.block2();
    let x = b.input(keys, block);
    let mut g = b.subset(n, true);
    while g.len() < 2 {
        g = b.subset(n, true);
    }
    let k = b.pick(AGG);
    let a = b.aggregate(&x, g, k);
    b.finish(&[&a])
}

fn two_phase(rng: &mut ChaCha8Rng) -> Option<Program> {
    let mut b = B::new(rng);
    let n = b.range(2, 3);
    let keys = b.keys(n);
    let block = b.block2();
    // Group by a permutation of a prefix (sometimes not in order), hashed on
    // some dim outside the group (the rule's condition) or not.
    let g: Vec<usize> = match b.range(0, 3) {
        0 if n == 3 => vec![1, 0],
        1 => b.subset(n, true),
        _ => {
            let mut g = b.subset(n - 1, true);
            if b.coin(0.5) {
                g.reverse();
            }
            g
        }
    };
    let outside: Vec<usize> = (0..n).filter(|d| !g.contains(d)).collect();
    let placement = if !outside.is_empty() && b.coin(0.75) {
        let mut d = vec![b.pick(&outside)];
        if b.coin(0.3) {
            d.push(g[0]);
        }
        json!({"hash": d})
    } else {
        b.placement(n)
    };
    let x = b.input_placed(keys, block, placement);
    let k = b.pick(AGG);
    let a = b.aggregate(&x, g, k);
    b.finish(&[&a])
}

fn join_then_aggregate(rng: &mut ChaCha8Rng) -> Option<Program> {
    let mut b = B::new(rng);
    let (j, n, _) = b.random_join();
    let g = b.subset(n, true);
    let k = b.pick(AGG);
    let a = b.aggregate(&j, g, k);
    b.finish(&[&a])
}

fn matmul(rng: &mut ChaCha8Rng) -> Option<Program> {
    let mut b = B::new(rng);
    let (i, j, k) = (b.kb(), b.kb(), b.kb());
    let (p, q, r) = (b.ext(), b.ext(), b.ext());
    let x = b.input(vec![i, j], vec![p, q]);
    let y = b.input(vec![j, k], vec![q, r]);
    let xy = b.join(&x, &y, vec![1], vec![0], "matMul");
    let z = b.aggregate(&xy, vec![0, 2], "matAdd");
    b.finish(&[&z])
}
