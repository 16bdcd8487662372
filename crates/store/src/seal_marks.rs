//! The `sealed` table: which ended recordings have a verified copy in the object store, and
//! whether their chunks are still kept on local disk. A mark is written only after the copy
//! was uploaded and read back; it goes with its recording's row (a new recording, a reopen, a
//! delete or a collection), so a mark always describes the row beside it.
use redb::TableDefinition;
use serde::{Deserialize, Serialize};

use crate::error::Result;

/// conversation → bincode [`SealMark`] of its latest recording, once that is sealed.
pub(crate) const SEALED: TableDefinition<u128, &[u8]> = TableDefinition::new("sealed");

/// A recording's verified copy in the object store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SealMark {
    /// The recording's generation when it was sealed (a reopened recording is sealed again).
    pub generation: u64,
    /// Its end time when it was sealed: the copy holds everything up to that end.
    pub finished_ms: u64,
    /// When the copy was verified, in ms since the epoch.
    pub sealed_ms: u64,
    /// Whether its chunks are still on local disk; once `false`, reads go to the object store.
    pub local: bool,
}

impl SealMark {
    pub(crate) fn encode(&self) -> Result<Vec<u8>> {
        super::schema::encode(self, "a seal mark")
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<SealMark> {
        super::schema::decode(bytes, "seal mark")
    }
}

/// What a seal op found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sealing {
    /// The mark is written (or was already): the copy is the recording's.
    Marked,
    /// The row changed since the copy was made (deleted, reopened, replaced, gone): the copy
    /// describes nothing here and is not marked.
    Stale,
}
