//! Incremental search: each iteration looks for matches only where the
//! e-graph changed.
//!
//! egg searches every rule in every class each iteration, and finds again
//! every match it found before; the appliers then skip those they already
//! built or turned down (`TraAnalysis::applied`, `TraAnalysis::rejected`).
//! On a plain matmul that is most of saturation's time. Yet a match can only
//! be new where the graph changed: a match of a pattern rooted at class `R`
//! reads the nodes of the classes at most `d` levels below `R` (`d` = the
//! pattern's depth, its variables included) and those classes' analysis
//! data. Every change egg makes to a class — a new class, a union (new
//! members), a learnt analysis value — calls `Analysis::modify` on it, which
//! logs the class ([`TraAnalysis::touched`]). So after the first iteration
//! (which searches everything), a rule is searched only in the classes at
//! most `d` parent steps above a class touched since the previous search.
//!
//! In those classes, only the matches that use something changed since the
//! previous search are built ([`crate::delta`]): a new member, a class with
//! new analysis data, or for a rule that reads the members of its bound
//! classes ([`IncrementalScheduler::reading_members`]), a touched bound class.
//!
//! This is exact, not a heuristic, under the rules' contract: conditions,
//! binders and appliers read only the classes their pattern binds (their
//! analysis data, and for `matmul-rmm` the members of one of them). A rule
//! reading further would need a deeper pattern. The test
//! `incremental_search_builds_the_graph_full_search_builds` compares both on
//! every built-in workload.
//!
//! [`TraAnalysis::touched`]: crate::egraph::TraAnalysis::touched

use crate::delta::{Changes, Delta, Walk};
use crate::egraph::{Ia, TraAnalysis, TraEGraph};
use egg::{PatternAst, Rewrite, RewriteScheduler, SearchMatches, Symbol};
use rustc_hash::{FxHashMap, FxHashSet};
use std::borrow::Cow;
use std::rc::Rc;
use std::time::Instant;

/// How each saturation iteration finds matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Search {
    /// Only where the graph changed since the previous iteration (the default).
    #[default]
    Incremental,
    /// Every rule in every class, every iteration (egg's `SimpleScheduler`):
    /// the reference the incremental search is tested against.
    Full,
}

/// A [`RewriteScheduler`] that searches each rule only near the classes
/// touched since the previous iteration (see the module docs).
pub struct IncrementalScheduler {
    /// [`Search::Full`]: search everywhere every iteration.
    full: bool,
    /// The iteration the candidates below were found for.
    iteration: Option<usize>,
    /// First iteration of this runner: search everywhere.
    everywhere: bool,
    /// How much of the analysis's touched log is already consumed.
    consumed: usize,
    /// Each rule's pattern compiled for delta matching, by name (`None`: not
    /// a pattern, or deeper than [`MAX_DEPTH`]; searched everywhere), with
    /// its walk storage once the pattern's parameters are in the graph.
    compiled: FxHashMap<Symbol, Option<Compiled>>,
    /// What changed since the previous iteration's search: the classes at
    /// most [`MAX_DEPTH`] parent steps above a touched class, new members,
    /// new analysis data.
    changes: Changes,
    /// How much of the analysis's data-change log is already consumed.
    consumed_data: usize,
    /// The rules whose appliers read the members of their bound classes.
    member_readers: FxHashSet<Symbol>,
    /// The node limit and the time the runner stops at: matches are applied
    /// in pieces, and no piece once either is passed (see
    /// [`IncrementalScheduler::within`]).
    budget: Option<(usize, Instant)>,
}

/// A rule's pattern compiled for delta matching, with the storage of its
/// walks.
struct Compiled {
    delta: Rc<Delta>,
    /// Made once the pattern's parameters are in the graph; their classes
    /// are found then, once (a parameter class is never merged, so its id
    /// stays canonical).
    walk: Option<Walk>,
}

/// Matches applied between two looks at the budget.
const APPLY_PIECE: usize = 256;

impl IncrementalScheduler {
    /// A scheduler searching as `search` says.
    pub fn new(search: Search) -> IncrementalScheduler {
        IncrementalScheduler {
            full: search == Search::Full,
            iteration: None,
            everywhere: true,
            consumed: 0,
            compiled: FxHashMap::default(),
            changes: Changes::default(),
            consumed_data: 0,
            member_readers: FxHashSet::default(),
            budget: None,
        }
    }

    /// The same scheduler, told which rules' appliers read the members of
    /// their bound classes (not only their analysis data): for those, a
    /// bound class that gained a member is a change, and their matches
    /// through it are found again.
    pub fn reading_members(mut self, rules: impl IntoIterator<Item = Symbol>) -> IncrementalScheduler {
        self.member_readers.extend(rules);
        self
    }

    /// The same scheduler, applying a rule's matches in pieces and stopping
    /// once the graph has more than `nodes` nodes, `until` has passed or the
    /// request's deadline has ([`crate::deadline::expired`]). egg checks its
    /// limits only between rules, and one rule's matches can be many: in a
    /// long chain of maps a single application round of `R1-2` added
    /// hundreds of thousands of nodes. The runner then stops with its own
    /// reason (`node_limit`, `time_limit`).
    pub fn within(mut self, nodes: usize, until: Instant) -> IncrementalScheduler {
        self.budget = Some((nodes, until));
        self
    }

    /// Find the classes near the changes logged since the last iteration.
    fn prepare(&mut self, iteration: usize, egraph: &TraEGraph) {
        let first = self.iteration.is_none();
        self.iteration = Some(iteration);
        let log = &egraph.analysis.touched;
        let fresh = &log[self.consumed.min(log.len())..];
        self.consumed = log.len();
        self.everywhere = first;
        let data = &egraph.analysis.data_changed;
        let data_fresh = &data[self.consumed_data.min(data.len())..];
        self.consumed_data = data.len();
        if !self.full {
            self.changes.prepare(egraph, (!first).then_some((fresh, data_fresh)), MAX_DEPTH);
        }
    }
}

thread_local! {
    /// Patterns already compiled on this thread, by pattern: the rule
    /// table is the same for every request, so a server thread compiles
    /// each pattern once.
    static COMPILED: std::cell::RefCell<FxHashMap<PatternAst<Ia>, Option<Rc<Delta>>>> =
        Default::default();
}

/// `ast` compiled for delta matching; `None` when [`Delta::new`] cannot
/// compile it or it is deeper than [`MAX_DEPTH`].
fn compile(ast: &PatternAst<Ia>) -> Option<Rc<Delta>> {
    COMPILED.with(|c| {
        c.borrow_mut()
            .entry(ast.clone())
            .or_insert_with(|| Delta::new(ast).filter(|d| d.depth() <= MAX_DEPTH).map(Rc::new))
            .clone()
    })
}

/// The deepest pattern searched incrementally; deeper ones are searched
/// everywhere (no rule is that deep).
const MAX_DEPTH: usize = 12;

impl RewriteScheduler<Ia, TraAnalysis> for IncrementalScheduler {
    fn search_rewrite<'a>(
        &mut self,
        iteration: usize,
        egraph: &TraEGraph,
        rewrite: &'a Rewrite<Ia, TraAnalysis>,
    ) -> Vec<SearchMatches<'a, Ia>> {
        if self.full {
            return rewrite.search(egraph);
        }
        if self.iteration != Some(iteration) {
            self.prepare(iteration, egraph);
        }
        let reads_members = self.member_readers.contains(&rewrite.name);
        let compiled = self.compiled.entry(rewrite.name).or_insert_with(|| {
            compile(rewrite.searcher.get_pattern_ast()?).map(|delta| Compiled { delta, walk: None })
        });
        match (compiled, rewrite.searcher.get_pattern_ast()) {
            (Some(Compiled { delta, walk }), Some(ast)) if !self.everywhere => {
                let changes = &self.changes;
                if !changes.may_match(delta, reads_members) {
                    return Vec::new();
                }
                let d = delta.depth();
                let Some(classes) = egraph.classes_for_op(&delta.root_op()) else { return Vec::new() };
                if walk.is_none() {
                    *walk = delta.walk(egraph);
                }
                let Some(walk) = walk else { return Vec::new() };
                classes
                    .filter(|&c| changes.near(c).is_some_and(|steps| steps <= d))
                    .filter_map(|c| {
                        let substs = delta.search(changes, c, reads_members, walk);
                        (!substs.is_empty()).then(|| SearchMatches { eclass: c, substs, ast: Some(Cow::Borrowed(ast)) })
                    })
                    .collect()
            }
            _ => rewrite.search(egraph),
        }
    }

    fn apply_rewrite(
        &mut self,
        _iteration: usize,
        egraph: &mut TraEGraph,
        rewrite: &Rewrite<Ia, TraAnalysis>,
        matches: Vec<SearchMatches<Ia>>,
    ) -> usize {
        let Some((nodes, until)) = self.budget else { return rewrite.apply(egraph, &matches).len() };
        let spent =
            |egraph: &TraEGraph| egraph.total_size() > nodes || Instant::now() > until || crate::deadline::expired();
        let mut applied = 0;
        let mut piece: Vec<SearchMatches<Ia>> = Vec::new();
        let mut size = 0;
        let mut flush = |piece: &mut Vec<SearchMatches<Ia>>, egraph: &mut TraEGraph| {
            if spent(egraph) {
                return false;
            }
            applied += rewrite.apply(egraph, piece).len();
            piece.clear();
            true
        };
        for m in matches {
            if m.substs.len() <= APPLY_PIECE {
                size += m.substs.len();
                piece.push(m);
            } else {
                // One class with many matches: in pieces too.
                for substs in m.substs.chunks(APPLY_PIECE) {
                    piece.push(SearchMatches { eclass: m.eclass, substs: substs.to_vec(), ast: m.ast.clone() });
                    if !flush(&mut piece, egraph) {
                        return applied;
                    }
                }
            }
            if size >= APPLY_PIECE {
                size = 0;
                if !flush(&mut piece, egraph) {
                    return applied;
                }
            }
        }
        if !piece.is_empty() {
            flush(&mut piece, egraph);
        }
        applied
    }
}
