//! tra's optimizer: TRA programs and IA plans, type and frontier inference,
//! TRA→IA compilation, and (in later modules) the two-sort IA e-graph, the cost
//! model and extraction.
#![warn(missing_docs)]

pub mod error;
pub mod kernel;
pub mod keyexpr;
pub mod placement;
pub mod program;

pub use error::{ErrorCode, ProgramError};
pub use kernel::KernelRef;
pub use keyexpr::{Key, KeyFn, Predicate};
pub use program::{Cluster, IaOp, InputDecl, Plan, PlacementDecl, Program, TraOp};
