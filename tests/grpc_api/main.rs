//! One test binary: the gRPC APIs (Memory Service's two and tapedeck.v1), access control, producer
//! resume, the CLI, settings and metrics. One module per concern; `tests/common` is the harness
//! every binary shares.
#[path = "../common/mod.rs"]
mod common;

mod access;
mod access_keys;
mod access_setup;
mod bad_input;
mod bad_settings;
mod cli;
mod examples;
mod health_reflection;
mod memory_v1_edges;
mod metrics;
mod producer_resume;
mod recorder_api;
mod recordings_api;
mod resumer_api;
