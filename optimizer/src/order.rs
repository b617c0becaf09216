//! Bounding the contraction orders the e-graph explores.
//!
//! The contraction-order rules (phase [`Phase::Ordering`](crate::rule::Phase))
//! make the graph hold every bracketing of a chain of products: O(n²)
//! classes and O(n³) TRA nodes for a chain of n. Lowered and explored with
//! every distribution, each of those products would grow the graph by the
//! hundred nodes that one distributed matmul takes. So the orders are
//! explored alone, on the TRA sort, and then the graph is rebuilt keeping,
//! in every class, the member written in the program and the member that
//! is cheapest by flops (a dynamic program over the classes: a member's
//! flops are its own plus the cheapest of each operand's class, which for a
//! chain is the classic matrix-chain recurrence). Lowering and exploration
//! then choose the distribution of both orders jointly, by the full cost
//! model: the written order stays available where its data movement wins.
//!
//! Flops at this level are those of the operator on whole relations
//! (logical types): a join makes one kernel call per output tuple, an
//! aggregation one per input tuple beyond the first of each group, as the
//! cost model counts them for the local operators.

use crate::egraph::{ClassData, Ia, TraAnalysis, TraEGraph};
use egg::{Id, Language};
use indexmap::IndexMap;
use std::collections::{HashMap, HashSet};

/// The flops of a TRA node on whole relations (0 for leaves and for
/// operators whose cost does not depend on the order).
fn own_flops(eg: &TraEGraph, class: Id, node: &Ia) -> u64 {
    let logical = |id: Id| match &eg[id].data {
        ClassData::L(l) => Some(l),
        _ => None,
    };
    let kernel = |id: Id| crate::egraph::nodes::leaf(eg, id).ok().and_then(|p| p.as_kernel().ok());
    let flops = || -> Option<u64> {
        Some(match node {
            Ia::Join([_, _, k, a, b]) => {
                let (out, a, b) = (logical(class)?, logical(*a)?, logical(*b)?);
                out.tuples.saturating_mul(kernel(*k)?.flops(&[&a.rel.array_bounds, &b.rel.array_bounds]))
            }
            Ia::Aggregate([_, k, x]) => {
                let (out, x) = (logical(class)?, logical(*x)?);
                let per = kernel(*k)?.flops(&[&x.rel.array_bounds, &x.rel.array_bounds]);
                x.tuples.saturating_sub(out.tuples).saturating_mul(per)
            }
            Ia::Transform([k, x]) => {
                let x = logical(*x)?;
                x.tuples.saturating_mul(kernel(*k)?.flops(&[&x.rel.array_bounds]))
            }
            _ => 0,
        })
    };
    flops().unwrap_or(0)
}

/// The cheapest flops of every class, by a fixpoint over the members (the
/// graph holds no cycle through TRA operators, so it ends after at most as
/// many rounds as the graph is deep).
fn cheapest(eg: &TraEGraph) -> HashMap<Id, u64> {
    let mut best: HashMap<Id, u64> = HashMap::new();
    loop {
        let mut changed = false;
        for class in eg.classes() {
            for node in &class.nodes {
                let mut total = own_flops(eg, class.id, node);
                let mut known = true;
                for c in node.children() {
                    match best.get(&eg.find(*c)) {
                        Some(f) => total = total.saturating_add(*f),
                        None => known = false,
                    }
                }
                if known && best.get(&class.id).is_none_or(|b| total < *b) {
                    best.insert(class.id, total);
                    changed = true;
                }
            }
        }
        if !changed {
            return best;
        }
    }
}

/// The member of every class that the program wrote (before any rule ran,
/// each class has one operator), for [`prune`].
pub fn written(eg: &TraEGraph) -> HashMap<Id, Ia> {
    eg.classes()
        .filter_map(|c| c.nodes.iter().find(|n| !matches!(n, Ia::Param(_))).map(|n| (c.id, n.clone())))
        .collect()
}

/// What [`prune`] kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    /// TRA nodes the ordering phase had built.
    pub explored: usize,
    /// TRA nodes kept.
    pub kept: usize,
    /// Of those, the ones the program did not write (other orders).
    pub reordered: usize,
}

/// The graph rebuilt with, in every class reachable from `roots`, the
/// member `written` names (the program's own operator) and the member of
/// least flops (ties: the written one, else the first), and the roots in
/// it. `written` maps a class (as it was before the ordering phase) to the
/// node the program wrote there.
pub fn prune(
    eg: &TraEGraph,
    roots: &IndexMap<String, Id>,
    written: &HashMap<Id, Ia>,
    fresh: TraAnalysis,
) -> (TraEGraph, IndexMap<String, Id>, Pruned) {
    let best = cheapest(eg);
    let written: HashMap<Id, Ia> =
        written.iter().map(|(c, n)| (eg.find(*c), n.clone().map_children(|k| eg.find(k)))).collect();
    let origins = crate::describe::Origins::of(eg);
    let keep = Keep { eg, best: &best, written: &written, origins: &origins };
    let mut out = TraEGraph::new(fresh);
    let mut built: HashMap<Id, Id> = HashMap::new();
    let mut open: HashSet<Id> = HashSet::new();
    let mut kept = (0, 0);
    let new_roots = roots
        .iter()
        .map(|(name, id)| {
            let id = build(&keep, eg.find(*id), &mut out, &mut built, &mut open, &mut kept);
            (name.clone(), id.expect("a root has a member"))
        })
        .collect();
    out.rebuild();
    // The program's nodes that kept their class (a node of the written order
    // that no kept order computes is gone).
    out.analysis.program_nodes = eg
        .analysis
        .program_nodes
        .iter()
        .filter_map(|(name, id)| built.get(&eg.find(*id)).map(|&n| (name.clone(), out.find(n))))
        .collect();
    let explored = eg.classes().map(|c| c.nodes.iter().filter(|n| !matches!(n, Ia::Param(_))).count()).sum();
    (out, new_roots, Pruned { explored, kept: kept.0, reordered: kept.1 })
}

/// What [`prune`] would report when the ordering phase changed nothing,
/// without rebuilding the graph: `None` unless `after` is `before` unchanged.
/// With no union, every class keeps its one member (a union of two classes
/// always leaves one with two distinct members), and with no union a new
/// node is a new class; so one member per class and as many classes as
/// before means no rule added or merged anything. Then the program's own
/// graph is the pruned one: every node reachable from `roots` is kept, and
/// none is another order.
pub fn unchanged(before: &TraEGraph, after: &TraEGraph, roots: &IndexMap<String, Id>) -> Option<Pruned> {
    if after.number_of_classes() != before.number_of_classes() || after.classes().any(|c| c.nodes.len() != 1) {
        return None;
    }
    let explored = after.classes().filter(|c| !matches!(c.nodes[0], Ia::Param(_))).count();
    let mut seen: HashSet<Id> = HashSet::new();
    let mut stack: Vec<Id> = roots.values().map(|&r| after.find(r)).collect();
    let mut kept = 0;
    while let Some(c) = stack.pop() {
        if !seen.insert(c) {
            continue;
        }
        let node = &after[c].nodes[0];
        if !matches!(node, Ia::Param(_)) {
            kept += 1;
        }
        stack.extend(node.children().iter().map(|&k| after.find(k)));
    }
    Some(Pruned { explored, kept, reordered: 0 })
}

/// The members of `class` that [`prune`] keeps, in order.
fn kept_members(eg: &TraEGraph, class: Id, best: &HashMap<Id, u64>, written: &HashMap<Id, Ia>) -> Vec<Ia> {
    let nodes = &eg[class].nodes;
    let total = |n: &Ia| {
        n.children()
            .iter()
            .try_fold(own_flops(eg, class, n), |acc, c| best.get(&eg.find(*c)).map(|f| acc.saturating_add(*f)))
            .unwrap_or(u64::MAX)
    };
    let mine = written.get(&class);
    let mut keep: Vec<Ia> = mine.into_iter().cloned().collect();
    let cheapest = nodes.iter().min_by_key(|n| (total(n), Some(*n) != mine));
    if let Some(c) = cheapest {
        if Some(c) != mine {
            keep.push(c.clone());
        }
    }
    keep
}

/// What [`prune`] reads while it rebuilds the graph.
struct Keep<'a> {
    eg: &'a TraEGraph,
    best: &'a HashMap<Id, u64>,
    written: &'a HashMap<Id, Ia>,
    origins: &'a crate::describe::Origins,
}

/// A class being rebuilt: its kept members, the one being built and the
/// children of it built so far.
struct Frame {
    class: Id,
    members: Vec<Ia>,
    member: usize,
    kids: Vec<Id>,
    /// Children visited (built or not) of the current member.
    visited: usize,
    ok: bool,
    id: Option<Id>,
}

/// The class `class` rebuilt in `out` (its kept members whose children
/// could all be built; a member that reaches back into a class being
/// built is left out), or `None` when no member could be. Depth-first
/// with an explicit stack: a program thousands of operators deep is
/// rebuilt on any thread's stack.
fn build(
    keep: &Keep,
    class: Id,
    out: &mut TraEGraph,
    built: &mut HashMap<Id, Id>,
    open: &mut HashSet<Id>,
    kept: &mut (usize, usize),
) -> Option<Id> {
    // Enters `class`: its answer when it is known now, else a new frame.
    let enter = |class: Id, built: &HashMap<Id, Id>, open: &mut HashSet<Id>, stack: &mut Vec<Frame>| {
        if let Some(id) = built.get(&class) {
            return Some(Some(*id));
        }
        if !open.insert(class) {
            return Some(None);
        }
        let members = kept_members(keep.eg, class, keep.best, keep.written);
        stack.push(Frame { class, members, member: 0, kids: Vec::new(), visited: 0, ok: true, id: None });
        None
    };
    let mut stack: Vec<Frame> = Vec::new();
    if let Some(answer) = enter(class, built, open, &mut stack) {
        return answer;
    }
    let mut answer: Option<Option<Id>> = None;
    loop {
        let frame = stack.last_mut().expect("a frame is open");
        if let Some(child) = answer.take() {
            frame.visited += 1;
            match child {
                Some(k) => frame.kids.push(k),
                None => frame.ok = false,
            }
        }
        if let Some(node) = frame.members.get(frame.member) {
            if let Some(c) = node.children().get(frame.visited) {
                let c = keep.eg.find(*c);
                answer = enter(c, built, open, &mut stack);
                continue;
            }
            // Every child visited: add the member when all were built.
            let node = node.clone();
            let (ok, kids) = (frame.ok, std::mem::take(&mut frame.kids));
            frame.member += 1;
            frame.visited = 0;
            frame.ok = true;
            if ok {
                let other_order = Some(&node) != keep.written.get(&frame.class);
                let origin = keep.origins.get(&node).filter(|_| other_order);
                let mut i = 0;
                let new = node.map_children(|_| {
                    i += 1;
                    kids[i - 1]
                });
                if !matches!(new, Ia::Param(_)) {
                    kept.0 += 1;
                    kept.1 += usize::from(other_order);
                    // The ordering rule that built it stays its origin in the
                    // new graph (`rules_applied` names it when the plan
                    // realizes it).
                    if let Some(rule) = origin {
                        out.analysis.origins.entry(new.clone()).or_insert(rule);
                    }
                }
                let added = out.add(new);
                match frame.id {
                    None => frame.id = Some(added),
                    Some(first) => {
                        out.union(first, added);
                    }
                }
            }
            continue;
        }
        // Every member tried: the class is done.
        let frame = stack.pop().expect("a frame is open");
        open.remove(&frame.class);
        if let Some(id) = frame.id {
            built.insert(frame.class, id);
            // A class of TRA operators the program did not write (another
            // order's intermediate): extraction can leave these out to find
            // the best plan in the written order.
            let leaf = keep.eg[frame.class].nodes.iter().all(|n| matches!(n, Ia::Param(_)));
            if !leaf {
                match keep.written.contains_key(&frame.class) {
                    true => out.analysis.written_order.push(id),
                    false => out.analysis.other_order.push(id),
                }
            }
        }
        if stack.is_empty() {
            return frame.id;
        }
        answer = Some(frame.id);
    }
}
