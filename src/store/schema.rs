//! The redb tables and how their values are encoded. A recording is one contiguous key range of
//! `chunks` followed by its newest chunks in `journal` (not yet folded into `chunks`), one
//! `recordings` row, and, once finished, one `expiry` entry.
use redb::TableDefinition;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::id::ConversationId;
use crate::recorder::Status;

/// Version of the layout below; a file with another version is refused on open.
pub const SCHEMA_VERSION: u64 = 2;
/// The layout before the journal: the same tables without `journal`, so its files are
/// upgraded in place by creating that table.
pub const SCHEMA_VERSION_WITHOUT_JOURNAL: u64 = 1;

/// `(conversation, chunk index)` → chunk start byte offset (8 bytes, little-endian) + UTF-8 text.
pub(crate) const CHUNKS: TableDefinition<(u128, u64), &[u8]> = TableDefinition::new("chunks");
/// Append order → conversation (16 bytes, little-endian), chunk index (8 bytes, little-endian),
/// then the chunk's value as in [`CHUNKS`]. Every commit appends at its end, so a commit writes
/// the same few pages however many recordings it touches; the writer folds the oldest entries
/// into `chunks` in bulk.
pub(crate) const JOURNAL: TableDefinition<u64, &[u8]> = TableDefinition::new("journal");
/// conversation → bincode [`RecordingMeta`] of its latest recording. Its chunk count and byte
/// length are written when the recording ends (or is found interrupted on open); while it is
/// live they are 0 in the file and its progress is read from its chunks.
pub(crate) const RECORDINGS: TableDefinition<u128, &[u8]> = TableDefinition::new("recordings");
/// `(expires at, ms since epoch; conversation)` → nothing: the GC schedule in time order.
pub(crate) const EXPIRY: TableDefinition<(u64, u128), ()> = TableDefinition::new("expiry");
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
}

impl RecordingMeta {
    /// The row of a recording of `id` starting now, at `now_ms`.
    pub(crate) fn started(id: &ConversationId, generation: u64, now_ms: u64) -> Self {
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
        }
    }
}

pub(crate) fn encode_meta(meta: &RecordingMeta) -> Result<Vec<u8>> {
    bincode::serde::encode_to_vec(meta, bincode::config::standard()).map_err(|source| {
        Error::Encode {
            what: "a recordings row",
            source,
        }
    })
}

pub(crate) fn decode_meta(bytes: &[u8]) -> Result<RecordingMeta> {
    bincode::serde::decode_from_slice(bytes, bincode::config::standard())
        .map(|(meta, _)| meta)
        .map_err(|source| Error::Decode {
            what: "recordings row",
            source,
        })
}

/// Encodes a chunk value into `value`, replacing what it held.
pub(crate) fn encode_chunk_into(value: &mut Vec<u8>, offset: u64, text: &str) {
    value.clear();
    value.extend_from_slice(&offset.to_le_bytes());
    value.extend_from_slice(text.as_bytes());
}

/// Length of a journal value's head: conversation and chunk index.
const JOURNAL_HEAD: usize = 24;

/// Encodes a journal value into `value`, replacing what it held.
pub(crate) fn encode_journal_into(value: &mut Vec<u8>, key: u128, index: u64, chunk: (u64, &str)) {
    value.clear();
    value.extend_from_slice(&key.to_le_bytes());
    value.extend_from_slice(&index.to_le_bytes());
    value.extend_from_slice(&chunk.0.to_le_bytes());
    value.extend_from_slice(chunk.1.as_bytes());
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

/// The start offset and text of a stored chunk.
pub(crate) fn decode_chunk(value: &[u8]) -> Result<(u64, &str)> {
    let offset = chunk_offset(value)?;
    let text = std::str::from_utf8(&value[8..]).map_err(|_| Error::Corrupt {
        detail: "a chunk's text is not UTF-8".into(),
    })?;
    Ok((offset, text))
}
