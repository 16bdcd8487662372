//! Nudging waiting readers: waking each once with nothing new, so that it looks at its own
//! clock (a keepalive due, a connection's time up) or at the recorder's stop, and waits again.
//! A reader that waits this way holds no timer of its own, only its wait for a change: readers
//! are many and mostly idle (the HTTP face nudges the readers of quiet streams every few
//! seconds, spread over the streams, and the recorder nudges them all when it stops).
use std::sync::Arc;
use std::time::Duration;

use super::{Recorder, Tape};
use crate::store::Store;

/// The readers one nudge wakes.
pub struct ReaderNudge(Waiters);

enum Waiters {
    /// Those of one live recording here.
    Tape(Arc<Tape>),
    /// On a node of a cluster, those following recordings whose producer is on another node.
    Applied(Store),
}

impl ReaderNudge {
    /// Wakes them once.
    pub fn nudge(&self) {
        match &self.0 {
            Waiters::Tape(tape) => tape.nudge_readers(),
            Waiters::Applied(store) => store.nudge_applied_waiters(),
        }
    }
}

impl Recorder {
    /// A nudge for each group of waiting readers there is now, but those of a live recording
    /// that took a chunk within `quiet`: that woke them, and they looked at the clock as they
    /// caught up (a busy stream's readers are not all woken again for nothing).
    pub fn reader_nudges(&self, quiet: Duration) -> Vec<ReaderNudge> {
        let store = self.deck.store();
        let applied = store
            .is_replicated()
            .then(|| ReaderNudge(Waiters::Applied(store.clone())));
        let busy_since = store
            .clock()
            .now_ms()
            .saturating_sub(quiet.as_millis() as u64);
        self.deck
            .live_tapes()
            .into_iter()
            .filter(|tape| tape.last_activity_ms() <= busy_since)
            .map(|tape| ReaderNudge(Waiters::Tape(tape)))
            .chain(applied)
            .collect()
    }

    /// Wakes every waiting reader once.
    pub fn nudge_readers(&self) {
        for nudge in self.reader_nudges(Duration::ZERO) {
            nudge.nudge();
        }
    }
}
