//! The HTTP face: the Durable Streams protocol at `/v1/stream/{path}`, on the same recorder
//! and store as the gRPC APIs. A conversation id in text form is a stream path.
//!
//! The protocol's rules (handles, TTL, forks, idempotent producers, soft delete) are the
//! recorder's (`recorder::streams`); this face parses, authorizes, calls it, and maps each
//! outcome to a response.
//!
//! # Layout
//! - this file: [`HttpFace`], the face's state, and [`serve`], which runs it.
//! - `router`: the routes, and the layers every response passes through (CORS, security
//!   headers, the body limit, telemetry).
//! - `dispatch`: a request on a stream path: its query, its body, authorized, handed to
//!   `write` or `read`.
//! - `write`: create, append, close, delete, each outcome mapped to a reply.
//! - `read`: catch-up and long-poll reads, HEAD; `sse`: SSE; `json`: JSON array framing.
//! - `read_room`: how much one catch-up response carries, within the face's read budget.
//! - `request` / `reply`: headers in, headers out; `offset`, `cursor`: their wire forms.
//! - `failure`: tapedeck's errors as HTTP statuses (the one mapping; gRPC's is `grpc::status`).
//! - `forward`: on a node of a cluster that does not lead, writes run by the leader's face.
//! - `elsewhere`: with several instances on one Redis, requests about a stream another
//!   instance holds passed to its face.
//! - `owner`: Get, cancel and delete made where a recording is held.
//! - `console`: the operators' page at `/console/`, and the JSON it reads.
//! - `stop`: `POST /v1/stop/{path}`, a reader's stop button (cancel) outside the protocol.
//! - `probes`: `GET /healthz` and `GET /readyz`.
//! - `telemetry`: a log line and metrics per request, and per SSE or long-poll reader.
//! - `access`: the same credentials as gRPC, from `Authorization` or a `token` parameter.
//! - `connections`: accepting connections within `--http-max-connections` and
//!   `--http-request-timeout`, and handing each to whoever serves its first request: `head`
//!   reads it; an SSE read is served on its own socket (`reader_socket`), anything else by
//!   hyper (`prefixed` gives it the bytes read already).
mod access;
mod connections;
mod console;
mod cors;
mod cursor;
mod dispatch;
mod elsewhere;
pub(crate) mod failure;
mod forward;
mod head;
mod json;
mod offset;
mod owner;
mod prefix;
mod prefixed;
mod probes;
mod read;
mod read_room;
mod reader_socket;
mod reply;
mod request;
mod router;
mod sse;
mod stop;
mod telemetry;
mod whole_characters;
mod write;

use std::future::Future;
use std::sync::Arc;

use tokio::net::TcpListener;

use crate::access::Guard;
use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::locator::Locator;
use crate::readiness::Readiness;
use crate::recorder::Recorder;
use crate::recorder::streams::Streams;

pub use connections::Bounds;
pub use prefix::{DEFAULT_STREAM_PREFIX, StreamPrefix};

/// The HTTP face's settings (its address is the server's).
#[derive(Debug, Clone, Default)]
pub struct HttpSettings {
    /// How the face bounds its connections and the time a request takes to arrive.
    pub bounds: Bounds,
    /// Where the face serves streams (`--http-path-prefix`). Default `/v1/stream`.
    pub path_prefix: StreamPrefix,
}

/// Largest request body accepted, in bytes.
const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// The HTTP face's state, shared by every request.
pub struct HttpFace {
    recorder: Recorder,
    streams: Arc<Streams>,
    guard: Guard,
    bounds: Bounds,
    /// Where streams are served (`--http-path-prefix`).
    prefix: StreamPrefix,
    /// Slow bodies cut, for a rate-limited warning.
    slow_bodies: connections::Warning,
    /// The cluster this node is part of, if any: its writes are made by the leader.
    cluster: Option<Cluster>,
    /// With several instances on one Redis: where streams other instances hold are, and the
    /// client that passes requests about them on (see `elsewhere`).
    locator: Option<Locator>,
    passing: elsewhere::Passing,
    /// The budget for large catch-up responses.
    read_room: read_room::CatchUpBudget,
    /// What the server around the face tells it.
    host: FaceHost,
}

/// What the server around the HTTP face tells it.
#[derive(Clone, Debug, Default)]
pub struct FaceHost {
    /// Whether the server takes traffic (`/readyz`).
    pub readiness: Readiness,
    /// Where the server's gRPC listens: named to a gRPC client that dialled this face.
    pub grpc_address: Option<std::net::SocketAddr>,
}

impl HttpFace {
    /// A face over `recorder`, admitting the callers `guard` does, within `bounds`, serving
    /// streams under `prefix`; on a node of `cluster`, if given; passing requests about
    /// streams other instances hold to them, with a `locator`; in the server `host` describes.
    pub fn new(
        recorder: Recorder,
        guard: Guard,
        bounds: Bounds,
        prefix: StreamPrefix,
        cluster: Option<Cluster>,
        locator: Option<Locator>,
        host: FaceHost,
    ) -> Arc<Self> {
        Arc::new(Self {
            streams: Arc::new(Streams::new(recorder.clone())),
            recorder,
            guard,
            bounds,
            prefix,
            slow_bodies: connections::Warning::default(),
            cluster,
            locator,
            passing: elsewhere::passing(),
            read_room: Default::default(),
            host,
        })
    }

    /// The streams this face serves (a node of a cluster takes them over when it comes to
    /// lead, and lets them go when it stops).
    pub fn streams(&self) -> &Arc<Streams> {
        &self.streams
    }
}

/// Serves the HTTP face on `listener` until `shutdown` resolves: takes over the streams the
/// last run left open, expires streams every `sweep_interval`, and lets go of open streams
/// when the recorder stops.
///
/// Fails when the listener's address cannot be read, or the open streams cannot be read.
pub async fn serve(
    listener: TcpListener,
    face: Arc<HttpFace>,
    sweep_interval: std::time::Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let adopted = face.streams.adopt_open().await?;
    if adopted > 0 {
        tracing::info!(streams = adopted, "took over open streams");
    }
    let addr = listener.local_addr().map_err(|source| {
        Error::Setup(crate::error::Setup::Listener {
            addr: "the HTTP listener".into(),
            source,
        })
    })?;
    if let Some(cluster) = &face.cluster {
        forward::answer_forwarded(cluster, face.clone());
    }
    tracing::info!(%addr, "HTTP face (Durable Streams) listening");
    let sweeper = tokio::spawn(sweep(face.clone(), sweep_interval));
    let nudging = tokio::spawn(sse::nudge_readers(face.recorder.clone()));
    let releasing = face.clone();
    let release = tokio::spawn(async move {
        releasing.recorder.stopping().cancelled().await;
        releasing.streams.release_all("server shutting down").await;
    });
    connections::serve(
        listener,
        router::router(face.clone()),
        face.bounds,
        shutdown,
    )
    .await;
    sweeper.abort();
    nudging.abort();
    release.abort();
    Ok(())
}

/// Expires streams on a schedule (requests also notice expiry as they come).
async fn sweep(face: Arc<HttpFace>, interval: std::time::Duration) {
    let mut ticker = tokio::time::interval(interval.max(std::time::Duration::from_millis(100)));
    loop {
        ticker.tick().await;
        face.streams.expire().await;
    }
}
