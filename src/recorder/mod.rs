//! The domain core: live recordings (status, committed high-water mark, the live registry and
//! its limit, supersede), producer sessions, replays from any byte offset, cancel, the live
//! check, idle timeouts and shutdown. Protocol-free: the faces sit on top, the store below.

mod producer;
mod registry;
mod replay;
mod status;
pub mod sweeper;
mod tape;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub use producer::Producer;
pub use registry::Recordings;
pub use replay::{MAX_MESSAGE_BYTES, Piece, Replay};
pub use status::{Progress, Status};
pub use tape::{Tape, TapeWriter};

use crate::error::{Error, Result};
use crate::id::ConversationId;
use crate::store::Store;

/// Most conversation ids accepted by one live check.
pub const MAX_CHECK_IDS: usize = 1000;

/// Limits applied to producers.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest chunk, in UTF-8 bytes.
    pub max_chunk_bytes: usize,
    /// Largest recording, in UTF-8 bytes.
    pub max_recording_bytes: u64,
    /// Most recordings live at once.
    pub max_live_recordings: usize,
}

/// The recorder: cheap to clone, shared by every face.
#[derive(Clone, Debug)]
pub struct Recorder {
    recordings: Recordings,
    limits: Limits,
    shutting_down: Arc<AtomicBool>,
}

impl Recorder {
    /// A recorder over `store`, with no live recordings yet.
    pub fn new(store: Store, limits: Limits) -> Self {
        Self {
            recordings: Recordings::new(store, limits.max_live_recordings),
            limits,
            shutting_down: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The live recordings and the store under them.
    pub fn recordings(&self) -> &Recordings {
        &self.recordings
    }

    /// Starts recording conversation `id`, superseding a recording still live there.
    ///
    /// Fails with `TooManyLiveRecordings`, `ShuttingDown`, or a storage error.
    pub async fn start(&self, id: ConversationId) -> Result<Producer> {
        if self.is_shutting_down() {
            return Err(Error::ShuttingDown);
        }
        let writer = self.recordings.start(&id).await?;
        if self.is_shutting_down() {
            // Raced with shutdown's sweep over live recordings: end this one too.
            let _ = writer
                .finish(Status::Interrupted, Some(SHUTDOWN_MESSAGE.into()))
                .await;
            return Err(Error::ShuttingDown);
        }
        Ok(Producer::new(writer, self.limits))
    }

    /// Opens a replay of conversation `id` from byte `offset`.
    ///
    /// Fails with `RecordingNotFound`, `OffsetOutOfRange` (past the end of a finished
    /// recording), `OffsetInsideCharacter`, or a storage error.
    pub async fn replay(&self, id: &ConversationId, offset: u64) -> Result<Replay> {
        Replay::open(self.recordings.clone(), id, offset).await
    }

    /// Cancels the live recording of `id`. True if it was live, or had already been cancelled.
    ///
    /// Fails when the cancel cannot be committed, or the stored state cannot be read.
    pub async fn cancel(&self, id: &ConversationId) -> Result<bool> {
        if let Some(tape) = self.recordings.live(id.key())
            && self.recordings.end(&tape, Status::Cancelled, None).await?
        {
            tracing::info!(conversation = %id, "recording cancelled");
            return Ok(true);
        }
        // Not live (or it ended just now): only an earlier cancel counts as accepted.
        let meta = self.recordings.store().meta(id.key()).await?;
        Ok(meta.is_some_and(|m| m.status == Status::Cancelled))
    }

    /// As [`cancel`](Self::cancel), then waits up to `wait` for the producer to let go.
    ///
    /// Fails as [`cancel`](Self::cancel) does.
    pub async fn cancel_and_wait(&self, id: &ConversationId, wait: Duration) -> Result<bool> {
        let tape = self.recordings.live(id.key());
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

    /// The ids among `ids` whose recording is live and that `visible` lets the caller see:
    /// request order, first of duplicates (by conversation) kept, each in the form the caller
    /// sent. Malformed ids are left out, as Memory Service does, rather than failing the call.
    ///
    /// Fails with `TooManyIds` over [`MAX_CHECK_IDS`].
    pub fn check_live(
        &self,
        ids: &[Vec<u8>],
        visible: impl Fn(&ConversationId) -> bool,
    ) -> Result<Vec<Vec<u8>>> {
        if ids.len() > MAX_CHECK_IDS {
            return Err(Error::TooManyIds {
                count: ids.len(),
                max: MAX_CHECK_IDS,
            });
        }
        let mut seen = std::collections::HashSet::new();
        Ok(ids
            .iter()
            .filter_map(|raw| ConversationId::parse(raw).ok())
            .filter(|id| {
                seen.insert(id.key()) && visible(id) && self.recordings.live(id.key()).is_some()
            })
            .map(|id| id.original().to_vec())
            .collect())
    }

    /// Refuses new recordings and ends every live one as `interrupted`; their producers are
    /// told the server is shutting down and their replays end.
    pub async fn shutdown(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
        for tape in self.recordings.live_tapes() {
            if let Err(err) = self
                .recordings
                .end(&tape, Status::Interrupted, Some(SHUTDOWN_MESSAGE.into()))
                .await
            {
                tracing::warn!(conversation = %tape.id(), error = %err, "could not end a live recording at shutdown");
            }
        }
    }

    fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }
}

const SHUTDOWN_MESSAGE: &str = "server shutting down";
