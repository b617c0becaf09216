//! How a plan is told to people: its label, strategy first, and the rule that
//! built each of its operators.
//!
//! A label is what the web page, the command line and the benchmarks show to
//! tell alternatives apart, so it leads with the strategy (`BMM`, `CMM`,
//! `RMM (3D)` for a single matrix multiply; the mix of join strategies
//! otherwise) and then says what moves: `CMM — shuffle X by k, Y by k;
//! partial sums exchanged`. For a single `matMul` join the key dims are named
//! as in `Z[i,j] = Σ_k X[i,k]·Y[k,j]`; elsewhere they are `key 0`, `key 1`…
//! as in key expressions.

use crate::egraph::{ExtractedPlan, Ia, TraEGraph};
use crate::optimize::JoinStrategy;
use crate::program::{IaOp, Plan};
use crate::KernelRef;
use egg::{Id, Language};
use indexmap::IndexMap;
use std::collections::{HashMap, HashSet};

/// The most exchanged intermediates a label names by their program nodes
/// (`A1, dZ1 exchanged`); the others are counted.
const NAMED_INTERMEDIATES: usize = 4;

/// The label of a plan whose local joins use `strategy` (in plan order).
pub fn plan_label(plan: &Plan, strategy: &[JoinStrategy], dim_names: &IndexMap<String, Vec<String>>) -> String {
    plan_label_naming(plan, strategy, dim_names, &HashMap::new())
}

/// [`plan_label`], with the program node each operator computes where it
/// computes one ([`computes`]): exchanged intermediates are named by it.
pub fn plan_label_naming(
    plan: &Plan,
    strategy: &[JoinStrategy],
    dim_names: &IndexMap<String, Vec<String>>,
    computes: &HashMap<String, String>,
) -> String {
    let moves = Moves::of(plan);
    if let Some(label) = matmul_label(plan, strategy, &moves, dim_names) {
        return label;
    }
    let details = moves.generic_text(plan, dim_names, computes);
    let label = match join_headline(strategy) {
        _ if moves.exchanges.is_empty() => "local — nothing moved".into(),
        Some(h) => format!("{h} — {details}"),
        None => details,
    };
    match product_order(plan) {
        Some(order) => format!("{label}; order {order}"),
        None => label,
    }
}

/// The bracketing of a plan whose outputs are chains of block matrix
/// products (`X·(Y·V)`, `Xᵀ·Y` for a transposed operand), when it computes
/// at least two: alternatives of a chain differ by order as well as by
/// distribution. Exchanges, key-only maps and the aggregations that sum a
/// product's terms are read through; any other operator on the way from an
/// output to its inputs means the plan is not a chain (`None`).
pub fn product_order(plan: &Plan) -> Option<String> {
    let mut products = 0;
    let orders: Vec<String> = plan.outputs.iter().map(|o| factor(plan, o, &mut products, 0)).collect::<Option<_>>()?;
    (products >= 2).then(|| orders.join(", "))
}

/// How deep [`factor`] reads a plan for its bracketing.
const MAX_ORDER_DEPTH: usize = 256;

/// The product expression `name` computes (see [`product_order`]). A plan
/// deeper than [`MAX_ORDER_DEPTH`] gets no order in its label: the
/// recursion stays small on any thread's stack.
fn factor(plan: &Plan, name: &str, products: &mut usize, depth: usize) -> Option<String> {
    if depth > plan.nodes.len().min(MAX_ORDER_DEPTH) {
        return None;
    }
    let through = |input: &str, products: &mut usize| factor(plan, input, products, depth + 1);
    match plan.nodes.get(name) {
        None => plan.inputs.contains_key(name).then(|| name.to_string()),
        Some(IaOp::Broadcast { input } | IaOp::Shuffle { input, .. }) => through(input, products),
        Some(IaOp::LocalMap { input, kernel: None, .. }) => through(input, products),
        Some(IaOp::LocalAggregate { input, group_by, kernel: KernelRef::Named { name, .. } })
            if group_by.len() == 2 && name == "matAdd" =>
        {
            through(input, products)
        }
        Some(IaOp::LocalJoin { left, right, kernel, .. }) => {
            let p = kernel.matrix_product()?;
            *products += 1;
            let show = |s: String, transposed: bool| {
                let s = if s.contains('·') { format!("({s})") } else { s };
                if transposed {
                    format!("{s}ᵀ")
                } else {
                    s
                }
            };
            let (l, r) = (through(left, products)?, through(right, products)?);
            Some(format!("{}·{}", show(l, p.transpose_left), show(r, p.transpose_right)))
        }
        _ => None,
    }
}

/// The rule that first built each e-node, keyed by the node with canonical
/// children: built once per optimization and read for every alternative.
pub struct Origins(rustc_hash::FxHashMap<Ia, &'static str>);

impl Origins {
    /// The origins of the nodes of `eg`, as its analysis recorded them.
    pub fn of(eg: &TraEGraph) -> Origins {
        let mut canon = rustc_hash::FxHashMap::default();
        canon.reserve(eg.analysis.origins.len());
        for (n, r) in &eg.analysis.origins {
            canon.entry(n.clone().map_children(|c| eg.find(c))).or_insert(*r);
        }
        Origins(canon)
    }

    /// The rule that first built the node with these (canonical) children.
    pub fn get(&self, node: &Ia) -> Option<&'static str> {
        self.0.get(node).copied()
    }
}

/// For every operator of `plan` (as [`ExtractedPlan::to_plan`] names them),
/// the rule that first built it. Operators no rule built (an output's alias)
/// are absent.
pub fn built_by(eg: &TraEGraph, origins: &Origins, extracted: &ExtractedPlan, plan: &Plan) -> IndexMap<String, String> {
    let mut out = IndexMap::new();
    for (i, name) in operators(extracted, plan) {
        let key = extracted.expr[Id::from(i)].clone().map_children(|x| eg.find(extracted.classes[usize::from(x)]));
        if let Some(rule) = origins.get(&key) {
            out.insert(name.clone(), rule.to_string());
        }
    }
    out
}

/// Each named operator of `plan` with the index of the expression node it
/// came from: `to_plan` makes one named operator per P operator of the
/// expression, in expression order; aliases of outputs come after them.
fn operators<'a>(extracted: &'a ExtractedPlan, plan: &'a Plan) -> impl Iterator<Item = (usize, &'a String)> + 'a {
    let ops = extracted.expr.as_ref().iter().enumerate().filter(|(_, n)| {
        matches!(n, Ia::Shuffle(_) | Ia::Broadcast(_) | Ia::LJoin(_) | Ia::LAgg(_) | Ia::LFilter(_) | Ia::LMap(_))
    });
    ops.map(|(i, _)| i).zip(plan.nodes.keys())
}

/// For every operator of `plan` whose result is exactly the value of one of
/// the program's nodes (its class, erased, is that node's class), the
/// node's name: an exchanged intermediate is then named in the label (`S
/// exchanged`), not only counted. Inputs are left out (their operators are
/// named by the input already).
pub fn computes(eg: &TraEGraph, extracted: &ExtractedPlan, plan: &Plan) -> HashMap<String, String> {
    let program: HashMap<Id, &str> = eg
        .analysis
        .program_nodes
        .iter()
        .filter(|(name, _)| !plan.inputs.contains_key(name))
        .map(|(name, id)| (eg.find(*id), name.as_str()))
        .collect();
    let mut out = HashMap::new();
    if program.is_empty() {
        return out;
    }
    for (i, name) in operators(extracted, plan) {
        let class = eg.find(extracted.classes[i]);
        if let Some(node) = eg.lookup(Ia::Erase(class)).and_then(|l| program.get(&eg.find(l))) {
            out.insert(name.clone(), node.to_string());
        }
    }
    out
}

/// The contraction-order rule (`matmul-assoc`, `agg-eager`) whose TRA
/// operator the local operator at `index` of `plan` computes, if any: a local
/// join or aggregation computes a TRA join or aggregation of its erased class
/// with the same parameters whose operands are its own operands erased. The
/// ordering phase builds only TRA operators, which lowering then turns into
/// local ones, so `rules_applied` would not name it otherwise.
pub fn ordered_by(eg: &TraEGraph, origins: &Origins, plan: &ExtractedPlan, index: usize) -> Option<&'static str> {
    let nodes = plan.expr.as_ref();
    let class = |child: Id| eg.find(plan.classes[usize::from(child)]);
    let erased = |child: Id| eg.lookup(Ia::Erase(class(child)));
    let own = eg.lookup(Ia::Erase(eg.find(plan.classes[index])))?;
    let realizes = |m: &Ia| match (&nodes[index], m) {
        (Ia::LJoin([jl, jr, k, a, b]), Ia::Join([jl2, jr2, k2, a2, b2])) => {
            [(jl, jl2), (jr, jr2), (k, k2)].iter().all(|(x, y)| class(**x) == eg.find(**y))
                && erased(*a) == Some(eg.find(*a2))
                && erased(*b) == Some(eg.find(*b2))
        }
        (Ia::LAgg([g, k, x]), Ia::Aggregate([g2, k2, x2])) => {
            class(*g) == eg.find(*g2) && class(*k) == eg.find(*k2) && erased(*x) == Some(eg.find(*x2))
        }
        _ => false,
    };
    eg[own].nodes.iter().filter(|m| realizes(m)).find_map(|m| origins.get(m).filter(|r| *r != "program"))
}

/// The kind of join strategy a plan uses, in words; `None` without joins that
/// move data.
fn join_headline(strategy: &[JoinStrategy]) -> Option<String> {
    let count = |f: &dyn Fn(&JoinStrategy) -> bool| strategy.iter().filter(|s| f(s)).count();
    let kinds = [
        (count(&|s| *s == JoinStrategy::CoPartitioned), "co-partitioned"),
        (count(&|s| matches!(s, JoinStrategy::BroadcastLeft | JoinStrategy::BroadcastRight)), "broadcast"),
        (count(&|s| *s == JoinStrategy::Replicated), "replicated (3D)"),
    ];
    let used: Vec<&(usize, &str)> = kinds.iter().filter(|(n, _)| *n > 0).collect();
    match used.as_slice() {
        [] => None,
        [(n, k)] => Some(format!("{k} join{}", if *n == 1 { "" } else { "s" })),
        _ => {
            let mut used = used.clone();
            used.sort_by_key(|(n, _)| std::cmp::Reverse(*n));
            let parts: Vec<String> = used.iter().map(|(n, k)| format!("{n} {k}")).collect();
            Some(format!("{} joins", parts.join(" + ")))
        }
    }
}

/// One data movement of a plan.
struct Exchange<'a> {
    /// The shuffle or broadcast operator.
    node: &'a str,
    /// The input it moves (through per-site filters, maps and earlier
    /// shuffles), or `None` for an intermediate result.
    source: Option<Source<'a>>,
}

/// An input as an exchange sees it.
struct Source<'a> {
    input: &'a str,
    filtered: bool,
    /// Copies per tuple made by key maps with ranges.
    copies: u64,
    /// A key map or kernel other than the identity was applied.
    mapped: bool,
    /// The key maps on the way, from the exchange down to the input.
    maps: Vec<&'a crate::KeyFn>,
}

impl Source<'_> {
    /// The input's own dims that the exchanged relation's `dims` are, through
    /// the key maps on the way (`[k1, k0]` makes dim 0 the input's dim 1); a
    /// dim a map makes constant (a range of one value, `0..1`) places nothing
    /// and is left out. `None` when one is computed rather than passed
    /// through.
    fn input_dims(&self, dims: &[usize]) -> Option<Vec<usize>> {
        let mut own = Vec::new();
        'dims: for &d in dims {
            let mut d = d;
            for m in &self.maps {
                if let Some(Some((lo, hi))) = m.ranges().get(d) {
                    if hi - lo == 1 {
                        continue 'dims;
                    }
                }
                d = m.passthrough().get(d).copied().flatten()?;
            }
            own.push(d);
        }
        Some(own)
    }
}

/// The exchanges of a plan, in plan order.
struct Moves<'a> {
    exchanges: Vec<Exchange<'a>>,
}

impl<'a> Moves<'a> {
    fn of(plan: &'a Plan) -> Moves<'a> {
        let exchanges = plan
            .nodes
            .iter()
            .filter_map(|(name, op)| match op {
                IaOp::Shuffle { input, .. } | IaOp::Broadcast { input } => {
                    Some(Exchange { node: name, source: source(plan, input) })
                }
                _ => None,
            })
            .collect();
        Moves { exchanges }
    }

    /// `broadcast A; shuffle X by key 1, Y by key 0; 2 intermediates exchanged`.
    fn generic_text(
        &self,
        plan: &Plan,
        dim_names: &IndexMap<String, Vec<String>>,
        computes: &HashMap<String, String>,
    ) -> String {
        let mut broadcast: Vec<(usize, String)> = Vec::new();
        let mut shuffle: Vec<(usize, String, String)> = Vec::new();
        let mut inner = 0usize;
        let mut named: Vec<&str> = Vec::new();
        let rank = |i: &str| plan.inputs.get_index_of(i).unwrap_or(usize::MAX);
        for e in &self.exchanges {
            let Some(s) = &e.source else {
                let moved = match &plan.nodes[e.node] {
                    IaOp::Shuffle { input, .. } | IaOp::Broadcast { input } => computes.get(input.as_str()),
                    _ => None,
                };
                // A few names say what moves; a long list would only be
                // noise (and a program of many nodes a long label): past
                // NAMED_INTERMEDIATES they are counted.
                match moved {
                    Some(node) if named.contains(&node.as_str()) => {}
                    Some(node) if named.len() < NAMED_INTERMEDIATES => named.push(node),
                    _ => inner += 1,
                }
                continue;
            };
            let mut what = String::new();
            if s.filtered {
                what.push_str("filtered ");
            }
            if s.mapped && s.copies <= 1 {
                what.push_str("mapped ");
            }
            what.push_str(s.input);
            if s.copies > 1 {
                what.push_str(&format!(" (replicated {}×)", s.copies));
            }
            // The input's own dims (through the key maps, not replicated),
            // by the names a front-end gave them, if it did.
            let names = dim_names.get(s.input).filter(|_| s.copies <= 1);
            match &plan.nodes[e.node] {
                // one input shuffled twice: `W2 by key 1 and key 0`
                IaOp::Shuffle { dims, .. } => {
                    let by = match s.input_dims(dims) {
                        // Replicas: the dims of the relation moved, whose
                        // ranges number the copies.
                        _ if s.copies > 1 => by_keys(dims, None),
                        Some(own) => by_keys(&own, names),
                        // A computed key: the dims of the relation moved.
                        None => format!("{} of the map", by_keys(dims, None)),
                    };
                    match shuffle.iter_mut().find(|(_, w, _)| *w == what) {
                        Some((_, _, all)) => all.push_str(&format!(" and {}", by.trim_start_matches("by "))),
                        None => shuffle.push((rank(s.input), what, by)),
                    }
                }
                _ => broadcast.push((rank(s.input), what)),
            }
        }
        let mut shuffle: Vec<(usize, String)> =
            shuffle.into_iter().map(|(r, w, by)| (r, format!("{w} {by}"))).collect();
        broadcast.sort_by_key(|(r, _)| *r);
        shuffle.sort_by_key(|(r, _)| *r);
        let list = |v: &[(usize, String)]| v.iter().map(|(_, s)| s.as_str()).collect::<Vec<_>>().join(", ");
        let mut parts = Vec::new();
        if !broadcast.is_empty() {
            parts.push(format!("broadcast {}", list(&broadcast)));
        }
        if !shuffle.is_empty() {
            parts.push(format!("shuffle {}", list(&shuffle)));
        }
        if !named.is_empty() {
            parts.push(format!("{} exchanged", named.join(", ")));
        }
        if inner > 0 {
            let other = if named.is_empty() { "" } else { "other " };
            parts.push(format!("{inner} {other}intermediate{} exchanged", if inner == 1 { "" } else { "s" }));
        }
        if parts.is_empty() {
            return "nothing moved".into();
        }
        parts.join("; ")
    }
}

/// `by key 1`, `by keys 0,1`, with the dims' names `by j`, `by (i,j)`, or
/// `to one site` for no dims.
fn by_keys(dims: &[usize], names: Option<&Vec<String>>) -> String {
    let named: Option<Vec<&str>> = names.and_then(|n| dims.iter().map(|d| n.get(*d).map(String::as_str)).collect());
    match (dims, named) {
        ([], _) => "to one site".into(),
        ([_], Some(n)) => format!("by {}", n[0]),
        (_, Some(n)) => format!("by ({})", n.join(",")),
        ([d], None) => format!("by key {d}"),
        (_, None) => format!("by keys {}", dims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(",")),
    }
}

/// The input a relation comes from through per-site filters and maps and
/// earlier shuffles, or `None` when a join or aggregate is on the way.
fn source<'a>(plan: &'a Plan, mut name: &'a str) -> Option<Source<'a>> {
    let mut s = Source { input: "", filtered: false, copies: 1, mapped: false, maps: Vec::new() };
    for _ in 0..=plan.nodes.len() {
        if plan.inputs.contains_key(name) {
            s.input = name;
            return Some(s);
        }
        match plan.nodes.get(name)? {
            IaOp::LocalFilter { input, .. } => {
                s.filtered = true;
                name = input;
            }
            IaOp::LocalMap { input, key, kernel } => {
                if let Some(k) = key {
                    s.copies = s.copies.saturating_mul(k.fanout());
                    s.mapped |= k.fanout() <= 1 && !k.is_identity(k.output_arity());
                    s.maps.push(k);
                }
                s.mapped |= kernel.is_some();
                name = input;
            }
            IaOp::Shuffle { input, .. } => name = input,
            _ => return None,
        }
    }
    None
}

/// A step on the way from an input to the matmul join.
enum Step {
    Broadcast,
    Shuffle(String),
    Replicate(u64, String),
    Filter,
}

/// What happens to one matmul operand, from its input to the join.
struct Operand<'a> {
    input: &'a str,
    steps: Vec<Step>,
    /// The names the walk gave the input's key dims.
    dims: Vec<String>,
}

impl Operand<'_> {
    /// `replicate Y 4× along i, shuffle by i`: the input named once, at the
    /// first step; `in place` when nothing is exchanged; `None` when untouched.
    fn phrase(&self) -> Option<String> {
        let mut words: Vec<String> = Vec::new();
        for (i, s) in self.steps.iter().enumerate() {
            let it = if i == 0 { format!(" {}", self.input) } else { String::new() };
            words.push(match s {
                Step::Broadcast => format!("broadcast{it}"),
                Step::Shuffle(by) => format!("shuffle{it} by {by}"),
                Step::Replicate(n, along) => format!("replicate{it} {n}× along {along}"),
                Step::Filter => format!("filter{it}"),
            });
        }
        let local = self.steps.iter().all(|s| matches!(s, Step::Replicate(..) | Step::Filter));
        let last = words.last_mut()?;
        if local {
            last.push_str(" in place");
        }
        Some(words.join(", "))
    }
}

/// `BMM — broadcast Y`, `CMM — shuffle X by k, Y by k; partial sums exchanged`,
/// `RMM (3D) — …` for a plan with one `matMul` join of `X[i,k]` and `Y[k,j]`.
fn matmul_label(
    plan: &Plan,
    strategy: &[JoinStrategy],
    moves: &Moves,
    dim_names: &IndexMap<String, Vec<String>>,
) -> Option<String> {
    let mut joins = plan.nodes.iter().filter(|(_, op)| matches!(op, IaOp::LocalJoin { .. }));
    let (_, IaOp::LocalJoin { left, right, left_keys, right_keys, kernel }) = joins.next()? else {
        return None;
    };
    if joins.next().is_some() || *kernel != KernelRef::named("matMul") || strategy.len() != 1 {
        return None;
    }
    let (ln, rn): (&[&str], &[&str]) = match (left_keys.as_slice(), right_keys.as_slice()) {
        ([1], [0]) => (&["i", "k"], &["k", "j"]),
        ([0, 1, 2], [0, 1, 2]) => (&["i", "k", "j"], &["i", "k", "j"]),
        _ => return None,
    };
    let mut on_operands = HashSet::new();
    let mut l = operand(plan, left, ln, &mut on_operands)?;
    let mut r = operand(plan, right, rn, &mut on_operands)?;
    // The front-end's names of the inputs' dims (einsum's letters) in place
    // of the paper's: the walk told which of `i`, `k`, `j` each input dim is.
    if let Some(names) = renamed(&[&l, &r], dim_names) {
        let rename = |letters: &[&str]| -> Vec<String> {
            letters.iter().map(|g| names.get(*g).cloned().unwrap_or_else(|| g.to_string())).collect()
        };
        let (ln, rn) = (rename(ln), rename(rn));
        let (ln, rn): (Vec<&str>, Vec<&str>) =
            (ln.iter().map(String::as_str).collect(), rn.iter().map(String::as_str).collect());
        l = operand(plan, left, &ln, &mut on_operands)?;
        r = operand(plan, right, &rn, &mut on_operands)?;
    }
    let moved = moves.exchanges.iter().any(|e| on_operands.contains(e.node));
    let acronym = match strategy[0] {
        // Replicated in place (key maps only) is still RMM: its label says
        // so, else it reads as the plain local matmul beside it.
        JoinStrategy::Replicated => "RMM (3D)",
        _ if moves.exchanges.is_empty() => return Some("local matmul — nothing moved".into()),
        JoinStrategy::BroadcastLeft | JoinStrategy::BroadcastRight | JoinStrategy::BroadcastBoth => "BMM",
        JoinStrategy::CoPartitioned => "CMM",
    };
    let mut parts: Vec<String> = Vec::new();
    let single = |o: &Operand| match o.steps.as_slice() {
        [Step::Shuffle(by)] => Some(("shuffle", format!("by {by}"))),
        [Step::Broadcast] => Some(("broadcast", String::new())),
        _ => None,
    };
    match (single(&l), single(&r)) {
        // `shuffle X by k, Y by k`, `broadcast X, Y`
        (Some((va, a)), Some((vb, b))) if va == vb => {
            let one = |n: &str, by: &str| if by.is_empty() { n.to_string() } else { format!("{n} {by}") };
            parts.push(format!("{va} {}, {}", one(l.input, &a), one(r.input, &b)));
        }
        _ => parts.extend([l.phrase(), r.phrase()].into_iter().flatten()),
    }
    // Exchanges after the join move partial products or sums.
    let after: Vec<&Exchange> = moves.exchanges.iter().filter(|e| !on_operands.contains(e.node)).collect();
    if !after.is_empty() {
        let pre_aggregated = after.iter().any(|e| match &plan.nodes[e.node] {
            IaOp::Shuffle { input, .. } | IaOp::Broadcast { input } => {
                matches!(plan.nodes.get(input), Some(IaOp::LocalAggregate { .. }))
            }
            _ => false,
        });
        parts.push(if pre_aggregated {
            "partial sums aggregated locally, then exchanged".into()
        } else {
            "partial sums exchanged".into()
        });
    }
    if !moved && after.is_empty() {
        parts.push("nothing moved".into());
    }
    Some(format!("{acronym} — {}", parts.join("; ")))
}

/// The paper's letter → the front-end's name, from the operands' walks and
/// `dim_names`; `None` unless every operand's input has names for each of
/// its dims and no letter gets two names.
fn renamed(operands: &[&Operand], dim_names: &IndexMap<String, Vec<String>>) -> Option<HashMap<String, String>> {
    let mut map: HashMap<String, String> = HashMap::new();
    for o in operands {
        let names = dim_names.get(o.input)?;
        if names.len() != o.dims.len() {
            return None;
        }
        for (letter, name) in o.dims.iter().zip(names) {
            if map.insert(letter.clone(), name.clone()).is_some_and(|before| before != *name) {
                return None;
            }
        }
    }
    Some(map)
}

/// Walk one join operand down to its input, naming its key dims on the way
/// (`names` are the operand's). Exchanges met are noted in `seen`. `None`
/// when something other than a shuffle, broadcast, filter or key map is met.
fn operand<'a>(plan: &'a Plan, start: &'a str, names: &[&str], seen: &mut HashSet<&'a str>) -> Option<Operand<'a>> {
    let mut names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    let mut steps = Vec::new();
    let mut name = start;
    let by = |dims: &[usize], names: &[String]| -> Option<String> {
        let picked: Option<Vec<&str>> = dims.iter().map(|d| names.get(*d).map(|s| s.as_str())).collect();
        let picked = picked?;
        Some(match picked.as_slice() {
            [] => "nothing (one site)".into(),
            [one] => one.to_string(),
            many => format!("({})", many.join(",")),
        })
    };
    for _ in 0..=plan.nodes.len() {
        if let Some(decl) = plan.inputs.get(name) {
            if decl.key_bounds.len() != names.len() {
                return None;
            }
            steps.reverse();
            return Some(Operand { input: name, steps, dims: names });
        }
        match plan.nodes.get(name)? {
            IaOp::Shuffle { input, dims } => {
                steps.push(Step::Shuffle(by(dims, &names)?));
                seen.insert(name);
                name = input;
            }
            IaOp::Broadcast { input } => {
                steps.push(Step::Broadcast);
                seen.insert(name);
                name = input;
            }
            IaOp::LocalFilter { input, .. } => {
                steps.push(Step::Filter);
                name = input;
            }
            IaOp::LocalMap { input, key: Some(key), kernel: None } => {
                // Output dim c passes input dim j through, or is a range of copies.
                let pass = key.passthrough();
                let ranges = key.ranges();
                if pass.len() != names.len() {
                    return None;
                }
                let arity = pass.iter().flatten().max().map_or(0, |m| m + 1);
                let mut inner = vec![String::new(); arity];
                for (c, p) in pass.iter().enumerate() {
                    match (p, ranges[c]) {
                        (Some(j), _) => inner[*j] = names[c].clone(),
                        (None, Some(_)) => {}
                        (None, None) => return None,
                    }
                }
                if inner.iter().any(|n| n.is_empty()) {
                    return None;
                }
                let along: Vec<&str> =
                    ranges.iter().enumerate().filter(|(_, r)| r.is_some()).map(|(c, _)| names[c].as_str()).collect();
                if key.fanout() > 1 {
                    steps.push(Step::Replicate(key.fanout(), along.join(",")));
                }
                names = inner;
                name = input;
            }
            _ => return None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use JoinStrategy::*;

    fn plan(nodes: &str) -> Plan {
        Plan::from_json(&format!(
            r#"{{"inputs": {{"X": {{"key_bounds": [4, 4], "array_bounds": [10, 10], "placement": {{"hash": [0]}}}},
                             "Y": {{"key_bounds": [4, 4], "array_bounds": [10, 10]}}}},
                "nodes": {{{nodes}}}, "outputs": ["Z"]}}"#
        ))
        .unwrap()
    }

    /// A chain's label ends with its bracketing, read through exchanges,
    /// key-only maps and the sums of products; one product, or another
    /// operator on the way, gives none.
    #[test]
    fn a_chain_of_products_says_its_order() {
        let chain = |inner_kernel: &str, map: &str| {
            plan(&format!(
                r#""n0": {{"op": "broadcast", "input": "Y"}},
                   "n1": {{"op": "local_join", "left": "X", "right": "n0", "left_keys": [1], "right_keys": [0], "kernel": "{inner_kernel}"}},
                   "n2": {{"op": "local_aggregate", "input": "n1", "group_by": [0, 2], "kernel": "matAdd"}},
                   "n3": {{"op": "local_map", "input": "n2"{map}}},
                   "n4": {{"op": "shuffle", "input": "n3", "dims": [1]}},
                   "n5": {{"op": "shuffle", "input": "X", "dims": [0]}},
                   "n6": {{"op": "local_join", "left": "n5", "right": "n4", "left_keys": [1], "right_keys": [0], "kernel": "matMul"}},
                   "Z": {{"op": "local_aggregate", "input": "n6", "group_by": [0, 2], "kernel": "matAdd"}}"#
            ))
        };
        let keys_only = r#", "key": "[k0, k1]""#;
        assert_eq!(product_order(&chain("matMul", keys_only)).as_deref(), Some("X·(X·Y)"));
        assert_eq!(product_order(&chain("matMulTN", keys_only)).as_deref(), Some("X·(Xᵀ·Y)"));
        assert!(plan_label(&chain("matMul", keys_only), &[BroadcastRight, CoPartitioned], &IndexMap::new())
            .ends_with("; order X·(X·Y)"));
        assert_eq!(product_order(&chain("matMul", r#", "kernel": "relu""#)), None);
        assert_eq!(product_order(&chain("elemMul", keys_only)), None);
        let one = plan(
            r#""n0": {"op": "broadcast", "input": "Y"},
               "n1": {"op": "local_join", "left": "X", "right": "n0", "left_keys": [1], "right_keys": [0], "kernel": "matMul"},
               "Z": {"op": "local_aggregate", "input": "n1", "group_by": [0, 2], "kernel": "matAdd"}"#,
        );
        assert_eq!(product_order(&one), None);
    }

    /// Each input's dim names, as a front-end gives them.
    fn dim_names(inputs: &[(&str, &[&str])]) -> IndexMap<String, Vec<String>> {
        inputs.iter().map(|(n, d)| (n.to_string(), d.iter().map(|x| x.to_string()).collect())).collect()
    }

    /// CMM: both operands shuffled on the common dimension, the products
    /// shuffled to their sums.
    fn cmm() -> Plan {
        plan(
            r#""n0": {"op": "shuffle", "input": "Y", "dims": [0]},
           "n1": {"op": "shuffle", "input": "X", "dims": [1]},
           "n2": {"op": "local_join", "left": "n1", "right": "n0", "left_keys": [1], "right_keys": [0], "kernel": "matMul"},
           "n3": {"op": "shuffle", "input": "n2", "dims": [0, 2]},
           "Z": {"op": "local_aggregate", "input": "n3", "group_by": [0, 2], "kernel": "matAdd"}"#,
        )
    }

    /// RMM: X replicated in place along `j`, Y along `i` and shuffled by `i`.
    fn rmm() -> Plan {
        plan(
            r#""n0": {"op": "local_map", "input": "Y", "key": "[0..4, k0, k1]"},
           "n1": {"op": "shuffle", "input": "n0", "dims": [0]},
           "n2": {"op": "local_map", "input": "X", "key": "[k0, k1, 0..4]"},
           "n3": {"op": "local_join", "left": "n2", "right": "n1", "left_keys": [0, 1, 2], "right_keys": [0, 1, 2], "kernel": "matMul"},
           "Z": {"op": "local_aggregate", "input": "n3", "group_by": [0, 2], "kernel": "matAdd"}"#,
        )
    }

    #[test]
    fn cross_product_matmul_names_the_common_dimension() {
        let p = cmm();
        assert_eq!(
            plan_label(&p, &[CoPartitioned], &IndexMap::new()),
            "CMM — shuffle X by k, Y by k; partial sums exchanged"
        );
    }

    #[test]
    fn two_phase_aggregation_is_said() {
        let p = plan(
            r#""n0": {"op": "shuffle", "input": "Y", "dims": [0]},
               "n1": {"op": "shuffle", "input": "X", "dims": [1]},
               "n2": {"op": "local_join", "left": "n1", "right": "n0", "left_keys": [1], "right_keys": [0], "kernel": "matMul"},
               "n3": {"op": "local_aggregate", "input": "n2", "group_by": [0, 2], "kernel": "matAdd"},
               "n4": {"op": "shuffle", "input": "n3", "dims": [0, 1]},
               "Z": {"op": "local_aggregate", "input": "n4", "group_by": [0, 1], "kernel": "matAdd"}"#,
        );
        assert_eq!(
            plan_label(&p, &[CoPartitioned], &IndexMap::new()),
            "CMM — shuffle X by k, Y by k; partial sums aggregated locally, then exchanged"
        );
    }

    #[test]
    fn broadcast_matmul_says_which_operand_moves() {
        let right = plan(
            r#""n0": {"op": "broadcast", "input": "Y"},
               "n1": {"op": "local_join", "left": "X", "right": "n0", "left_keys": [1], "right_keys": [0], "kernel": "matMul"},
               "Z": {"op": "local_aggregate", "input": "n1", "group_by": [0, 2], "kernel": "matAdd"}"#,
        );
        assert_eq!(plan_label(&right, &[BroadcastRight], &IndexMap::new()), "BMM — broadcast Y");
        let left = plan(
            r#""n0": {"op": "shuffle", "input": "Y", "dims": [1]},
               "n1": {"op": "broadcast", "input": "X"},
               "n2": {"op": "local_join", "left": "n1", "right": "n0", "left_keys": [1], "right_keys": [0], "kernel": "matMul"},
               "Z": {"op": "local_aggregate", "input": "n2", "group_by": [0, 2], "kernel": "matAdd"}"#,
        );
        assert_eq!(plan_label(&left, &[BroadcastLeft], &IndexMap::new()), "BMM — broadcast X; shuffle Y by j");
    }

    #[test]
    fn replication_matmul_names_the_replicated_dimension() {
        let p = rmm();
        assert_eq!(
            plan_label(&p, &[Replicated], &IndexMap::new()),
            "RMM (3D) — replicate X 4× along j in place; replicate Y 4× along i, shuffle by i"
        );
    }

    /// Names a front-end gave the inputs' dims (einsum's letters for
    /// `ab,bc->ac`) replace the paper's `i`, `k`, `j`, whichever way the
    /// plan walks to its inputs; names that do not fit leave the paper's.
    #[test]
    fn the_front_ends_dim_names_replace_the_papers_letters() {
        let named = dim_names(&[("X", &["a", "b"]), ("Y", &["b", "c"])]);
        let cmm = cmm();
        assert_eq!(plan_label(&cmm, &[CoPartitioned], &named), "CMM — shuffle X by b, Y by b; partial sums exchanged");
        let bmm = plan(
            r#""n0": {"op": "shuffle", "input": "Y", "dims": [1]},
               "n1": {"op": "broadcast", "input": "X"},
               "n2": {"op": "local_join", "left": "n1", "right": "n0", "left_keys": [1], "right_keys": [0], "kernel": "matMul"},
               "Z": {"op": "local_aggregate", "input": "n2", "group_by": [0, 2], "kernel": "matAdd"}"#,
        );
        assert_eq!(plan_label(&bmm, &[BroadcastLeft], &named), "BMM — broadcast X; shuffle Y by c");
        let rmm = rmm();
        assert_eq!(
            plan_label(&rmm, &[Replicated], &named),
            "RMM (3D) — replicate X 4× along c in place; replicate Y 4× along a, shuffle by a"
        );
        // One name too few, or one letter given two names: the paper's letters.
        let short = dim_names(&[("X", &["a"]), ("Y", &["b", "c"])]);
        assert_eq!(plan_label(&cmm, &[CoPartitioned], &short), "CMM — shuffle X by k, Y by k; partial sums exchanged");
        let clash = dim_names(&[("X", &["a", "b"]), ("Y", &["d", "c"])]);
        assert_eq!(plan_label(&cmm, &[CoPartitioned], &clash), "CMM — shuffle X by k, Y by k; partial sums exchanged");
    }

    /// Other plans name an input's shuffled dims by the front-end's names
    /// too, where the input reaches the exchange with its own dims.
    #[test]
    fn other_labels_name_an_inputs_dims_by_the_front_ends_names() {
        let named = dim_names(&[("X", &["a", "b"]), ("Y", &["b", "c"])]);
        let p = plan(
            r#""n0": {"op": "shuffle", "input": "X", "dims": [0, 1]},
               "n1": {"op": "local_map", "input": "Y", "kernel": "relu", "key": "[k1, k0]"},
               "n2": {"op": "shuffle", "input": "n1", "dims": [0]},
               "n3": {"op": "shuffle", "input": "Y", "dims": [1]},
               "Z": {"op": "local_join", "left": "n0", "right": "n3", "left_keys": [0, 1], "right_keys": [0, 1], "kernel": "matAdd"},
               "W": {"op": "local_join", "left": "n0", "right": "n2", "left_keys": [0, 1], "right_keys": [0, 1], "kernel": "matAdd"}"#,
        );
        let generic = plan_label(&p, &[CoPartitioned, CoPartitioned], &IndexMap::new());
        // The mapped Y's dim 0 is Y's own dim 1 (`[k1, k0]`): named as Y's.
        assert_eq!(generic, "co-partitioned joins — shuffle X by keys 0,1, mapped Y by key 1, Y by key 1");
        assert_eq!(
            plan_label(&p, &[CoPartitioned, CoPartitioned], &named),
            "co-partitioned joins — shuffle X by (a,b), mapped Y by c, Y by c"
        );
        // A computed key has no dim of Y's: the mapped relation's own is said.
        let computed = p.nodes["n1"].clone();
        let mut q = p.clone();
        if let IaOp::LocalMap { input, kernel, .. } = computed {
            q.nodes.insert(
                "n1".into(),
                IaOp::LocalMap { input, kernel, key: Some(crate::KeyFn::parse("[k1 + k0, k0]").unwrap()) },
            );
        }
        assert_eq!(
            plan_label(&q, &[CoPartitioned, CoPartitioned], &named),
            "co-partitioned joins — shuffle X by (a,b), mapped Y by key 0 of the map, Y by c"
        );
        // A dim made constant (one replica, `0..1`) sends the relation to one site.
        let mut one = p.clone();
        one.nodes.insert(
            "n1".into(),
            IaOp::LocalMap {
                input: "Y".into(),
                kernel: None,
                key: Some(crate::KeyFn::parse("[0..1, k0, k1]").unwrap()),
            },
        );
        assert_eq!(
            plan_label(&one, &[CoPartitioned, CoPartitioned], &named),
            "co-partitioned joins — shuffle X by (a,b), mapped Y to one site, Y by c"
        );
    }

    #[test]
    fn a_plan_that_moves_nothing_says_so() {
        let p = plan(
            r#""n1": {"op": "local_join", "left": "X", "right": "Y", "left_keys": [1], "right_keys": [0], "kernel": "matMul"},
               "Z": {"op": "local_aggregate", "input": "n1", "group_by": [0, 2], "kernel": "matAdd"}"#,
        );
        assert_eq!(plan_label(&p, &[BroadcastBoth], &IndexMap::new()), "local matmul — nothing moved");
        // RMM replicating both operands in place moves nothing either; its
        // label still tells it apart from the plain local matmul.
        let in_place = plan(
            r#""n0": {"op": "local_map", "input": "Y", "key": "[0..4, k0, k1]"},
               "n1": {"op": "local_map", "input": "X", "key": "[k0, k1, 0..4]"},
               "n2": {"op": "local_join", "left": "n1", "right": "n0", "left_keys": [0, 1, 2], "right_keys": [0, 1, 2], "kernel": "matMul"},
               "Z": {"op": "local_aggregate", "input": "n2", "group_by": [0, 2], "kernel": "matAdd"}"#,
        );
        assert_eq!(
            plan_label(&in_place, &[Replicated], &IndexMap::new()),
            "RMM (3D) — replicate X 4× along j in place; replicate Y 4× along i in place; nothing moved"
        );
        let q = plan(
            r#""Z": {"op": "local_join", "left": "X", "right": "Y", "left_keys": [0, 1], "right_keys": [0, 1], "kernel": "matAdd"}"#,
        );
        assert_eq!(plan_label(&q, &[BroadcastBoth], &IndexMap::new()), "local — nothing moved");
    }

    #[test]
    fn other_plans_lead_with_their_join_strategies() {
        let p = plan(
            r#""n0": {"op": "local_filter", "input": "X", "predicate": "k0 == k1"},
               "n1": {"op": "shuffle", "input": "n0", "dims": [0, 1]},
               "n2": {"op": "shuffle", "input": "Y", "dims": [0, 1]},
               "n3": {"op": "local_join", "left": "n1", "right": "n2", "left_keys": [0, 1], "right_keys": [0, 1], "kernel": "matAdd"},
               "n4": {"op": "broadcast", "input": "n3"},
               "Z": {"op": "local_join", "left": "n4", "right": "Y", "left_keys": [0, 1], "right_keys": [0, 1], "kernel": "matAdd"}"#,
        );
        assert_eq!(
            plan_label(&p, &[CoPartitioned, BroadcastLeft], &IndexMap::new()),
            "1 co-partitioned + 1 broadcast joins — shuffle filtered X by keys 0,1, Y by keys 0,1; 1 intermediate exchanged"
        );
        // An intermediate that is a program node's value is named by it.
        let s_is_n3: HashMap<String, String> = [("n3".to_string(), "S".to_string())].into();
        assert_eq!(
            plan_label_naming(&p, &[CoPartitioned, BroadcastLeft], &IndexMap::new(), &s_is_n3),
            "1 co-partitioned + 1 broadcast joins — shuffle filtered X by keys 0,1, Y by keys 0,1; S exchanged"
        );
        let mut also = p.clone();
        also.nodes.insert("n5".into(), IaOp::Shuffle { input: "Z".into(), dims: vec![0] });
        also.nodes.insert("n6".into(), IaOp::Shuffle { input: "n3".into(), dims: vec![1] });
        assert_eq!(
            plan_label_naming(&also, &[CoPartitioned, BroadcastLeft], &IndexMap::new(), &s_is_n3),
            "1 co-partitioned + 1 broadcast joins — shuffle filtered X by keys 0,1, Y by keys 0,1; S exchanged; 1 other intermediate exchanged"
        );
        // Past four names, the rest are counted.
        let mut many = p.clone();
        let mut names = s_is_n3.clone();
        for k in 0..6 {
            many.nodes.insert(format!("m{k}"), IaOp::Shuffle { input: format!("v{k}"), dims: vec![0] });
            names.insert(format!("v{k}"), format!("V{k}"));
        }
        assert_eq!(
            plan_label_naming(&many, &[CoPartitioned, BroadcastLeft], &IndexMap::new(), &names),
            "1 co-partitioned + 1 broadcast joins — shuffle filtered X by keys 0,1, Y by keys 0,1; S, V0, V1, V2 exchanged; 3 other intermediates exchanged"
        );
        let twice = plan(
            r#""n0": {"op": "shuffle", "input": "Y", "dims": [1]},
               "n1": {"op": "shuffle", "input": "Y", "dims": [0]},
               "n2": {"op": "local_join", "left": "X", "right": "n1", "left_keys": [0], "right_keys": [0], "kernel": "matAdd"},
               "Z": {"op": "local_join", "left": "n2", "right": "n0", "left_keys": [1], "right_keys": [1], "kernel": "matAdd"}"#,
        );
        assert_eq!(
            plan_label(&twice, &[CoPartitioned, CoPartitioned], &IndexMap::new()),
            "co-partitioned joins — shuffle Y by key 1 and key 0"
        );
        assert_eq!(join_headline(&[CoPartitioned, CoPartitioned]).as_deref(), Some("co-partitioned joins"));
        assert_eq!(
            join_headline(&[BroadcastLeft, CoPartitioned, BroadcastRight, BroadcastBoth]).as_deref(),
            Some("2 broadcast + 1 co-partitioned joins")
        );
        assert_eq!(join_headline(&[BroadcastBoth]), None);
    }
}
