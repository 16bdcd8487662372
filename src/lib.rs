//! tapedeck: a durable recorder of streamed LLM responses. Producers stream tokens in over gRPC;
//! every token is committed to an embedded redb database before anyone sees it; readers replay a
//! response from any byte offset and follow it live until it ends, across restarts and crashes.
//!
//! # Layout
//! - [`config`]: `Config`, every setting with its unit and default.
//! - [`error`]: the one error enum and its mapping to gRPC statuses.
//! - [`id`]: `ConversationId`, parsing the wire forms of a conversation id.
//! - [`clock`]: wall-clock time, injectable so retention and idle timeouts can be tested.
//! - [`store`]: the redb store: schema, journal, commit pipeline, live high-water marks, recovery,
//!   sweeper.
//! - [`recorder`]: the domain core over the store: producer sessions, replays, cancel, limits.
//! - [`grpc`]: thin tonic adapters for `ResponseRecorderService` and `ResponseResumerService`.
//! - [`server`]: `run(listener, config, shutdown)`, wiring store, recorder and tonic together.

pub mod clock;
pub mod config;
pub mod error;
pub mod grpc;
pub mod id;
pub mod recorder;
pub mod server;
pub mod store;

/// Code generated from `proto/` by `build.rs`; its docs are the proto file's comments.
#[allow(missing_docs, unreachable_pub)]
pub mod pb {
    tonic::include_proto!("memory.v1");

    /// Encoded descriptors of the contract, served by gRPC reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("memory_descriptor");
}

pub use config::Config;
pub use error::{Error, Result};
