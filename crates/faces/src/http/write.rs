//! Writes: create (PUT, forks included), append and close (POST), delete (DELETE). The
//! recorder's streams decide; here each outcome becomes its status, headers and message.
use http::StatusCode;

use super::HttpFace;
use super::failure::failed;
use super::offset::Offset;
use super::reply::*;
use crate::id::ConversationId;
use crate::recorder::SizeRefused;
use crate::recorder::streams::{
    AppendAsk, AppendRefused, Appended, BodyRefused, CreateAsk, CreateRefused, Created,
    ForkRefused, StreamRefused,
};

/// A create, as its headers and body ask, with what its refusals quote.
pub(crate) struct Create {
    pub(crate) ask: CreateAsk,
    /// The stream's URL, for `Location`.
    pub(crate) location: String,
    /// `Stream-TTL` as sent.
    pub(crate) ttl_text: Option<String>,
    /// `Stream-Expires-At` as sent.
    pub(crate) expires_text: Option<String>,
}

impl HttpFace {
    /// PUT: creates the stream, or answers 200 when it exists as asked, 409 when not.
    pub(crate) async fn create(&self, id: &ConversationId, create: Create) -> Replied {
        let created = self
            .streams
            .create(id, create.ask)
            .await
            .map_err(|refused| create_refused(refused, &create.ttl_text, &create.expires_text))?;
        Ok(match created {
            Created::New {
                content_type,
                tail,
                closed,
            } => Reply::new(StatusCode::CREATED)
                .header(http::header::LOCATION, &create.location)
                .content_type(&content_type)
                .next_offset(tail)
                .closed(closed),
            Created::Exists {
                content_type,
                tail,
                closed,
            } => Reply::new(StatusCode::OK)
                .content_type(&content_type)
                .next_offset(tail)
                .closed(closed),
        })
    }

    /// POST: appends, closes, or both at once.
    pub(crate) async fn append(&self, id: &ConversationId, ask: AppendAsk) -> Replied {
        let appended = self
            .streams
            .append(id, ask)
            .await
            .map_err(|refused| append_refused(refused, id))?;
        Ok(match appended {
            Appended::Written {
                tail,
                closed,
                bytes,
                producer,
            } => {
                // 200 tells an idempotent producer its data is new; a close-only request has
                // none.
                let mut reply = match producer {
                    Some(_) if bytes > 0 => Reply::new(StatusCode::OK),
                    _ => Reply::new(StatusCode::NO_CONTENT),
                };
                if let Some(next) = producer {
                    reply = reply
                        .named(PRODUCER_EPOCH, next.epoch.to_string())
                        .named(PRODUCER_SEQ, next.seq.to_string());
                }
                reply.next_offset(tail).closed(closed)
            }
            Appended::Duplicate { tail, epoch, seq } => Reply::new(StatusCode::NO_CONTENT)
                .next_offset(tail)
                .named(PRODUCER_EPOCH, epoch.to_string())
                .named(PRODUCER_SEQ, seq.to_string()),
            Appended::AlreadyClosed { tail, closer } => {
                let mut reply = Reply::new(StatusCode::NO_CONTENT);
                if let Some(stamp) = closer {
                    reply = reply
                        .named(PRODUCER_EPOCH, stamp.epoch.to_string())
                        .named(PRODUCER_SEQ, stamp.seq.to_string());
                }
                reply.next_offset(tail).closed(true)
            }
        })
    }

    /// DELETE.
    pub(crate) async fn delete(&self, id: &ConversationId) -> Replied {
        self.streams
            .delete(id)
            .await
            .map_err(|refused| stream_refused(refused, id))?;
        Ok(Reply::new(StatusCode::NO_CONTENT))
    }
}

/// The reply to a read or delete that finds no stream.
pub(crate) fn stream_refused(refused: StreamRefused, id: &ConversationId) -> Reply {
    match refused {
        StreamRefused::Missing => missing(id),
        StreamRefused::Gone => gone(),
        StreamRefused::Failed(err) => failed(err),
    }
}

fn create_refused(
    refused: CreateRefused,
    ttl_text: &Option<String>,
    expires_text: &Option<String>,
) -> Reply {
    let bad = |message: String| Reply::refuse(StatusCode::BAD_REQUEST, message);
    match refused {
        CreateRefused::BothLifetimes => {
            bad("send Stream-TTL or Stream-Expires-At, not both".into())
        }
        CreateRefused::TtlTooLong { max_secs } => bad(format!(
            "Stream-TTL {} is over this server's limit of {max_secs} seconds (--max-retention)",
            ttl_text.as_deref().unwrap_or_default()
        )),
        CreateRefused::ExpiresTooLate { max_secs } => bad(format!(
            "Stream-Expires-At {} is more than {max_secs} seconds from now, over this server's limit (--max-retention)",
            expires_text.as_deref().unwrap_or_default()
        )),
        CreateRefused::PathTaken => Reply::refuse(
            StatusCode::CONFLICT,
            "a different stream already exists at this path",
        ),
        CreateRefused::Differs { closed } => Reply::refuse(
            StatusCode::CONFLICT,
            "the stream exists with a different configuration",
        )
        .closed(closed),
        CreateRefused::Fork(refused) => fork_refused(refused),
        CreateRefused::Body(refused) => body_refused(refused),
        CreateRefused::Size(refused) => size_refused(refused),
        CreateRefused::Failed(err) => failed(err),
    }
}

fn fork_refused(refused: ForkRefused) -> Reply {
    match refused {
        ForkRefused::SourceMissing { source } => Reply::refuse(
            StatusCode::NOT_FOUND,
            format!("the stream to fork from, {source}, does not exist"),
        ),
        ForkRefused::SourceDeleted { source } => Reply::refuse(
            StatusCode::CONFLICT,
            format!("the stream to fork from, {source}, was deleted"),
        ),
        ForkRefused::TypeMismatch { source_type, asked } => Reply::refuse(
            StatusCode::CONFLICT,
            format!("a fork has its source's content type, {source_type}; got {asked}"),
        ),
        ForkRefused::OffsetPastTail { offset, tail } => Reply::refuse(
            StatusCode::BAD_REQUEST,
            format!(
                "Stream-Fork-Offset {} is past the source's tail {}",
                Offset(offset),
                Offset(tail)
            ),
        ),
        ForkRefused::SubOffsetPastData => Reply::refuse(
            StatusCode::BAD_REQUEST,
            "Stream-Fork-Sub-Offset names a position past the source's data",
        ),
        ForkRefused::Failed(err) => failed(err),
    }
}

fn append_refused(refused: AppendRefused, id: &ConversationId) -> Reply {
    match refused {
        AppendRefused::ReadOnly => Reply::refuse(
            StatusCode::METHOD_NOT_ALLOWED,
            "this recording is written by its gRPC producer; it is read-only here",
        )
        .header(http::header::ALLOW, "GET, HEAD, DELETE"),
        AppendRefused::Gone => gone(),
        AppendRefused::Missing => missing(id),
        AppendRefused::Empty => Reply::refuse(
            StatusCode::BAD_REQUEST,
            "an append needs a body (or Stream-Closed: true to close the stream)",
        ),
        AppendRefused::Closed { tail, cancelled } => {
            let message = if cancelled {
                "the stream was cancelled (stopped by a reader or an operator); it takes no \
                 more appends"
            } else {
                "the stream is closed"
            };
            Reply::refuse(StatusCode::CONFLICT, message)
                .next_offset(tail)
                .closed(true)
        }
        AppendRefused::NoContentType => {
            Reply::refuse(StatusCode::BAD_REQUEST, "an append needs a Content-Type")
        }
        AppendRefused::ContentTypeMismatch { stream, got } => Reply::refuse(
            StatusCode::CONFLICT,
            format!("the stream's content type is {stream}; got {got}"),
        ),
        AppendRefused::StaleEpoch { sent, current } => Reply::refuse(
            StatusCode::FORBIDDEN,
            format!("producer epoch {sent} is stale; the current epoch is {current}"),
        )
        .named(PRODUCER_EPOCH, current.to_string()),
        AppendRefused::EpochMustStartAtZero => Reply::refuse(
            StatusCode::BAD_REQUEST,
            "a new producer epoch must start at Producer-Seq 0",
        ),
        AppendRefused::Gap { expected, received } => Reply::refuse(
            StatusCode::CONFLICT,
            format!("Producer-Seq {received} skips ahead; expected {expected}"),
        )
        .named(PRODUCER_EXPECTED_SEQ, expected.to_string())
        .named(PRODUCER_RECEIVED_SEQ, received.to_string()),
        AppendRefused::StreamSeqBehind { seq } => Reply::refuse(
            StatusCode::CONFLICT,
            format!("Stream-Seq {seq:?} does not follow the last one"),
        ),
        AppendRefused::Body(refused) => body_refused(refused),
        AppendRefused::Size(refused) => size_refused(refused),
        AppendRefused::Failed(err) => failed(err),
    }
}

fn body_refused(refused: BodyRefused) -> Reply {
    let message = match refused {
        BodyRefused::InvalidJson(why) => format!("the body is not valid JSON: {why}"),
        BodyRefused::EmptyJsonArray => {
            "an empty JSON array appends nothing; send at least one message".into()
        }
    };
    Reply::refuse(StatusCode::BAD_REQUEST, message)
}

/// 413, naming the limit: as the producers' limits on gRPC.
fn size_refused(refused: SizeRefused) -> Reply {
    let message = match refused {
        SizeRefused::Chunk { size, max } => format!(
            "a message of {size} bytes is over this server's limit of {max} bytes (--max-chunk-bytes)"
        ),
        SizeRefused::Recording { size, max } => format!(
            "the stream would hold {size} bytes, over this server's limit of {max} bytes (--max-recording-bytes)"
        ),
    };
    Reply::refuse(StatusCode::PAYLOAD_TOO_LARGE, message)
}

pub(crate) fn gone() -> Reply {
    Reply::refuse(StatusCode::GONE, "the stream was deleted")
}

pub(crate) fn missing(id: &ConversationId) -> Reply {
    Reply::refuse(StatusCode::NOT_FOUND, format!("no stream at {id}"))
}
