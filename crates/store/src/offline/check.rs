//! tapedeck's own invariants, checked by `tapedeck db check` once redb's integrity check has
//! passed: the schema version, rows and tombstones that decode, the start index and the expiry
//! schedule against the rows, the live index against the rows, no stray chunk, journal entry
//! or seal mark.
use std::collections::HashSet;

use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata};

use super::meta_number;
use crate::error::{Error, Result};
use crate::live_index::LIVE;
use crate::schema::{self, CHUNKS, EXPIRY, JOURNAL, RECORDINGS, STARTED, TOMBSTONES};
use crate::seal_marks::{SEALED, SealMark};
use crate::segment::Segment;
use crate::status::Status;

/// What a check found wrong; empty when nothing is.
pub type Problems = Vec<String>;

/// Checks `db`'s invariants; what it found wrong.
pub(super) fn check_invariants(
    db: &Database,
    mut progress: impl FnMut(u64, u64),
) -> Result<Problems> {
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
    let mut live = HashSet::new();
    for (done, row) in rows.iter().map_err(Error::storage)?.enumerate() {
        let (key, value) = row.map_err(Error::storage)?;
        let key = key.value();
        stored.insert(key);
        match schema::decode_meta(value.value()) {
            Ok(meta) => {
                started.insert((meta.created_ms, key));
                if meta.status == Status::Recording {
                    live.insert(key);
                } else {
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
    // Files older than schema 5 have no live index; the version is reported above.
    if let Some(listed) = schema::optional_table(&txn, LIVE)? {
        let mut listed_live = HashSet::new();
        for entry in listed.iter().map_err(Error::storage)? {
            listed_live.insert(entry.map_err(Error::storage)?.0.value());
        }
        for key in live.difference(&listed_live) {
            problems.push(format!(
                "live recording {key:032x} is missing from the live index"
            ));
        }
        for key in listed_live.difference(&live) {
            problems.push(format!(
                "the live index names {key:032x}, which is not a live recording"
            ));
        }
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
