//! Reads: a [`Reader`] walks a stream from an offset, through the streams it was forked from
//! and then its own recording; catch-up and long-poll GETs and HEAD are answered here.
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, StatusCode};

use super::HttpFace;
use super::cursor;
use super::failure::failed;
use super::json;
use super::offset::{Offset, ReadFrom};
use super::reply::*;
use super::streams::{Found, GRPC_CONTENT_TYPE, State};
use super::write::{gone, missing};
use crate::error::Result;
use crate::id::ConversationId;
use crate::recorder::{Recorder, Replay};
use crate::store::{ForkOf, Lookup};

/// Most bytes one catch-up response carries; the rest is a request away.
const MAX_READ_BYTES: usize = 1024 * 1024;
/// How long a long-poll waits for data before answering 204: short, as the protocol's
/// reference servers and its conformance suite expect; a client simply polls again.
pub(crate) const LONG_POLL_WAIT: Duration = Duration::from_secs(3);

/// What a read knows of a stream when it starts.
#[derive(Debug, Clone)]
pub(crate) struct Snapshot {
    pub(crate) content_type: String,
    pub(crate) tail: u64,
    pub(crate) closed: bool,
    pub(crate) fork: Option<ForkOf>,
    pub(crate) ttl_secs: Option<u64>,
    pub(crate) expires_at_ms: Option<u64>,
}

impl Snapshot {
    pub(crate) fn of(state: &State) -> Self {
        Self {
            content_type: state.row.content_type.clone(),
            tail: state.tail(),
            closed: state.closed,
            fork: state.row.fork.clone(),
            ttl_secs: state.row.ttl_secs,
            expires_at_ms: state.row.expires_at_ms,
        }
    }

    pub(crate) fn is_json(&self) -> bool {
        json::is_json(&self.content_type)
    }

    /// The byte offset a read `from` starts at: 400 past the tail.
    pub(crate) fn start(&self, from: ReadFrom) -> Result<u64, Reply> {
        let offset = match from {
            ReadFrom::At(offset) => offset,
            ReadFrom::Now => self.tail,
        };
        if offset > self.tail {
            return Err(Reply::refuse(
                StatusCode::BAD_REQUEST,
                format!(
                    "offset {} is past the stream's tail {}",
                    Offset(offset),
                    Offset(self.tail)
                ),
            ));
        }
        Ok(offset)
    }
}

/// One piece of a read: bytes, or one JSON message.
pub(crate) struct Piece {
    pub(crate) data: Bytes,
    /// Offset just after it.
    pub(crate) end: u64,
}

/// One recording of a stream's lineage: its own bytes start at `base` and, for a stream
/// forked from, are read only up to `cap` (where the fork diverged).
struct Segment {
    id: ConversationId,
    base: u64,
    cap: Option<u64>,
}

/// A walk through a stream from an offset.
pub(crate) struct Reader {
    recorder: Recorder,
    /// Segments still to read, the current one first.
    segments: Vec<Segment>,
    replay: Replay,
    position: u64,
    /// One piece per message (JSON mode).
    chunked: bool,
}

impl Reader {
    /// A reader of stream `id` (as `state` describes it) from `offset`, which must not be past
    /// its tail; `chunked` reads whole messages.
    ///
    /// Fails with a storage error.
    pub(crate) async fn open(
        face: &HttpFace,
        id: &ConversationId,
        state: &State,
        offset: u64,
        chunked: bool,
    ) -> Result<Reader> {
        Self::open_at(face, id, state.row.fork.clone(), offset, chunked).await
    }

    pub(crate) async fn open_at(
        face: &HttpFace,
        id: &ConversationId,
        fork: Option<ForkOf>,
        offset: u64,
        chunked: bool,
    ) -> Result<Reader> {
        let mut segments = Vec::new();
        // Walk up the lineage: each source is read up to where its child forked.
        let (mut next, mut cap) = (fork, None);
        segments.push(Segment {
            id: id.clone(),
            base: next.as_ref().map_or(0, |f| f.offset),
            cap: None,
        });
        while let Some(fork) = next.take() {
            cap = Some(cap.map_or(fork.offset, |c: u64| c.min(fork.offset)));
            let source = ConversationId::parse(uuid::Uuid::from_u128(fork.source).as_bytes())?;
            let store = face.recorder.recordings().store();
            next = store.stream_row(fork.source).await?.and_then(|r| r.fork);
            segments.push(Segment {
                id: source,
                base: next.as_ref().map_or(0, |f| f.offset),
                cap,
            });
        }
        segments.reverse();
        // Skip the segments wholly before `offset`.
        while segments.len() > 1 && segments[0].cap.is_some_and(|cap| cap <= offset) {
            segments.remove(0);
        }
        let first = &segments[0];
        let mut replay = face
            .recorder
            .replay_bytes(&first.id, offset.saturating_sub(first.base))
            .await?;
        if chunked {
            replay = replay.chunked();
        }
        Ok(Reader {
            recorder: face.recorder.clone(),
            segments,
            replay,
            position: offset,
            chunked,
        })
    }

    /// Offset of the next byte to read.
    pub(crate) fn position(&self) -> u64 {
        self.position
    }

    /// The next piece committed already, of at most `max_bytes`; `None` once caught up.
    ///
    /// Fails with a storage error.
    pub(crate) async fn ready(&mut self, max_bytes: usize) -> Result<Option<Piece>> {
        self.next(max_bytes, false).await
    }

    /// The next piece, waiting for it while the stream is open; `None` once it has ended.
    ///
    /// Fails with a storage error.
    pub(crate) async fn wait(&mut self, max_bytes: usize) -> Result<Option<Piece>> {
        self.next(max_bytes, true).await
    }

    /// Whether the stream ended (closed) and everything has been read.
    pub(crate) fn ended(&self) -> bool {
        self.segments.len() == 1 && self.replay.ending().is_some()
    }

    async fn next(&mut self, max_bytes: usize, wait: bool) -> Result<Option<Piece>> {
        loop {
            let segment = &self.segments[0];
            if let Some(cap) = segment.cap
                && self.position >= cap
            {
                self.advance().await?;
                continue;
            }
            let budget = match segment.cap {
                Some(cap) => max_bytes.min((cap - self.position) as usize),
                None => max_bytes,
            };
            let base = segment.base;
            let piece = match (wait, segment.cap) {
                // An ancestor is read only up to a cap that is committed: never wait on it.
                (true, None) => self.replay.next_up_to(budget).await?,
                _ => self.replay.next_ready(budget).await?,
            };
            let Some(piece) = piece else {
                if self.segments.len() > 1 {
                    // An ancestor that ended (or holds less than the cap): go on to the fork.
                    self.advance().await?;
                    continue;
                }
                return Ok(None);
            };
            let mut data = piece.data;
            let end = base + piece.end_offset;
            if let Some(cap) = segment.cap
                && end > cap
            {
                data.truncate(data.len() - (end - cap) as usize);
            }
            self.position += data.len() as u64;
            return Ok(Some(Piece {
                data,
                end: self.position,
            }));
        }
    }

    /// Moves on to the next segment of the lineage, at the current position.
    async fn advance(&mut self) -> Result<()> {
        self.segments.remove(0);
        let segment = &self.segments[0];
        let internal = self.position.saturating_sub(segment.base);
        let mut replay = self.recorder.replay_bytes(&segment.id, internal).await?;
        if self.chunked {
            replay = replay.chunked();
        }
        self.replay = replay;
        Ok(())
    }
}

impl HttpFace {
    /// What is at stream `id` for a read: its snapshot, or the reply that refuses it. A read
    /// that `touches` counts against the stream's sliding TTL (HEAD does not).
    pub(crate) async fn snapshot(
        &self,
        id: &ConversationId,
        touch: bool,
    ) -> Result<Snapshot, Reply> {
        match self.streams.find(id).await.map_err(failed)? {
            Found::Stream(handle) => {
                let mut state = handle.state.lock().await;
                state.refresh();
                let now = self.streams.now_ms();
                if state.gone || state.expired(now) {
                    return Err(missing(id));
                }
                if touch {
                    state.touched_ms = now;
                }
                Ok(Snapshot::of(&state))
            }
            Found::Recording => self.recording_snapshot(id).await,
            Found::SoftDeleted => Err(gone()),
            Found::Missing => Err(missing(id)),
        }
    }

    /// A recording made over gRPC, seen as a stream.
    async fn recording_snapshot(&self, id: &ConversationId) -> Result<Snapshot, Reply> {
        let (tail, closed) = match self.recorder.recordings().live(id.key()) {
            Some(tape) => (tape.progress().bytes, false),
            None => match self.recorder.recordings().store().lookup(id.key()).await {
                Ok(Lookup::Stored(meta)) => (meta.byte_len, !meta.status.is_live()),
                Ok(_) => return Err(missing(id)),
                Err(err) => return Err(failed(err)),
            },
        };
        Ok(Snapshot {
            content_type: GRPC_CONTENT_TYPE.into(),
            tail,
            closed,
            fork: None,
            ttl_secs: None,
            expires_at_ms: None,
        })
    }

    /// HEAD.
    pub(crate) async fn head(&self, id: &ConversationId) -> Replied {
        let snapshot = self.snapshot(id, false).await?;
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
        let snapshot = self.snapshot(id, true).await?;
        let json = snapshot.is_json();
        let offset = snapshot.start(from)?;
        let mut reader = Reader::open_at(self, id, snapshot.fork.clone(), offset, json)
            .await
            .map_err(failed)?;
        let mut pieces = Vec::new();
        let mut bytes = 0;
        if from != ReadFrom::Now {
            while bytes < MAX_READ_BYTES {
                match reader.ready(MAX_READ_BYTES - bytes).await.map_err(failed)? {
                    Some(piece) => {
                        bytes += piece.data.len();
                        pieces.push(piece.data);
                    }
                    None => break,
                }
            }
        }
        let caught_up = bytes < MAX_READ_BYTES;
        if long_poll && pieces.is_empty() && !reader.ended() {
            match tokio::time::timeout(LONG_POLL_WAIT, reader.wait(MAX_READ_BYTES)).await {
                Ok(piece) => {
                    if let Some(piece) = piece.map_err(failed)? {
                        pieces.push(piece.data);
                        while let Some(piece) =
                            reader.ready(MAX_READ_BYTES).await.map_err(failed)?
                        {
                            pieces.push(piece.data);
                        }
                    }
                }
                Err(_) => {
                    return Ok(Reply::new(StatusCode::NO_CONTENT)
                        .next_offset(reader.position())
                        .up_to_date()
                        .named(STREAM_CURSOR, cursor::next(cursor_param))
                        .cache("no-store"));
                }
            }
        }
        // `now` reads nothing, so the reader has not looked: the snapshot knows.
        let closed = reader.ended() || (from == ReadFrom::Now && snapshot.closed);
        let end = reader.position();
        if long_poll && pieces.is_empty() {
            // Closed while (or before) waiting, at the tail: EOF, at once.
            return Ok(Reply::new(StatusCode::NO_CONTENT)
                .next_offset(end)
                .up_to_date()
                .closed(closed)
                .cache("no-store"));
        }
        let body = if json {
            json::array(pieces.iter().map(|p| &p[..]))
        } else {
            concat(pieces)
        };
        let mut reply = Reply::new(StatusCode::OK)
            .content_type(&snapshot.content_type)
            .next_offset(end)
            .closed(closed && caught_up);
        if caught_up {
            reply = reply.up_to_date();
        }
        if long_poll || !closed {
            reply = reply.named(STREAM_CURSOR, cursor::next(cursor_param));
        }
        if from == ReadFrom::Now {
            return Ok(reply.cache("no-store").bytes(body));
        }
        let etag = format!(
            "\"{:032x}:{}:{}{}\"",
            id.key(),
            Offset(offset),
            Offset(end),
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
                .next_offset(end));
        }
        Ok(reply.bytes(body))
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

fn concat(pieces: Vec<Bytes>) -> Bytes {
    match pieces.len() {
        0 => Bytes::new(),
        1 => pieces.into_iter().next().unwrap_or_default(),
        _ => {
            let mut body = BytesMut::with_capacity(pieces.iter().map(Bytes::len).sum());
            pieces.iter().for_each(|p| body.extend_from_slice(p));
            body.freeze()
        }
    }
}
