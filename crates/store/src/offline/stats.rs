//! What a database holds, counted by `tapedeck db stats`: recordings by status, bytes,
//! chunks and segments, seals and their backlog, the write-ahead log's pending bytes.
use std::collections::BTreeMap;
use std::path::Path;

use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata};

use super::meta_number;
use crate::error::{Error, Result};
use crate::files::Files;
use crate::schema::{self, CHUNKS, JOURNAL, RECORDINGS, TOMBSTONES};
use crate::seal_marks::{SEALED, SealMark};
use crate::segment::Segment;
use crate::status::Status;
use crate::wal;

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

/// Counts what `db`, the file at `path` on `files`, holds.
pub(super) fn read_stats(
    db: &Database,
    files: &dyn Files,
    path: &Path,
    mut progress: impl FnMut(u64, u64),
) -> Result<Stats> {
    let txn = db.begin_read().map_err(Error::storage)?;
    let rows = txn.open_table(RECORDINGS).map_err(Error::storage)?;
    let chunks = txn.open_table(CHUNKS).map_err(Error::storage)?;
    let journal = txn.open_table(JOURNAL).map_err(Error::storage)?;
    let tombstones = txn.open_table(TOMBSTONES).map_err(Error::storage)?;
    let total = rows.len().map_err(Error::storage)?;
    let segmented = meta_number(&txn, schema::SCHEMA_VERSION_KEY)?.is_some_and(|v| v >= 4);
    let checkpoint = meta_number(&txn, wal::CHECKPOINT_LSN_KEY)?.unwrap_or(0);
    let wal_path = wal::path_of(path);
    let log_bytes =
        wal::pending_bytes(files, &wal_path, checkpoint).map_err(|source| Error::DataDir {
            path: wal_path.clone(),
            source,
        })?;
    let mut stats = Stats {
        segments: chunks.len().map_err(Error::storage)?,
        journal_backlog: journal.len().map_err(Error::storage)?,
        tombstones: tombstones.len().map_err(Error::storage)?,
        file_bytes: files.len(path).map_err(Error::storage)?,
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
