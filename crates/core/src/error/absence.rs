//! Why a conversation has no recording: the reason a not-found names, and its message.
use crate::clock::rfc3339;

/// Why a conversation has no recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Absence {
    /// Never recorded here, or its tombstone is gone too.
    Unknown,
    /// Its retention passed and it was collected.
    Expired {
        /// When it had ended, in ms since the epoch.
        finished_ms: Option<u64>,
        /// When it was collected, in ms since the epoch.
        collected_ms: u64,
    },
    /// Someone deleted it.
    Deleted {
        /// When, in ms since the epoch.
        at_ms: u64,
    },
}

impl Absence {
    /// The reason's name, as a not-found reports it (gRPC's `tapedeck-reason` metadata):
    /// `unknown`, `expired` or `deleted`.
    pub fn reason(self) -> &'static str {
        match self {
            Absence::Unknown => "unknown",
            Absence::Expired { .. } => "expired",
            Absence::Deleted { .. } => "deleted",
        }
    }
}

/// The message of a not-found for conversation `id` (as the caller sent it).
pub(super) fn message(id: &str, why: Absence) -> String {
    match why {
        Absence::Unknown => format!(
            "unknown: no recording of conversation {id} (never recorded here, or collected \
             longer ago than --tombstone-retention)"
        ),
        Absence::Expired {
            finished_ms,
            collected_ms,
        } => {
            let ended =
                finished_ms.map_or_else(String::new, |at| format!(" ended {}", rfc3339(at)));
            format!(
                "expired: the recording of conversation {id}{ended} and was collected {} \
                 once its retention had passed",
                rfc3339(collected_ms)
            )
        }
        Absence::Deleted { at_ms } => format!(
            "deleted: the recording of conversation {id} was deleted {}",
            rfc3339(at_ms)
        ),
    }
}
