//! Catch-up and long-poll GETs and HEAD: the recorder's streams find the stream and read its
//! lineage; here come offsets, cursors, JSON array framing, ETags and cache headers.
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, StatusCode};

use super::HttpFace;
use super::cursor;
use super::failure::failed;
use super::json;
use super::offset::{Offset, ReadFrom};
use super::read_room::ResponseRoom;
use super::reply::*;
use super::sse::Encoding;
use super::whole_characters;
use super::write::stream_refused;
use crate::id::ConversationId;
use crate::recorder::streams::{LineageReader, StreamSnapshot};

/// Most bytes a long-poll response carries; the rest is a request away (a catch-up read's
/// limit is its room, see `read_room`).
const MAX_READ_BYTES: usize = 1024 * 1024;
/// How long a long-poll waits for data before answering 204: short, as the protocol's
/// reference servers and its conformance suite expect; a client simply polls again.
pub(crate) const LONG_POLL_WAIT: Duration = Duration::from_secs(3);

/// The byte offset a read `from` starts at in the stream `snapshot` found: 400 past its tail.
pub(crate) fn start(snapshot: &StreamSnapshot, from: ReadFrom) -> Result<u64, Reply> {
    let offset = match from {
        ReadFrom::At(offset) => offset,
        ReadFrom::Now => snapshot.tail,
    };
    if offset > snapshot.tail {
        return Err(Reply::refuse(
            StatusCode::BAD_REQUEST,
            format!(
                "offset {} is past the stream's tail {}",
                Offset(offset),
                Offset(snapshot.tail)
            ),
        ));
    }
    Ok(offset)
}

impl HttpFace {
    /// What is at stream `id` for a read: its snapshot, or the reply that refuses it. A read
    /// that `touches` counts against the stream's sliding TTL (HEAD does not).
    pub(crate) async fn snapshot(
        &self,
        id: &ConversationId,
        touch: bool,
    ) -> Result<StreamSnapshot, Reply> {
        self.streams
            .snapshot(id, touch)
            .await
            .map_err(|refused| stream_refused(refused, id))
    }

    /// What is at stream `id` for a read `from` an offset, and the offset it starts at. On a
    /// node of a cluster that does not lead, no stream there, or an offset past its tail, may
    /// be a write the leader committed that this node has not applied yet: it catches up with
    /// the leader, and looks once more.
    pub(crate) async fn found(
        &self,
        id: &ConversationId,
        touch: bool,
        from: Option<ReadFrom>,
    ) -> Result<(StreamSnapshot, u64), Reply> {
        let look = || async {
            let snapshot = self.snapshot(id, touch).await?;
            let offset = match from {
                Some(from) => start(&snapshot, from)?,
                None => snapshot.tail,
            };
            Ok::<_, Reply>((snapshot, offset))
        };
        match look().await {
            Err(reply) if reply.may_be_behind() => match self.behind_a_leader() {
                Some(cluster) => {
                    cluster.catch_up().await;
                    look().await
                }
                None => Err(reply),
            },
            found => found,
        }
    }

    /// HEAD.
    pub(crate) async fn head(&self, id: &ConversationId) -> Replied {
        let (snapshot, _) = self.found(id, false, None).await?;
        let mut reply = Reply::new(StatusCode::OK)
            .content_type(&snapshot.content_type)
            .next_offset(snapshot.tail)
            .closed(snapshot.closed)
            .cache("no-store");
        if let Some(ttl) = snapshot.ttl_secs {
            reply = reply.named(STREAM_TTL, ttl.to_string());
        }
        if let Some(at) = snapshot.expires_at_ms {
            reply = reply.named(STREAM_EXPIRES_AT, crate::clock::rfc3339(at));
        }
        Ok(reply)
    }

    /// GET without `live`, or with `live=long-poll`.
    pub(crate) async fn read(
        &self,
        id: &ConversationId,
        from: ReadFrom,
        long_poll: bool,
        cursor_param: Option<&str>,
        headers: &HeaderMap,
    ) -> Replied {
        let (snapshot, offset) = self.found(id, true, Some(from)).await?;
        let json = snapshot.is_json();
        let mut reader = self
            .streams
            .reader(id, &snapshot, offset)
            .await
            .map_err(failed)?;
        let room = match long_poll || from == ReadFrom::Now {
            true => ResponseRoom::small(),
            false => self.read_room.take(),
        };
        let limit = room.bytes;
        let mut pieces = Vec::new();
        let mut bytes = 0;
        if from != ReadFrom::Now {
            bytes = take_ready(&mut reader, &mut pieces, limit).await?;
        }
        // Up to date when the read stopped short of its room, or its room stopped it at the
        // tail the snapshot found (a stream as long as the room, or a JSON message that ends
        // past it): else its reader makes one more request to learn that nothing follows.
        // Exactly there: a read past that tail took what was committed since, and may stop
        // anywhere in it.
        let full_to_tail = bytes >= limit && reader.position() == snapshot.tail;
        let mut caught_up = bytes < limit || full_to_tail;
        if full_to_tail && snapshot.closed && !reader.ended() {
            // Stopped by its room at a closed stream's end: one more look finds that end, and
            // how the stream ended. Nothing follows a close, but what it finds still goes out.
            if let Some(piece) = reader.ready(1).await.map_err(failed)? {
                pieces.push(piece.data);
            }
        }
        if long_poll && pieces.is_empty() && !reader.ended() {
            match tokio::time::timeout(LONG_POLL_WAIT, reader.wait(MAX_READ_BYTES)).await {
                Ok(piece) => {
                    if let Some(piece) = piece.map_err(failed)? {
                        pieces.push(piece.data);
                        // With what else is committed, within the room.
                        bytes = take_ready(&mut reader, &mut pieces, limit).await?;
                        caught_up = bytes < limit;
                    }
                }
                Err(_) => {
                    return Ok(Reply::new(StatusCode::NO_CONTENT)
                        .next_offset(reader.position())
                        .up_to_date()
                        .named(STREAM_CURSOR, cursor::next(cursor_param).to_string())
                        .cache("no-store"));
                }
            }
        }
        // Text its room cut ends with whole characters; the rest of the last one comes next.
        let held = match !caught_up && Encoding::of(&snapshot) == Encoding::Text {
            true => whole_characters::hold_back_unfinished_character(&mut pieces) as u64,
            false => 0,
        };
        // `now` reads nothing, so the reader has not looked: the snapshot knows.
        let closed = reader.ended() || (from == ReadFrom::Now && snapshot.closed);
        let end = reader.position() - held;
        if long_poll && pieces.is_empty() {
            // Closed while (or before) waiting, at the tail: EOF, at once.
            return Ok(Reply::new(StatusCode::NO_CONTENT)
                .next_offset(end)
                .up_to_date()
                .closed(closed)
                .ended_as(reader.ended_as())
                .cache("no-store"));
        }
        // JSON mode frames the messages as one array; bytes go out as they were read.
        let body = match json {
            true => vec![json::array(pieces.iter().map(|p| &p[..]))],
            false => pieces,
        };
        let mut reply = Reply::new(StatusCode::OK)
            .content_type(&snapshot.content_type)
            .next_offset(end)
            .closed(closed && caught_up)
            .ended_as(reader.ended_as().filter(|_| caught_up));
        if caught_up {
            reply = reply.up_to_date();
        }
        if long_poll || !closed {
            reply = reply.named(STREAM_CURSOR, cursor::next(cursor_param).to_string());
        }
        if from == ReadFrom::Now {
            return Ok(reply.cache("no-store").body(room.body_of(body)));
        }
        // A response that is up to date says so; the same bytes with more after them (a
        // smaller room, or a room filled exactly) do not, so the two must not share a tag (a
        // revalidation would keep the first's `Stream-Up-To-Date`).
        let etag = format!(
            "\"{:032x}:{}:{}{}{}\"",
            id.key(),
            Offset(offset),
            Offset(end),
            if caught_up { ":u" } else { "" },
            if closed { ":c" } else { "" }
        );
        let matched = headers
            .get(http::header::IF_NONE_MATCH)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.split(',').any(|tag| tag.trim() == etag));
        reply = reply
            .header(http::header::ETAG, &etag)
            .cache(self.cache_policy());
        if matched {
            return Ok(Reply::new(StatusCode::NOT_MODIFIED)
                .header(http::header::ETAG, &etag)
                .cache(self.cache_policy())
                .next_offset(end));
        }
        Ok(reply.body(room.body_of(body)))
    }

    /// Caching of catch-up reads: shared unless access control is on.
    pub(crate) fn cache_policy(&self) -> &'static str {
        if self.guard.is_enabled() {
            "private, max-age=60, stale-while-revalidate=300"
        } else {
            "public, max-age=60, stale-while-revalidate=300"
        }
    }
}

/// Adds to `pieces` what `reader` has committed already, until they hold `limit` bytes or more
/// (a JSON message is never cut, so it may end past the limit); returns the bytes they hold.
async fn take_ready(
    reader: &mut LineageReader,
    pieces: &mut Vec<Bytes>,
    limit: usize,
) -> Result<usize, Reply> {
    let mut bytes: usize = pieces.iter().map(Bytes::len).sum();
    while bytes < limit {
        match reader.ready(limit - bytes).await.map_err(failed)? {
            Some(piece) => {
                bytes += piece.data.len();
                pieces.push(piece.data);
            }
            None => break,
        }
    }
    Ok(bytes)
}
