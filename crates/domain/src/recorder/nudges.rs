//! Nudging waiting readers: waking each once with nothing new, so that it looks at its own
//! clock (a keepalive due, a connection's time up) or at the recorder's stop, and waits again.
//! A reader that waits this way holds no timer of its own, only its wait for a change: readers
//! are many and mostly idle (the HTTP face's SSE readers nudge every few seconds, spread over
//! the streams, and the recorder nudges them all when it stops).
use std::sync::Arc;

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
    /// A nudge for each group of waiting readers there is now.
    pub fn reader_nudges(&self) -> Vec<ReaderNudge> {
        let store = self.deck.store();
        let applied = store
            .is_replicated()
            .then(|| ReaderNudge(Waiters::Applied(store.clone())));
        self.deck
            .live_tapes()
            .into_iter()
            .map(|tape| ReaderNudge(Waiters::Tape(tape)))
            .chain(applied)
            .collect()
    }

    /// Wakes every waiting reader once.
    pub fn nudge_readers(&self) {
        for nudge in self.reader_nudges() {
            nudge.nudge();
        }
    }
}
