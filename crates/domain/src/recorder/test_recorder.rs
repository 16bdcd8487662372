//! A recorder over a real store in a temporary directory, for the recorder's own tests.
use std::sync::Arc;
use std::time::Duration;

use tempfile::TempDir;

use crate::clock::ManualClock;
use crate::recorder::{Limits, LivePolicy, OnConflict, Recorder};
use crate::store::{Store, StoreOptions};

/// A recorder with `limits` over a fresh store, its clock fixed; the directory goes with the
/// `TempDir`.
pub(crate) fn fresh_recorder(limits: Limits) -> (TempDir, Recorder) {
    recorder_on_clock(limits, Arc::new(ManualClock::new(1_700_000_000_000)))
}

/// As [`fresh_recorder`], on `clock`, which the test moves.
pub(crate) fn recorder_on_clock(limits: Limits, clock: Arc<ManualClock>) -> (TempDir, Recorder) {
    let dir = tempfile::tempdir().unwrap();
    let options = StoreOptions {
        clock,
        ..StoreOptions::default()
    };
    let store = Store::open(&dir.path().join("tapedeck.redb"), options).unwrap();
    let policy = LivePolicy {
        max_live: 10,
        // Long enough that a detached recording waits for its resume.
        grace: Duration::from_secs(3600),
        on_conflict: OnConflict::Supersede,
    };
    (dir, Recorder::new(store, limits, policy))
}
