//! tapedeck: a durable recorder of streamed LLM responses. Producers stream tokens in over gRPC;
//! every token is committed to an embedded redb database before anyone sees it; readers replay a
//! response from any byte offset and follow it live until it ends, across restarts and crashes.
//!
//! # Layout
//! The layers are crates of one workspace (see `ARCHITECTURE.md`); this crate assembles them
//! and re-exports each under the module name the tests, the benches and the binary use:
//! - from `tapedeck-core`: [`id`], [`status`], [`clock`], [`error`] (the one error enum and
//!   its `Kind`), [`metrics`] (names and descriptions);
//! - [`pb`], from `tapedeck-proto`: the gRPC contract;
//! - [`store`], from `tapedeck-store`: persistence only (redb, the log, the commit pipeline,
//!   recovery, reads, the offline tools);
//! - from `tapedeck-domain`: [`recorder`] (the domain core), [`access`], [`tier`] (the object
//!   store), [`cluster`] (openraft), [`locator`] (Redis, for instances), [`tls`];
//! - from `tapedeck-faces`: [`grpc`] and [`http`], thin adapters over the recorder.
//!
//! Its own modules:
//! - [`config`]: `Config`, assembling each layer's settings, with units and defaults.
//! - [`serving`]: the server's own settings: addresses, data directory, TLS, shutdown.
//! - [`server`]: `run(listener, store, config, shutdown)`, wiring store, recorder and faces.
//! - [`client`]: the Rust client: typed calls, credentials, TLS, redirects followed.
//!
//! A token flows one way: a face hands it to the recorder's producer session, which queues it
//! to the store's commit pipeline; after the commit that makes it durable, the pipeline
//! publishes it back to the recorder's live recording, whose replays send it on. See
//! `ARCHITECTURE.md` for more.

pub use tapedeck_core::{clock, error, id, metrics, status, trace_context};
pub use tapedeck_domain::{access, cluster, locator, recorder, tier, tls};
pub use tapedeck_faces::{grpc, http, readiness};
pub use tapedeck_proto as pb;
pub use tapedeck_store as store;

pub mod client;
pub mod config;
pub mod server;
pub mod serving;

pub use config::Config;
pub use error::{Error, Result};
