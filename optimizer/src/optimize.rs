//! The optimizer: build the e-graph of a TRA program, saturate it with the
//! rules (lowering first, then everything), extract the cheapest plan and the
//! best plan of each distinct strategy, and report how it went.
//! A rule that breaks an invariant of the e-graph fails [`optimize`];
//! [`optimize_with`] can retry without it ([`crate::rule_failure`]).

use crate::check::check_program;
use crate::check::TypedProgram;
use crate::cost::Weights;
use crate::egraph::{
    add_program, current_rule, set_current_rule, start_iteration, take_merge_failure, ExtractedPlan, Ia, Param,
    TraAnalysis, TraEGraph,
};
use crate::error::{ErrorCode, ProgramError};
use crate::extract::{choose_among, plan_cost, NoPlan, NodeCosts};
use crate::loads::{total_per_site, with_writes, LoadCache, SiteLoad};
use crate::order::Pruned;
use crate::program::{Plan, Program};
use crate::rule::RuleDef;
use crate::rule_failure::{self, catch_panic, AttemptError, RuleFailure};
pub use crate::rule_failure::{OnRuleFailure, Warning};
use crate::schedule::IncrementalScheduler;
pub use crate::schedule::Search;
use crate::time::{plan_seconds, Bottleneck, CostModel, Profile};
use crate::types::{Placement, ENUMERATION_LIMIT};
use egg::{Id, Language, Runner, StopReason};
use indexmap::IndexMap;
use serde::Serialize;
use std::time::{Duration, Instant};

/// Limits on saturation.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Most e-nodes.
    pub nodes: usize,
    /// Most iterations (per phase). Lowering rewrites one level of
    /// operators per iteration, so it may run as many iterations as the
    /// program is deep (plus the inputs' level and a round to see it
    /// saturated) when that is more.
    pub iterations: usize,
    /// Most wall time for saturation (both phases together).
    pub time: Duration,
    /// How each iteration finds matches (a setting, not a limit: full
    /// search is the reference the incremental one is tested against).
    pub search: Search,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { nodes: 200_000, iterations: 100, time: Duration::from_secs(10), search: Search::Incremental }
    }
}

/// How a local join gets its operands together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JoinStrategy {
    /// The left operand is broadcast.
    BroadcastLeft,
    /// The right operand is broadcast.
    BroadcastRight,
    /// Both operands are replicated (one site, or both broadcast).
    BroadcastBoth,
    /// Both operands shuffled (or placed) on the join keys.
    CoPartitioned,
    /// Operands replicated by a key map and shuffled on several dims (3D).
    Replicated,
}

/// The cost of a plan, as the API reports it: the network model's figures,
/// the predicted time, and the figure the chosen model minimized.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanCost {
    /// Floats delivered by shuffles and broadcasts (the paper's count).
    pub network_floats: u64,
    /// Floating-point operations of the kernels.
    pub flops: u64,
    /// The value the chosen cost model minimized: `α·network_floats +
    /// β·flops` under `network`, `seconds` under `time`.
    pub total: f64,
    /// Predicted seconds under the cluster's profile ([`crate::time`]).
    pub seconds: f64,
    /// The stage, site and resource that bound `seconds` (none for a plan
    /// without operators).
    pub bottleneck: Option<Bottleneck>,
}

impl PlanCost {
    /// Order of plans: the minimized figure, then flops, then network floats.
    pub fn key(&self) -> (f64, u64, u64) {
        (self.total, self.flops, self.network_floats)
    }

    /// The additive part: network floats, flops and the minimized figure.
    pub fn additive(&self) -> crate::cost::Cost {
        crate::cost::Cost { network_floats: self.network_floats, flops: self.flops, total: self.total, operators: 0 }
    }
}

/// One alternative plan.
#[derive(Debug, Clone, Serialize)]
pub struct Alternative {
    /// What the strategy is, in words.
    pub label: String,
    /// The join strategies of the plan, in plan order.
    pub strategy: Vec<JoinStrategy>,
    /// The plan.
    pub plan: Plan,
    /// Its cost.
    pub cost: PlanCost,
    /// The rule that built each operator of the plan, by operator name.
    pub built_by: IndexMap<String, String>,
    /// Each site's load over the whole plan (index = site), as the
    /// answer's `site_loads` for the chosen plan: where this plan's work lands.
    pub site_loads: Vec<SiteLoad>,
}

/// Figures about the run.
#[derive(Debug, Clone, Serialize)]
pub struct Stats {
    /// E-nodes at the end.
    pub egraph_nodes: usize,
    /// E-classes at the end.
    pub egraph_classes: usize,
    /// Iterations of all phases.
    pub iterations: usize,
    /// TRA operators the contraction-order phase built (every bracketing of
    /// every chain of products; 0 without order rules).
    pub order_nodes_explored: usize,
    /// TRA operators kept for lowering and exploration: per class the written
    /// one and the cheapest by flops (`crate::order`).
    pub order_nodes_kept: usize,
    /// `saturated`, `node_limit`, `time_limit` or `iteration_limit`.
    pub stop_reason: String,
    /// The saturation phase a limit stopped (`contraction_order`, `lowering`
    /// or `exploration`); `None` when every phase saturated. A limit met in
    /// the contraction-order phase leaves the final e-graph far below it:
    /// the orders found are pruned before lowering.
    pub stop_phase: Option<&'static str>,
    /// Wall time of the whole optimization, in milliseconds.
    pub optimize_ms: f64,
    /// The cost model that chose the plan: `network` or `time`.
    pub cost_model: CostModel,
    /// The cluster profile every `cost.seconds` is predicted under: the
    /// request's, else the server's (`tra serve --profile`), else the
    /// defaults. Said in the answer so that a reader of the figures (the
    /// page, a front-end) need not guess which one applied.
    pub profile: Profile,
    /// Distinct plans scored exactly under the time model (the candidates
    /// extraction gave; 0 under `network`).
    pub plans_scored: usize,
}

/// The answer of `/v1/optimize`.
#[derive(Debug, Clone, Serialize)]
pub struct OptimizeAnswer {
    /// The chosen plan.
    pub plan: Plan,
    /// Its cost.
    pub cost: PlanCost,
    /// What each site sends, receives and computes over the whole chosen
    /// plan (one entry per site): the figures behind `cost.seconds`.
    pub site_loads: Vec<SiteLoad>,
    /// The best plan of each distinct strategy, cheapest first; the chosen
    /// plan first. Where another contraction order won, the best plans in
    /// the written order too (one per strategy and order).
    pub alternatives: Vec<Alternative>,
    /// Rules that built the chosen plan, in plan order (a contraction-order
    /// rule where a local operator computes the TRA operator it built).
    pub rules_applied: Vec<String>,
    /// What went wrong on the way to this answer without stopping it (a rule
    /// that failed and was left out); empty normally.
    pub warnings: Vec<Warning>,
    /// Run figures.
    pub stats: Stats,
}

/// Why optimization failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum OptimizeError {
    /// The program is wrong.
    #[error("{0}")]
    Program(#[from] ProgramError),
    /// A limit stopped the work before any executable plan existed.
    #[error("{0}")]
    Limit(String),
    /// A rule broke an invariant: a bug in tra, reported with the rule's name.
    #[error("internal error: {0}")]
    Internal(String),
}

fn stop_reason(r: &Option<StopReason>) -> &'static str {
    match r {
        Some(StopReason::Saturated) | None => "saturated",
        Some(StopReason::IterationLimit(_)) => "iteration_limit",
        Some(StopReason::NodeLimit(_)) => "node_limit",
        Some(StopReason::TimeLimit(_)) => "time_limit",
        Some(StopReason::Other(_)) => "time_limit",
    }
}

/// The join strategy of a local-join node.
pub fn join_strategy(eg: &TraEGraph, node: &Ia) -> Option<JoinStrategy> {
    let Ia::LJoin([_, _, _, a, b]) = node else { return None };
    let replicated = |id: Id| eg[id].data.phys().is_some_and(|p| p.placement == Placement::Replicated);
    Some(match (replicated(*a), replicated(*b)) {
        (true, true) => JoinStrategy::BroadcastBoth,
        (true, false) => JoinStrategy::BroadcastLeft,
        (false, true) => JoinStrategy::BroadcastRight,
        _ if replicated_by_key_map(eg, *a) || replicated_by_key_map(eg, *b) => JoinStrategy::Replicated,
        _ => JoinStrategy::CoPartitioned,
    })
}

/// A P class that is a shuffle of a relation replicated by a key map (fanout > 1),
/// possibly filtered after the replication (`diag(A·B)` replicates along a dim
/// and keeps the diagonal before shuffling: still the 3D strategy).
fn replicated_by_key_map(eg: &TraEGraph, p: Id) -> bool {
    eg[p].nodes.iter().any(|n| match n {
        Ia::Shuffle([_, l]) => eg[*l].nodes.iter().any(|m| match m {
            Ia::Erase(q) => replicated_here(eg, *q, 0),
            _ => false,
        }),
        _ => false,
    })
}

/// A P class made by a key map of fanout > 1, looking through local filters
/// (at most a few, so a cycle in the e-graph cannot loop).
fn replicated_here(eg: &TraEGraph, q: Id, depth: usize) -> bool {
    depth < 4
        && eg[q].nodes.iter().any(|k| match k {
            Ia::LMap([f, _, _]) => matches!(eg[*f].data.param(), Some(Param::Key(k)) if k.fanout() > 1),
            Ia::LFilter([_, x]) => replicated_here(eg, *x, depth + 1),
            _ => false,
        })
}

fn strategy_of(eg: &TraEGraph, plan: &ExtractedPlan) -> Vec<JoinStrategy> {
    plan.expr
        .as_ref()
        .iter()
        .zip(&plan.classes)
        .filter_map(|(n, c)| {
            let n = n.clone().map_children(|x| plan.classes[usize::from(x)]);
            let _ = c;
            join_strategy(eg, &n)
        })
        .collect()
}

/// A label that tells the orders apart where the program was reordered
/// (`other_order` not empty) and the label does not already end with the
/// plan's bracketing (`; order X·(Y·V)`, chains only): `; written order`,
/// or `; reordered by` the contraction-order rules the plan realizes
/// (`agg-eager`: the same joins, with the sums moved before them).
fn order_label(
    label: String,
    eg: &TraEGraph,
    origins: &crate::describe::Origins,
    plan: &ExtractedPlan,
    written: bool,
    other_order: &rustc_hash::FxHashSet<Id>,
) -> String {
    if other_order.is_empty() || label.contains("; order ") {
        return label;
    }
    if written {
        return format!("{label}; written order");
    }
    let mut rules: Vec<&str> = Vec::new();
    for i in 0..plan.expr.as_ref().len() {
        if let Some(r) = crate::describe::ordered_by(eg, origins, plan, i) {
            if !rules.contains(&r) {
                rules.push(r);
            }
        }
    }
    match rules.is_empty() {
        true => format!("{label}; reordered"),
        false => format!("{label}; reordered by {}", rules.join(", ")),
    }
}

/// An egg hook: stop saturating once the request's deadline (or key
/// budget) has passed; the caller then reports it.
fn stop_when_expired(_: &mut Runner<Ia, TraAnalysis, ()>) -> Result<(), String> {
    if crate::deadline::expired() {
        return Err(crate::deadline::reason());
    }
    Ok(())
}

/// egg's report of one saturation phase (stop reason, iterations, e-graph
/// size, time per stage) and its per-iteration data, at debug level
/// (`RUST_LOG=tra_optimizer=debug`).
fn log_report(phase: &str, runner: &Runner<Ia, TraAnalysis, ()>) {
    if !tracing::enabled!(tracing::Level::DEBUG) {
        return;
    }
    tracing::debug!(phase, "saturation report:\n{}", runner.report());
    for (i, it) in runner.iterations.iter().enumerate() {
        tracing::debug!(
            phase,
            iteration = i,
            nodes = it.egraph_nodes,
            classes = it.egraph_classes,
            applied = ?it.applied,
            search_ms = it.search_time * 1000.0,
            apply_ms = it.apply_time * 1000.0,
            rebuild_ms = it.rebuild_time * 1000.0,
            "saturation iteration"
        );
    }
}

/// Optimize a TRA program with the given rules; a rule that breaks an
/// invariant of the e-graph fails the optimization
/// ([`OnRuleFailure::Fail`]).
pub fn optimize(p: &Program, rules: &[RuleDef], limits: &Limits) -> Result<OptimizeAnswer, OptimizeError> {
    optimize_with(p, rules, limits, OnRuleFailure::Fail)
}

/// Optimize a TRA program with the given rules, doing `on_failure` when a
/// rule breaks an invariant of the e-graph (see [`crate::rule_failure`]).
pub fn optimize_with(
    p: &Program,
    rules: &[RuleDef],
    limits: &Limits,
    on_failure: OnRuleFailure,
) -> Result<OptimizeAnswer, OptimizeError> {
    let start = Instant::now();
    let typed = check_program(p)?;
    check_enumerable_inputs(p, &typed)?;
    let quiet = on_failure == OnRuleFailure::Retry;
    rule_failure::retrying(rules, on_failure, |rules| attempt(p, &typed, rules, limits, start, quiet))
}

/// Every plan's `cost.seconds` and `site_loads` come from per-site loads
/// that place each key of each input on its site ([`crate::loads`]), which
/// enumerate at most [`ENUMERATION_LIMIT`] keys: an input with more is
/// refused here, named, before any work (it failed after saturation, as an
/// internal error).
fn check_enumerable_inputs(p: &Program, typed: &TypedProgram) -> Result<(), OptimizeError> {
    for (name, decl) in &p.inputs {
        let keys = typed.types.get(name).map_or(0, |t| t.tuples());
        if keys > ENUMERATION_LIMIT {
            return Err(OptimizeError::Program(ProgramError::new(
                ErrorCode::LimitExceeded,
                format!("{name}.key_bounds"),
                format!(
                    "input {name}: key bounds {:?} make {keys} keys; the per-site loads behind every plan's \
                     cost.seconds and site_loads place each key on its site, at most {ENUMERATION_LIMIT} keys \
                     per input: use larger blocks (fewer keys)",
                    decl.key_bounds
                ),
            )));
        }
    }
    Ok(())
}

/// The request's deadline (or analysis memory budget) passed `when` (`"during
/// saturation"`): a limit, worded with its reason.
fn passed(when: &str) -> AttemptError {
    AttemptError::Error(OptimizeError::Limit(format!("{} {when}", crate::deadline::reason())))
}

/// Saturate with `rules` and extract: one attempt of [`optimize_with`].
fn attempt(
    p: &Program,
    typed: &TypedProgram,
    rules: &[&RuleDef],
    limits: &Limits,
    start: Instant,
    quiet: bool,
) -> Result<OptimizeAnswer, AttemptError> {
    let cluster = p.cluster();
    let w = Weights { network: cluster.network_weight, compute: cluster.compute_weight };

    let mut eg = TraEGraph::new(TraAnalysis::new(cluster.sites, p.inputs.clone()));
    // Room for the matches of a small program (a plain matmul records about
    // 400 of each), so that the sets do not grow one doubling at a time.
    eg.analysis.applied.reserve(256);
    eg.analysis.rejected.reserve(256);
    // Typing the program's nodes again as they are added stops at the
    // deadline by unwinding out of egg's `make` (crate::deadline::Expired):
    // a limit, like one passed during saturation.
    let roots = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| add_program(&mut eg, p, &typed.order))) {
        Ok(roots) => roots,
        Err(payload) if crate::deadline::is_expired_payload(&*payload) => {
            return Err(passed("while adding the program to the e-graph"));
        }
        Err(payload) => std::panic::resume_unwind(payload),
    };
    let ordering: Vec<_> = rules.iter().filter(|r| r.ordering()).flat_map(|r| r.rewrites.iter()).collect();
    let lowering: Vec<_> = rules.iter().filter(|r| r.lowering()).flat_map(|r| r.rewrites.iter()).collect();
    let all: Vec<_> = rules.iter().filter(|r| !r.ordering()).flat_map(|r| r.rewrites.iter()).collect();
    let member_readers: Vec<egg::Symbol> =
        rules.iter().filter(|r| r.reads_members).flat_map(|r| r.rewrites.iter().map(|w| w.name)).collect();

    // Under a request deadline (crate::deadline), saturation gets at most
    // three quarters of what is left of it.
    let sat_time = crate::deadline::saturation_budget(limits.time);
    let sat_start = if crate::deadline::current().is_some() { Instant::now() } else { start };
    take_merge_failure();
    let run = catch_panic(quiet, || {
        let begin = |_: &mut Runner<Ia, TraAnalysis, ()>| {
            start_iteration();
            Ok(())
        };
        let mut iterations = 0;
        let mut order_stop = None;
        let (eg, roots, pruned) = if ordering.is_empty() {
            (eg, roots, Pruned::default())
        } else {
            // Orders alone, on the TRA sort; then the graph keeps, per class,
            // the written member and the cheapest by flops (crate::order).
            let written = crate::order::written(&eg);
            let original = eg.clone();
            let r0 = Runner::<Ia, TraAnalysis, ()>::new(TraAnalysis::new(cluster.sites, IndexMap::new()))
                .with_egraph(eg)
                .with_node_limit(limits.nodes)
                .with_iter_limit(limits.iterations)
                .with_time_limit(sat_time)
                .with_hook(stop_when_expired)
                .with_hook(begin)
                .run(ordering.iter().copied());
            log_report("ordering", &r0);
            iterations += r0.iterations.len();
            order_stop = r0.stop_reason.clone();
            let prune = || {
                let fresh = TraAnalysis::new(cluster.sites, p.inputs.clone());
                crate::order::prune(&r0.egraph, &roots, &written, fresh)
            };
            if let Some(pruned) = crate::order::unchanged(&original, &r0.egraph, &roots) {
                // No order rule applied (a single product): nothing to prune.
                debug_assert_eq!(pruned, prune().2, "the unchanged graph's figures are prune's");
                (original, roots, pruned)
            } else {
                let (pruned_graph, pruned_roots, pruned) = prune();
                if pruned.reordered == 0 {
                    // Only the written operators: the graph as the program built it.
                    (original, roots, pruned)
                } else {
                    (pruned_graph, pruned_roots, pruned)
                }
            }
        };
        let remaining = sat_time.saturating_sub(sat_start.elapsed());
        // A level of operators per iteration: a program deeper than the
        // iteration limit is still lowered whole (time and nodes bound it).
        // (The inputs are lowered in the first; one more sees it saturated.)
        let lowering_iterations = limits.iterations.max(crate::program::depth(&p.nodes, &typed.order) + 3);
        let r1 = Runner::<Ia, TraAnalysis, ()>::new(TraAnalysis::new(cluster.sites, IndexMap::new()))
            .with_egraph(eg)
            .with_node_limit(limits.nodes)
            .with_iter_limit(lowering_iterations)
            .with_time_limit(remaining.max(Duration::from_millis(1)))
            .with_hook(stop_when_expired)
            .with_hook(begin)
            // Searched where the graph changed: a level per iteration, so a
            // deep program would otherwise be searched whole once per level.
            .with_scheduler(
                IncrementalScheduler::new(limits.search)
                    .within(limits.nodes, Instant::now() + remaining)
                    .reading_members(member_readers.iter().copied()),
            )
            .run(lowering.iter().copied());
        log_report("lowering", &r1);
        iterations += r1.iterations.len();
        let lower_stop = match order_stop {
            Some(StopReason::Saturated) | None => (r1.stop_reason.clone(), "lowering"),
            other => (other, "contraction_order"),
        };
        let remaining = sat_time.saturating_sub(sat_start.elapsed());
        let r2 = Runner::<Ia, TraAnalysis, ()>::new(TraAnalysis::new(cluster.sites, IndexMap::new()))
            .with_egraph(r1.egraph)
            .with_node_limit(limits.nodes)
            .with_iter_limit(limits.iterations)
            .with_time_limit(remaining.max(Duration::from_millis(1)))
            .with_hook(stop_when_expired)
            .with_hook(begin)
            // Every rule on every new match, each iteration: the graph
            // saturates (the node limit bounds it), and egg's default backoff
            // only spreads the same matches over more iterations (a chain of
            // 16 products with two orders: 12 iterations instead of 40, half
            // the time).
            .with_scheduler(
                IncrementalScheduler::new(limits.search)
                    .within(limits.nodes, Instant::now() + remaining)
                    .reading_members(member_readers.iter().copied()),
            )
            .run(all.iter().copied());
        log_report("all rules", &r2);
        iterations += r2.iterations.len();
        let stop = match lower_stop {
            (Some(StopReason::Saturated) | None, _) => (r2.stop_reason.clone(), "exploration"),
            other => other,
        };
        (r2.egraph, roots, pruned, iterations, stop)
    });
    // A panic leaves the rule that was applying named (its applier did not
    // get to restore the name).
    let applying = current_rule();
    set_current_rule("program");
    if crate::deadline::expired() {
        // The deadline's own unwind (see `crate::deadline`) lands here too.
        return Err(passed("during saturation"));
    }
    let (eg, roots, pruned, iterations, stop) = run.map_err(|message| {
        let (rules, while_rebuilding, at) = match take_merge_failure() {
            Some(m) => (m.rules, m.while_rebuilding, m.at),
            None => ((applying != "program").then_some(applying).into_iter().collect(), false, vec![]),
        };
        AttemptError::Rule(RuleFailure { rules, while_rebuilding, at, message })
    })?;

    tracing::debug!(saturation_ms = start.elapsed().as_secs_f64() * 1000.0, iterations, "saturation finished");
    let roots: IndexMap<String, Id> = roots.into_iter().map(|(n, id)| (n, eg.find(id))).collect();
    let stop_reason = stop_reason(&stop.0);
    let stop_phase = (stop_reason != "saturated").then_some(stop.1);
    let stopped = match stop_phase {
        Some(phase) => format!("{stop_reason} in the {} phase", phase.replace('_', "-")),
        None => stop_reason.to_string(),
    };

    // The chosen plan, then the best plan under each join-strategy
    // restriction; when the contraction-order phase kept other orders, also
    // the best plan in the order the program wrote.
    let other_order = other_order_classes(&eg);
    let mut restrictions: Vec<(&[JoinStrategy], bool)> = vec![
        (&[], false),
        (&[JoinStrategy::BroadcastLeft, JoinStrategy::BroadcastBoth], false),
        (&[JoinStrategy::BroadcastRight, JoinStrategy::BroadcastBoth], false),
        (&[JoinStrategy::CoPartitioned, JoinStrategy::BroadcastBoth], false),
        (&[JoinStrategy::Replicated, JoinStrategy::BroadcastBoth], false),
    ];
    if !other_order.is_empty() {
        restrictions.push((&[], true));
    }
    // Where a limit stops extraction: under `time`, say what made it costly
    // and which model costs less.
    let when = match cluster.cost_model {
        CostModel::Time => {
            "during extraction under the time model, whose exact per-site loads enumerate the tuples of every \
             class and candidate (\"cost_model\": \"network\" enumerates only its few alternatives')"
        }
        CostModel::Network => "during extraction",
    };
    // Under `time`, extraction runs under several additive weightings (see
    // `candidate_weights`) and every distinct plan it gives is scored exactly.
    let mut cost_sets: Vec<NodeCosts> = Vec::new();
    let mut stage = None;
    if cluster.cost_model == CostModel::Time {
        let outputs: Vec<Id> = roots.values().copied().collect();
        match crate::stage_cost::stage_costs(&eg, &cluster.profile(), &outputs) {
            Some(c) => {
                cost_sets.push(c.in_turn());
                stage = Some(c);
            }
            None => return Err(passed(when)),
        }
    }
    for weights in candidate_weights(cluster.cost_model, w, &cluster.profile()) {
        cost_sets.push(NodeCosts::new(&eg, weights));
    }
    let mut scorer = Scorer::new(cluster.sites, cluster.profile());
    let origins = crate::describe::Origins::of(&eg);
    // Every distinct plan extraction gave, scored; then one per strategy
    // and per order (written or another), and the chosen plan among those
    // ([`pick`]).
    let mut candidates: Vec<Candidate> = Vec::new();
    let mut seen: Vec<Plan> = Vec::new();
    for (wi, costs) in cost_sets.iter().enumerate() {
        for &(allowed, written_order) in &restrictions {
            let allow = |eg: &TraEGraph, c: Id, n: &Ia| {
                if written_order && other_order.contains(&c) {
                    return false;
                }
                match join_strategy(eg, n) {
                    Some(s) => allowed.is_empty() || allowed.contains(&s),
                    None => true,
                }
            };
            let mut choices = vec![choose_among(&eg, costs, &allow)];
            // Under the stages in turn, once more with each exchange charged
            // from the source the first extraction chose for its operand.
            if let (0, Some(stage)) = (wi, &stage) {
                let again = choose_among(&eg, &stage.following(&choices[0]), &allow);
                choices.push(again);
            }
            if crate::deadline::expired() {
                return Err(passed(when));
            }
            for choice in choices {
                let extracted = match choice.plan(&eg, &roots) {
                    Ok(x) => x,
                    Err(NoPlan { output }) if allowed.is_empty() && wi == 0 => {
                        return Err(AttemptError::Error(OptimizeError::Limit(format!(
                        "saturation stopped ({stopped}) before output `{output}` had an executable plan; raise the limits"
                    ))))
                    }
                    Err(_) => continue,
                };
                let plan = extracted.to_plan(&p.inputs);
                if seen.contains(&plan) {
                    continue;
                }
                seen.push(plan.clone());
                let strategy = strategy_of(&eg, &extracted);
                let net = plan_cost(&eg, &extracted, w);
                // Checking and scoring a plan stop at the deadline too: a limit, not a bug.
                let (seconds, bottleneck, sites) = scorer.score(&plan).map_err(|e| {
                    if crate::deadline::expired() {
                        passed(when)
                    } else {
                        AttemptError::Error(OptimizeError::Internal(e))
                    }
                })?;
                let total = match cluster.cost_model {
                    CostModel::Network => net.total,
                    CostModel::Time => seconds,
                };
                let cost =
                    PlanCost { network_floats: net.network_floats, flops: net.flops, total, seconds, bottleneck };
                let written = !extracted.classes.iter().any(|c| other_order.contains(c));
                candidates.push(Candidate { strategy, written, cost, plan, extracted, sites });
            }
        }
    }
    tracing::debug!(
        optimize_ms = start.elapsed().as_secs_f64() * 1000.0,
        candidates = candidates.len(),
        "extraction finished"
    );
    let mut slots: Vec<Vec<usize>> = Vec::new();
    for (i, c) in candidates.iter().enumerate() {
        let same = |s: &Vec<usize>| candidates[s[0]].strategy == c.strategy && candidates[s[0]].written == c.written;
        match slots.iter_mut().find(|s| same(s)) {
            Some(s) => s.push(i),
            None => slots.push(vec![i]),
        }
    }
    let winners: Vec<usize> = slots.iter().map(|s| pick(&candidates, s, cluster.cost_model)).collect();
    let chosen_at = pick(&candidates, &winners, cluster.cost_model);
    // The chosen plan first, then the others cheapest first.
    let mut order = winners.clone();
    order.sort_by(|&a, &b| {
        (a != chosen_at, candidates[a].cost.key())
            .partial_cmp(&(b != chosen_at, candidates[b].cost.key()))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    let mut alternatives: Vec<Alternative> = Vec::new();
    for &i in &order {
        let c = &candidates[i];
        let label = order_label(
            crate::describe::plan_label_naming(
                &c.plan,
                &c.strategy,
                &p.dim_names,
                &crate::describe::computes(&eg, &c.extracted, &c.plan),
            ),
            &eg,
            &origins,
            &c.extracted,
            c.written,
            &other_order,
        );
        let built_by = crate::describe::built_by(&eg, &origins, &c.extracted, &c.plan);
        alternatives.push(Alternative {
            label,
            strategy: c.strategy.clone(),
            plan: c.plan.clone(),
            cost: c.cost.clone(),
            built_by,
            site_loads: c.sites.clone(),
        });
    }
    let chosen = alternatives[0].clone();
    let (chosen_expr, site_loads) = (&candidates[chosen_at].extracted, chosen.site_loads.clone());

    let rules_applied = rules_applied(&eg, &origins, chosen_expr);
    Ok(OptimizeAnswer {
        plan: chosen.plan.clone(),
        cost: chosen.cost.clone(),
        site_loads,
        alternatives,
        rules_applied,
        warnings: Vec::new(),
        stats: Stats {
            egraph_nodes: eg.total_number_of_nodes(),
            egraph_classes: eg.number_of_classes(),
            iterations,
            order_nodes_explored: pruned.explored,
            order_nodes_kept: pruned.kept,
            stop_reason: stop_reason.to_string(),
            stop_phase,
            optimize_ms: start.elapsed().as_secs_f64() * 1000.0,
            cost_model: cluster.cost_model,
            profile: cluster.profile(),
            plans_scored: if cluster.cost_model == CostModel::Time { seen.len() } else { 0 },
        },
    })
}

/// A distinct plan extraction gave, scored.
struct Candidate {
    strategy: Vec<JoinStrategy>,
    /// Whether it keeps the written contraction order.
    written: bool,
    cost: PlanCost,
    plan: Plan,
    extracted: ExtractedPlan,
    /// Each site's load over the whole plan.
    sites: Vec<SiteLoad>,
}

/// Predicted times closer than this (relative) are not told apart by the
/// time model: its figures for a plan are within ±30% of what a run
/// measures, and plans predicted a few percent apart measure either way
/// round (`bench/README.md`). The benchmark of every alternative counts a
/// pair as told apart past the same 5%.
pub const TIME_RESOLUTION: f64 = 0.05;

/// The best of `among` (indices into `candidates`). Under `network`, the
/// least `cost.key()`, the first of equals (the paper's model, unchanged).
/// Under `time`, among the plans predicted within [`TIME_RESOLUTION`] of
/// the fastest:
/// - the one whose kernels move the fewest bytes through memory (summed
///   over sites): a plan that materializes intermediates the other fuses
///   away (a join's products written out, exchanged, then read again to be
///   summed) pays for it in ways no stage figure prices — the products'
///   first touch, their trips through the caches — and measured slower
///   (thin matrices: 1.40× the fused plan, for a prediction 4% cheaper);
/// - then the one with the fewest operators (else two plans that move the
///   same bytes, one of them replicating keys the other need not, would be
///   told apart by the last bit of a float);
/// - then the fastest.
fn pick(candidates: &[Candidate], among: &[usize], model: CostModel) -> usize {
    let key = |i: usize| candidates[i].cost.key();
    let by_key = |a: usize, b: usize| key(a).partial_cmp(&key(b)).unwrap_or(std::cmp::Ordering::Equal);
    let fastest = among.iter().copied().min_by(|&a, &b| by_key(a, b)).expect("a candidate");
    if model == CostModel::Network {
        return fastest;
    }
    let bound = candidates[fastest].cost.total * (1.0 + TIME_RESOLUTION);
    let memory = |i: usize| candidates[i].sites.iter().map(|s| s.memory_bytes).fold(0u64, u64::saturating_add);
    among
        .iter()
        .copied()
        .filter(|&i| candidates[i].cost.total <= bound)
        .min_by(|&a, &b| {
            let operators = |i: usize| candidates[i].plan.nodes.len();
            memory(a).cmp(&memory(b)).then(operators(a).cmp(&operators(b))).then_with(|| by_key(a, b))
        })
        .unwrap_or(fastest)
}

/// The classes of other contraction orders than the written one: those the
/// ordering phase added that hold no operator the program wrote
/// ([`TraAnalysis::other_order`]), and the physical classes that compute
/// them (through their `erase` members). Every plan that computes another
/// order's intermediate uses one of them, so extraction without them finds
/// the best plan in the written order.
fn other_order_classes(eg: &TraEGraph) -> rustc_hash::FxHashSet<Id> {
    let written: rustc_hash::FxHashSet<Id> = eg.analysis.written_order.iter().map(|c| eg.find(*c)).collect();
    let mut out = rustc_hash::FxHashSet::default();
    for c in &eg.analysis.other_order {
        let c = eg.find(*c);
        if written.contains(&c) || !out.insert(c) {
            continue;
        }
        for n in &eg[c].nodes {
            if let Ia::Erase(p) = n {
                out.insert(eg.find(*p));
            }
        }
    }
    out
}

/// The additive weightings extraction runs under. Under `network`, the
/// request's own weights only (the paper's model, unchanged). Under `time`,
/// extraction first runs under the e-nodes' stage times
/// ([`crate::stage_cost`]: in turn, and again with exchanges charged from
/// the sources the first extraction chose), then, for more candidates, under two sums:
/// each float and flop priced at one site's link and processor speed (the
/// plan's time if every stage were perfectly spread) and network floats
/// alone. Each restriction to one join strategy adds the best plan of that
/// strategy under each. Every distinct candidate is then scored exactly
/// ([`crate::time`]), and the least predicted time wins (up to the model's
/// resolution: [`pick`]).
fn candidate_weights(model: CostModel, w: Weights, p: &Profile) -> Vec<Weights> {
    match model {
        CostModel::Network => vec![w],
        CostModel::Time => vec![
            Weights {
                network: p.bytes_per_float as f64 / p.link_bytes_per_second,
                compute: 1.0 / p.site_flops_per_second,
            },
            Weights { network: 1.0, compute: 0.0 },
        ],
    }
}

/// Exact predicted time of plans, sharing the per-site loads of common
/// sub-plans ([`LoadCache`]).
pub struct Scorer {
    sites: usize,
    profile: Profile,
    cache: LoadCache,
}

impl Scorer {
    /// A scorer for plans on `sites` sites under `profile`.
    pub fn new(sites: usize, profile: Profile) -> Scorer {
        Scorer { sites, profile, cache: LoadCache::new(sites, profile.bytes_per_float) }
    }

    #[allow(clippy::type_complexity)]
    fn loads(
        &mut self,
        plan: &Plan,
    ) -> Result<(IndexMap<String, std::sync::Arc<crate::loads::OpLoads>>, crate::loads::Writes), String> {
        let typed =
            crate::check::check_plan(plan, self.sites).map_err(|e| format!("an extracted plan does not check: {e}"))?;
        self.cache.plan_loads_and_writes(plan, &typed).map_err(|e| e.to_string())
    }

    /// A plan's predicted seconds, bottleneck, and every site's load over
    /// the whole plan (the bytes it writes into the outputs' files included).
    pub fn score(&mut self, plan: &Plan) -> Result<(f64, Option<Bottleneck>, Vec<SiteLoad>), String> {
        let (loads, writes) = self.loads(plan)?;
        let (seconds, bottleneck) = plan_seconds(plan, &loads, &writes, &self.profile);
        Ok((seconds, bottleneck, with_writes(total_per_site(&loads, self.sites), &writes)))
    }
}

/// The rules that first built the nodes of a plan, in plan order, without
/// repeats; before a local operator's own rule, the contraction-order rule
/// whose TRA operator it computes ([`crate::describe::ordered_by`]).
fn rules_applied(eg: &TraEGraph, origins: &crate::describe::Origins, plan: &ExtractedPlan) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (i, n) in plan.expr.as_ref().iter().enumerate() {
        if matches!(n, Ia::Param(_)) {
            continue;
        }
        if let Some(r) = crate::describe::ordered_by(eg, origins, plan, i) {
            if !out.iter().any(|x| x == r) {
                out.push(r.to_string());
            }
        }
        let key = n.clone().map_children(|x| eg.find(plan.classes[usize::from(x)]));
        if let Some(r) = origins.get(&key) {
            if r != "program" && !out.iter().any(|x| x == r) {
                out.push(r.to_string());
            }
        }
    }
    out
}

/// An optimization failure as the API's error object: a limit is
/// `limit_exceeded`, a broken rule is `internal` (a bug in tra, not in the program).
impl From<&OptimizeError> for ProgramError {
    fn from(e: &OptimizeError) -> ProgramError {
        match e {
            OptimizeError::Program(p) => p.clone(),
            OptimizeError::Limit(m) => ProgramError::new(ErrorCode::LimitExceeded, "", m.clone()),
            OptimizeError::Internal(_) => ProgramError::new(ErrorCode::Internal, "", e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An input with more keys than the per-site loads enumerate is refused
    /// before saturation as a limit, at its key bounds (it was an internal
    /// error after saturation); one at the limit is not refused for its keys
    /// (without rules it then has no plan).
    #[test]
    fn an_input_with_too_many_keys_for_the_per_site_loads_is_a_limit_named_at_its_key_bounds() {
        let program = |rows: u64| {
            Program::from_json(&format!(
                r#"{{"inputs": {{"X": {{"key_bounds": [{rows}, 1024], "array_bounds": [1]}}}},
                    "nodes": {{"Y": {{"op": "transform", "input": "X", "kernel": "relu"}}}},
                    "outputs": ["Y"], "cluster": {{"sites": 4}}}}"#
            ))
            .unwrap()
        };
        let rules: Vec<RuleDef> = Vec::new();
        let started = Instant::now();
        let Err(OptimizeError::Program(e)) = optimize(&program(1025), &rules, &Limits::default()) else {
            panic!("1025 × 1024 keys must be refused")
        };
        assert_eq!((e.code, e.at.as_str()), (ErrorCode::LimitExceeded, "X.key_bounds"), "{e:?}");
        assert!(e.message.contains("1049600 keys") && e.message.contains("1048576"), "{}", e.message);
        assert!(started.elapsed() < Duration::from_secs(2), "refused before any work");
        assert!(optimize(&program(1024), &rules, &Limits::default()).is_err_and(|e| !e.to_string().contains("keys")));
    }

    /// A deadline that passes while the program's nodes are added to the
    /// e-graph (typing a filter enumerates its keys, and stops there) is a
    /// limit: the unwind out of egg's `make` was not caught there, and `tra
    /// optimize --max-ms 250` on an attention step with an 80 000-row Q exited
    /// with status 101 and no message (the server: 500, "the optimizer crashed").
    #[test]
    fn a_deadline_passing_while_the_program_is_added_is_a_limit_not_a_crash() {
        let p = Program::from_json(
            r#"{"inputs": {"X": {"key_bounds": [100, 100], "array_bounds": [2]}},
                "nodes": {"F": {"op": "filter", "input": "X", "predicate": "k0 == k1"},
                          "Y": {"op": "rekey", "input": "F", "key": "[k0]"}},
                "outputs": ["Y"], "cluster": {"sites": 4}}"#,
        )
        .unwrap();
        let typed = check_program(&p).unwrap();
        let passed = crate::deadline::Deadline::after(Duration::ZERO, "a test's limit");
        let r = crate::deadline::within(passed, || attempt(&p, &typed, &[], &Limits::default(), Instant::now(), true));
        match r {
            Err(AttemptError::Error(OptimizeError::Limit(m))) => {
                assert!(m.contains("a test's limit passed while adding the program"), "{m}")
            }
            Err(AttemptError::Error(e)) => panic!("expected a limit, got {e:?}"),
            Err(AttemptError::Rule(f)) => panic!("expected a limit, got a rule failure: {}", f.message),
            Ok(_) => panic!("expected a limit, got an answer"),
        }
    }

    #[test]
    fn each_optimize_error_keeps_its_kind_as_a_program_error() {
        let program = ProgramError::new(ErrorCode::BadField, "Z.op", "Z: bad op");
        assert_eq!(ProgramError::from(&OptimizeError::Program(program.clone())), program);

        let limit = ProgramError::from(&OptimizeError::Limit("node limit".into()));
        assert_eq!(
            (limit.code, limit.at.as_str(), limit.message.as_str()),
            (ErrorCode::LimitExceeded, "", "node limit")
        );

        let internal = ProgramError::from(&OptimizeError::Internal("rule `R1-1` broke an invariant".into()));
        assert_eq!(internal.code, ErrorCode::Internal);
        assert_eq!(internal.code.as_str(), "internal");
        assert_eq!(internal.message, "internal error: rule `R1-1` broke an invariant");
    }

    /// A scored candidate with these figures (the plan itself is empty).
    fn candidate(seconds: f64, network_floats: u64, memory_bytes: u64) -> Candidate {
        with_operators(seconds, network_floats, memory_bytes, 0)
    }

    /// [`candidate`] with a plan of `n` operators (key maps of its input).
    fn with_operators(seconds: f64, network_floats: u64, memory_bytes: u64, n: usize) -> Candidate {
        let nodes: Vec<String> =
            (0..n).map(|i| format!(r#""m{i}": {{"op": "local_map", "input": "X", "key": "[k0]"}}"#)).collect();
        let plan = Plan::from_json(&format!(
            r#"{{"inputs": {{"X": {{"key_bounds": [2], "array_bounds": [2]}}}}, "nodes": {{{}}}, "outputs": []}}"#,
            nodes.join(", ")
        ))
        .unwrap();
        Candidate {
            strategy: Vec::new(),
            written: true,
            cost: PlanCost { network_floats, flops: 0, total: seconds, seconds, bottleneck: None },
            plan,
            extracted: ExtractedPlan { expr: Default::default(), roots: IndexMap::new(), classes: Vec::new() },
            sites: vec![
                SiteLoad { memory_bytes: memory_bytes / 2, ..SiteLoad::default() },
                SiteLoad { memory_bytes: memory_bytes - memory_bytes / 2, ..SiteLoad::default() },
            ],
        }
    }

    #[test]
    fn the_time_model_breaks_ties_within_its_resolution_by_memory_and_network_keeps_its_order() {
        let c = [
            candidate(1.00, 10, 900), // fastest, materializes the most
            candidate(1.04, 30, 100), // within 5%: the least memory
            candidate(1.03, 20, 500),
            candidate(1.20, 5, 1),    // least memory of all, but told apart (slower)
            candidate(1.00, 10, 950), // as fast as the first, more memory
        ];
        let all: Vec<usize> = (0..c.len()).collect();
        assert_eq!(pick(&c, &all, CostModel::Time), 1);
        // The same answer whatever the order of the candidates.
        let mut reversed = all.clone();
        reversed.reverse();
        assert_eq!(pick(&c, &reversed, CostModel::Time), 1);
        // Without the one that moves least, the next least within 5%.
        assert_eq!(pick(&c, &[0, 2, 3, 4], CostModel::Time), 2);
        // Alone within 5% of itself: the fastest, whatever the others' memory.
        assert_eq!(pick(&c, &[0, 3], CostModel::Time), 0);
        // Equal predicted times, given in either order: the one that moves less memory.
        assert_eq!(pick(&c, &[4, 0], CostModel::Time), 0);
        // The same bytes through memory: the fewest operators, even a hair slower.
        let d = [with_operators(0.2844356062003424, 0, 0, 4), with_operators(0.2844356062003425, 0, 0, 2)];
        assert_eq!(pick(&d, &[0, 1], CostModel::Time), 1);
        assert_eq!(pick(&d, &[0, 1], CostModel::Network), 0);
        // Network: the least (total, flops, floats), the first of equals;
        // memory plays no part.
        assert_eq!(pick(&c, &all, CostModel::Network), 0);
        assert_eq!(pick(&c, &[4, 0], CostModel::Network), 4);
        assert_eq!(pick(&c, &[1, 2, 3], CostModel::Network), 2);
    }

    /// Log lines written to a shared buffer.
    #[derive(Clone, Default)]
    struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn logs_at(level: tracing::Level) -> String {
        let program = Program::from_json(
            r#"{"inputs": {"A": {"key_bounds": [2], "array_bounds": [3]}},
                "nodes": {"B": {"op": "transform", "input": "A", "kernel": "relu"}},
                "outputs": ["B"]}"#,
        )
        .unwrap();
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(level)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        // No rules: nothing lowers, so no plan; both phases still run and report.
        let _ = tracing::subscriber::with_default(subscriber, || optimize(&program, &[], &Limits::default()));
        let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        text
    }

    #[test]
    fn egg_reports_each_phase_at_debug_level_only() {
        let debug = logs_at(tracing::Level::DEBUG);
        for phase in ["lowering", "all rules"] {
            assert!(debug.contains(&format!("phase=\"{phase}\"")), "{debug}");
        }
        assert!(debug.contains("saturation report"), "{debug}");
        assert!(debug.contains("Stop reason: Saturated"), "{debug}");
        assert!(debug.contains("saturation iteration"), "{debug}");
        assert!(!logs_at(tracing::Level::INFO).contains("saturation report"));
    }
}
