//! Upgrading files of older schemas in place, on open, in the transaction that checks the
//! version: schema 1 had no journal; schema 2 rows had no retention of their own nor chunk
//! layout, and there were no start index and no tombstones; up to schema 3 `chunks` held one
//! chunk per row, not segments; up to schema 4 no table named the live recordings. Every table of the current schema is created by the caller;
//! this rewrites what changed shape.
use redb::{ReadableTable, WriteTransaction};
use serde::Deserialize;

use super::schema::{self, CHUNKS, RECORDINGS, RecordingMeta, STARTED};
use super::segment;
use crate::error::{Error, Result};
use crate::status::Status;

/// The oldest schema version that can be upgraded.
pub(super) const OLDEST_UPGRADABLE: u64 = 1;

/// A `recordings` row as schemas 1 and 2 stored it.
#[derive(Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
pub(super) struct RowV2 {
    pub(super) original_id: Vec<u8>,
    pub(super) status: Status,
    pub(super) created_ms: u64,
    pub(super) updated_ms: u64,
    pub(super) finished_ms: Option<u64>,
    pub(super) expires_at_ms: Option<u64>,
    pub(super) chunk_count: u64,
    pub(super) byte_len: u64,
    pub(super) error: Option<String>,
    pub(super) generation: u64,
}

/// Rewrites a file of schema `found` (at least [`OLDEST_UPGRADABLE`]) to the current one;
/// returns how many rows were rewritten.
///
/// Fails with a storage error, or `Decode` for a row of neither shape.
pub(super) fn upgrade(txn: &WriteTransaction, found: u64) -> Result<u64> {
    debug_assert!(found >= OLDEST_UPGRADABLE);
    let mut rows = 0;
    if found < 3 {
        rows += upgrade_recordings(txn)?;
    }
    if found < 4 {
        rows += pack_chunks(txn)?;
    }
    if found < 5 {
        rows += super::live_index::rebuild(txn)?;
    }
    Ok(rows)
}

/// Rewrites the `recordings` rows of schemas 1 and 2, and fills the start index.
fn upgrade_recordings(txn: &WriteTransaction) -> Result<u64> {
    let mut recordings = txn.open_table(RECORDINGS).map_err(Error::storage)?;
    let mut started = txn.open_table(STARTED).map_err(Error::storage)?;
    let old: Vec<(u128, RowV2)> = recordings
        .iter()
        .map_err(Error::storage)?
        .map(|entry| {
            let (key, value) = entry.map_err(Error::storage)?;
            Ok((
                key.value(),
                schema::decode(value.value(), "schema-2 recordings row")?,
            ))
        })
        .collect::<Result<_>>()?;
    for (key, row) in &old {
        let meta = RecordingMeta {
            original_id: row.original_id.clone(),
            status: row.status,
            created_ms: row.created_ms,
            updated_ms: row.updated_ms,
            finished_ms: row.finished_ms,
            expires_at_ms: row.expires_at_ms,
            chunk_count: row.chunk_count,
            byte_len: row.byte_len,
            error: row.error.clone(),
            generation: row.generation,
            retention_ms: None,
            // Their chunks keep the layout they were written in, with no commit time.
            timed_chunks: false,
        };
        let bytes = schema::encode_meta(&meta)?;
        recordings
            .insert(*key, bytes.as_slice())
            .map_err(Error::storage)?;
        started
            .insert((meta.created_ms, *key), ())
            .map_err(Error::storage)?;
    }
    Ok(old.len() as u64)
}

/// Packs the chunks of every recording, stored one per row up to schema 3, into segments, a
/// recording at a time; returns how many rows were rewritten.
fn pack_chunks(txn: &WriteTransaction) -> Result<u64> {
    let mut chunks = txn.open_table(CHUNKS).map_err(Error::storage)?;
    let mut rewritten = 0;
    let mut next = Some(0u128);
    while let Some(from) = next {
        let Some(key) = first_key_from(&chunks, from)? else {
            break;
        };
        let rows: Vec<(u64, Vec<u8>)> = chunks
            .range((key, 0)..=(key, u64::MAX))
            .map_err(Error::storage)?
            .map(|row| {
                let (index, chunk) = row.map_err(Error::storage)?;
                Ok((index.value().1, chunk.value().to_vec()))
            })
            .collect::<Result<_>>()?;
        chunks
            .retain_in((key, 0)..=(key, u64::MAX), |_, _| false)
            .map_err(Error::storage)?;
        // Runs of consecutive chunks: the sweeper may have deleted a recording's oldest ones.
        for run in rows.chunk_by(|a, b| a.0 + 1 == b.0) {
            let values: Vec<&[u8]> = run.iter().map(|(_, chunk)| chunk.as_slice()).collect();
            segment::write_packed(&values, |part, segment| {
                let row = (key, run[part.start].0);
                chunks
                    .insert(row, segment)
                    .map(drop)
                    .map_err(Error::storage)
            })?;
        }
        rewritten += rows.len() as u64;
        next = key.checked_add(1);
    }
    Ok(rewritten)
}

/// The first conversation at or after `from` with a row in `chunks`.
fn first_key_from(
    chunks: &redb::Table<'_, (u128, u64), &'static [u8]>,
    from: u128,
) -> Result<Option<u128>> {
    let mut range = chunks.range((from, 0)..).map_err(Error::storage)?;
    match range.next() {
        Some(row) => Ok(Some(row.map_err(Error::storage)?.0.value().0)),
        None => Ok(None),
    }
}
