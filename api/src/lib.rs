//! tra's HTTP service and the example programs built into it.

pub mod examples;
pub mod server;
pub mod run;
pub mod bench;
pub mod einsum;
pub mod cluster;
