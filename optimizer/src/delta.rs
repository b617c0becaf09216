//! Delta e-matching: only the matches of a pattern that use something
//! changed since the previous search (semi-naive evaluation, as Datalog
//! engines and egglog do it).
//!
//! Saturation searches every rule again each iteration. A match that the
//! previous iteration found was handled then: applied (the applier built its
//! right-hand side) or turned down (its condition failed on the same analysis
//! data). Searching near the changed classes ([`crate::schedule`]) cuts where
//! egg looks, but a class near a change still yields all its matches, old
//! ones included: on a plain matmul about three in four of the matches found
//! were found before, and each costs a substitution and a look-up in the
//! applier's memory of matches.
//!
//! A match of a pattern is the pattern's e-nodes matched to members of
//! classes, and its variables bound to classes. It was not a match at the
//! previous search only if one of these changed since:
//! - **a member that is new to its class** (added, brought in by a union, or
//!   re-canonicalized because a child class was merged: its canonical form
//!   is then new). [`Changes`] keeps every class's members at the previous
//!   search; a new member can only be in a touched class or just above one;
//! - **a class whose analysis data changed** (a placement learnt): the rule's
//!   condition reads it ([`crate::egraph::TraAnalysis::data_changed`]);
//! - for a rule whose applier reads the **members of a bound class**
//!   (`matmul-rmm`), a bound class that was touched at all.
//!
//! A variable repeated in a pattern can only come to match after a union of
//! two classes; the nodes that hold them then have new canonical forms, so
//! that case is a new member too. Parameter classes never gain members.
//!
//! A pattern none of whose operators is among the new members cannot match
//! anew unless some analysis data changed: the scheduler does not search it
//! at all ([`Changes::may_match`]; late iterations add few kinds of nodes).
//!
//! [`Delta::search`] walks the pattern top-down like egg's matcher, and
//! drops a partial match as soon as nothing changed is matched so far and no
//! class still to visit has a touched class within the pattern's remaining
//! depth: old matches are mostly not even built. It also drops a member
//! whose child class has no member with the child pattern node's operator
//! (each class's operators are kept as a bit mask): on a plain matmul more
//! than a third of the classes the walk went down to had none. Everything
//! it reads per class is in arrays indexed by class id, built once per
//! iteration. The
//! test `incremental_search_builds_the_graph_full_search_builds` checks that
//! the graph, iterations and plans equal those of searching every rule
//! everywhere.

use crate::egraph::{ClassData, Ia, TraEGraph};
use egg::{ENodeOrVar, Id, Language, PatternAst, Subst, Var};

/// `near` of a class with no touched class within [`Changes::prepare`]'s
/// depth below it.
const FAR: u8 = u8::MAX;

/// What changed since the previous search, per class id; brought up to date
/// at each iteration's first search (the graph does not change while rules
/// are searched).
#[derive(Debug, Default)]
pub struct Changes {
    /// Every non-parameter class's members at this search, sorted (as egg
    /// keeps them in a clean graph). Only the classes that can have changed
    /// are copied again at each search.
    members: Vec<Vec<Ia>>,
    /// Which operators each class has among its members ([`op_bit`]s): a
    /// pattern node is not looked for in a class without its operator.
    ops: Vec<u16>,
    /// Whether each member is new to its class since the previous search;
    /// `fresh_set` lists the classes with flags set.
    fresh: Vec<Vec<bool>>,
    fresh_set: Vec<Id>,
    /// The operators among all new members ([`op_bit`]s): a pattern with
    /// none of them can only match anew through changed analysis data.
    fresh_ops: u16,
    /// Least number of parent steps from a touched class ([`FAR`] beyond the
    /// depth asked), per class id; `near_set` lists the ids set.
    near: Vec<u8>,
    near_set: Vec<Id>,
    /// Whether a class's analysis data changed; `data_set` lists the ids set.
    data: Vec<bool>,
    data_set: Vec<Id>,
}

impl Changes {
    /// Bring the members up to date; with `touched` (the classes changed
    /// since the previous call, and those whose data changed), find the
    /// classes near them and the new members. `None` for the first search,
    /// which searches everywhere. The graph must be clean.
    pub fn prepare(&mut self, egraph: &TraEGraph, touched: Option<(&[Id], &[Id])>, depth: usize) {
        let ids = egraph.nodes().len();
        self.members.resize_with(ids, Vec::new);
        self.fresh.resize_with(ids, Vec::new);
        self.ops.resize(ids, 0);
        for c in self.fresh_set.drain(..) {
            self.fresh[usize::from(c)].fill(false);
        }
        self.fresh_ops = 0;
        for &c in &self.near_set {
            self.near[usize::from(c)] = FAR;
        }
        self.near_set.clear();
        self.near.resize(ids, FAR);
        for &c in &self.data_set {
            self.data[usize::from(c)] = false;
        }
        self.data_set.clear();
        self.data.resize(ids, false);
        debug_assert!(egraph.classes().all(|c| c.nodes.windows(2).all(|w| w[0] < w[1])), "members sorted");
        let Some((touched, data_changed)) = touched else {
            for class in egraph.classes() {
                if !matches!(class.data, ClassData::Param(_)) {
                    let c = usize::from(class.id);
                    self.members[c].clone_from(&class.nodes);
                    self.ops[c] = ops_of(&class.nodes);
                    self.fresh[c].clear();
                    self.fresh[c].resize(class.nodes.len(), false);
                }
            }
            return;
        };
        for &c in data_changed {
            let c = egraph.find(c);
            self.data[usize::from(c)] = true;
            self.data_set.push(c);
        }
        let mut level: Vec<Id> = Vec::new();
        for &c in touched {
            // A touched class may since have been merged away: its root is
            // what changed.
            let c = egraph.find(c);
            if self.near[usize::from(c)] == FAR {
                self.near[usize::from(c)] = 0;
                self.near_set.push(c);
                level.push(c);
            }
        }
        // A new member is in a touched class (added, or brought by a union)
        // or re-canonicalized in a parent of one (a merged child); no other
        // class changed since the previous search.
        for &c in &level {
            self.update(egraph, c);
        }
        for steps in 1..=depth.min(FAR as usize - 1) {
            let mut next = Vec::new();
            for &c in &level {
                for p in egraph[c].parents() {
                    let p = egraph.find(p);
                    if self.near[usize::from(p)] == FAR {
                        self.near[usize::from(p)] = steps as u8;
                        self.near_set.push(p);
                        next.push(p);
                        if steps == 1 {
                            self.update(egraph, p);
                        }
                    }
                }
            }
            if next.is_empty() {
                break;
            }
            level = next;
        }
    }

    /// Copy the members of `class` again, flagging those it did not have at
    /// the previous search (all of them for a class that did not exist then).
    fn update(&mut self, egraph: &TraEGraph, class: Id) {
        let eclass = &egraph[class];
        if matches!(eclass.data, ClassData::Param(_)) {
            return;
        }
        let c = usize::from(class);
        let (old, flags) = (&self.members[c], &mut self.fresh[c]);
        flags.clear();
        // Both sorted: one merge.
        let mut j = 0;
        for n in &eclass.nodes {
            while j < old.len() && old[j] < *n {
                j += 1;
            }
            let fresh = old.get(j) != Some(n);
            if fresh {
                self.fresh_ops |= op_bit(n);
            }
            flags.push(fresh);
        }
        self.members[c].clone_from(&eclass.nodes);
        self.ops[c] = ops_of(&eclass.nodes);
        self.fresh_set.push(class);
    }

    /// The least number of parent steps from a touched class up to `class`,
    /// if within the depth [`Changes::prepare`] was given.
    pub fn near(&self, class: Id) -> Option<usize> {
        match self.near.get(usize::from(class)) {
            Some(&n) if n != FAR => Some(n as usize),
            _ => None,
        }
    }

    /// Whether a touched class lies at most `depth` child steps below `class`.
    fn reaches(&self, class: Id, depth: usize) -> bool {
        self.near.get(usize::from(class)).is_some_and(|&n| (n as usize) <= depth)
    }

    /// Whether `class` has a member with the operator of `op` (an [`op_bit`]).
    fn has_op(&self, class: Id, op: u16) -> bool {
        self.ops.get(usize::from(class)).is_some_and(|&o| o & op != 0)
    }

    fn touched(&self, class: Id) -> bool {
        self.near.get(usize::from(class)) == Some(&0)
    }

    /// Whether a search of `delta` can find a match at all: some new member
    /// has one of its operators, or some class's analysis data changed, or
    /// (`reads_members`) a class was touched. Otherwise every match it has
    /// was there at the previous search.
    pub fn may_match(&self, delta: &Delta, reads_members: bool) -> bool {
        self.fresh_ops & delta.ops != 0 || !self.data_set.is_empty() || (reads_members && !self.near_set.is_empty())
    }

    fn data_changed(&self, class: Id) -> bool {
        !self.data_set.is_empty() && self.data.get(usize::from(class)).copied().unwrap_or(false)
    }

    /// The members of a non-parameter class and whether each is new.
    fn members(&self, class: Id) -> (&[Ia], &[bool]) {
        let c = usize::from(class);
        match (self.members.get(c), self.fresh.get(c)) {
            (Some(m), Some(f)) => (m, f),
            _ => (&[], &[]),
        }
    }
}

/// One bit per operator, so that the operators of a class fit in a `u16`.
fn op_bit(n: &Ia) -> u16 {
    1 << match n {
        Ia::Join(_) => 0,
        Ia::Aggregate(_) => 1,
        Ia::Rekey(_) => 2,
        Ia::Filter(_) => 3,
        Ia::Transform(_) => 4,
        Ia::Tile(_) => 5,
        Ia::Concat(_) => 6,
        Ia::Erase(_) => 7,
        Ia::Input(_) => 8,
        Ia::Shuffle(_) => 9,
        Ia::Broadcast(_) => 10,
        Ia::LJoin(_) => 11,
        Ia::LAgg(_) => 12,
        Ia::LFilter(_) => 13,
        Ia::LMap(_) => 14,
        Ia::Param(_) => 15,
    }
}

/// The operators among `members`.
fn ops_of(members: &[Ia]) -> u16 {
    members.iter().fold(0, |a, n| a | op_bit(n))
}

/// A child of a pattern node.
#[derive(Debug, Clone, Copy)]
enum Child {
    /// Another pattern e-node, by step.
    Step(usize),
    /// The first occurrence of a variable (in the walk's order): binds it,
    /// by its index in [`Delta::vars`].
    Bind(usize),
    /// A later occurrence: the child must be the class bound.
    Same(usize),
    /// A parameter written in the pattern (`[0,2]`, `kernel:matAdd`), by its
    /// index in [`Delta::params`]: the child must be that parameter's class.
    Param(usize),
}

/// One operator e-node of a pattern, in pre-order from the root.
#[derive(Debug)]
struct Step {
    /// The pattern's e-node (its children are the pattern's, not classes).
    node: Ia,
    /// Its operator's [`op_bit`].
    op: u16,
    children: Vec<Child>,
    /// The depth of the pattern below this e-node.
    height: usize,
}

/// A pattern compiled for delta matching.
#[derive(Debug)]
pub struct Delta {
    steps: Vec<Step>,
    /// The parameters the pattern writes.
    params: Vec<Ia>,
    /// The pattern's variables, in the order the walk binds them.
    vars: Vec<Var>,
    /// The operators of all its steps ([`op_bit`]s).
    ops: u16,
    /// For each step `k`: the steps at or after `k` whose class is known
    /// before `k` is matched (their parent's member is chosen). Every step
    /// still to match lies below one of them.
    frontier: Vec<Vec<usize>>,
}

/// The state of one walk down the pattern (kept between root classes to
/// reuse its storage).
pub struct Walk {
    /// The class each step matches, once its parent's member is chosen.
    class: Vec<Id>,
    /// Whether a touched class lies within the pattern's depth below it.
    reach: Vec<bool>,
    /// The class bound to each variable.
    binds: Vec<Id>,
    /// The class of each of the pattern's parameters.
    params: Vec<Id>,
}

impl Delta {
    /// Compile `ast` (its root last, as egg stores it). `None` when its root
    /// is a variable or a parameter.
    pub fn new(ast: &PatternAst<Ia>) -> Option<Delta> {
        let nodes = ast.as_ref();
        let is_param = |i: usize| matches!(&nodes[i], ENodeOrVar::ENode(Ia::Param(_)));
        if !matches!(nodes.last(), Some(ENodeOrVar::ENode(_))) || is_param(nodes.len() - 1) {
            return None;
        }
        let mut height = vec![0usize; nodes.len()];
        for (i, n) in nodes.iter().enumerate() {
            if let ENodeOrVar::ENode(node) = n {
                height[i] = node.children().iter().map(|c| height[usize::from(*c)] + 1).max().unwrap_or(0);
            }
        }
        // Pre-order over the operator e-nodes, children in slot order; a
        // step's children are numbered when they are reached.
        let mut steps: Vec<Step> = Vec::new();
        let mut params: Vec<Ia> = Vec::new();
        let mut parent_of: Vec<Option<usize>> = Vec::new();
        let mut vars: Vec<Var> = Vec::new();
        // Steps are made in the walk's order, so a variable's first
        // occurrence here is where the walk binds it.
        let mut var_child = |v: Var| match vars.iter().position(|&w| w == v) {
            Some(i) => Child::Same(i),
            None => {
                vars.push(v);
                Child::Bind(vars.len() - 1)
            }
        };
        let mut stack: Vec<(usize, Option<(usize, usize)>)> = vec![(nodes.len() - 1, None)];
        while let Some((i, parent)) = stack.pop() {
            let ENodeOrVar::ENode(node) = &nodes[i] else { unreachable!("only operators are stacked") };
            let k = steps.len();
            if let Some((p, slot)) = parent {
                steps[p].children[slot] = Child::Step(k);
            }
            let children = node
                .children()
                .iter()
                .map(|c| match &nodes[usize::from(*c)] {
                    ENodeOrVar::Var(v) => var_child(*v),
                    ENodeOrVar::ENode(p @ Ia::Param(_)) => {
                        params.push(p.clone());
                        Child::Param(params.len() - 1)
                    }
                    ENodeOrVar::ENode(_) => Child::Step(usize::MAX),
                })
                .collect();
            steps.push(Step { node: node.clone(), op: op_bit(node), children, height: height[i] });
            parent_of.push(parent.map(|(p, _)| p));
            for (slot, c) in node.children().iter().enumerate().rev() {
                if matches!(&nodes[usize::from(*c)], ENodeOrVar::ENode(_)) && !is_param(usize::from(*c)) {
                    stack.push((usize::from(*c), Some((k, slot))));
                }
            }
        }
        let frontier = (0..steps.len())
            .map(|k| (k..steps.len()).filter(|&j| parent_of[j].is_none_or(|p| p < k)).collect())
            .collect();
        let ops = steps.iter().fold(0, |a, s| a | s.op);
        Some(Delta { steps, params, vars, ops, frontier })
    }

    /// The depth of the pattern (root 0), its variables and leaves included.
    pub fn depth(&self) -> usize {
        self.steps[0].height
    }

    /// The operator at the pattern's root: only classes with one can match.
    pub fn root_op(&self) -> <Ia as Language>::Discriminant {
        self.steps[0].node.discriminant()
    }

    /// Storage for [`Delta::search`], with the pattern's parameters found in
    /// `egraph`; `None` when one is not in it (then nothing matches).
    pub fn walk(&self, egraph: &TraEGraph) -> Option<Walk> {
        let params = self.params.iter().map(|p| egraph.lookup(p.clone())).collect::<Option<Vec<Id>>>()?;
        Some(Walk {
            class: vec![Id::from(0usize); self.steps.len()],
            reach: vec![false; self.steps.len()],
            binds: vec![Id::from(0usize); self.vars.len()],
            params,
        })
    }

    /// The matches rooted at `root` that use something in `changes`;
    /// `reads_members`: the rule's applier reads its bound classes' members,
    /// so a touched bound class is a change.
    pub fn search(&self, changes: &Changes, root: Id, reads_members: bool, walk: &mut Walk) -> Vec<Subst> {
        let mut out = Vec::new();
        walk.class[0] = root;
        walk.reach[0] = changes.reaches(root, self.steps[0].height);
        self.go(changes, reads_members, 0, false, walk, &mut out);
        out
    }

    fn go(
        &self,
        changes: &Changes,
        reads_members: bool,
        k: usize,
        changed: bool,
        walk: &mut Walk,
        out: &mut Vec<Subst>,
    ) {
        if k == self.steps.len() {
            if changed {
                let mut s = Subst::with_capacity(self.vars.len());
                for (&v, &c) in self.vars.iter().zip(&walk.binds) {
                    s.insert(v, c);
                }
                out.push(s);
            }
            return;
        }
        // Nothing changed matched so far: go on only if a change lies within
        // reach of a class still to visit.
        if !changed && !self.frontier[k].iter().any(|&j| walk.reach[j]) {
            return;
        }
        let class = walk.class[k];
        let changed = changed || changes.data_changed(class);
        let step = &self.steps[k];
        let (members, fresh) = changes.members(class);
        for (member, &is_fresh) in members.iter().zip(fresh) {
            if !step.node.matches(member) {
                continue;
            }
            let mut new = changed || is_fresh;
            let mut consistent = true;
            for (child, &c) in step.children.iter().zip(member.children()) {
                match *child {
                    Child::Step(j) => {
                        // A class without the child pattern's operator
                        // matches nothing there.
                        consistent &= changes.has_op(c, self.steps[j].op);
                        walk.class[j] = c;
                        walk.reach[j] = !new && changes.reaches(c, self.steps[j].height);
                    }
                    Child::Param(p) => consistent &= walk.params[p] == c,
                    Child::Bind(v) => {
                        new = new || changes.data_changed(c) || (reads_members && changes.touched(c));
                        walk.binds[v] = c;
                    }
                    Child::Same(v) => consistent &= walk.binds[v] == c,
                }
            }
            if consistent {
                self.go(changes, reads_members, k + 1, new, walk, out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::egraph::{add_program, TraAnalysis};
    use crate::program::Program;

    /// A matmul program's graph (TRA operators over two inputs), rebuilt.
    fn graph() -> (TraEGraph, Id) {
        let p = Program::from_json(
            r#"{"inputs": {"X": {"key_bounds": [2, 2], "array_bounds": [4, 4]},
                           "Y": {"key_bounds": [2, 2], "array_bounds": [4, 4]}},
                "nodes": {"XY": {"op": "join", "left": "X", "right": "Y", "left_keys": [1], "right_keys": [0], "kernel": "matMul"}},
                "outputs": ["XY"], "cluster": {"sites": 2}}"#,
        )
        .unwrap();
        let typed = crate::check::check_program(&p).unwrap();
        let mut eg = TraEGraph::new(TraAnalysis::new(2, p.inputs.clone()));
        add_program(&mut eg, &p, &typed.order);
        eg.rebuild();
        let name = eg.lookup(Ia::Param(crate::egraph::Param::Name("X".into()))).unwrap();
        let input = eg.lookup(Ia::Input(name)).unwrap();
        (eg, input)
    }

    fn matches(eg: &TraEGraph, changes: &Changes, pattern: &str, reads_members: bool) -> usize {
        let ast: PatternAst<Ia> = pattern.parse().unwrap();
        let delta = Delta::new(&ast).unwrap();
        let Some(mut walk) = delta.walk(eg) else { return 0 };
        let found = eg.classes().map(|c| delta.search(changes, c.id, reads_members, &mut walk).len()).sum();
        // The scheduler skips the search when `may_match` says no: it must
        // never say no where a match is found.
        assert!(found == 0 || changes.may_match(&delta, reads_members), "may_match missed a match of {pattern}");
        found
    }

    fn may_match(changes: &Changes, pattern: &str, reads_members: bool) -> bool {
        changes.may_match(&Delta::new(&pattern.parse().unwrap()).unwrap(), reads_members)
    }

    /// Only what changed since the previous search matches: a class that is
    /// new, a class whose analysis data changed, and (for a rule reading its
    /// bound classes' members) a touched bound class; nothing else.
    #[test]
    fn only_matches_through_a_change_are_found() {
        let (eg, input) = graph();
        let pattern = "(erase ?x)";
        let mut changes = Changes::default();
        // Every class new (no previous search): both inputs' erasures match.
        changes.prepare(&eg, Some((&eg.classes().map(|c| c.id).collect::<Vec<_>>(), &[])), 4);
        assert_eq!(matches(&eg, &changes, pattern, false), 2);
        // A parameter written in the pattern must be the child's class.
        assert_eq!(matches(&eg, &changes, "(input ?n)", false), 2);
        assert_eq!(matches(&eg, &changes, "(input X)", false), 1);
        assert_eq!(matches(&eg, &changes, "(input Z)", false), 0);
        assert!(may_match(&changes, pattern, false));
        // No new member is a concat: a concat pattern is not even searched.
        assert!(!may_match(&changes, "(concat ?p ?x)", false));
        // Nothing changed since: nothing matches, and nothing is searched.
        changes.prepare(&eg, Some((&[], &[])), 4);
        assert_eq!(matches(&eg, &changes, pattern, false), 0);
        assert!(!may_match(&changes, pattern, false));
        assert!(!may_match(&changes, pattern, true));
        // X's input class touched, same members, same data: still nothing,
        // unless the rule reads the members of `?x`.
        changes.prepare(&eg, Some((&[input], &[])), 4);
        assert_eq!(matches(&eg, &changes, pattern, false), 0);
        assert_eq!(matches(&eg, &changes, pattern, true), 1);
        assert!(!may_match(&changes, pattern, false));
        // X's input class has new data: its erasure matches again.
        changes.prepare(&eg, Some((&[input], &[input])), 4);
        assert_eq!(matches(&eg, &changes, pattern, false), 1);
    }
}
