//! The durable store: one redb file, written only by the commit pipeline's thread, read from
//! blocking threads. It persists and reads; what a recording *is* (its status, its live
//! readers, the live limit) belongs to the recorder, which the pipeline tells about each commit
//! through the [`LiveRecording`] hooks.
//!
//! The API is narrow on purpose (start / append / end / read / meta / sweep) so the physical
//! layout can change without touching callers.
//!
//! # Layout
//! - `schema`: the tables and how their values are encoded; `stored`: one recording's chunks
//!   as a read transaction sees them; `journal`: the append-ordered journal in front of
//!   `chunks`, and its in-memory index.
//! - `live`: the seam to the recorder (chunks, the hooks the pipeline calls).
//! - `pipeline`: the op types and the batching loop of the commit pipeline; `tables`: the
//!   transaction layer it applies ops with; `publish`: what happens after a commit, or after
//!   a failed one.
//! - `database`: the open file, reopened after I/O errors, and the disk reserve; `recovery`:
//!   opening a file, checking its schema, and closing off what a crash left live.

mod database;
mod journal;
mod live;
mod pipeline;
mod publish;
mod recovery;
pub mod schema;
mod stored;
mod tables;
#[cfg(test)]
mod tests;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio_util::task::TaskTracker;

use crate::clock::{Clock, SystemClock};
use crate::error::{Error, Result};
use crate::id::ConversationId;
use crate::recorder::Status;
use database::DbHandle;
use journal::JournalIndex;
pub use live::{Admit, Admitted, Chunk, Committed, Live, LiveRecording};
pub use pipeline::SweepReport;
use pipeline::{Op, Writer, WriterSettings};
pub use schema::RecordingMeta;
use stored::StoredChunks;

/// Ops waiting for the writer; a full queue makes producers wait (backpressure).
const OP_QUEUE_DEPTH: usize = 16 * 1024;
/// Most chunks deleted by one sweep commit, so a large sweep never stalls producers for long.
pub const MAX_CHUNKS_PER_SWEEP_COMMIT: u64 = 10_000;

/// How a [`Store`] behaves.
#[derive(Clone)]
pub struct StoreOptions {
    /// How long a finished recording is kept before the sweeper deletes it. Default 30 minutes.
    pub retention: Duration,
    /// Source of timestamps and expiry times. Default the system clock.
    pub clock: Arc<dyn Clock>,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            retention: Duration::from_secs(30 * 60),
            clock: Arc::new(SystemClock),
        }
    }
}

/// A handle on the open database; cheap to clone.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    db: Arc<DbHandle>,
    ops: mpsc::Sender<Op>,
    journal: Arc<JournalIndex>,
    clock: Arc<dyn Clock>,
    writer: Mutex<Option<JoinHandle<()>>>,
    /// Owns the ends queued from contexts that cannot wait (a dropped producer's handle);
    /// [`Store::close`] waits for them.
    background: TaskTracker,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

impl Store {
    /// Opens or creates the database file at `path`, recovers it, and starts the commit
    /// pipeline. Blocking: call it before serving, or from `spawn_blocking`.
    ///
    /// Fails when the file cannot be opened, is not a tapedeck database of this version, or
    /// recovery cannot be committed.
    pub fn open(path: &Path, options: StoreOptions) -> Result<Store> {
        let retention_ms = options.retention.as_millis() as u64;
        let db = recovery::open(path, options.clock.now_ms(), retention_ms)?;
        let db = Arc::new(DbHandle::new(path, db)?);
        let journal = Arc::new(JournalIndex::default());
        let (ops, receiver) = mpsc::channel(OP_QUEUE_DEPTH);
        let settings = WriterSettings {
            retention_ms,
            clock: options.clock.clone(),
        };
        let writer = Writer::new(db.clone(), journal.clone(), settings);
        let handle = std::thread::Builder::new()
            .name("tapedeck-writer".into())
            .spawn(move || writer.run(receiver))
            .map_err(Error::WriterThread)?;
        Ok(Store {
            inner: Arc::new(Inner {
                db,
                ops,
                journal,
                clock: options.clock,
                writer: Mutex::new(Some(handle)),
                background: TaskTracker::new(),
            }),
        })
    }

    /// The clock this store stamps recordings with.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    /// Starts a new recording of `id`, replacing (and deleting, in the same commit) whatever
    /// the conversation held before. `admit` decides, in queue order, whether it goes ahead and
    /// registers it; a live recording it replaces is told it was superseded after the commit.
    /// Returns once the start is committed.
    ///
    /// Fails with `admit`'s refusal, `ShuttingDown`, or a storage error.
    pub async fn start(&self, id: &ConversationId, admit: Admit) -> Result<()> {
        let (done, answer) = oneshot::channel();
        let id = id.clone();
        self.submit(Op::Start { id, admit, done }).await?;
        answer.await.map_err(|_| Error::ShuttingDown)?
    }

    /// Queues `chunk` for `live`. The receiver resolves after the commit that holds it.
    ///
    /// Fails with `ShuttingDown` when the store is closed.
    pub async fn append(&self, live: Live, chunk: Chunk) -> Result<Committed> {
        let (done, committed) = oneshot::channel();
        self.submit(Op::Append { live, chunk, done }).await?;
        Ok(committed)
    }

    /// Ends a live recording with `status` once everything queued before is committed.
    /// Returns `false` if it had already ended (the first end wins).
    ///
    /// Fails with `ShuttingDown` when the store is closed, or a storage error.
    pub async fn end(&self, live: Live, status: Status, message: Option<String>) -> Result<bool> {
        let (done, answer) = oneshot::channel();
        let op = Op::Finish {
            live,
            status,
            message,
            done,
        };
        self.submit(op).await?;
        answer.await.map_err(|_| Error::ShuttingDown)?
    }

    /// Ends a recording from a context that cannot wait (a `Drop`). When the queue is full,
    /// the op is handed to a task the store owns and [`close`](Self::close) waits for.
    pub fn end_in_background(&self, live: Live, status: Status, message: String) {
        let (done, _) = oneshot::channel();
        let op = Op::Finish {
            live,
            status,
            message: Some(message),
            done,
        };
        match self.inner.ops.try_send(op) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(op)) => {
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    let ops = self.inner.ops.clone();
                    let send = async move { ops.send(op).await };
                    runtime.spawn(self.inner.background.track_future(send));
                }
            }
            // The store is closed; recovery on the next open ends the recording instead.
            Err(mpsc::error::TrySendError::Closed(_)) => {}
        }
    }

    /// Deletes recordings whose retention has passed, in one commit of at most `max_chunks`
    /// deleted chunks; `more` in the report says whether expired data is left.
    ///
    /// Fails with `ShuttingDown` when the store is closed, or a storage error.
    pub async fn sweep_expired(&self, max_chunks: u64) -> Result<SweepReport> {
        let (done, answer) = oneshot::channel();
        self.submit(Op::Sweep { max_chunks, done }).await?;
        answer.await.map_err(|_| Error::ShuttingDown)?
    }

    /// Deletes every recording whose retention has passed, in commits of at most
    /// [`MAX_CHUNKS_PER_SWEEP_COMMIT`] chunks. Returns the totals.
    ///
    /// Fails as [`sweep_expired`](Self::sweep_expired) does.
    pub async fn collect_expired(&self) -> Result<SweepReport> {
        let mut total = SweepReport::default();
        loop {
            let report = self.sweep_expired(MAX_CHUNKS_PER_SWEEP_COMMIT).await?;
            total.recordings_deleted += report.recordings_deleted;
            total.chunks_deleted += report.chunks_deleted;
            if !report.more {
                return Ok(total);
            }
        }
    }

    async fn submit(&self, op: Op) -> Result<()> {
        self.inner
            .ops
            .send(op)
            .await
            .map_err(|_| Error::ShuttingDown)
    }

    /// The stored meta of conversation `key`'s latest recording. For a live one, the chunk
    /// count and byte length are what is committed now (the row itself holds them only once
    /// the recording has ended).
    ///
    /// Fails with a storage error.
    pub async fn meta(&self, key: u128) -> Result<Option<RecordingMeta>> {
        let journal = self.inner.journal.last(key);
        self.read(move |txn| {
            let recordings = txn.open_table(schema::RECORDINGS).map_err(Error::storage)?;
            let Some(bytes) = recordings.get(key).map_err(Error::storage)? else {
                return Ok(None);
            };
            let mut meta = schema::decode_meta(bytes.value())?;
            if meta.status.is_live() {
                (meta.chunk_count, meta.byte_len) =
                    StoredChunks::open(txn, key, journal)?.progress()?;
            }
            Ok(Some(meta))
        })
        .await
    }

    /// Committed chunks of recording `generation` of `key`, from chunk `from` on, stopping
    /// after `max_bytes` (at least one chunk is returned when any is there).
    ///
    /// Fails with `Superseded` if the conversation now holds another recording, or
    /// `RecordingNotFound` if it was deleted or the sweeper is deleting it.
    pub async fn read_chunks(
        &self,
        key: u128,
        generation: u64,
        from: u64,
        max_bytes: usize,
    ) -> Result<Vec<Chunk>> {
        // Every stored chunk holds at least a byte, but take a few more in case one is empty.
        let journal = self
            .inner
            .journal
            .view(key, from, max_bytes.saturating_add(64));
        self.read(move |txn| {
            check_generation(txn, key, generation)?;
            StoredChunks::open(txn, key, journal)?.read_from(from, max_bytes)
        })
        .await
    }

    /// The index of the chunk holding byte `offset` among the first `chunk_count` chunks of
    /// recording `generation` of `key`, by binary search over chunk start offsets (never a scan
    /// from the start). `offset` must be below the committed length.
    ///
    /// Fails as [`read_chunks`](Self::read_chunks) does.
    pub async fn locate(
        &self,
        key: u128,
        generation: u64,
        chunk_count: u64,
        offset: u64,
    ) -> Result<u64> {
        let journal = self.inner.journal.view(key, 0, usize::MAX);
        self.read(move |txn| {
            check_generation(txn, key, generation)?;
            let chunks = StoredChunks::open(txn, key, journal)?;
            // Invariant: chunk `low` starts at or before `offset`; chunk `high` starts after it.
            let (mut low, mut high) = (0, chunk_count);
            while high - low > 1 {
                let mid = low + (high - low) / 2;
                let start = chunks
                    .offset_of(mid)?
                    .ok_or_else(|| stored::being_collected(key))?;
                if start <= offset {
                    low = mid;
                } else {
                    high = mid;
                }
            }
            Ok(low)
        })
        .await
    }

    async fn read<T: Send + 'static>(
        &self,
        read: impl FnOnce(&redb::ReadTransaction) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let db = self.inner.db.clone();
        tokio::task::spawn_blocking(move || db.read(read))
            .await
            .map_err(Error::ReadTask)?
    }

    /// Stops the commit pipeline after it has committed everything queued (the ends queued
    /// in the background included), waits for it, and closes the database file; reads still
    /// under way finish first, later ones fail. Recordings still live stay `recording` in the
    /// file and are interrupted on the next open.
    pub async fn close(self) {
        self.inner.background.close();
        self.inner.background.wait().await;
        let handle = self
            .inner
            .writer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let _ = self.inner.ops.send(Op::Close).await;
        if let Some(handle) = handle {
            let _ = tokio::task::spawn_blocking(move || handle.join()).await;
        }
        let db = self.inner.db.clone();
        let closed = tokio::task::spawn_blocking(move || db.close()).await;
        if matches!(closed, Ok(true)) {
            tracing::info!("database closed");
        }
    }
}

fn check_generation(txn: &redb::ReadTransaction, key: u128, generation: u64) -> Result<()> {
    let recordings = txn.open_table(schema::RECORDINGS).map_err(Error::storage)?;
    let meta = match recordings.get(key).map_err(Error::storage)? {
        Some(bytes) => schema::decode_meta(bytes.value())?,
        None => return Err(stored::being_collected(key)),
    };
    if meta.generation != generation {
        return Err(Error::Superseded);
    }
    Ok(())
}
