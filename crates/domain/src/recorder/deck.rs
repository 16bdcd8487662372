//! The deck: the live recordings (tapes) over the store. A start goes through the commit
//! pipeline and registers its tape in the registry (`registry.rs`) there; a resume
//! (`resume.rs`) takes over the live recording or reopens an ended one.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{Notify, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::changes::Changes;
use super::progress::Status;
use super::registry::{LivePolicy, Registry};
use super::tape::{Opening, Tape, TapeWriter};
use crate::error::{Error, Result};
use crate::id::ConversationId;
use crate::store::{Admission, Admit, Admitted, Live, Store, StreamRow};
use crate::tier::Tier;

/// The deck: the live recordings (tapes) over the store, starting one (with the live limit and
/// supersede), ending one, and finding them. The recorder is the API the faces call; the deck
/// is the machinery under it. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Deck {
    pub(super) store: Store,
    pub(super) registry: Arc<Registry>,
    /// The object store ended recordings are sealed into, when there is one. Boxed: every
    /// replay holds a deck, and many readers wait in one.
    pub(super) tier: Option<Arc<Tier>>,
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
        self.tier.as_deref()
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
