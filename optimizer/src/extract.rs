//! DAG-aware extraction of the cheapest executable plan.
//!
//! egg's own `Extractor` sums tree costs, so a sub-plan used by two consumers
//! (a training step reuses its activations) would be paid twice. Here each
//! class's best choice carries the *set* of classes its plan uses with their
//! costs; a node's cost is the cost of the union of its children's sets plus
//! its own. That is the "greedy DAG" extractor: a shared sub-plan is paid once.
//! Cycles (through `erase(shuffle(…))`) are skipped: a node whose children's
//! plans already use its own class is never chosen.
//!
//! A filter on nodes lets callers extract the best plan of a strategy (only
//! broadcast joins, only co-partitioned joins, …) for `alternatives`.
//!
//! **Under the time model** the figure minimized is not a sum of node costs
//! (each stage is a maximum over sites), so this extractor alone cannot be
//! exact. [`crate::optimize`] runs it under the e-nodes' exact stage times
//! ([`crate::stage_cost`]) and under two additive weightings, each with every
//! join-strategy restriction, and re-scores every distinct plan exactly
//! ([`crate::time`]). How far that is from exact: every plan it reports is
//! scored exactly, and the chosen plan is the fastest of the candidates (or,
//! among those within the model's resolution of the fastest, the one whose
//! kernels move the fewest bytes: `optimize::TIME_RESOLUTION`); a
//! plan outside the candidates can be faster only if (a) it reads a costlier
//! physical source of an exchange that pays off later (an exchange is
//! charged the cheapest source the e-graph holds), (b) greedy DAG
//! extraction misses it for the same reason it can miss the additive
//! optimum (shared sub-plans chosen class by class), or (c) its stages
//! overlap more than the candidates' do (the exact model runs stages that
//! do not wait for each other at the same time; the stage times add them).

use crate::cost::{node_cost, Cost, Weights};
use crate::egraph::{ExtractedPlan, Ia, TraEGraph};
use egg::{Id, Language, RecExpr};
use indexmap::IndexMap;
use rustc_hash::FxHashMap as HashMap;

/// Class → its chosen node (an index into [`NodeCosts`]), for every class a
/// plan uses, sorted by class (a sorted vector: sets are built by merging
/// the children's, which is linear, and summed in class order). An index,
/// not the cost itself: sets are copied and merged for every node visited.
type CostSet = Vec<(Id, u32)>;

/// The sum of the own costs of a set's nodes, in class order.
fn total(set: &[(Id, u32)], own: &[Cost]) -> Cost {
    set.iter().fold(Cost::default(), |a, &(_, i)| a + own[i as usize])
}

fn set_contains(set: &[(Id, u32)], class: Id) -> bool {
    set.binary_search_by_key(&class, |(k, _)| *k).is_ok()
}

/// `acc ∪ more`, both sorted by class; where both hold a class, `acc`'s
/// cost is kept (the first child's, as children are merged in order).
fn merge_into(acc: &mut Vec<(Id, u32)>, more: &[(Id, u32)], scratch: &mut Vec<(Id, u32)>) {
    scratch.clear();
    scratch.reserve(acc.len() + more.len());
    let (mut i, mut j) = (0, 0);
    while i < acc.len() && j < more.len() {
        match acc[i].0.cmp(&more[j].0) {
            std::cmp::Ordering::Less => {
                scratch.push(acc[i]);
                i += 1;
            }
            std::cmp::Ordering::Greater => {
                scratch.push(more[j]);
                j += 1;
            }
            std::cmp::Ordering::Equal => {
                scratch.push(acc[i]);
                i += 1;
                j += 1;
            }
        }
    }
    scratch.extend_from_slice(&acc[i..]);
    scratch.extend_from_slice(&more[j..]);
    std::mem::swap(acc, scratch);
}

/// The chosen node of every class that has an executable plan.
pub struct Choice {
    /// By class id (`None`: no executable plan): the node and its plan's cost.
    best: Vec<Option<(Ia, Cost)>>,
}

/// Find, for every class, its cheapest executable node under DAG cost,
/// considering only nodes that `allow` accepts.
pub fn choose(eg: &TraEGraph, w: Weights, allow: &dyn Fn(&TraEGraph, Id, &Ia) -> bool) -> Choice {
    choose_among(eg, &NodeCosts::new(eg, w), allow)
}

/// The own cost of every e-node that has one (computed once, shared by the
/// extractions of several join-strategy restrictions), with the graph's
/// shape over them, found by the first extraction and shared by the others.
pub struct NodeCosts(Vec<(Id, Ia, Cost)>, std::cell::OnceCell<Shape>);

/// Each node's children (canonical), and the nodes that have each class as
/// a child (so that a pass revisits only nodes whose children's best plans
/// changed in the previous one).
struct Shape {
    children: Vec<Vec<Id>>,
    /// The nodes with a child in each class, by class id.
    parents: Vec<Vec<usize>>,
    /// Each node's own cost, contiguous (the sums over sets read only these).
    own: Vec<Cost>,
}

impl NodeCosts {
    fn shape(&self, eg: &TraEGraph) -> &Shape {
        self.1.get_or_init(|| {
            let children: Vec<Vec<Id>> =
                self.0.iter().map(|(_, node, _)| node.children().iter().map(|c| eg.find(*c)).collect()).collect();
            let mut parents: Vec<Vec<usize>> = vec![Vec::new(); eg.nodes().len()];
            for (i, kids) in children.iter().enumerate() {
                for child in kids {
                    parents[usize::from(*child)].push(i);
                }
            }
            let own = self.0.iter().map(|(_, _, c)| *c).collect();
            Shape { children, parents, own }
        })
    }
}

impl NodeCosts {
    /// Every node's own cost under these weights.
    pub fn new(eg: &TraEGraph, w: Weights) -> NodeCosts {
        let mut all = Vec::new();
        for class in eg.classes() {
            if crate::deadline::expired() {
                break; // the caller checks the deadline
            }
            for node in &class.nodes {
                if let Some(c) = node_cost(eg, class.id, node, w) {
                    all.push((class.id, node.clone(), c));
                }
            }
        }
        NodeCosts(all, Default::default())
    }
}

impl NodeCosts {
    /// Node costs computed elsewhere (the time model's stage costs).
    pub fn from_costs(costs: Vec<(Id, Ia, Cost)>) -> NodeCosts {
        NodeCosts(costs, Default::default())
    }
}

/// [`choose`] with the node costs given.
pub fn choose_among(eg: &TraEGraph, costs: &NodeCosts, allow: &dyn Fn(&TraEGraph, Id, &Ia) -> bool) -> Choice {
    let classes = eg.nodes().len();
    // Per class id: the index of its best node so far and that node's plan's
    // total; its cost set apart (`sets`), so that the storage of a set
    // replaced is reused for the next one built.
    let mut best: Vec<Option<(usize, Cost)>> = vec![None; classes];
    let mut sets: Vec<CostSet> = vec![Vec::new(); classes];
    let Shape { children, parents, own } = costs.shape(eg);
    let allowed: Vec<bool> = costs.0.iter().map(|(id, node, _)| allow(eg, *id, node)).collect();
    let mut pending: Vec<bool> = allowed.clone();
    let mut scratch: Vec<(Id, u32)> = Vec::new();
    let mut set: Vec<(Id, u32)> = Vec::new();
    let mut changed: Vec<Id> = Vec::new();
    // Past the request's deadline the passes stop early; the caller sees
    // `deadline::expired()` and discards the partial choice.
    let mut ticker = crate::deadline::Ticker::default();
    'passes: loop {
        changed.clear();
        for (i, (cid, _, _)) in costs.0.iter().enumerate() {
            if ticker.tick() {
                break 'passes;
            }
            if !pending[i] {
                continue;
            }
            pending[i] = false;
            // Every child needs a plan not using this class.
            let kids = &children[i];
            if !kids.iter().all(|c| best[usize::from(*c)].is_some() && !set_contains(&sets[usize::from(*c)], *cid)) {
                continue;
            }
            // Built in `set`, which is kept (and its storage reused) when
            // the node does not improve its class.
            set.clear();
            for (n, child) in kids.iter().enumerate() {
                let s = &sets[usize::from(*child)];
                if n == 0 {
                    set.reserve(s.len() + 1);
                    set.extend_from_slice(s);
                } else {
                    merge_into(&mut set, s, &mut scratch);
                }
            }
            // `cid` is in no child's set (checked above).
            let at = set.partition_point(|(k, _)| *k < *cid);
            set.insert(at, (*cid, i as u32));
            let t = total(&set, own);
            let c = usize::from(*cid);
            if best[c].as_ref().is_none_or(|(_, old)| t.lt(old)) {
                best[c] = Some((i, t));
                std::mem::swap(&mut sets[c], &mut set);
                changed.push(*cid);
            }
        }
        if changed.is_empty() {
            break;
        }
        for c in &changed {
            for &i in &parents[usize::from(*c)] {
                pending[i] = allowed[i];
            }
        }
    }
    let best = best.into_iter().map(|b| b.map(|(i, t)| (costs.0[i].1.clone(), t))).collect();
    Choice { best }
}

/// An output whose e-class has no executable plan under the extraction's
/// restriction (saturation stopped before one was built, or the restriction
/// excludes every plan).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("output `{output}` has no executable plan")]
pub struct NoPlan {
    /// The output's name.
    pub output: String,
}

impl Choice {
    fn get(&self, class: Id) -> Option<&(Ia, Cost)> {
        self.best.get(usize::from(class))?.as_ref()
    }

    /// The cost of the best plan of a class (tree of choices, shared classes once).
    pub fn cost_of(&self, class: Id) -> Option<Cost> {
        self.get(class).map(|(_, c)| *c)
    }

    /// The chosen node of a class.
    pub fn node(&self, class: Id) -> Option<&Ia> {
        self.get(class).map(|(n, _)| n)
    }

    /// Build the plan for several roots (shared classes appear once), or the
    /// first root that has no executable plan.
    pub fn plan(&self, eg: &TraEGraph, roots: &IndexMap<String, Id>) -> Result<ExtractedPlan, NoPlan> {
        let mut expr: RecExpr<Ia> = RecExpr::default();
        let mut memo: HashMap<Id, Id> = HashMap::default();
        let mut out_roots = IndexMap::new();
        let mut classes: Vec<Id> = Vec::new();
        for (name, &root) in roots {
            let root = eg.find(root);
            if self.get(root).is_none() {
                return Err(NoPlan { output: name.clone() });
            }
            // Iterative post-order build, so deep plans cannot overflow the stack.
            let mut stack: Vec<(Id, bool)> = vec![(root, false)];
            while let Some((c, expanded)) = stack.pop() {
                if memo.contains_key(&c) {
                    continue;
                }
                let node = &self.get(c).ok_or_else(|| NoPlan { output: name.clone() })?.0;
                if !expanded {
                    stack.push((c, true));
                    for ch in node.children() {
                        let ch = eg.find(*ch);
                        if !memo.contains_key(&ch) {
                            stack.push((ch, false));
                        }
                    }
                } else {
                    let n = node.clone().map_children(|ch| memo[&eg.find(ch)]);
                    let id = expr.add(n);
                    classes.push(c);
                    memo.insert(c, id);
                }
            }
            out_roots.insert(name.clone(), memo[&root]);
        }
        Ok(ExtractedPlan { expr, roots: out_roots, classes })
    }
}

/// The exact DAG cost of an extracted plan (every node once).
pub fn plan_cost(eg: &TraEGraph, plan: &ExtractedPlan, w: Weights) -> Cost {
    let classes = &plan.classes;
    plan.expr
        .as_ref()
        .iter()
        .zip(classes.iter())
        .map(|(n, c)| node_cost(eg, *c, &n.clone().map_children(|x| classes[usize::from(x)]), w).unwrap_or_default())
        .fold(Cost::default(), |a, c| a + c)
}
