//! tra's optimizer: TRA programs and IA plans, type and frontier inference,
//! TRA→IA compilation, the two-sort IA e-graph, the cost model and
//! extraction. Front-ends (the JSON API, the einsum front-end) build a
//! [`Program`] and call [`optimize::optimize`]; the contract they rely on is
//! `docs/API.md`.
#![warn(missing_docs)]

pub mod check;
pub mod compile;
pub mod cost;
pub mod deadline;
pub mod delta;
pub mod describe;
pub mod duplicate_keys;
pub mod egraph;
pub mod error;
pub mod extract;
pub mod kernel;
pub mod keyexpr;
pub mod loads;
pub mod optimize;
pub mod order;
pub mod placement;
pub mod program;
pub mod rule;
pub mod rule_failure;
pub mod schedule;
pub mod stage_cost;
pub mod time;
pub mod types;

pub use error::{ErrorCode, ProgramError};
pub use kernel::KernelRef;
pub use keyexpr::{Key, KeyFn, Predicate};
pub use program::{Cluster, IaOp, InputDecl, PlacementDecl, Plan, Program, TraOp};
