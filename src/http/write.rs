//! Writes: create (PUT, forks included), append and close (POST), delete (DELETE). Every
//! write to a stream happens under its handle's lock, and is answered only once committed.
use std::sync::Arc;

use bytes::Bytes;
use http::StatusCode;

use super::HttpFace;
use super::json::{self, JsonRefusal};
use super::producer::{self, Verdict};
use super::reply::*;
use super::streams::{Found, Handle, State};
use crate::error::Error;
use crate::id::ConversationId;
use crate::recorder::Status;
use crate::store::{ForkOf, ProducerStamp, StreamRow};

/// A create, as its headers and body ask.
pub(crate) struct Create {
    pub(crate) content_type: Option<String>,
    pub(crate) ttl_secs: Option<u64>,
    pub(crate) expires_at_ms: Option<u64>,
    pub(crate) closed: bool,
    pub(crate) body: Bytes,
    pub(crate) fork: Option<ForkAsk>,
    /// The stream's URL, for `Location`.
    pub(crate) location: String,
}

/// A fork, as `Stream-Forked-From` and its companions ask.
pub(crate) struct ForkAsk {
    pub(crate) source: ConversationId,
    pub(crate) offset: Option<u64>,
    pub(crate) sub_offset: u64,
}

/// An append (or close), as its headers and body ask.
pub(crate) struct Append {
    pub(crate) content_type: Option<String>,
    pub(crate) body: Bytes,
    pub(crate) closing: bool,
    pub(crate) stream_seq: Option<String>,
    pub(crate) producer: Option<ProducerStamp>,
}

fn same_type(a: &str, b: &str) -> bool {
    json::essence(a).eq_ignore_ascii_case(json::essence(b))
}

/// The chunks an append's body makes: JSON messages, or the body as one chunk.
fn chunks_of(content_type: &str, body: Bytes, create: bool) -> Result<Vec<Bytes>, Reply> {
    if body.is_empty() {
        return Ok(vec![]);
    }
    if json::is_json(content_type) {
        return json::messages(&body, create).map_err(|refusal| match refusal {
            JsonRefusal::Invalid(why) => Reply::refuse(
                StatusCode::BAD_REQUEST,
                format!("the body is not valid JSON: {why}"),
            ),
            JsonRefusal::EmptyArray => Reply::refuse(
                StatusCode::BAD_REQUEST,
                "an empty JSON array appends nothing; send at least one message",
            ),
        });
    }
    // Copied out: the body may be a slice of the connection's read buffer, which the live
    // recording's in-memory tail would otherwise keep alive whole.
    Ok(vec![Bytes::copy_from_slice(&body)])
}

/// Maps a recorder error on a write to a reply.
pub(crate) fn failed(err: Error) -> Reply {
    let status = match &err {
        Error::TooManyLiveRecordings { .. } => StatusCode::TOO_MANY_REQUESTS,
        Error::RecordingTooLarge { .. } | Error::ChunkTooLarge { .. } => {
            StatusCode::PAYLOAD_TOO_LARGE
        }
        Error::DiskFull { .. } | Error::StoreFull => StatusCode::INSUFFICIENT_STORAGE,
        Error::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
        Error::Fenced | Error::Superseded | Error::RecordingEnded => StatusCode::CONFLICT,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    if status == StatusCode::INTERNAL_SERVER_ERROR {
        tracing::error!(error = %err, "HTTP write failed");
    }
    Reply::refuse(status, err.client_message())
}

impl HttpFace {
    /// PUT: creates the stream, or answers 200 when it exists as asked, 409 when not.
    pub(crate) async fn create(&self, id: &ConversationId, ask: Create) -> Replied {
        if ask.ttl_secs.is_some() && ask.expires_at_ms.is_some() {
            return Err(Reply::refuse(
                StatusCode::BAD_REQUEST,
                "send Stream-TTL or Stream-Expires-At, not both",
            ));
        }
        match self.streams.find(id).await.map_err(failed)? {
            Found::Stream(handle) => return self.recreate(&handle, &ask).await,
            Found::Missing => {}
            Found::Recording | Found::SoftDeleted => {
                return Err(Reply::refuse(
                    StatusCode::CONFLICT,
                    "a different stream already exists at this path",
                ));
            }
        }
        let mut row = StreamRow {
            content_type: ask
                .content_type
                .clone()
                .unwrap_or_else(|| super::request::DEFAULT_CONTENT_TYPE.to_string()),
            ttl_secs: ask.ttl_secs,
            expires_at_ms: ask.expires_at_ms,
            ..StreamRow::default()
        };
        if let Some(fork) = &ask.fork {
            self.fork_from(fork, ask.content_type.as_deref(), &mut row)
                .await?;
        }
        let chunks = chunks_of(&row.content_type, ask.body.clone(), true)?;
        let retention_ms = ask.ttl_secs.map(|ttl| ttl * 1000);
        let recordings = self.recorder.recordings();
        let writer = recordings
            .start_with_row(id, retention_ms, Some(&row))
            .await;
        let mut writer = match writer {
            Ok(writer) => writer,
            Err(err) => {
                if let Some(fork) = &row.fork {
                    self.release_source(fork.source).await;
                }
                return Err(failed(err));
            }
        };
        writer.tape().hold_open();
        let own: u64 = chunks.iter().map(|c| c.len() as u64).sum();
        if !chunks.is_empty() || ask.closed {
            let end = ask.closed.then_some(Status::Completed);
            let batch = writer
                .write_batch(chunks, None, end)
                .await
                .map_err(failed)?;
            batch.wait().await.map_err(failed)?;
        }
        let base = row.fork.as_ref().map_or(0, |f| f.offset);
        let content_type = row.content_type.clone();
        let generation = writer.tape().generation();
        let state = State {
            row,
            generation,
            writer: (!ask.closed).then_some(writer),
            own,
            closed: ask.closed,
            gone: false,
            touched_ms: self.streams.now_ms(),
        };
        self.streams.insert(Arc::new(Handle {
            id: id.clone(),
            state: tokio::sync::Mutex::new(state),
        }));
        tracing::info!(stream = %id, content_type = %content_type, "stream created");
        Ok(Reply::new(StatusCode::CREATED)
            .header(http::header::LOCATION, &ask.location)
            .content_type(&content_type)
            .next_offset(base + own)
            .closed(ask.closed))
    }

    /// A create of a stream that exists: 200 when it is as asked, else 409.
    async fn recreate(&self, handle: &Handle, ask: &Create) -> Replied {
        let mut state = handle.state.lock().await;
        state.refresh();
        let row = &state.row;
        let fork_matches = match (&ask.fork, &row.fork) {
            (None, None) => true,
            (Some(asked), Some(fork)) => {
                asked.source.key() == fork.source
                    && asked.offset.is_none_or(|o| o == fork.anchor)
                    && asked.sub_offset == fork.sub_offset
            }
            _ => false,
        };
        let matches = ask
            .content_type
            .as_deref()
            .is_none_or(|t| same_type(t, &row.content_type))
            && ask.ttl_secs == row.ttl_secs
            && ask.expires_at_ms == row.expires_at_ms
            && ask.closed == state.closed
            && fork_matches;
        if !matches {
            return Err(Reply::refuse(
                StatusCode::CONFLICT,
                "the stream exists with a different configuration",
            )
            .closed(state.closed));
        }
        Ok(Reply::new(StatusCode::OK)
            .content_type(&state.row.content_type)
            .next_offset(state.tail())
            .closed(state.closed))
    }

    /// Checks a fork's source and counts the fork in its row; fills in `row.fork`.
    async fn fork_from(
        &self,
        ask: &ForkAsk,
        asked_type: Option<&str>,
        row: &mut StreamRow,
    ) -> Result<(), Reply> {
        let not_found = || {
            Reply::refuse(
                StatusCode::NOT_FOUND,
                format!("the stream to fork from, {}, does not exist", ask.source),
            )
        };
        let handle = match self.streams.find(&ask.source).await.map_err(failed)? {
            Found::Stream(handle) => handle,
            Found::SoftDeleted => {
                return Err(Reply::refuse(
                    StatusCode::CONFLICT,
                    format!("the stream to fork from, {}, was deleted", ask.source),
                ));
            }
            // A recording made over gRPC cannot be a source: it has no row to count forks in.
            Found::Recording | Found::Missing => return Err(not_found()),
        };
        let mut source = handle.state.lock().await;
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
            .sub_offset(&ask.source, &source, anchor, ask.sub_offset)
            .await?;
        let generation = self.generation_of(&ask.source).await?;
        row.fork = Some(ForkOf {
            source: ask.source.key(),
            source_generation: generation,
            offset,
            anchor,
            sub_offset: ask.sub_offset,
        });
        source.row.forks += 1;
        let store = self.recorder.recordings().store();
        store
            .put_stream_row(ask.source.key(), Some(&source.row))
            .await
            .map_err(failed)?;
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
            None => Err(Reply::refuse(
                StatusCode::NOT_FOUND,
                format!("the stream to fork from, {id}, does not exist"),
            )),
        }
    }

    /// Uncounts a fork whose create failed.
    async fn release_source(&self, source: u128) {
        let handle = self
            .streams
            .all()
            .into_iter()
            .find(|h| h.id.key() == source);
        if let Some(handle) = handle {
            let mut state = handle.state.lock().await;
            state.row.forks = state.row.forks.saturating_sub(1);
            let store = self.recorder.recordings().store();
            if let Err(err) = store.put_stream_row(source, Some(&state.row)).await {
                tracing::warn!(error = %err, "could not uncount a failed fork");
            }
        }
    }

    /// POST: appends, closes, or both at once.
    pub(crate) async fn append(&self, id: &ConversationId, ask: Append) -> Replied {
        let handle = match self.streams.find(id).await.map_err(failed)? {
            Found::Stream(handle) => handle,
            Found::Recording => {
                return Err(Reply::refuse(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "this recording is written by its gRPC producer; it is read-only here",
                )
                .header(http::header::ALLOW, "GET, HEAD, DELETE"));
            }
            Found::SoftDeleted => return Err(gone()),
            Found::Missing => return Err(missing(id)),
        };
        if ask.body.is_empty() && !ask.closing {
            return Err(Reply::refuse(
                StatusCode::BAD_REQUEST,
                "an append needs a body (or Stream-Closed: true to close the stream)",
            ));
        }
        let mut state = handle.state.lock().await;
        state.refresh();
        if state.gone {
            return Err(missing(id));
        }
        state.touched_ms = self.streams.now_ms();
        if state.closed {
            return closed_reply(&state, &ask);
        }
        if !ask.body.is_empty() {
            match &ask.content_type {
                None => {
                    return Err(Reply::refuse(
                        StatusCode::BAD_REQUEST,
                        "an append needs a Content-Type",
                    ));
                }
                Some(t) if !same_type(t, &state.row.content_type) => {
                    return Err(Reply::refuse(
                        StatusCode::CONFLICT,
                        format!(
                            "the stream's content type is {}; got {t}",
                            state.row.content_type
                        ),
                    ));
                }
                Some(_) => {}
            }
        }
        let mut row = state.row.clone();
        let mut accepted = None;
        if let Some(stamp) = &ask.producer {
            match producer::judge(row.producers.get(&stamp.id).copied(), stamp) {
                Verdict::Accept { next } => {
                    row.producers.insert(stamp.id.clone(), next);
                    accepted = Some(next);
                }
                Verdict::Duplicate => {
                    let current = row.producers[&stamp.id];
                    return Ok(Reply::new(StatusCode::NO_CONTENT)
                        .next_offset(state.tail())
                        .named(PRODUCER_EPOCH, stamp.epoch.to_string())
                        .named(PRODUCER_SEQ, current.seq.to_string()));
                }
                Verdict::StaleEpoch { current } => {
                    return Err(Reply::refuse(
                        StatusCode::FORBIDDEN,
                        format!(
                            "producer epoch {} is stale; the current epoch is {current}",
                            stamp.epoch
                        ),
                    )
                    .named(PRODUCER_EPOCH, current.to_string()));
                }
                Verdict::EpochMustStartAtZero => {
                    return Err(Reply::refuse(
                        StatusCode::BAD_REQUEST,
                        "a new producer epoch must start at Producer-Seq 0",
                    ));
                }
                Verdict::Gap { expected, received } => {
                    return Err(Reply::refuse(
                        StatusCode::CONFLICT,
                        format!("Producer-Seq {received} skips ahead; expected {expected}"),
                    )
                    .named(PRODUCER_EXPECTED_SEQ, expected.to_string())
                    .named(PRODUCER_RECEIVED_SEQ, received.to_string()));
                }
            }
        }
        if let Some(seq) = &ask.stream_seq {
            if row.last_stream_seq.as_ref().is_some_and(|last| seq <= last) {
                return Err(Reply::refuse(
                    StatusCode::CONFLICT,
                    format!("Stream-Seq {seq:?} does not follow the last one"),
                ));
            }
            row.last_stream_seq = Some(seq.clone());
        }
        let chunks = chunks_of(&row.content_type, ask.body.clone(), false)?;
        if ask.closing {
            row.closed_by = ask.producer.clone();
        }
        let own: u64 = chunks.iter().map(|c| c.len() as u64).sum();
        let end = ask.closing.then_some(Status::Completed);
        let row_changed = row != state.row;
        let Some(writer) = state.writer.as_mut() else {
            return closed_reply(&state, &ask);
        };
        let batch = writer
            .write_batch(chunks, row_changed.then(|| row.clone()), end)
            .await
            .map_err(failed)?;
        state.row = row;
        state.own += own;
        if ask.closing {
            state.closed = true;
            state.writer = None;
        }
        let tail = state.tail();
        let closed = state.closed;
        // Committed in queue order: the lock can go before the wait.
        drop(state);
        batch.wait().await.map_err(failed)?;
        // 200 tells an idempotent producer its data is new; a close-only request has none.
        let mut reply = match accepted {
            Some(_) if own > 0 => Reply::new(StatusCode::OK),
            _ => Reply::new(StatusCode::NO_CONTENT),
        };
        if let Some(next) = accepted {
            reply = reply
                .named(PRODUCER_EPOCH, next.epoch.to_string())
                .named(PRODUCER_SEQ, next.seq.to_string());
        }
        Ok(reply.next_offset(tail).closed(closed))
    }

    /// DELETE.
    pub(crate) async fn delete(&self, id: &ConversationId) -> Replied {
        match self.streams.find(id).await.map_err(failed)? {
            Found::Stream(handle) => {
                self.streams.remove(&handle, false).await.map_err(failed)?;
            }
            Found::Recording => {
                self.recorder.delete(id).await.map_err(failed)?;
            }
            Found::SoftDeleted => return Err(gone()),
            Found::Missing => return Err(missing(id)),
        }
        tracing::info!(stream = %id, "stream deleted");
        Ok(Reply::new(StatusCode::NO_CONTENT))
    }
}

/// An append or close to a closed stream.
fn closed_reply(state: &State, ask: &Append) -> Replied {
    let same_closer = ask.producer.is_some() && ask.producer == state.row.closed_by;
    if (ask.body.is_empty() && ask.closing) || same_closer {
        let mut reply = Reply::new(StatusCode::NO_CONTENT);
        if let Some(stamp) = ask.producer.as_ref().filter(|_| same_closer) {
            reply = reply
                .named(PRODUCER_EPOCH, stamp.epoch.to_string())
                .named(PRODUCER_SEQ, stamp.seq.to_string());
        }
        return Ok(reply.next_offset(state.tail()).closed(true));
    }
    Err(Reply::refuse(StatusCode::CONFLICT, "the stream is closed")
        .next_offset(state.tail())
        .closed(true))
}

pub(crate) fn gone() -> Reply {
    Reply::refuse(StatusCode::GONE, "the stream was deleted")
}

pub(crate) fn missing(id: &ConversationId) -> Reply {
    Reply::refuse(StatusCode::NOT_FOUND, format!("no stream at {id}"))
}
