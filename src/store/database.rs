//! The open redb file and its write-ahead log, how a commit goes to them, and what keeps
//! tapedeck going when the disk fails under it: after an I/O error redb refuses every further
//! operation until the file is opened again, so the commit pipeline reopens it (replaying the
//! log); and a reserve file keeps room to end recordings and collect old ones once the disk is
//! full, while recordings that would grow the file are refused.
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use redb::{Database, Durability, ReadableDatabase, WriteTransaction};

use super::wal::{self, Redo, Wal};
use crate::error::{Error, Result};
use crate::metrics as metric;

/// Disk space set aside next to the database, given back when the disk fills up.
const RESERVE_BYTES: usize = 4 * 1024 * 1024;
/// How often, at most, a full store checks whether the disk has room again.
const RETRY_INTERVAL: Duration = Duration::from_secs(1);

/// The database file, reopened in place after an I/O error. Readers hold it shared for the
/// length of one read transaction; only the commit pipeline reopens it.
pub(crate) struct DbHandle {
    path: PathBuf,
    reserve: PathBuf,
    db: RwLock<Option<Database>>,
    full: Mutex<Full>,
    /// Used by the commit pipeline only (the lock is never contended).
    wal: Mutex<Wal>,
    /// Log size that makes the next commit a checkpoint.
    checkpoint_bytes: u64,
    /// redb's cache, for a reopen.
    cache_bytes: usize,
    /// Set when the file is reopened (see [`take_reopened`](Self::take_reopened)).
    reopened: std::sync::atomic::AtomicBool,
}

/// Whether the disk ran full, and when the store last looked for room.
struct Full {
    since: Option<Instant>,
    last_try: Option<Instant>,
}

impl DbHandle {
    /// Wraps the database opened at `path`, whose last checkpoint holds every commit up to
    /// `last_lsn` (its log replayed), with an empty log; and sets the disk reserve aside. A disk
    /// too full for the reserve starts the store full. Commits become checkpoints once the log
    /// holds `options.checkpoint_bytes`.
    pub(crate) fn new(
        path: &Path,
        db: Database,
        last_lsn: u64,
        options: &super::StoreOptions,
    ) -> Result<DbHandle> {
        let reserve = path.with_extension("reserve");
        let wal_path = wal::path_of(path);
        let wal = Wal::open_empty(&wal_path, last_lsn).map_err(|source| Error::DataDir {
            path: wal_path,
            source,
        })?;
        let handle = DbHandle {
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
        self.reopen(false)?;
        match self.db.read().unwrap_or_else(|e| e.into_inner()).as_ref() {
            Some(db) => db.begin_write().map_err(Error::storage),
            None => Err(unavailable()),
        }
    }

    /// Whether the file was reopened since the last call (replaying the log into it).
    pub(crate) fn take_reopened(&self) -> bool {
        self.reopened
            .swap(false, std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether the log holds commits that redb has not made durable.
    pub(crate) fn has_log(&self) -> bool {
        let wal = self.lock_wal();
        wal.len() > 0 || wal.needs_checkpoint()
    }

    /// Commits `txn`, whose changes `redo` holds: they are appended to the log and synced, then
    /// committed to redb without a sync. As a `checkpoint` (see
    /// [`checkpoint_due`](Self::checkpoint_due)), redb commits durably instead, and the log is
    /// emptied: `txn` must leave nothing only the log holds (no unfolded chunk).
    ///
    /// Fails as the log's write or redb's commit does; the log then holds nothing of `txn`.
    pub(crate) fn commit(
        &self,
        mut txn: WriteTransaction,
        redo: &Redo,
        checkpoint: bool,
    ) -> Result<()> {
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
    /// what redb must write at the next checkpoint, or replay after reopening (after a
    /// disk-full error above all), within the room there is: with the disk nearly full every
    /// commit is a checkpoint, as if there were no log, and a reopen has nothing to replay. So
    /// it is while the disk is full.
    pub(crate) fn checkpoint_due(&self, changes: u64) -> bool {
        let wal = self.lock_wal();
        if wal.needs_checkpoint()
            || wal.len() >= self.checkpoint_bytes
            || self.lock_full().since.is_some()
        {
            return true;
        }
        let dir = self.path.parent().unwrap_or(&self.path);
        match rustix::fs::statvfs(dir) {
            Ok(fs) => wal.len() + changes >= fs.f_bavail.saturating_mul(fs.f_frsize) / 8,
            Err(_) => false,
        }
    }

    /// Makes everything committed so far durable in redb and empties the log, if it holds
    /// anything. Only while no chunk is unfolded: the writer's own checkpoint folds them first.
    ///
    /// Fails as redb's commit does.
    fn checkpoint(&self) -> Result<()> {
        let mut wal = self.lock_wal();
        if wal.len() == 0 && !wal.needs_checkpoint() {
            return Ok(());
        }
        let txn = self.begin_write()?;
        checkpoint(txn, &mut wal)
    }

    /// Called after a commit failed with `err`: on a full disk the reserve is given back and
    /// the store refuses to grow until there is room again; after an I/O error that left redb
    /// refusing to go on, the file is reopened (at its last checkpoint, the log replayed).
    pub(crate) fn recover(&self, err: &Error) {
        let disk_full = matches!(err.root(), Error::DiskFull { .. });
        if disk_full {
            let mut full = self.lock_full();
            if full.since.is_none() {
                tracing::error!(
                    "the disk is full; new recordings are refused until space is freed"
                );
                full.since = Some(Instant::now());
            }
        }
        if !disk_full && !matches!(err.root(), Error::Storage(_)) {
            return;
        }
        if let Err(err) = self.reopen(disk_full) {
            tracing::error!(error = %err, "could not reopen the database; retrying with the next commit");
        }
    }

    /// `Some(DiskFull)` while the disk is full: recordings must not grow. Now and then looks
    /// whether there is room again (the reserve can be set aside anew).
    pub(crate) fn full_error(&self) -> Option<Error> {
        let mut full = self.lock_full();
        let since = full.since?;
        if full
            .last_try
            .is_some_and(|at| at.elapsed() < RETRY_INTERVAL)
        {
            return Some(full_error());
        }
        full.last_try = Some(Instant::now());
        drop(full);
        match self.restore_reserve(true) {
            Ok(()) => {
                tracing::info!(
                    full_for = ?since.elapsed(),
                    "the disk has room again; new recordings are accepted"
                );
                self.lock_full().since = None;
                None
            }
            Err(_) => Some(full_error()),
        }
    }

    /// Called after a sweep commit that collected expired recordings. When the disk is full, the
    /// space they held inside the file is handed back to the filesystem (redb does not shrink
    /// the file by itself), then the store looks for room at once.
    pub(crate) fn collected(&self) {
        if self.lock_full().since.is_none() {
            return;
        }
        // Compaction commits durably by itself: the log must hold nothing it does not. (No
        // chunk is unfolded: while the disk is full every commit is a checkpoint.)
        if let Err(err) = self.checkpoint() {
            tracing::warn!(error = %err, "could not checkpoint before compacting the database");
            return;
        }
        let mut db = self.db.write().unwrap_or_else(|e| e.into_inner());
        let size = || std::fs::metadata(&self.path).map_or(0, |m| m.len());
        let before = size();
        if let Some(db) = db.as_mut() {
            match db.compact() {
                Ok(_) => tracing::info!(
                    before,
                    after = size(),
                    "compacted the database to give space back to the disk"
                ),
                // It may need room it does not have; the next sweep tries again.
                Err(err) => tracing::warn!(error = %err, "could not compact the database"),
            }
        }
        drop(db);
        self.lock_full().last_try = None;
    }

    /// Closes the database file, once every read under way has finished; later reads fail.
    /// Returns whether it was open.
    pub(crate) fn close(&self) -> bool {
        let mut db = self.db.write().unwrap_or_else(|e| e.into_inner());
        db.take().is_some()
    }

    fn lock_wal(&self) -> std::sync::MutexGuard<'_, Wal> {
        self.wal.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_full(&self) -> std::sync::MutexGuard<'_, Full> {
        self.full.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Closes and reopens the file if redb refuses to go on (replaying the log over its last
    /// checkpoint); with `release_reserve`, the reserve is deleted first so that the replay and
    /// the commits that follow have room.
    fn reopen(&self, release_reserve: bool) -> Result<()> {
        if release_reserve
            && let Err(err) = std::fs::remove_file(&self.reserve)
            && err.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(error = %err, "could not release the disk reserve");
        }
        let mut db = self.db.write().unwrap_or_else(|e| e.into_inner());
        // A failed write to the log leaves redb as it was (its transaction was dropped): it
        // stays open, with the commits it holds since its checkpoint, which a reopen would
        // have to write again on a disk that may have no room.
        if let Some(open) = db.as_ref()
            && !latched(open)
        {
            return Ok(());
        }
        // Readers are shut out by the lock; the file is free once this handle is dropped.
        drop(db.take());
        // redb lost the commits made since its checkpoint; the log gives them back, and its
        // unfolded chunks are folded into the file.
        let (reopened, last_lsn) = super::recovery::reopen(&self.path, self.cache_bytes)?;
        *db = Some(reopened);
        self.reopened
            .store(true, std::sync::atomic::Ordering::Relaxed);
        if let Err(err) = self.lock_wal().reset(last_lsn) {
            tracing::warn!(error = %err, "could not empty the write-ahead log; the next commit is a checkpoint");
        }
        tracing::warn!(path = %self.path.display(), "database reopened after an I/O error");
        Ok(())
    }

    /// Writes the reserve file in full (or leaves none). With `headroom`, succeeds only if
    /// there is room for as much again besides, so that leaving the full state does not fill
    /// the disk at once.
    fn restore_reserve(&self, headroom: bool) -> std::io::Result<()> {
        let missing =
            !std::fs::metadata(&self.reserve).is_ok_and(|m| m.len() >= RESERVE_BYTES as u64);
        if headroom {
            // Looked for first, so that a failed look leaves the room to the commits.
            let probe = self.reserve.with_extension("reserve.probe");
            let needed = if missing {
                2 * RESERVE_BYTES
            } else {
                RESERVE_BYTES
            };
            let room = fill(&probe, needed, false);
            let _ = std::fs::remove_file(&probe);
            room?;
        }
        if missing {
            let partial = self.reserve.with_extension("reserve.tmp");
            let written = fill(&partial, RESERVE_BYTES, true)
                .and_then(|()| std::fs::rename(&partial, &self.reserve));
            if written.is_err() {
                let _ = std::fs::remove_file(&partial);
            }
            written?;
        }
        Ok(())
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
        // Its frames are all held by the checkpoint now: a replay skips them.
        tracing::warn!(error = %err, "could not empty the write-ahead log; the next commit is a checkpoint");
    }
    metrics::gauge!(metric::WAL_BYTES).set(wal.len() as f64);
    Ok(())
}

/// A failed write to the log, as the error a failed commit reports.
fn log_error(err: std::io::Error) -> Error {
    Error::storage(redb::Error::Io(err))
}

/// Writes `bytes` of real bytes (not a sparse length: the space must be taken now) to a new
/// file at `path`.
fn fill(path: &Path, bytes: usize, sync: bool) -> std::io::Result<()> {
    let mut file = std::fs::File::create(path)?;
    let block = vec![0xA5u8; 64 * 1024];
    for _ in 0..bytes.div_ceil(block.len()) {
        file.write_all(&block)?;
    }
    if sync {
        file.sync_all()?;
    }
    Ok(())
}

/// Whether redb refuses to go on after an I/O error until the file is reopened. A write
/// transaction cannot be live here: only the caller, the commit pipeline, begins them.
fn latched(db: &Database) -> bool {
    match db.begin_write() {
        Ok(txn) => {
            let _ = txn.abort();
            false
        }
        Err(_) => true,
    }
}

fn unavailable() -> Error {
    Error::DatabaseUnavailable
}

fn full_error() -> Error {
    Error::StoreFull
}
