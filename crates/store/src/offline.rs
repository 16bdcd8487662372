//! Offline tools on a stopped server's database file: statistics, a check of redb's integrity
//! and of tapedeck's own invariants, and compaction. redb's file lock makes each refuse,
//! clearly, while a server holds the file.
//!
//! Each tool first has redb check the whole file (every page's checksum) through an
//! [`Overlay`], which keeps whatever redb writes (its recovery, rolling forward through the
//! log) in memory: a damaged file is refused with one line and is never written, and no tool
//! reports numbers or "no problems" off a file redb's check finds damaged. Only `compact`, on
//! a file that passed, writes to it.
//!
//! The statistics are read in `stats`, the invariants checked in `check`; this file opens and
//! verifies the file for each tool, and compacts it. The tools reach the file through the
//! store's seam ([`Files`]), on the operating system's file system.
mod check;
mod stats;

use std::path::Path;

use redb::{Database, DatabaseError, StorageBackend};

pub use check::Problems;
pub use stats::Stats;

use super::files::{Files, OpenMode, RealFiles, database_on};
use super::overlay::Overlay;
use super::recovery::quietly_catch_panic;
use super::schema::META;
use super::wal;
use crate::error::{Error, Result};

/// Reads `path`'s statistics without changing the file; `progress` is told the rows done so
/// far and the total.
///
/// Fails with `Offline` when the file cannot be opened (a running server holds it) or redb's
/// integrity check finds it damaged, or with a decoding error.
pub fn stats(path: &Path, progress: impl FnMut(u64, u64)) -> Result<Stats> {
    let files = &RealFiles;
    let db = verified(files, path)?;
    guarded(path, || stats::read_stats(&db, files, path, progress))
}

/// Checks `path` without changing it: redb's own integrity check, then, with the commits its
/// write-ahead log holds applied in memory, tapedeck's invariants: the schema version, every
/// row and tombstone decodes, the start index and the expiry schedule match the rows, every
/// chunk and journal entry belongs to a stored recording, every seal mark to an ended one. `progress` is told the rows done
/// and the total.
///
/// Fails with `Offline` when the file cannot be opened (a running server holds it) or redb's
/// integrity check finds it damaged.
pub fn check(path: &Path, progress: impl FnMut(u64, u64)) -> Result<Problems> {
    let files = &RealFiles;
    let db = verified(files, path)?;
    guarded(path, || {
        wal::roll_forward(&db, files, &wal::path_of(path))?;
        check::check_invariants(&db, progress)
    })
}

/// Compacts `path`, giving free pages back to the file system. Returns the file's size
/// before and after. A file redb's check finds damaged is refused untouched: compacting
/// would rewrite it from damaged pages.
///
/// Fails with `Offline` when the file cannot be opened (a running server holds it) or is
/// damaged, or with `Storage` when it cannot be compacted.
pub fn compact(path: &Path) -> Result<(u64, u64)> {
    let files = &RealFiles;
    let size = || files.len(path).map_err(Error::storage);
    let before = size()?;
    drop(verified(files, path)?);
    guarded(path, || {
        let mut db = open_rolled_forward(files, path)?;
        while db.compact().map_err(Error::storage)? {}
        drop(db);
        Ok(())
    })?;
    Ok((before, size()?))
}

/// Bytes of pages redb may cache while a tool reads a file.
const TOOL_CACHE_BYTES: usize = 64 * 1024 * 1024;

/// `path` on `files` opened through an [`Overlay`] (nothing is written to the file) and
/// checked by redb: every page of its committed trees matches its checksum.
///
/// Fails with `Offline` when it cannot be opened, is in use, or is damaged.
fn verified(files: &dyn Files, path: &Path) -> Result<Database> {
    // For writing: redb's exclusive lock needs a writable descriptor. Nothing is written.
    let file = files
        .open_database(path, OpenMode::Write)
        .map_err(|err| Error::Offline {
            reason: format!("cannot open {}: {err}", path.display()),
        })?;
    let overlay = Overlay::new(file).map_err(|err| Error::Offline {
        reason: format!("cannot read {}: {err}", path.display()),
    })?;
    if overlay.len().unwrap_or(0) == 0 {
        // redb would make a new database of an empty file.
        return Err(Error::Offline {
            reason: format!("{} is empty: it is not a tapedeck database", path.display()),
        });
    }
    // A plain open may panic on a file changed outside redb (redb says so of its open); the
    // check that follows reports damage as an error. A panic here is a damaged file too.
    let checked = quietly_catch_panic(|| {
        let mut db = redb::Builder::new()
            .set_cache_size(TOOL_CACHE_BYTES)
            .create_with_backend(overlay)
            .map_err(|err| match err {
                DatabaseError::DatabaseAlreadyOpen => open_error(path, err),
                // The file was there and readable: what redb cannot open in it is damage (a
                // header that points past the end, say).
                other => damaged(path, &format!("redb cannot open it: {other}")),
            })?;
        match db.check_integrity() {
            Ok(true) => Ok(db),
            Ok(false) => Err(damaged(
                path,
                "redb's integrity check failed (only going back to an earlier commit would \
                 make it consistent)",
            )),
            Err(DatabaseError::Storage(redb::StorageError::Corrupted(detail))) => Err(damaged(
                path,
                &format!("redb's integrity check failed: {detail}"),
            )),
            Err(err) => Err(Error::Offline {
                reason: format!("cannot check {}: {err}", path.display()),
            }),
        }
    });
    checked.unwrap_or_else(|panic| Err(damaged(path, &format!("redb cannot read it ({panic})"))))
}

/// Runs `work` on a file that passed redb's check; should redb still panic on it, that is a
/// damaged file, reported as such.
fn guarded<T>(path: &Path, work: impl FnOnce() -> Result<T>) -> Result<T> {
    quietly_catch_panic(work)
        .unwrap_or_else(|panic| Err(damaged(path, &format!("redb cannot read it ({panic})"))))
}

/// A damaged file, with what to do about it.
fn damaged(path: &Path, detail: &str) -> Error {
    Error::Offline {
        reason: format!(
            "{} is damaged: {detail}; it was not changed: restore it from a backup, or move it \
             away to start with an empty one",
            path.display()
        ),
    }
}

/// The number `name` in the `meta` table, if the file has it.
pub(super) fn meta_number(txn: &redb::ReadTransaction, name: &str) -> Result<Option<u64>> {
    let meta = txn.open_table(META).map_err(Error::storage)?;
    Ok(meta.get(name).map_err(Error::storage)?.map(|v| v.value()))
}

/// Opens `path` on `files` for writing, with the commits its write-ahead log holds (a server
/// that crashed left them there) applied first.
fn open_rolled_forward(files: &dyn Files, path: &Path) -> Result<Database> {
    let db = database_on(files, &redb::Builder::new(), path, OpenMode::Write)
        .map_err(|err| open_error(path, err))?;
    wal::roll_forward(&db, files, &wal::path_of(path))?;
    Ok(db)
}

/// A clear error for a file that cannot be opened.
fn open_error(path: &Path, err: DatabaseError) -> Error {
    match err {
        DatabaseError::DatabaseAlreadyOpen => Error::Offline {
            reason: format!(
                "{} is in use by a running tapedeck server; stop it first",
                path.display()
            ),
        },
        DatabaseError::RepairAborted => Error::Offline {
            reason: format!(
                "{} needs repair; start the server on it once",
                path.display()
            ),
        },
        other => Error::Offline {
            reason: format!("cannot open {}: {other}", path.display()),
        },
    }
}
