//! The open redb file, and what keeps tapedeck going when the disk fails under it: after an
//! I/O error redb refuses every further operation until the file is opened again, so the
//! commit pipeline reopens it; and a reserve file keeps room to end recordings and collect old
//! ones once the disk is full, while recordings that would grow the file are refused.
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use redb::{Database, ReadableDatabase};

use crate::error::{Error, Result};

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
}

/// Whether the disk ran full, and when the store last looked for room.
struct Full {
    since: Option<Instant>,
    last_try: Option<Instant>,
}

impl DbHandle {
    /// Wraps the database opened at `path`, and sets the disk reserve aside. A disk too full
    /// for the reserve starts the store full.
    pub(crate) fn new(path: &Path, db: Database) -> Result<DbHandle> {
        let reserve = path.with_extension("reserve");
        let handle = DbHandle {
            path: path.to_path_buf(),
            reserve,
            db: RwLock::new(Some(db)),
            full: Mutex::new(Full {
                since: None,
                last_try: None,
            }),
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

    /// Called after a commit failed with `err`: on a full disk the reserve is given back and
    /// the store refuses to grow until there is room again; after any I/O error the file is
    /// reopened (redb repairs it to its last commit), since redb refuses to go on without.
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

    fn lock_full(&self) -> std::sync::MutexGuard<'_, Full> {
        self.full.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Closes and reopens the file; with `release_reserve`, the reserve is deleted first so
    /// that the repair and the commits that follow have room.
    fn reopen(&self, release_reserve: bool) -> Result<()> {
        let mut db = self.db.write().unwrap_or_else(|e| e.into_inner());
        if let Some(open) = db.as_ref()
            && !release_reserve
            && !latched(open)
        {
            return Ok(());
        }
        // Readers are shut out by the lock; the file is free once this handle is dropped.
        drop(db.take());
        if release_reserve
            && let Err(err) = std::fs::remove_file(&self.reserve)
            && err.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(error = %err, "could not release the disk reserve");
        }
        let reopened = super::recovery::reopen(&self.path)?;
        *db = Some(reopened);
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
