//! tra's HTTP service and the example programs built into it.

pub mod bench;
pub mod cluster;
pub mod einsum;
pub mod examples;
pub mod run;
pub mod server;
pub mod sigpipe;
