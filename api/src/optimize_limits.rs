//! `--optimize-ms` and `--analysis-memory-bytes` on the command line: the
//! bounds `tra serve` puts on each request (`--optimize-ms`,
//! `--analysis-memory-bytes`), for the commands that optimize (`tra
//! optimize`, `tra run`, `tra einsum`), with the same defaults, so that a
//! program the service refuses as too costly is refused here too, with the
//! flag to raise.

use crate::server::admission::human;
use std::time::Duration;
use tra_optimizer::deadline::{self, Deadline};
use tra_optimizer::optimize::Limits;

/// How long one optimization may take and how much analysis memory it may hold.
#[derive(clap::Args, Debug, Clone)]
pub struct OptimizeLimitArgs {
    /// Most wall time of the optimization (type checking, analysis,
    /// saturation, extraction), in milliseconds; saturation takes at most
    /// three quarters of it, as on the server.
    #[arg(long = "optimize-ms", visible_alias = "max-ms", default_value_t = OptimizeLimitArgs::default().optimize_ms)]
    pub optimize_ms: u64,
    /// Most bytes of key sets the analysis may hold (filters and key maps
    /// list the keys they keep), with the per-site layouts of the candidate
    /// plans, as on the server.
    #[arg(long, default_value_t = OptimizeLimitArgs::default().analysis_memory_bytes)]
    pub analysis_memory_bytes: u64,
}

/// The server's defaults.
impl Default for OptimizeLimitArgs {
    fn default() -> Self {
        let server = crate::server::ServerConfig::default();
        OptimizeLimitArgs {
            optimize_ms: server.optimize_time.as_millis() as u64,
            analysis_memory_bytes: server.analysis_memory_bytes,
        }
    }
}

impl OptimizeLimitArgs {
    /// The optimizer's limits: saturation may take all of `--optimize-ms`
    /// (the deadline of [`OptimizeLimitArgs::within`] gives it ¾ of what is left).
    pub fn limits(&self) -> Limits {
        Limits { time: Duration::from_millis(self.optimize_ms), ..Limits::default() }
    }

    /// Run `f` (an optimization) under one deadline `--optimize-ms` from now
    /// and the analysis memory budget; past either, the optimizer stops with
    /// `limit_exceeded` naming the flag.
    pub fn within<R>(&self, f: impl FnOnce() -> R) -> R {
        let d = Deadline::after(
            Duration::from_millis(self.optimize_ms),
            format!("the --optimize-ms limit of {} ms", self.optimize_ms),
        )
        .with_key_budget(
            self.analysis_memory_bytes,
            format!("the --analysis-memory-bytes limit of {}", human(self.analysis_memory_bytes)),
        );
        deadline::within(d, f)
    }
}
