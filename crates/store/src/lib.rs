//! The durable store: one redb file, written only by the commit pipeline's thread, read from
//! blocking threads. It persists and reads; what a recording *is* (its status, its live
//! readers, the live limit) belongs to the recorder, which the pipeline tells about each commit
//! through the [`LiveRecording`] hooks.
//!
//! The API is narrow on purpose (start / append / end / read / meta / sweep) so the physical
//! layout can change without touching callers.
//!
//! # Layout
//! - `schema`: the tables and how their values are encoded; `stored_chunks`: one recording's
//!   chunks as a read transaction sees them; `journal`: live recordings' newest chunks, held in
//!   memory (durable in the log) until they are folded into `chunks`; `read_cache`: large
//!   chunks read lately, kept in memory.
//! - `live`: the seam to the recorder (chunks, the hooks the pipeline calls).
//! - `options`: [`StoreOptions`]; `writes`: a recording's writes (start, attach, append, end).
//! - `ops`: the commit pipeline's ops, a module each holding what it does in the write
//!   transaction, what it leaves to do after the commit, and what it answers; `pipeline`: the
//!   batching loop; `tables`: the transaction layer ops apply to (`tables/sweep`, the
//!   collection of expired recordings; `tables/streams`, the `streams` rows and fork counts;
//!   `tables/folds`, the end of a transaction's work);
//!   `publish`: what happens after a commit, or after a failed one.
//! - `files`: the seam under the store, [`Files`]: every read, write, sync, rename and removal
//!   of the database file, its log and the disk reserve goes through it ([`RealFiles`] by
//!   default, `sim_disk`'s simulated disk in the power-cut tests).
//! - `database`: the open file and its write-ahead log, how a commit goes to them; `disk`:
//!   reopening after I/O errors, and the disk reserve; `wal`: the log itself (frames, the
//!   logged tables, the encoded changes, rolling a file forward through the log);
//!   `recovery`: opening a file, rolling it forward, checking its schema, and finding what
//!   the last run left live (`live_index`: the table that names them); `upgrade`: rewriting files of older schemas; `replicated`: the
//!   store as a node of a cluster (commits proposed to its log, committed entries applied);
//!   `table_dump`: a node's tables as one stream of bytes, what a snapshot of the cluster's
//!   log holds; `reads`: the read API; `listing`: reading rows, tombstones and pages of them.
//! - `offline`: the `tapedeck db` tools; `overlay`: the storage they read a file through,
//!   holding redb's writes in memory so that a check never changes the file.

// The shared words, under the names the rest of tapedeck uses for them.
use tapedeck_core::{clock, error, id, metrics, status};

mod batch;
mod database;
mod disk;
mod files;
mod journal;
mod kept_unfolded;
mod listing;
mod live;
mod live_index;
pub mod offline;
mod ops;
mod options;
mod overlay;
mod pacing;
mod pipeline;
mod publish;
mod read_cache;
mod reads;
mod recovery;
mod replicated;
pub mod schema;
mod seal_marks;
mod sealing;
mod segment;
#[cfg(any(test, feature = "sim"))]
pub mod sim_disk;
mod stored_chunks;
mod stream_row;
mod table_dump;
mod tables;
#[cfg(test)]
mod tests;
mod upgrade;
mod wal;
mod writes;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio_util::task::TaskTracker;

use crate::clock::Clock;
use crate::error::{Error, Result};
pub use batch::{Batch, BatchCommitted};
use database::DbHandle;
pub use files::{FileHandle, Files, OpenMode, RealFiles};
use journal::JournalIndex;
pub use listing::{Lookup, Page, PageToken};
pub use live::{Admission, Admit, Admitted, Chunk, Committed, Live, LiveRecording, Resumed};
pub use ops::{EndIf, SweepReport};
use ops::{Op, Queued};
pub use options::{
    DEFAULT_CACHE_BYTES, DEFAULT_CHECKPOINT_BYTES, DEFAULT_COMMIT_INTERVAL,
    MAX_CHUNKS_PER_SWEEP_COMMIT, StoreOptions, StoreSettings,
};
use pipeline::{Writer, WriterSettings};
pub use recovery::RecoveredLive;
pub use replicated::Replication;
pub use schema::{Gone, RecordingMeta, Tombstone};
pub use seal_marks::{SealMark, Sealing};
pub use sealing::{RecordingCopy, ScheduleCursor};
pub use stream_row::{ForkOf, ProducerStamp, ProducerState, StreamRow};

/// Ops waiting for the writer; a full queue makes producers wait (backpressure).
const OP_QUEUE_DEPTH: usize = 16 * 1024;
/// Chunk bytes waiting for the writer; past it, producers wait too. With small tokens the
/// count above binds first (16,384 tokens of 32 B are half a MiB); with large ones this does,
/// which also bounds the writer's batches (each becomes one log frame and one redb
/// transaction). A bulk load's peak memory follows it: 1 KiB tokens peaked at 106-119 MiB with
/// 1 MiB here, 128-136 with 2 MiB, 139-146 with 4 and 151-173 with the count alone, at the same
/// speed (BENCHMARKS.md, "the queue's room").
const QUEUE_BYTES: usize = 1024 * 1024;
/// A handle on the open database; cheap to clone.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    db: Arc<DbHandle>,
    ops: mpsc::Sender<Queued>,
    /// Room for chunk bytes in the queue, `QUEUE_BYTES` of it.
    queue_room: Arc<Semaphore>,
    journal: Arc<JournalIndex>,
    /// Large chunks read lately.
    read_cache: read_cache::ReadCache,
    clock: Arc<dyn Clock>,
    writer: Mutex<Option<JoinHandle<()>>>,
    /// Owns the ends queued from contexts that cannot wait (a dropped producer's handle);
    /// [`Store::close`] waits for them.
    background: TaskTracker,
    /// The recordings the last run left live, until the recorder adopts them.
    recovered: Mutex<Vec<RecoveredLive>>,
    /// On a node of a cluster, counts the entries applied (see `replicated`): readers of a
    /// recording produced elsewhere wait on it.
    applied: tokio::sync::watch::Sender<u64>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

impl Store {
    /// Opens or creates the database file at `path` (on `options.files`), recovers it, and
    /// starts the commit pipeline. Blocking: call it before serving, or from `spawn_blocking`.
    ///
    /// Fails when the file cannot be opened, is not a tapedeck database of this version, or
    /// recovery cannot be committed.
    pub fn open(path: &Path, options: StoreOptions) -> Result<Store> {
        let retention_ms = options.retention.as_millis() as u64;
        let opened = recovery::open(&*options.files, path, options.cache_bytes)?;
        let mut recovered = opened.live;
        let db = DbHandle::new(path, opened.db, opened.last_lsn, &options)?;
        let db = Arc::new(db);
        let journal = Arc::new(JournalIndex::default());
        if options.replicated {
            // A node of a cluster keeps its unfolded chunks in the file (see `kept_unfolded`);
            // its live recordings' progress counts them.
            let kept = db.read(kept_unfolded::kept)?;
            journal.apply_with(|unfolded| {
                *unfolded = kept;
                Ok(())
            })?;
            let mut views = journal.newest();
            recovered = db.read(|txn| recovery::live_recordings(txn, &mut views))?;
        }
        let (ops, receiver) = mpsc::channel(OP_QUEUE_DEPTH);
        let settings = WriterSettings {
            retention_ms,
            tombstone_ms: options.tombstone_retention.as_millis() as u64,
            clock: options.clock.clone(),
            commit_interval: options.commit_interval,
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
                queue_room: Arc::new(Semaphore::new(QUEUE_BYTES)),
                journal,
                read_cache: read_cache::ReadCache::default(),
                clock: options.clock,
                writer: Mutex::new(Some(handle)),
                background: TaskTracker::new(),
                recovered: Mutex::new(recovered),
                applied: tokio::sync::watch::Sender::new(0),
            }),
        })
    }

    /// The recordings the last run left live (their producers are gone), once: the recorder
    /// adopts them as detached recordings.
    pub fn take_recovered(&self) -> Vec<RecoveredLive> {
        std::mem::take(
            &mut *self
                .inner
                .recovered
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        )
    }

    /// Whether the disk ran full: new recordings are refused until there is room again.
    pub fn is_full(&self) -> bool {
        self.inner.db.full_error().is_some()
    }

    /// The clock this store stamps recordings with.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
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
            total.tombstones_forgotten += report.tombstones_forgotten;
            if !report.more {
                return Ok(total);
            }
        }
    }

    /// Deletes conversation `key`'s recording, which must have ended: marks it deleted, then
    /// deletes its chunks in commits of at most [`MAX_CHUNKS_PER_SWEEP_COMMIT`], and leaves a
    /// tombstone. A stream that forks read from is only soft-deleted (its `streams` row says
    /// so; its data goes with its last fork), decided in the commit that reads its fork count.
    /// Returns whether there was a recording.
    ///
    /// Fails with `ShuttingDown` when the store is closed, or a storage error; what was not
    /// deleted yet is collected by the sweeper.
    pub async fn delete(&self, key: u128) -> Result<bool> {
        let (done, answer) = oneshot::channel();
        self.submit(Op::Delete { key, done }).await?;
        let existed = answer.await.map_err(|_| Error::ShuttingDown)??;
        loop {
            let (done, answer) = oneshot::channel();
            let max_chunks = MAX_CHUNKS_PER_SWEEP_COMMIT;
            self.submit(Op::Purge {
                key,
                max_chunks,
                done,
            })
            .await?;
            if answer.await.map_err(|_| Error::ShuttingDown)?? {
                return Ok(existed);
            }
        }
    }

    /// Makes everything committed so far durable in the database file itself and empties the
    /// write-ahead log, as the store does on its own every `checkpoint_bytes` of log and at
    /// close. Afterwards the file takes the disk space the data needs (until then, what was
    /// committed since the last checkpoint is in the log, and in memory).
    ///
    /// Fails with `ShuttingDown` when the store is closed, or a storage error.
    pub async fn checkpoint(&self) -> Result<()> {
        let (done, answer) = oneshot::channel();
        self.submit(Op::Checkpoint { done }).await?;
        answer.await.map_err(|_| Error::ShuttingDown)?
    }

    /// Queues `op` for the writer once there is room for it (a chunk larger than the whole
    /// room waits for all of it).
    ///
    /// Fails with `ShuttingDown` when the store is closed.
    async fn submit(&self, op: Op) -> Result<()> {
        let bytes = op.chunk_bytes().min(QUEUE_BYTES);
        let room = match bytes {
            0 => None,
            bytes => Some(
                self.inner
                    .queue_room
                    .clone()
                    .acquire_many_owned(bytes as u32)
                    .await
                    .expect("the queue's room is never closed"),
            ),
        };
        self.inner
            .ops
            .send(Queued { op, _room: room })
            .await
            .map_err(|_| Error::ShuttingDown)
    }

    /// Stops the commit pipeline after it has committed everything queued (the ends queued
    /// in the background included), waits for it, and closes the database file; reads still
    /// under way finish first, later ones fail. Recordings still live stay `recording` in the
    /// file, and are detached after the next open.
    pub async fn close(self) {
        self.inner.background.close();
        self.inner.background.wait().await;
        let handle = self
            .inner
            .writer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let _ = self.inner.ops.send(Op::Close.into()).await;
        if let Some(handle) = handle {
            let _ = tokio::task::spawn_blocking(move || handle.join()).await;
        }
        if self.is_replicated() {
            let store = self.clone();
            match tokio::task::spawn_blocking(move || store.keep_unfolded()).await {
                Ok(Ok(())) => {}
                Ok(Err(err)) => {
                    tracing::error!(error = %err, "could not keep the unfolded chunks; the next start refuses the file");
                }
                Err(err) => tracing::error!(error = %err, "could not keep the unfolded chunks"),
            }
        }
        let db = self.inner.db.clone();
        let closed = tokio::task::spawn_blocking(move || db.close()).await;
        if matches!(closed, Ok(true)) {
            tracing::info!("database closed");
        }
    }
}
