//! tra's HTTP service and the example programs built into it.
// The OpenAPI document is one `json!` literal, deeper than the default limit.
#![recursion_limit = "256"]

pub mod bench;
pub mod calibrate;
pub mod cluster;
pub mod cost_model;
pub mod einsum;
pub mod examples;
pub mod optimize_limits;
pub mod run;
pub mod server;
pub mod sigpipe;
pub mod summary;
