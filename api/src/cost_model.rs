//! The command-line side of the cost models: `--cost-model` and `--profile`
//! for `tra optimize` and `tra run`, and reading a profile file (what `tra
//! calibrate` prints) for those and `tra serve --profile`.

use tra_optimizer::time::{CostModel, Profile};
use tra_optimizer::Program;

/// `--cost-model` and `--profile`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct CostModelArgs {
    /// The figure the optimizer minimizes: `network` (floats moved, the
    /// paper's model) or `time` (predicted seconds under the profile).
    /// Overrides the program's `cluster.cost_model`.
    #[arg(long, value_parser = ["network", "time"])]
    pub cost_model: Option<String>,
    /// The cluster profile (JSON, as `tra calibrate` prints it). Overrides
    /// the program's `cluster.profile`.
    #[arg(long, value_name = "FILE")]
    pub profile: Option<String>,
}

impl CostModelArgs {
    /// Set the program's cost model and profile from the flags given.
    pub fn apply(&self, p: &mut Program) -> Result<(), String> {
        let mut cluster = p.cluster();
        if let Some(m) = &self.cost_model {
            cluster.cost_model = named(m);
        }
        if let Some(f) = &self.profile {
            cluster.profile = Some(read_profile(f)?);
        }
        p.cluster = Some(cluster);
        Ok(())
    }
}

/// The cost model a `--cost-model` flag names (its values are checked by
/// clap: `network` or `time`).
pub fn named(name: &str) -> CostModel {
    if name == "time" {
        CostModel::Time
    } else {
        CostModel::Network
    }
}

/// Read and check a profile file.
pub fn read_profile(path: &str) -> Result<Profile, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("error: --profile {path}: {e}"))?;
    let profile: Profile =
        serde_json::from_str(&text).map_err(|e| format!("error: --profile {path}: not a cluster profile: {e}"))?;
    profile.check().map_err(|(_, m)| format!("error: --profile {path}: {m}"))?;
    Ok(profile)
}
