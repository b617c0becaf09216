//! Shared test helpers: build a program's e-graph and run the rules over it
//! in phases (contraction orders alone, pruned; lowering alone; then every
//! other rule), as the optimizer does.
#![allow(dead_code)]

use egg::{Id, Pattern, Runner, Searcher, SimpleScheduler, StopReason, Subst};
use indexmap::IndexMap;
use std::collections::BTreeMap;
use std::time::Duration;
use tra_optimizer::check::check_program;
use tra_optimizer::egraph::{add_program, Ia, Param, TraAnalysis, TraEGraph};
use tra_optimizer::Program;

/// The state after a run.
pub struct Run {
    /// The e-graph.
    pub eg: TraEGraph,
    /// Output name → its (L) class.
    pub roots: IndexMap<String, Id>,
    /// egg rewrite name → applications that changed the graph (both phases).
    pub applied: BTreeMap<String, usize>,
    /// Why the lowering phase stopped.
    pub lower_stop: StopReason,
    /// Why the second phase stopped.
    pub stop: StopReason,
    /// Iterations of the second phase.
    pub iterations: usize,
}

impl Run {
    /// Applications of a rule (all its egg rewrites).
    pub fn fired(&self, rule: &str) -> usize {
        self.applied.iter().filter(|(n, _)| *n == rule || n.starts_with(&format!("{rule}/"))).map(|(_, c)| c).sum()
    }

    /// The class of output `name`, canonical.
    pub fn root(&self, name: &str) -> Id {
        self.eg.find(self.roots[name])
    }

    /// Matches of `pattern` in the class of output `name`.
    pub fn search_root(&self, name: &str, pattern: &str) -> Vec<Subst> {
        let p: Pattern<Ia> = pattern.parse().unwrap_or_else(|e| panic!("bad pattern {pattern}: {e}"));
        p.search_eclass(&self.eg, self.root(name)).map(|m| m.substs).unwrap_or_default()
    }

    /// Matches of `pattern` anywhere.
    pub fn search(&self, pattern: &str) -> Vec<Subst> {
        let p: Pattern<Ia> = pattern.parse().unwrap_or_else(|e| panic!("bad pattern {pattern}: {e}"));
        p.search(&self.eg).into_iter().flat_map(|m| m.substs).collect()
    }

    /// The parameter bound to `v`.
    pub fn param(&self, s: &Subst, v: &str) -> Param {
        tra_optimizer::egraph::nodes::leaf(&self.eg, s[v.parse().unwrap()]).cloned().expect("a parameter")
    }

    /// Total e-nodes.
    pub fn nodes(&self) -> usize {
        self.eg.total_number_of_nodes()
    }
}

fn runner(eg: TraEGraph, iters: usize) -> Runner<Ia, TraAnalysis> {
    Runner::new(eg.analysis.clone())
        .with_egraph(eg)
        .with_iter_limit(iters)
        .with_node_limit(200_000)
        .with_time_limit(Duration::from_secs(120))
        .with_scheduler(SimpleScheduler)
}

fn record(applied: &mut BTreeMap<String, usize>, r: &Runner<Ia, TraAnalysis>) {
    for it in &r.iterations {
        for (name, n) in &it.applied {
            *applied.entry(name.to_string()).or_default() += n;
        }
    }
}

/// Parse, check and load a program; run the lowering rules, then `rules`.
pub fn run_with(json: &str, rules: Vec<tra_optimizer::rule::RuleDef>, iters: usize) -> Run {
    let p = Program::from_json(json).unwrap_or_else(|e| panic!("bad test program: {e:?}"));
    let typed = check_program(&p).unwrap_or_else(|e| panic!("ill-typed test program: {e:?}"));
    let mut eg = TraEGraph::new(TraAnalysis::new(p.cluster().sites, p.inputs.clone()));
    let roots = add_program(&mut eg, &p, &typed.order);
    let mut applied = BTreeMap::new();
    // Contraction orders first, alone, then pruned, as the optimizer does.
    let (ordering, rules): (Vec<_>, Vec<_>) = rules.into_iter().partition(|r| r.ordering());
    let (eg, roots) = if ordering.is_empty() {
        (eg, roots)
    } else {
        let written = tra_optimizer::order::written(&eg);
        let r0 = runner(eg, 100).run(&tra_rules::rewrites(ordering));
        record(&mut applied, &r0);
        let fresh = TraAnalysis::new(p.cluster().sites, p.inputs.clone());
        let (eg, roots, _) = tra_optimizer::order::prune(&r0.egraph, &roots, &written, fresh);
        (eg, roots)
    };
    let lowering = tra_rules::rewrites(tra_rules::lowering());
    let r1 = runner(eg, 100).run(&lowering);
    record(&mut applied, &r1);
    let lower_stop = r1.stop_reason.clone().expect("stopped");
    let all = tra_rules::rewrites(rules);
    let r2 = runner(r1.egraph, iters).run(&all);
    record(&mut applied, &r2);
    let stop = r2.stop_reason.clone().expect("stopped");
    let iterations = r2.iterations.len();
    Run { eg: r2.egraph, roots, applied, lower_stop, stop, iterations }
}

/// [`run_with`] every rule, up to 100 iterations.
pub fn run(json: &str) -> Run {
    run_with(json, tra_rules::all(), 100)
}

/// True when the stop reason is saturation.
pub fn saturated(s: &StopReason) -> bool {
    matches!(s, StopReason::Saturated)
}

/// An input declaration.
pub fn input(keys: &[u32], blocks: &[u32], placement: &str) -> String {
    let p = if placement.is_empty() { String::new() } else { format!(r#", "placement": {placement}"#) };
    format!(r#"{{"key_bounds": {keys:?}, "array_bounds": {blocks:?}{p}}}"#)
}

/// A program from inputs, nodes (JSON object bodies) and outputs.
pub fn program(sites: usize, inputs: &[(&str, String)], nodes: &[(&str, &str)], outputs: &[&str]) -> String {
    let inputs: Vec<String> = inputs.iter().map(|(n, d)| format!(r#""{n}": {d}"#)).collect();
    let nodes: Vec<String> = nodes.iter().map(|(n, d)| format!(r#""{n}": {d}"#)).collect();
    let outputs: Vec<String> = outputs.iter().map(|o| format!(r#""{o}""#)).collect();
    format!(
        r#"{{"inputs": {{{}}}, "nodes": {{{}}}, "outputs": [{}], "cluster": {{"sites": {sites}}}}}"#,
        inputs.join(", "),
        nodes.join(", "),
        outputs.join(", ")
    )
}

/// The matmul `X·Y` as a two-node TRA program fragment named `{name}_j`, `{name}`.
pub fn matmul_nodes(name: &str, x: &str, y: &str) -> Vec<(String, String)> {
    vec![
        (
            format!("{name}_j"),
            format!(
                r#"{{"op": "join", "left": "{x}", "right": "{y}", "left_keys": [1], "right_keys": [0], "kernel": "matMul"}}"#
            ),
        ),
        (
            name.to_string(),
            format!(r#"{{"op": "aggregate", "input": "{name}_j", "group_by": [0, 2], "kernel": "matAdd"}}"#),
        ),
    ]
}

pub mod programs;
