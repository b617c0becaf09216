//! What the optimizer does when a rewrite rule breaks an invariant of the
//! e-graph: the analysis refuses a merge (types or placements differ) and
//! panics, naming the rule — a bug in that rule, never in the request.
//!
//! In tests, and with `--strict`, that fails the optimization
//! ([`OnRuleFailure::Fail`]): the rule must be fixed. For a user
//! ([`OnRuleFailure::Retry`]) the failure is logged at error level, the
//! program is optimized again without the failing rule, and the answer
//! carries a [`Warning`] naming the rule and the program node where it
//! failed (the analysis records both, [`crate::egraph::MergeFailure`], just
//! before it panics). Every plan of the second run is built by the rules
//! that remain, from a fresh e-graph, so it is as sound as they are. Only if
//! the second run fails too is the answer an error, naming the rule.

use crate::optimize::{OptimizeAnswer, OptimizeError};
use crate::rule::RuleDef;
use serde::Serialize;

/// Something that went wrong while optimizing without stopping the answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Warning {
    /// What kind: `rule_failed` (a rule broke an invariant of the e-graph and
    /// the answer was found without it).
    pub code: String,
    /// The rule.
    pub rule: String,
    /// The program node (or nodes, comma-separated) where it failed; empty
    /// when not known.
    pub at: String,
    /// What happened, in words.
    pub message: String,
}

/// What [`optimize_with`](crate::optimize::optimize_with) does when a rule breaks an invariant of the e-graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnRuleFailure {
    /// Fail with [`OptimizeError::Internal`] naming the rule (tests, `--strict`).
    #[default]
    Fail,
    /// Log it at error level, optimize again without the failing rule, and
    /// answer with that plan and a [`Warning`]; fail naming the rule only
    /// if the second run fails too.
    Retry,
}

/// A rule that broke an invariant while the graph was saturated.
#[derive(Debug, Clone)]
pub(crate) struct RuleFailure {
    /// The rule (several when the failure showed while the graph was
    /// rebuilt: every rule that changed it in that iteration).
    pub(crate) rules: Vec<&'static str>,
    /// True when `rules` are suspects (the failure showed while the graph
    /// was rebuilt), not the rule that was applying.
    pub(crate) while_rebuilding: bool,
    /// The program nodes nearest above the failure.
    pub(crate) at: Vec<String>,
    /// The panic's message.
    pub(crate) message: String,
}

impl std::fmt::Display for RuleFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.message)?;
        if self.while_rebuilding && !self.rules.is_empty() {
            write!(f, " (while rebuilding the e-graph; the rules that changed it then: {})", self.rules.join(", "))?;
        } else if !self.message.contains("rule ") && !self.rules.is_empty() {
            write!(f, " (in rule {})", self.rules.join(", "))?;
        }
        if !self.at.is_empty() {
            write!(f, ", at program node {}", self.at.join(", "))?;
        }
        Ok(())
    }
}

/// How one saturation-and-extraction attempt failed.
pub(crate) enum AttemptError {
    /// A limit or the program: the answer's error.
    Error(OptimizeError),
    /// A rule broke an invariant (a panic of the analysis or of a rule).
    Rule(RuleFailure),
}

thread_local! {
    static QUIET_PANICS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Run `f`, catching a panic, whose message is the error; with `quiet`, the
/// panic is not printed by the panic hook (the caller reports it). The hook
/// that honours `quiet` is installed once and hands every other panic to the
/// hook it replaced.
pub fn catch_panic<T>(quiet: bool, f: impl FnOnce() -> T) -> Result<T, String> {
    static HOOK: std::sync::Once = std::sync::Once::new();
    if quiet {
        HOOK.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                if !QUIET_PANICS.with(|q| q.get()) {
                    previous(info)
                }
            }));
        });
    }
    let was = QUIET_PANICS.with(|q| q.replace(quiet));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    QUIET_PANICS.with(|q| q.set(was));
    r.map_err(|e| {
        e.downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic without a message".into())
    })
}

/// Run `attempt` with every rule; on a rule failure, per `on_failure`, fail
/// or run it again without the failing rule(s) and add the warnings.
pub(crate) fn retrying(
    rules: &[RuleDef],
    on_failure: OnRuleFailure,
    attempt: impl Fn(&[&RuleDef]) -> Result<OptimizeAnswer, AttemptError>,
) -> Result<OptimizeAnswer, OptimizeError> {
    let every: Vec<&RuleDef> = rules.iter().collect();
    let failure = match attempt(&every) {
        Ok(answer) => return Ok(answer),
        Err(AttemptError::Error(e)) => return Err(e),
        Err(AttemptError::Rule(f)) => f,
    };
    if on_failure == OnRuleFailure::Fail || failure.rules.is_empty() {
        return Err(OptimizeError::Internal(failure.to_string()));
    }
    let names = failure.rules.join(", ");
    let at = failure.at.join(", ");
    tracing::error!(
        target: "tra::optimizer",
        rule = %names,
        at = %at,
        "a rewrite rule broke an invariant of the e-graph (a bug in the rule): {failure}; optimizing again without it"
    );
    let kept: Vec<&RuleDef> = rules.iter().filter(|r| !failure.rules.contains(&r.name)).collect();
    match attempt(&kept) {
        Ok(mut answer) => {
            answer.warnings = failure
                .rules
                .iter()
                .map(|rule| Warning {
                    code: "rule_failed".into(),
                    rule: rule.to_string(),
                    at: at.clone(),
                    message: format!(
                        "rule {rule} {} an invariant of the optimizer's e-graph{} ({}): a bug in tra; the plan \
                         was found without it and may cost more than the best one",
                        if failure.while_rebuilding {
                            "changed the e-graph in the iteration that broke"
                        } else {
                            "broke"
                        },
                        if at.is_empty() { String::new() } else { format!(" at program node {at}") },
                        failure.message
                    ),
                })
                .collect();
            Ok(answer)
        }
        Err(AttemptError::Rule(second)) => {
            tracing::error!(target: "tra::optimizer", rule = %second.rules.join(", "), "optimizing again failed too: {second}");
            Err(OptimizeError::Internal(format!("{failure}; optimizing again without {names} failed too: {second}")))
        }
        Err(AttemptError::Error(e)) => {
            Err(OptimizeError::Internal(format!("{failure}; optimizing again without {names} found no plan: {e}")))
        }
    }
}
