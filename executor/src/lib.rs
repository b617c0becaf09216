//! tra's executor: block kernels, the reference interpreter and the thread
//! and cluster runtimes.
//!
//! - [`semantics`]: what every executor shares — relations, sites, input
//!   checks and placement, evaluation order, errors.
//! - [`reference`](mod@reference): the plain interpreter, the oracle the others are tested
//!   against; [`kernels`]: the catalog's kernels on `f64` arrays.
//! - [`threads`]: IA plans on worker threads; [`cluster`]: across processes
//!   on timely dataflow. Both take their fusion decision from one place
//!   (`fusion`) and import nothing from the reference interpreter.
//! - [`npy`]: inputs and outputs as `.npy` files; [`panics`]: the text of a
//!   caught panic.
#![warn(missing_docs)]

pub mod cluster;
pub mod fusion;
pub mod kernels;
pub mod npy;
pub mod panics;
pub mod reference;
pub mod semantics;
pub mod threads;
