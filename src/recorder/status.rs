//! The vocabulary of a recording's life: its [`Status`] and its committed [`Progress`]. The
//! store persists `Status` in its rows; everything else about a live recording is the
//! recorder's.
use serde::{Deserialize, Serialize};

/// Where a recording is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Status {
    /// A producer is appending to it.
    Recording,
    /// The producer finished it.
    Completed,
    /// Someone cancelled it.
    Cancelled,
    /// Its producer vanished: stream error, idle timeout, shutdown or crash.
    Interrupted,
    /// Storing it failed.
    Failed,
    /// Replaced by a newer recording of the same conversation and deleted. Never stored: only
    /// the readers and producer of the replaced recording see it.
    Superseded,
    /// Deleted on request. Stored only while its data is being deleted, then a tombstone says so.
    Deleted,
}

impl Status {
    /// The lower-case name used in logs and in the `tapedeck-status` trailer.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Recording => "recording",
            Status::Completed => "completed",
            Status::Cancelled => "cancelled",
            Status::Interrupted => "interrupted",
            Status::Failed => "failed",
            Status::Superseded => "superseded",
            Status::Deleted => "deleted",
        }
    }

    /// Whether the recording can still grow.
    pub fn is_live(self) -> bool {
        self == Status::Recording
    }

    /// Whether a producer may resume it: it ended without its producer finishing it.
    pub fn is_resumable(self) -> bool {
        matches!(self, Status::Interrupted | Status::Failed)
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

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
