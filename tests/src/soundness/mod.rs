//! The rule-soundness harness (execute both sides of every rewrite).
//!
//! For one rule and one generated instance (a small TRA program, its sites,
//! random input data and a random layout for inputs placed `any`):
//!
//! 1. build the program's e-graph and run the lowering rules, then (for a
//!    non-lowering rule) the lowering rules, the rule's helpers and the rule
//!    itself — the rule under test may be a mutant standing in for the real
//!    one;
//! 2. find every application of the rule: its rewrites are wrapped so that
//!    each application records the e-node it matched, which is paired with
//!    the e-node the rule built in that class (or, for a rule that unions the
//!    match with an existing class — `map-identity`, `R2-1`, `R2-4` — with
//!    other members of it); and every e-node the rule built (`origins`,
//!    canonicalised) is paired with other members of its class (preferably
//!    ones the program or another rule built);
//! 3. extract each member of a pair into a plan rooted at *that* e-node, its
//!    operands extracted from the graph (the cheapest executable plan of each
//!    operand class, [`choose`]), run both plans on the reference IA
//!    interpreter with explicit sites (a TRA root runs on its erased operands
//!    with the TRA interpreter), and compare: P classes exactly (sites
//!    included), L classes as bags after projecting the site away.
//!
//! Every compared pair is one *instance*. A failure names the rule, the seed,
//! the program and both plans. [`RuleSets::every_rule`] puts every rule under
//! test at once, as the optimizer runs them.
#![allow(clippy::result_large_err)]

pub mod coverage;
pub mod generators;
pub mod mutants;
pub mod workloads;

use crate::oracle::{bag_erase, eval_tra_node, is_tra, same_value, tra_op, RefOracle, Value};
use egg::{
    Applier, ENodeOrVar, Id, Language, Pattern, PatternAst, RecExpr, Rewrite, Runner, SimpleScheduler, Subst, Symbol,
};
use indexmap::IndexMap;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tra_executor::reference::{self, AnyLayout, Relation};
use tra_optimizer::check::check_program;
use tra_optimizer::cost::Weights;
use tra_optimizer::egraph::{add_program, set_current_rule, ExtractedPlan, Ia, TraAnalysis, TraEGraph};
use tra_optimizer::extract::{choose, Choice};
use tra_optimizer::rule::{RuleDef, TraRewrite};
use tra_optimizer::Program;

// ---------------------------------------------------------------------------
// Panics: caught, kept quiet, classified.

/// Run `f`, catching a panic without printing it (the caller reports it).
pub fn quietly<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    let r = tra_optimizer::rule_failure::catch_panic(true, f);
    set_current_rule("program");
    r
}

/// How a failure showed itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Caught {
    /// The two sides, executed, gave different values.
    ValueMismatch,
    /// One side could not be executed by the reference interpreter.
    ExecutionError,
    /// The value oracle of the analysis found two members of a class that disagree.
    Oracle,
    /// The analysis's merge assertion (types or placements differ).
    MergeAssertion,
    /// A typing assertion of the analysis (an ill-typed node, a wrong sort).
    Typing,
    /// Any other panic.
    OtherPanic,
}

impl Caught {
    fn of_panic(msg: &str) -> Caught {
        if msg.contains("value check:") {
            Caught::Oracle
        } else if msg.contains("merged") {
            Caught::MergeAssertion
        } else if msg.contains("ill-typed")
            || msg.contains("must be physical")
            || msg.contains("must be logical")
            || msg.contains("partial aggregate")
            || msg.contains("expected")
        {
            Caught::Typing
        } else {
            Caught::OtherPanic
        }
    }

    /// In words.
    pub fn words(self) -> &'static str {
        match self {
            Caught::ValueMismatch => "value mismatch when executing both sides",
            Caught::ExecutionError => "a side could not be executed",
            Caught::Oracle => "value oracle in the analysis",
            Caught::MergeAssertion => "merge assertion of the analysis (types or placements differ)",
            Caught::Typing => "typing assertion of the analysis",
            Caught::OtherPanic => "a panic",
        }
    }
}

/// A rule found unsound on one instance.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The rule.
    pub rule: String,
    /// The instance's seed.
    pub seed: u64,
    /// Sites.
    pub sites: usize,
    /// The program, as an s-expression.
    pub program: String,
    /// How it was caught.
    pub caught: Caught,
    /// What differed.
    pub message: String,
    /// The two plans compared (empty for a panic).
    pub plans: Option<(String, String)>,
    /// How to run this instance again.
    pub replay: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "rule {} is unsound: seed {}, {} sites ({})",
            self.rule,
            self.seed,
            self.sites,
            self.caught.words()
        )?;
        writeln!(f, "  {}", self.message)?;
        writeln!(f, "  program:\n    {}", self.program.replace('\n', "\n    "))?;
        if let Some((a, b)) = &self.plans {
            writeln!(f, "  plan rooted at the first e-node:\n    {a}")?;
            writeln!(f, "  plan rooted at the second e-node (same class):\n    {b}")?;
        }
        write!(f, "  replay: {}", self.replay)
    }
}

// ---------------------------------------------------------------------------
// Configuration.

/// How the harness runs.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// The analysis asserts that merged classes agree (the default).
    pub check_merges: bool,
    /// The value oracle runs in the analysis.
    pub oracle: bool,
    /// After saturation, the applications are executed and compared.
    pub execute: bool,
    /// Most pairs compared per instance.
    pub max_pairs: usize,
    /// Iterations per phase.
    pub iterations: usize,
    /// Most e-nodes.
    pub nodes: usize,
    /// What runs the plans of both sides.
    pub executor: Executor,
}

/// The executor both sides of an application run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Executor {
    /// The reference IA interpreter (`tra_executor::reference`).
    #[default]
    Reference,
    /// The thread runtime (`tra_executor::threads`, in `f64`).
    Threads,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            check_merges: true,
            oracle: false,
            execute: true,
            max_pairs: 24,
            iterations: 12,
            nodes: 6_000,
            executor: Executor::Reference,
        }
    }
}

/// One application of a rule under test: the rule, the matched
/// left-hand-side e-node (children canonical then) and the classes the
/// applier changed.
type Application = (&'static str, Ia, Vec<Id>);
type Log = Arc<Mutex<Vec<Application>>>;
/// The coverage cells each rule under test's pattern matched.
type CellLog = Arc<Mutex<BTreeMap<&'static str, BTreeSet<coverage::Cell>>>>;

/// The matched e-node of a pattern under a substitution.
fn matched_node(eg: &TraEGraph, ast: &PatternAst<Ia>, subst: &Subst) -> Option<Ia> {
    let mut ids: Vec<Id> = Vec::with_capacity(ast.as_ref().len());
    let mut last = None;
    for n in ast.as_ref() {
        match n {
            ENodeOrVar::Var(v) => ids.push(*subst.get(*v)?),
            ENodeOrVar::ENode(node) => {
                let mut node = node.clone().map_children(|c| ids[usize::from(c)]);
                let id = eg.lookup(&mut node)?;
                ids.push(id);
                last = Some(node);
            }
        }
    }
    last
}

/// Wraps the applier of a rewrite of a rule under test and records each
/// application that changed the graph, with the e-node it matched.
struct Recorder {
    rule: &'static str,
    inner: Arc<dyn Applier<Ia, TraAnalysis> + Send + Sync>,
    ast: PatternAst<Ia>,
    log: Log,
    cells: CellLog,
}

impl Applier<Ia, TraAnalysis> for Recorder {
    fn apply_one(
        &self,
        egraph: &mut TraEGraph,
        eclass: Id,
        subst: &Subst,
        searcher_ast: Option<&PatternAst<Ia>>,
        rule_name: Symbol,
    ) -> Vec<Id> {
        let lhs = matched_node(egraph, &self.ast, subst);
        let cells = coverage::cells(egraph, &self.ast, subst);
        self.cells.lock().expect("cells").entry(self.rule).or_default().extend(cells);
        let ids = self.inner.apply_one(egraph, eclass, subst, searcher_ast, rule_name);
        if let (Some(n), false) = (lhs, ids.is_empty()) {
            self.log.lock().expect("log").push((self.rule, n, ids.clone()));
        }
        ids
    }

    fn vars(&self) -> Vec<egg::Var> {
        self.inner.vars()
    }
}

fn recorded(rule: &'static str, rw: TraRewrite, log: &Log, cells: &CellLog) -> TraRewrite {
    match rw.searcher.get_pattern_ast().cloned() {
        Some(ast) => Rewrite::new(
            rw.name,
            Pattern::new(ast.clone()),
            Recorder { rule, inner: rw.applier.clone(), ast, log: log.clone(), cells: cells.clone() },
        )
        .unwrap_or_else(|e| panic!("{e}")),
        None => rw,
    }
}

/// The rewrites of one run (the lowering phase, then the second phase) and
/// the rules under test among them.
pub struct RuleSets {
    /// The rules under test.
    tested: Vec<&'static str>,
    lowering_only: bool,
    phase1: Vec<TraRewrite>,
    phase2: Vec<TraRewrite>,
    /// egg rewrite name → the rule under test it belongs to.
    own: HashMap<Symbol, &'static str>,
    /// Their applications in the current instance.
    log: Log,
    /// The coverage cells their patterns matched in the current instance.
    cells: CellLog,
}

impl RuleSets {
    /// `candidate` (the real rule or a mutant) under test, with its helpers
    /// (real rules, by name), in the optimizer's two phases: the lowering
    /// rules alone, then the lowering rules, the helpers and the candidate.
    pub fn new(candidate: RuleDef, helpers: &[&str]) -> RuleSets {
        let rule = candidate.name;
        let log: Log = Arc::default();
        let cells: CellLog = Arc::default();
        let own: HashMap<Symbol, &'static str> = candidate.rewrites.iter().map(|r| (r.name, rule)).collect();
        let lowering_only = candidate.lowering();
        let mut candidate = candidate;
        candidate.rewrites =
            std::mem::take(&mut candidate.rewrites).into_iter().map(|r| recorded(rule, r, &log, &cells)).collect();
        let mut lower: Vec<TraRewrite> = Vec::new();
        let mut candidate = Some(candidate);
        for r in tra_rules::lowering() {
            if r.name == rule {
                lower.extend(candidate.take().expect("once").rewrites);
            } else {
                lower.extend(r.rewrites);
            }
        }
        let mut phase2 = Vec::new();
        if let Some(c) = candidate {
            phase2.extend(lower.iter().cloned());
            for h in helpers {
                if *h != rule {
                    phase2.extend(tra_rules::by_name(h).unwrap_or_else(|| panic!("no rule named {h}")).rewrites);
                }
            }
            phase2.extend(c.rewrites);
        }
        RuleSets { tested: vec![rule], lowering_only, phase1: lower, phase2, own, log, cells }
    }

    /// Every registered rule under test at once, as the optimizer runs them.
    pub fn every_rule() -> RuleSets {
        let log: Log = Arc::default();
        let cells: CellLog = Arc::default();
        let mut own = HashMap::new();
        let mut tested = Vec::new();
        let (mut phase1, mut phase2) = (Vec::new(), Vec::new());
        for r in tra_rules::all() {
            tested.push(r.name);
            let lowering = r.lowering();
            for rw in r.rewrites {
                own.insert(rw.name, r.name);
                let rw = recorded(r.name, rw, &log, &cells);
                if lowering {
                    phase1.push(rw.clone());
                }
                phase2.push(rw);
            }
        }
        RuleSets { tested, lowering_only: false, phase1, phase2, own, log, cells }
    }

    /// The rules under test.
    pub fn tested(&self) -> &[&'static str] {
        &self.tested
    }
}

/// What one instance gave.
#[derive(Debug, Clone, Default)]
pub struct InstanceStats {
    /// Applications of the rule under test that changed the graph.
    pub fired: usize,
    /// Pairs of members compared.
    pub pairs: usize,
    /// The coverage cells its pattern matched ([`coverage`]).
    pub cells: BTreeSet<coverage::Cell>,
}

/// Random data for every input of a program (integers in [-3, 3]).
pub fn random_data(p: &Program, seed: u64) -> BTreeMap<String, Relation> {
    crate::random_inputs(p, seed.wrapping_mul(0x9e37_79b9))
}

fn saturate(eg: TraEGraph, rules: &[TraRewrite], opts: &Options, applied: &mut HashMap<Symbol, usize>) -> TraEGraph {
    let runner = Runner::<Ia, TraAnalysis, ()>::new(eg.analysis.clone())
        .with_egraph(eg)
        .with_iter_limit(opts.iterations)
        .with_node_limit(opts.nodes)
        .with_time_limit(Duration::from_secs(20))
        .with_scheduler(SimpleScheduler)
        .run(rules.iter());
    for it in &runner.iterations {
        for (name, n) in &it.applied {
            *applied.entry(*name).or_default() += n;
        }
    }
    let mut eg = runner.egraph;
    eg.rebuild();
    eg
}

// ---------------------------------------------------------------------------
// Plans rooted at an e-node.

fn build_class(
    eg: &TraEGraph,
    choice: &Choice,
    c: Id,
    expr: &mut RecExpr<Ia>,
    memo: &mut HashMap<Id, Id>,
) -> Option<Id> {
    let c = eg.find(c);
    if let Some(&i) = memo.get(&c) {
        return Some(i);
    }
    let node = choice.node(c)?.clone();
    let mut kids = Vec::with_capacity(node.children().len());
    for ch in node.children() {
        kids.push(build_class(eg, choice, *ch, expr, memo)?);
    }
    let mut it = kids.into_iter();
    let id = expr.add(node.map_children(|_| it.next().expect("child")));
    memo.insert(c, id);
    Some(id)
}

/// The expression of `node` with each operand class's chosen plan.
fn rooted(eg: &TraEGraph, choice: &Choice, node: &Ia) -> Option<(RecExpr<Ia>, Id)> {
    let mut expr = RecExpr::default();
    let mut memo = HashMap::new();
    let mut kids = Vec::new();
    for ch in node.children() {
        kids.push(build_class(eg, choice, *ch, &mut expr, &mut memo)?);
    }
    let mut it = kids.into_iter();
    let root = expr.add(node.clone().map_children(|_| it.next().expect("child")));
    Some((expr, root))
}

/// What a plan is evaluated with.
struct Ctx<'a> {
    program: &'a Program,
    sites: usize,
    data: &'a BTreeMap<String, Relation>,
    layout: AnyLayout,
    executor: Executor,
}

impl Ctx<'_> {
    /// Run the IA expression rooted at `root` (an `erase` root gives a bag).
    fn run_ia(&self, expr: &RecExpr<Ia>, root: Id) -> Result<Value, String> {
        let erased = matches!(expr[root], Ia::Erase(_));
        let mut roots = IndexMap::new();
        roots.insert("__out".to_string(), root);
        let plan = ExtractedPlan { expr: expr.clone(), roots, classes: vec![] }.to_plan(&self.program.inputs);
        let run = match self.executor {
            Executor::Reference => reference::eval_ia(&plan, self.sites, self.data, self.layout),
            Executor::Threads => tra_executor::threads::eval_ia(&plan, self.sites, self.data, self.layout),
        }
        .map_err(|e| e.to_string())?;
        let out = run.outputs.get("__out").ok_or("no output")?;
        Ok(if erased { Value::L(bag_erase(out)) } else { Value::P(out.clone()) })
    }

    /// The value of `node` with its operands' chosen plans, and the plan's text;
    /// `Ok(None)` when an operand has no executable plan.
    fn eval_rooted(&self, eg: &TraEGraph, choice: &Choice, node: &Ia) -> Result<Option<(String, Value)>, String> {
        let Some((expr, root)) = rooted(eg, choice, node) else { return Ok(None) };
        let text = expr.to_string();
        if !is_tra(node) {
            return self.run_ia(&expr, root).map(|v| Some((text, v)));
        }
        // A TRA node: its operands' plans run on the IA interpreter, erased,
        // then the operator on the TRA interpreter.
        let names = ["a", "b"];
        let (op, operands) = tra_op(eg, node, &names)?;
        let mut rels = Vec::new();
        for (i, c) in operands.iter().enumerate() {
            let mut e = RecExpr::default();
            let Some(r) = build_class(eg, choice, *c, &mut e, &mut HashMap::new()) else { return Ok(None) };
            let v = self.run_ia(&e, r)?;
            let bag = v.bag().ok_or("a TRA operand whose plan is physical")?;
            let rel = crate::oracle::bag_relation(bag)?;
            let (arity, shape) = match eg[*c].data.logical() {
                Some(l) => (l.rel.key_arity(), l.rel.array_bounds.clone()),
                None => return Err("a TRA operand that is not a logical class".into()),
            };
            rels.push((names[i], rel, arity, shape));
        }
        let out = eval_tra_node(op, &rels)?;
        Ok(Some((text, Value::L(crate::oracle::relation_bag(&out)))))
    }
}

/// Rank of a partner for an e-node built by the rule under test: the TRA
/// node or the program's own nodes first, then lowering, then other rules.
fn partner_rank(node: &Ia, origin: &str) -> u8 {
    if is_tra(node) || origin == "program" {
        0
    } else if origin.starts_with("lower-") {
        1
    } else {
        2
    }
}

/// Per rule under test: what one instance gave.
pub type Stats = BTreeMap<&'static str, InstanceStats>;

/// Run one instance: saturate, then compare every application of the rules
/// under test.
pub fn check_instance(sets: &RuleSets, program: &Program, seed: u64, opts: &Options) -> Result<Stats, Failure> {
    let sites = program.cluster().sites;
    let data = random_data(program, seed);
    let layout = AnyLayout::Seeded(seed ^ 0x5eed);
    let whole = if sets.tested.len() == 1 { sets.tested[0].to_string() } else { "(one of every rule)".to_string() };
    let fail = |rule: &str, caught: Caught, message: String, plans: Option<(String, String)>| Failure {
        rule: rule.to_string(),
        seed,
        sites,
        program: format!(
            "{}\ninputs: {}",
            program.to_sexpr(),
            serde_json::to_string(&program.inputs).unwrap_or_default()
        ),
        caught,
        message,
        plans,
        replay: format!("the instance of seed {seed}"),
    };
    let typed = check_program(program)
        .map_err(|e| fail(&whole, Caught::OtherPanic, format!("ill-typed program: {e}"), None))?;
    let mut applied: HashMap<Symbol, usize> = HashMap::new();
    sets.log.lock().expect("log").clear();
    sets.cells.lock().expect("cells").clear();
    let eg = quietly(|| {
        let mut analysis = if opts.oracle {
            let oracle = RefOracle::new(sites, data.clone(), layout);
            TraAnalysis::with_oracle(sites, program.inputs.clone(), Arc::new(oracle))
        } else {
            TraAnalysis::new(sites, program.inputs.clone())
        };
        analysis.check_merges = opts.check_merges;
        let mut eg = TraEGraph::new(analysis);
        add_program(&mut eg, program, &typed.order);
        let eg = saturate(eg, &sets.phase1, opts, &mut applied);
        if sets.lowering_only {
            eg
        } else {
            saturate(eg, &sets.phase2, opts, &mut applied)
        }
    })
    .map_err(|msg| {
        // The analysis names the rule that was applying.
        let rule =
            sets.tested.iter().find(|r| msg.contains(&format!("rule {r}"))).map_or(whole.clone(), |r| r.to_string());
        fail(&rule, Caught::of_panic(&msg), msg, None)
    })?;
    let debug = std::env::var("TRA_SOUNDNESS_DEBUG").is_ok();
    if debug {
        eprintln!("program ({sites} sites): {}\napplied: {applied:?}", program.to_sexpr());
    }
    let mut stats: Stats = sets.tested.iter().map(|r| (*r, InstanceStats::default())).collect();
    for (name, n) in &applied {
        if let Some(rule) = sets.own.get(name) {
            stats.entry(rule).or_default().fired += n;
        }
    }
    for (rule, cells) in std::mem::take(&mut *sets.cells.lock().expect("cells")) {
        stats.entry(rule).or_default().cells = cells;
    }
    if !opts.execute {
        return Ok(stats);
    }

    let ctx = Ctx { program, sites, data: &data, layout, executor: opts.executor };
    quietly(|| -> Result<(), Failure> {
        let mut origins: HashMap<Ia, &'static str> = HashMap::new();
        for (n, r) in &eg.analysis.origins {
            origins.entry(n.clone().map_children(|c| eg.find(c))).or_insert(r);
        }
        let origin = |n: &Ia| origins.get(n).copied().unwrap_or("?");
        let tested: HashSet<&str> = sets.tested.iter().copied().collect();
        let choice = choose(&eg, Weights { network: 1.0, compute: 0.0 }, &|_, _, _| true);
        let mut cache: HashMap<Ia, Result<Option<(String, Value)>, String>> = HashMap::new();
        let mut value = |n: &Ia| cache.entry(n.clone()).or_insert_with(|| ctx.eval_rooted(&eg, &choice, n)).clone();
        // The pairs to compare: for each application, the matched e-node and
        // the e-node the rule built in its class (or another member, when the
        // rule unioned it with an existing class); then every e-node a rule
        // under test built, with other members of its class (preferably ones
        // the program or another rule built).
        let partners = |class: Id, n: &Ia, rule: &str| -> Vec<Ia> {
            let members = &eg[class].nodes;
            let mut ps: Vec<&Ia> = members.iter().filter(|m| *m != n && origin(m) != rule).collect();
            ps.sort_by_key(|m| partner_rank(m, origin(m)));
            ps.truncate(2);
            if ps.is_empty() {
                ps = members.iter().filter(|m| *m != n).take(1).collect();
            }
            ps.into_iter().cloned().collect()
        };
        let mut candidates: Vec<(&'static str, Ia, Ia)> = Vec::new();
        let log = sets.log.lock().expect("log").clone();
        for (rule, lhs, rhs) in &log {
            let n = lhs.clone().map_children(|c| eg.find(c));
            let Some(class) = eg.lookup(n.clone()) else { continue };
            if !rhs.iter().any(|r| eg.find(*r) == class) {
                continue;
            }
            let built: Vec<Ia> =
                eg[class].nodes.iter().filter(|m| **m != n && origin(m) == *rule).take(2).cloned().collect();
            let others = if built.is_empty() { partners(class, &n, rule) } else { built };
            candidates.extend(others.into_iter().map(|m| (*rule, n.clone(), m)));
        }
        let mut classes: Vec<&egg::EClass<Ia, _>> = eg.classes().collect();
        classes.sort_by_key(|c| c.id);
        for class in classes {
            if class.data.param().is_some() {
                continue;
            }
            for n in &class.nodes {
                let rule = origin(n);
                if let Some(rule) = tested.get(rule) {
                    let rule: &'static str = sets.tested.iter().copied().find(|r| r == rule).expect("tested");
                    candidates.extend(partners(class.id, n, rule).into_iter().map(|m| (rule, n.clone(), m)));
                }
            }
        }
        let mut seen: HashSet<(Ia, Ia)> = HashSet::new();
        for (rule, n, m) in candidates {
            if n == m || stats[rule].pairs >= opts.max_pairs || seen.contains(&(n.clone(), m.clone())) {
                continue;
            }
            seen.insert((n.clone(), m.clone()));
            seen.insert((m.clone(), n.clone()));
            let class = eg.lookup(n.clone()).expect("a node of the graph");
            let (a, b) = match (value(&n), value(&m)) {
                (Ok(Some(a)), Ok(Some(b))) => (a, b),
                (Ok(None), _) | (_, Ok(None)) => continue,
                (Err(e), _) | (_, Err(e)) => {
                    let texts = (
                        rooted(&eg, &choice, &n).map(|x| x.0.to_string()).unwrap_or_default(),
                        rooted(&eg, &choice, &m).map(|x| x.0.to_string()).unwrap_or_default(),
                    );
                    return Err(fail(rule, Caught::ExecutionError, format!("cannot execute: {e}"), Some(texts)));
                }
            };
            assert_ne!(a.0, b.0, "harness bug: a plan compared with itself");
            if debug {
                eprintln!("compare [{rule}] (built by {} / by {}):\n  {}\n  {}", origin(&n), origin(&m), a.0, b.0);
            }
            if let Err(e) = same_value(&a.1, &b.1, sites) {
                let sort = if eg[class].data.phys().is_some() { "physical (P)" } else { "logical (L)" };
                return Err(fail(
                    rule,
                    Caught::ValueMismatch,
                    format!(
                        "a {sort} class holds two members whose values differ (e-nodes built by {} and by {}): {e}",
                        origin(&n),
                        origin(&m)
                    ),
                    Some((a.0, b.0)),
                ));
            }
            stats.get_mut(rule).expect("tested").pairs += 1;
        }
        Ok(())
    })
    .map_err(|msg| fail(&whole, Caught::of_panic(&msg), msg, None))??;
    Ok(stats)
}

/// The seed of instance `i` of a rule (stable for a given base seed).
pub fn instance_seed(base: u64, rule: &str, i: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ base;
    for b in rule.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// Totals over a rule's instances.
#[derive(Debug, Clone, Default)]
pub struct RuleReport {
    /// The rule.
    pub rule: String,
    /// Instances run (programs).
    pub programs: usize,
    /// Applications of the rule.
    pub fired: usize,
    /// Pairs compared.
    pub pairs: usize,
    /// The coverage cells its pattern matched ([`coverage`]).
    pub cells: BTreeSet<coverage::Cell>,
    /// The first failure, if any.
    pub failure: Option<Failure>,
}

/// Run `count` instances of a rule (real or mutant) from its generator;
/// stop at the first failure.
pub fn check_rule(candidate: &dyn Fn() -> RuleDef, name: &str, base: u64, count: u64, opts: &Options) -> RuleReport {
    let mut report = RuleReport { rule: name.to_string(), ..Default::default() };
    let Some(g) = generators::for_rule(name) else { return report };
    let sets = RuleSets::new(candidate(), g.helpers);
    for i in 0..count {
        let seed = instance_seed(base, name, i);
        match check_seed(&sets, g.gen, seed, opts) {
            Ok(mut s) => {
                let s = s.remove(name).unwrap_or_default();
                report.programs += 1;
                report.fired += s.fired;
                report.pairs += s.pairs;
                report.cells.extend(s.cells);
            }
            Err(mut f) => {
                f.replay = format!("TRA_SOUNDNESS_REPLAY={name}:{seed} cargo test -p tra-tests --test soundness");
                report.failure = Some(f);
                break;
            }
        }
    }
    report
}

/// One instance of a rule from its seed.
pub fn check_seed(sets: &RuleSets, gen: generators::GenFn, seed: u64, opts: &Options) -> Result<Stats, Failure> {
    use rand::SeedableRng;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let program = generators::generate(gen, &mut rng);
    check_instance(sets, &program, seed, opts)
}
