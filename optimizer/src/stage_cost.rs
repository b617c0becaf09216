//! Stage costs of e-nodes: the time model's figure for one operator, found
//! in the e-graph before any plan is extracted, so that extraction under
//! `"cost_model": "time"` can prefer plans whose work is spread.
//!
//! A P class's value is exact *with its sites* (see [`crate::egraph`]), so
//! the layout of its tuples (which key on which site) is a class invariant:
//! it is computed once per class, from any of its nodes whose operands'
//! layouts are known ([`crate::loads`] gives the semantics). The stage time
//! of a local operator is then a function of the node alone, exactly as the
//! time model charges it. An exchange's stage time depends on which physical
//! source of its (logical) operand the plan uses, which a cost per e-node
//! cannot know. A node is charged the least over the sources that no
//! exchange made (an input, or local operators on such), if its operand has
//! any, else over all sources but its own class. The least over every source
//! was a lower bound too weak to steer: the cheapest source is mostly one an
//! earlier exchange made (a broadcast operand, replicated in place, needs no
//! shuffle after it), so every exchange cost its latency alone, and with the
//! small latency `tra calibrate` measures extraction chose plans 40% slower
//! by the model's own figures. Extraction then runs once more with each
//! exchange charged from the source the first extraction chose for its
//! operand ([`StageCosts::following`]), which prices the plan's exchanges as
//! it makes them (the streamed weighting tried beside it, exchanges of
//! inputs at their latency alone, found no plan these two did not on the
//! benchmark's shapes, and was dropped for its extraction time). Plans
//! extracted under these costs are re-scored exactly ([`crate::optimize::Scorer`]).
//!
//! An e-node's cost cannot see whether the runtime will stream it: a fused
//! matmul streams only when its join has no other consumer in the plan
//! (see [`crate::time`]), a property of the extracted plan, not of a class.
//! So a streamed pipeline is charged here as its stages one after another:
//! an upper bound of what the exact model charges it (a site never takes
//! longer streamed than in turn, and the pipeline pays one latency per level
//! of exchange instead of one per exchange). Extraction may therefore rank a
//! streamed plan too low; it is still a candidate, as the best plan of its
//! join strategy, and the exact re-scoring prices its overlap. The same
//! holds for exchanges of inputs, which the exact model prices together as
//! one stage and these costs one by one, and for stages that do not wait
//! for each other, which the exact model overlaps and these costs add (an
//! upper bound again). Writing an output into its file
//! ([`Profile::output_bytes_per_second`]) is charged to the `erase(P)`
//! member of the output's L class: the P class is where the plan leaves the
//! output, and its layout (a class invariant) gives the bytes each site
//! writes. It is charged as a stage after the output's operator (the
//! busiest writer), an upper bound again of what the exact model charges
//! where a streamed matmul writes its output as it makes it.

use crate::cost::{node_cost, Cost, Weights};
use crate::egraph::nodes::{ia_op, leaf};
use crate::egraph::{Ia, TraEGraph};
use crate::extract::{Choice, NodeCosts};
use crate::loads::{makes_products, written_per_site, Evaluated, Layout, LoadCache, OpLoads};
use crate::program::IaOp;
use crate::time::{stage_seconds, Profile};
use crate::types::PhysType;
use egg::Id;
use indexmap::IndexMap;
use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;

/// The layouts of the P classes that have one (computed to a fixed point).
struct Layouts<'a> {
    eg: &'a TraEGraph,
    cache: LoadCache,
    of: HashMap<Id, Arc<Layout>>,
    /// The per-site loads of the nodes evaluated for a class's layout, by
    /// node and operand classes: the stage times read them again (loads do
    /// not depend on whether the layout was wanted).
    loads_of: HashMap<(Ia, Vec<Id>), Arc<OpLoads>>,
}

impl<'a> Layouts<'a> {
    fn phys(&self, id: Id) -> Option<&'a PhysType> {
        self.eg[id].data.phys()
    }

    /// Whether a class's blocks are the products of a matrix-product join.
    fn products(&self, class: Id) -> bool {
        self.eg[class].nodes.iter().any(|n| {
            matches!(n, Ia::LJoin(_))
                && ia_op(n, |id| leaf(self.eg, id), &["a", "b"]).is_ok_and(|op: IaOp| makes_products(&op))
        })
    }

    /// The physical sources (`erase(P)`) of an L class whose layout is known.
    fn sources(&self, l: Id) -> Vec<Id> {
        self.eg[l]
            .nodes
            .iter()
            .filter_map(|n| match n {
                Ia::Erase(p) => Some(self.eg.find(*p)),
                _ => None,
            })
            .filter(|p| self.of.contains_key(p))
            .collect()
    }

    /// Evaluate `node` of `class` with operand P classes `args` (in operand
    /// order): its output layout and per-site loads.
    fn eval(&self, node: &Ia, args: &[Id], want_layout: bool) -> Option<Evaluated> {
        let names = ["a", "b"];
        let op: IaOp = ia_op(node, |id| leaf(self.eg, id), &names[..args.len()]).ok()?;
        let mut types: IndexMap<String, PhysType> = IndexMap::new();
        let mut evaluated = Vec::new();
        for (name, a) in names.iter().zip(args) {
            types.insert(name.to_string(), self.phys(*a)?.clone());
            let layout = self.of.get(a)?.clone();
            evaluated.push(Arc::new(Evaluated { layout, loads: Arc::new(Vec::new()), products: self.products(*a) }));
        }
        self.cache.eval_op("(e-graph)", &op, &evaluated, &types, want_layout).ok()
    }

    /// The loads of `node` on operand classes `args`, evaluated now or
    /// when a layout was found with it.
    fn loads(&self, node: &Ia, args: &[Id]) -> Option<Arc<OpLoads>> {
        match self.loads_of.get(&(node.clone(), args.to_vec())) {
            Some(l) => Some(l.clone()),
            None => Some(self.eval(node, args, false)?.loads),
        }
    }

    /// The layout of a class from one of its nodes, if its operands' are
    /// known; the loads of that evaluation are kept for [`Layouts::loads`].
    fn layout_from(&mut self, class: Id, node: &Ia) -> Option<Arc<Layout>> {
        let args = match node {
            Ia::Input(n) => {
                let name = leaf(self.eg, *n).ok()?.as_name().ok()?;
                let decl = self.eg.analysis.inputs.get(name)?;
                return Some(Arc::new(self.cache.input_layout(name, &decl.placement, self.phys(class)?).ok()?));
            }
            Ia::Shuffle([_, l]) | Ia::Broadcast(l) => vec![*self.sources(self.eg.find(*l)).first()?],
            Ia::LJoin([_, _, _, a, b]) => vec![self.eg.find(*a), self.eg.find(*b)],
            Ia::LAgg([_, _, x]) | Ia::LMap([_, _, x]) | Ia::LFilter([_, x]) => vec![self.eg.find(*x)],
            _ => return None,
        };
        let e = self.eval(node, &args, true)?;
        self.loads_of.insert((node.clone(), args), e.loads);
        Some(e.layout)
    }
}

/// Every executable e-node's stage time under `profile` as its cost's
/// `total` (network floats and flops as the network model counts them),
/// each exchange charged from the sources of its operand that no exchange
/// made, and the `erase` members of the `outputs`' classes their writing
/// (see the module docs), or `None` when the request's deadline passed on
/// the way.
pub fn stage_costs<'a>(eg: &'a TraEGraph, profile: &Profile, outputs: &[Id]) -> Option<StageCosts<'a>> {
    let mut layouts = Layouts {
        eg,
        cache: LoadCache::new(eg.analysis.sites, profile.bytes_per_float),
        of: HashMap::default(),
        loads_of: HashMap::default(),
    };
    loop {
        let mut changed = false;
        for class in eg.classes() {
            if crate::deadline::expired() {
                return None;
            }
            if class.data.phys().is_none() || layouts.of.contains_key(&class.id) {
                continue;
            }
            if let Some(l) = class.nodes.iter().find_map(|n| layouts.layout_from(class.id, n)) {
                layouts.of.insert(class.id, l);
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    let unit = Weights { network: 1.0, compute: 0.0 };
    // The P classes some plan makes without any exchange (an input, or a
    // local operator on such classes): where the data is before a plan
    // moves it.
    let mut unmoved: rustc_hash::FxHashSet<Id> = rustc_hash::FxHashSet::default();
    loop {
        let before = unmoved.len();
        for class in eg.classes() {
            if class.data.phys().is_none() || unmoved.contains(&class.id) {
                continue;
            }
            let made_here = class.nodes.iter().any(|n| match n {
                Ia::Input(_) => true,
                Ia::LJoin([_, _, _, a, b]) => unmoved.contains(&eg.find(*a)) && unmoved.contains(&eg.find(*b)),
                Ia::LAgg([_, _, x]) | Ia::LMap([_, _, x]) | Ia::LFilter([_, x]) => unmoved.contains(&eg.find(*x)),
                _ => false,
            });
            if made_here {
                unmoved.insert(class.id);
            }
        }
        if unmoved.len() == before {
            break;
        }
    }
    // The sources an exchange in `class` of L class `l` is charged from:
    // those no exchange made, if there are any. The cheapest source of all
    // is often one an earlier exchange made (a broadcast operand, mapped in
    // place, needs no shuffle after it): charging that while extraction
    // picks the operand's cheapest source (the unmoved one) would price
    // every exchange at its latency alone.
    let read_from = |class: Id, l: Id| {
        let sources: Vec<Id> = layouts.sources(eg.find(l)).into_iter().filter(|p| *p != class).collect();
        let unmoved_sources: Vec<Id> = sources.iter().copied().filter(|p| unmoved.contains(p)).collect();
        if unmoved_sources.is_empty() {
            sources
        } else {
            unmoved_sources
        }
    };
    let outputs: Vec<Id> = outputs.iter().map(|&o| eg.find(o)).collect();
    // Writing an output left as P class `p` into its file: its busiest
    // writer's seconds.
    let write_seconds = |p: Id| -> f64 {
        let (Some(rate), Some(layout), Some(t)) =
            (profile.output_bytes_per_second, layouts.of.get(&p), layouts.phys(p))
        else {
            return 0.0;
        };
        let bytes = t.rel.block_floats().saturating_mul(profile.bytes_per_float);
        let per_site = written_per_site(layout, bytes, eg.analysis.sites);
        let speedup = profile.processor_speedup(per_site.iter().filter(|&&b| b > 0).count());
        per_site.into_iter().max().unwrap_or(0) as f64 / rate / speedup
    };
    let mut in_turn = Vec::new();
    let mut exchanges = Vec::new();
    for class in eg.classes() {
        if crate::deadline::expired() {
            return None;
        }
        for node in &class.nodes {
            let Some(net) = node_cost(eg, class.id, node, unit) else { continue };
            let from = match node {
                Ia::Shuffle([_, l]) | Ia::Broadcast(l) => read_from(class.id, *l),
                _ => Vec::new(),
            };
            let seconds = match node {
                Ia::Shuffle(_) | Ia::Broadcast(_) => from
                    .iter()
                    .filter_map(|src| layouts.loads(node, &[*src]))
                    .map(|loads| stage_seconds(true, &loads, profile).0)
                    .fold(None, |m: Option<f64>, t| Some(m.map_or(t, |m| m.min(t)))),
                Ia::LJoin([_, _, _, a, b]) => layouts
                    .loads(node, &[eg.find(*a), eg.find(*b)])
                    .map(|loads| stage_seconds(false, &loads, profile).0),
                Ia::LAgg([_, _, x]) | Ia::LMap([_, _, x]) => {
                    layouts.loads(node, &[eg.find(*x)]).map(|loads| stage_seconds(false, &loads, profile).0)
                }
                Ia::Erase(p) if outputs.contains(&class.id) => Some(write_seconds(eg.find(*p))),
                _ => Some(0.0),
            };
            // A node whose operands have no layout cannot be in a plan.
            let Some(seconds) = seconds else { continue };
            if let Ia::Shuffle([_, l]) | Ia::Broadcast(l) = node {
                exchanges.push((in_turn.len(), eg.find(*l)));
            }
            in_turn.push((class.id, node.clone(), Cost { total: seconds, ..net }));
        }
    }
    Some(StageCosts { layouts, profile: *profile, in_turn, exchanges })
}

/// The stage costs of an e-graph's nodes ([`stage_costs`]), and what it
/// takes to charge exchanges again from the sources an extraction chose.
pub struct StageCosts<'a> {
    layouts: Layouts<'a>,
    profile: Profile,
    in_turn: Vec<(Id, Ia, Cost)>,
    /// Where the exchanges are in `in_turn`, with their operand's L class.
    exchanges: Vec<(usize, Id)>,
}

impl StageCosts<'_> {
    /// Every stage in turn, each exchange charged from its cheapest source
    /// among those no exchange made.
    pub fn in_turn(&self) -> NodeCosts {
        NodeCosts::from_costs(self.in_turn.clone())
    }

    /// [`StageCosts::in_turn`] with each exchange charged from the source
    /// `choice` made its operand from (the `erase` member it chose), where
    /// it chose one: an exchange's time depends on where its operand's
    /// tuples are, which a cost per e-node cannot know until the operand is
    /// chosen. Extracting again under these costs gives a plan whose
    /// exchanges are priced as the plan makes them.
    pub fn following(&self, choice: &Choice) -> NodeCosts {
        let eg = self.layouts.eg;
        let mut costs = self.in_turn.clone();
        for &(i, l) in &self.exchanges {
            let Some(Ia::Erase(p)) = choice.node(l) else { continue };
            let p = eg.find(*p);
            if p == costs[i].0 {
                continue;
            }
            if let Some(loads) = self.layouts.loads(&costs[i].1, &[p]) {
                costs[i].2.total = stage_seconds(true, &loads, &self.profile).0;
            }
        }
        NodeCosts::from_costs(costs)
    }
}
