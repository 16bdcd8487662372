//! The live recordings: at most one per conversation, at most `max_live` in all. A start
//! registers its recording and supersedes (or, under the reject policy, refuses to replace)
//! the conversation's live one on the commit pipeline's thread, in queue order, before
//! anything is deleted; a resume (`resume.rs`) takes over the live recording or reopens an
//! ended one. A recording leaves the registry when its end is published. Detached recordings
//! end after the grace period unless a producer resumes them.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::changes::Changes;
use super::status::Status;
use super::tape::{Opening, Tape, TapeWriter};
use crate::error::{Error, Result};
use crate::id::ConversationId;
use crate::store::{Admission, Admit, Admitted, EndIf, Live, LiveRecording, Store, StreamRow};
use crate::tier::Tier;

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
    tapes: Mutex<HashMap<u128, Arc<Tape>>>,
    pub(super) policy: LivePolicy,
    /// Woken whenever a recording joins or leaves.
    changed: Notify,
    /// Cancelled at shutdown: grace periods stop running (detached recordings stay live in
    /// the file, for the next run).
    stopping: CancellationToken,
    /// Owns the grace-period tasks; shutdown waits for them to return.
    grace_tasks: TaskTracker,
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
    fn adopt_detached(
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

/// The deck: the live recordings (tapes) over the store, starting one (with the live limit and
/// supersede), ending one, and finding them. The recorder is the API the faces call; the deck
/// is the machinery under it. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Deck {
    pub(super) store: Store,
    pub(super) registry: Arc<Registry>,
    /// The object store ended recordings are sealed into, when there is one.
    pub(super) tier: Option<Tier>,
}

impl Deck {
    /// The live recordings over `store`: those the last run left live, adopted as detached
    /// (their grace period starts now), and none else yet.
    pub fn new(store: Store, policy: LivePolicy) -> Self {
        let registry = Arc::new(Registry {
            tapes: Mutex::new(HashMap::new()),
            policy,
            changed: Notify::new(),
            stopping: CancellationToken::new(),
            grace_tasks: TaskTracker::new(),
            changes: Changes::default(),
            ended: Changes::default(),
        });
        // On a node of a cluster, the leader adopts what is left live once it leads (see
        // `adopt_left_live`): followers hold no tapes.
        if !store.is_replicated() {
            registry.adopt_detached(&store, store.take_recovered(), "the server restarted");
        }
        Self {
            store,
            registry,
            tier: None,
        }
    }

    /// On a node of a cluster that has come to lead: adopts, detached, the recordings live in
    /// the store that have no tape here (their producers were on the node that led before, and
    /// may resume here); returns how many.
    ///
    /// Fails with a storage error.
    pub async fn adopt_left_live(&self) -> crate::error::Result<usize> {
        let live = self.store.live_recordings().await?;
        Ok(self
            .registry
            .adopt_detached(&self.store, live, "its node lost the lead"))
    }

    /// On a node of a cluster that stopped leading: drops every tape, refusing their later
    /// ops (their producers, forwarded here, go on with the next leader, which adopts the
    /// recordings afresh from what is committed). Returns how many there were.
    pub fn depose_all(&self) -> usize {
        let tapes: Vec<Arc<Tape>> = self.registry.lock().drain().map(|(_, tape)| tape).collect();
        for tape in &tapes {
            tape.depose();
        }
        self.registry.changed.notify_waiters();
        tapes.len()
    }

    /// Stops the grace periods under way and waits for their tasks: at shutdown, detached
    /// recordings stay live in the file and their grace period starts again at the next
    /// start-up.
    pub(crate) async fn stop_grace(&self) {
        self.registry.stopping.cancel();
        self.registry.grace_tasks.close();
        self.registry.grace_tasks.wait().await;
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
    pub async fn start(
        &self,
        id: &ConversationId,
        retention_ms: Option<u64>,
    ) -> Result<TapeWriter> {
        self.start_with_row(id, retention_ms, None).await
    }

    /// As [`start`](Self::start), with `stream_row` as the new recording's `streams` row,
    /// written in the same commit (a stream created over HTTP).
    ///
    /// Fails as [`start`](Self::start) does.
    pub async fn start_with_row(
        &self,
        id: &ConversationId,
        retention_ms: Option<u64>,
        stream_row: Option<&StreamRow>,
    ) -> Result<TapeWriter> {
        let registry = self.registry.clone();
        let starting = id.clone();
        let (tape, _) = self
            .admit(id, retention_ms, stream_row, move |admission| {
                let generation = admission.previous.map_or(1, |p| p.generation + 1);
                let opening = fresh(generation, admission.now_ms);
                let (tape, replaced) = registry.admit(starting, opening)?;
                Ok((tape, replaced, false))
            })
            .await?;
        tracing::info!(conversation = %id, generation = tape.generation(), "recording started");
        Ok(TapeWriter::new(self.store.clone(), tape))
    }

    /// Starts or reopens a recording through the commit pipeline; `decide` registers it (or
    /// refuses) on the pipeline's thread. Returns the tape and whether it was reopened.
    pub(super) async fn admit(
        &self,
        id: &ConversationId,
        retention_ms: Option<u64>,
        stream_row: Option<&StreamRow>,
        decide: impl FnOnce(Admission<'_>) -> Result<(Arc<Tape>, Option<Arc<Tape>>, bool)>
        + Send
        + 'static,
    ) -> Result<(Arc<Tape>, bool)> {
        let (made, tape) = oneshot::channel();
        let admit: Admit = Box::new(move |admission| {
            let (tape, replaced, reopen) = decide(admission)?;
            let _ = made.send((tape.clone(), reopen));
            Ok(Admitted {
                live: tape,
                replaced: replaced.map(|old| old as Live),
                reopen,
            })
        });
        self.store
            .start(id, retention_ms, stream_row, admit)
            .await?;
        let made = tape.await.map_err(|_| Error::ShuttingDown)?;
        self.registry.changes.mark(id.key());
        Ok(made)
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

    /// Conversations whose recording started, reopened, ended or was deleted.
    pub fn changes(&self) -> &Changes {
        &self.registry.changes
    }

    /// Conversations whose recording ended (or was deleted), for the sealer.
    pub(crate) fn ended(&self) -> &Changes {
        &self.registry.ended
    }

    /// The object store ended recordings are sealed into, if there is one.
    pub fn tier(&self) -> Option<&Tier> {
        self.tier.as_ref()
    }

    /// Resolves at the next change of the registry. Enable it (or poll it) before looking, so
    /// that a change between the look and the wait is not missed.
    pub(crate) fn changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.registry.changed.notified()
    }
}

/// The opening of a new recording, held by producer session 1.
pub(super) fn fresh(generation: u64, now_ms: u64) -> Opening {
    Opening {
        generation,
        now_ms,
        chunks: 0,
        bytes: 0,
        attached: true,
        timed_chunks: true,
    }
}
