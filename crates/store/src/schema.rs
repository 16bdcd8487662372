//! The redb tables and how their values are encoded. A recording is one contiguous key range of
//! `chunks` (segments of consecutive chunks; a live one's newest chunks are in the journal, in
//! memory and in the write-ahead log, until they fill a segment), one `recordings` row, one
//! `started` entry, and, once finished, one `expiry` entry. A collected recording leaves a
//! `tombstones` row, itself collected through `tombstone_expiry`. While it is live, its
//! conversation is in `live` (see `live_index`).
use redb::TableDefinition;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::id::ConversationId;
use crate::status::Status;

/// Version of the layout below; older versions are upgraded on open (see `upgrade`), newer
/// ones refused.
pub const SCHEMA_VERSION: u64 = 5;

/// `(conversation, index of the segment's first chunk)` → a [segment](super::segment): a run of
/// the recording's consecutive chunks, each a chunk value (start byte offset, 8 bytes,
/// little-endian, then the UTF-8 text; see [`ChunkLayout`]). Before schema 4, one chunk value
/// per row.
pub(crate) const CHUNKS: TableDefinition<(u128, u64), &[u8]> = TableDefinition::new("chunks");
/// Append order → conversation (16 bytes, little-endian), chunk index (8 bytes, little-endian),
/// then the chunk's value (see [`ChunkLayout`]). Earlier builds kept the journal here; a file
/// they left is folded into `chunks` on open, and nothing writes the table since.
pub(crate) const JOURNAL: TableDefinition<u64, &[u8]> = TableDefinition::new("journal");
/// conversation → bincode [`RecordingMeta`] of its latest recording. Its chunk count and byte
/// length are written when the recording ends (or is found interrupted on open); while it is
/// live they are 0 in the file and its progress is read from its chunks.
pub(crate) const RECORDINGS: TableDefinition<u128, &[u8]> = TableDefinition::new("recordings");
/// `(expires at, ms since epoch; conversation)` → nothing: the GC schedule in time order.
pub(crate) const EXPIRY: TableDefinition<(u64, u128), ()> = TableDefinition::new("expiry");
/// `(created at, ms since epoch; conversation)` → nothing: every stored recording in start
/// order, for listing them a page at a time.
pub(crate) const STARTED: TableDefinition<(u64, u128), ()> = TableDefinition::new("started");
/// conversation → bincode [`Tombstone`] of its collected (or deleted) recording.
pub(crate) const TOMBSTONES: TableDefinition<u128, &[u8]> = TableDefinition::new("tombstones");
/// `(forgotten at, ms since epoch; conversation)` → nothing: when each tombstone goes.
pub(crate) const TOMBSTONE_EXPIRY: TableDefinition<(u64, u128), ()> =
    TableDefinition::new("tombstone_expiry");
/// Named numbers about the file itself, such as [`SCHEMA_VERSION_KEY`].
pub(crate) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

pub(crate) const SCHEMA_VERSION_KEY: &str = "schema_version";

/// The `recordings` row of a conversation's latest recording.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordingMeta {
    /// The conversation id exactly as the producer sent it.
    pub original_id: Vec<u8>,
    /// Where the recording is in its life.
    pub status: Status,
    /// When it started, in ms since the epoch.
    pub created_ms: u64,
    /// When the row was last written: its start, or its end.
    pub updated_ms: u64,
    /// When it ended, in ms since the epoch.
    pub finished_ms: Option<u64>,
    /// When the sweeper may delete it; set when it finishes.
    pub expires_at_ms: Option<u64>,
    /// Its number of chunks (written when it ends).
    pub chunk_count: u64,
    /// Total UTF-8 length of its chunks.
    pub byte_len: u64,
    /// Why it ended, for `interrupted` and `failed`.
    pub error: Option<String>,
    /// Counts the recordings this conversation has had; tells a replaced recording's readers
    /// that the chunks under its key are no longer theirs.
    pub generation: u64,
    /// How long it is kept once finished, when its producer chose (else the server's
    /// `--retention`).
    pub retention_ms: Option<u64>,
    /// Whether its chunks carry their commit time (every recording started since schema 3).
    pub timed_chunks: bool,
}

/// Why a recording is no longer stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Gone {
    /// Its retention passed and the sweeper collected it.
    Expired,
    /// Someone deleted it.
    Deleted,
}

/// What is kept of a collected recording, for `--tombstone-retention`: enough to tell a reader
/// that it existed and when it went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tombstone {
    /// The conversation id exactly as the producer sent it.
    pub original_id: Vec<u8>,
    /// Why it went.
    pub gone: Gone,
    /// How the recording had ended.
    pub status: Status,
    /// When it started, in ms since the epoch.
    pub created_ms: u64,
    /// When it ended, in ms since the epoch.
    pub finished_ms: Option<u64>,
    /// When its data was deleted, in ms since the epoch.
    pub collected_ms: u64,
    /// Its number of chunks.
    pub chunk_count: u64,
    /// Its UTF-8 length, in bytes.
    pub byte_len: u64,
    /// When the tombstone itself is forgotten, in ms since the epoch.
    pub forgotten_at_ms: u64,
}

impl RecordingMeta {
    /// The row of a recording of `id` starting now, at `now_ms`.
    pub fn started(id: &ConversationId, generation: u64, now_ms: u64) -> Self {
        Self {
            original_id: id.original().to_vec(),
            status: Status::Recording,
            created_ms: now_ms,
            updated_ms: now_ms,
            finished_ms: None,
            expires_at_ms: None,
            chunk_count: 0,
            byte_len: 0,
            error: None,
            generation,
            retention_ms: None,
            timed_chunks: true,
        }
    }

    /// The tombstone it leaves when collected at `now_ms`, kept for `keep_ms`.
    pub fn tombstone(&self, gone: Gone, now_ms: u64, keep_ms: u64) -> Tombstone {
        Tombstone {
            original_id: self.original_id.clone(),
            gone,
            status: self.status,
            created_ms: self.created_ms,
            finished_ms: self.finished_ms,
            collected_ms: now_ms,
            chunk_count: self.chunk_count,
            byte_len: self.byte_len,
            forgotten_at_ms: now_ms.saturating_add(keep_ms),
        }
    }
}

pub(crate) fn encode_meta(meta: &RecordingMeta) -> Result<Vec<u8>> {
    encode(meta, "a recordings row")
}

pub(crate) fn decode_meta(bytes: &[u8]) -> Result<RecordingMeta> {
    decode(bytes, "recordings row")
}

/// Table `table` in a read transaction, or `None` in a file it was never written to (tables
/// added since are made by their first write).
pub(crate) fn optional_table<K: redb::Key + 'static, V: redb::Value + 'static>(
    txn: &redb::ReadTransaction,
    table: TableDefinition<K, V>,
) -> Result<Option<redb::ReadOnlyTable<K, V>>> {
    match txn.open_table(table) {
        Ok(table) => Ok(Some(table)),
        Err(redb::TableError::TableDoesNotExist(_)) => Ok(None),
        Err(err) => Err(Error::storage(err)),
    }
}

pub(crate) fn encode_tombstone(tombstone: &Tombstone) -> Result<Vec<u8>> {
    encode(tombstone, "a tombstone")
}

pub(crate) fn decode_tombstone(bytes: &[u8]) -> Result<Tombstone> {
    decode(bytes, "tombstone")
}

/// `value` in the stored encoding (bincode, standard configuration).
///
/// Fails with `Encode`, naming `what`, when it cannot be encoded.
pub fn encode<T: Serialize>(value: &T, what: &'static str) -> Result<Vec<u8>> {
    bincode::serde::encode_to_vec(value, bincode::config::standard())
        .map_err(|source| Error::Encode { what, source })
}

/// The value `bytes` hold in the stored encoding.
///
/// Fails with `Decode`, naming `what`, when they do not hold one.
pub fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8], what: &'static str) -> Result<T> {
    bincode::serde::decode_from_slice(bytes, bincode::config::standard())
        .map(|(value, _)| value)
        .map_err(|source| Error::Decode { what, source })
}

/// How a recording's chunk values are laid out: since schema 3 each carries its commit time;
/// recordings stored before keep the older layout, which has none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChunkLayout {
    /// Start offset (8 bytes, little-endian), then the text.
    Untimed,
    /// Start offset, commit time in ms since the epoch (8 bytes each, little-endian), then the
    /// text.
    Timed,
}

impl ChunkLayout {
    pub(crate) fn of(timed: bool) -> Self {
        if timed {
            ChunkLayout::Timed
        } else {
            ChunkLayout::Untimed
        }
    }

    fn head(self) -> usize {
        match self {
            ChunkLayout::Untimed => 8,
            ChunkLayout::Timed => 16,
        }
    }
}

/// A stored chunk, decoded.
pub(crate) struct StoredChunk<'a> {
    pub(crate) offset: u64,
    /// Commit time in ms since the epoch; 0 when the layout has none.
    pub(crate) committed_ms: u64,
    pub(crate) data: &'a [u8],
}

/// Encodes a chunk value into `value`, replacing what it held.
pub(crate) fn encode_chunk_into(
    value: &mut Vec<u8>,
    layout: ChunkLayout,
    offset: u64,
    committed_ms: u64,
    data: &[u8],
) {
    value.clear();
    value.extend_from_slice(&offset.to_le_bytes());
    if layout == ChunkLayout::Timed {
        value.extend_from_slice(&committed_ms.to_le_bytes());
    }
    value.extend_from_slice(data);
}

/// Length of a journal value's head: conversation and chunk index.
const JOURNAL_HEAD: usize = 24;

/// Encodes a journal value into `value`, replacing what it held: the head, then the chunk
/// value as [`encode_chunk_into`] lays it out. (Only earlier builds wrote the table; tests
/// make files as they left them.)
#[cfg(test)]
pub(crate) fn encode_journal_into(
    value: &mut Vec<u8>,
    key: u128,
    index: u64,
    layout: ChunkLayout,
    chunk: (u64, u64, &[u8]),
) {
    value.clear();
    value.extend_from_slice(&key.to_le_bytes());
    value.extend_from_slice(&index.to_le_bytes());
    value.extend_from_slice(&chunk.0.to_le_bytes());
    if layout == ChunkLayout::Timed {
        value.extend_from_slice(&chunk.1.to_le_bytes());
    }
    value.extend_from_slice(chunk.2);
}

/// The conversation and chunk index of a journal value, and the chunk value it carries.
pub(crate) fn decode_journal(value: &[u8]) -> Result<(u128, u64, &[u8])> {
    if value.len() < JOURNAL_HEAD {
        return Err(Error::Corrupt {
            detail: "a journal entry is shorter than its header".into(),
        });
    }
    let (key, rest) = value.split_at(16);
    let (index, chunk) = rest.split_at(8);
    let key = u128::from_le_bytes(key.try_into().expect("16 bytes"));
    let index = u64::from_le_bytes(index.try_into().expect("8 bytes"));
    Ok((key, index, chunk))
}

/// The start offset of a stored chunk, without decoding its text.
pub(crate) fn chunk_offset(value: &[u8]) -> Result<u64> {
    let head: [u8; 8] = value
        .get(..8)
        .and_then(|h| h.try_into().ok())
        .ok_or_else(|| Error::Corrupt {
            detail: "a chunk is shorter than its offset header".into(),
        })?;
    Ok(u64::from_le_bytes(head))
}

/// A stored chunk laid out as `layout`.
pub(crate) fn decode_chunk(value: &[u8], layout: ChunkLayout) -> Result<StoredChunk<'_>> {
    let offset = chunk_offset(value)?;
    let short = || Error::Corrupt {
        detail: "a chunk is shorter than its header".into(),
    };
    let committed_ms = match layout {
        ChunkLayout::Untimed => 0,
        ChunkLayout::Timed => u64::from_le_bytes(
            value
                .get(8..16)
                .and_then(|t| t.try_into().ok())
                .ok_or_else(short)?,
        ),
    };
    let data = value.get(layout.head()..).ok_or_else(short)?;
    Ok(StoredChunk {
        offset,
        committed_ms,
        data,
    })
}

/// The byte offset just after a stored chunk, from its header and length alone.
pub(crate) fn chunk_end(value: &[u8], layout: ChunkLayout) -> Result<u64> {
    let offset = chunk_offset(value)?;
    let len = value
        .len()
        .checked_sub(layout.head())
        .ok_or_else(|| Error::Corrupt {
            detail: "a chunk is shorter than its header".into(),
        })?;
    Ok(offset + len as u64)
}
