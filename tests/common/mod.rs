//! Test harness, one file per concern: in-process servers (`server`), the real binary and
//! SIGKILL (`binary`), gRPC clients, producers and replays (`grpc`), loopback ports and a
//! cuttable proxy (`net`), the host (`host`: root, tmpfs, memory, disk space), Python
//! (`python`) and Redis (`redis_server`). Everything but the last two is re-exported here, so
//! a test file needs only `use common::*;`.
#![allow(dead_code)] // each test binary uses a different part of this module
#![allow(unused_imports)] // so do the re-exports below

use std::time::Duration;

mod binary;
mod grpc;
mod host;
mod net;
pub(crate) mod python;
pub(crate) mod redis_server;
mod server;

pub(crate) use binary::*;
pub(crate) use grpc::*;
pub(crate) use host::*;
pub(crate) use net::*;
pub(crate) use server::*;

/// How long any single wait in a test may take before the test fails.
pub(crate) const WAIT: Duration = Duration::from_secs(10);
