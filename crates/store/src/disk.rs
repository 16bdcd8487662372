//! What keeps the store going when the disk fails under it: after an I/O error redb refuses
//! every further operation until the file is opened again, so the commit pipeline reopens it
//! (rolling it forward through the log); and a reserve file keeps room to end recordings and
//! collect old ones once the disk is full, while recordings that would grow the file are
//! refused. The reserve is given back in two halves: the first when the disk fills (to end
//! recordings and roll the log forward), the rest to the first commit that deletes chunks
//! while it is full, so that collecting never depends on free pages inside the file: whatever
//! fills the disk may well take the first half at once.
use std::path::Path;
use std::time::{Duration, Instant};

use redb::Database;

use super::database::DbHandle;
use super::files::{Files, OpenMode};
use crate::error::{Error, Result};

/// Disk space set aside next to the database, given back when the disk fills up.
const RESERVE_BYTES: usize = 4 * 1024 * 1024;
/// What is left of the reserve once the disk has filled: room for a commit that deletes.
const COLLECTING_RESERVE_BYTES: u64 = RESERVE_BYTES as u64 / 2;
/// How often, at most, a full store checks whether the disk has room again.
const RETRY_INTERVAL: Duration = Duration::from_secs(1);

/// Whether the disk ran full, and when the store last looked for room.
pub(super) struct Full {
    pub(super) since: Option<Instant>,
    pub(super) last_try: Option<Instant>,
}

impl DbHandle {
    /// Called after a commit failed with `err`: on a full disk half the reserve is given back
    /// (all of it if the disk was full already: a commit that grows nothing failed for room)
    /// and the store refuses to grow until there is room again; after an I/O error that left
    /// redb refusing to go on, the file is reopened (at its last checkpoint, rolled forward
    /// through the log).
    pub(crate) fn recover(&self, err: &Error) {
        let disk_full = matches!(err.root(), Error::DiskFull { .. });
        if disk_full {
            let mut full = self.lock_full();
            let keep = if full.since.is_none() {
                tracing::error!(
                    "the disk is full; new recordings are refused until space is freed"
                );
                full.since = Some(Instant::now());
                COLLECTING_RESERVE_BYTES
            } else {
                0
            };
            drop(full);
            // Before reopening: rolling forward, and the commits that follow, need the room.
            self.give_back_reserve(keep);
        }
        if !disk_full && !matches!(err.root(), Error::Storage(_)) {
            return;
        }
        if let Err(err) = self.reopen() {
            tracing::error!(error = %err, "could not reopen the database; retrying with the next commit");
        }
    }

    /// Called before committing a transaction that deletes chunks: while the disk is full, the
    /// rest of the reserve is given back for it (deleting rewrites pages too).
    pub(crate) fn room_to_delete(&self) {
        if self.lock_full().since.is_some() {
            self.give_back_reserve(0);
        }
    }

    /// Shortens the reserve file to `keep` bytes, or removes it at 0.
    fn give_back_reserve(&self, keep: u64) {
        let files = &*self.files;
        let given = if keep == 0 {
            files.remove(&self.reserve)
        } else {
            files.open(&self.reserve, OpenMode::Write).and_then(|file| {
                if file.len()? > keep {
                    file.set_len(keep)?;
                }
                Ok(())
            })
        };
        match given {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => tracing::warn!(error = %err, "could not give back the disk reserve"),
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
        let size = || self.files.len(&self.path).unwrap_or(0);
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

    /// Closes and reopens the file if redb refuses to go on (rolling its last checkpoint
    /// forward through the log).
    pub(super) fn reopen(&self) -> Result<()> {
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
        let (reopened, last_lsn) =
            super::recovery::reopen(&*self.files, &self.path, self.cache_bytes)?;
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
    pub(super) fn restore_reserve(&self, headroom: bool) -> std::io::Result<()> {
        let files = &*self.files;
        let missing = !files
            .len(&self.reserve)
            .is_ok_and(|len| len >= RESERVE_BYTES as u64);
        if headroom {
            // Looked for first, so that a failed look leaves the room to the commits.
            let probe = self.reserve.with_extension("reserve.probe");
            let needed = if missing {
                2 * RESERVE_BYTES
            } else {
                RESERVE_BYTES
            };
            let room = fill(files, &probe, needed, false);
            let _ = files.remove(&probe);
            room?;
        }
        if missing {
            let partial = self.reserve.with_extension("reserve.tmp");
            let written = fill(files, &partial, RESERVE_BYTES, true)
                .and_then(|()| files.rename(&partial, &self.reserve));
            if written.is_err() {
                let _ = files.remove(&partial);
            }
            written?;
        }
        Ok(())
    }
}

/// Writes `bytes` of real bytes (not a sparse length: the space must be taken now) to a file
/// at `path` on `files`, created or emptied first.
fn fill(files: &dyn Files, path: &Path, bytes: usize, sync: bool) -> std::io::Result<()> {
    let file = files.open(path, OpenMode::Create)?;
    file.set_len(0)?;
    let block = vec![0xA5u8; 64 * 1024];
    for at in 0..bytes.div_ceil(block.len()) {
        file.write((at * block.len()) as u64, &block)?;
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

fn full_error() -> Error {
    Error::StoreFull
}
