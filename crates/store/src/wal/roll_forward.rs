//! Rolling forward: the commits the log holds past redb's last checkpoint are applied again,
//! in order, then checkpointed, so that the log can be emptied. Applying a commit's changes to
//! the state its original commit started from gives the state it made: rolling forward twice
//! (after a crash while rolling forward) starts again from the same checkpoint and ends the
//! same. The journal's unfolded chunks, which lived in memory, are rebuilt from their appends
//! on the way, and those still unfolded at the end are folded into the checkpoint.
//! The tables a commit's changes are applied to are in `change_tables`.
use std::collections::HashMap;
use std::io::BufReader;
use std::path::Path;
use std::time::Instant;

use redb::{Database, Durability, WriteTransaction};

use super::change_tables::ChangeTables;
use super::{CHECKPOINT_LSN_KEY, read_frame};
use crate::error::{Error, Result};
use crate::files::{Files, OpenMode, Reader};
use crate::journal::Run;
use crate::schema::{META, SCHEMA_VERSION_KEY};

/// The log's commits are applied this many payload bytes per (non-durable) transaction, so that
/// rolling a long log forward never holds all of it in one transaction's memory.
const BYTES_PER_TRANSACTION: usize = 8 * 1024 * 1024;

/// What rolling forward did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RolledForward {
    /// Commits applied again.
    pub commits: u64,
    /// Their bytes in the log.
    pub bytes: u64,
    /// LSN of the last commit redb now holds durably: the log starts after it.
    pub last_lsn: u64,
}

/// Applies the commits of the log at `wal_path` on `files` that `db` does not hold yet, and
/// checkpoints them. A missing log holds nothing.
///
/// Fails when the log cannot be read, a frame does not decode, or redb fails.
pub(crate) fn roll_forward(
    db: &Database,
    files: &dyn Files,
    wal_path: &Path,
) -> Result<RolledForward> {
    let checkpoint = checkpoint_lsn(db)?;
    // A log written before schema 4 folds entries as rows of their own (the file is upgraded
    // after rolling forward); a later one, as segments.
    let legacy_folds = meta_value(db, SCHEMA_VERSION_KEY)?.is_some_and(|v| v < 4);
    let mut rolled = RolledForward {
        commits: 0,
        bytes: 0,
        last_lsn: checkpoint,
    };
    let file = match files.open(wal_path, OpenMode::Read) {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(rolled),
        Err(err) => return Err(log_error(wal_path, err)),
    };
    let started = Instant::now();
    let reader = Reader::new(&*file).map_err(|e| log_error(wal_path, e))?;
    let mut log = BufReader::with_capacity(1 << 20, reader);
    let mut payload = Vec::new();
    let mut next = read_frame(&mut log, &mut payload).map_err(|e| log_error(wal_path, e))?;
    // Each recording's unfolded chunks, as the writer held them in memory.
    let mut unfolded: HashMap<u128, Run> = HashMap::new();
    // Applied in transactions of about BYTES_PER_TRANSACTION each.
    while next.is_some() {
        let txn = db.begin_write().map_err(Error::storage)?;
        let mut in_txn = 0;
        {
            let mut tables = ChangeTables::open(&txn, legacy_folds, &mut unfolded)?;
            while let Some(lsn) = next {
                if lsn <= rolled.last_lsn {
                    // Older: the log ends here (what follows was written in an earlier round,
                    // or the checkpoint holds it and a crash came before the next round).
                    next = None;
                    break;
                }
                if lsn != rolled.last_lsn + 1 {
                    return Err(gap(wal_path, lsn, rolled.last_lsn));
                }
                if rolled.commits == 0 {
                    tracing::info!(path = %wal_path.display(), after = checkpoint, "rolling the write-ahead log forward");
                }
                tables.apply(&payload)?;
                rolled.commits += 1;
                rolled.bytes += payload.len() as u64;
                rolled.last_lsn = lsn;
                in_txn += payload.len();
                next = read_frame(&mut log, &mut payload).map_err(|e| log_error(wal_path, e))?;
                if in_txn >= BYTES_PER_TRANSACTION {
                    break;
                }
            }
            if next.is_none() {
                tables.fold_unfolded()?;
            }
        }
        if next.is_some() {
            let mut txn = txn;
            txn.set_durability(Durability::None)
                .map_err(Error::storage)?;
            txn.commit().map_err(Error::storage)?;
        } else if rolled.commits > 0 {
            checkpoint_commit(txn, rolled.last_lsn)?;
        }
    }
    if rolled.commits > 0 {
        tracing::info!(
            commits = rolled.commits,
            bytes = rolled.bytes,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "rolled the write-ahead log forward"
        );
    }
    Ok(rolled)
}

/// Applies one commit's changes (a log entry of a cluster's) in `txn`, with `unfolded` as the
/// recordings' unfolded chunks before it, which it leaves as they are after it.
///
/// Fails when the changes do not decode or do not follow on from `unfolded`, or redb fails.
pub(crate) fn apply_changes(
    txn: &WriteTransaction,
    changes: &[u8],
    unfolded: &mut HashMap<u128, Run>,
) -> Result<()> {
    let mut tables = ChangeTables::open(txn, false, unfolded)?;
    tables.generations = true;
    tables.apply(changes)
}

/// The last LSN a checkpoint made durable in `db`; 0 for a file that never had a log.
pub(crate) fn checkpoint_lsn(db: &Database) -> Result<u64> {
    Ok(meta_value(db, CHECKPOINT_LSN_KEY)?.unwrap_or(0))
}

/// The number `name` in the `meta` table, if the file has it.
fn meta_value(db: &Database, name: &str) -> Result<Option<u64>> {
    let txn = redb::ReadableDatabase::begin_read(db).map_err(Error::storage)?;
    let meta = match txn.open_table(META) {
        Ok(meta) => meta,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
        Err(err) => return Err(Error::storage(err)),
    };
    Ok(meta.get(name).map_err(Error::storage)?.map(|v| v.value()))
}

/// Commits `txn` durably, as the checkpoint holding every commit up to `lsn`; with quick-repair,
/// so that reopening the file after a crash loads redb's allocator state instead of walking the
/// whole file.
///
/// Fails as redb's commit does.
pub(crate) fn checkpoint_commit(mut txn: WriteTransaction, lsn: u64) -> Result<()> {
    {
        let mut meta = txn.open_table(META).map_err(Error::storage)?;
        meta.insert(CHECKPOINT_LSN_KEY, lsn)
            .map_err(Error::storage)?;
    }
    txn.set_durability(Durability::Immediate)
        .map_err(Error::storage)?;
    txn.set_quick_repair(true);
    txn.commit().map_err(Error::storage)
}

fn gap(wal_path: &Path, lsn: u64, last: u64) -> Error {
    Error::Corrupt {
        detail: format!(
            "write-ahead log {}: commit {lsn} follows commit {last}; the commits between are missing",
            wal_path.display()
        ),
    }
}

fn log_error(wal_path: &Path, source: std::io::Error) -> Error {
    Error::DataDir {
        path: wal_path.to_path_buf(),
        source,
    }
}
