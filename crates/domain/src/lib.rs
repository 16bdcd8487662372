//! tapedeck's domain: what a recording is and what may be done to it, over the store. The faces
//! reach it through [`recorder::Recorder`] and the value types it exports; none of the store's
//! types are theirs to name.
//!
//! # Layout
//! - [`recorder`]: live recordings (status, committed high-water mark, the live registry and
//!   its limit, supersede), producer sessions, replays, cancel, the live check, the sweeper's
//!   schedule, shutdown, the Durable Streams rules, the gauges' sampler.
//! - [`access`]: credentials (API keys, signed grants) → a principal; the rules per operation.
//! - [`tier`]: the optional object-store tier: sealed recordings' objects and names, upload
//!   and verify, range reads, delete and expiry there. The recorder's sealer drives it.
//! - [`cluster`]: quorum replication with openraft: the log, its storage, the network between
//!   nodes, the state machine that applies entries to the store.
//! - [`locator`]: the optional Redis locator for several instances: entries, their refresh,
//!   redirects and forwarded cancels.
//! - [`tls`]: TLS settings from PEM files, for the gRPC port and the cluster port.

// The shared words and the layers below, under the names the domain's modules use for them.
// The store is imported, never re-exported: the faces above cannot name its types.
use tapedeck_core::{clock, error, id, metrics, status, trace_context};
use tapedeck_proto as pb;
use tapedeck_store as store;

pub mod access;
pub mod cluster;
pub mod locator;
pub mod recorder;
pub mod tier;
pub mod tls;

use error::{Error, Result};
