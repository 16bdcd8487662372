//! The open redb file and its write-ahead log, and how a commit goes to them. What keeps it
//! going when the disk fails under it (reopening, the reserve for a full disk) is in `disk`.
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use redb::{Database, Durability, ReadableDatabase, WriteTransaction};

use super::disk::Full;
use super::files::Files;
use super::replicated::Replicated;
use super::wal::{self, Redo, Wal};
use crate::error::{Error, Result};
use crate::metrics as metric;

/// The database file, reopened in place after an I/O error. Readers hold it shared for the
/// length of one read transaction; only the commit pipeline reopens it.
pub(crate) struct DbHandle {
    /// The file system the file, its log and the reserve are on.
    pub(super) files: Arc<dyn Files>,
    pub(super) path: PathBuf,
    pub(super) reserve: PathBuf,
    pub(super) db: RwLock<Option<Database>>,
    pub(super) full: Mutex<Full>,
    /// Used by the commit pipeline only (the lock is never contended).
    pub(super) wal: Mutex<Wal>,
    /// Log size that makes the next commit a checkpoint.
    pub(super) checkpoint_bytes: u64,
    /// redb's cache, for a reopen.
    pub(super) cache_bytes: usize,
    /// Set when the file is reopened (see [`take_reopened`](Self::take_reopened)).
    pub(super) reopened: std::sync::atomic::AtomicBool,
    /// On a node of a cluster: where commits go instead of the log (see `replicated`).
    pub(super) replicated: Option<Replicated>,
}

impl DbHandle {
    /// Wraps the database opened at `path` on `options.files`, whose last checkpoint holds
    /// every commit up to `last_lsn` (rolled forward through its log), with an empty log; and
    /// sets the disk reserve aside. A disk too full for the reserve starts the store full.
    /// Commits become checkpoints once the log holds `options.checkpoint_bytes`.
    pub(crate) fn new(
        path: &Path,
        db: Database,
        last_lsn: u64,
        options: &super::StoreOptions,
    ) -> Result<DbHandle> {
        let reserve = path.with_extension("reserve");
        let wal_path = wal::path_of(path);
        let files = options.files.clone();
        let wal =
            Wal::open_empty(&*files, &wal_path, last_lsn).map_err(|source| Error::DataDir {
                path: wal_path,
                source,
            })?;
        let handle = DbHandle {
            files,
            path: path.to_path_buf(),
            reserve,
            db: RwLock::new(Some(db)),
            full: Mutex::new(Full {
                since: None,
                last_try: None,
            }),
            wal: Mutex::new(wal),
            checkpoint_bytes: options.checkpoint_bytes,
            cache_bytes: options.cache_bytes,
            reopened: std::sync::atomic::AtomicBool::new(false),
            replicated: options.replicated.then(Replicated::default),
        };
        match handle.restore_reserve(false) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::StorageFull => {
                tracing::error!(
                    path = %handle.reserve.display(),
                    "the disk is full; new recordings are refused until space is freed"
                );
                handle.lock_full().since = Some(Instant::now());
            }
            Err(source) => {
                return Err(Error::DataDir {
                    path: path.parent().unwrap_or(path).to_path_buf(),
                    source,
                });
            }
        }
        Ok(handle)
    }

    /// Runs `read` in a read transaction.
    ///
    /// Fails with a storage error when the database is being reopened and could not be.
    pub(crate) fn read<T>(
        &self,
        read: impl FnOnce(&redb::ReadTransaction) -> Result<T>,
    ) -> Result<T> {
        let db = self.db.read().unwrap_or_else(|e| e.into_inner());
        let db = db.as_ref().ok_or_else(unavailable)?;
        let txn = db.begin_read().map_err(Error::storage)?;
        read(&txn)
    }

    /// A read transaction that does not hold the database in place (a long read, such as a
    /// snapshot's, does not hold up a reopen).
    ///
    /// Fails with a storage error when the database is being reopened and could not be.
    pub(crate) fn read_transaction(&self) -> Result<redb::ReadTransaction> {
        let db = self.db.read().unwrap_or_else(|e| e.into_inner());
        let db = db.as_ref().ok_or_else(unavailable)?;
        db.begin_read().map_err(Error::storage)
    }

    /// A read transaction that does not hold the database in place; for tests that inspect
    /// the file directly.
    #[cfg(test)]
    pub(crate) fn begin_read(&self) -> Result<redb::ReadTransaction, redb::TransactionError> {
        let db = self.db.read().unwrap_or_else(|e| e.into_inner());
        db.as_ref()
            .expect("the database is open in tests")
            .begin_read()
    }

    /// Begins a write transaction. Called by the commit pipeline only, which is also the only
    /// caller of [`recover`](Self::recover): the database cannot be swapped under it.
    ///
    /// Fails when the database could not be reopened, or as redb does.
    pub(crate) fn begin_write(&self) -> Result<redb::WriteTransaction> {
        let begun = match self.db.read().unwrap_or_else(|e| e.into_inner()).as_ref() {
            Some(db) => db.begin_write().map_err(Error::storage),
            None => Err(unavailable()),
        };
        if begun.is_ok() {
            return begun;
        }
        // Left unusable by an I/O error after the last recovery (recording the failures of a
        // failed commit, say), or not reopened yet: reopen, and try once more.
        self.reopen()?;
        match self.db.read().unwrap_or_else(|e| e.into_inner()).as_ref() {
            Some(db) => db.begin_write().map_err(Error::storage),
            None => Err(unavailable()),
        }
    }

    /// Whether the file was reopened since the last call (rolling it forward through the log).
    pub(crate) fn take_reopened(&self) -> bool {
        self.reopened
            .swap(false, std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether the log holds commits that redb has not made durable.
    pub(crate) fn has_log(&self) -> bool {
        if let Some(replicated) = &self.replicated {
            return replicated.has_log();
        }
        let wal = self.lock_wal();
        wal.len() > 0 || wal.needs_checkpoint()
    }

    /// Commits `txn`, whose changes `redo` holds: they are appended to the log and synced, then
    /// committed to redb without a sync. As a `checkpoint` (see
    /// [`checkpoint_due`](Self::checkpoint_due)), redb commits durably instead, and the log is
    /// emptied: `txn` must leave nothing only the log holds (no unfolded chunk).
    ///
    /// On a node of a cluster, the changes are proposed to the cluster's log instead, and
    /// `txn` is dropped: the entry is applied once committed (see `replicated`).
    ///
    /// Fails as the log's write or redb's commit does; the log then holds nothing of `txn`.
    /// On a node of a cluster, fails as the proposal does.
    pub(crate) fn commit(
        &self,
        mut txn: WriteTransaction,
        redo: &Redo,
        checkpoint: bool,
    ) -> Result<()> {
        if let Some(replicated) = &self.replicated {
            return replicated.propose(txn, redo.take(), checkpoint);
        }
        let mut wal = self.lock_wal();
        let changes = redo.take();
        if checkpoint {
            return self::checkpoint(txn, &mut wal);
        }
        let before = wal.append(&changes).map_err(log_error)?;
        metrics::gauge!(metric::WAL_BYTES).set(wal.len() as f64);
        let committed = txn
            .set_durability(Durability::None)
            .map_err(Error::storage)
            .and_then(|()| txn.commit().map_err(Error::storage));
        if committed.is_err() {
            wal.truncate(before);
        }
        committed
    }

    /// Whether a commit of about `changes` bytes is to be a checkpoint: the log has reached the
    /// checkpoint size, or would reach an eighth of the disk's free space. The second keeps
    /// what redb must write at the next checkpoint, or roll forward after reopening (after a
    /// disk-full error above all), within the room there is: with the disk nearly full every
    /// commit is a checkpoint, as if there were no log, and a reopen has nothing to roll
    /// forward. So it is while the disk is full.
    pub(crate) fn checkpoint_due(&self, changes: u64) -> bool {
        if let Some(replicated) = &self.replicated {
            return replicated.checkpoint_due(changes, self.checkpoint_bytes);
        }
        let wal = self.lock_wal();
        if wal.needs_checkpoint()
            || wal.len() >= self.checkpoint_bytes
            || self.lock_full().since.is_some()
        {
            return true;
        }
        let dir = self.path.parent().unwrap_or(&self.path);
        match self.files.available(dir) {
            Ok(available) => wal.len() + changes >= available / 8,
            Err(_) => false,
        }
    }

    /// Zeroes the log file's next stretch if its end comes near (see [`Wal::zero_ahead`]); the
    /// commit pipeline calls this when it has nothing else to do. Not while the disk is full
    /// (the space is for commits), nor on a node of a cluster (it has no log of its own).
    pub(crate) fn zero_log_ahead(&self) {
        if self.replicated.is_some() || self.lock_full().since.is_some() {
            return;
        }
        if let Err(err) = self.lock_wal().zero_ahead(self.checkpoint_bytes) {
            tracing::debug!(error = %err, "could not zero the write-ahead log ahead of its end; its syncs write its inode too until the next checkpoint");
        }
    }

    /// Makes everything committed so far durable in redb and empties the log, if it holds
    /// anything. Only while no chunk is unfolded: the writer's own checkpoint folds them first.
    ///
    /// Fails as redb's commit does.
    pub(super) fn checkpoint(&self) -> Result<()> {
        let mut wal = self.lock_wal();
        if wal.len() == 0 && !wal.needs_checkpoint() {
            return Ok(());
        }
        let txn = self.begin_write()?;
        checkpoint(txn, &mut wal)
    }

    /// Closes the database file, once every read under way has finished; later reads fail.
    /// Returns whether it was open.
    pub(crate) fn close(&self) -> bool {
        let mut db = self.db.write().unwrap_or_else(|e| e.into_inner());
        db.take().is_some()
    }

    pub(super) fn lock_wal(&self) -> std::sync::MutexGuard<'_, Wal> {
        self.wal.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn lock_full(&self) -> std::sync::MutexGuard<'_, Full> {
        self.full.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Commits `txn` as a checkpoint of everything the log holds, and empties the log.
fn checkpoint(txn: WriteTransaction, wal: &mut Wal) -> Result<()> {
    let started = Instant::now();
    let lsn = wal.last_lsn();
    tracing::debug!(lsn, log_bytes = wal.len(), "checkpoint begins");
    wal::checkpoint_commit(txn, lsn)?;
    metrics::counter!(metric::CHECKPOINTS).increment(1);
    metrics::histogram!(metric::CHECKPOINT_SECONDS).record(started.elapsed().as_secs_f64());
    let elapsed_ms = started.elapsed().as_millis() as u64;
    tracing::debug!(lsn, elapsed_ms, "checkpoint done");
    if let Err(err) = wal.reset(lsn) {
        // Its frames are all held by the checkpoint now: rolling forward skips them.
        tracing::warn!(error = %err, "could not empty the write-ahead log; the next commit is a checkpoint");
    }
    metrics::gauge!(metric::WAL_BYTES).set(wal.len() as f64);
    Ok(())
}

/// A failed write to the log, as the error a failed commit reports.
fn log_error(err: std::io::Error) -> Error {
    Error::storage(redb::Error::Io(err))
}

pub(super) fn unavailable() -> Error {
    Error::DatabaseUnavailable
}
