//! One generator per rule: a function from a random generator to a small,
//! well-typed TRA program (with its site count, 1–7) built so that, after
//! lowering (and the few helper rules listed with it), the graph holds the
//! rule's left-hand side with random key bounds (1–5 per dimension), block
//! shapes, kernels, predicates, key maps and input placements. The
//! parameters are drawn so that many instances satisfy the rule's condition
//! and some do not (the rule must then leave them alone; a mutant that drops
//! the condition must be caught on them).
//!
//! Operands are not only inputs: [`B::operand`] makes inputs, filters,
//! aggregates, joins and maps of the key bounds asked for, and
//! [`B::rekey_any`] key maps of every kind — the identity, and maps that
//! drop (after a filter `ki == kj`, or a dim of bound 1), duplicate,
//! permute, offset, insert or replicate dims. What the instances reach is
//! measured by [`super::coverage`].
//!
//! The file is longer than the others on purpose: the 29 generators are
//! short, share the builder `B`, and are easiest to review for blind spots
//! side by side, one per rule in the order of `tra rules`.

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
        "R1-2" => g(map_map, &["R1-5", "R1-6"]),
        "R1-3" => g(map_filter, &["R1-2", "R1-5", "R1-6"]),
        "R1-4" => g(aggregate_map, &["R1-2", "R1-5", "R2-3"]),
        "R1-5" => g(aggregate_filter, &[]),
        "R1-6" => g(join_filter, &["R2-6"]),
        "R1-7" => g(join_map, &["R1-2", "R1-6"]),
        "map-identity" => g(identity_rekey, &["R1-7", "R1-5", "R1-6"]),
        "R2-1" => g(join_and_aggregate, &["R2-4", "R2-6", "R2-7"]),
        "R2-2" => g(join_filter, &["R1-6", "R2-6"]),
        "R2-3" => g(map_then_repartition, &["R1-2", "R1-5", "R1-6"]),
        "R2-4" => g(placed_inputs, &[]),
        "agg-subset" => g(multi_dim_aggregate, &[]),
        "R2-5" => g(two_phase, &["agg-subset"]),
        "R2-6" => g(join_program, &[]),
        "R2-7" => g(join_then_aggregate, &["agg-subset"]),
        "R2-7b" => g(join_then_aggregate, &["R2-6", "agg-subset"]),
        "matmul-bmm" | "matmul-cmm" | "matmul-rmm" => g(matmul, &[]),
        "matmul-assoc" => g(matmul_chain, &[]),
        "agg-eager" => g(eager_aggregation, &[]),
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
/// What [`B::operand_of`] makes.
const OPERAND_KINDS: &[&str] = &["input", "filter", "aggregate", "join", "map"];
/// What [`B::rekey_kind`] makes.
const KEY_MAP_KINDS: &[&str] = &["identity", "drop", "duplicate", "permute", "offset", "insert", "replicate"];
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
    /// An operand with these key bounds and block shape, of a random kind:
    /// an input with a random placement, a filter of one (a relation with
    /// holes, whose frontier the typing recomputes), an aggregate (of an
    /// input with one more dim, summed away), a join (elementwise on every
    /// dim, or a matrix with a vector on its last dim) or a map (a
    /// shape-keeping transform).
    fn input(&mut self, keys: Vec<u32>, block: Vec<usize>) -> String {
        self.operand(keys, block)
    }

    /// See `B::input`: each kind equally often.
    pub fn operand(&mut self, keys: Vec<u32>, block: Vec<usize>) -> String {
        let kind = self.pick(OPERAND_KINDS);
        self.operand_of(kind, keys, block)
    }

    /// An operand of this kind (`input`, `filter`, `aggregate`, `join`,
    /// `map`; an input when the kind does not fit key arity 0).
    pub fn operand_of(&mut self, kind: &str, keys: Vec<u32>, block: Vec<usize>) -> String {
        let n = keys.len();
        match kind {
            "filter" if n > 0 => {
                let x = self.plain_input(keys, block);
                let pr = self.predicate(n);
                self.filter(&x, pr)
            }
            "aggregate" => {
                // One more dim, at a random position, aggregated away.
                let at = self.range(0, n);
                let mut wide = keys.clone();
                wide.insert(at, self.range(1, 3) as u32);
                let x = self.plain_input(wide, block);
                let g: Vec<usize> = (0..=n).filter(|&d| d != at).collect();
                let k = self.pick(AGG);
                self.aggregate(&x, g, k)
            }
            "join" if n > 0 => {
                let x = self.plain_input(keys.clone(), block.clone());
                if block.len() == 2 && self.coin(0.4) {
                    let v = self.plain_input(vec![keys[n - 1]], vec![block[1]]);
                    let k = self.pick(&["matVecAdd", "matVecSub"]);
                    self.join(&x, &v, vec![n - 1], vec![0], k)
                } else {
                    let y = self.plain_input(keys, block);
                    let dims: Vec<usize> = (0..n).collect();
                    let k = self.pick(ELEM2);
                    self.join(&x, &y, dims.clone(), dims, k)
                }
            }
            "map" => {
                let x = self.plain_input(keys, block);
                let k = self.pick(SAME_SHAPE);
                self.transform(&x, k)
            }
            _ => self.plain_input(keys, block),
        }
    }

    /// Key bounds for an operand that a key map of `kind` will read: for
    /// `drop`, one dim of bound 1 (the map drops it, or another dim after a
    /// filter `kj == ki`).
    fn keys_for(&mut self, kinds: &[&str], n: usize) -> Vec<u32> {
        let mut keys = self.keys(n);
        if kinds.contains(&"drop") && n > 0 {
            let d = self.range(0, n - 1);
            keys[d] = 1;
        }
        keys
    }

    /// Two or three distinct key-map kinds, at random: a program holds one
    /// key map of each over the same operand, so that every instance covers
    /// several.
    fn map_kinds(&mut self) -> Vec<&'static str> {
        use rand::seq::SliceRandom;
        let mut kinds = KEY_MAP_KINDS.to_vec();
        kinds.shuffle(self.rng);
        kinds.truncate(self.range(2, 3));
        kinds
    }

    /// An operand of a random kind, and rekeys of it by key maps of two or
    /// three kinds; (each rekey, its arity). `None` when none could be made.
    fn rekeyed_operand(&mut self, n: usize, block: Vec<usize>) -> Option<Vec<(String, usize)>> {
        let (kind, maps) = (self.pick(OPERAND_KINDS), self.map_kinds());
        let keys = self.keys_for(&maps, n);
        let x = self.operand_of(kind, keys, block);
        let out: Vec<(String, usize)> = maps.iter().filter_map(|m| self.rekey_kind(&x, m)).collect();
        (!out.is_empty()).then_some(out)
    }

    /// `x` (keys `keys`, block `block`, placed as the caller chose) or, each
    /// equally often, a relation of another kind that keeps its placement: a
    /// filter or a map of it, or a join with `x` on the right (a broadcast
    /// left operand keeps the right's placement); or an aggregate of a new
    /// input (placed by its group-by).
    fn placed_operand(&mut self, x: String, keys: Vec<u32>, block: Vec<usize>) -> String {
        let n = keys.len();
        match self.pick(OPERAND_KINDS) {
            "filter" if n > 0 => {
                let p = self.predicate(n);
                self.filter(&x, p)
            }
            "map" => {
                let k = self.pick(SAME_SHAPE);
                self.transform(&x, k)
            }
            "join" if n > 0 => {
                let y = self.plain_input(keys, block);
                let dims: Vec<usize> = (0..n).collect();
                let k = self.pick(ELEM2);
                self.join(&y, &x, dims.clone(), dims, k)
            }
            "aggregate" => self.operand_of("aggregate", keys, block),
            _ => x,
        }
    }

    /// An input with a random placement.
    fn plain_input(&mut self, keys: Vec<u32>, block: Vec<usize>) -> String {
        let p = self.placement(keys.len());
        self.input_placed(keys, block, p)
    }

    /// The key bounds of a relation of the program so far (`None` when the
    /// program so far does not check).
    fn frontier(&self, x: &str) -> Option<Vec<u32>> {
        let probe =
            json!({"inputs": self.inputs, "nodes": self.nodes, "outputs": [x], "cluster": {"sites": self.sites}});
        let typed = check_program(&Program::from_value(&probe).ok()?).ok()?;
        Some(typed.types[x].frontier.clone())
    }

    /// A rekey of `x` by a key map of a random kind (identity, drop,
    /// duplicate, permute, offset, insert, replicate), valid for `x`'s key
    /// bounds: a dim is dropped when its bound is 1, or after a filter
    /// `kj == ki` that makes the rest of the key unique (the diagonal of a
    /// matrix of blocks). The node and its key arity.
    pub fn rekey_any(&mut self, x: &str) -> Option<(String, usize)> {
        let kind = self.pick(KEY_MAP_KINDS);
        self.rekey_kind(x, kind)
    }

    /// A rekey of `x` by a key map of this kind (see [`B::rekey_any`]).
    pub fn rekey_kind(&mut self, x: &str, kind: &str) -> Option<(String, usize)> {
        let f = self.frontier(x)?;
        let n = f.len();
        let ks = |d: &[usize]| d.iter().map(|i| format!("k{i}")).collect::<Vec<_>>();
        let mut x = x.to_string();
        let comps: Vec<String> = match kind {
            "identity" => ks(&(0..n).collect::<Vec<_>>()),
            "drop" if n >= 1 => {
                let j = match (0..n).find(|&d| f[d] == 1) {
                    Some(j) if self.coin(0.75) || n == 1 => j,
                    _ if n >= 2 => {
                        // The diagonal: keep the keys with kj == ki, drop kj.
                        let j = self.range(0, n - 1);
                        let i = (j + 1 + self.range(0, n - 2)) % n;
                        x = self.filter(&x, format!("k{j} == k{i}"));
                        j
                    }
                    _ => return None,
                };
                let mut keep: Vec<usize> = (0..n).filter(|&d| d != j).collect();
                if keep.len() >= 2 && self.coin(0.3) {
                    keep.reverse();
                }
                ks(&keep)
            }
            "duplicate" if n >= 1 => {
                let mut c = ks(&(0..n).collect::<Vec<_>>());
                let d = self.range(0, n - 1);
                let at = self.range(0, n);
                c.insert(at, format!("k{d}"));
                c
            }
            "permute" if n >= 2 => {
                let mut d: Vec<usize> = (0..n).collect();
                while d.windows(2).all(|w| w[0] < w[1]) {
                    use rand::seq::SliceRandom;
                    d.shuffle(self.rng);
                }
                ks(&d)
            }
            "offset" if n >= 1 => {
                let mut c = ks(&(0..n).collect::<Vec<_>>());
                let d = self.range(0, n - 1);
                match self.range(0, 2) {
                    0 => c[d] = format!("k{d} + {}", self.range(1, 2)),
                    1 => c[d] = format!("{} * k{d}", self.range(2, 3)),
                    _ if n >= 2 => {
                        // Linearize two dims into one: [k0 * f1 + k1, …].
                        let e = (d + 1) % n;
                        c[d] = format!("k{d} * {} + k{e}", f[e].max(1));
                        c.remove(e);
                    }
                    _ => c[d] = format!("k{d} + 1"),
                }
                c
            }
            "insert" => {
                let mut c = ks(&(0..n).collect::<Vec<_>>());
                let at = self.range(0, n);
                c.insert(at, self.range(0, 2).to_string());
                c
            }
            "replicate" => {
                let mut c = ks(&(0..n).collect::<Vec<_>>());
                let at = self.range(0, n);
                c.insert(at, format!("0..{}", self.range(2, 3)));
                c
            }
            _ => return None,
        };
        let arity = comps.len();
        let key = format!("[{}]", comps.join(", "));
        Some((self.rekey(&x, &key), arity))
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
        if arity == 0 {
            return self.pick(&["true", "false"]).to_string();
        }
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

    /// A unary kernel that accepts blocks of this shape and gives one block.
    fn unary(&mut self, block: &[usize]) -> String {
        let mut choices: Vec<&str> = SAME_SHAPE.to_vec();
        if block.len() == 2 {
            choices.extend(["transpose", "rowSum", "colSum", "rowMax", "colMax"]);
            if block[0] == block[1] {
                choices.push("diag");
            }
        }
        self.pick(&choices).to_string()
    }

    /// A random join of two new inputs: (name, output arity, output block).
    fn random_join(&mut self) -> (String, usize, Vec<usize>) {
        match self.rng.random_range(0..6) {
            0 | 1 => {
                // Matmul-shaped.
                let (i, j, k) = (self.kb(), self.kb(), self.kb());
                let (a, b, c) = (self.ext(), self.ext(), self.ext());
                let x = self.input(vec![i, j], vec![a, b]);
                let y = self.input(vec![j, k], vec![b, c]);
                (self.join(&x, &y, vec![1], vec![0], "matMul"), 3, vec![a, c])
            }
            2 | 5 => {
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
    let block = b.block2();
    let outs: Vec<String> = b.rekeyed_operand(n, block)?.into_iter().map(|x| x.0).collect();
    let refs: Vec<&str> = outs.iter().map(String::as_str).collect();
    b.finish(&refs)
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

/// A key map of `kind` and a kernel over `x` in either order (R1-2 composes
/// them into one local map), or just one of them, each shape equally often;
/// (result, arity, block). `x` has arity `n` and block `block`.
fn map_chain(b: &mut B, x: &str, kind: &str, n: usize, block: &[usize]) -> Option<(String, usize, Vec<usize>)> {
    let k = b.unary(block);
    let out_block = tra_optimizer::KernelRef::parse(&k)
        .ok()
        .and_then(|kr| kr.output_shape(&[block]).ok())
        .unwrap_or_else(|| block.to_vec());
    Some(match b.range(0, 3) {
        0 => {
            let (r, a) = b.rekey_kind(x, kind)?;
            (r, a, block.to_vec())
        }
        1 => (b.transform(x, &k), n, out_block),
        2 => {
            let (r, a) = b.rekey_kind(x, kind)?;
            (b.transform(&r, &k), a, out_block)
        }
        _ => {
            let t = b.transform(x, &k);
            let (r, a) = b.rekey_kind(&t, kind)?;
            (r, a, out_block)
        }
    })
}

/// An operand of a random kind with keys fit for key maps of two or three
/// kinds, then a [`map_chain`] over it for each; (result, arity, block) of
/// each chain that could be made.
fn operand_and_chains(b: &mut B, n: usize) -> Option<Vec<(String, usize, Vec<usize>)>> {
    let (kind, maps) = (b.pick(OPERAND_KINDS), b.map_kinds());
    let keys = b.keys_for(&maps, n);
    let block = b.block2();
    let x = b.operand_of(kind, keys, block.clone());
    let out: Vec<_> = maps.iter().filter_map(|m| map_chain(b, &x, m, n, &block)).collect();
    (!out.is_empty()).then_some(out)
}

fn map_map(rng: &mut ChaCha8Rng) -> Option<Program> {
    let mut b = B::new(rng);
    let n = b.pick(&[1, 2, 2, 3]);
    let mut outs = Vec::new();
    if b.coin(0.4) {
        // Two key maps (no kernel).
        let block = b.block2();
        for (r, _) in b.rekeyed_operand(n, block)? {
            outs.extend(b.rekey_any(&r).map(|x| x.0));
        }
    } else {
        for (m1, n1, b1) in operand_and_chains(&mut b, n)? {
            let kind = b.pick(KEY_MAP_KINDS);
            outs.extend(map_chain(&mut b, &m1, kind, n1, &b1).map(|x| x.0));
        }
    }
    let refs: Vec<&str> = outs.iter().map(String::as_str).collect();
    b.finish(&refs)
}

fn map_filter(rng: &mut ChaCha8Rng) -> Option<Program> {
    let mut b = B::new(rng);
    let n = b.range(1, 2);
    let mut outs = Vec::new();
    for (m, n1, _) in operand_and_chains(&mut b, n)? {
        let p = b.predicate(n1);
        outs.push(b.filter(&m, p));
    }
    let refs: Vec<&str> = outs.iter().map(String::as_str).collect();
    b.finish(&refs)
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
        ("rowMax", "max"),
        ("colMax", "max"),
        // Not distributive: the rule must not fire.
        ("relu", "matAdd"),
        ("neg", "max"),
        ("sigmoid", "matAdd"),
        ("relu", "elemMul"),
        ("neg", "min"),
        ("exp", "matAdd"),
        ("rowMax", "matAdd"),
        ("colMax", "min"),
    ];
    if square {
        pairs.extend([("diag", "matAdd"), ("diag", "elemMul"), ("diag", "min")]);
    }
    let (m, a) = b.pick(&pairs);
    (m.to_string(), a)
}

/// A map over an aggregation (R1-4 push-down) — the kernel, a key map of
/// any kind, or both (R1-2 composes them into one local map), sometimes
/// after a filter of the aggregate (R1-5 puts the aggregation under it) —
/// or an aggregation over a map (pull-up, exposed by R2-3). The shape users
/// write is `diag(A·B)`: aggregate, filter `k0 == k1`, rekey `[k0]` (which
/// drops a dim), `diag`; the key map must be judged against the
/// aggregate's arity, not its own output's.
fn aggregate_map(rng: &mut ChaCha8Rng) -> Option<Program> {
    let mut b = B::new(rng);
    let n = b.range(1, 3);
    let mut g = b.subset(n, false);
    if g.len() == n && b.coin(0.5) {
        g.pop();
    }
    let maps = b.map_kinds();
    // Groups of several tuples: the dims aggregated away have bounds ≥ 2;
    // for a key map that drops, a group dim of bound 1.
    let group_keys = b.keys_for(&maps, g.len());
    let keys: Vec<u32> = (0..n)
        .map(|d| match g.iter().position(|&x| x == d) {
            Some(i) => group_keys[i],
            None => b.range(2, 4) as u32,
        })
        .collect();
    let block = b.block2();
    let square = block[0] == block[1];
    let x = b.input(keys, block);
    let (m, agg) = map_over_agg(&mut b, square);
    let mut outs = Vec::new();
    if b.coin(0.8) {
        // Push-down: maps over an aggregation.
        let mut a = b.aggregate(&x, g.clone(), agg);
        if !g.is_empty() && b.coin(0.5) {
            let p = b.predicate(g.len());
            a = b.filter(&a, p);
        }
        for map in maps {
            let out = match b.range(0, 2) {
                0 => Some(b.transform(&a, &m)),
                1 => b.rekey_kind(&a, map).map(|(r, _)| b.transform(&r, &m)),
                _ => {
                    let t = b.transform(&a, &m);
                    b.rekey_kind(&t, map).map(|x| x.0)
                }
            };
            outs.extend(out);
        }
    } else {
        // Pull-up: an aggregation over a map (exposed by R2-3).
        let t = b.transform(&x, &m);
        outs.push(b.aggregate(&t, g, agg));
    }
    if outs.is_empty() {
        return None;
    }
    let refs: Vec<&str> = outs.iter().map(String::as_str).collect();
    b.finish(&refs)
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
    let (mut j, n, block) = b.random_join();
    if b.coin(0.5) {
        // A filtered join (R1-6 pushes the filter into the join).
        let p = b.predicate(n);
        j = b.filter(&j, p);
    }
    let k = b.unary(&block);
    let mut outs = Vec::new();
    for map in b.map_kinds() {
        let out = match b.range(0, 2) {
            0 => Some(b.transform(&j, &k)),
            1 => {
                let t = b.transform(&j, &k);
                b.rekey_kind(&t, map).map(|x| x.0)
            }
            _ => b.rekey_kind(&j, map).map(|(r, _)| b.transform(&r, &k)),
        };
        outs.extend(out);
    }
    if outs.is_empty() {
        return None;
    }
    let refs: Vec<&str> = outs.iter().map(String::as_str).collect();
    b.finish(&refs)
}

fn identity_rekey(rng: &mut ChaCha8Rng) -> Option<Program> {
    let mut b = B::new(rng);
    let outs: Vec<String> = if b.coin(0.6) {
        let n = b.range(1, 3);
        let block = b.block2();
        b.rekeyed_operand(n, block)?.into_iter().map(|x| x.0).collect()
    } else {
        let (j, n, block) = b.random_join();
        let k = b.unary(&block);
        let t = b.transform(&j, &k);
        let f = format!("[{}]", (0..n).map(|i| format!("k{i}")).collect::<Vec<_>>().join(", "));
        let mut outs = vec![b.rekey(&t, &f)];
        outs.extend(b.rekey_any(&t).map(|x| x.0));
        outs
    };
    let refs: Vec<&str> = outs.iter().map(String::as_str).collect();
    b.finish(&refs)
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
    let mut outs = Vec::new();
    for (m, n1, b1) in operand_and_chains(&mut b, n)? {
        let mut done = false;
        if n1 > 0 && b.coin(0.6) {
            let g = b.subset(n1, true);
            let k = b.pick(AGG);
            outs.push(b.aggregate(&m, g, k));
            done = true;
        }
        if !done || b.coin(0.5) {
            // Join the map's result with a fresh input of the same type (its
            // frontier is the map's: read it from the program check).
            let frontier = b.frontier(&m)?;
            if frontier.contains(&0) || n1 == 0 {
                continue;
            }
            let y = b.input(frontier, b1.clone());
            let dims: Vec<usize> = (0..n1).collect();
            let k = b.pick(ELEM2);
            outs.push(b.join(&m, &y, dims.clone(), dims, k));
        }
    }
    if outs.is_empty() {
        return None;
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
    let x = b.placed_operand(x, keys.clone(), block.clone());
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
    let x = b.input_placed(keys.clone(), block.clone(), placement);
    let x = b.placed_operand(x, keys, block);
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

/// A matrix of the chain generator: its name, stored key bounds and block
/// shape (`[rows, cols]` each).
type Matrix = (String, [u32; 2], [usize; 2]);

fn transposed((_, k, a): &Matrix, t: bool) -> ([u32; 2], [usize; 2]) {
    if t {
        ([k[1], k[0]], [a[1], a[0]])
    } else {
        (*k, *a)
    }
}

/// A matrix operand of any kind whose `op` (transposed when `t`) has these
/// key bounds and block shape.
fn chain_operand(b: &mut B, keys: [u32; 2], block: [usize; 2], t: bool) -> Matrix {
    let (k, a) = transposed(&(String::new(), keys, block), t);
    (b.operand(k.to_vec(), a.to_vec()), k, a)
}

/// `c·op(l)·op(r)` as a TRA join and aggregation: a matrix product kernel
/// chosen by the flags (`matMul`, `matMulTN`, `matMulNT`, `matMulTT`), now
/// and then composed with `scale(c)`.
fn chain_product(b: &mut B, l: &Matrix, tl: bool, r: &Matrix, tr: bool) -> Matrix {
    let name = match (tl, tr) {
        (false, false) => "matMul",
        (true, false) => "matMulTN",
        (false, true) => "matMulNT",
        (true, true) => "matMulTT",
    };
    let kernel = if b.coin(0.3) { format!("compose(scale({}),{name})", b.pick(&["2", "-0.5"])) } else { name.into() };
    let (ca, cb) = (usize::from(!tl), usize::from(tr));
    let j = b.join(&l.0, &r.0, vec![ca], vec![cb], &kernel);
    let (kl, al) = transposed(l, tl);
    let (kr, ar) = transposed(r, tr);
    let agg = b.aggregate(&j, vec![1 - ca, 2], "matAdd");
    (agg, [kl[0], kr[1]], [al[0], ar[1]])
}

/// A product of three matrices, `(P·Q)·R` or `P·(Q·R)`, each product with
/// random operand transposes and scale, the inner product read transposed
/// by the outer one now and then; operands of every kind (filters make
/// holes).
fn matmul_chain(rng: &mut ChaCha8Rng) -> Option<Program> {
    let mut b = B::new(rng);
    let k = [b.kb(), b.kb(), b.kb(), b.kb()];
    let a = [b.ext(), b.ext(), b.ext(), b.ext()];
    let t: Vec<bool> = (0..5).map(|_| b.coin(0.3)).collect();
    let z = if b.coin(0.5) {
        // (P·Q)·R; read transposed (t[4]), the inner product is (Qᵀ·Pᵀ).
        let (m, n, o) = if t[4] { (2, 1, 0) } else { (0, 1, 2) };
        let p = chain_operand(&mut b, [k[m], k[n]], [a[m], a[n]], t[0]);
        let q = chain_operand(&mut b, [k[n], k[o]], [a[n], a[o]], t[1]);
        let pq = chain_product(&mut b, &p, t[0], &q, t[1]);
        let r = chain_operand(&mut b, [k[2], k[3]], [a[2], a[3]], t[2]);
        chain_product(&mut b, &pq, t[4], &r, t[2]).0
    } else {
        let (m, n, o) = if t[4] { (3, 2, 1) } else { (1, 2, 3) };
        let p = chain_operand(&mut b, [k[0], k[1]], [a[0], a[1]], t[0]);
        let q = chain_operand(&mut b, [k[m], k[n]], [a[m], a[n]], t[1]);
        let r = chain_operand(&mut b, [k[n], k[o]], [a[n], a[o]], t[2]);
        let qr = chain_product(&mut b, &q, t[1], &r, t[2]);
        chain_product(&mut b, &p, t[0], &qr, t[4]).0
    };
    b.finish(&[&z])
}

/// An aggregation over a join that sums away dims of the left operand only
/// (now and then none, or the join kernel not linear: the rule must then
/// leave it alone), with kernels linear in each operand (`elemMul`,
/// `matMul`, `einSum`) or not (`matAdd`, `max`).
fn eager_aggregation(rng: &mut ChaCha8Rng) -> Option<Program> {
    let mut b = B::new(rng);
    let kernel = b.pick(&["elemMul", "matMul", "einSum(ij_jk_ik)", "matAdd", "max"]);
    let (block_a, block_b) = if kernel == "matMul" || kernel.starts_with("einSum") {
        let (m, n, o) = (b.ext(), b.ext(), b.ext());
        (vec![m, n], vec![n, o])
    } else {
        let block = b.block2();
        (block.clone(), block)
    };
    let q = b.kb();
    if b.coin(0.5) {
        return eager_aggregation_right(b, kernel, block_a, block_b, q);
    }
    let mut keys_a = vec![b.kb(), q];
    if b.coin(0.5) {
        keys_a.push(b.kb());
    }
    let mut keys_b = vec![q];
    if b.coin(0.5) {
        keys_b.push(b.kb());
    }
    let (na, nb) = (keys_a.len(), keys_b.len());
    let x = b.operand(keys_a, block_a);
    let y = b.operand(keys_b, block_b);
    let j = b.join(&x, &y, vec![1], vec![0], kernel);
    // The join dim, maybe a's third dim, maybe a's first (then nothing is summed), then b's dim.
    let mut g = vec![1];
    if na == 3 && b.coin(0.5) {
        g.push(2);
    }
    if b.coin(0.15) {
        g.insert(0, 0);
    }
    if nb == 2 {
        g.push(na);
    }
    let z = b.aggregate(&j, g, "matAdd");
    b.finish(&[&z])
}

/// `agg-eager/right`: dims of the right operand summed. `b` has its join dim
/// first or last and one or two other dims; the aggregation keeps every dim
/// of `a` (sometimes in another order, then nothing matches), and an
/// increasing part of `b`'s (sometimes all of them).
fn eager_aggregation_right(
    mut b: B<'_>,
    kernel: &str,
    block_a: Vec<usize>,
    block_b: Vec<usize>,
    q: u32,
) -> Option<Program> {
    let keys_a = vec![b.kb(), q];
    let rest = b.range(1, 2);
    let mut keys_b: Vec<u32> = (0..rest).map(|_| b.kb()).collect();
    let jr = if b.coin(0.5) {
        keys_b.insert(0, q);
        0
    } else {
        keys_b.push(q);
        rest
    };
    let x = b.operand(keys_a, block_a);
    let y = b.operand(keys_b, block_b);
    let j = b.join(&x, &y, vec![1], vec![jr], kernel);
    let mut g = if b.coin(0.1) { vec![1, 0] } else { vec![0, 1] };
    for d in 0..rest {
        if b.coin(if d == 0 { 0.3 } else { 0.5 }) {
            g.push(2 + d);
        }
    }
    let z = b.aggregate(&j, g, "matAdd");
    b.finish(&[&z])
}
