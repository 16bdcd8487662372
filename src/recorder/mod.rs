//! The domain core: live recordings (status, committed high-water mark, the live registry and
//! its limit, the conflict policy), producer sessions (attach, detach, resume, fencing),
//! replays from any byte offset, cancel, delete, what is known about a recording, the live
//! check, idle timeouts, grace periods and shutdown; the Durable Streams rules (`streams`);
//! the limits every producer is held to (`limits`); the gauges' sampler (`gauges`).
//! Protocol-free: the faces sit on top, the store below.

mod changes;
mod deck;
pub mod gauges;
mod info;
mod limits;
mod producer;
mod registry;
mod replay;
mod resume;
pub mod sealer;
mod status;
mod stored;
pub mod streams;
pub mod sweeper;
mod tape;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

pub use changes::Changes;
pub use deck::Deck;
pub use info::{
    DEFAULT_PAGE_SIZE, Found, Listing, Location, MAX_PAGE_SIZE, RecordingInfo, page_limit,
};
pub use limits::SizeRefused;
pub use producer::{Producer, Stopped, not_completed_message};
pub use registry::{LivePolicy, OnConflict};
pub use replay::{ChunkMark, MAX_MESSAGE_BYTES, Piece, Replay};
pub use status::{Progress, Status};
pub use tape::{Holder, Tape, TapeWriter};

use crate::error::{Error, Result};
use crate::id::ConversationId;
use crate::store::Store;
use crate::tier::Tier;

/// Most conversation ids accepted by one live check.
pub const MAX_CHECK_IDS: usize = 1000;

/// Limits applied to producers.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest chunk, in UTF-8 bytes.
    pub max_chunk_bytes: usize,
    /// Largest recording, in UTF-8 bytes.
    pub max_recording_bytes: u64,
    /// Longest retention a producer may choose for its recording.
    pub max_retention: Duration,
}

/// How a producer opens its session.
#[derive(Debug, Clone, Copy, Default)]
pub struct StartOptions {
    /// Resume the conversation's recording, resending from this byte offset; `None` starts a
    /// new recording.
    pub resume_from: Option<u64>,
    /// Keep the recording this long once finished, instead of the server's retention.
    pub retention: Option<Duration>,
}

/// The recorder: cheap to clone, shared by every face.
#[derive(Clone, Debug)]
pub struct Recorder {
    deck: Deck,
    limits: Limits,
    shutting_down: Arc<AtomicBool>,
    /// Cancelled at shutdown: producers are told to go.
    stopping: CancellationToken,
    /// On a node of a cluster: where cancels and deletes are made (the leader, which runs
    /// every producer session).
    leader: Arc<OnceLock<Arc<dyn Leader>>>,
}

/// On a node of a cluster: the calls that end a recording, made on the leader.
pub trait Leader: Send + Sync + std::fmt::Debug + 'static {
    /// Cancels `id`'s live recording on the leader (see [`Recorder::cancel_here`]).
    fn cancel<'a>(&'a self, id: &'a ConversationId) -> BoxFuture<'a, Result<bool>>;
    /// Deletes `id`'s recording on the leader (see [`Recorder::delete_here`]).
    fn delete<'a>(&'a self, id: &'a ConversationId) -> BoxFuture<'a, Result<bool>>;
}

impl Recorder {
    /// A recorder over `store`; the recordings the last run left live are adopted, detached.
    pub fn new(store: Store, limits: Limits, policy: LivePolicy) -> Self {
        Self {
            deck: Deck::new(store, policy),
            limits,
            shutting_down: Arc::new(AtomicBool::new(false)),
            stopping: CancellationToken::new(),
            leader: Arc::new(OnceLock::new()),
        }
    }

    /// Makes cancels and deletes on `leader` from now on (a node of a cluster).
    pub fn end_on(&self, leader: Arc<dyn Leader>) {
        let _ = self.leader.set(leader);
    }

    /// This recorder, sealing ended recordings into `tier` and reading there what is not
    /// local. Set before the recorder is shared.
    pub fn with_tier(mut self, tier: Tier) -> Self {
        self.deck.tier = Some(tier);
        self
    }

    /// The live recordings and the store under them.
    pub fn deck(&self) -> &Deck {
        &self.deck
    }

    /// Opens a producer session on conversation `id`: a new recording (superseding or, under
    /// the reject policy, refused by a live one), or a resume of its recording (see
    /// [`Deck::resume`]).
    ///
    /// Fails with `RetentionTooLong`, `AlreadyRecording`, `TooManyLiveRecordings`,
    /// `ResumePastEnd`, `AlreadyEnded`, `ShuttingDown`, or a storage error.
    pub async fn start(&self, id: ConversationId, options: StartOptions) -> Result<Producer> {
        if self.is_shutting_down() {
            return Err(Error::ShuttingDown);
        }
        let retention_ms = match options.retention {
            Some(asked) => {
                self.limits.check_retention(asked)?;
                Some(asked.as_millis() as u64)
            }
            None => None,
        };
        // On a task of its own: a caller that goes away mid-start (its connection cut) drops
        // only the handle, and the producer's handle, once made, detaches like any other.
        let deck = self.deck.clone();
        let resume_from = options.resume_from;
        let starting = id.clone();
        let writer = tokio::spawn(async move {
            match resume_from {
                None => deck.start(&starting, retention_ms).await,
                Some(offset) => deck.resume(&starting, offset, retention_ms).await,
            }
        })
        .await
        .map_err(Error::Task)??;
        if self.is_shutting_down() {
            // Raced with shutdown: the recording stays live (detached) for the next run.
            writer.detach(SHUTDOWN_MESSAGE.into());
            return Err(Error::ShuttingDown);
        }
        let resume_from = options.resume_from.unwrap_or(0);
        Ok(Producer::new(
            writer,
            resume_from,
            self.limits,
            self.stopping.clone(),
        ))
    }

    /// Opens a replay of conversation `id` from byte `offset`.
    ///
    /// Fails with `RecordingNotFound`, `OffsetOutOfRange` (past the end of a finished
    /// recording), `OffsetInsideCharacter`, or a storage error.
    pub async fn replay(&self, id: &ConversationId, offset: u64) -> Result<Replay> {
        self.check_text(id).await?;
        Replay::open(self.deck.clone(), id, offset, true).await
    }

    /// Refuses a text replay of a stream made over HTTP that is not UTF-8 text, or that is a
    /// fork (its first bytes live in another recording). A recording live with its gRPC
    /// producer is text by construction and is not looked up.
    async fn check_text(&self, id: &ConversationId) -> Result<()> {
        if self
            .deck
            .live(id.key())
            .is_some_and(|tape| !tape.is_held_open())
        {
            return Ok(());
        }
        match self.deck.store().stream_row(id.key()).await? {
            Some(row) => text_stream(&row),
            None => Ok(()),
        }
    }

    /// Cancels the live recording of `id`. True if it was live, or had already been cancelled.
    ///
    /// Fails when the cancel cannot be committed, or the stored state cannot be read.
    pub async fn cancel(&self, id: &ConversationId) -> Result<bool> {
        match self.leader.get() {
            Some(leader) => leader.cancel(id).await,
            None => self.cancel_here(id).await,
        }
    }

    /// As [`cancel`](Self::cancel), on this node's recordings only (on a node of a cluster,
    /// the leader's).
    ///
    /// Fails as [`cancel`](Self::cancel) does.
    pub async fn cancel_here(&self, id: &ConversationId) -> Result<bool> {
        if let Some(tape) = self.deck.live(id.key())
            && self.deck.end(&tape, Status::Cancelled, None).await?
        {
            tracing::info!(conversation = %id, "recording cancelled");
            return Ok(true);
        }
        // Not live (or it ended just now): only an earlier cancel counts as accepted.
        let meta = self.deck.store().meta(id.key()).await?;
        Ok(meta.is_some_and(|m| m.status == Status::Cancelled))
    }

    /// Ends live recording `tape` as `superseded`, with `message` for its producer: a newer
    /// recording of its conversation started on another instance. False if it had ended.
    ///
    /// Fails when the end cannot be committed.
    pub async fn supersede(&self, tape: &Arc<Tape>, message: String) -> Result<bool> {
        let ended = self
            .deck
            .end(tape, Status::Superseded, Some(message))
            .await?;
        if ended {
            tracing::info!(conversation = %tape.id(), "recording superseded by another instance");
        }
        Ok(ended)
    }

    /// Deletes conversation `id`'s recording: a live one is cancelled first (its producer is
    /// told so, its readers end with `deleted`); its chunks are deleted in bounded commits and
    /// a tombstone is left. Returns whether there was a recording; deleting again is harmless.
    ///
    /// Fails when a commit fails; what is left is collected by the sweeper.
    pub async fn delete(&self, id: &ConversationId) -> Result<bool> {
        match self.leader.get() {
            Some(leader) => leader.delete(id).await,
            None => self.delete_here(id).await,
        }
    }

    /// As [`delete`](Self::delete), on this node only (on a node of a cluster, the leader).
    ///
    /// Fails as [`delete`](Self::delete) does.
    pub async fn delete_here(&self, id: &ConversationId) -> Result<bool> {
        let mut was_live = false;
        if let Some(tape) = self.deck.live(id.key()) {
            was_live = self
                .deck
                .end(
                    &tape,
                    Status::Deleted,
                    Some("the recording was deleted".into()),
                )
                .await?;
        }
        let existed = self.deck.store().delete(id.key()).await?;
        self.deck.changes().mark(id.key());
        // Its sealed copies go too, wherever it was recorded; the answer waits for the object
        // store, so that "deleted" is true everywhere (and a failure says so, to be retried).
        let existed = match self.deck.tier() {
            Some(tier) => tier.delete_copies(id.key(), self.now_ms()).await? || existed,
            None => existed,
        };
        if existed || was_live {
            metrics::counter!(crate::metrics::DELETED_RECORDINGS).increment(1);
            tracing::info!(conversation = %id, "recording deleted");
        }
        Ok(existed || was_live)
    }

    /// What is known about conversation `id`'s recording.
    ///
    /// Fails with a storage error.
    pub async fn get(&self, id: &ConversationId) -> Result<Found> {
        info::get(&self.deck, id).await
    }

    /// The Durable Streams row of conversation `id`, if its recording was made over HTTP.
    ///
    /// Fails with a storage error.
    pub async fn stream_row(&self, id: &ConversationId) -> Result<Option<crate::store::StreamRow>> {
        self.deck.store().stream_row(id.key()).await
    }

    /// A page of stored recordings in start order (see [`crate::store::Store::list`]).
    ///
    /// Fails with `BadPageToken`, or a storage error.
    pub async fn list(
        &self,
        page_token: Option<&str>,
        page_size: usize,
        only: Option<Status>,
    ) -> Result<Listing> {
        info::list(&self.deck, page_token, page_size, only).await
    }

    /// As [`cancel`](Self::cancel), then waits up to `wait` for the producer to let go.
    ///
    /// Fails as [`cancel`](Self::cancel) does.
    pub async fn cancel_and_wait(&self, id: &ConversationId, wait: Duration) -> Result<bool> {
        let tape = self.deck.live(id.key());
        let accepted = self.cancel(id).await?;
        if let Some(tape) = tape
            && tokio::time::timeout(wait, tape.producer_detached())
                .await
                .is_err()
        {
            tracing::warn!(conversation = %id, "producer still attached after cancel");
        }
        Ok(accepted)
    }

    /// The ids among `ids` whose recording is live (here, or on another instance by
    /// `live_elsewhere`) and that `visible` lets the caller see: request order, first of
    /// duplicates (by conversation) kept, each in the form the caller sent. Malformed ids are
    /// left out, as Memory Service does, rather than failing the call.
    ///
    /// Fails with `TooManyIds` over [`MAX_CHECK_IDS`].
    pub fn check_live(
        &self,
        ids: &[Vec<u8>],
        visible: impl Fn(&ConversationId) -> bool,
        live_elsewhere: &HashSet<u128>,
    ) -> Result<Vec<Vec<u8>>> {
        if ids.len() > MAX_CHECK_IDS {
            return Err(Error::TooManyIds {
                count: ids.len(),
                max: MAX_CHECK_IDS,
            });
        }
        let mut seen = HashSet::new();
        // On a node of a cluster, live is what the applied state says (`live_elsewhere`): the
        // leader's tape of a recording exists before its start is applied, and a replay on the
        // strength of it would find nothing yet.
        let tapes_count = !self.deck.store().is_replicated();
        Ok(ids
            .iter()
            .filter_map(|raw| ConversationId::parse(raw).ok())
            .filter(|id| {
                let key = id.key();
                let live_here = tapes_count && self.deck.live(key).is_some();
                seen.insert(key) && visible(id) && (live_here || live_elsewhere.contains(&key))
            })
            .map(|id| id.original().to_vec())
            .collect())
    }

    /// The limits producers are held to (every face's).
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Cancelled when the server shuts down: faces holding recordings open let go of them.
    pub fn stopping(&self) -> &CancellationToken {
        &self.stopping
    }

    /// Opens a byte replay of conversation `id` from byte `offset`: as
    /// [`replay`](Self::replay), with offsets and cuts anywhere (the HTTP face's reads).
    ///
    /// Fails as [`replay`](Self::replay) does, but never with `OffsetInsideCharacter`.
    pub async fn replay_bytes(&self, id: &ConversationId, offset: u64) -> Result<Replay> {
        Replay::open(self.deck.clone(), id, offset, false).await
    }

    /// What a new recording does to a conversation's live one.
    pub fn on_conflict(&self) -> OnConflict {
        self.deck.registry.policy.on_conflict
    }

    /// Refuses new recordings and tells every producer the server is shutting down; returns
    /// once they have all let go. Their recordings stay live (detached) in the file: after the
    /// restart they wait the grace period again for their producers to resume.
    pub async fn shutdown(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
        self.deck.stop_grace().await;
        self.stopping.cancel();
        for tape in self.deck.live_tapes() {
            tape.producer_detached().await;
        }
    }

    /// Whether shutdown has begun: new writes are refused from then on.
    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }

    /// Whether the disk is full: recordings cannot grow until space is freed.
    pub fn disk_full(&self) -> bool {
        self.deck.store().is_full()
    }

    /// On a node of a cluster, a count of the log entries applied here (each commit anywhere
    /// in the cluster is one); `None` on a single node.
    pub fn applied_entries(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        let store = self.deck.store();
        store.is_replicated().then(|| store.applied_changes())
    }
}

const SHUTDOWN_MESSAGE: &str = "server shutting down";

/// Refuses a text replay of stream `row` when it is not UTF-8 text, or is a fork (its first
/// bytes live in another recording).
pub(crate) fn text_stream(row: &crate::store::StreamRow) -> Result<()> {
    if row.fork.is_some() {
        return Err(Error::ForkedStream);
    }
    if !is_text(&row.content_type) {
        return Err(Error::NotText {
            content_type: row.content_type.clone(),
        });
    }
    Ok(())
}

/// Whether a stream of `content_type` holds UTF-8 text: `text/*`, JSON (and `+json`,
/// NDJSON), or anything declaring `charset=utf-8`.
pub fn is_text(content_type: &str) -> bool {
    let lower = content_type.to_ascii_lowercase();
    let essence = lower.split(';').next().unwrap_or("").trim();
    essence.starts_with("text/")
        || essence == "application/json"
        || essence.ends_with("+json")
        || essence == "application/ndjson"
        || essence == "application/x-ndjson"
        || lower.replace(' ', "").contains("charset=utf-8")
}
