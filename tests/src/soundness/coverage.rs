//! What the generated instances exercised, per rule: every time a rule's
//! pattern matches (whether or not its condition then holds), the match is
//! classified on three axes, and the harness collects the cells it reached.
//!
//! - **operand**: the kind of the relation the matched operator reads — for a
//!   key map (`lmap`, `rekey`), the relation the key map reads; otherwise
//!   every class the pattern binds to a variable. A class is of every kind
//!   among its members (a filter of an aggregate, after `R1-5`, is both a
//!   `filter` and an `aggregate`): `input`, `aggregate` (also `concat`),
//!   `filter`, `join`, `map` (`rekey`, `transform`, `tile`); a re-partition
//!   (`shuffle`, `broadcast`) is of the kinds of the relation it moves.
//! - **key map**: what each key map of the pattern does to the keys it reads,
//!   *judged against the arity of its input* (the mistake this axis exists
//!   for: `[k0]` drops a dim of a 2-dim relation although its own output has
//!   arity 1): `identity`, `drop` (an input dim is not read), `duplicate`
//!   (a dim used twice), `permute` (dims out of order), `offset` (arithmetic
//!   on dims), `insert` (a constant component), `replicate` (a range); `none`
//!   when the pattern has no key map.
//! - **fact**: the algebraic facts of the kernels the match binds: for a map
//!   kernel over an aggregation or join kernel, `distributes` or
//!   `not-distributes`; for an aggregation or join kernel, `idempotent`
//!   (`g(a, a) = a`: a duplicated tuple is invisible), else `commutative`
//!   (associative and commutative), else `plain`; `unary` for a map kernel
//!   alone; `none` without kernels.
//!
//! [`reachable`] lists, per rule, the cells its pattern can match on the
//! programs the generators write; the soundness test requires every one of
//! them to be exercised.

use egg::{ENodeOrVar, Id, Language, PatternAst, Subst};
use std::collections::BTreeSet;
use std::sync::OnceLock;
use tra_optimizer::egraph::{nodes, Ia, TraEGraph};
use tra_optimizer::kernel::KernelRef;
use tra_optimizer::keyexpr::KeyFn;

/// One cell: (operand kind, key-map kind, kernel fact).
pub type Cell = (&'static str, &'static str, &'static str);

/// The operand kinds.
pub const OPERANDS: &[&str] = &["input", "aggregate", "filter", "join", "map"];
/// The key-map kinds (`none`: the pattern has no key map).
pub const KEY_MAPS: &[&str] = &["identity", "drop", "duplicate", "permute", "offset", "insert", "replicate"];
/// The kernel facts.
pub const FACTS: &[&str] = &["distributes", "not-distributes", "commutative", "idempotent", "plain", "unary", "none"];

/// The kinds of a class: of every member; an `erase`, `shuffle` or
/// `broadcast` member is of the kinds of the class it erases or moves (a few
/// levels deep).
fn kinds(eg: &TraEGraph, id: Id, depth: usize, out: &mut BTreeSet<&'static str>) {
    for n in &eg[eg.find(id)].nodes {
        let k = match n {
            Ia::Input(_) => "input",
            Ia::Aggregate(_) | Ia::Concat(_) | Ia::LAgg(_) => "aggregate",
            Ia::Filter(_) | Ia::LFilter(_) => "filter",
            Ia::Join(_) | Ia::LJoin(_) => "join",
            Ia::Rekey(_) | Ia::Transform(_) | Ia::Tile(_) | Ia::LMap(_) => "map",
            Ia::Erase(x) | Ia::Shuffle([_, x]) | Ia::Broadcast(x) => {
                if depth < 4 {
                    kinds(eg, *x, depth + 1, out);
                }
                continue;
            }
            Ia::Param(_) => continue,
        };
        out.insert(k);
    }
}

/// What a key map does to keys of `arity` dims (every property that holds).
pub fn key_map_kinds(key: Option<&KeyFn>, arity: usize) -> Vec<&'static str> {
    let Some(k) = key else { return vec!["identity"] };
    if k.is_identity(arity) {
        return vec!["identity"];
    }
    let text = k.to_string();
    let parts: Vec<&str> = text.trim_start_matches('[').trim_end_matches(']').split(',').map(str::trim).collect();
    let pass = k.passthrough();
    let ranges = k.ranges();
    let mut out = Vec::new();
    let read = k.dims_read();
    if (0..arity).any(|d| !read.contains(&d)) {
        out.push("drop");
    }
    let bare: Vec<usize> = pass.iter().flatten().copied().collect();
    let mut counts = vec![0usize; arity.max(1)];
    for (i, part) in parts.iter().enumerate() {
        if ranges.get(i).copied().flatten().is_some() || pass.get(i).copied().flatten().is_some() {
            continue;
        }
        let one = KeyFn::parse(&format!("[{part}]")).ok();
        match one {
            Some(f) if f.dims_read().is_empty() => push(&mut out, "insert"),
            Some(f) => {
                push(&mut out, "offset");
                for d in f.dims_read() {
                    if d < counts.len() {
                        counts[d] += 1;
                    }
                }
            }
            None => push(&mut out, "offset"),
        }
    }
    for &d in &bare {
        if d < counts.len() {
            counts[d] += 1;
        }
    }
    if counts.iter().any(|&c| c > 1) {
        out.push("duplicate");
    }
    if bare.windows(2).any(|w| w[0] > w[1]) {
        out.push("permute");
    }
    if ranges.iter().any(|r| r.is_some()) {
        out.push("replicate");
    }
    if out.is_empty() {
        // Every dim read once, in order, as itself, and nothing else: that is
        // the identity (`is_identity` says so first; kept for completeness).
        out.push("identity");
    }
    out
}

fn push(v: &mut Vec<&'static str>, x: &'static str) {
    if !v.contains(&x) {
        v.push(x);
    }
}

/// Binary kernels `g` with `g(a, a) = a` on a test block (a duplicated
/// tuple does not change their fold): computed with the executor, once.
fn idempotent(k: &KernelRef) -> bool {
    static CACHE: OnceLock<std::sync::Mutex<std::collections::HashMap<KernelRef, bool>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(&b) = cache.lock().expect("cache").get(k) {
        return b;
    }
    let a = ndarray::ArrayD::from_shape_fn(ndarray::IxDyn(&[2, 2]), |ix| ix[0] as f64 * 3.0 - ix[1] as f64 * 2.0 + 0.5);
    let b = tra_executor::kernels::apply(k, &[&a, &a]).ok().and_then(|v| v.into_iter().next()).is_some_and(|r| r == a);
    cache.lock().expect("cache").insert(k.clone(), b);
    b
}

fn binary_fact(g: &KernelRef) -> &'static str {
    if idempotent(g) {
        "idempotent"
    } else if g.is_assoc_comm() {
        "commutative"
    } else {
        "plain"
    }
}

/// The cells of one match of `ast` (a rule's left-hand side) under `subst`.
pub fn cells(eg: &TraEGraph, ast: &PatternAst<Ia>, subst: &Subst) -> Vec<Cell> {
    // The class of every pattern node (a literal parameter is looked up).
    let mut ids: Vec<Option<Id>> = Vec::with_capacity(ast.as_ref().len());
    for n in ast.as_ref() {
        let id = match n {
            ENodeOrVar::Var(v) => subst.get(*v).map(|i| eg.find(*i)),
            ENodeOrVar::ENode(node) => {
                let kids: Option<Vec<Id>> = node.children().iter().map(|c| ids[usize::from(*c)]).collect();
                kids.and_then(|kids| {
                    let mut it = kids.into_iter();
                    eg.lookup(node.clone().map_children(|_| it.next().expect("child")))
                })
            }
        };
        ids.push(id);
    }
    let class = |c: &Id| ids[usize::from(*c)];
    let param = |c: &Id| class(c).and_then(|i| nodes::leaf(eg, i).ok());
    let kernel = |c: &Id| param(c).and_then(|p| p.as_kernel().ok()).cloned();
    // Key maps (with the class they read), map kernels, binary kernels.
    let mut key_maps: Vec<(Option<KeyFn>, Id)> = Vec::new();
    let mut unary: Vec<KernelRef> = Vec::new();
    let mut binary: Vec<KernelRef> = Vec::new();
    for n in ast.as_ref() {
        let ENodeOrVar::ENode(node) = n else { continue };
        match node {
            Ia::LMap([f, k, x]) => {
                if let (Some(key), Some(x)) = (param(f), class(x)) {
                    key_maps.push((key.as_key().ok().cloned(), x));
                }
                unary.extend(kernel(k));
            }
            Ia::Rekey([f, x]) => {
                if let (Some(key), Some(x)) = (param(f), class(x)) {
                    key_maps.push((key.as_key().ok().cloned(), x));
                }
            }
            Ia::Transform([k, _]) => unary.extend(kernel(k)),
            Ia::LAgg([_, k, _]) | Ia::Aggregate([_, k, _]) | Ia::LJoin([_, _, k, _, _]) | Ia::Join([_, _, k, _, _]) => {
                binary.extend(kernel(k))
            }
            _ => {}
        }
    }
    let mut facts: BTreeSet<&'static str> = BTreeSet::new();
    for m in &unary {
        for g in &binary {
            facts.insert(if m.distributes_over(g) { "distributes" } else { "not-distributes" });
        }
    }
    for g in &binary {
        facts.insert(binary_fact(g));
    }
    if facts.is_empty() {
        facts.insert(if unary.is_empty() { "none" } else { "unary" });
    }
    // (operand kinds, key-map kinds) pairs.
    let mut pairs: Vec<(BTreeSet<&'static str>, Vec<&'static str>)> = Vec::new();
    if key_maps.is_empty() {
        let mut ks = BTreeSet::new();
        for (n, id) in ast.as_ref().iter().zip(&ids) {
            if let (ENodeOrVar::Var(_), Some(id)) = (n, id) {
                if eg[*id].data.param().is_none() {
                    kinds(eg, *id, 0, &mut ks);
                }
            }
        }
        pairs.push((ks, vec!["none"]));
    } else {
        for (key, x) in key_maps {
            let arity = eg[x]
                .data
                .phys()
                .map(|p| p.rel.key_arity())
                .or_else(|| eg[x].data.logical().map(|l| l.rel.key_arity()));
            let Some(arity) = arity else { continue };
            let mut ks = BTreeSet::new();
            kinds(eg, x, 0, &mut ks);
            pairs.push((ks, key_map_kinds(key.as_ref(), arity)));
        }
    }
    let mut out = Vec::new();
    for (ks, ms) in &pairs {
        for o in ks {
            for m in ms {
                for f in &facts {
                    out.push((*o, *m, *f));
                }
            }
        }
    }
    out
}

/// The cells a rule's pattern can match on generated programs, per rule:
/// the product of the operand kinds, key-map kinds and facts listed, less the
/// exclusions (each with its reason in the code).
pub fn reachable(rule: &str) -> BTreeSet<Cell> {
    let all_ops: &[&str] = &["input", "aggregate", "filter", "join", "map"];
    let none: &[&str] = &["none"];
    let agg_facts: &[&str] = &["commutative", "idempotent"];
    let join_facts: &[&str] = &["commutative", "idempotent", "plain"];
    let map_facts: &[&str] = &["unary", "none"];
    let distributive: &[&str] = &["distributes", "not-distributes", "commutative", "idempotent"];
    let (ops, maps, facts): (&[&str], &[&str], &[&str]) = match rule {
        "lower-aggregate" => (all_ops, none, agg_facts),
        "lower-join" => (all_ops, none, join_facts),
        "lower-rekey" => (all_ops, KEY_MAPS, none),
        "lower-filter" | "lower-tile" | "lower-concat" => (all_ops, none, none),
        "lower-transform" => (all_ops, none, &["unary"]),
        "R1-1" => (all_ops, none, none),
        "R1-2" | "R1-3" => (all_ops, KEY_MAPS, map_facts),
        "map-identity" => (all_ops, KEY_MAPS, none),
        // Push-down: the key map reads an aggregate (a filter of one, after
        // R1-5); pull-up: a re-partitioned operand.
        "R1-4" => (&["aggregate", "filter"], KEY_MAPS, distributive),
        "R1-5" => (all_ops, none, agg_facts),
        "R1-6" => (all_ops, none, join_facts),
        // The key map reads a join (a filter of one, after R1-6).
        "R1-7" => {
            (&["join", "filter"], KEY_MAPS, &["distributes", "not-distributes", "commutative", "idempotent", "plain"])
        }
        "R2-1" | "R2-2" => (all_ops, none, none),
        "R2-3" => (all_ops, KEY_MAPS, map_facts),
        "R2-4" => (all_ops, none, &["commutative", "idempotent", "none"]),
        "agg-subset" | "R2-5" => (all_ops, none, agg_facts),
        "R2-6" | "R2-7" | "R2-7b" => (all_ops, none, join_facts),
        "matmul-bmm" | "matmul-cmm" | "matmul-rmm" => (all_ops, none, &["commutative", "plain"]),
        "matmul-assoc" => (all_ops, none, &["commutative", "plain"]),
        "agg-eager" => (all_ops, none, &["commutative", "idempotent", "plain"]),
        _ => (&[], &[], &[]),
    };
    let mut out = BTreeSet::new();
    for o in ops {
        for m in maps {
            for f in facts {
                out.insert((*o, *m, *f));
            }
        }
    }
    out
}
