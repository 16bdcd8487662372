//! Responses of the HTTP face: the protocol's header names, and [`Reply`], a status with
//! headers and a body that every handler returns, refusals included (a refusal's body is one
//! line a person can act on).
use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderName, HeaderValue};
use http::{HeaderMap, StatusCode};

use super::offset::Offset;

pub(crate) const STREAM_NEXT_OFFSET: &str = "stream-next-offset";
pub(crate) const STREAM_CLOSED: &str = "stream-closed";
pub(crate) const STREAM_UP_TO_DATE: &str = "stream-up-to-date";
pub(crate) const STREAM_CURSOR: &str = "stream-cursor";
pub(crate) const STREAM_TTL: &str = "stream-ttl";
pub(crate) const STREAM_EXPIRES_AT: &str = "stream-expires-at";
pub(crate) const STREAM_SEQ: &str = "stream-seq";
pub(crate) const STREAM_FORKED_FROM: &str = "stream-forked-from";
pub(crate) const STREAM_FORK_OFFSET: &str = "stream-fork-offset";
pub(crate) const STREAM_FORK_SUB_OFFSET: &str = "stream-fork-sub-offset";
pub(crate) const STREAM_SSE_DATA_ENCODING: &str = "stream-sse-data-encoding";
pub(crate) const PRODUCER_ID: &str = "producer-id";
pub(crate) const PRODUCER_EPOCH: &str = "producer-epoch";
pub(crate) const PRODUCER_SEQ: &str = "producer-seq";
pub(crate) const PRODUCER_EXPECTED_SEQ: &str = "producer-expected-seq";
pub(crate) const PRODUCER_RECEIVED_SEQ: &str = "producer-received-seq";
/// A tapedeck extension on a read that reaches a closed stream's end: how it ended
/// (`completed` for a close, `cancelled` for a stop).
pub(crate) const TAPEDECK_ENDED_AS: &str = "tapedeck-ended-as";

/// Every protocol header a browser script may read from a response.
pub(crate) const EXPOSED: [&str; 15] = [
    STREAM_NEXT_OFFSET,
    STREAM_CLOSED,
    STREAM_UP_TO_DATE,
    STREAM_CURSOR,
    STREAM_TTL,
    STREAM_EXPIRES_AT,
    STREAM_SSE_DATA_ENCODING,
    PRODUCER_EPOCH,
    PRODUCER_SEQ,
    PRODUCER_EXPECTED_SEQ,
    PRODUCER_RECEIVED_SEQ,
    TAPEDECK_ENDED_AS,
    "etag",
    "location",
    "content-type",
];

/// Every request header the face reads that a browser must be allowed to send across
/// origins. Named one by one: the wildcard `*` does not cover `Authorization` (Fetch
/// standard, CORS-preflight), so a page sending a grant would be refused by its browser.
pub(crate) const READ_FROM_REQUESTS: [&str; 15] = [
    "authorization",
    "x-api-key",
    "content-type",
    STREAM_TTL,
    STREAM_EXPIRES_AT,
    STREAM_CLOSED,
    STREAM_SEQ,
    STREAM_FORKED_FROM,
    STREAM_FORK_OFFSET,
    STREAM_FORK_SUB_OFFSET,
    PRODUCER_ID,
    PRODUCER_EPOCH,
    PRODUCER_SEQ,
    "last-event-id",
    "if-none-match",
];

/// A response under construction.
#[derive(Debug)]
pub(crate) struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: Body,
}

/// What every handler returns; a refusal is a [`Reply`] too.
pub(crate) type Replied = Result<Reply, Reply>;

impl Reply {
    pub(crate) fn new(status: StatusCode) -> Self {
        Self {
            status,
            headers: HeaderMap::new(),
            body: Body::empty(),
        }
    }

    /// Whether this refusal may only mean this node has not yet applied what the client
    /// wrote through another (no stream there, or an offset past its tail).
    pub(crate) fn may_be_behind(&self) -> bool {
        matches!(self.status, StatusCode::NOT_FOUND | StatusCode::BAD_REQUEST)
    }

    /// A refusal: `status` with `message` as a plain-text body.
    pub(crate) fn refuse(status: StatusCode, message: impl Into<String>) -> Self {
        let mut message = message.into();
        message.push('\n');
        Self::new(status)
            .header(CONTENT_TYPE, "text/plain; charset=utf-8")
            .body(Body::from(message))
    }

    /// Adds header `name`; a value that is not a valid header value is left out.
    pub(crate) fn header(mut self, name: impl Into<HeaderName>, value: impl AsRef<str>) -> Self {
        if let Ok(value) = HeaderValue::from_str(value.as_ref()) {
            self.headers.insert(name.into(), value);
        }
        self
    }

    pub(crate) fn named(self, name: &'static str, value: impl AsRef<str>) -> Self {
        self.header(HeaderName::from_static(name), value)
    }

    pub(crate) fn next_offset(self, offset: u64) -> Self {
        self.named(STREAM_NEXT_OFFSET, Offset(offset).to_string())
    }

    /// `Stream-Closed: true` when `closed`.
    pub(crate) fn closed(self, closed: bool) -> Self {
        if closed {
            self.named(STREAM_CLOSED, "true")
        } else {
            self
        }
    }

    /// `Tapedeck-Ended-As`, when the read saw how the stream ended.
    pub(crate) fn ended_as(self, status: Option<crate::recorder::Status>) -> Self {
        match status {
            Some(status) => self.named(TAPEDECK_ENDED_AS, status.as_str()),
            None => self,
        }
    }

    pub(crate) fn up_to_date(self) -> Self {
        self.named(STREAM_UP_TO_DATE, "true")
    }

    pub(crate) fn content_type(self, content_type: &str) -> Self {
        self.header(CONTENT_TYPE, content_type)
    }

    pub(crate) fn cache(self, policy: &str) -> Self {
        self.header(CACHE_CONTROL, policy)
    }

    pub(crate) fn body(mut self, body: impl Into<Body>) -> Self {
        self.body = body.into();
        self
    }

    pub(crate) fn bytes(self, bytes: Bytes) -> Self {
        self.body(Body::from(bytes))
    }
}

impl IntoResponse for Reply {
    fn into_response(self) -> Response {
        let mut response = Response::new(self.body);
        *response.status_mut() = self.status;
        *response.headers_mut() = self.headers;
        response
    }
}
