//! [`RecorderSettings`]: what `tapedeck serve`'s flags set of the recorder: the limits producers
//! are held to, the live registry's policy, and the sweeper's schedule.
use std::time::Duration;

use super::{Limits, LivePolicy, OnConflict};

/// The recorder's settings.
#[derive(Debug, Clone)]
pub struct RecorderSettings {
    /// Longest retention a producer may choose for its own recording (`--max-retention`).
    /// Default 7 days.
    pub max_retention: Duration,
    /// How long a recording whose producer went away waits for it to resume before it ends as
    /// `interrupted` (`--producer-grace`). Default 30 seconds.
    pub producer_grace: Duration,
    /// What a new recording does to a conversation's live one (`--on-conflict`). Default
    /// supersede.
    pub on_conflict: OnConflict,
    /// How often the sweeper collects expired and idle recordings (`--gc-interval`). Default
    /// 60 seconds.
    pub gc_interval: Duration,
    /// A live recording with no token for this long is ended as `interrupted`
    /// (`--idle-timeout`). Default 1 hour.
    pub idle_timeout: Duration,
    /// Largest single chunk, in UTF-8 bytes (`--max-chunk-bytes`). Default 1 MiB.
    pub max_chunk_bytes: usize,
    /// Largest recording, in UTF-8 bytes (`--max-recording-bytes`). Default 64 MiB.
    pub max_recording_bytes: u64,
    /// Most recordings live at once (`--max-live-recordings`). Default 10,000.
    pub max_live_recordings: usize,
}

impl Default for RecorderSettings {
    fn default() -> Self {
        Self {
            max_retention: Duration::from_secs(7 * 24 * 60 * 60),
            producer_grace: Duration::from_secs(30),
            on_conflict: OnConflict::Supersede,
            gc_interval: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(60 * 60),
            max_chunk_bytes: 1024 * 1024,
            max_recording_bytes: 64 * 1024 * 1024,
            max_live_recordings: 10_000,
        }
    }
}

impl RecorderSettings {
    /// The limits producers are held to.
    pub fn limits(&self) -> Limits {
        Limits {
            max_chunk_bytes: self.max_chunk_bytes,
            max_recording_bytes: self.max_recording_bytes,
            max_retention: self.max_retention,
        }
    }

    /// The live registry's policy.
    pub fn live_policy(&self) -> LivePolicy {
        LivePolicy {
            max_live: self.max_live_recordings,
            grace: self.producer_grace,
            on_conflict: self.on_conflict,
        }
    }
}
