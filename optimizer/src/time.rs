//! The time cost model: a plan's predicted seconds on a cluster described by
//! a [`Profile`], from the exact per-site loads of [`crate::loads`].
//!
//! **Stages.** Every operator of a plan is one stage. The runtimes run a
//! plan's operators one after another on every site (the thread runtime puts
//! a barrier between steps; the cluster runtime's exchanges wait for their
//! whole input), so the stages are sequential and a plan's time is the sum
//! of its stages' times: the critical path of a DAG whose stages all share
//! the same sites is the whole sequence. Within a stage the sites work in
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
//! No overlap of a shuffle with its consumer's compute is modelled: neither
//! runtime pipelines them (an exchange completes before the next operator
//! starts), so modelling it would predict a speed no run shows.
//!
//! The **bottleneck** of a plan is the stage that takes longest, with its
//! busiest site and the resource (`compute`, `link_in`, `link_out`) that
//! bounds that site.

use crate::loads::{OpLoads, SiteLoad};
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
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
    /// Fixed time of one exchange (shuffle or broadcast), in seconds (`tra
    /// calibrate`: the intercept of an exchange's time against its bytes).
    #[serde(default = "default_latency")]
    pub latency_seconds: f64,
    /// Bytes of one float on the wire.
    #[serde(default = "default_bytes_per_float")]
    pub bytes_per_float: u64,
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
            bytes_per_float: default_bytes_per_float(),
        }
    }
}

impl Profile {
    /// What is wrong with the profile, as `(field, message)`, if anything.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        let positive = |name: &'static str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err((name, format!("profile.{name} must be a positive finite number, got {v}")))
            }
        };
        positive("link_bytes_per_second", self.link_bytes_per_second)?;
        positive("site_flops_per_second", self.site_flops_per_second)?;
        positive("memory_bytes_per_second", self.memory_bytes_per_second)?;
        if !(self.latency_seconds.is_finite() && self.latency_seconds >= 0.0) {
            return Err((
                "latency_seconds",
                format!("profile.latency_seconds must be a finite number ≥ 0, got {}", self.latency_seconds),
            ));
        }
        if !(1..=16).contains(&self.bytes_per_float) {
            return Err((
                "bytes_per_float",
                format!("profile.bytes_per_float must be between 1 and 16, got {}", self.bytes_per_float),
            ));
        }
        Ok(())
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

/// The predicted time of one stage: seconds, busiest site, bounding resource.
pub fn stage_seconds(exchange: bool, loads: &[SiteLoad], p: &Profile) -> (f64, usize, Resource) {
    let mut best = (0.0, 0, if exchange { Resource::LinkOut } else { Resource::Compute });
    for (site, l) in loads.iter().enumerate() {
        let candidates = if exchange {
            [
                (l.bytes_out as f64 / p.link_bytes_per_second, Resource::LinkOut),
                (l.bytes_in as f64 / p.link_bytes_per_second, Resource::LinkIn),
            ]
        } else {
            [
                (l.flops as f64 / p.site_flops_per_second, Resource::Compute),
                (l.memory_bytes as f64 / p.memory_bytes_per_second, Resource::Memory),
            ]
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

/// A plan's predicted seconds and its bottleneck, from the loads of its
/// operators (`exchange(name)` says whether an operator is a shuffle or a
/// broadcast). A plan without operators takes no time and has no bottleneck.
pub fn plan_seconds(
    loads: &IndexMap<String, Arc<OpLoads>>,
    exchange: &dyn Fn(&str) -> bool,
    p: &Profile,
) -> (f64, Option<Bottleneck>) {
    let mut total = 0.0;
    let mut worst: Option<Bottleneck> = None;
    for (name, l) in loads {
        let (t, site, resource) = stage_seconds(exchange(name), l, p);
        total += t;
        if worst.as_ref().is_none_or(|w| t > w.seconds) {
            worst = Some(Bottleneck { node: name.clone(), site, resource, seconds: t });
        }
    }
    (total, worst)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(bytes_out: u64, bytes_in: u64, flops: u64) -> SiteLoad {
        SiteLoad { bytes_out, bytes_in, flops, memory_bytes: 0 }
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
            bytes_per_float: 4,
        };
        // An exchange: site 1 receives 300 bytes (3 s), site 0 sends 200 (2 s).
        let (t, site, r) = stage_seconds(true, &[load(200, 0, 0), load(0, 300, 0)], &p);
        assert_eq!((t, site, r), (3.5, 1, Resource::LinkIn));
        // Local: flops on site 2 only; the others idle.
        let (t, site, r) = stage_seconds(false, &[load(0, 0, 0), load(0, 0, 10), load(0, 0, 40)], &p);
        assert_eq!((t, site, r), (4.0, 2, Resource::Compute));
    }

    #[test]
    fn a_plan_is_the_sum_of_its_stages_and_names_the_longest() {
        let p = Profile {
            link_bytes_per_second: 100.0,
            site_flops_per_second: 10.0,
            memory_bytes_per_second: 1.0,
            latency_seconds: 0.0,
            bytes_per_float: 4,
        };
        let mut loads = IndexMap::new();
        loads.insert("s".to_string(), Arc::new(vec![load(100, 0, 0), load(0, 100, 0)]));
        loads.insert("j".to_string(), Arc::new(vec![load(0, 0, 20), load(0, 0, 30)]));
        let (t, b) = plan_seconds(&loads, &|n| n == "s", &p);
        assert_eq!(t, 4.0);
        let b = b.unwrap();
        assert_eq!((b.node.as_str(), b.site, b.resource, b.seconds), ("j", 1, Resource::Compute, 3.0));
        assert_eq!(plan_seconds(&IndexMap::new(), &|_| false, &p), (0.0, None));
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
    }
}
