//! tra's executor: block kernels and the reference interpreter.
#![warn(missing_docs)]

pub mod cluster;
mod fusion;
pub mod kernels;
pub mod npy;
pub mod panics;
pub mod reference;
pub mod semantics;
pub mod threads;
