//! tapedeck: a durable recorder of streamed LLM responses. Producers stream tokens in over gRPC;
//! every token is committed to an embedded redb database before anyone sees it; readers replay a
//! response from any byte offset and follow it live until it ends, across restarts and crashes.
//!
//! # Layout
//! - [`config`]: `Config`, every setting with its unit and default.
//! - [`error`]: the one error enum, keeping causes, and its transport-neutral `Kind`; what a
//!   client may read is decided there (each face maps a Kind to its status once).
//! - [`id`]: `ConversationId`, the wire forms of a conversation id, shown as the caller sent it.
//! - [`access`]: credentials (API keys, signed grants) → a principal; the rules per operation.
//! - [`clock`]: wall-clock time, injectable so retention and idle timeouts can be tested.
//! - [`status`]: `Status`, a recording's place in its life, stored by variant number.
//! - [`recorder`]: the domain core: live recordings (status, committed high-water mark, the
//!   live registry and its limit, supersede), producer sessions, replays, cancel, the live
//!   check, the sweeper's schedule, shutdown, the Durable Streams rules, the gauges' sampler.
//! - [`store`]: persistence only: the redb schema, the journal, the commit pipeline (ops and
//!   batching, the transaction layer, publishing after a commit), recovery, reads.
//! - [`tier`]: the optional object-store tier: sealed recordings' objects and names, upload
//!   and verify, range reads, delete and expiry there. The recorder's sealer drives it.
//! - [`cluster`]: quorum replication with openraft: the log, its storage, the network
//!   between nodes, the state machine that applies entries to the store.
//! - [`locator`]: the optional Redis locator for several instances: entries, their refresh,
//!   redirects and forwarded cancels.
//! - [`grpc`]: thin tonic adapters for `ResponseRecorderService` and `ResponseResumerService`,
//!   assembled with health and reflection by [`grpc::routes`].
//! - [`http`]: the Durable Streams face, as thin: parse, authorize, call the recorder's
//!   streams, map the outcome to a response.
//! - [`client`]: the Rust client: typed calls, credentials, TLS, redirects followed.
//! - [`metrics`]: metric names and their descriptions.
//! - [`tls`]: TLS settings from PEM files, for the gRPC port and the cluster port.
//! - [`server`]: `run(listener, store, config, shutdown)`, wiring store, recorder and faces.
//!
//! A token flows one way: a face hands it to the recorder's producer session, which queues it
//! to the store's commit pipeline; after the commit that makes it durable, the pipeline
//! publishes it back to the recorder's live recording, whose replays send it on. See
//! `ARCHITECTURE.md` for more.

pub use tapedeck_core::{clock, error, id, metrics, status};
pub use tapedeck_domain::{access, cluster, locator, recorder, tier, tls};
pub use tapedeck_faces::{grpc, http};
pub use tapedeck_proto as pb;
pub use tapedeck_store as store;

pub mod client;
pub mod config;
pub mod server;

pub use config::Config;
pub use error::{Error, Result};
