//! The gRPC face: thin adapters from the two Memory Service contracts to the [`Recorder`]. They
//! decode ids, check each call's credentials against the access rules, map errors to statuses
//! and shape messages; the behaviour lives in the recorder.
//! [`routes`] assembles them with health and reflection.

pub(crate) mod all_instances;
mod cluster_status;
mod coalesce;
mod deadline;
mod gated;
mod instances;
mod recorder;
mod recordings;
mod resumer;
mod routes;
mod session;
mod telemetry;

pub use cluster_status::ClusterService;
pub use coalesce::CoalescedWrites;
pub use deadline::DeadlineLayer;
pub use recorder::RecorderService;
pub use recordings::RecordingsService;
pub use resumer::ResumerService;
pub use routes::{Health, Lifecycle, routes};
pub use tapedeck_core::error::{REASON_METADATA, REDIRECT_METADATA};
pub use telemetry::TelemetryLayer;

use std::pin::Pin;

use futures::Stream;
use tokio_util::sync::CancellationToken;
use tonic::metadata::MetadataMap;
use tonic::{Code, Status, Streaming};

use crate::access::{Guard, Principal};
use crate::error::Error;
use crate::id::ConversationId;
use crate::recorder::{Piece, Recorder, Replay, StartOptions};

/// A replay's messages, pulled by the transport one at a time.
pub type ReplayStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// Trailer naming how the replayed recording ended.
pub const STATUS_TRAILER: &str = "tapedeck-status";
/// Trailer giving the byte offset after the last byte sent.
pub const OFFSET_TRAILER: &str = "tapedeck-offset";

/// Parses the conversation id of a request; an empty one is reported as missing.
fn parse_id(raw: &[u8]) -> Result<ConversationId, Status> {
    if raw.is_empty() {
        return Err(Error::MissingConversationId.into());
    }
    Ok(ConversationId::parse(raw)?)
}

/// The status for a request stream that failed to deliver its next message. The transport
/// refuses a message over its size limit with `OUT_OF_RANGE`; to the producer that is a chunk
/// over its limit, which the behaviour notes answer with `RESOURCE_EXHAUSTED`.
fn incoming_error(status: Status) -> Status {
    if status.code() == Code::OutOfRange {
        return Status::resource_exhausted(format!(
            "request message too large ({}); keep chunks within --max-chunk-bytes",
            status.message()
        ));
    }
    status
}

/// The principal of a call, from its `x-api-key` and `authorization: Bearer …` metadata.
/// A refusal is logged once, with its reason (never the credential).
fn principal(guard: &Guard, metadata: &MetadataMap) -> Result<Principal, Status> {
    let authenticated =
        credentials(metadata).and_then(|(api_key, bearer)| guard.authenticate(api_key, bearer));
    authenticated.map_err(|err| {
        metrics::counter!(crate::metrics::AUTH_REFUSALS, "reason" => "unauthenticated")
            .increment(1);
        tracing::warn!(error = %err, "call refused");
        err.into()
    })
}

/// The API key and bearer token a call sent, if any.
fn credentials(metadata: &MetadataMap) -> Result<(Option<&str>, Option<&str>), Error> {
    let text = |name| match metadata.get(name) {
        None => Ok(None),
        Some(value) => value
            .to_str()
            .map(Some)
            .map_err(|_| Error::Unauthenticated {
                reason: format!("the {name} metadata is not ASCII text"),
            }),
    };
    let bearer = match text("authorization")? {
        None => None,
        Some(value) => match value.split_once(' ') {
            Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => Some(token.trim()),
            _ => {
                return Err(Error::Unauthenticated {
                    reason: "authorization must be `Bearer <token>`".into(),
                });
            }
        },
    };
    Ok((text("x-api-key")?, bearer))
}

/// The first message of a producer's stream, unless the server begins to shut down first.
async fn first_message<T>(
    stream: &mut Streaming<T>,
    stop: &CancellationToken,
) -> Result<T, Status> {
    tokio::select! {
        message = stream.message() => match message.map_err(incoming_error)? {
            Some(first) => Ok(first),
            None => Err(Error::MissingConversationId.into()),
        },
        () = stop.cancelled() => Err(Error::ShuttingDown.into()),
    }
}

/// A resume offset from the wire, which carries it signed.
fn parse_offset(raw: i64) -> Result<u64, Status> {
    u64::try_from(raw).map_err(|_| Error::NegativeOffset { offset: raw }.into())
}

/// How a producer's first message opens its session: a resume when it carries
/// `resume_from_offset`, and its own retention when `retention_seconds` is not 0.
fn start_options(
    resume_from_offset: Option<i64>,
    retention_seconds: u64,
) -> Result<StartOptions, Status> {
    Ok(StartOptions {
        resume_from: resume_from_offset.map(parse_offset).transpose()?,
        retention: (retention_seconds > 0)
            .then(|| std::time::Duration::from_secs(retention_seconds)),
    })
}

/// What a replay call asks for.
#[derive(Clone, Copy)]
struct ReplayOf<'a> {
    id: &'a ConversationId,
    offset: u64,
    chunked: bool,
}

/// Size of a replay's first message; each next one is twice as large, up to 64 KiB. A client
/// that reads gets full-sized messages after five; one that never reads pins only this much.
const FIRST_MESSAGE_BYTES: usize = 4 * 1024;

/// Opens a replay as a stream of messages made by `message`, ending with an OK status that
/// carries the `tapedeck-*` trailers; or, once `stop` is cancelled (the server shuts down),
/// with UNAVAILABLE and the offset to replay again from. The caller has authorized the replay.
///
/// Nothing is read ahead: the next piece is read when the transport asks for it, which it does
/// once the previous one is on its way to the client. Together with the small first message
/// this bounds what a replay nobody reads holds in memory to a few KiB, however many there are;
/// a replay the client abandons is dropped with its stream.
async fn stream_replay<T: Send + 'static>(
    recorder: &Recorder,
    of: ReplayOf<'_>,
    stop: &CancellationToken,
    message: fn(Piece) -> T,
) -> Result<ReplayStream<T>, Status> {
    let mut replay = recorder.replay(of.id, of.offset).await?;
    if of.chunked {
        replay = replay.chunked();
    }
    let stop = stop.clone();
    let stream = futures::stream::unfold(Some((replay, FIRST_MESSAGE_BYTES)), move |state| {
        let stop = stop.clone();
        async move {
            let (mut replay, size) = state?;
            // Lets the encoder send what it holds before this piece is read: it would otherwise
            // keep pulling pieces until it has 32 KiB to send.
            tokio::task::yield_now().await;
            let next = tokio::select! {
                next = replay.next_up_to(size) => next,
                () = stop.cancelled() => return Some((Err(shutdown_status(&replay)), None)),
            };
            Some(match next {
                Ok(Some(piece)) => {
                    let next_size = (size * 2).min(crate::recorder::MAX_MESSAGE_BYTES);
                    (Ok(message(piece)), Some((replay, next_size)))
                }
                Ok(None) => (Err(end_status(&replay)), None),
                Err(err) => (Err(Status::from(err)), None),
            })
        }
    });
    Ok(Box::pin(stream))
}

/// Memory Service's answer to a replay of a recording that is not there (never made here,
/// collected, or deleted): an empty stream that ends with OK, as its reference server answers
/// (`ResponseRecorderServer.Replay`), so its clients' resume endpoints do not fail. The reason
/// travels in the `tapedeck-reason` trailer, for a client that cares to tell.
///
/// Applied after a node of a cluster has caught up with its leader, which it does on the
/// NOT_FOUND this turns into a stream.
fn empty_if_absent<T: Send + 'static>(
    opened: Result<ReplayStream<T>, Status>,
) -> Result<ReplayStream<T>, Status> {
    match opened {
        Err(status) if status.code() == Code::NotFound => {
            let Some(reason) = status.metadata().get(REASON_METADATA).cloned() else {
                return Err(status);
            };
            let mut trailers = MetadataMap::new();
            trailers.insert(REASON_METADATA, reason);
            let end = Status::with_metadata(Code::Ok, "", trailers);
            Ok(Box::pin(futures::stream::iter([Err(end)])))
        }
        opened => opened,
    }
}

/// The UNAVAILABLE status that ends a replay at shutdown, with the offset to replay from.
fn shutdown_status(replay: &Replay) -> Status {
    let mut trailers = MetadataMap::new();
    trailers.insert(OFFSET_TRAILER, replay.offset().into());
    let message = format!(
        "the server is shutting down; replay again from offset {}",
        replay.offset()
    );
    Status::with_metadata(Code::Unavailable, message, trailers)
}

/// The OK status that ends a replay, with its terminal state in trailers.
fn end_status(replay: &Replay) -> Status {
    let mut trailers = MetadataMap::new();
    if let Some(status) = replay.ending() {
        trailers.insert(
            STATUS_TRAILER,
            tonic::metadata::MetadataValue::from_static(status.as_str()),
        );
    }
    trailers.insert(OFFSET_TRAILER, replay.offset().into());
    Status::with_metadata(Code::Ok, "", trailers)
}

/// Runs `read`; on a node of `cluster` that does not lead, a `NOT_FOUND` may be a recording the
/// leader committed that this node has not applied yet (its client made it through another
/// node a moment ago): the node catches up with the leader and runs `read` once more.
async fn read_caught_up<T, F, Fut>(
    cluster: Option<&crate::cluster::Cluster>,
    read: F,
) -> Result<T, tonic::Status>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T, tonic::Status>>,
{
    match read().await {
        Err(status) if status.code() == tonic::Code::NotFound => match cluster {
            Some(cluster) if !cluster.leads() => {
                cluster.catch_up().await;
                read().await
            }
            _ => Err(status),
        },
        read => read,
    }
}
