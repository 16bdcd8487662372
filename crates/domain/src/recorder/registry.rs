//! The live registry: at most one live recording per conversation, at most `max_live` in all.
//! A start registers its recording and supersedes (or, under the reject policy, refuses to
//! replace) the conversation's live one on the commit pipeline's thread, in queue order, before
//! anything is deleted. A recording leaves the registry when its end is published. Detached
//! recordings end after the grace period unless a producer resumes them.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::changes::Changes;
use super::progress::Status;
use super::tape::{Opening, Tape};
use crate::error::{Error, Result};
use crate::id::ConversationId;
use crate::store::{EndIf, Live, LiveRecording, Store};

/// What a new recording does to a conversation's live one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnConflict {
    /// Replaces it: its producer is told it was superseded, its data deleted.
    #[default]
    Supersede,
    /// Is refused with `AlreadyRecording`.
    Reject,
}

/// How live recordings behave.
#[derive(Debug, Clone, Copy)]
pub struct LivePolicy {
    /// Most recordings live at once.
    pub max_live: usize,
    /// How long a detached recording waits for its producer to resume.
    pub grace: Duration,
    /// What a new recording does to a live one.
    pub on_conflict: OnConflict,
}

impl Default for LivePolicy {
    /// The server's defaults: 10,000 live, a 30 s grace period, supersede.
    fn default() -> Self {
        Self {
            max_live: 10_000,
            grace: Duration::from_secs(30),
            on_conflict: OnConflict::Supersede,
        }
    }
}

/// Live recordings by conversation key.
#[derive(Debug)]
pub(crate) struct Registry {
    pub(super) tapes: Mutex<HashMap<u128, Arc<Tape>>>,
    pub(super) policy: LivePolicy,
    /// Woken whenever a recording joins or leaves.
    pub(super) changed: Notify,
    /// Cancelled at shutdown: grace periods stop running (detached recordings stay live in
    /// the file, for the next run).
    pub(super) stopping: CancellationToken,
    /// Owns the grace-period tasks; shutdown waits for them to return.
    pub(super) grace_tasks: TaskTracker,
    /// Conversations whose recording started, reopened or ended, for the locator.
    pub(super) changes: Changes,
    /// Conversations whose recording ended, for the sealer.
    pub(super) ended: Changes,
}

impl Registry {
    /// Registers a new recording of `id`, closing the live one it replaces.
    ///
    /// Fails with `AlreadyRecording` under the reject policy when the conversation has a live
    /// recording, or `TooManyLiveRecordings` when `max_live` other conversations are live.
    pub(super) fn admit(
        self: &Arc<Self>,
        id: ConversationId,
        opening: Opening,
    ) -> Result<(Arc<Tape>, Option<Arc<Tape>>)> {
        let key = id.key();
        let mut tapes = self.lock();
        let live_here = tapes.contains_key(&key);
        if live_here && self.policy.on_conflict == OnConflict::Reject {
            return Err(Error::AlreadyRecording { id: id.to_string() });
        }
        if !live_here && tapes.len() >= self.policy.max_live {
            return Err(Error::TooManyLiveRecordings {
                max: self.policy.max_live,
            });
        }
        let tape = Arc::new(Tape::new(id, opening, Arc::downgrade(self)));
        // Registered before the commit so that a reader arriving now waits on this tape; it
        // shows nothing until chunks are committed.
        let replaced = tapes.insert(key, tape.clone()).filter(|old| old.close());
        drop(tapes);
        self.changed.notify_waiters();
        Ok((tape, replaced))
    }

    /// Registers `recovered`, recordings whose producers are gone, as detached (their grace
    /// period starts now), except those already here; returns how many it registered.
    pub(super) fn adopt_detached(
        self: &Arc<Self>,
        store: &Store,
        recovered: Vec<crate::store::RecoveredLive>,
        reason: &str,
    ) -> usize {
        let now_ms = store.clock().now_ms();
        let mut adopted = 0;
        for recovered in recovered {
            if self.lock().contains_key(&recovered.id.key()) {
                continue;
            }
            let opening = Opening {
                generation: recovered.generation,
                now_ms,
                chunks: recovered.chunks,
                bytes: recovered.bytes,
                attached: false,
                timed_chunks: recovered.timed_chunks,
            };
            let tape = self.adopt(recovered.id, opening);
            if recovered.held_open {
                // A stream made over HTTP: the HTTP face takes it over; no grace runs out.
                tape.hold_open();
            }
            self.start_grace(store, &tape, 0, reason.to_string());
            adopted += 1;
        }
        adopted
    }

    /// Registers a recording that was live when the last run stopped, detached.
    fn adopt(self: &Arc<Self>, id: ConversationId, opening: Opening) -> Arc<Tape> {
        let tape = Arc::new(Tape::new(id, opening, Arc::downgrade(self)));
        self.lock().insert(tape.key(), tape.clone());
        self.changed.notify_waiters();
        tape
    }

    /// Ends `tape` as `interrupted` after the grace period, unless a producer resumes it or
    /// the server shuts down first. `session` is the producer that let go, for `reason`. A
    /// stream held open by the HTTP face has no grace period: it ends when closed or expired.
    pub(super) fn start_grace(
        &self,
        store: &Store,
        tape: &Arc<Tape>,
        session: u64,
        reason: String,
    ) {
        if self.stopping.is_cancelled() || tape.is_held_open() {
            return;
        }
        let grace = self.policy.grace;
        let message = format!(
            "the producer went away ({reason}) and did not resume within {}",
            humantime::format_duration(grace)
        );
        let only = EndIf::Detached(session);
        let live: Live = tape.clone();
        if grace.is_zero() {
            store.end_in_background(live, only, Status::Interrupted, message);
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            store.end_in_background(live, only, Status::Interrupted, message);
            return;
        };
        let (store, stopping) = (store.clone(), self.stopping.clone());
        runtime.spawn(self.grace_tasks.track_future(async move {
            tokio::select! {
                () = tokio::time::sleep(grace) => {}
                () = stopping.cancelled() => return,
            }
            if let Err(err) = store
                .end_if(live, only, Status::Interrupted, Some(message))
                .await
            {
                tracing::warn!(error = %err, "could not end a recording after its grace period");
            }
        }));
    }

    /// Removes `tape`, if it is still the one registered for its conversation.
    pub(super) fn unregister(&self, tape: &Tape) {
        let mut tapes = self.lock();
        if tapes
            .get(&tape.key())
            .is_some_and(|t| std::ptr::eq(Arc::as_ptr(t), tape))
        {
            tapes.remove(&tape.key());
            drop(tapes);
            self.changed.notify_waiters();
            self.changes.mark(tape.key());
            self.ended.mark(tape.key());
        }
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u128, Arc<Tape>>> {
        self.tapes.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Registry {
    /// Grace periods end with the recorder: their tasks hold the store, which must be free to
    /// close.
    fn drop(&mut self) {
        self.stopping.cancel();
    }
}
