//! Writes: create (PUT, forks included), append and close (POST), delete (DELETE). Every
//! write to a stream happens under its handle's lock, and is answered only once committed.
use std::sync::Arc;

use bytes::Bytes;
use http::StatusCode;

use super::HttpFace;
pub(crate) use super::failure::failed;
use super::fork::ForkAsk;
use super::json::{self, JsonRefusal};
use super::producer::{self, Verdict};
use super::reply::*;
use super::streams::{Found, Handle, State};
use crate::error::Error;
use crate::id::ConversationId;
use crate::recorder::Status;
use crate::store::{ProducerStamp, StreamRow};

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

/// An append (or close), as its headers and body ask.
pub(crate) struct Append {
    pub(crate) content_type: Option<String>,
    pub(crate) body: Bytes,
    pub(crate) closing: bool,
    pub(crate) stream_seq: Option<String>,
    pub(crate) producer: Option<ProducerStamp>,
}

pub(crate) fn same_type(a: &str, b: &str) -> bool {
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

impl HttpFace {
    /// Refuses `chunks` over `--max-chunk-bytes` each, or that would take a recording that
    /// holds `own` bytes past `--max-recording-bytes`: 413, as the producers' limits on gRPC.
    fn check_size(&self, chunks: &[Bytes], own: u64) -> Result<(), Reply> {
        let limits = self.recorder.limits();
        if let Some(big) = chunks.iter().find(|c| c.len() > limits.max_chunk_bytes) {
            return Err(Reply::refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "a message of {} bytes is over this server's limit of {} bytes (--max-chunk-bytes)",
                    big.len(),
                    limits.max_chunk_bytes
                ),
            ));
        }
        let adding: u64 = chunks.iter().map(|c| c.len() as u64).sum();
        if own + adding > limits.max_recording_bytes {
            return Err(Reply::refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "the stream would hold {} bytes, over this server's limit of {} bytes (--max-recording-bytes)",
                    own + adding,
                    limits.max_recording_bytes
                ),
            ));
        }
        Ok(())
    }
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
        // A fork holds its source's lock until its create is committed: the source's row
        // (and its fork count, which the store adds in that commit) cannot change meanwhile.
        // Lock order, to stay free of deadlocks: a stream's lock is taken before its
        // ancestors' (here the source's, then whatever reading the source locks), never after.
        let source = match &ask.fork {
            Some(fork) => Some(self.fork_source(fork).await?),
            None => None,
        };
        let mut source_state = match &source {
            Some(handle) => Some(handle.state.lock().await),
            None => None,
        };
        if let (Some(fork), Some(state)) = (&ask.fork, source_state.as_deref_mut()) {
            self.fork_from(fork, ask.content_type.as_deref(), state, &mut row)
                .await?;
        }
        let chunks = chunks_of(&row.content_type, ask.body.clone(), true)?;
        self.check_size(&chunks, 0)?;
        let retention_ms = ask.ttl_secs.map(|ttl| ttl.saturating_mul(1000));
        let recordings = self.recorder.recordings();
        let writer = recordings
            .start_with_row(id, retention_ms, Some(&row))
            .await;
        let mut writer = match (writer, &ask.fork) {
            (Ok(writer), _) => writer,
            // The source went in the meantime (a gRPC recording replaced it, say).
            (Err(Error::RecordingNotFound { .. }), Some(fork)) => {
                return Err(super::fork::source_missing(&fork.source));
            }
            (Err(err), _) => return Err(failed(err)),
        };
        if let Some(state) = source_state.as_deref_mut() {
            // As the store counted it: the source's next row write carries the count.
            state.row.forks += 1;
        }
        drop(source_state);
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
        self.check_size(&chunks, state.own)?;
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
