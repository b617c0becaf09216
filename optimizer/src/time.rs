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
//! - a local operator takes `max over sites of flops / site_flops_per_second`.
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
    /// Its processors.
    Compute,
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
            [(l.flops as f64 / p.site_flops_per_second, Resource::Compute); 2]
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
        SiteLoad { bytes_out, bytes_in, flops }
    }

    #[test]
    fn the_busiest_site_bounds_a_stage() {
        let p = Profile {
            link_bytes_per_second: 100.0,
            site_flops_per_second: 10.0,
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
        let bad = Profile { bytes_per_float: 0, ..Profile::default() };
        assert_eq!(bad.check().unwrap_err().0, "bytes_per_float");
    }
}
