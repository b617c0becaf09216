//! The order of the pairwise contractions: dynamic programming over subsets
//! of operands by flops (opt_einsum's `optimal`); greedy beyond, each
//! candidate costed as a small two-input program by the optimizer (or by
//! its Table-1 plan); then the chosen tree written out as program nodes.

use crate::analyze::{Analysis, Label};
use crate::ops::{contraction_ops, Names};
use crate::report::Step;
use crate::Options;
use indexmap::IndexMap;
use std::collections::HashMap;
use std::time::Instant;
use tra_optimizer::check::{check_plan, check_program};
use tra_optimizer::compile::compile as table1;
use tra_optimizer::cost::{plan_report, Cost, Weights};
use tra_optimizer::optimize::optimize;
use tra_optimizer::program::{Cluster, Program, TraOp};

#[derive(Debug, Clone)]
pub(crate) enum Tree {
    Leaf(usize),
    Node(Box<Tree>, Box<Tree>),
}

impl Tree {
    fn mask(&self) -> u64 {
        match self {
            Tree::Leaf(i) => 1 << i,
            Tree::Node(l, r) => l.mask() | r.mask(),
        }
    }
}

pub(crate) struct Search<'a, 'o> {
    pub(crate) a: &'a Analysis,
    pub(crate) opts: &'o Options<'o>,
    pub(crate) cluster: Cluster,
    /// Labels of each (reduced) operand.
    pub(crate) rels: Vec<Vec<Label>>,
    pub(crate) memo: HashMap<PairKey, Cost>,
    /// Past it, candidates are costed by their Table-1 plan (no saturation).
    pub(crate) deadline: Instant,
}

/// A candidate contraction: left labels, right labels, result labels.
type PairKey = (Vec<Label>, Vec<Label>, Vec<Label>);
/// The best contraction of a subset of operands: its (flops, intermediate
/// floats), its result's labels and its tree.
type Best = ((u64, u64), Vec<Label>, Tree);
/// A greedy candidate: score, the two positions, the result's labels.
type Pick = ((f64, u64, u64), usize, usize, Vec<Label>);

impl Search<'_, '_> {
    fn labels_of(&self, mask: u64) -> Vec<Label> {
        let mut out = Vec::new();
        for (i, r) in self.rels.iter().enumerate() {
            if mask & (1 << i) != 0 {
                for &l in r {
                    if !out.contains(&l) {
                        out.push(l);
                    }
                }
            }
        }
        out
    }

    /// The labels of the contraction of `lx` and `ly` covering operands
    /// `mask`: the output's order for the last one, else the join's key
    /// order without the labels nothing later needs.
    pub(crate) fn result(&self, lx: &[Label], ly: &[Label], mask: u64) -> Vec<Label> {
        let full = (1u64 << self.rels.len()) - 1;
        if mask == full {
            return self.a.output.clone();
        }
        let outside = self.labels_of(full & !mask);
        let mut j: Vec<Label> = lx.to_vec();
        j.extend(ly.iter().copied().filter(|l| !lx.contains(l)));
        j.into_iter().filter(|l| self.a.output.contains(l) || outside.contains(l)).collect()
    }

    /// The cost of one contraction as a two-input program.
    fn pair_cost(&mut self, lx: &[Label], ly: &[Label], res: &[Label]) -> Cost {
        let key = (lx.to_vec(), ly.to_vec(), res.to_vec());
        if let Some(c) = self.memo.get(&key) {
            return *c;
        }
        let (ops, _) = contraction_ops(self.a, ("L", lx), ("R", ly), res, "J", "Z");
        let mut inputs = IndexMap::new();
        inputs.insert("L".to_string(), self.a.decl(lx));
        inputs.insert("R".to_string(), self.a.decl(ly));
        let program = Program {
            inputs,
            nodes: ops.into_iter().collect(),
            outputs: vec!["Z".into()],
            cluster: Some(self.cluster),
            dim_names: IndexMap::new(),
        };
        let w = Weights { network: self.cluster.network_weight, compute: self.cluster.compute_weight };
        let optimized = if Instant::now() < self.deadline {
            optimize(&program, self.opts.rules, &self.opts.limits).ok().map(|a| a.cost.additive())
        } else {
            None
        };
        let cost = optimized.or_else(|| table1_cost(&program, w)).unwrap_or(Cost {
            network_floats: u64::MAX,
            flops: u64::MAX,
            total: f64::INFINITY,
            operators: u64::MAX,
        });
        self.memo.insert(key, cost);
        cost
    }

    /// Cost and labels of a tree.
    pub(crate) fn tree_cost(&mut self, t: &Tree) -> (Cost, Vec<Label>) {
        match t {
            Tree::Leaf(i) => (Cost::default(), self.rels[*i].clone()),
            Tree::Node(l, r) => {
                let (cl, ll) = self.tree_cost(l);
                let (cr, lr) = self.tree_cost(r);
                let res = self.result(&ll, &lr, t.mask());
                let c = self.pair_cost(&ll, &lr, &res);
                (cl + cr + c, res)
            }
        }
    }

    /// The flops of one contraction at padded extents, as `einSum` and
    /// opt_einsum count them: the product of the extents of every index
    /// either side holds, twice when an index is summed away.
    pub(crate) fn flops(&self, lx: &[Label], ly: &[Label], res: &[Label]) -> u64 {
        let mut all: Vec<Label> = lx.to_vec();
        all.extend(ly.iter().copied().filter(|l| !lx.contains(l)));
        let summed = all.iter().any(|l| !res.contains(l));
        self.a.floats(&all).saturating_mul(if summed { 2 } else { 1 })
    }

    /// Dynamic programming over subsets of operands, minimizing the total
    /// flops of the contractions (opt_einsum's `optimal` objective; ties: the
    /// smaller intermediates, then the first split found); `None` when out
    /// of time. Every candidate is costed by [`Search::flops`], without the
    /// optimizer: the search is O(3ⁿ) cheap steps (8 operands: a few
    /// milliseconds), and the distribution of the chosen contractions is
    /// chosen when the whole program is optimized.
    pub(crate) fn dp(&mut self, deadline: Instant) -> Option<Tree> {
        let n = self.rels.len();
        let full = (1u64 << n) - 1;
        let mut best: HashMap<u64, Best> = HashMap::new();
        for i in 0..n {
            best.insert(1 << i, ((0, 0), self.rels[i].clone(), Tree::Leaf(i)));
        }
        for mask in 1..=full {
            if mask.count_ones() < 2 {
                continue;
            }
            if Instant::now() > deadline {
                return None;
            }
            let low = mask & mask.wrapping_neg();
            let mut sub = (mask - 1) & mask;
            let mut chosen: Option<((u64, u64), u64, u64)> = None;
            while sub > 0 {
                if sub & low != 0 {
                    let ((fl, ml), ll, _) = &best[&sub];
                    let ((fr, mr), lr, _) = &best[&(mask & !sub)];
                    let res = self.result(ll, lr, mask);
                    let flops = fl.saturating_add(*fr).saturating_add(self.flops(ll, lr, &res));
                    let floats =
                        ml.saturating_add(*mr).saturating_add(if mask == full { 0 } else { self.a.floats(&res) });
                    if chosen.is_none_or(|(c, _, _)| (flops, floats) < c) {
                        chosen = Some(((flops, floats), sub, mask & !sub));
                    }
                }
                sub = (sub - 1) & mask;
            }
            let (cost, l, r) = chosen.expect("a split");
            let (ll, tl) = (&best[&l].1, &best[&l].2);
            let (lr, tr) = (&best[&r].1, &best[&r].2);
            let res = self.result(ll, lr, mask);
            let tree = Tree::Node(Box::new(tl.clone()), Box::new(tr.clone()));
            best.insert(mask, (cost, res, tree));
        }
        best.remove(&full).map(|(_, _, t)| t)
    }

    /// The cheapest pair first, repeatedly. Only pairs that share an index
    /// are candidates while there are any (a product of unrelated operands
    /// is cheap now and costly later); a pair's score is its cost plus the
    /// network weight times the floats of its result, which later steps move.
    pub(crate) fn greedy(&mut self) -> Tree {
        let mut cur: Vec<(Tree, Vec<Label>)> =
            self.rels.iter().cloned().enumerate().map(|(i, l)| (Tree::Leaf(i), l)).collect();
        while cur.len() > 1 {
            let connected = |x: &[Label], y: &[Label]| x.iter().any(|l| y.contains(l));
            let any_connected = (0..cur.len()).any(|i| (i + 1..cur.len()).any(|j| connected(&cur[i].1, &cur[j].1)));
            let mut pick: Option<Pick> = None;
            for i in 0..cur.len() {
                for j in i + 1..cur.len() {
                    if any_connected && !connected(&cur[i].1, &cur[j].1) {
                        continue;
                    }
                    let mask = cur[i].0.mask() | cur[j].0.mask();
                    let res = self.result(&cur[i].1, &cur[j].1, mask);
                    let c = self.pair_cost(&cur[i].1, &cur[j].1, &res);
                    let later = if cur.len() > 2 { self.a.floats(&res) } else { 0 };
                    let score = (c.total + self.cluster.network_weight * later as f64, c.flops, later);
                    if !pick.as_ref().is_some_and(|(k, ..)| score >= *k) {
                        pick = Some((score, i, j, res));
                    }
                }
            }
            let (_, i, j, res) = pick.expect("two relations");
            let (tj, _) = cur.remove(j);
            let (ti, _) = cur.remove(i);
            cur.insert(i, (Tree::Node(Box::new(ti), Box::new(tj)), res));
        }
        cur.pop().expect("one tree").0
    }
}

/// Writes the contractions of an order tree as program nodes.
pub(crate) struct Emitter {
    pub(crate) names: Names,
    pub(crate) nodes: IndexMap<String, TraOp>,
    pub(crate) steps: Vec<Step>,
    /// The sum of the steps' costs, when costed.
    pub(crate) total: Option<Cost>,
    /// Readable base names: a leaf's operand name, a node's concatenation.
    pub(crate) label: HashMap<String, String>,
}

impl Emitter {
    /// Emits `t` post-order; its node name and labels.
    pub(crate) fn emit(
        &mut self,
        t: &Tree,
        root: bool,
        s: &mut Search<'_, '_>,
        rels: &[(String, Vec<Label>)],
    ) -> (String, Vec<Label>) {
        match t {
            Tree::Leaf(i) => {
                let (name, l) = &rels[*i];
                self.label.insert(name.clone(), s.a.names[*i].clone());
                (name.clone(), l.clone())
            }
            Tree::Node(l, r) => {
                let (xn, xl) = self.emit(l, false, s, rels);
                let (yn, yl) = self.emit(r, false, s, rels);
                let res = s.result(&xl, &yl, t.mask());
                let base = format!("{}{}", self.label[&xn], self.label[&yn]);
                let join_name = self.names.fresh(&format!("{base}_join"));
                let last = if root { s.a.output_name.clone() } else { self.names.fresh(&base) };
                let (ops, kernel) = contraction_ops(s.a, (&xn, &xl), (&yn, &yl), &res, &join_name, &last);
                let cost = self.total.is_some().then(|| s.pair_cost(&xl, &yl, &res));
                if let (Some(t), Some(c)) = (self.total.as_mut(), cost) {
                    *t = *t + c;
                }
                self.steps.push(Step {
                    left: xn,
                    right: yn,
                    result: last.clone(),
                    einsum: format!("{},{}->{}", s.a.letters(&xl), s.a.letters(&yl), s.a.letters(&res)),
                    kernel: kernel.to_string(),
                    cost,
                });
                self.nodes.extend(ops);
                self.label.insert(last.clone(), base);
                (last, res)
            }
        }
    }
}

/// The cost of a program's Table-1 compilation.
fn table1_cost(p: &Program, w: Weights) -> Option<Cost> {
    let typed = check_program(p).ok()?;
    let plan = table1(p, &typed);
    let sites = p.cluster().sites;
    let typed_plan = check_plan(&plan, sites).ok()?;
    let report = plan_report(&plan, &typed_plan, sites, w);
    Some(report.values().fold(Cost::default(), |c, r| c + Cost::new(r.network_floats, r.flops, w)))
}
