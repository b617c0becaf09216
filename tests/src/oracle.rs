//! Values of e-nodes on one fixed input, computed with the reference
//! interpreter of `tra-executor`: the [`ValueOracle`] that makes the e-graph
//! analysis evaluate every member of every class as the graph grows and panic,
//! naming the rules, when two members of one class disagree (Ruler's "cvec"
//! idea), and the comparisons the soundness harness uses.
//!
//! Sorts:
//! - a **P** class's value is a physical relation, `(key, block, site)`
//!   triples, compared *exactly* (as multisets, sites included, blocks within a
//!   float tolerance); an `Everywhere` copy is its own site, except on one site
//!   where `Everywhere` and site 0 are the same place;
//! - an **L** class's value is a *bag* of `(key, block)`: the site projected
//!   away with every copy kept ([`bag_erase`]), so that an erased partial
//!   aggregate (the same key on several sites) is a value too, and differs from
//!   the complete aggregate.
//!
//! One e-node is evaluated from its children's values with the reference
//! interpreter itself: the operands are rebuilt exactly as small IA plans
//! ([`Embedder`]: every tuple keyed by its key, a site selector and a copy
//! number, shuffled on the selector to its site, the extra key components
//! mapped away), the node is added on top, and [`reference::eval_ia`] runs the
//! plan. TRA nodes run with [`reference::eval_tra`] on their erased operands.

use egg::Language;
use std::collections::BTreeMap;
use std::sync::Arc;
use tra_executor::reference::{self, AnyLayout, Block, PhysRelation, Relation, Site};
use tra_optimizer::egraph::{nodes, ClassData, Ia, OracleValue, Param, TraEGraph, ValueOracle};
use tra_optimizer::keyexpr::{Key, KeyFn};
use tra_optimizer::placement::site_of;
use tra_optimizer::program::{IaOp, InputDecl, PlacementDecl, Plan, Program, TraOp};

/// The float tolerance of every comparison: `|a - b| <= TOL · (1 + max(|a|, |b|))`.
pub const TOL: f64 = 1e-6;

/// A relation up to site, every copy kept, sorted by key (stable).
pub type Bag = Vec<(Key, Block)>;

/// The value of a class.
#[derive(Debug, Clone)]
pub enum Value {
    /// A physical relation (P class).
    P(PhysRelation),
    /// A bag (L class).
    L(Bag),
}

impl Value {
    /// The physical relation, for a P value.
    pub fn phys(&self) -> Option<&PhysRelation> {
        match self {
            Value::P(p) => Some(p),
            Value::L(_) => None,
        }
    }
    /// The bag, for an L value.
    pub fn bag(&self) -> Option<&Bag> {
        match self {
            Value::L(b) => Some(b),
            Value::P(_) => None,
        }
    }
}

/// Project the site away, keeping every copy (an `Everywhere` tuple is one
/// copy): unlike [`reference::erase`], a partial aggregate is a value.
pub fn bag_erase(p: &PhysRelation) -> Bag {
    let mut v: Bag = p.tuples.iter().map(|t| (t.key.clone(), t.block.clone())).collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// A relation as a bag.
pub fn relation_bag(r: &Relation) -> Bag {
    r.tuples.iter().map(|(k, b)| (k.clone(), b.clone())).collect()
}

/// A bag as a relation (fails on a repeated key: not a tensor relation).
pub fn bag_relation(b: &Bag) -> Result<Relation, String> {
    Relation::from_tuples(b.iter().cloned()).map_err(|e| format!("not a tensor relation: {e}"))
}

fn close(a: f64, b: f64) -> bool {
    a == b || (a.is_nan() && b.is_nan()) || (a - b).abs() <= TOL * (1.0 + a.abs().max(b.abs()))
}

fn blocks_close(a: &Block, b: &Block) -> bool {
    a.shape() == b.shape() && a.iter().zip(b.iter()).all(|(x, y)| close(*x, *y))
}

fn show(b: &Block) -> String {
    let s = format!("{b}").replace('\n', " ");
    if s.len() > 200 {
        format!("{}…", &s[..s.char_indices().nth(200).map(|(i, _)| i).unwrap_or(s.len())])
    } else {
        s
    }
}

/// Compare two multisets of blocks grouped by a label; the message names the
/// first difference.
fn same_groups<L: Ord + std::fmt::Debug>(
    a: BTreeMap<L, Vec<&Block>>,
    b: BTreeMap<L, Vec<&Block>>,
    what: &str,
) -> Result<(), String> {
    let (na, nb): (usize, usize) = (a.values().map(Vec::len).sum(), b.values().map(Vec::len).sum());
    for (label, xs) in &a {
        let ys = b.get(label).map(Vec::as_slice).unwrap_or(&[]);
        if xs.len() != ys.len() {
            return Err(format!(
                "{what} {label:?}: {} copies on one side, {} on the other ({na} and {nb} tuples in all)",
                xs.len(),
                ys.len()
            ));
        }
        // Greedy matching within the (tiny) group.
        let mut used = vec![false; ys.len()];
        for x in xs {
            match (0..ys.len()).find(|&j| !used[j] && blocks_close(x, ys[j])) {
                Some(j) => used[j] = true,
                None => {
                    let other = ys.first().map(|y| show(y)).unwrap_or_default();
                    return Err(format!("{what} {label:?}: block {} on one side, {} on the other", show(x), other));
                }
            }
        }
    }
    if let Some(label) = b.keys().find(|l| !a.contains_key(*l)) {
        return Err(format!("{what} {label:?}: present on one side only ({na} and {nb} tuples in all)"));
    }
    Ok(())
}

/// Two physical relations are equal: the same multiset of (site, key, block),
/// blocks within [`TOL`]; on one site `Everywhere` is site 0.
pub fn same_phys(a: &PhysRelation, b: &PhysRelation, sites: usize) -> Result<(), String> {
    fn group(p: &PhysRelation, sites: usize) -> BTreeMap<(Site, Key), Vec<&Block>> {
        let mut m: BTreeMap<(Site, Key), Vec<&Block>> = BTreeMap::new();
        for t in &p.tuples {
            let site = if sites == 1 { Site::At(0) } else { t.site };
            m.entry((site, t.key.clone())).or_default().push(&t.block);
        }
        m
    }
    same_groups(group(a, sites), group(b, sites), "(site, key)")
}

/// Two bags are equal: the same multiset of (key, block), blocks within [`TOL`].
pub fn same_bag(a: &Bag, b: &Bag) -> Result<(), String> {
    fn group(x: &Bag) -> BTreeMap<Key, Vec<&Block>> {
        let mut m: BTreeMap<Key, Vec<&Block>> = BTreeMap::new();
        for (k, blk) in x {
            m.entry(k.clone()).or_default().push(blk);
        }
        m
    }
    same_groups(group(a), group(b), "key")
}

/// Compare two values of one class.
pub fn same_value(a: &Value, b: &Value, sites: usize) -> Result<(), String> {
    match (a, b) {
        (Value::P(x), Value::P(y)) => same_phys(x, y, sites),
        (Value::L(x), Value::L(y)) => same_bag(x, y),
        _ => Err("a physical value and a logical value in one class".into()),
    }
}

// ---------------------------------------------------------------------------
// Parameters and operators of e-nodes.

fn param(eg: &TraEGraph, id: egg::Id) -> Result<&Param, String> {
    nodes::leaf(eg, id).map_err(|e| e.to_string())
}

/// True for the TRA (L-sort, not executable) operators.
pub fn is_tra(n: &Ia) -> bool {
    matches!(
        n,
        Ia::Join(_) | Ia::Aggregate(_) | Ia::Rekey(_) | Ia::Filter(_) | Ia::Transform(_) | Ia::Tile(_) | Ia::Concat(_)
    )
}

/// The TRA operator of a TRA node, its operands named by `names` (one per
/// relation operand, in order), and the operand classes.
pub fn tra_op(eg: &TraEGraph, node: &Ia, names: &[&str]) -> Result<(TraOp, Vec<egg::Id>), String> {
    let op = nodes::tra_op(node, |id| nodes::leaf(eg, id), names).map_err(|e| e.to_string())?;
    Ok((op, nodes::operands(node)))
}

/// The IA operator of a shuffle, broadcast or local node, its operands named
/// by `names`, and the operand classes.
pub fn ia_op(eg: &TraEGraph, node: &Ia, names: &[&str]) -> Result<(IaOp, Vec<egg::Id>), String> {
    let op = nodes::ia_op(node, |id| nodes::leaf(eg, id), names).map_err(|e| e.to_string())?;
    Ok((op, nodes::operands(node)))
}

/// Key arity and block shape of a class (from its type), for empty values.
fn class_shape(eg: &TraEGraph, id: egg::Id) -> (usize, Vec<usize>) {
    match &eg[id].data {
        ClassData::P(p) => (p.rel.key_arity(), p.rel.array_bounds.clone()),
        ClassData::L(l) => (l.rel.key_arity(), l.rel.array_bounds.clone()),
        ClassData::Param(_) => (0, vec![]),
    }
}

/// The declaration of an input holding exactly these keys and blocks.
fn decl_for<'a>(
    keys: impl Iterator<Item = (&'a Key, &'a Block)>,
    arity: usize,
    shape: &[usize],
    placement: PlacementDecl,
) -> InputDecl {
    let mut bounds = vec![1i64; arity];
    let mut block: Option<Vec<i64>> = None;
    for (k, b) in keys {
        for (d, &c) in k.iter().enumerate() {
            if d < bounds.len() {
                bounds[d] = bounds[d].max(i64::from(c) + 1);
            }
        }
        block.get_or_insert_with(|| b.shape().iter().map(|&x| x as i64).collect());
    }
    InputDecl {
        key_bounds: bounds,
        array_bounds: block.unwrap_or_else(|| shape.iter().map(|&x| x as i64).collect()),
        placement,
    }
}

/// Rebuilds physical relations exactly, as inputs plus IA nodes of a plan.
pub struct Embedder {
    sites: usize,
    /// For each site, a key value `v` with `site_of([v], [0]) == site`.
    selectors: Vec<u32>,
}

impl Embedder {
    /// For `sites` sites.
    pub fn new(sites: usize) -> Embedder {
        let selectors = (0..sites)
            .map(|s| (0u32..).find(|&v| site_of(&[v], &[0], sites) == s).expect("every site is hit"))
            .collect();
        Embedder { sites, selectors }
    }

    /// Add to `plan` (and its data to `data`) the nodes that rebuild `p`
    /// exactly; the name of the node holding it.
    pub fn embed(
        &self,
        plan: &mut Plan,
        data: &mut BTreeMap<String, Relation>,
        tag: &str,
        p: &PhysRelation,
        arity: usize,
        shape: &[usize],
    ) -> Result<String, String> {
        let everywhere = p.tuples.iter().filter(|t| t.site == Site::Everywhere).count();
        if everywhere != 0 && everywhere != p.tuples.len() {
            return Err(format!("{tag}: a relation with tuples both everywhere and on single sites"));
        }
        let replicated = !p.tuples.is_empty() && everywhere == p.tuples.len();
        let mut copies: BTreeMap<(Key, Site), u32> = BTreeMap::new();
        let mut tuples: Vec<(Key, Block)> = Vec::with_capacity(p.tuples.len());
        for t in &p.tuples {
            if t.key.len() != arity {
                return Err(format!("{tag}: key {:?} has arity {}, expected {arity}", t.key, t.key.len()));
            }
            let copy = copies.entry((t.key.clone(), t.site)).or_default();
            let mut k = t.key.clone();
            match t.site {
                Site::At(s) => k.push(*self.selectors.get(s).ok_or_else(|| format!("{tag}: site {s} out of range"))?),
                Site::Everywhere => k.push(0),
            }
            k.push(*copy);
            *copy += 1;
            tuples.push((k, t.block.clone()));
        }
        let rel = Relation::from_tuples(tuples).map_err(|e| format!("{tag}: {e}"))?;
        let input = format!("{tag}_in");
        let placement = if replicated { PlacementDecl::Replicated } else { PlacementDecl::Any };
        plan.inputs.insert(input.clone(), decl_for(rel.tuples.iter(), arity + 2, shape, placement));
        data.insert(input.clone(), rel);
        let mut from = input;
        if !replicated {
            let shuffled = format!("{tag}_at");
            plan.nodes.insert(shuffled.clone(), IaOp::Shuffle { input: from, dims: vec![arity] });
            from = shuffled;
        }
        plan.nodes
            .insert(tag.to_string(), IaOp::LocalMap { input: from, key: Some(KeyFn::identity(arity)), kernel: None });
        Ok(tag.to_string())
    }

    /// Evaluate one IA operator over operands given as physical relations.
    pub fn eval_ia_node(
        &self,
        op_of: impl FnOnce(&[&str]) -> Result<IaOp, String>,
        operands: &[(&PhysRelation, usize, Vec<usize>)],
    ) -> Result<PhysRelation, String> {
        let mut plan = Plan { inputs: Default::default(), nodes: Default::default(), outputs: vec!["out".into()] };
        let mut data = BTreeMap::new();
        let names: Vec<String> = (0..operands.len()).map(|i| format!("x{i}")).collect();
        for (i, (p, arity, shape)) in operands.iter().enumerate() {
            self.embed(&mut plan, &mut data, &names[i], p, *arity, shape)?;
        }
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        plan.nodes.insert("out".into(), op_of(&refs)?);
        let run = reference::eval_ia(&plan, self.sites, &data, AnyLayout::OneSite(0)).map_err(|e| e.to_string())?;
        run.outputs.get("out").cloned().ok_or_else(|| "no output".into())
    }
}

/// A bag as a physical relation on site 0 (for shuffles and broadcasts, whose
/// value depends only on the erased operand).
fn on_site_zero(b: &Bag) -> PhysRelation {
    PhysRelation {
        tuples: b
            .iter()
            .map(|(k, blk)| reference::PhysTuple { key: k.clone(), block: blk.clone(), site: Site::At(0) })
            .collect(),
    }
}

/// Evaluate one TRA operator over relations.
pub fn eval_tra_node(op: TraOp, operands: &[(&str, Relation, usize, Vec<usize>)]) -> Result<Relation, String> {
    let mut p = Program {
        inputs: Default::default(),
        nodes: Default::default(),
        outputs: vec!["out".into()],
        cluster: None,
        dim_names: Default::default(),
    };
    let mut data = BTreeMap::new();
    for (name, rel, arity, shape) in operands {
        p.inputs.insert(name.to_string(), decl_for(rel.tuples.iter(), *arity, shape, PlacementDecl::Any));
        data.insert(name.to_string(), rel.clone());
    }
    p.nodes.insert("out".into(), op);
    let mut out = reference::eval_tra(&p, &data).map_err(|e| e.to_string())?;
    out.remove("out").ok_or_else(|| "no output".into())
}

/// The value oracle of the e-graph analysis: every class evaluated on one
/// fixed input with the reference interpreter.
pub struct RefOracle {
    /// Sites.
    pub sites: usize,
    /// The data of every input.
    pub data: BTreeMap<String, Relation>,
    /// Where the tuples of inputs declared `any` live.
    pub layout: AnyLayout,
    embedder: Embedder,
}

impl RefOracle {
    /// An oracle for `sites` sites over this input data.
    pub fn new(sites: usize, data: BTreeMap<String, Relation>, layout: AnyLayout) -> RefOracle {
        RefOracle { sites, data, layout, embedder: Embedder::new(sites) }
    }

    /// The value of `node` given its children's values (parameters: any value).
    pub fn eval_value(&self, eg: &TraEGraph, node: &Ia, children: &[OracleValue]) -> Result<Value, String> {
        let child_value = |c: egg::Id| -> Result<&Value, String> {
            let i = node.children().iter().position(|x| *x == c).ok_or("unknown child")?;
            children
                .get(i)
                .and_then(|v| v.downcast_ref::<Value>())
                .ok_or_else(|| format!("child {i} of {node} has no value"))
        };
        match node {
            Ia::Param(p) => Err(format!("a parameter {p} has no value")),
            Ia::Input(n) => {
                let name = param(eg, *n)?.as_name().map_err(|e| e.to_string())?.to_string();
                let decl = eg.analysis.inputs.get(&name).ok_or_else(|| format!("unknown input {name}"))?;
                let rel = self.data.get(&name).ok_or_else(|| format!("no data for input {name}"))?;
                reference::place(rel, &decl.placement, self.sites, self.layout).map(Value::P).map_err(|e| e.to_string())
            }
            Ia::Erase(x) => match child_value(*x)? {
                Value::P(p) => Ok(Value::L(bag_erase(p))),
                Value::L(_) => Err("erase of a logical value".into()),
            },
            n if is_tra(n) => {
                let names = ["a", "b"];
                let (op, operands) = tra_op(eg, n, &names)?;
                let mut rels = Vec::new();
                for (i, c) in operands.iter().enumerate() {
                    let bag = child_value(*c)?.bag().ok_or("a TRA operand with a physical value")?;
                    let (arity, shape) = class_shape(eg, *c);
                    rels.push((names[i], bag_relation(bag)?, arity, shape));
                }
                eval_tra_node(op, &rels).map(|r| Value::L(relation_bag(&r)))
            }
            n => {
                let operands: Vec<egg::Id> = ia_op(eg, n, &["x0", "x1"])?.1;
                let mut owned: Vec<(PhysRelation, usize, Vec<usize>)> = Vec::new();
                for c in &operands {
                    let (arity, shape) = class_shape(eg, *c);
                    let p = match (n, child_value(*c)?) {
                        (Ia::Shuffle(_) | Ia::Broadcast(_), Value::L(b)) => on_site_zero(b),
                        (Ia::Shuffle(_) | Ia::Broadcast(_), Value::P(_)) => {
                            return Err("a shuffle or broadcast of a physical value".into())
                        }
                        (_, Value::P(p)) => p.clone(),
                        (_, Value::L(_)) => return Err("a local operator over a logical value".into()),
                    };
                    owned.push((p, arity, shape));
                }
                let refs: Vec<(&PhysRelation, usize, Vec<usize>)> =
                    owned.iter().map(|(p, a, s)| (p, *a, s.clone())).collect();
                self.embedder.eval_ia_node(|names| ia_op(eg, n, names).map(|x| x.0), &refs).map(Value::P)
            }
        }
    }
}

impl ValueOracle for RefOracle {
    fn eval(&self, eg: &TraEGraph, node: &Ia, children: &[OracleValue]) -> Result<OracleValue, String> {
        self.eval_value(eg, node, children).map(|v| Arc::new(v) as OracleValue)
    }

    fn same(&self, a: &OracleValue, b: &OracleValue, physical: bool) -> Result<(), String> {
        let (Some(x), Some(y)) = (a.downcast_ref::<Value>(), b.downcast_ref::<Value>()) else {
            return Err("a value of an unknown kind".into());
        };
        match (physical, x, y) {
            (true, Value::P(_), Value::P(_)) | (false, Value::L(_), Value::L(_)) => same_value(x, y, self.sites),
            _ => Err(format!("values of the wrong sort (physical class: {physical})")),
        }
    }
}
