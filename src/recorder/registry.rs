//! The live recordings: at most one per conversation, at most `max_live` in all. A start
//! registers its recording and supersedes the conversation's live one on the commit pipeline's
//! thread, in queue order, before anything is deleted; a recording leaves the registry when its
//! end is published.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{Notify, oneshot};

use super::status::Status;
use super::tape::{Tape, TapeWriter};
use crate::error::{Error, Result};
use crate::id::ConversationId;
use crate::store::{Admit, Admitted, Live, LiveRecording, Store};

/// Live recordings by conversation key.
#[derive(Debug)]
pub(crate) struct Registry {
    tapes: Mutex<HashMap<u128, Arc<Tape>>>,
    max_live: usize,
    /// Woken whenever a recording joins or leaves.
    changed: Notify,
}

impl Registry {
    /// Registers a new recording of `id`, closing the live one it replaces.
    ///
    /// Fails with `TooManyLiveRecordings` when `max_live` other conversations are live.
    fn admit(
        self: &Arc<Self>,
        id: ConversationId,
        generation: u64,
        now_ms: u64,
    ) -> Result<(Arc<Tape>, Option<Arc<Tape>>)> {
        let key = id.key();
        let mut tapes = self.lock();
        if !tapes.contains_key(&key) && tapes.len() >= self.max_live {
            return Err(Error::TooManyLiveRecordings { max: self.max_live });
        }
        let tape = Arc::new(Tape::new(id, generation, now_ms, Arc::downgrade(self)));
        // Registered before the commit so that a reader arriving now waits on this tape; it
        // shows nothing until chunks are committed.
        let replaced = tapes.insert(key, tape.clone()).filter(|old| old.close());
        drop(tapes);
        self.changed.notify_waiters();
        Ok((tape, replaced))
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
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u128, Arc<Tape>>> {
        self.tapes.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The live recordings over the store: starting one (with the live limit and supersede),
/// ending one, and finding them. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Recordings {
    store: Store,
    registry: Arc<Registry>,
}

impl Recordings {
    /// No live recordings yet over `store`; at most `max_live` at once.
    pub fn new(store: Store, max_live: usize) -> Self {
        let registry = Registry {
            tapes: Mutex::new(HashMap::new()),
            max_live,
            changed: Notify::new(),
        };
        Self {
            store,
            registry: Arc::new(registry),
        }
    }

    /// The store underneath.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Starts a new recording of `id`, replacing (and deleting, in the same commit) whatever
    /// the conversation held before; a live predecessor ends as `Superseded`. Returns once the
    /// start is committed.
    ///
    /// Fails with `TooManyLiveRecordings` at the live limit, or a storage error.
    pub async fn start(&self, id: &ConversationId) -> Result<TapeWriter> {
        let (made, tape) = oneshot::channel();
        let registry = self.registry.clone();
        let starting = id.clone();
        let admit: Admit = Box::new(move |generation, now_ms| {
            let (tape, replaced) = registry.admit(starting, generation, now_ms)?;
            let _ = made.send(tape.clone());
            Ok(Admitted {
                live: tape,
                replaced: replaced.map(|old| old as Live),
            })
        });
        self.store.start(id, admit).await?;
        let tape = tape.await.map_err(|_| Error::ShuttingDown)?;
        tracing::info!(conversation = %id, generation = tape.generation(), "recording started");
        Ok(TapeWriter::new(self.store.clone(), tape))
    }

    /// Ends a live recording with `status` once everything queued before is committed.
    /// Returns `false` if it had already ended (the first end wins).
    ///
    /// Fails when the end cannot be committed.
    pub async fn end(
        &self,
        tape: &Arc<Tape>,
        status: Status,
        message: Option<String>,
    ) -> Result<bool> {
        self.store.end(tape.clone(), status, message).await
    }

    /// The live recording of conversation `key`, if it has one.
    pub fn live(&self, key: u128) -> Option<Arc<Tape>> {
        self.registry.lock().get(&key).cloned()
    }

    /// Every live recording.
    pub fn live_tapes(&self) -> Vec<Arc<Tape>> {
        self.registry.lock().values().cloned().collect()
    }

    /// Resolves at the next change of the registry. Enable it (or poll it) before looking, so
    /// that a change between the look and the wait is not missed.
    pub(crate) fn changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.registry.changed.notified()
    }
}
