//! How a [`Store`](super::Store) behaves: its options and their defaults.
use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Clock, SystemClock};
use crate::files::{Files, RealFiles};

/// Most chunks deleted by one sweep commit, so a large sweep never stalls producers for long.
pub const MAX_CHUNKS_PER_SWEEP_COMMIT: u64 = 10_000;

/// Default size of the write-ahead log that triggers a checkpoint.
pub const DEFAULT_CHECKPOINT_BYTES: u64 = 32 * 1024 * 1024;
/// Default memory redb keeps pages of the file in: enough for the pages the commit pipeline
/// touches (the journal is in memory, not in redb), without letting the process grow by all
/// it reads (redb's own default is 1 GiB). Catch-up reads beyond it come from the OS page
/// cache: (c) of the bench replays as fast with 16 MiB as with 64.
pub const DEFAULT_CACHE_BYTES: u64 = 16 * 1024 * 1024;

/// Default most time from the start of a commit of several ops to the next one's; the wait is
/// usually shorter, as long as the last commit took (see `pacing` and BENCHMARKS.md, "Round 4:
/// the commit policy").
pub const DEFAULT_COMMIT_INTERVAL: Duration = Duration::from_millis(4);

/// How a [`Store`] behaves.
#[derive(Clone)]
pub struct StoreOptions {
    /// How long a finished recording is kept before the sweeper deletes it (unless it chose
    /// its own). Default 30 minutes.
    pub retention: Duration,
    /// How long a collected recording's tombstone is kept. Default 24 hours.
    pub tombstone_retention: Duration,
    /// Source of timestamps and expiry times. Default the system clock.
    pub clock: Arc<dyn Clock>,
    /// Size the write-ahead log grows to before a checkpoint empties it; bounds what a restart
    /// after a crash rolls forward. Default 32 MiB.
    pub checkpoint_bytes: u64,
    /// Memory redb keeps pages of the file in (reads beyond it come from the OS page cache).
    /// Default 16 MiB.
    pub cache_bytes: usize,
    /// Group commit: after a commit of several ops, the next one may wait for as many, for no
    /// longer than the last commit took and never past this long from its start, so that
    /// each sync carries more. Zero commits as soon as the last commit is done. Default 4 ms.
    pub commit_interval: Duration,
    /// The store is one node of a cluster: commits go to the cluster's log (see
    /// [`Store::replicate_through`](super::Store::replicate_through)) and committed entries
    /// are applied with [`Store::apply_entry`](super::Store::apply_entry). Default false.
    pub replicated: bool,
    /// The file system the database file, its write-ahead log and the disk reserve are on:
    /// every read, write, sync, rename and removal of them goes through it. Default the
    /// operating system's ([`RealFiles`]); a test may put a simulated disk here.
    pub files: Arc<dyn Files>,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            retention: Duration::from_secs(30 * 60),
            tombstone_retention: Duration::from_secs(24 * 60 * 60),
            clock: Arc::new(SystemClock),
            checkpoint_bytes: DEFAULT_CHECKPOINT_BYTES,
            cache_bytes: DEFAULT_CACHE_BYTES as usize,
            commit_interval: DEFAULT_COMMIT_INTERVAL,
            replicated: false,
            files: Arc::new(RealFiles),
        }
    }
}

/// The store's settings, as `tapedeck serve`'s flags give them; [`StoreOptions`] adds what the
/// server wires in (the clock, the cluster, the file system).
#[derive(Debug, Clone)]
pub struct StoreSettings {
    /// How long a finished recording stays replayable (`--retention`). Default 30 minutes.
    pub retention: Duration,
    /// How long a collected recording's tombstone answers "expired"
    /// (`--tombstone-retention`). Default 24 hours.
    pub tombstone_retention: Duration,
    /// Size of the write-ahead log that makes the next commit a checkpoint; bounds what a
    /// restart after a crash rolls forward (`--checkpoint-size`). Default 32 MiB.
    pub checkpoint_bytes: u64,
    /// Memory redb keeps pages of the file in (`--cache-size`). Default 16 MiB.
    pub cache_bytes: u64,
    /// Group commit: after a commit of several ops, the next one may wait for as many, for no
    /// longer than the last commit took and never past this long from its start; zero commits
    /// as soon as the last commit is done (`--commit-interval`). Default 4 ms.
    pub commit_interval: Duration,
}

impl Default for StoreSettings {
    fn default() -> Self {
        Self {
            retention: Duration::from_secs(30 * 60),
            tombstone_retention: Duration::from_secs(24 * 60 * 60),
            checkpoint_bytes: DEFAULT_CHECKPOINT_BYTES,
            cache_bytes: DEFAULT_CACHE_BYTES,
            commit_interval: DEFAULT_COMMIT_INTERVAL,
        }
    }
}

impl StoreSettings {
    /// The options of a store with these settings, on the system clock and file system;
    /// `replicated` when it is one node of a cluster.
    pub fn options(&self, replicated: bool) -> StoreOptions {
        StoreOptions {
            retention: self.retention,
            tombstone_retention: self.tombstone_retention,
            checkpoint_bytes: self.checkpoint_bytes,
            cache_bytes: usize::try_from(self.cache_bytes).unwrap_or(usize::MAX),
            commit_interval: self.commit_interval,
            replicated,
            ..StoreOptions::default()
        }
    }
}
