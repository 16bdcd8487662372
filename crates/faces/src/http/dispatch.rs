//! A request on a stream path: its query parameters, its body (within the request timeout),
//! its caller authorized for what it asks, then handed to `write` or `read`; on a node that
//! does not lead, or about a stream another instance holds, passed on first.
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::response::{IntoResponse, Response};
use http::{Method, StatusCode};
use tracing::Instrument;

use super::offset::{self, ReadFrom};
use super::reply::{self, Replied, Reply};
use super::{HttpFace, MAX_BODY_BYTES, access, request, write};
use crate::access::Operation;
use crate::id::ConversationId;
use crate::recorder::streams::{AppendAsk, CreateAsk, ForkAsk};

/// A header that marks an SSE reader as an operator watching (the console), not counted
/// among the recording's readers.
pub(super) const OBSERVER: &str = "tapedeck-observer";

/// The query parameters the protocol uses; each at most once.
#[derive(Default)]
pub(super) struct Query {
    offset: Option<String>,
    live: Option<String>,
    cursor: Option<String>,
    pub(super) token: Option<String>,
}

impl Query {
    pub(super) fn parse(raw: Option<&str>) -> std::result::Result<Query, Reply> {
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

/// Serves a request on stream `path`.
///
/// Each kind of request is awaited boxed (`Box::pin`), here and in `handle`: a future is as
/// large as its largest branch, and the router moves the handler's future on every request
/// (into its box, through its layers). Unboxed, an append paid at each move for copying the
/// state of a read, a create and a forward besides its own: 8.6 KB, now 0.9.
pub(super) async fn dispatch(
    State(face): State<Arc<HttpFace>>,
    Path(path): Path<String>,
    request: Request,
) -> Response {
    // Passed on, a request runs in its span for traces (the middleware's, current here), so
    // that the call carries the trace on: the log's span below would hide it.
    if let Some(cluster) = face.forwards(&request) {
        return Box::pin(face.forward(cluster, request)).await;
    }
    // Boxed before the `if let`: its scrutinee lives across the await.
    let finding = face.held_elsewhere(&path, &request).map(Box::pin);
    if let Some(finding) = finding
        && let Some(owner) = finding.await
    {
        return Box::pin(face.pass(&owner, request)).await;
    }
    // Every log line of the request, a 500's included, names what was being done.
    let span = tracing::error_span!("request", method = %request.method(), path = %path);
    match Box::pin(face.handle(path, request).instrument(span)).await {
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
                    return Box::pin(self.head(&id)).await;
                }
                Box::pin(self.get(&id, &query, &headers)).await
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
                Box::pin(self.create(&id, create)).await
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
                Box::pin(self.append(&id, ask)).await
            }
            Method::DELETE => {
                access::authorize(&principal, Operation::Delete, &id)?;
                Box::pin(self.delete(&id)).await
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
                // The console watches without counting among the recording's readers.
                let counted = request::text(headers, OBSERVER)?.is_none();
                self.sse(id, resumed.unwrap_or(from), query.cursor.clone(), counted)
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
    pub(super) async fn read_body(&self, body: Body) -> std::result::Result<bytes::Bytes, Reply> {
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
