//! Forks: a create with `Stream-Forked-From` inherits its source's bytes up to an offset
//! (refined by `Stream-Fork-Sub-Offset`) without copying them; the source counts its forks in
//! its row, so that it stays while any reads from it. The count and the fork are one commit.
use std::sync::Arc;

use http::StatusCode;

use super::HttpFace;
use super::json;
use super::reply::Reply;
use super::streams::{Found, Handle, State};
use super::write::{failed, same_type};
use crate::id::ConversationId;
use crate::store::{ForkOf, StreamRow};

/// A fork, as `Stream-Forked-From` and its companions ask.
pub(crate) struct ForkAsk {
    pub(crate) source: ConversationId,
    pub(crate) offset: Option<u64>,
    pub(crate) sub_offset: u64,
}

impl HttpFace {
    /// The stream a fork reads from: 404 when there is none, 409 when it was deleted.
    pub(crate) async fn fork_source(&self, ask: &ForkAsk) -> Result<Arc<Handle>, Reply> {
        match self.streams.find(&ask.source).await.map_err(failed)? {
            Found::Stream(handle) => Ok(handle),
            Found::SoftDeleted => Err(Reply::refuse(
                StatusCode::CONFLICT,
                format!("the stream to fork from, {}, was deleted", ask.source),
            )),
            // A recording made over gRPC cannot be a source: it has no row to count forks in.
            Found::Recording | Found::Missing => Err(source_missing(&ask.source)),
        }
    }

    /// Checks a fork against its `source` (whose lock the caller holds until the fork's
    /// create is committed) and fills in `row.fork`. The store counts the fork in the
    /// source's row in the commit that creates it; the caller then counts it in `source`.
    pub(crate) async fn fork_from(
        &self,
        ask: &ForkAsk,
        asked_type: Option<&str>,
        source: &mut State,
        row: &mut StreamRow,
    ) -> Result<(), Reply> {
        // Deleted between finding it and taking its lock.
        if source.gone {
            return Err(source_missing(&ask.source));
        }
        if source.row.soft_deleted {
            return Err(Reply::refuse(
                StatusCode::CONFLICT,
                format!("the stream to fork from, {}, was deleted", ask.source),
            ));
        }
        source.refresh();
        if source.row.ttl_secs.is_some() || source.row.expires_at_ms.is_some() {
            source.touched_ms = self.streams.now_ms();
        }
        if let Some(asked) = asked_type.filter(|t| !same_type(t, &source.row.content_type)) {
            return Err(Reply::refuse(
                StatusCode::CONFLICT,
                format!(
                    "a fork has its source's content type, {}; got {asked}",
                    source.row.content_type
                ),
            ));
        }
        row.content_type = source.row.content_type.clone();
        if row.ttl_secs.is_none() && row.expires_at_ms.is_none() {
            row.ttl_secs = source.row.ttl_secs;
            row.expires_at_ms = source.row.expires_at_ms;
        }
        let tail = source.tail();
        let anchor = ask.offset.unwrap_or(tail);
        if anchor > tail {
            return Err(Reply::refuse(
                StatusCode::BAD_REQUEST,
                format!(
                    "Stream-Fork-Offset {} is past the source's tail {}",
                    super::offset::Offset(anchor),
                    super::offset::Offset(tail)
                ),
            ));
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
    ) -> Result<u64, Reply> {
        if sub == 0 {
            return Ok(anchor);
        }
        let overshoot = || {
            Reply::refuse(
                StatusCode::BAD_REQUEST,
                "Stream-Fork-Sub-Offset names a position past the source's data",
            )
        };
        let ends = self
            .message_ends(id, source, anchor, sub)
            .await
            .map_err(failed)?;
        if json::is_json(&source.row.content_type) {
            return ends.get(sub as usize - 1).copied().ok_or_else(overshoot);
        }
        // Bytes: within the next message (chunk) after the anchor.
        let next_end = ends.first().copied().ok_or_else(overshoot)?;
        let offset = anchor + sub;
        if offset > next_end {
            return Err(overshoot());
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
        let mut reader = super::read::Reader::open(self, id, source, anchor, true).await?;
        while (ends.len() as u64) < count {
            match reader.ready(usize::MAX).await? {
                Some(piece) => ends.push(piece.end),
                None => break,
            }
        }
        Ok(ends)
    }

    async fn generation_of(&self, id: &ConversationId) -> Result<u64, Reply> {
        let store = self.recorder.recordings().store();
        match store.meta(id.key()).await.map_err(failed)? {
            Some(meta) => Ok(meta.generation),
            None => Err(source_missing(id)),
        }
    }
}

/// 404 for a fork whose source is not there.
pub(crate) fn source_missing(source: &ConversationId) -> Reply {
    Reply::refuse(
        StatusCode::NOT_FOUND,
        format!("the stream to fork from, {source}, does not exist"),
    )
}
