//! The vocabulary of a recording's life: its committed [`Progress`], and its [`Status`], which
//! lives below the store (`crate::status`, persisted in the store's rows) and is re-exported
//! here for the recorder's callers.
pub use crate::status::Status;

/// What is committed of a recording, and whether it has ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Number of committed chunks.
    pub chunks: u64,
    /// Committed UTF-8 length, in bytes.
    pub bytes: u64,
    /// `Recording` while live; otherwise how it ended.
    pub status: Status,
}
