//! tra's executor: block kernels and the reference interpreter.
#![warn(missing_docs)]

pub mod kernels;
pub mod reference;
pub mod npy;
pub mod threads;
pub mod cluster;
