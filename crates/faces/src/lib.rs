//! tapedeck's faces: thin adapters from the wire to the domain. They decode, authorize, call
//! the [`Recorder`](tapedeck_domain::recorder::Recorder) and map its errors; the behaviour
//! lives in the domain, and the store is not theirs to name (this crate does not depend on it).
//!
//! # Layout
//! - [`grpc`]: Memory Service's `ResponseRecorderService` and `ResponseResumerService`,
//!   tapedeck's `tapedeck.v1.Recordings` and the cluster's status, assembled with health and
//!   reflection by [`grpc::routes`].
//! - [`http`]: the Durable Streams protocol, the console and the stop a browser sends, and the
//!   probes (`/healthz`, `/readyz`).
//! - [`readiness`]: whether the server takes traffic, which `/readyz` and gRPC health say.

// The shared words and the domain, under the names the faces' modules use for them.
use tapedeck_core::{Error, clock, error, id, metrics, trace_context};
use tapedeck_domain::{access, cluster, locator, recorder};
use tapedeck_proto as pb;

pub mod grpc;
pub mod http;
pub mod readiness;

#[cfg(test)]
mod error_mapping_tests;
