//! Offline tools on a stopped server's database file: statistics, a check of redb's integrity
//! and of tapedeck's own invariants, and compaction. redb's file lock makes each refuse,
//! clearly, while a server holds the file.
//!
//! Each tool first has redb check the whole file (every page's checksum) through an
//! [`Overlay`], which keeps whatever redb writes (its recovery, a replayed log) in memory: a
//! damaged file is refused with one line and is never written, and no tool reports numbers
//! or "no problems" off a file redb's check finds damaged. Only `compact`, on a file that
//! passed, writes to it.
use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use redb::{
    Database, DatabaseError, ReadableDatabase, ReadableTable, ReadableTableMetadata, StorageBackend,
};

use super::overlay::Overlay;
use super::recovery::quietly_catch_panic;
use super::schema::{self, CHUNKS, EXPIRY, JOURNAL, META, RECORDINGS, STARTED, TOMBSTONES};
use super::seal_marks::{SEALED, SealMark};
use super::segment::Segment;
use super::wal;
use crate::error::{Error, Result};
use crate::status::Status;

/// What a database holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Recordings by status.
    pub by_status: BTreeMap<&'static str, u64>,
    /// UTF-8 bytes of the recordings that have ended (live ones count in chunks only).
    pub recorded_bytes: u64,
    /// Chunks folded into the chunks table.
    pub chunks: u64,
    /// Rows of the chunks table: segments of consecutive chunks (one chunk each before
    /// schema 4).
    pub segments: u64,
    /// Entries an earlier version left in its journal table, folded on the next start (this
    /// version keeps the journal in memory and the log).
    pub journal_backlog: u64,
    /// Tombstones of collected or deleted recordings.
    pub tombstones: u64,
    /// Ended recordings sealed into the object store (`--object-store`).
    pub sealed: u64,
    /// Of those, the ones whose chunks left local disk (read from the object store).
    pub sealed_remote_only: u64,
    /// Ended recordings not sealed yet: the sealer's backlog with an object store (without
    /// one, every ended recording counts).
    pub seal_backlog: u64,
    /// Bytes of keys and values stored in every table: the live data.
    pub live_bytes: u64,
    /// Size of the file.
    pub file_bytes: u64,
    /// Bytes of the write-ahead log holding commits not in the file yet: a server that
    /// crashed left them (a start of the server, or `check`, applies them).
    pub log_bytes: u64,
}

/// What a check found wrong; empty when nothing is.
pub type Problems = Vec<String>;

/// Reads `path`'s statistics without changing the file; `progress` is told the rows done so
/// far and the total.
///
/// Fails with `Offline` when the file cannot be opened (a running server holds it) or redb's
/// integrity check finds it damaged, or with a decoding error.
pub fn stats(path: &Path, progress: impl FnMut(u64, u64)) -> Result<Stats> {
    let db = verified(path)?;
    guarded(path, || read_stats(&db, path, progress))
}

fn read_stats(db: &Database, path: &Path, mut progress: impl FnMut(u64, u64)) -> Result<Stats> {
    let txn = db.begin_read().map_err(Error::storage)?;
    let rows = txn.open_table(RECORDINGS).map_err(Error::storage)?;
    let chunks = txn.open_table(CHUNKS).map_err(Error::storage)?;
    let journal = txn.open_table(JOURNAL).map_err(Error::storage)?;
    let tombstones = txn.open_table(TOMBSTONES).map_err(Error::storage)?;
    let total = rows.len().map_err(Error::storage)?;
    let segmented = meta_number(&txn, schema::SCHEMA_VERSION_KEY)?.is_some_and(|v| v >= 4);
    let checkpoint = meta_number(&txn, wal::CHECKPOINT_LSN_KEY)?.unwrap_or(0);
    let wal_path = wal::path_of(path);
    let log_bytes = wal::pending_bytes(&wal_path, checkpoint).map_err(|source| Error::DataDir {
        path: wal_path.clone(),
        source,
    })?;
    let mut stats = Stats {
        segments: chunks.len().map_err(Error::storage)?,
        journal_backlog: journal.len().map_err(Error::storage)?,
        tombstones: tombstones.len().map_err(Error::storage)?,
        file_bytes: std::fs::metadata(path).map_err(Error::storage)?.len(),
        log_bytes,
        ..Stats::default()
    };
    let sealed = schema::optional_table(&txn, SEALED)?;
    for (done, row) in rows.iter().map_err(Error::storage)?.enumerate() {
        let (key, value) = row.map_err(Error::storage)?;
        let meta = schema::decode_meta(value.value())?;
        *stats.by_status.entry(meta.status.as_str()).or_default() += 1;
        if !meta.status.is_live() && meta.status != Status::Deleted {
            let mark = match &sealed {
                Some(table) => match table.get(key.value()).map_err(Error::storage)? {
                    Some(bytes) => Some(SealMark::decode(bytes.value())?),
                    None => None,
                },
                None => None,
            };
            match mark.filter(|mark| mark.generation == meta.generation) {
                Some(mark) => {
                    stats.sealed += 1;
                    stats.sealed_remote_only += u64::from(!mark.local);
                }
                None => stats.seal_backlog += 1,
            }
        }
        if meta.status != Status::Recording {
            stats.recorded_bytes += meta.byte_len;
        }
        stats.live_bytes += 16 + value.value().len() as u64;
        if done % 1024 == 0 {
            progress(done as u64, total);
        }
    }
    for row in chunks.iter().map_err(Error::storage)? {
        let (_, value) = row.map_err(Error::storage)?;
        stats.chunks += match segmented {
            true => Segment::parse(value.value())?.len() as u64,
            false => 1,
        };
        stats.live_bytes += 24 + value.value().len() as u64;
    }
    for entry in journal.iter().map_err(Error::storage)? {
        let (_, value) = entry.map_err(Error::storage)?;
        stats.live_bytes += 8 + value.value().len() as u64;
    }
    progress(total, total);
    Ok(stats)
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
    let db = verified(path)?;
    guarded(path, || {
        wal::replay(&db, &wal::path_of(path))?;
        check_invariants(&db, progress)
    })
}

fn check_invariants(db: &Database, mut progress: impl FnMut(u64, u64)) -> Result<Problems> {
    let mut problems = Problems::new();
    let txn = db.begin_read().map_err(Error::storage)?;
    let version = meta_number(&txn, schema::SCHEMA_VERSION_KEY)?;
    if version != Some(schema::SCHEMA_VERSION) {
        problems.push(format!(
            "schema version {version:?}, expected {} (start the server once to upgrade)",
            schema::SCHEMA_VERSION
        ));
    }
    let rows = txn.open_table(RECORDINGS).map_err(Error::storage)?;
    let total = rows.len().map_err(Error::storage)?;
    let mut stored = HashSet::new();
    let mut ended = HashSet::new();
    let mut started = HashSet::new();
    for (done, row) in rows.iter().map_err(Error::storage)?.enumerate() {
        let (key, value) = row.map_err(Error::storage)?;
        let key = key.value();
        stored.insert(key);
        match schema::decode_meta(value.value()) {
            Ok(meta) => {
                started.insert((meta.created_ms, key));
                if meta.status != Status::Recording {
                    ended.insert(key);
                }
            }
            Err(err) => problems.push(format!("recording {key:032x}: {err}")),
        }
        if done % 1024 == 0 {
            progress(done as u64, total);
        }
    }
    let index = txn.open_table(STARTED).map_err(Error::storage)?;
    let mut indexed = HashSet::new();
    for entry in index.iter().map_err(Error::storage)? {
        let (key, _) = entry.map_err(Error::storage)?;
        indexed.insert(key.value());
    }
    for missing in started.difference(&indexed) {
        problems.push(format!(
            "recording {:032x} is missing from the start index",
            missing.1
        ));
    }
    for stray in indexed.difference(&started) {
        problems.push(format!(
            "the start index names {:032x}, which has no such row",
            stray.1
        ));
    }
    let expiry = txn.open_table(EXPIRY).map_err(Error::storage)?;
    let mut scheduled = HashSet::new();
    for entry in expiry.iter().map_err(Error::storage)? {
        let (key, _) = entry.map_err(Error::storage)?;
        let (_, key) = key.value();
        scheduled.insert(key);
        if !ended.contains(&key) && stored.contains(&key) {
            problems.push(format!(
                "live recording {key:032x} is scheduled for collection"
            ));
        }
    }
    for key in ended.difference(&scheduled) {
        problems.push(format!("ended recording {key:032x} is never collected"));
    }
    let chunks = txn.open_table(CHUNKS).map_err(Error::storage)?;
    let mut orphans = HashSet::new();
    for row in chunks.iter().map_err(Error::storage)? {
        let (key, value) = row.map_err(Error::storage)?;
        let (key, first) = key.value();
        if !stored.contains(&key) {
            orphans.insert(key);
        }
        if version == Some(schema::SCHEMA_VERSION)
            && let Err(err) = Segment::parse(value.value())
        {
            problems.push(format!("chunks of {key:032x} from {first}: {err}"));
        }
    }
    let journal = txn.open_table(JOURNAL).map_err(Error::storage)?;
    for entry in journal.iter().map_err(Error::storage)? {
        let (seq, value) = entry.map_err(Error::storage)?;
        match schema::decode_journal(value.value()) {
            Ok((key, _, _)) if !stored.contains(&key) => {
                orphans.insert(key);
            }
            Ok(_) => {}
            Err(err) => problems.push(format!("journal entry {}: {err}", seq.value())),
        }
    }
    // A seal mark goes with its row: one without an ended row is stray.
    if let Some(sealed) = schema::optional_table(&txn, SEALED)? {
        for entry in sealed.iter().map_err(Error::storage)? {
            let (key, value) = entry.map_err(Error::storage)?;
            let key = key.value();
            if let Err(err) = SealMark::decode(value.value()) {
                problems.push(format!("seal mark {key:032x}: {err}"));
            } else if !ended.contains(&key) {
                problems.push(format!(
                    "seal mark {key:032x} belongs to no ended recording"
                ));
            }
        }
    }
    // Chunks of a deleted recording are purged in bounded commits: a tombstone explains them.
    let tombstones = txn.open_table(TOMBSTONES).map_err(Error::storage)?;
    for key in orphans {
        if tombstones.get(key).map_err(Error::storage)?.is_none() {
            problems.push(format!("chunks of {key:032x} belong to no recording"));
        }
    }
    for entry in tombstones.iter().map_err(Error::storage)? {
        let (key, value) = entry.map_err(Error::storage)?;
        if let Err(err) = schema::decode_tombstone(value.value()) {
            problems.push(format!("tombstone {:032x}: {err}", key.value()));
        }
    }
    progress(total, total);
    Ok(problems)
}

/// Compacts `path`, giving free pages back to the file system. Returns the file's size
/// before and after. A file redb's check finds damaged is refused untouched: compacting
/// would rewrite it from damaged pages.
///
/// Fails with `Offline` when the file cannot be opened (a running server holds it) or is
/// damaged, or with `Storage` when it cannot be compacted.
pub fn compact(path: &Path) -> Result<(u64, u64)> {
    let size = || {
        std::fs::metadata(path)
            .map(|m| m.len())
            .map_err(Error::storage)
    };
    let before = size()?;
    drop(verified(path)?);
    guarded(path, || {
        let mut db = open_replayed(path)?;
        while db.compact().map_err(Error::storage)? {}
        drop(db);
        Ok(())
    })?;
    Ok((before, size()?))
}

/// Bytes of pages redb may cache while a tool reads a file.
const TOOL_CACHE_BYTES: usize = 64 * 1024 * 1024;

/// `path` opened through an [`Overlay`] (nothing is written to the file) and checked by redb:
/// every page of its committed trees matches its checksum.
///
/// Fails with `Offline` when it cannot be opened, is in use, or is damaged.
fn verified(path: &Path) -> Result<Database> {
    let file = std::fs::File::options()
        .read(true)
        .write(true)
        .open(path)
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
fn meta_number(txn: &redb::ReadTransaction, name: &str) -> Result<Option<u64>> {
    let meta = txn.open_table(META).map_err(Error::storage)?;
    Ok(meta.get(name).map_err(Error::storage)?.map(|v| v.value()))
}

/// Opens `path` for writing, with the commits its write-ahead log holds (a server that crashed
/// left them there) applied first.
fn open_replayed(path: &Path) -> Result<Database> {
    let db = Database::open(path).map_err(|err| open_error(path, err))?;
    wal::replay(&db, &wal::path_of(path))?;
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
