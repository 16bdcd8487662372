//! The durable store: one redb file, written only by the commit pipeline thread, read from
//! blocking threads. Keeps the registry of live recordings and their committed high-water marks.
//!
//! The API is narrow on purpose (start / append / end / read / meta / sweep) so the physical
//! layout can change without touching callers.

mod database;
mod journal;
#[cfg(test)]
mod journal_tests;
mod recovery;
pub mod schema;
mod stored;
pub mod sweeper;
mod tape;
#[cfg(test)]
mod tests;
mod writer;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::clock::{Clock, SystemClock};
use crate::error::{Error, Result};
use crate::id::ConversationId;
use database::DbHandle;
use journal::JournalIndex;
pub use schema::{RecordingMeta, Status};
use stored::StoredChunks;
pub use tape::{Chunk, Committed, Progress, Tape, TapeWriter};
pub use writer::SweepReport;
use writer::{LiveTapes, Op, Writer, WriterSettings};

/// Ops waiting for the writer; a full queue makes producers wait (backpressure).
const OP_QUEUE_DEPTH: usize = 16 * 1024;

/// How a [`Store`] behaves.
#[derive(Clone)]
pub struct StoreOptions {
    /// How long a finished recording is kept before the sweeper deletes it.
    pub retention: Duration,
    /// Most recordings live at once; more starts fail with `TooManyLiveRecordings`.
    pub max_live: usize,
    /// Source of timestamps and expiry times.
    pub clock: Arc<dyn Clock>,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            retention: Duration::from_secs(30 * 60),
            max_live: 10_000,
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
    live: LiveTapes,
    journal: Arc<JournalIndex>,
    clock: Arc<dyn Clock>,
    writer: Mutex<Option<JoinHandle<()>>>,
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
        let live: LiveTapes = Arc::new(Mutex::new(HashMap::new()));
        let journal = Arc::new(JournalIndex::default());
        let (ops, receiver) = mpsc::channel(OP_QUEUE_DEPTH);
        let writer = Writer::new(
            db.clone(),
            live.clone(),
            journal.clone(),
            WriterSettings {
                retention_ms,
                max_live: options.max_live,
                clock: options.clock.clone(),
            },
        );
        let handle = std::thread::Builder::new()
            .name("tapedeck-writer".into())
            .spawn(move || writer.run(receiver))
            .map_err(|e| Error::Storage(format!("cannot start the writer thread: {e}")))?;
        Ok(Store {
            inner: Arc::new(Inner {
                db,
                ops,
                live,
                journal,
                clock: options.clock,
                writer: Mutex::new(Some(handle)),
            }),
        })
    }

    /// The clock this store stamps recordings with.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    /// Starts a new recording of `id`, replacing (and deleting, in the same commit) whatever
    /// the conversation held before; a live predecessor ends as `Superseded`. Returns once the
    /// start is committed.
    ///
    /// Fails with `TooManyLiveRecordings` at the live limit, or a storage error.
    pub async fn start(&self, id: &ConversationId) -> Result<TapeWriter> {
        let (done, answer) = oneshot::channel();
        self.submit(Op::Start {
            id: id.clone(),
            done,
        })
        .await?;
        let tape = answer.await.map_err(|_| Error::ShuttingDown)??;
        Ok(TapeWriter::new(self.clone(), tape))
    }

    pub(crate) async fn append(&self, tape: Arc<Tape>, chunk: Chunk) -> Result<Committed> {
        let (done, committed) = oneshot::channel();
        self.submit(Op::Append { tape, chunk, done }).await?;
        Ok(committed)
    }

    /// Ends a live recording with `status` once everything queued before is committed.
    /// Returns `false` if it had already ended (the first end wins).
    pub async fn end(
        &self,
        tape: &Arc<Tape>,
        status: Status,
        message: Option<String>,
    ) -> Result<bool> {
        let (done, answer) = oneshot::channel();
        self.submit(Op::Finish {
            tape: tape.clone(),
            status,
            message,
            done,
        })
        .await?;
        answer.await.map_err(|_| Error::ShuttingDown)?
    }

    /// Ends a recording from a context that cannot wait (a `Drop`).
    pub(crate) fn end_in_background(&self, tape: Arc<Tape>, status: Status, message: String) {
        let (done, _) = oneshot::channel();
        let op = Op::Finish {
            tape,
            status,
            message: Some(message),
            done,
        };
        match self.inner.ops.try_send(op) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(op)) => {
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    let ops = self.inner.ops.clone();
                    runtime.spawn(async move { ops.send(op).await });
                }
            }
            // The store is closed; recovery on the next open ends the recording instead.
            Err(mpsc::error::TrySendError::Closed(_)) => {}
        }
    }

    /// Deletes recordings whose retention has passed, in one commit of at most `max_chunks`
    /// deleted chunks; `more` in the report says whether expired data is left.
    pub async fn sweep_expired(&self, max_chunks: u64) -> Result<SweepReport> {
        let (done, answer) = oneshot::channel();
        self.submit(Op::Sweep { max_chunks, done }).await?;
        answer.await.map_err(|_| Error::ShuttingDown)?
    }

    async fn submit(&self, op: Op) -> Result<()> {
        self.inner
            .ops
            .send(op)
            .await
            .map_err(|_| Error::ShuttingDown)
    }

    /// The live recording of conversation `key`, if it has one.
    pub fn live(&self, key: u128) -> Option<Arc<Tape>> {
        self.live_tapes_lock().get(&key).cloned()
    }

    /// Every live recording.
    pub fn live_tapes(&self) -> Vec<Arc<Tape>> {
        self.live_tapes_lock().values().cloned().collect()
    }

    fn live_tapes_lock(&self) -> std::sync::MutexGuard<'_, HashMap<u128, Arc<Tape>>> {
        self.inner.live.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The stored meta of conversation `key`'s latest recording. For a live one, the chunk
    /// count and byte length are what is committed now (the row itself holds them only once
    /// the recording has ended).
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
            .map_err(|e| Error::Storage(format!("read task failed: {e}")))?
    }

    /// Stops the commit pipeline after it has committed everything queued, and waits for it.
    /// Recordings still live stay `recording` in the file and are interrupted on the next open.
    pub async fn close(self) {
        let handle = self
            .inner
            .writer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let _ = self.inner.ops.send(Op::Close).await;
        drop(self);
        if let Some(handle) = handle {
            let _ = tokio::task::spawn_blocking(move || handle.join()).await;
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
