//! The `streams` row: what a recording created over HTTP (the Durable Streams face) carries
//! beyond its bytes: content type, expiry, fork, writers' state. A recording without one is a
//! gRPC text recording. The row is written in the same commit as the change it describes.
use std::collections::BTreeMap;

use redb::TableDefinition;
use serde::{Deserialize, Serialize};

use crate::error::Result;

/// conversation → bincode [`StreamRow`] of its latest recording, when it was made over HTTP.
pub(crate) const STREAMS: TableDefinition<u128, &[u8]> = TableDefinition::new("streams");

/// What the HTTP face keeps about a stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct StreamRow {
    /// The MIME type set at creation.
    pub content_type: String,
    /// Sliding time-to-live, in seconds: idle this long, the stream expires.
    pub ttl_secs: Option<u64>,
    /// Absolute expiry time, in ms since the epoch.
    pub expires_at_ms: Option<u64>,
    /// The stream this one was forked from, if any.
    pub fork: Option<ForkOf>,
    /// How many existing streams were forked from this one; while above zero its data stays.
    pub forks: u64,
    /// Deleted while forks still read from it: gone for clients, kept for the forks.
    pub soft_deleted: bool,
    /// Idempotent producers' state, by producer id.
    pub producers: BTreeMap<String, ProducerState>,
    /// The last `Stream-Seq` accepted.
    pub last_stream_seq: Option<String>,
    /// The producer request that closed the stream, so its retry is a duplicate.
    pub closed_by: Option<ProducerStamp>,
}

/// Where a fork inherits its first bytes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkOf {
    /// The source's storage key.
    pub source: u128,
    /// The source's recording generation when forked.
    pub source_generation: u64,
    /// Bytes inherited: the fork's own bytes start at this offset.
    pub offset: u64,
    /// The offset its create named (`Stream-Fork-Offset`), before the sub-offset.
    pub anchor: u64,
    /// The sub-offset its create named (`Stream-Fork-Sub-Offset`).
    pub sub_offset: u64,
}

/// An idempotent producer's place in a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerState {
    /// Its current epoch.
    pub epoch: u64,
    /// The last sequence number accepted in that epoch.
    pub seq: u64,
}

/// One producer request: `(Producer-Id, Producer-Epoch, Producer-Seq)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerStamp {
    /// `Producer-Id`.
    pub id: String,
    /// `Producer-Epoch`.
    pub epoch: u64,
    /// `Producer-Seq`.
    pub seq: u64,
}

impl StreamRow {
    /// The row's stored form.
    pub fn encode(&self) -> Result<Vec<u8>> {
        super::schema::encode(self, "a streams row")
    }

    /// A stored row.
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        super::schema::decode(bytes, "streams row")
    }
}
