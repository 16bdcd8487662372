//! Forks: a create with a source inherits the source's bytes up to an offset (refined by a
//! sub-offset, counted in bytes or JSON messages) without copying them. The store counts the
//! fork in its source's row in the commit that creates it, so that the source stays while any
//! fork reads from it.
use std::sync::Arc;

use super::Streams;
use super::handle::{Handle, State, StreamAt};
use super::lineage::LineageReader;
use super::messages::{is_json, same_type};
use crate::error::Error;
use crate::id::ConversationId;
use crate::store::{ForkOf, StreamRow};

/// A fork, as a create asks for it.
#[derive(Debug, Clone)]
pub struct ForkAsk {
    /// The stream to fork from.
    pub source: ConversationId,
    /// Where in the source to fork (its tail when `None`).
    pub offset: Option<u64>,
    /// How far past `offset` to fork: bytes, or messages in JSON mode (0 for none).
    pub sub_offset: u64,
}

/// Why a fork is refused.
#[derive(Debug)]
pub enum ForkRefused {
    /// The source does not exist (or is a recording made over gRPC).
    SourceMissing {
        /// The source asked for.
        source: ConversationId,
    },
    /// The source was deleted while forks read from it.
    SourceDeleted {
        /// The source asked for.
        source: ConversationId,
    },
    /// A content type other than the source's was asked for.
    TypeMismatch {
        /// The source's content type.
        source_type: String,
        /// The one asked for.
        asked: String,
    },
    /// The fork offset is past the source's tail.
    OffsetPastTail {
        /// The offset asked for.
        offset: u64,
        /// The source's tail.
        tail: u64,
    },
    /// The sub-offset names a position past the source's data.
    SubOffsetPastData,
    /// The recorder failed (storage, shutdown).
    Failed(Error),
}

impl From<Error> for ForkRefused {
    fn from(err: Error) -> Self {
        ForkRefused::Failed(err)
    }
}

impl Streams {
    /// The stream a fork reads from.
    pub(super) async fn fork_source(&self, ask: &ForkAsk) -> Result<Arc<Handle>, ForkRefused> {
        match self.find(&ask.source).await? {
            StreamAt::Stream(handle) => Ok(handle),
            StreamAt::SoftDeleted => Err(ForkRefused::SourceDeleted {
                source: ask.source.clone(),
            }),
            // A recording made over gRPC cannot be a source: it has no row to count forks in.
            StreamAt::Recording | StreamAt::Missing => Err(ForkRefused::SourceMissing {
                source: ask.source.clone(),
            }),
        }
    }

    /// Checks a fork against its `source` (whose lock the caller holds until the fork's
    /// create is committed) and fills in `row.fork`. The store counts the fork in the
    /// source's row in the commit that creates it.
    pub(super) async fn fork_from(
        &self,
        ask: &ForkAsk,
        asked_type: Option<&str>,
        source: &mut State,
        row: &mut StreamRow,
    ) -> Result<(), ForkRefused> {
        // Deleted between finding it and taking its lock.
        if source.gone {
            return Err(ForkRefused::SourceMissing {
                source: ask.source.clone(),
            });
        }
        if source.row.soft_deleted {
            return Err(ForkRefused::SourceDeleted {
                source: ask.source.clone(),
            });
        }
        source.refresh();
        if source.row.ttl_secs.is_some() || source.row.expires_at_ms.is_some() {
            source.touch(self.now_ms());
        }
        if let Some(asked) = asked_type.filter(|t| !same_type(t, &source.row.content_type)) {
            return Err(ForkRefused::TypeMismatch {
                source_type: source.row.content_type.clone(),
                asked: asked.to_string(),
            });
        }
        row.content_type = source.row.content_type.clone();
        if row.ttl_secs.is_none() && row.expires_at_ms.is_none() {
            row.ttl_secs = source.row.ttl_secs;
            row.expires_at_ms = source.row.expires_at_ms;
        }
        let tail = source.tail();
        let anchor = ask.offset.unwrap_or(tail);
        if anchor > tail {
            return Err(ForkRefused::OffsetPastTail {
                offset: anchor,
                tail,
            });
        }
        let offset = self
            .sub_offset(&ask.source, source, anchor, ask.sub_offset)
            .await?;
        let generation = self.generation_of(&ask.source).await?;
        row.fork = Some(ForkOf {
            source: ask.source.key(),
            source_generation: generation,
            offset,
            anchor,
            sub_offset: ask.sub_offset,
        });
        Ok(())
    }

    /// The fork point `sub` bytes (or JSON messages) past `anchor` in `source`.
    async fn sub_offset(
        &self,
        id: &ConversationId,
        source: &State,
        anchor: u64,
        sub: u64,
    ) -> Result<u64, ForkRefused> {
        if sub == 0 {
            return Ok(anchor);
        }
        let ends = self.message_ends(id, source, anchor, sub).await?;
        if is_json(&source.row.content_type) {
            return ends
                .get(sub as usize - 1)
                .copied()
                .ok_or(ForkRefused::SubOffsetPastData);
        }
        // Bytes: within the next message (chunk) after the anchor.
        let next_end = ends
            .first()
            .copied()
            .ok_or(ForkRefused::SubOffsetPastData)?;
        let offset = anchor + sub;
        if offset > next_end {
            return Err(ForkRefused::SubOffsetPastData);
        }
        Ok(offset)
    }

    /// The end offsets of up to `count` messages of `source` from `anchor`.
    async fn message_ends(
        &self,
        id: &ConversationId,
        source: &State,
        anchor: u64,
        count: u64,
    ) -> crate::Result<Vec<u64>> {
        let mut ends = Vec::new();
        let fork = source.row.fork.clone();
        let mut reader = LineageReader::open(&self.recorder, id, fork, anchor, true).await?;
        while (ends.len() as u64) < count {
            match reader.ready(usize::MAX).await? {
                Some(portion) => ends.push(portion.end),
                None => break,
            }
        }
        Ok(ends)
    }

    async fn generation_of(&self, id: &ConversationId) -> Result<u64, ForkRefused> {
        let store = self.recorder.deck().store();
        match store.meta(id.key()).await? {
            Some(meta) => Ok(meta.generation),
            None => Err(ForkRefused::SourceMissing { source: id.clone() }),
        }
    }
}
