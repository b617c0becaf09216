//! How a rule is written: one [`Rule`] entry per rule, stating its name,
//! family, left- and right-hand side patterns, the condition as named
//! [`Cond`]itions, and why it is sound. The equation shown by `tra rules`
//! and in `README.md` is derived from the patterns, and the condition from
//! the conditions' names, so the text cannot drift from what runs.
//!
//! A right-hand side is a pattern, instantiated node by node with a type
//! check before each node is added ([`inst`]), so that a rule can never make
//! the analysis panic on an ill-typed node: a condition that fails, or a
//! node that does not type, just skips the match. Variables the left side
//! does not bind are computed by a binder ([`Rw::bind`]) and shown in the
//! equation by the text it gives them; a right-hand side no pattern can
//! express is built by a closure ([`Rw::apply`]), whose equation is then
//! written out. Every applier is [`Build`], wrapped in
//! [`tra_optimizer::rule::Named`] so that errors and bookkeeping name the
//! rule.
//!
//! The test crate writes its deliberately unsound mutants with the same
//! builder.

use egg::{Applier, ENodeOrVar, Id, Language, Pattern, PatternAst, Rewrite, Subst, Symbol, Var};
use std::sync::Arc;
use tra_optimizer::egraph::{add_typed, nodes, ClassData, Ia, LogicalType, MatchKey, Param, TraAnalysis, TraEGraph};
use tra_optimizer::kernel::KernelRef;
use tra_optimizer::keyexpr::{KeyFn, Predicate};
use tra_optimizer::rule::{Named, TraRewrite};
use tra_optimizer::types::PhysType;

pub use tra_optimizer::rule::{Family, Phase, RuleDef};

// ---------------------------------------------------------------------------
// Reading the analysis.

/// The parameter of a leaf class.
pub fn param(eg: &TraEGraph, id: Id) -> Option<&Param> {
    nodes::leaf(eg, id).ok()
}

/// A dim-list leaf.
pub fn dims(eg: &TraEGraph, id: Id) -> Option<&[usize]> {
    param(eg, id)?.as_dims().ok()
}

/// A kernel leaf (not `id`).
pub fn kernel(eg: &TraEGraph, id: Id) -> Option<&KernelRef> {
    param(eg, id)?.as_kernel().ok()
}

/// A key-expression leaf (not `id`).
pub fn key(eg: &TraEGraph, id: Id) -> Option<&KeyFn> {
    param(eg, id)?.as_key().ok()
}

/// A predicate leaf.
pub fn pred(eg: &TraEGraph, id: Id) -> Option<&Predicate> {
    param(eg, id)?.as_pred().ok()
}

/// True for the `id` leaf.
pub fn is_id_leaf(eg: &TraEGraph, id: Id) -> bool {
    param(eg, id).is_some_and(Param::is_id)
}

/// True when a local map's key leaf is the identity on keys of `arity`:
/// the `id` leaf, or a key expression `[k0, …, k{arity-1}]`.
pub fn is_identity_key(eg: &TraEGraph, id: Id, arity: usize) -> bool {
    param(eg, id).is_some_and(|p| p.is_identity_key(arity))
}

/// The physical type of a P class.
pub fn phys(eg: &TraEGraph, id: Id) -> Option<&PhysType> {
    eg[id].data.phys()
}

/// The logical type of an L class.
pub fn logical(eg: &TraEGraph, id: Id) -> Option<&LogicalType> {
    eg[id].data.logical()
}

/// A complete physical relation's type (None for a partial aggregate).
pub fn complete_phys(eg: &TraEGraph, id: Id) -> Option<&PhysType> {
    phys(eg, id).filter(|p| p.complete)
}

/// The key arity of a P or L class.
pub fn arity(eg: &TraEGraph, id: Id) -> Option<usize> {
    match &eg[id].data {
        ClassData::P(p) => Some(p.rel.key_arity()),
        ClassData::L(l) => Some(l.rel.key_arity()),
        ClassData::Param(_) => None,
    }
}

/// True when every element of `a` is in `b`.
pub fn subset(a: &[usize], b: &[usize]) -> bool {
    a.iter().all(|x| b.contains(x))
}

/// A pattern variable (rule text is static: a bad name is a bug of the rule).
pub fn var(name: &str) -> Var {
    name.parse().unwrap_or_else(|e| panic!("bad pattern variable `{name}`: {e}"))
}

/// Several pattern variables, parsed once (outside the closures that read
/// them): `let [x, y] = vars(["?x", "?y"]);`.
pub fn vars<const N: usize>(names: [&str; N]) -> [Var; N] {
    names.map(var)
}

/// A pattern (rule text is static: a parse error is a bug of the rule).
pub fn pat(src: &str) -> Pattern<Ia> {
    src.parse().unwrap_or_else(|e| panic!("bad pattern `{src}`: {e}"))
}

// ---------------------------------------------------------------------------
// Building right-hand sides.

/// Add a parameter leaf (always well-typed).
pub fn leaf(eg: &mut TraEGraph, p: Param) -> Id {
    eg.add(Ia::Param(p))
}

/// Add `node` (children already in the graph) if it type-checks; its class
/// otherwise. `None` when it is ill-typed: the caller skips the match.
pub fn add_checked(eg: &mut TraEGraph, node: Ia) -> Option<Id> {
    add_typed(eg, node).ok()
}

/// Instantiate a right-hand side pattern with `subst`, type-checking every
/// node before it is added; `None` (nothing more added) at the first node
/// that does not type. Variables the substitution lacks also give `None`.
pub fn inst(eg: &mut TraEGraph, ast: &PatternAst<Ia>, subst: &Subst) -> Option<Id> {
    let nodes = ast.as_ref();
    let mut ids: smallvec::SmallVec<[Id; 16]> = smallvec::SmallVec::with_capacity(nodes.len());
    for n in nodes {
        let id = match n {
            ENodeOrVar::Var(v) => *subst.get(*v)?,
            ENodeOrVar::ENode(node) => {
                let node = node.clone().map_children(|c| ids[usize::from(c)]);
                add_checked(eg, node)?
            }
        };
        ids.push(id);
    }
    ids.last().copied()
}

/// What a binder gives a right-hand side variable.
#[derive(Debug, Clone)]
pub enum Bound {
    /// A new parameter leaf.
    Leaf(Param),
    /// A class already in the graph.
    Class(Id),
}

/// `subst` extended with parameter leaves bound to new variables.
pub fn extend(eg: &mut TraEGraph, subst: &Subst, binds: Vec<(Var, Bound)>) -> Subst {
    let mut s = subst.clone();
    for (v, b) in binds {
        let id = match b {
            Bound::Leaf(p) => leaf(eg, p),
            Bound::Class(id) => id,
        };
        s.insert(v, id);
    }
    s
}

/// Why merging two classes with these analysis values would make the
/// analysis panic, if it would (the analysis's own test).
pub use tra_optimizer::egraph::conflict;

// ---------------------------------------------------------------------------
// The applier.

/// What to do when a right-hand side's type disagrees with the matched
/// class's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guard {
    /// Union anyway: the analysis's `merge` panics, naming the rule. For rules
    /// whose two sides are typed by the same functions, a disagreement can
    /// only be an unsound rule, and must be loud.
    Strict,
    /// Skip the match. For rules whose two sides reach the same relation
    /// through different typing functions that may describe it differently
    /// (a join keeps its operands' frontiers, a filter or key map recomputes
    /// the frontier from the keys left; two descriptions of one hash
    /// placement): the values are equal, the descriptions are not, and a
    /// skipped union is always sound.
    SkipMismatch,
}

type BuildFn = dyn Fn(&mut TraEGraph, Id, &Subst) -> Vec<(Id, Id)> + Send + Sync;

/// An applier that runs a closure building zero or more right-hand sides
/// (with [`inst`] / [`add_checked`], after checking the rule's condition on
/// the class analysis), each paired with the class it equals (usually the
/// matched class), then unions each pair. A match it built something for is
/// not applied again.
#[derive(Clone)]
pub struct Build {
    guard: Guard,
    /// The left-hand side's variables, in order: a match's key.
    vars: Vec<Var>,
    /// The rule's named conditions (read only the class analysis).
    holds: Option<Arc<Test>>,
    /// Whether `f` building nothing depends only on the analysis data of the
    /// matched class and the substitution's classes (then the match is
    /// remembered as turned down, like one whose condition fails).
    data_only: bool,
    /// The name a match is remembered under when several rewrites state one
    /// equality from each of its sides ([`Rw::same_equality_as`]); else the
    /// rewrite's own egg name.
    key_name: Option<Symbol>,
    f: Arc<BuildFn>,
}

impl Build {
    /// Whether this match was turned down on the same analysis data before.
    fn rejected_before(egraph: &mut TraEGraph, key: &MatchKey) -> bool {
        let a = &mut egraph.analysis;
        if a.rejected_epoch != a.data_epoch {
            a.rejected.clear();
            a.rejected_epoch = a.data_epoch;
        }
        a.rejected.contains(key)
    }
}

impl Applier<Ia, TraAnalysis> for Build {
    fn apply_one(
        &self,
        egraph: &mut TraEGraph,
        eclass: Id,
        subst: &Subst,
        _searcher_ast: Option<&PatternAst<Ia>>,
        rule_name: Symbol,
    ) -> Vec<Id> {
        // Canonical now: a union earlier in this iteration may already have
        // made this match one applied before.
        let mut ids = smallvec::SmallVec::with_capacity(self.vars.len());
        for v in &self.vars {
            if let Some(&i) = subst.get(*v) {
                ids.push(egraph.find(i));
            }
        }
        let key: MatchKey = (self.key_name.unwrap_or(rule_name), egraph.find(eclass), ids);
        if egraph.analysis.applied.contains(&key) || Build::rejected_before(egraph, &key) {
            return Vec::new();
        }
        if self.holds.as_ref().is_some_and(|holds| !holds(egraph, eclass, subst)) {
            egraph.analysis.rejected.insert(key);
            return Vec::new();
        }
        let built = (self.f)(egraph, eclass, subst);
        if !built.is_empty() {
            egraph.analysis.applied.insert(key);
        } else if self.data_only {
            egraph.analysis.rejected.insert(key);
        }
        let mut changed = Vec::new();
        for (class, rhs) in built {
            if self.guard == Guard::SkipMismatch && conflict(&egraph[class].data, &egraph[rhs].data).is_some() {
                continue;
            }
            if egraph.union(class, rhs) {
                changed.push(rhs);
            }
        }
        changed
    }
}

/// One egg rewrite: `lhs` searched, `f` gives the pairs of classes to union
/// (usually the matched class and a right-hand side), the applier wrapped in
/// [`Named`] so that errors and bookkeeping name `rule`.
pub fn rewrite_pairs(
    rule: &'static str,
    egg_name: &str,
    lhs: &Pattern<Ia>,
    guard: Guard,
    f: impl Fn(&mut TraEGraph, Id, &Subst) -> Vec<(Id, Id)> + Send + Sync + 'static,
) -> TraRewrite {
    rewrite_built(
        rule,
        egg_name,
        lhs,
        Build { guard, vars: Vec::new(), holds: None, data_only: false, key_name: None, f: Arc::new(f) },
    )
}

fn rewrite_built(rule: &'static str, egg_name: &str, lhs: &Pattern<Ia>, build: Build) -> TraRewrite {
    let build = Build { vars: lhs.vars(), ..build };
    Rewrite::new(egg_name, lhs.clone(), Named { rule, inner: build }).unwrap_or_else(|e| panic!("rule {egg_name}: {e}"))
}

// ---------------------------------------------------------------------------
// Conditions.

type Test = dyn Fn(&TraEGraph, Id, &Subst) -> bool + Send + Sync;

/// A named condition on a match: its text (what `tra rules` shows) and the
/// test, which reads only the class analysis. Conditions are made by the
/// functions of [`crate::cond`], which parse their pattern variables once.
#[derive(Clone)]
pub struct Cond {
    text: String,
    test: Arc<Test>,
}

impl Cond {
    /// A condition named `text`; `test` gets the graph, the matched class
    /// and the match.
    pub fn new(text: impl Into<String>, test: impl Fn(&TraEGraph, Id, &Subst) -> bool + Send + Sync + 'static) -> Self {
        Cond { text: text.into(), test: Arc::new(test) }
    }

    /// What it says, in words.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Whether it holds for this match.
    pub fn holds(&self, eg: &TraEGraph, class: Id, subst: &Subst) -> bool {
        (self.test)(eg, class, subst)
    }
}

impl std::fmt::Debug for Cond {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Cond({})", self.text)
    }
}

// ---------------------------------------------------------------------------
// The rule table.

type BindFn = dyn Fn(&TraEGraph, Id, &Subst) -> Option<Vec<Bound>> + Send + Sync;
type ApplyFn = dyn Fn(&mut TraEGraph, Id, &Subst) -> Vec<(Id, Id)> + Send + Sync;

/// A binder: the variables it binds, each with the text the equation shows
/// for it, and the function computing their values.
#[derive(Clone)]
struct Binder {
    shown: Vec<(Var, &'static str)>,
    f: Arc<BindFn>,
}

#[derive(Clone)]
enum Rhs {
    /// Patterns, each equal to the matched class; variables the left side
    /// does not bind come from the binder.
    Patterns { pats: Vec<Pattern<Ia>>, bind: Option<Binder> },
    /// A closure building the pairs to union; `shown` is its equation's
    /// right-hand side.
    Apply { shown: &'static str, f: Arc<ApplyFn> },
}

/// One egg rewrite of a rule: a left-hand side, what it equals, and the
/// conditions under which it applies.
#[derive(Clone)]
pub struct Rw {
    variant: Option<&'static str>,
    lhs: Pattern<Ia>,
    rhs: Rhs,
    when: Vec<Cond>,
    computed_condition: Option<&'static str>,
    listed: bool,
    both_ways: bool,
    reads_members: bool,
    equality: Option<&'static str>,
}

/// A rewrite `lhs = rhs` (patterns).
pub fn rw(lhs: &str, rhs: &str) -> Rw {
    Rw::new(lhs, Rhs::Patterns { pats: vec![pat(rhs)], bind: None })
}

impl Rw {
    fn new(lhs: &str, rhs: Rhs) -> Rw {
        Rw {
            variant: None,
            lhs: pat(lhs),
            rhs,
            when: Vec::new(),
            computed_condition: None,
            listed: true,
            both_ways: false,
            reads_members: false,
            equality: None,
        }
    }

    /// A rewrite whose right-hand sides are built by `f` (each equal to the
    /// matched class); `shown` is the right-hand side written in the
    /// equation. `f` checks what the named conditions cannot, and gives
    /// nothing when it does not hold.
    pub fn apply(
        lhs: &str,
        shown: &'static str,
        f: impl Fn(&mut TraEGraph, Id, &Subst) -> Vec<Id> + Send + Sync + 'static,
    ) -> Rw {
        Rw::apply_pairs(lhs, shown, move |eg, id, s| f(eg, id, s).into_iter().map(|r| (id, r)).collect())
    }

    /// Like [`Rw::apply`], for equalities that are not with the matched
    /// class itself: `f` gives the pairs of classes to union.
    pub fn apply_pairs(
        lhs: &str,
        shown: &'static str,
        f: impl Fn(&mut TraEGraph, Id, &Subst) -> Vec<(Id, Id)> + Send + Sync + 'static,
    ) -> Rw {
        Rw::new(lhs, Rhs::Apply { shown, f: Arc::new(f) })
    }

    /// Also equal to `rhs` (another pattern, built for the same match).
    pub fn or(mut self, rhs: &str) -> Rw {
        match &mut self.rhs {
            Rhs::Patterns { pats, .. } => pats.push(pat(rhs)),
            Rhs::Apply { .. } => panic!("`or` on a computed right-hand side"),
        }
        self
    }

    /// Name the variant: its egg rewrite is `RULE/variant`.
    pub fn named(mut self, variant: &'static str) -> Rw {
        self.variant = Some(variant);
        self
    }

    /// Applies only when `cond` holds (all conditions are checked, in order).
    pub fn when(mut self, cond: Cond) -> Rw {
        self.when.push(cond);
        self
    }

    /// The part of the condition that the binder or the applier checks (it
    /// is computed with the right-hand side), in words.
    pub fn checks(mut self, text: &'static str) -> Rw {
        self.computed_condition = Some(text);
        self
    }

    /// Right-hand side variables the left side does not bind, computed by
    /// `f` (in the order of `vars`; `None` skips the match); each is shown in
    /// the equation as its text, e.g. `("?c", "p1&&p2")`.
    pub fn bind(
        mut self,
        vars: &[(&str, &'static str)],
        f: impl Fn(&TraEGraph, Id, &Subst) -> Option<Vec<Bound>> + Send + Sync + 'static,
    ) -> Rw {
        let shown = vars.iter().map(|(v, t)| (var(v), *t)).collect();
        match &mut self.rhs {
            Rhs::Patterns { bind, .. } => *bind = Some(Binder { shown, f: Arc::new(f) }),
            Rhs::Apply { .. } => panic!("`bind` on a computed right-hand side"),
        }
        self
    }

    /// Also applied right to left (same conditions): two egg rewrites,
    /// `RULE/variant-down` (as written) and `RULE/variant-up`.
    pub fn both_ways(mut self) -> Rw {
        self.both_ways = true;
        self
    }

    /// Its binder reads the members of classes (not only the class
    /// analysis), so a match it turns down may succeed once the graph has
    /// grown: such matches are tried again each iteration.
    pub fn reads_members(mut self) -> Rw {
        self.reads_members = true;
        self
    }

    /// One of several rewrites that state one equality of forms, each from
    /// one of its sides (`A = B = C`: from `A` build `B` and `C`, from `B`
    /// build `A` and `C`, …), all with the same variables in the same order:
    /// a match applied by one of them, at a class and with the same classes
    /// bound, has added every form, so the others skip it instead of building
    /// the forms again. `group` names the equality (the same for each).
    pub fn same_equality_as(mut self, group: &'static str) -> Rw {
        self.equality = Some(group);
        self
    }

    /// Not listed in the equation: it states an equation already listed (the
    /// other direction, or the same equality from another side).
    pub fn unlisted(mut self) -> Rw {
        self.listed = false;
        self
    }

    fn shown_rhs(&self) -> Vec<String> {
        match &self.rhs {
            Rhs::Patterns { pats, bind } => {
                let subs: &[(Var, &'static str)] = bind.as_ref().map_or(&[], |b| &b.shown);
                pats.iter().map(|p| show(p, subs)).collect()
            }
            Rhs::Apply { shown, .. } => vec![shown.to_string()],
        }
    }

    fn equation(&self) -> String {
        let mut sides = vec![show(&self.lhs, &[])];
        sides.extend(self.shown_rhs());
        let eq = sides.join(" = ");
        if self.both_ways {
            format!("{eq} (both ways)")
        } else {
            eq
        }
    }

    fn condition(&self) -> String {
        let mut parts: Vec<String> = self.when.iter().map(|c| c.text().to_string()).collect();
        parts.extend(self.computed_condition.map(str::to_string));
        if parts.is_empty() {
            "none".to_string()
        } else {
            parts.join("; ")
        }
    }

    fn rewrites(self, rule: &'static str, guard: Guard) -> Vec<TraRewrite> {
        let egg_name = |suffix: &str| match (self.variant, suffix) {
            (None, "") => rule.to_string(),
            (None, s) => format!("{rule}/{s}"),
            (Some(v), "") => format!("{rule}/{v}"),
            (Some(v), s) => format!("{rule}/{v}-{s}"),
        };
        let when = Arc::new(self.when);
        let holds = move |eg: &TraEGraph, id: Id, s: &Subst| when.iter().all(|c| c.holds(eg, id, s));
        let reads_members = self.reads_members;
        let key_name = self.equality.map(|g| Symbol::from(format!("{rule}/={g}")));
        let build = |lhs: &Pattern<Ia>, name: String, rhs: Rhs, holds: Arc<Test>| -> TraRewrite {
            let holds = Some(holds);
            match rhs {
                Rhs::Patterns { pats, bind } => {
                    let asts: Vec<PatternAst<Ia>> = pats.into_iter().map(|p| p.ast).collect();
                    // Instantiating patterns fails only on types; a binder
                    // reads the class analysis unless it says otherwise.
                    let data_only = !reads_members;
                    let f = move |eg: &mut TraEGraph, id: Id, s: &Subst| {
                        let extended;
                        let s = match &bind {
                            None => s,
                            Some(b) => {
                                let Some(values) = (b.f)(eg, id, s) else { return vec![] };
                                extended = extend(eg, s, b.shown.iter().map(|(v, _)| *v).zip(values).collect());
                                &extended
                            }
                        };
                        asts.iter().filter_map(|a| inst(eg, a, s)).map(|r| (id, r)).collect()
                    };
                    rewrite_built(
                        rule,
                        &name,
                        lhs,
                        Build { guard, vars: Vec::new(), holds, data_only, key_name, f: Arc::new(f) },
                    )
                }
                // A computed right-hand side may read the graph: only its
                // failed conditions are remembered.
                Rhs::Apply { f, .. } => rewrite_built(
                    rule,
                    &name,
                    lhs,
                    Build { guard, vars: Vec::new(), holds, data_only: false, key_name, f },
                ),
            }
        };
        let holds: Arc<Test> = Arc::new(holds);
        if !self.both_ways {
            return vec![build(&self.lhs, egg_name(""), self.rhs, holds)];
        }
        let Rhs::Patterns { pats, bind: None } = &self.rhs else {
            panic!("rule {rule}: `both_ways` needs one pattern on each side and no binder")
        };
        let [rhs] = &pats[..] else { panic!("rule {rule}: `both_ways` needs one right-hand side") };
        let back = Rhs::Patterns { pats: vec![self.lhs.clone()], bind: None };
        vec![
            build(&self.lhs, egg_name("down"), self.rhs.clone(), holds.clone()),
            build(rhs, egg_name("up"), back, holds),
        ]
    }
}

/// A pattern as written in an equation: `?v` replaced by its binder text.
fn show(p: &Pattern<Ia>, subs: &[(Var, &'static str)]) -> String {
    let text = p.ast.to_string();
    if subs.is_empty() {
        return text;
    }
    let mut out = String::with_capacity(text.len());
    let mut token = String::new();
    let flush = |token: &mut String, out: &mut String| {
        match subs.iter().find(|(v, _)| v.to_string() == *token) {
            Some((_, t)) => out.push_str(t),
            None => out.push_str(token),
        }
        token.clear();
    };
    for c in text.chars() {
        if c == ' ' || c == '(' || c == ')' {
            flush(&mut token, &mut out);
            out.push(c);
        } else {
            token.push(c);
        }
    }
    flush(&mut token, &mut out);
    out
}

/// A rule entry: name, family, why, and its rewrites.
#[derive(Clone)]
pub struct Rule {
    name: &'static str,
    family: Family,
    why: &'static str,
    guard: Guard,
    rws: Vec<Rw>,
}

impl Rule {
    /// The rule named `name` (as the paper names it) of `family`.
    pub fn new(name: &'static str, family: Family) -> Rule {
        Rule { name, family, why: "", guard: Guard::Strict, rws: Vec::new() }
    }

    /// Why it is sound, in one line.
    pub fn why(mut self, why: &'static str) -> Rule {
        self.why = why;
        self
    }

    /// A disagreement between the types of the two sides skips the union
    /// instead of panicking ([`Guard::SkipMismatch`]).
    pub fn skip_mismatch(mut self) -> Rule {
        self.guard = Guard::SkipMismatch;
        self
    }

    /// One rewrite (a direction or variant) of the rule.
    pub fn rw(mut self, rw: Rw) -> Rule {
        self.rws.push(rw);
        self
    }

    /// The equation: the listed rewrites' equations.
    pub fn equation(&self) -> String {
        let eqs: Vec<String> = self.rws.iter().filter(|r| r.listed).map(Rw::equation).collect();
        eqs.join("; ")
    }

    /// The condition: the rewrites' named conditions, per variant where they
    /// differ.
    pub fn condition(&self) -> String {
        let conds: Vec<(Option<&str>, String)> = self.rws.iter().map(|r| (r.variant, r.condition())).collect();
        if conds.windows(2).all(|w| w[0].1 == w[1].1) {
            return conds.first().map_or_else(|| "none".to_string(), |c| c.1.clone());
        }
        let mut parts: Vec<String> = Vec::new();
        for (v, c) in conds {
            let part = format!("{}: {c}", v.unwrap_or("otherwise"));
            if !parts.contains(&part) {
                parts.push(part);
            }
        }
        parts.join("; ")
    }

    /// The rule, ready for the optimizer.
    pub fn build(self) -> RuleDef {
        let (equation, condition) = (self.equation(), self.condition());
        let (name, guard) = (self.name, self.guard);
        assert!(!self.why.is_empty(), "rule {name}: no `why`");
        let reads_members = self.rws.iter().any(|r| r.reads_members);
        for r in self.rws.iter().filter(|r| r.equality.is_some()) {
            let forms = |r: &Rw| -> Option<(Vec<Var>, Vec<String>)> {
                let Rhs::Patterns { pats, bind: None } = &r.rhs else { return None };
                let mut forms: Vec<String> = pats.iter().chain([&r.lhs]).map(|p| p.ast.to_string()).collect();
                forms.sort();
                (r.when.is_empty() && !r.both_ways && !r.reads_members).then(|| (r.lhs.vars(), forms))
            };
            let mine = forms(r);
            assert!(mine.is_some(), "rule {name}: `same_equality_as` needs patterns, no condition and no binder");
            for other in self.rws.iter().filter(|o| o.equality == r.equality) {
                assert!(forms(other) == mine, "rule {name}: the rewrites of equality {:?} state different forms or bind variables in another order", r.equality);
            }
        }
        RuleDef {
            reads_members,
            name,
            family: self.family,
            equation,
            condition,
            why: self.why,
            rewrites: self.rws.into_iter().flat_map(|r| r.rewrites(name, guard)).collect(),
        }
    }
}
