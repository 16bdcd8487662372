//! Test harness, one file per concern: in-process servers (`server`), the real binary and
//! SIGKILL (`binary`), gRPC clients, producers and replays (`grpc`), loopback ports and a
//! cuttable proxy (`net`), signed grants (`grants`), the host (`host`: root, tmpfs, memory, disk space), Python
//! (`python`), Redis (`redis_server`), SeaweedFS's S3 (`seaweed`), a three-node cluster
//! (`trio`), links between a cluster's nodes that can be cut and healed (`links`), and libfiu's
//! failure points in a running server (`fiu`). Everything but the last six is re-exported here, so a test file needs only
//! `use common::*;`.
#![allow(dead_code)] // each test binary uses a different part of this module

use std::time::Duration;

mod binary;
pub(crate) mod fiu;
mod grants;
mod grpc;
mod host;
pub(crate) mod links;
mod net;
pub(crate) mod node_clients;
pub(crate) mod python;
pub(crate) mod redis_server;
pub(crate) mod seaweed;
mod server;
pub(crate) mod trio;

// Each test binary uses a different part of these, so some are unused in each.
#[allow(unused_imports)]
pub(crate) use {binary::*, grants::*, grpc::*, host::*, net::*, server::*};

/// How long any single wait in a test may take before the test fails.
pub(crate) const WAIT: Duration = Duration::from_secs(10);
/// How long a foreign client's driver (a Node or Python script) may run before it is killed
/// and the test fails.
pub(crate) const DRIVER_LIMIT: Duration = Duration::from_secs(180);
