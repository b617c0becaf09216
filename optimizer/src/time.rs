//! The time cost model: a plan's predicted seconds on a cluster described by
//! a [`Profile`], from the exact per-site loads of [`crate::loads`].
//!
//! **Stages.** Every operator of a plan is one stage, except the operators
//! of a streamed pipeline and the exchanges of inputs (below), which
//! together are one each. A stage waits for the stages that make its
//! operands (the cluster runtime's local operators wait for their whole
//! input); stages that do not wait for each other run at the same time
//! (timely schedules every operator that has input, and exchanges move bytes
//! while local operators compute). Within a stage the sites work in
//! parallel, so the busiest site bounds it:
//!
//! - an exchange (`shuffle`, `broadcast`) takes `latency + max over sites of
//!   max(bytes_out / link, bytes_in / link)`: each site's link carries its
//!   own traffic in each direction at the profile's bytes per second, and the
//!   slowest site finishes last;
//! - a local operator takes `max over sites of max(flops /
//!   site_flops_per_second, memory_bytes / memory_bytes_per_second)`: a
//!   roofline per site. A kernel call reads its operand blocks and writes its
//!   result ([`crate::loads`] counts the bytes), and a site cannot finish
//!   before its processors have done the flops nor before its memory has
//!   carried the bytes. A matrix product of 256² blocks does ~44 flops per
//!   byte and is bound by flops; an element-wise kernel (a `matAdd` fold
//!   step, a `relu`, the sum in `diag(X+Y)`) does under one flop per 8 bytes
//!   and is bound by memory — pricing it by flops alone under-predicts it
//!   tens of times.
//!
//! **Streamed matmuls overlap their exchanges.** The model follows the
//! cluster runtime (`tra run --processes/--hosts`, the one that moves bytes
//! over links). Its exchanges route every tuple as it arrives, and its local
//! operators wait for their whole input — except one: a fused matmul
//! (`local_aggregate(matAdd)` of a matrix-product `local_join` that has no
//! other consumer and is not an output) whose operands both come straight
//! from inputs (an input, or a `shuffle`/`broadcast` of one), not both
//! replicated. It knows each output block's members before any arrives,
//! starts a block's GEMMs as soon as its members are in, and emits the block
//! when done; a `shuffle` or `broadcast` of its output sends that block on at
//! once. So the operand exchanges, the GEMMs and the output's exchanges run
//! at the same time, and on a site they share its link (each direction) and
//! its processors. Such a **pipeline** is one stage:
//!
//! - per site, `a` (the operand exchanges' link time, the slower direction),
//!   `b` (the join's and the aggregation's compute, the roofline above) and
//!   `c` (the output exchanges' link time); the site's link carries both
//!   exchanges' bytes, so the busiest resource takes
//!   `max((in_a + in_c) / link, (out_a + out_c) / link, b + cpu_a + cpu_c)`,
//!   where `cpu_x` is the processor time of moving exchange `x`'s bytes
//!   ([`Profile::exchange_cpu_bytes_per_second`], 0 without it): the site's
//!   processors run the GEMMs and move the bytes. Over loopback moving bytes
//!   is all processor work, and the GEMMs wait for it (measured: a streamed
//!   matmul predicted at 0.75–0.8× its time without this term); over a
//!   network link slower than the processors it is a small share;
//! - plus the fill and drain of a pipeline of `g` output blocks:
//!   `(a + b + c − max(a, b, c)) / g`, where `g` is the number of output
//!   blocks per site that computes (all of them, spread evenly) (the first block's members must
//!   arrive before its GEMMs, the last block's GEMMs end before it is sent);
//!   a site's time never exceeds `a + b + c`, what it takes unstreamed;
//! - plus one latency per level of exchange (operand exchanges, output
//!   exchanges), the busiest site bounding the stage.
//!
//! A `broadcast` operand is overlapped like a shuffled one: the runtime
//! routes a broadcast tuple by tuple (each process's leader passes every
//! tuple on to its workers as it arrives), and the pipeline starts an output
//! block once its members are in, replicated or not.
//!
//! **Exchanges of inputs run together.** Every input is read when the job
//! starts, and the exchanges that read one (outside a pipeline) route its
//! tuples at the same time, on the same links: they are one stage, each
//! site's bytes summed over them, one latency, named after the exchange that
//! moves the most at its busiest site. Summing them as stages in turn would
//! charge a latency per exchange and add the busiest site of each even where
//! different sites are busy in each (a broadcast from one site beside a
//! shuffle to another). Every other operator is a stage of its own.
//!
//! **Stages that do not wait for each other overlap.** A plan takes the
//! job's fixed time ([`Profile::job_overhead_seconds`], once) plus the
//! longest of:
//! - its **critical path**: the longest chain of stages each waiting for the
//!   one before, each stage taking its own time (below);
//! - its **busiest resource**: per site, the seconds its incoming link, its
//!   outgoing link and its processors are busy, summed over every stage (a
//!   local stage's roofline time is processor time, and so is moving an
//!   exchange's bytes); the most of these over sites and resources. Two
//!   branches that run at the same time still share a site's link and
//!   cores;
//! - its **fixed exchange times**: the latencies of all its stages summed.
//!   They do not overlap: measured on two processes over loopback (with 7 ms
//!   taken as the latency then, which was mostly the job's fixed time),
//!   `diag(X+Y)` with two concurrent shuffles of filtered inputs took 13.2 ms
//!   where one broadcast took 12.1 ms; overlapping the shuffles' latencies
//!   predicted 10.3 ms and ranked it first.
//!
//! A plan whose stages form one chain takes the sum of its stages' times,
//! and no plan takes more. Why: on 3 sites over 300 Mbit/s links, the
//! chosen plans of a 3-matmul chain and of an FFNN step, which exchange
//! intermediates, were predicted at 1.19–1.38× their time with stages in
//! turn (the exchange of one branch runs while another computes);
//! overlapped, at 0.89–1.16×; `diag(X+Y)`'s two shuffles of filtered inputs
//! were predicted at 0.186 s against 0.111 s measured, now 0.112 s. The thread runtime streams nothing (its site threads step
//! in lockstep, a barrier between steps), so for it the model is optimistic;
//! its exchanges are memory copies, not links, and the profile is the
//! cluster's. Why streamed pipelines: measured on two processes over
//! loopback, the shuffle of a streamed
//! matmul's partial sums spent almost none of its wire time on its own, and
//! pricing it and the operand shuffles after the GEMMs ranked an unfused
//! plan ahead of a faster streamed one.
//!
//! **Writing outputs.** `tra run --output` on processes or hosts has every
//! site write the blocks of its own tuples of each output into the output's
//! file (site 0 also the replicated ones), on a thread of its own that also
//! checksums them, while the dataflow runs. With
//! [`Profile::output_bytes_per_second`], per site, the bytes it writes over
//! that rate are processor time (the copy into the file's pages is done by
//! its cores). A dense output is priced by its bytes too, however the sites'
//! blocks share the file's pages: written by block columns (each 4 KiB page
//! shared by two sites) a 4096² output took as long as by block rows, and
//! each site's writing as much processor time (`bench/cluster/dense_writes.py`;
//! a site maps a page another one faulted in, it does not fill it again).
//! An output that a streamed pipeline makes is written as its
//! blocks are made: the writing is more work for the pipeline's processors
//! (beside its GEMMs and the moving of its exchanges' bytes), overlapping its
//! link time. Any other output is written after the operator that makes it,
//! a stage of its own, the busiest site bounding it. Measured on two
//! processes over loopback, the busiest site's writing thread was busy
//! 34–63 ms of a 64 MiB dense output's 0.21–0.45 s plans, which the model
//! without it under-predicted at 0.65–0.91×. Without the rate, writes cost
//! nothing (as outputs returned in memory do, `POST /v1/execute`).
//!
//! **Sites sharing a machine.** The profile's rates are those of the sites
//! it was measured on computing at once. With
//! [`Profile::machine_processors`], [`Profile::site_threads`] and
//! [`Profile::machine_sites`] (every site on one machine), a stage in which
//! fewer sites have processor work gives each of them more of the machine
//! where the sites' threads outnumber its processors
//! ([`Profile::processor_speedup`]): three processes of two kernel threads
//! on two processors computed a local matmul on one site in 0.059 s, which
//! the rate of all three at once put at 0.131 s.
//!
//! The **bottleneck** of a plan is the stage that takes longest, with its
//! busiest site and the resource (`compute`, `memory`, `link_in`,
//! `link_out`, `write`) that bounds that site.

use crate::kernel::KernelRef;
use crate::loads::{makes_products, OpLoads, SiteLoad, Writes};
use crate::program::{IaOp, InputDecl, Operator as _, PlacementDecl, Plan};
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Which figure the optimizer minimizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CostModel {
    /// The paper's `α·network_floats + β·flops`.
    #[default]
    Network,
    /// Predicted seconds under the cluster's [`Profile`].
    Time,
}

impl CostModel {
    /// The name the API uses.
    pub fn as_str(&self) -> &'static str {
        match self {
            CostModel::Network => "network",
            CostModel::Time => "time",
        }
    }
}

/// The speeds of a cluster that the time model uses (`tra calibrate`
/// measures them).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Bytes per second of each site's own link, in each direction.
    #[serde(default = "default_link")]
    pub link_bytes_per_second: f64,
    /// Floating-point operations per second of each site.
    #[serde(default = "default_flops")]
    pub site_flops_per_second: f64,
    /// Bytes per second that one site's kernel calls read and write in
    /// memory (`tra calibrate`: a `matAdd` aggregation of blocks, an
    /// element-wise kernel, over the bytes it reads and writes). Optional:
    /// profiles without it get the default, 1e10 (10 GB/s, one core's
    /// streaming rate on current servers).
    #[serde(default = "default_memory")]
    pub memory_bytes_per_second: f64,
    /// Fixed time of one exchange (shuffle or broadcast) of ready operands,
    /// in seconds (`tra calibrate`: the later shuffles of a chain of small
    /// ones, or a large shuffle's intercept against its bytes if more).
    #[serde(default = "default_latency")]
    pub latency_seconds: f64,
    /// Fixed time of a job, once per plan whatever it does, in seconds:
    /// starting the dataflow on every process and their agreeing that each
    /// operator has finished (`tra calibrate`: a plan of one local operator
    /// on one float per site). It moves every plan's seconds alike, so it
    /// changes no ranking but the 5% within which plans are not told apart,
    /// and makes small plans' predictions comparable with measured times.
    /// Optional: without it, 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_overhead_seconds: Option<f64>,
    /// Bytes of one float on the wire.
    #[serde(default = "default_bytes_per_float")]
    pub bytes_per_float: u64,
    /// Bytes a site exchanges (sent and received alike) per second of its
    /// processors' time: what moving bytes costs the processors that also
    /// run the kernels (`tra calibrate`: the processor time of the job
    /// processes over a shuffle's bytes, divided among a process's kernel
    /// threads; that job's reading of its input and writing of its output
    /// included, which over loopback is most of it). Where links are slower
    /// than that (a real network), an
    /// exchange mostly waits on its link and runs beside the GEMMs of a
    /// streamed matmul; over loopback it is the processors that move the
    /// bytes, so those GEMMs wait for them. Optional: without it exchanges
    /// cost no processor time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exchange_cpu_bytes_per_second: Option<f64>,
    /// Bytes per second one site writes of a plan output into the output's
    /// file (`tra run --output`, on processes or hosts: each site's writing
    /// thread copies its blocks into the file and checksums them; `tra
    /// calibrate`: the busy time of those threads over the bytes they wrote,
    /// a dense output). Processor time of the site: inside the streamed
    /// pipeline that makes the output, else a stage after the operator that
    /// makes it. Optional: without it
    /// outputs are written for free (as they are when returned in memory,
    /// `POST /v1/execute`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_bytes_per_second: Option<f64>,
    /// The processors of the one machine every site runs on, when they share
    /// one (`tra calibrate` of processes, or of hosts that are all on one
    /// machine). With [`Profile::site_threads`] and
    /// [`Profile::machine_sites`]: the calibrated rates are those of the
    /// measured sites computing at once; where fewer compute, each gets more
    /// of the machine ([`Profile::processor_speedup`]). Optional.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_processors: Option<u32>,
    /// Kernel threads of each site (`tra calibrate`: those of its job
    /// processes). Optional; used with [`Profile::machine_processors`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site_threads: Option<u32>,
    /// The sites on that machine when the rates were measured (`tra
    /// calibrate`: its processes). Optional; used with
    /// [`Profile::machine_processors`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_sites: Option<u32>,
}

fn default_link() -> f64 {
    1.25e9
}
fn default_flops() -> f64 {
    1.0e11
}
fn default_memory() -> f64 {
    1.0e10
}
fn default_latency() -> f64 {
    1e-4
}
fn default_bytes_per_float() -> u64 {
    4
}

impl Default for Profile {
    fn default() -> Self {
        Profile {
            link_bytes_per_second: default_link(),
            site_flops_per_second: default_flops(),
            memory_bytes_per_second: default_memory(),
            latency_seconds: default_latency(),
            job_overhead_seconds: None,
            bytes_per_float: default_bytes_per_float(),
            exchange_cpu_bytes_per_second: None,
            output_bytes_per_second: None,
            machine_processors: None,
            site_threads: None,
            machine_sites: None,
        }
    }
}

/// The longest latency or job overhead a profile may state (a day): longer
/// ones could only be a mistake, and would overflow predicted times.
pub const MAX_SECONDS: f64 = 86_400.0;

impl Profile {
    /// What is wrong with the profile, as `(field, message)`, if anything.
    /// Rates are at least 1 per second and times at most [`MAX_SECONDS`], so
    /// that every predicted time is a finite number (a rate of 1e-308 made
    /// every plan's seconds infinite, reported as `null`, and the choice
    /// among them arbitrary).
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        let positive = |name: &'static str, v: f64| {
            if v.is_finite() && v >= 1.0 {
                Ok(())
            } else {
                Err((name, format!("profile.{name} must be a finite rate of at least 1 per second, got {v:?}")))
            }
        };
        positive("link_bytes_per_second", self.link_bytes_per_second)?;
        positive("site_flops_per_second", self.site_flops_per_second)?;
        positive("memory_bytes_per_second", self.memory_bytes_per_second)?;
        if let Some(rate) = self.exchange_cpu_bytes_per_second {
            positive("exchange_cpu_bytes_per_second", rate)?;
        }
        if let Some(rate) = self.output_bytes_per_second {
            positive("output_bytes_per_second", rate)?;
        }
        for (name, t) in
            [("latency_seconds", Some(self.latency_seconds)), ("job_overhead_seconds", self.job_overhead_seconds)]
        {
            if let Some(t) = t.filter(|t| !(0.0..=MAX_SECONDS).contains(t)) {
                return Err((name, format!("profile.{name} must be between 0 and {MAX_SECONDS} seconds, got {t:?}")));
            }
        }
        for (name, v) in [
            ("machine_processors", self.machine_processors),
            ("site_threads", self.site_threads),
            ("machine_sites", self.machine_sites),
        ] {
            if v == Some(0) {
                return Err((name, format!("profile.{name} must be at least 1, got 0")));
            }
        }
        if !(1..=16).contains(&self.bytes_per_float) {
            return Err((
                "bytes_per_float",
                format!("profile.bytes_per_float must be between 1 and 16, got {}", self.bytes_per_float),
            ));
        }
        Ok(())
    }

    /// How many times the calibrated rates a site's processors work at in a
    /// stage where `computing` sites have processor work, with
    /// [`Profile::machine_processors`] `C`, [`Profile::site_threads`] `k`
    /// and [`Profile::machine_sites`] `n` (1 without all three). The rates
    /// were measured with the `n` sites computing at once, `min(k, C / n)`
    /// processors each; where `m` compute, each gets `min(k, C / m)`. Never
    /// less than 1 (a request for more sites than were measured gets the
    /// measured rates). Only where the sites' threads outnumber the
    /// machine's processors does this differ from 1: three processes of two
    /// kernel threads on two processors (the emulated network's namespaces)
    /// compute alone at three times the rate of all three at once; two
    /// processes of one thread on two processors (`tra run --processes 2`)
    /// never faster.
    pub fn processor_speedup(&self, computing: usize) -> f64 {
        let (Some(c), Some(k), Some(n)) = (self.machine_processors, self.site_threads, self.machine_sites) else {
            return 1.0;
        };
        if computing == 0 {
            return 1.0;
        }
        let share = |m: f64| f64::from(k).min(f64::from(c) / m);
        (share(computing as f64) / share(f64::from(n))).max(1.0)
    }

    /// The processor time a site spends exchanging `load`'s bytes (half a
    /// byte's cost to send it, half to receive it), 0 without
    /// [`Profile::exchange_cpu_bytes_per_second`].
    pub fn exchange_cpu_seconds(&self, load: &SiteLoad) -> f64 {
        match self.exchange_cpu_bytes_per_second {
            Some(rate) => (load.bytes_in + load.bytes_out) as f64 / (2.0 * rate),
            None => 0.0,
        }
    }
}

/// The resource that bounds a site in a stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Resource {
    /// Its processors (the flops of its kernel calls).
    Compute,
    /// Its memory (the bytes its kernel calls read and write).
    Memory,
    /// Its incoming link.
    LinkIn,
    /// Its outgoing link.
    LinkOut,
    /// Writing an output's blocks into its file.
    Write,
}

/// The stage, site and resource that bound a plan's predicted time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Bottleneck {
    /// The operator (plan node name).
    pub node: String,
    /// The busiest site of that stage.
    pub site: usize,
    /// What bounds that site.
    pub resource: Resource,
    /// The stage's predicted seconds.
    pub seconds: f64,
}

/// A stage's predicted seconds, its busiest site and the resource that
/// bounds that site.
type StageTime = (f64, usize, Resource);

/// The predicted time of one stage: seconds, busiest site, bounding resource.
pub fn stage_seconds(exchange: bool, loads: &[SiteLoad], p: &Profile) -> (f64, usize, Resource) {
    let mut best = (0.0, 0, if exchange { Resource::LinkOut } else { Resource::Compute });
    let speedup = stage_speedup(exchange, loads, p);
    for (site, l) in loads.iter().enumerate() {
        let candidates = if exchange {
            let b = busy(true, l, p);
            [
                (b.link_out, Resource::LinkOut),
                (b.link_in, Resource::LinkIn),
                (b.processors / speedup, Resource::Compute),
            ]
        } else {
            let (t, r) = local_seconds(l, p);
            [(t / speedup, r), (0.0, Resource::Compute), (0.0, Resource::Compute)]
        };
        for (t, r) in candidates {
            if t > best.0 {
                best = (t, site, r);
            }
        }
    }
    if exchange {
        best.0 += p.latency_seconds;
    }
    best
}

/// A streamed fused matmul and the exchanges that run with it (see the
/// module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pipeline {
    /// The fused `local_aggregate` (the stage is named after it).
    pub aggregate: String,
    /// The matrix-product `local_join` it computes.
    pub join: String,
    /// Shuffles and broadcasts of inputs that feed the join, overlapped with
    /// the GEMMs.
    pub operand_exchanges: Vec<String>,
    /// Shuffles and broadcasts of the aggregation's output, overlapped with
    /// the GEMMs.
    pub output_exchanges: Vec<String>,
    /// Output blocks of the aggregation (over all sites).
    pub output_blocks: u64,
}

/// The streamed pipelines of a plan: the fused matmuls that the cluster
/// runtime computes while their operands arrive (the runtime's own
/// conditions, see the module docs), with their overlapped exchanges. An
/// exchange belongs to one pipeline at most.
pub fn streamed_pipelines(plan: &Plan) -> Vec<Pipeline> {
    let mut consumers: HashMap<&str, usize> = HashMap::new();
    for op in plan.nodes.values() {
        for operand in op.operands() {
            *consumers.entry(operand).or_default() += 1;
        }
    }
    // An operand straight from an input: (its input, replicated?, the shuffle
    // that carries it).
    let from_input = |name: &str| -> Option<(&InputDecl, bool, Option<String>)> {
        if let Some(decl) = plan.inputs.get(name) {
            return Some((decl, decl.placement == PlacementDecl::Replicated, None));
        }
        match plan.nodes.get(name)? {
            IaOp::Shuffle { input, .. } => Some((plan.inputs.get(input)?, false, Some(name.to_string()))),
            IaOp::Broadcast { input } => Some((plan.inputs.get(input)?, true, Some(name.to_string()))),
            _ => None,
        }
    };
    let mut claimed: HashSet<String> = HashSet::new();
    let mut out = Vec::new();
    for (name, op) in &plan.nodes {
        let IaOp::LocalAggregate { input, group_by, kernel } = op else { continue };
        let Some(join @ IaOp::LocalJoin { left, right, right_keys, .. }) = plan.nodes.get(input) else { continue };
        let fused = matches!(kernel, KernelRef::Named { name, args } if name == "matAdd" && args.is_empty())
            && makes_products(join)
            && consumers.get(input.as_str()) == Some(&1)
            && !plan.outputs.iter().any(|o| o == input);
        let (Some(l), Some(r)) = (from_input(left), from_input(right)) else { continue };
        if !fused || (l.1 && r.1) {
            continue;
        }
        // The join's key: the left key, then the right key's dims not joined on.
        let bounds: Vec<i64> =
            l.0.key_bounds
                .iter()
                .copied()
                .chain(r.0.key_bounds.iter().enumerate().filter(|(d, _)| !right_keys.contains(d)).map(|(_, b)| *b))
                .collect();
        let output_blocks =
            group_by.iter().map(|&d| bounds.get(d).copied().unwrap_or(1).max(1) as u64).fold(1u64, u64::saturating_mul);
        let mut take = |n: &str| claimed.insert(n.to_string()).then(|| n.to_string());
        let operand_exchanges = [l.2, r.2].into_iter().flatten().filter_map(|s| take(&s)).collect::<Vec<_>>();
        let output_exchanges = plan
            .nodes
            .iter()
            .filter(|(_, o)| matches!(o, IaOp::Shuffle { input: x, .. } | IaOp::Broadcast { input: x } if x == name))
            .filter_map(|(n, _)| take(n))
            .collect();
        out.push(Pipeline {
            aggregate: name.clone(),
            join: input.clone(),
            operand_exchanges,
            output_exchanges,
            output_blocks,
        });
    }
    out
}

/// The predicted time of a streamed pipeline from the loads of its members
/// (see the module docs): seconds, busiest site, bounding resource.
pub fn pipeline_seconds(
    pipeline: &Pipeline,
    loads: &IndexMap<String, Arc<OpLoads>>,
    p: &Profile,
) -> (f64, usize, Resource) {
    pipeline_stage(pipeline, loads, &[], p).0
}

/// A streamed pipeline's predicted time ([`pipeline_seconds`]) and every
/// site's [`Busy`] in it: its link carries the operand and output
/// exchanges, its processors run the GEMMs and move those bytes.
fn pipeline_stage(
    pipeline: &Pipeline,
    loads: &IndexMap<String, Arc<OpLoads>>,
    writing: &[f64],
    p: &Profile,
) -> ((f64, usize, Resource), Vec<Busy>) {
    let sites = loads.values().map(|l| l.len()).max().unwrap_or(0);
    let sum = |names: &mut dyn Iterator<Item = &String>| -> Vec<SiteLoad> {
        let mut total = vec![SiteLoad::default(); sites];
        for n in names {
            for (t, l) in total.iter_mut().zip(loads.get(n).map(|l| l.as_slice()).unwrap_or(&[])) {
                *t += *l;
            }
        }
        total
    };
    let operands = sum(&mut pipeline.operand_exchanges.iter());
    let local = sum(&mut [&pipeline.join, &pipeline.aggregate].into_iter());
    let outputs = sum(&mut pipeline.output_exchanges.iter());
    let link = |bytes: u64| bytes as f64 / p.link_bytes_per_second;
    let computing = local.iter().filter(|l| l.flops > 0 || l.memory_bytes > 0).count().max(1) as u64;
    let g = pipeline.output_blocks.div_ceil(computing).max(1) as f64;
    let mut best = (0.0, 0, Resource::Compute);
    let mut busy = Vec::with_capacity(sites);
    // The sites whose processors work in the pipeline, and how much faster
    // than the calibrated rates they do where a machine is shared.
    let working = (0..sites)
        .filter(|&s| {
            uses_processors(false, &local[s])
                || uses_processors(true, &operands[s])
                || uses_processors(true, &outputs[s])
                || writing.get(s).is_some_and(|&w| w > 0.0)
        })
        .count();
    let speedup = p.processor_speedup(working);
    for site in 0..sites {
        let (o, l, x) = (operands[site], local[site], outputs[site]);
        let (cpu_a, cpu_c) = (p.exchange_cpu_seconds(&o) / speedup, p.exchange_cpu_seconds(&x) / speedup);
        let a = link(o.bytes_in).max(link(o.bytes_out)).max(cpu_a);
        // The site's kernels at the calibrated rates, then the pipeline's
        // speedup (not `stage_seconds` of the site alone, which would take
        // it for the only one computing).
        let (gemms, compute) = local_seconds(&l, p);
        let gemms = gemms / speedup;
        // Writing the pipeline's outputs as their blocks are made: more
        // work for the site's processors.
        let w = writing.get(site).copied().unwrap_or(0.0) / speedup;
        let b = gemms + w;
        let c = link(x.bytes_in).max(link(x.bytes_out)).max(cpu_c);
        // The site's processors run the GEMMs and move the exchanges' bytes.
        busy.push(Busy {
            link_in: link(o.bytes_in + x.bytes_in),
            link_out: link(o.bytes_out + x.bytes_out),
            processors: b + cpu_a + cpu_c,
        });
        let mut bound = (b + cpu_a + cpu_c, if w > gemms + cpu_a + cpu_c { Resource::Write } else { compute });
        for (t, r) in
            [(link(o.bytes_in + x.bytes_in), Resource::LinkIn), (link(o.bytes_out + x.bytes_out), Resource::LinkOut)]
        {
            if t > bound.0 {
                bound = (t, r);
            }
        }
        let fill = (a + b + c - a.max(b).max(c)) / g;
        let t = (bound.0 + fill).min(a + b + c);
        if t > best.0 {
            best = (t, site, bound.1);
        }
    }
    let levels = [!pipeline.operand_exchanges.is_empty(), !pipeline.output_exchanges.is_empty()];
    best.0 += levels.iter().filter(|&&l| l).count() as f64 * p.latency_seconds;
    (best, busy)
}

/// The stage of exchanges that run at the same time: every site's loads
/// summed over them, one latency (they start together), named after the
/// exchange that moves the most bytes at the busiest site, with every
/// site's summed loads. `None` for no exchange.
fn concurrent_exchanges(exchanges: &[(&String, &OpLoads)], p: &Profile) -> Option<(String, StageTime, Vec<SiteLoad>)> {
    let sites = exchanges.iter().map(|(_, l)| l.len()).max()?;
    let mut total = vec![SiteLoad::default(); sites];
    for (_, l) in exchanges {
        for (t, x) in total.iter_mut().zip(l.iter()) {
            *t += *x;
        }
    }
    let (t, site, resource) = stage_seconds(true, &total, p);
    let moved = |l: &SiteLoad| match resource {
        Resource::LinkIn => l.bytes_in,
        Resource::LinkOut => l.bytes_out,
        _ => l.bytes_in + l.bytes_out,
    };
    let (name, _) = exchanges.iter().max_by_key(|(_, l)| l.get(site).map_or(0, moved))?;
    Some(((*name).clone(), (t, site, resource), total))
}

/// How long a site's resources are busy in one stage, in seconds: its
/// incoming link, its outgoing link and its processors (kernels, memory
/// traffic and the moving of exchanged bytes, which the same cores do).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Busy {
    link_in: f64,
    link_out: f64,
    processors: f64,
}

impl std::ops::AddAssign for Busy {
    fn add_assign(&mut self, o: Busy) {
        self.link_in += o.link_in;
        self.link_out += o.link_out;
        self.processors += o.processors;
    }
}

/// A site's [`Busy`] in an exchange stage (`exchange`) or a local one.
fn busy(exchange: bool, l: &SiteLoad, p: &Profile) -> Busy {
    if exchange {
        Busy {
            link_in: l.bytes_in as f64 / p.link_bytes_per_second,
            link_out: l.bytes_out as f64 / p.link_bytes_per_second,
            processors: p.exchange_cpu_seconds(l),
        }
    } else {
        Busy { processors: local_seconds(l, p).0, ..Busy::default() }
    }
}

/// Whether a site's load in an exchange stage (`exchange`) or a local one
/// takes its processors at all (see [`Profile::processor_speedup`]).
fn uses_processors(exchange: bool, l: &SiteLoad) -> bool {
    if exchange {
        l.bytes_in > 0 || l.bytes_out > 0
    } else {
        l.flops > 0 || l.memory_bytes > 0
    }
}

/// How much faster than the calibrated rates the sites' processors work in
/// one stage ([`Profile::processor_speedup`] of the sites it busies).
fn stage_speedup(exchange: bool, loads: &[SiteLoad], p: &Profile) -> f64 {
    p.processor_speedup(loads.iter().filter(|l| uses_processors(exchange, l)).count())
}

/// A site's kernel calls at the calibrated rates: the slower of its flops
/// and its memory bytes, and which one that is.
fn local_seconds(l: &SiteLoad, p: &Profile) -> (f64, Resource) {
    let (flops, memory) = (l.flops as f64 / p.site_flops_per_second, l.memory_bytes as f64 / p.memory_bytes_per_second);
    if memory > flops {
        (memory, Resource::Memory)
    } else {
        (flops, Resource::Compute)
    }
}

/// Every site's [`Busy`] in one stage, its processors' time shortened where
/// fewer sites of a shared machine compute ([`Profile::processor_speedup`]).
fn busy_of_stage(exchange: bool, loads: &[SiteLoad], p: &Profile) -> Vec<Busy> {
    let speedup = stage_speedup(exchange, loads, p);
    loads
        .iter()
        .map(|l| {
            let b = busy(exchange, l, p);
            Busy { processors: b.processors / speedup, ..b }
        })
        .collect()
}

/// A stage of a plan: its name, its predicted time, every site's [`Busy`],
/// and the plan operators it holds.
struct Stage<'a> {
    name: String,
    time: (f64, usize, Resource),
    busy: Vec<Busy>,
    members: Vec<&'a str>,
    /// Plan operators it waits for besides its members' operands (an
    /// output's writing waits for the output).
    after: Option<&'a str>,
    /// The fixed time of its exchanges ([`Profile::latency_seconds`] per
    /// level of exchange).
    latency: f64,
}

/// A plan's predicted seconds and its bottleneck, from the loads of its
/// operators and the bytes each site writes of each output (`writes`, see
/// [`crate::loads::LoadCache::plan_loads_and_writes`]; priced only with
/// [`Profile::output_bytes_per_second`]) (see the module docs): the job's
/// fixed time ([`Profile::job_overhead_seconds`]) and the longest of the
/// stages' critical path, the busiest site's most loaded resource over all
/// stages and their latencies summed; the bottleneck is the longest stage.
/// A plan without operators takes no time and has no bottleneck.
pub fn plan_seconds(
    plan: &Plan,
    loads: &IndexMap<String, Arc<OpLoads>>,
    writes: &Writes,
    p: &Profile,
) -> (f64, Option<Bottleneck>) {
    let pipelines = streamed_pipelines(plan);
    let member: HashSet<&str> = pipelines
        .iter()
        .flat_map(|pl| pl.operand_exchanges.iter().chain(&pl.output_exchanges).chain([&pl.join, &pl.aggregate]))
        .map(String::as_str)
        .collect();
    let per_site = |exchange: bool, l: &OpLoads| busy_of_stage(exchange, l, p);
    let mut stages: Vec<Stage> = Vec::new();
    // Exchanges of the plan's inputs (outside pipelines): one stage together.
    let mut of_inputs: Vec<(&String, &OpLoads)> = Vec::new();
    for (name, l) in loads {
        if member.contains(name.as_str()) {
            continue;
        }
        let exchange = match plan.nodes.get(name) {
            Some(IaOp::Shuffle { input, .. } | IaOp::Broadcast { input }) if plan.inputs.contains_key(input) => {
                of_inputs.push((name, l));
                continue;
            }
            Some(IaOp::Shuffle { .. } | IaOp::Broadcast { .. }) => true,
            _ => false,
        };
        stages.push(Stage {
            name: name.clone(),
            time: stage_seconds(exchange, l, p),
            busy: per_site(exchange, l),
            members: vec![name.as_str()],
            after: None,
            latency: if exchange { p.latency_seconds } else { 0.0 },
        });
    }
    if let Some((name, time, total)) = concurrent_exchanges(&of_inputs, p) {
        let members = of_inputs.iter().map(|(n, _)| n.as_str()).collect();
        stages.push(Stage {
            name,
            time,
            busy: per_site(true, &total),
            members,
            after: None,
            latency: p.latency_seconds,
        });
    }
    // Writing each output into its file: inside the streamed pipeline that
    // makes it, else a stage after the operator that makes it.
    let mut pipeline_writes: Vec<Vec<f64>> = vec![Vec::new(); pipelines.len()];
    if let Some(rate) = p.output_bytes_per_second {
        for (name, per_site) in writes {
            let seconds = per_site.iter().map(|&b| b as f64 / rate);
            let made_by = pipelines.iter().position(|pl| {
                pl.operand_exchanges
                    .iter()
                    .chain(&pl.output_exchanges)
                    .chain([&pl.join, &pl.aggregate])
                    .any(|m| m == name)
            });
            if let Some(i) = made_by {
                let w = &mut pipeline_writes[i];
                w.resize(w.len().max(per_site.len()), 0.0);
                w.iter_mut().zip(seconds).for_each(|(t, s)| *t += s);
                continue;
            }
            let writers = per_site.iter().filter(|&&b| b > 0).count();
            let speedup = p.processor_speedup(writers);
            let busy: Vec<Busy> = seconds.map(|t| Busy { processors: t / speedup, ..Busy::default() }).collect();
            let (site, longest) =
                busy.iter()
                    .enumerate()
                    .fold((0, 0.0), |best, (i, b)| if b.processors > best.1 { (i, b.processors) } else { best });
            stages.push(Stage {
                name: name.clone(),
                time: (longest, site, Resource::Write),
                busy,
                members: Vec::new(),
                after: Some(name.as_str()),
                latency: 0.0,
            });
        }
    }
    for (pl, writing) in pipelines.iter().zip(&pipeline_writes) {
        let members = pl.operand_exchanges.iter().chain(&pl.output_exchanges).chain([&pl.join, &pl.aggregate]);
        let (time, busy) = pipeline_stage(pl, loads, writing, p);
        stages.push(Stage {
            name: pl.aggregate.clone(),
            time,
            busy,
            members: members.map(String::as_str).collect(),
            after: None,
            latency: [!pl.operand_exchanges.is_empty(), !pl.output_exchanges.is_empty()].iter().filter(|&&l| l).count()
                as f64
                * p.latency_seconds,
        });
    }
    let total =
        if stages.is_empty() { 0.0 } else { p.job_overhead_seconds.unwrap_or(0.0) + overlapped_seconds(plan, &stages) };
    let worst = stages
        .iter()
        .fold(None::<&Stage>, |w, s| if w.is_none_or(|w| s.time.0 > w.time.0) { Some(s) } else { w })
        .map(|s| Bottleneck { node: s.name.clone(), site: s.time.1, resource: s.time.2, seconds: s.time.0 });
    (total, worst)
}

/// The time of a plan's stages where those that do not wait for each other
/// run at the same time (see the module docs): the longest of the longest
/// chain of stages each waiting for the one before, the most any site's
/// resource is busy over all stages, and the stages' latencies summed.
/// Never more than the stages' sum.
fn overlapped_seconds(plan: &Plan, stages: &[Stage]) -> f64 {
    let owner: HashMap<&str, usize> =
        stages.iter().enumerate().flat_map(|(i, s)| s.members.iter().map(move |&m| (m, i))).collect();
    // The stages each stage's results go to, and how many it waits for.
    let mut feeds: Vec<Vec<usize>> = vec![Vec::new(); stages.len()];
    let mut waiting = vec![0usize; stages.len()];
    for (i, s) in stages.iter().enumerate() {
        let mut deps: Vec<usize> = s
            .members
            .iter()
            .filter_map(|m| plan.nodes.get(*m))
            .flat_map(|op| op.operands())
            .chain(s.after.iter().copied())
            .filter_map(|o| owner.get(o).copied())
            .filter(|&d| d != i)
            .collect();
        deps.sort_unstable();
        deps.dedup();
        waiting[i] = deps.len();
        for d in deps {
            feeds[d].push(i);
        }
    }
    // Longest path ending at each stage, in an order where a stage comes
    // after those it waits for (a plan has no cycle; a stage on one would
    // never be ready and adds nothing).
    let mut start = vec![0.0f64; stages.len()];
    let mut ready: Vec<usize> = (0..stages.len()).filter(|&i| waiting[i] == 0).collect();
    let mut critical_path = 0.0f64;
    while let Some(i) = ready.pop() {
        let end = start[i] + stages[i].time.0;
        critical_path = critical_path.max(end);
        for &j in &feeds[i] {
            start[j] = start[j].max(end);
            waiting[j] -= 1;
            if waiting[j] == 0 {
                ready.push(j);
            }
        }
    }
    let sites = stages.iter().map(|s| s.busy.len()).max().unwrap_or(0);
    let mut most_busy = 0.0f64;
    for site in 0..sites {
        let mut b = Busy::default();
        for s in stages {
            if let Some(x) = s.busy.get(site) {
                b += *x;
            }
        }
        most_busy = most_busy.max(b.link_in).max(b.link_out).max(b.processors);
    }
    let latencies: f64 = stages.iter().map(|s| s.latency).sum();
    critical_path.max(most_busy).max(latencies)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(bytes_out: u64, bytes_in: u64, flops: u64) -> SiteLoad {
        SiteLoad { bytes_out, bytes_in, flops, ..SiteLoad::default() }
    }

    fn local(flops: u64, memory_bytes: u64) -> SiteLoad {
        SiteLoad { flops, memory_bytes, ..SiteLoad::default() }
    }

    #[test]
    fn a_local_stage_is_priced_by_the_slower_of_its_flops_and_its_memory_bytes() {
        let p = Profile { site_flops_per_second: 10.0, memory_bytes_per_second: 100.0, ..Profile::default() };
        // Compute-bound: 40 flops (4 s) over 100 bytes (1 s).
        assert_eq!(stage_seconds(false, &[local(40, 100)], &p), (4.0, 0, Resource::Compute));
        // Memory-bound: 10 flops (1 s) over 600 bytes (6 s).
        assert_eq!(stage_seconds(false, &[local(10, 600)], &p), (6.0, 0, Resource::Memory));
        // Per site, then the busiest: site 0 is compute-bound at 3 s, site 1
        // memory-bound at 5 s; the stage takes 5 s, not 3 + 5 nor 8 s of flops.
        assert_eq!(stage_seconds(false, &[local(30, 200), local(10, 500)], &p), (5.0, 1, Resource::Memory));
        // Memory bytes never price an exchange, and link bytes never a local stage.
        let q = Profile { latency_seconds: 0.0, link_bytes_per_second: 100.0, ..p };
        assert_eq!(stage_seconds(true, &[SiteLoad { memory_bytes: 1000, ..load(100, 0, 0) }], &q).0, 1.0);
        assert_eq!(stage_seconds(false, &[load(1000, 1000, 0)], &q).0, 0.0);
    }

    #[test]
    fn a_profile_without_a_memory_rate_gets_the_documented_default() {
        let p: Profile = serde_json::from_str(
            r#"{"link_bytes_per_second": 1e8, "site_flops_per_second": 3e10, "latency_seconds": 0.005}"#,
        )
        .unwrap();
        assert_eq!(p.memory_bytes_per_second, 1.0e10);
        assert_eq!(p.site_flops_per_second, 3e10);
    }

    #[test]
    fn the_busiest_site_bounds_a_stage() {
        let p = Profile {
            link_bytes_per_second: 100.0,
            site_flops_per_second: 10.0,
            memory_bytes_per_second: 1.0,
            latency_seconds: 0.5,
            job_overhead_seconds: None,
            bytes_per_float: 4,
            exchange_cpu_bytes_per_second: None,
            output_bytes_per_second: None,
            machine_processors: None,
            site_threads: None,
            machine_sites: None,
        };
        // An exchange: site 1 receives 300 bytes (3 s), site 0 sends 200 (2 s).
        let (t, site, r) = stage_seconds(true, &[load(200, 0, 0), load(0, 300, 0)], &p);
        assert_eq!((t, site, r), (3.5, 1, Resource::LinkIn));
        // Local: flops on site 2 only; the others idle.
        let (t, site, r) = stage_seconds(false, &[load(0, 0, 0), load(0, 0, 10), load(0, 0, 40)], &p);
        assert_eq!((t, site, r), (4.0, 2, Resource::Compute));
    }

    /// Inputs X (`i`×`k` blocks) and Y (`k`×1), and the nodes given.
    fn plan(i: u32, nodes: &str, outputs: &str) -> Plan {
        Plan::from_json(&format!(
            r#"{{"inputs": {{"X": {{"key_bounds": [{i}, 4], "array_bounds": [2, 2], "placement": {{"hash": [0]}}}},
                            "Y": {{"key_bounds": [4, 1], "array_bounds": [2, 2], "placement": {{"hash": [1]}}}}}},
                "nodes": {{{nodes}}}, "outputs": [{outputs}]}}"#
        ))
        .unwrap()
    }

    /// The column-partitioned matmul: both operands shuffled on `k`, a fused
    /// matmul per site, its partial sums shuffled and added.
    const CMM: &str = r#""SX": {"op": "shuffle", "input": "X", "dims": [1]},
        "SY": {"op": "shuffle", "input": "Y", "dims": [0]},
        "J": {"op": "local_join", "left": "SX", "right": "SY", "left_keys": [1], "right_keys": [0], "kernel": "matMul"},
        "A": {"op": "local_aggregate", "input": "J", "group_by": [0, 2], "kernel": "matAdd"},
        "P": {"op": "shuffle", "input": "A", "dims": [0]},
        "F": {"op": "local_aggregate", "input": "P", "group_by": [0, 1], "kernel": "matAdd"}"#;

    /// Loads of the CMM nodes, the same on both of 2 sites.
    fn cmm_loads(operand_bytes: u64, partial_bytes: u64) -> IndexMap<String, Arc<OpLoads>> {
        let mut loads = IndexMap::new();
        let mut put = |n: &str, l: SiteLoad| loads.insert(n.to_string(), Arc::new(vec![l; 2]));
        put("SX", load(operand_bytes, operand_bytes, 0));
        put("SY", load(0, 0, 0));
        put("J", load(0, 0, 30));
        put("A", load(0, 0, 10));
        put("P", load(partial_bytes, partial_bytes, 0));
        put("F", load(0, 0, 10));
        loads
    }

    fn profile(latency_seconds: f64) -> Profile {
        Profile {
            link_bytes_per_second: 100.0,
            site_flops_per_second: 10.0,
            memory_bytes_per_second: 1e9,
            latency_seconds,
            job_overhead_seconds: None,
            bytes_per_float: 4,
            exchange_cpu_bytes_per_second: None,
            output_bytes_per_second: None,
            machine_processors: None,
            site_threads: None,
            machine_sites: None,
        }
    }

    /// X shuffled by k (site 0 sends 100 bytes to site 1: 1 s), then
    /// joined with Y (2 s on site 0, 3 s on site 1), the join the output.
    fn shuffle_then_join() -> (Plan, IndexMap<String, Arc<OpLoads>>) {
        let nodes = r#""s": {"op": "shuffle", "input": "X", "dims": [1]},
            "j": {"op": "local_join", "left": "s", "right": "Y", "left_keys": [1], "right_keys": [0], "kernel": "matMul"}"#;
        let mut loads = IndexMap::new();
        loads.insert("s".to_string(), Arc::new(vec![load(100, 0, 0), load(0, 100, 0)]));
        loads.insert("j".to_string(), Arc::new(vec![load(0, 0, 20), load(0, 0, 30)]));
        (plan(8, nodes, r#""j""#), loads)
    }

    #[test]
    fn a_plan_whose_stages_form_one_chain_takes_their_sum_and_names_the_longest() {
        let (plan, loads) = shuffle_then_join();
        let (t, b) = plan_seconds(&plan, &loads, &Writes::new(), &profile(0.0));
        assert_eq!(t, 4.0);
        let b = b.unwrap();
        assert_eq!((b.node.as_str(), b.site, b.resource, b.seconds), ("j", 1, Resource::Compute, 3.0));
        assert_eq!(plan_seconds(&plan, &IndexMap::new(), &Writes::new(), &profile(0.0)), (0.0, None));
        // A job's fixed time is added once to a plan with operators, and to
        // none without.
        let with_overhead = Profile { job_overhead_seconds: Some(0.25), ..profile(0.0) };
        assert_eq!(plan_seconds(&plan, &loads, &Writes::new(), &with_overhead).0, 4.25);
        assert_eq!(plan_seconds(&plan, &IndexMap::new(), &Writes::new(), &with_overhead), (0.0, None));
    }

    #[test]
    fn exchanges_of_inputs_run_together_as_one_stage() {
        // A broadcast of X and a shuffle of Y feed a join that is not a fused
        // matmul (nothing streams it): both start with the job and share each site's
        // link. Site 0 sends 200 bytes of X and receives 300 of Y; site 1
        // sends those 300 and receives the 200: one stage bound by 300 bytes
        // on one link, 3 s + one latency; not 2 s + 3 s + two latencies.
        let nodes = r#""b": {"op": "broadcast", "input": "X"},
            "s": {"op": "shuffle", "input": "Y", "dims": [1]},
            "j": {"op": "local_join", "left": "b", "right": "s", "left_keys": [1], "right_keys": [0], "kernel": "matMul"}"#;
        let together = plan(8, nodes, r#""j""#);
        assert!(streamed_pipelines(&together).is_empty());
        let mut loads = IndexMap::new();
        loads.insert("b".to_string(), Arc::new(vec![load(200, 0, 0), load(0, 200, 0)]));
        loads.insert("s".to_string(), Arc::new(vec![load(0, 300, 0), load(300, 0, 0)]));
        loads.insert("j".to_string(), Arc::new(vec![load(0, 0, 10), load(0, 0, 10)]));
        let (t, b) = plan_seconds(&together, &loads, &Writes::new(), &profile(0.5));
        assert_eq!(t, 3.0 + 0.5 + 1.0);
        let b = b.unwrap();
        assert_eq!((b.node.as_str(), b.site, b.resource, b.seconds), ("s", 0, Resource::LinkIn, 3.5));
        // An exchange of an intermediate result waits for it: a stage of its
        // own, which runs beside the broadcast (neither waits for the other).
        // Here they load different directions of each link: the broadcast's
        // 2 s and the shuffle's 3 s overlap, then the join.
        let nodes = r#""b": {"op": "broadcast", "input": "X"},
            "m": {"op": "local_map", "input": "Y", "kernel": "relu"},
            "s": {"op": "shuffle", "input": "m", "dims": [1]},
            "j": {"op": "local_join", "left": "b", "right": "s", "left_keys": [1], "right_keys": [0], "kernel": "matMul"}"#;
        let apart = plan(8, nodes, r#""j""#);
        loads.insert("m".to_string(), Arc::new(vec![load(0, 0, 0), load(0, 0, 0)]));
        assert_eq!(plan_seconds(&apart, &loads, &Writes::new(), &profile(0.0)).0, 3.0 + 1.0);
        // Their latencies do not overlap: 2 × 0.5 s at least, here below the
        // critical path (m, s, j: 3.5 + 1 s).
        assert_eq!(plan_seconds(&apart, &loads, &Writes::new(), &profile(0.5)).0, 3.5 + 1.0);
    }

    #[test]
    fn stages_that_do_not_wait_for_each_other_overlap_but_share_each_sites_link_processors_and_latencies() {
        // Two branches (relu of X, then its shuffle; relu of Y, then its
        // shuffle) meet in a join. Critical path: a branch's relu and
        // shuffle, then the join.
        let nodes = r#""mx": {"op": "local_map", "input": "X", "kernel": "relu"},
            "sx": {"op": "shuffle", "input": "mx", "dims": [1]},
            "my": {"op": "local_map", "input": "Y", "kernel": "relu"},
            "sy": {"op": "shuffle", "input": "my", "dims": [0]},
            "j": {"op": "local_join", "left": "sx", "right": "sy", "left_keys": [1], "right_keys": [0], "kernel": "matMul"}"#;
        let two = plan(8, nodes, r#""j""#);
        let set = |loads: &mut IndexMap<String, Arc<OpLoads>>, n: &str, l: Vec<SiteLoad>| {
            loads.insert(n.to_string(), Arc::new(l));
        };
        let mut loads = IndexMap::new();
        set(&mut loads, "mx", vec![load(0, 0, 10), load(0, 0, 10)]);
        set(&mut loads, "my", vec![load(0, 0, 20), load(0, 0, 0)]);
        set(&mut loads, "j", vec![load(0, 0, 10), load(0, 0, 10)]);
        // The shuffles load opposite directions: site 0 sends X's 300 bytes
        // and receives Y's 200. Path: relu of Y (2 s), its shuffle (2 s), the
        // join (1 s) = 5 s; in turn it would be 1 + 3 + 2 + 2 + 1 = 9 s.
        set(&mut loads, "sx", vec![load(300, 0, 0), load(0, 300, 0)]);
        set(&mut loads, "sy", vec![load(0, 200, 0), load(200, 0, 0)]);
        assert_eq!(plan_seconds(&two, &loads, &Writes::new(), &profile(0.0)).0, 5.0);
        // Both send from site 0 (and the join is free): the path is 4 s,
        // but site 0's outgoing link carries 3 + 2 s of them.
        set(&mut loads, "sy", vec![load(200, 0, 0), load(0, 200, 0)]);
        set(&mut loads, "j", vec![load(0, 0, 0), load(0, 0, 0)]);
        assert_eq!(plan_seconds(&two, &loads, &Writes::new(), &profile(0.0)).0, 3.0 + 2.0);
        // Both relus on site 0 (5 s each): the path is 5 + 3 s, but site 0's
        // processors run both, 10 s.
        set(&mut loads, "mx", vec![load(0, 0, 50), load(0, 0, 0)]);
        set(&mut loads, "my", vec![load(0, 0, 50), load(0, 0, 0)]);
        assert_eq!(plan_seconds(&two, &loads, &Writes::new(), &profile(0.0)).0, 10.0);
        // Latencies: the first loads again, at 10 s per exchange. The path
        // holds one (1 + 3 + 10 + 1 s); the two shuffles' 20 s do not overlap.
        set(&mut loads, "mx", vec![load(0, 0, 10), load(0, 0, 10)]);
        set(&mut loads, "my", vec![load(0, 0, 20), load(0, 0, 0)]);
        set(&mut loads, "sy", vec![load(0, 200, 0), load(200, 0, 0)]);
        set(&mut loads, "j", vec![load(0, 0, 10), load(0, 0, 10)]);
        assert_eq!(plan_seconds(&two, &loads, &Writes::new(), &profile(10.0)).0, 20.0);
        assert_eq!(plan_seconds(&two, &loads, &Writes::new(), &profile(1.0)).0, 1.0 + 3.0 + 1.0 + 1.0);
        // Never more than the stages in turn.
        for latency in [0.0, 0.5, 10.0] {
            let (t, _) = plan_seconds(&two, &loads, &Writes::new(), &profile(latency));
            let in_turn: f64 = ["mx", "sx", "my", "sy", "j"]
                .iter()
                .map(|n| stage_seconds(n.starts_with('s'), &loads[*n], &profile(latency)).0)
                .sum();
            assert!(t <= in_turn, "{t} > {in_turn}");
        }
    }

    #[test]
    fn a_streamed_matmul_overlaps_its_operand_and_partial_sum_shuffles_with_its_gemms() {
        // 8 output blocks over 2 computing sites: g = 4 per site.
        let plan = plan(8, CMM, r#""F""#);
        let pipelines = streamed_pipelines(&plan);
        assert_eq!(
            pipelines,
            vec![Pipeline {
                aggregate: "A".into(),
                join: "J".into(),
                operand_exchanges: vec!["SX".into(), "SY".into()],
                output_exchanges: vec!["P".into()],
                output_blocks: 8,
            }]
        );
        // Per site: operands 1 s, GEMMs and folds 4 s, partial sums 1 s; the
        // link carries 2 s each way, so the GEMMs bound the pipeline, plus a
        // fill and drain of (1 + 1) / 4. Then the final sum, 1 s.
        let (t, b) = plan_seconds(&plan, &cmm_loads(100, 100), &Writes::new(), &profile(0.0));
        assert_eq!(t, 4.5 + 1.0);
        let b = b.unwrap();
        assert_eq!((b.node.as_str(), b.resource, b.seconds), ("A", Resource::Compute, 4.5));
        // Link-bound: 5 s of operands and 3 s of partial sums share the
        // incoming link (8 s), plus (5 + 4 + 3 − 5) / 4.
        let (t, b) = plan_seconds(&plan, &cmm_loads(500, 300), &Writes::new(), &profile(0.0));
        assert_eq!(t, 9.75 + 1.0);
        assert_eq!(b.unwrap().resource, Resource::LinkIn);
        // One latency per level of exchange (operands, partial sums), not
        // one per exchange.
        let (t, _) = plan_seconds(&plan, &cmm_loads(100, 100), &Writes::new(), &profile(0.5));
        assert_eq!(t, 4.5 + 1.0 + 2.0 * 0.5);
    }

    #[test]
    fn exchanged_bytes_take_processor_time_from_a_streamed_matmuls_gemms() {
        let plan = plan(8, CMM, r#""F""#);
        // The processors exchange 200 bytes a second (half a byte's cost to
        // send it, half to receive it): per site the operands' 100 bytes in
        // and 100 out take 0.5 s of them, the partial sums' 0.5 s more, so
        // the site's processors are busy 4 + 0.5 + 0.5 s, the links 2 s each
        // way; plus the fill and drain of (1 + 1) / 4. Then the final sum.
        let p = Profile { exchange_cpu_bytes_per_second: Some(200.0), ..profile(0.0) };
        let (t, b) = plan_seconds(&plan, &cmm_loads(100, 100), &Writes::new(), &p);
        assert_eq!(t, 5.0 + 0.5 + 1.0);
        assert_eq!(b.unwrap().resource, Resource::Compute);
        // Never more than the stages one after another: at 100 bytes a
        // second the processors are busy 4 + 1 + 1 s, and the fill and drain
        // would take the pipeline past 1 + 4 + 1 s.
        let p = Profile { exchange_cpu_bytes_per_second: Some(100.0), ..profile(0.0) };
        assert_eq!(plan_seconds(&plan, &cmm_loads(100, 100), &Writes::new(), &p).0, 6.0 + 1.0);
        // Processors that move bytes 4× slower than the links: the operands
        // take 4 s, the GEMMs 4 s and the partial sums 4 s.
        let slow = Profile { exchange_cpu_bytes_per_second: Some(25.0), ..profile(0.0) };
        assert_eq!(plan_seconds(&plan, &cmm_loads(100, 100), &Writes::new(), &slow).0, 4.0 + 4.0 + 4.0 + 1.0);
        // An exchange stage on its own: the slower of its link and the
        // processors moving its bytes.
        let p = Profile { exchange_cpu_bytes_per_second: Some(200.0), ..profile(0.0) };
        assert_eq!(stage_seconds(true, &[load(100, 100, 0)], &p), (1.0, 0, Resource::LinkOut));
        assert_eq!(stage_seconds(true, &[load(100, 100, 0)], &slow), (4.0, 0, Resource::Compute));
        // Without the rate (profiles from before it), no processor time.
        let (t, _) = plan_seconds(&plan, &cmm_loads(100, 100), &Writes::new(), &profile(0.0));
        assert_eq!(t, 4.5 + 1.0);
        let q: Profile = serde_json::from_str(r#"{"link_bytes_per_second": 1e8}"#).unwrap();
        assert_eq!(q.exchange_cpu_bytes_per_second, None);
        assert!(!serde_json::to_string(&q).unwrap().contains("exchange_cpu"));
        let r: Profile = serde_json::from_str(r#"{"exchange_cpu_bytes_per_second": 4e8}"#).unwrap();
        assert_eq!(r.exchange_cpu_bytes_per_second, Some(4e8));
    }

    #[test]
    fn a_pipeline_of_one_block_per_site_takes_what_its_stages_take_in_turn() {
        // 2 output blocks over 2 sites: the first block's members are all
        // the operands, its partial sum leaves after all the GEMMs.
        let plan = plan(2, CMM, r#""F""#);
        assert_eq!(streamed_pipelines(&plan)[0].output_blocks, 2);
        let (t, _) = plan_seconds(&plan, &cmm_loads(100, 100), &Writes::new(), &profile(0.0));
        assert_eq!(t, 1.0 + 4.0 + 1.0 + 1.0);
    }

    #[test]
    fn a_matmul_the_runtime_does_not_stream_is_priced_stage_by_stage() {
        let sequential = 1.0 + 0.0 + 3.0 + 1.0 + 1.0 + 1.0;
        // The join is an output too: not fused, not streamed.
        let unfused = plan(8, CMM, r#""F", "J""#);
        assert!(streamed_pipelines(&unfused).is_empty());
        assert_eq!(plan_seconds(&unfused, &cmm_loads(100, 100), &Writes::new(), &profile(0.0)).0, sequential);
        // An operand computed by a local operator: its keys are not known
        // before it runs.
        let nodes = format!(
            r#""M": {{"op": "local_map", "input": "Y", "kernel": "relu"}}, {}"#,
            CMM.replace(r#""input": "Y", "dims""#, r#""input": "M", "dims""#)
        );
        let mapped = plan(8, &nodes, r#""F""#);
        assert!(streamed_pipelines(&mapped).is_empty());
        // Not a sum of products: a max of them.
        let max = plan(
            8,
            &CMM.replace(r#""group_by": [0, 2], "kernel": "matAdd""#, r#""group_by": [0, 2], "kernel": "max""#),
            r#""F""#,
        );
        assert!(streamed_pipelines(&max).is_empty());
        assert_eq!(plan_seconds(&max, &cmm_loads(100, 100), &Writes::new(), &profile(0.0)).0, sequential);
    }

    #[test]
    fn a_broadcast_operand_is_overlapped_like_a_shuffled_one_and_two_replicated_operands_are_not_streamed() {
        let bmm = CMM.replace(r#""op": "shuffle", "input": "Y", "dims": [0]"#, r#""op": "broadcast", "input": "Y""#);
        let pipelines = streamed_pipelines(&plan(8, &bmm, r#""F""#));
        assert_eq!(pipelines.len(), 1);
        assert_eq!(pipelines[0].operand_exchanges, vec!["SX".to_string(), "SY".to_string()]);
        let mut loads = cmm_loads(100, 100);
        loads.insert("SY".into(), Arc::new(vec![load(200, 200, 0); 2]));
        // Per site: operands 3 s (the broadcast's 200 bytes each way with
        // the shuffle's 100), GEMMs and folds 4 s, partial sums 1 s; the link
        // carries 4 s each way, as long as the GEMMs; plus a fill and drain of
        // (3 + 4 + 1 − 4) / 4; then the sum. Not the broadcast's 2 s first.
        assert_eq!(plan_seconds(&plan(8, &bmm, r#""F""#), &loads, &Writes::new(), &profile(0.0)).0, 5.0 + 1.0);
        let both = bmm.replace(r#""op": "shuffle", "input": "X", "dims": [1]"#, r#""op": "broadcast", "input": "X""#);
        assert!(streamed_pipelines(&plan(8, &both, r#""F""#)).is_empty());
    }

    #[test]
    fn a_profile_that_cannot_be_a_cluster_is_refused_by_field() {
        assert!(Profile::default().check().is_ok());
        let bad = Profile { link_bytes_per_second: 0.0, ..Profile::default() };
        assert_eq!(bad.check().unwrap_err().0, "link_bytes_per_second");
        let bad = Profile { latency_seconds: f64::NAN, ..Profile::default() };
        assert_eq!(bad.check().unwrap_err().0, "latency_seconds");
        let bad = Profile { memory_bytes_per_second: -1.0, ..Profile::default() };
        assert_eq!(bad.check().unwrap_err().0, "memory_bytes_per_second");
        let bad = Profile { bytes_per_float: 0, ..Profile::default() };
        assert_eq!(bad.check().unwrap_err().0, "bytes_per_float");
        let bad = Profile { job_overhead_seconds: Some(-0.001), ..Profile::default() };
        assert_eq!(bad.check().unwrap_err().0, "job_overhead_seconds");
        let bad = Profile { job_overhead_seconds: Some(f64::INFINITY), ..Profile::default() };
        assert_eq!(bad.check().unwrap_err().0, "job_overhead_seconds");
        assert!(Profile { job_overhead_seconds: Some(0.0), ..Profile::default() }.check().is_ok());
        let bad = Profile { exchange_cpu_bytes_per_second: Some(0.0), ..Profile::default() };
        assert_eq!(bad.check().unwrap_err().0, "exchange_cpu_bytes_per_second");
        let bad = Profile { output_bytes_per_second: Some(f64::NAN), ..Profile::default() };
        assert_eq!(bad.check().unwrap_err().0, "output_bytes_per_second");
    }

    #[test]
    fn sites_sharing_a_machine_compute_faster_where_fewer_of_them_compute() {
        let shared = |c: u32, k: u32, n: u32| Profile {
            machine_processors: Some(c),
            site_threads: Some(k),
            machine_sites: Some(n),
            ..profile(0.0)
        };
        // Three sites of two kernel threads on two processors (the emulated
        // network): each gets 2/3 of a processor when all compute, 1 when
        // two do, 2 when one does; more sites than measured: the rates.
        let p = shared(2, 2, 3);
        assert_eq!(p.processor_speedup(3), 1.0);
        assert_eq!(p.processor_speedup(2), 1.5);
        assert_eq!(p.processor_speedup(1), 3.0);
        assert_eq!(p.processor_speedup(10), 1.0);
        // Two sites of one thread on two processors, or of 8 on 16: a site
        // computing alone gets no more than its threads, whatever the
        // request's sites.
        for p in [shared(2, 1, 2), shared(16, 8, 2)] {
            assert_eq!([1, 2, 10].map(|m| p.processor_speedup(m)), [1.0; 3]);
        }
        // Without all three fields, or with no site computing: the calibrated rates.
        let partial = Profile { machine_sites: None, ..p };
        assert_eq!(partial.processor_speedup(1), 1.0);
        assert_eq!(p.processor_speedup(0), 1.0);
        // A local stage of 30 flops on one of three sites: 3 s at the
        // calibrated rate, 1 s on the shared machine; on every site, 3 s.
        let one = [local(30, 0), local(0, 0), local(0, 0)];
        assert_eq!(stage_seconds(false, &one, &profile(0.0)).0, 3.0);
        assert_eq!(stage_seconds(false, &one, &p).0, 1.0);
        assert_eq!(stage_seconds(false, &[local(30, 0), local(30, 0), local(30, 0)], &p).0, 3.0);
        // Links are not shared processors: an exchange from one site takes
        // its link time whatever the machine.
        let q = Profile { latency_seconds: 0.0, ..p };
        assert_eq!(stage_seconds(true, &[load(300, 0, 0), load(0, 300, 0), load(0, 0, 0)], &q).0, 3.0);
        // Refused: no processors, no threads.
        assert_eq!(shared(0, 1, 1).check().unwrap_err().0, "machine_processors");
        assert_eq!(shared(2, 0, 1).check().unwrap_err().0, "site_threads");
        assert_eq!(shared(2, 1, 0).check().unwrap_err().0, "machine_sites");
    }

    #[test]
    fn writing_an_output_is_a_stage_after_it_priced_only_with_a_write_rate() {
        let (plan, loads) = shuffle_then_join();
        let mut writes = Writes::new();
        writes.insert("j".to_string(), vec![400, 100]);
        // Without a write rate the writes cost nothing: shuffle 1 s, join 3 s.
        assert_eq!(plan_seconds(&plan, &loads, &writes, &profile(0.0)).0, 4.0);
        // At 100 bytes/s site 0 writes for 4 s after the join: the longest
        // stage, named after the output, bounded by writing.
        let p = Profile { output_bytes_per_second: Some(100.0), ..profile(0.0) };
        let (t, b) = plan_seconds(&plan, &loads, &writes, &p);
        assert_eq!(t, 1.0 + 3.0 + 4.0);
        let b = b.unwrap();
        assert_eq!((b.node.as_str(), b.site, b.resource, b.seconds), ("j", 0, Resource::Write, 4.0));
        // An output without bytes adds nothing; one no operator makes (an
        // input written as is) is written from the start, beside the rest.
        let mut none = Writes::new();
        none.insert("j".to_string(), vec![0, 0]);
        assert_eq!(plan_seconds(&plan, &loads, &none, &p).0, 4.0);
        none.insert("X".to_string(), vec![0, 100]);
        assert_eq!(plan_seconds(&plan, &loads, &none, &p).0, 4.0);
    }

    #[test]
    fn a_streamed_matmuls_output_is_written_as_it_is_made_by_its_processors() {
        // CMM without the partial sums' exchange: the streamed matmul's
        // aggregate is the output, 8 blocks over 2 sites (g = 4).
        let nodes = r#""SX": {"op": "shuffle", "input": "X", "dims": [1]},
            "SY": {"op": "shuffle", "input": "Y", "dims": [0]},
            "J": {"op": "local_join", "left": "SX", "right": "SY", "left_keys": [1], "right_keys": [0], "kernel": "matMul"},
            "A": {"op": "local_aggregate", "input": "J", "group_by": [0, 2], "kernel": "matAdd"}"#;
        let plan = plan(8, nodes, r#""A""#);
        assert_eq!(streamed_pipelines(&plan).len(), 1);
        let mut writes = Writes::new();
        writes.insert("A".to_string(), vec![200, 200]);
        let p = Profile { output_bytes_per_second: Some(100.0), ..profile(0.0) };
        // Link-bound (operands 10 s, GEMMs and folds 4 s, writing 2 s per
        // site): the writing hides behind the link but for the fill and
        // drain, (10 + 6 − 10) / 4; not 2 s after the pipeline.
        let only_a = |mut loads: IndexMap<String, Arc<OpLoads>>| {
            loads.retain(|n, _| plan.nodes.contains_key(n));
            loads
        };
        let loads = only_a(cmm_loads(1000, 0));
        assert_eq!(plan_seconds(&plan, &loads, &Writes::new(), &p).0, 10.0 + 1.0);
        assert_eq!(plan_seconds(&plan, &loads, &writes, &p).0, 10.0 + 1.5);
        // Processor-bound (operands 1 s): GEMMs and writing in turn, 4 + 2 s,
        // plus (1 + 6 − 6) / 4; the bottleneck is the pipeline's compute.
        let loads = only_a(cmm_loads(100, 0));
        let (t, b) = plan_seconds(&plan, &loads, &writes, &p);
        assert_eq!(t, 6.0 + 0.25);
        assert_eq!(b.unwrap().resource, Resource::Compute);
        // Writing more than the GEMMs do: the pipeline is bound by writing.
        writes.insert("A".to_string(), vec![600, 600]);
        assert_eq!(plan_seconds(&plan, &loads, &writes, &p).1.unwrap().resource, Resource::Write);
    }
}
