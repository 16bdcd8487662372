//! One test binary: clients other people wrote, driven as their users drive them: grpcio, grpc-js,
//! Memory Service's Python client, @durable-streams/client, Chromium, the AI SDK transports. One
//! module per concern; `tests/common` is the harness every binary shares.
#[path = "../common/mod.rs"]
mod common;

mod ai_transports;
mod browser;
mod foreign_durable_streams;
mod foreign_grpc_js;
mod foreign_grpcio;
mod foreign_shared_channel;
