//! The domain core: live recordings (status, committed high-water mark, the live registry and
//! its limit, the conflict policy), producer sessions (attach, detach, resume, fencing),
//! replays from any byte offset, cancel, delete, what is known about a recording, the live
//! check, idle timeouts, grace periods and shutdown; the Durable Streams rules (`streams`);
//! the limits every producer is held to (`limits`); the gauges' sampler (`gauges`).
//! Protocol-free: the faces sit on top, the store below.
//!
//! # Layout
//! - this file: [`Recorder`], the handle every face holds: starting producer sessions,
//!   opening replays, shutdown.
//! - `deck`: the live recordings over the store (start, end, find); `registry`: the live
//!   registry under it (the live limit, supersede, grace periods).
//! - `tape`: a live recording in memory; `producer`: one producer's session on it;
//!   `resume`: resuming one, or reopening an ended one; `limits`: what producers are held to.
//! - `replay`: one reader's walk through a recording; `text`: which streams are UTF-8 text.
//! - `ending`: cancel, supersede and delete; `live_check`: which conversations are live.
//! - `info`: what is known about recordings (get, list); `queries`: rows and the object
//!   store's copies, asked through the recorder; `progress`: a recording's life.
//! - `changes`: the change set the locator and the console follow; `sealer`: sealing ended
//!   recordings into the object store; `sweeper`: idle timeouts and retention;
//!   `gauges`: the gauges' sampler.
//! - `streams`: the Durable Streams rules.

#[cfg(test)]
mod batched_appends;
mod changes;
mod deck;
mod duties;
mod ending;
pub mod gauges;
mod info;
mod limits;
mod live_check;
mod nudges;
mod producer;
mod progress;
mod queries;
mod registry;
mod replay;
mod resume;
pub mod sealer;
mod settings;
#[cfg(test)]
mod store_under_the_recorder;
#[cfg(test)]
mod stream_appends;
pub mod streams;
pub mod sweeper;
mod tape;
#[cfg(test)]
mod test_recorder;
mod text;

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
pub use live_check::MAX_CHECK_IDS;
pub use nudges::ReaderNudge;
pub use producer::{Producer, Stopped, not_completed_message};
pub use progress::{Progress, Status};
pub use registry::{LivePolicy, OnConflict};
pub use replay::{ChunkMark, MAX_MESSAGE_BYTES, Piece, Replay};
pub use settings::RecorderSettings;
pub use tape::{Holder, Place, Tape, TapeWriter};
pub use text::is_text;
// Values the faces read and hand back, kept by the store: re-exported here, so that a face
// names them as the domain's and never reaches the store.
pub use crate::store::{Committed, Gone, PageToken, ProducerStamp, RecordingMeta, Tombstone};
pub(crate) use text::text_stream;

use crate::error::{Error, Result};
use crate::id::ConversationId;
use crate::store::Store;
use crate::tier::Tier;

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
        self.deck.tier = Some(Arc::new(tier));
        self
    }

    /// The live recordings and the store under them: the domain's own, never a face's.
    pub(crate) fn deck(&self) -> &Deck {
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
        // Readers wait for a change only: woken, they see the stop.
        self.nudge_readers();
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
