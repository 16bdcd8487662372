//! The words every layer of tapedeck shares, below the store: a conversation's id, a
//! recording's status, the clock, the one error enum with its transport-neutral
//! classification, and the metric names.
//!
//! # Layout
//! - [`id`]: `ConversationId`, the wire forms of a conversation id, shown as the caller sent it.
//! - [`status`]: `Status`, a recording's place in its life, stored by variant number.
//! - [`clock`]: wall-clock time, injectable so retention and idle timeouts can be tested.
//! - [`error`]: the one error enum, keeping causes, and its `Kind`; what a client may read is
//!   decided there, and the conversion into a gRPC status that Rust's orphan rule puts beside
//!   the type.
//! - [`metrics`]: metric names and their descriptions.
//! - [`trace_context`]: the spans meant for traces, and the context they carry across calls.

pub mod clock;
pub mod error;
pub mod id;
pub mod metrics;
pub mod status;
pub mod trace_context;

pub use error::{Error, Result};
