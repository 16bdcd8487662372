//! Upgrading files of older schemas in place, on open, in the transaction that checks the
//! version: schema 1 had no journal; schema 2 rows had no retention of their own nor chunk
//! layout, and there were no start index and no tombstones. Every table of the current schema
//! is created by the caller; this rewrites what changed shape.
use redb::{ReadableTable, WriteTransaction};
use serde::Deserialize;

use super::schema::{self, RECORDINGS, RecordingMeta, STARTED};
use crate::error::{Error, Result};
use crate::recorder::Status;

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
