//! [`Status`]: where a recording is in its life. The store persists it in its rows and the
//! recorder decides it, so it lives below both and depends on serde alone.
use serde::{Deserialize, Serialize};

/// Where a recording is in its life.
///
/// Invariant: rows store a status by its bincode variant number, so variants are only ever
/// appended at the end, never reordered or removed; a new one needs no schema change, a
/// reordered one would misread every stored row.
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

#[cfg(test)]
mod tests {
    use super::Status;

    /// The numbers rows store: a reordered or removed variant fails here before it misreads a
    /// file.
    #[test]
    fn variant_numbers_are_stable() {
        let numbers = [
            (Status::Recording, 0u8),
            (Status::Completed, 1),
            (Status::Cancelled, 2),
            (Status::Interrupted, 3),
            (Status::Failed, 4),
            (Status::Superseded, 5),
            (Status::Deleted, 6),
        ];
        for (status, number) in numbers {
            let encoded = bincode::serde::encode_to_vec(status, bincode::config::standard())
                .expect("a status encodes");
            assert_eq!(encoded, [number], "{status}");
        }
    }
}
