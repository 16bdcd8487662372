//! The HTTP face: the Durable Streams protocol at `/v1/stream/{path}`, on the same recorder
//! and store as the gRPC APIs. A conversation id in text form is a stream path.
//!
//! The protocol's rules (handles, TTL, forks, idempotent producers, soft delete) are the
//! recorder's (`recorder::streams`); this face parses, authorizes, calls it, and maps each
//! outcome to a response.
//!
//! # Layout
//! - `write`: create, append, close, delete, each outcome mapped to a reply.
//! - `read`: catch-up and long-poll reads, HEAD; `sse`: SSE; `json`: JSON array framing.
//! - `request` / `reply`: headers in, headers out; `offset`, `cursor`: their wire forms.
//! - `failure`: tapedeck's errors as HTTP statuses (the one mapping; gRPC's is `grpc::status`).
//! - `forward`: on a node of a cluster that does not lead, writes run by the leader's face.
//! - `elsewhere`: with several instances on one Redis, requests about a stream another
//!   instance holds passed to its face.
//! - `owner`: Get, cancel and delete made where a recording is held.
//! - `console`: the operators' page at `/console/`, and the JSON it reads.
//! - `stop`: `POST /v1/stop/{path}`, a reader's stop button (cancel) outside the protocol.
//! - `telemetry`: a log line and metrics per request, and per SSE or long-poll reader.
//! - `access`: the same credentials as gRPC, from `Authorization` or a `token` parameter.
//! - `connections`: accepting connections within `--http-max-connections` and
//!   `--http-request-timeout`.
mod access;
mod connections;
mod console;
mod cursor;
mod elsewhere;
pub(crate) mod failure;
mod forward;
mod json;
mod offset;
mod owner;
mod prefix;
mod read;
mod reply;
mod request;
mod sse;
mod stop;
mod telemetry;
mod write;

use std::future::Future;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, Method, StatusCode};
use tokio::net::TcpListener;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tracing::Instrument;

use crate::access::{Guard, Operation};
use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::id::ConversationId;
use crate::locator::Locator;
use crate::recorder::Recorder;
use crate::recorder::streams::{AppendAsk, CreateAsk, ForkAsk, Streams};
use offset::ReadFrom;
use reply::{Replied, Reply};

pub use connections::Bounds;
pub use prefix::{DEFAULT_STREAM_PREFIX, StreamPrefix};

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
}

impl HttpFace {
    /// A face over `recorder`, admitting the callers `guard` does, within `bounds`, serving
    /// streams under `prefix`; on a node of `cluster`, if given; passing requests about
    /// streams other instances hold to them, with a `locator`.
    pub fn new(
        recorder: Recorder,
        guard: Guard,
        bounds: Bounds,
        prefix: StreamPrefix,
        cluster: Option<Cluster>,
        locator: Option<Locator>,
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
    let addr = listener.local_addr().map_err(|source| Error::Listener {
        addr: "the HTTP listener".into(),
        source,
    })?;
    if let Some(cluster) = &face.cluster {
        forward::answer_forwarded(cluster, face.clone());
    }
    tracing::info!(%addr, "HTTP face (Durable Streams) listening");
    let sweeper = tokio::spawn(sweep(face.clone(), sweep_interval));
    let releasing = face.clone();
    let release = tokio::spawn(async move {
        releasing.recorder.stopping().cancelled().await;
        releasing.streams.release_all("server shutting down").await;
    });
    connections::serve(listener, router(face.clone()), face.bounds, shutdown).await;
    sweeper.abort();
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

/// The face's routes, without the layers every response passes through.
fn routes(face: Arc<HttpFace>) -> Router {
    let streams = format!("{}/{{*path}}", face.prefix);
    Router::new()
        .route(&streams, axum::routing::any(dispatch))
        .route("/v1/stop/{*path}", axum::routing::post(stop::stop))
        .merge(console::routes(&face.prefix))
        .fallback(not_a_stream)
        .with_state(face)
}

fn router(face: Arc<HttpFace>) -> Router {
    let exposed: Vec<http::HeaderName> = reply::EXPOSED
        .iter()
        .map(|h| http::HeaderName::from_static(h))
        .collect();
    let allowed: Vec<http::HeaderName> = reply::READ_FROM_REQUESTS
        .iter()
        .map(|h| http::HeaderName::from_static(h))
        .collect();
    let cors = CorsLayer::new()
        .allow_origin(AllowOrigin::any())
        .allow_methods([
            Method::GET,
            Method::HEAD,
            Method::POST,
            Method::PUT,
            Method::DELETE,
            Method::OPTIONS,
        ])
        .allow_headers(allowed)
        .expose_headers(exposed);
    routes(face.clone())
        .layer(axum::middleware::map_response(security_headers))
        .layer(cors)
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn_with_state(
            face.prefix.clone(),
            telemetry::observe,
        ))
}

/// Headers every response carries, refusals included.
async fn security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        "cross-origin-resource-policy",
        HeaderValue::from_static("cross-origin"),
    );
    response
}

async fn not_a_stream(State(face): State<Arc<HttpFace>>) -> Response {
    Reply::refuse(
        StatusCode::NOT_FOUND,
        format!("streams are served under {}/{{path}}", face.prefix),
    )
    .into_response()
}

/// The query parameters the protocol uses; each at most once.
#[derive(Default)]
struct Query {
    offset: Option<String>,
    live: Option<String>,
    cursor: Option<String>,
    token: Option<String>,
}

impl Query {
    fn parse(raw: Option<&str>) -> std::result::Result<Query, Reply> {
        let mut query = Query::default();
        for (name, value) in form_urlencoded::parse(raw.unwrap_or("").as_bytes()) {
            let slot = match &*name {
                "offset" => &mut query.offset,
                "live" => &mut query.live,
                "cursor" => &mut query.cursor,
                "token" => &mut query.token,
                _ => continue,
            };
            if slot.replace(value.into_owned()).is_some() {
                return Err(Reply::refuse(
                    StatusCode::BAD_REQUEST,
                    format!("query parameter {name} is given more than once"),
                ));
            }
        }
        Ok(query)
    }
}

async fn dispatch(
    State(face): State<Arc<HttpFace>>,
    Path(path): Path<String>,
    request: Request,
) -> Response {
    // Every log line of the request, a 500's included, names what was being done.
    let span = tracing::error_span!("request", method = %request.method(), path = %path);
    if let Some(cluster) = face.forwards(&request) {
        return face.forward(cluster, request).instrument(span).await;
    }
    if let Some(finding) = face.held_elsewhere(&path, &request)
        && let Some(owner) = finding.await
    {
        return face.pass(&owner, request).instrument(span).await;
    }
    match face.handle(path, request).instrument(span).await {
        Ok(reply) | Err(reply) => reply.into_response(),
    }
}

impl HttpFace {
    async fn handle(&self, path: String, request: Request) -> Replied {
        let id = ConversationId::parse(path.as_bytes()).map_err(|err| {
            Reply::refuse(StatusCode::BAD_REQUEST, format!("bad stream path: {err}"))
        })?;
        let query = Query::parse(request.uri().query())?;
        let (parts, body) = request.into_parts();
        let headers = parts.headers;
        let principal = access::principal(&self.guard, &headers, query.token.as_deref())?;
        match parts.method {
            Method::GET | Method::HEAD => {
                access::authorize(&principal, Operation::Replay, &id)?;
                if parts.method == Method::HEAD {
                    return self.head(&id).await;
                }
                self.get(&id, &query, &headers).await
            }
            Method::PUT => {
                access::authorize(&principal, Operation::Record, &id)?;
                let fork = self.fork_ask(&headers)?;
                if let Some(fork) = &fork {
                    access::authorize(&principal, Operation::Replay, &fork.source)?;
                }
                let text = |name| request::text(&headers, name).map(|v| v.map(str::to_string));
                let create = write::Create {
                    ask: CreateAsk {
                        content_type: request::content_type(&headers)?,
                        ttl_secs: request::ttl(&headers)?,
                        expires_at_ms: request::expires_at(&headers)?,
                        closed: request::closing(&headers),
                        body: self.read_body(body).await?,
                        fork,
                    },
                    location: location(&headers, &parts.uri),
                    ttl_text: text(reply::STREAM_TTL)?,
                    expires_text: text(reply::STREAM_EXPIRES_AT)?,
                };
                self.create(&id, create).await
            }
            Method::POST => {
                access::authorize(&principal, Operation::Record, &id)?;
                let ask = AppendAsk {
                    content_type: request::content_type(&headers)?,
                    closing: request::closing(&headers),
                    stream_seq: request::text(&headers, reply::STREAM_SEQ)?.map(str::to_string),
                    producer: request::producer(&headers)?,
                    body: self.read_body(body).await?,
                };
                self.append(&id, ask).await
            }
            Method::DELETE => {
                access::authorize(&principal, Operation::Delete, &id)?;
                self.delete(&id).await
            }
            _ => Err(Reply::refuse(
                StatusCode::METHOD_NOT_ALLOWED,
                "streams take GET, HEAD, PUT, POST and DELETE",
            )
            .header(http::header::ALLOW, "GET, HEAD, PUT, POST, DELETE, OPTIONS")),
        }
    }

    async fn get(&self, id: &ConversationId, query: &Query, headers: &http::HeaderMap) -> Replied {
        let from = ReadFrom::parse(query.offset.as_deref()).ok_or_else(|| {
            Reply::refuse(
                StatusCode::BAD_REQUEST,
                "offset must be -1, now, or a Stream-Next-Offset this server gave",
            )
        })?;
        let cursor = query.cursor.as_deref();
        match query.live.as_deref() {
            None => self.read(id, from, false, cursor, headers).await,
            Some(live) if query.offset.is_none() => Err(Reply::refuse(
                StatusCode::BAD_REQUEST,
                format!("live={live} needs an offset (-1 for the start)"),
            )),
            Some("long-poll") => self.read(id, from, true, cursor, headers).await,
            Some("sse") => {
                // An EventSource reconnecting by itself names where it got to.
                let resumed = request::text(headers, "last-event-id")?
                    .and_then(offset::Offset::parse)
                    .map(|offset| ReadFrom::At(offset.0));
                self.sse(id, resumed.unwrap_or(from), query.cursor.clone())
                    .await
            }
            Some(other) => Err(Reply::refuse(
                StatusCode::BAD_REQUEST,
                format!("live must be long-poll or sse; got {other:?}"),
            )),
        }
    }

    /// The fork a create asks for, from its headers.
    fn fork_ask(&self, headers: &http::HeaderMap) -> std::result::Result<Option<ForkAsk>, Reply> {
        let source = request::text(headers, reply::STREAM_FORKED_FROM)?;
        let offset = request::offset(headers, reply::STREAM_FORK_OFFSET)?;
        let sub = request::text(headers, reply::STREAM_FORK_SUB_OFFSET)?;
        let bad = |message: &str| Reply::refuse(StatusCode::BAD_REQUEST, message.to_string());
        let Some(source) = source else {
            if offset.is_some() || sub.is_some() {
                return Err(bad(
                    "Stream-Fork-Offset and Stream-Fork-Sub-Offset need Stream-Forked-From",
                ));
            }
            return Ok(None);
        };
        let sub_offset = match sub {
            None => 0,
            Some(_) if offset.is_none() => {
                return Err(bad("Stream-Fork-Sub-Offset needs Stream-Fork-Offset"));
            }
            Some(value) => request::strict_u64(value)
                .ok_or_else(|| bad("Stream-Fork-Sub-Offset must be a non-negative integer"))?,
        };
        let path = self.prefix.stream_in(source).unwrap_or(source);
        let path = path.strip_prefix('/').unwrap_or(path);
        let decoded = percent_encoding::percent_decode_str(path).decode_utf8_lossy();
        let source = ConversationId::parse(decoded.as_bytes())
            .map_err(|err| bad(&format!("bad Stream-Forked-From: {err}")))?;
        Ok(Some(ForkAsk {
            source,
            offset,
            sub_offset,
        }))
    }
}

/// The absolute URL a request named, from its `Host`.
fn location(headers: &http::HeaderMap, uri: &http::Uri) -> String {
    let host = headers
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost");
    format!("http://{host}{}", uri.path())
}

impl HttpFace {
    /// A request's whole body, if it arrives within `--http-request-timeout`: else 408, and
    /// the connection is closed (what is left of the body would be read as the next request).
    async fn read_body(&self, body: Body) -> std::result::Result<bytes::Bytes, Reply> {
        let timeout = self.bounds.request_timeout;
        let Ok(read) =
            tokio::time::timeout(timeout, axum::body::to_bytes(body, MAX_BODY_BYTES)).await
        else {
            self.slow_bodies.bite(|count| {
                tracing::warn!(
                    timeout = %humantime::format_duration(timeout),
                    cut = count,
                    "HTTP request body did not arrive in time (--http-request-timeout); request refused"
                )
            });
            return Err(Reply::refuse(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the request body did not arrive within {} (--http-request-timeout)",
                    humantime::format_duration(timeout)
                ),
            )
            .header(http::header::CONNECTION, "close"));
        };
        read.map_err(|_| {
            Reply::refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("request bodies are at most {MAX_BODY_BYTES} bytes"),
            )
        })
    }
}
