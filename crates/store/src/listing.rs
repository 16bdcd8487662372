//! Reading what is stored about recordings: one conversation's row or tombstone, and pages of
//! rows in start order, read through the `started` index a page at a time.
use std::ops::Bound;

use redb::ReadTransaction;

use super::journal::JournalView;
use super::schema::{self, RECORDINGS, RecordingMeta, STARTED, TOMBSTONES, Tombstone};
use super::stored_chunks::StoredChunks;
use crate::error::{Error, Result};
use crate::status::Status;

/// What is stored about one conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// Its latest recording's row (for a live one, with what is committed now).
    Stored(RecordingMeta),
    /// Its recording was collected or deleted; this is what is left.
    Gone(Tombstone),
    /// Nothing: never recorded here, or its tombstone is gone too.
    Unknown,
}

/// Where a page of a listing ends: the start time and key of its last row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageToken {
    created_ms: u64,
    key: u128,
}

impl PageToken {
    /// The token of a page that goes on after the recording of conversation `key` that
    /// started at `created_ms`.
    pub fn after(created_ms: u64, key: u128) -> Self {
        Self { created_ms, key }
    }

    /// Where the page goes on after: (start time, conversation key), in listing order.
    pub fn position(&self) -> (u64, u128) {
        (self.created_ms, self.key)
    }

    /// The token as clients carry it: 48 hex digits.
    pub fn encode(&self) -> String {
        format!("{:016x}{:032x}", self.created_ms, self.key)
    }

    /// A token from its text.
    ///
    /// Fails with `BadPageToken` for anything [`encode`](Self::encode) did not make.
    pub fn decode(text: &str) -> Result<Self> {
        let valid = text.len() == 48 && text.bytes().all(|b| b.is_ascii_hexdigit());
        if !valid {
            return Err(Error::BadPageToken);
        }
        let created_ms = u64::from_str_radix(&text[..16], 16).map_err(|_| Error::BadPageToken)?;
        let key = u128::from_str_radix(&text[16..], 16).map_err(|_| Error::BadPageToken)?;
        Ok(Self { created_ms, key })
    }
}

/// One page of a listing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Page {
    /// Conversation keys and rows, in start order.
    pub rows: Vec<(u128, RecordingMeta)>,
    /// Where the next page starts; `None` after the last.
    pub next: Option<PageToken>,
}

pub(super) fn lookup(txn: &ReadTransaction, key: u128, journal: JournalView) -> Result<Lookup> {
    let recordings = txn.open_table(RECORDINGS).map_err(Error::storage)?;
    if let Some(bytes) = recordings.get(key).map_err(Error::storage)? {
        let mut meta = schema::decode_meta(bytes.value())?;
        if meta.status.is_live() {
            (meta.chunk_count, meta.byte_len) =
                StoredChunks::open(txn, key, &meta, journal)?.progress()?;
        }
        return Ok(Lookup::Stored(meta));
    }
    let tombstones = txn.open_table(TOMBSTONES).map_err(Error::storage)?;
    match tombstones.get(key).map_err(Error::storage)? {
        Some(bytes) => Ok(Lookup::Gone(schema::decode_tombstone(bytes.value())?)),
        None => Ok(Lookup::Unknown),
    }
}

pub(super) fn page(
    txn: &ReadTransaction,
    after: Option<PageToken>,
    limit: usize,
    only: Option<Status>,
    scan: usize,
) -> Result<Page> {
    let (limit, scan) = (limit.max(1), scan.max(1));
    let started = txn.open_table(STARTED).map_err(Error::storage)?;
    let recordings = txn.open_table(RECORDINGS).map_err(Error::storage)?;
    let from = match after {
        Some(token) => Bound::Excluded((token.created_ms, token.key)),
        None => Bound::Unbounded,
    };
    let mut rows = Vec::new();
    let mut last_seen = after;
    let entries = started
        .range::<(u64, u128)>((from, Bound::Unbounded))
        .map_err(Error::storage)?;
    for (scanned, entry) in entries.enumerate() {
        let (created_ms, key) = entry.map_err(Error::storage)?.0.value();
        if rows.len() == limit || scanned == scan {
            // More is left: the next page goes on after the last entry looked at.
            return Ok(Page {
                rows,
                next: last_seen,
            });
        }
        last_seen = Some(PageToken { created_ms, key });
        let Some(bytes) = recordings.get(key).map_err(Error::storage)? else {
            continue;
        };
        let meta = schema::decode_meta(bytes.value())?;
        if only.is_none_or(|status| status == meta.status) {
            rows.push((key, meta));
        }
    }
    Ok(Page { rows, next: None })
}
