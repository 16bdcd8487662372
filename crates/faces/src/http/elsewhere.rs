//! Streams another instance holds, with several instances on one Redis: a request about one
//! is passed to that instance's HTTP face (`--advertised-http-address`), and its answer
//! streamed back as it comes (catch-up, long-poll and SSE alike). So one address serves every
//! stream, reads and writes.
//!
//! Passed on rather than redirected: a browser drops `Authorization` when it follows a
//! redirect to another origin, and `EventSource` sets no header at all, so a redirect would
//! lose the caller's credentials, or meet CORS on the way; a pass keeps the one origin the
//! page talks to, and the owner checks the same credentials. The cost is a second hop for
//! those bytes.
use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::{HeaderName, HeaderValue, Method, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use super::HttpFace;
use super::reply::Reply;
use crate::id::ConversationId;
use crate::locator::{Locator, Route};
use crate::recorder::Found;

/// Marks a request another instance passed here: it is answered here, never passed on again
/// (two instances whose entries disagree for a moment must not pass it back and forth).
const PASSED_FROM: &str = "x-tapedeck-passed-from";
/// How long a request about a stream found nowhere waits before Redis is asked again.
const REGISTRATION_WAIT: std::time::Duration = std::time::Duration::from_millis(150);
/// How long connecting to the owner's face may take.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Headers of one connection, not of the request or response they carry (RFC 9110, 7.6.1),
/// and `host` (the client names the owner's).
const NOT_PASSED: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
];

/// The client requests are passed on with.
pub(super) type Passing = Client<HttpConnector, Body>;

pub(super) fn passing() -> Passing {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new()).build(connector)
}

impl HttpFace {
    /// Finds the HTTP face of the instance that holds the stream at `path`, if another
    /// instance does and advertises one: `None` when `request` is not to be passed on at all
    /// (no locator, a request passed here already, a CORS preflight, a bad path). Asks Redis
    /// (bounded) unless the stream is live here.
    pub(super) fn held_elsewhere(
        &self,
        path: &str,
        request: &Request,
    ) -> Option<impl std::future::Future<Output = Option<String>> + Send + '_> {
        let locator = self.locator.as_ref()?;
        if request.headers().contains_key(PASSED_FROM) || request.method() == Method::OPTIONS {
            return None;
        }
        let id = ConversationId::parse(path.as_bytes()).ok()?;
        Some(self.owner_of(locator, id, request.method() == Method::PUT))
    }

    /// The HTTP face of the instance that holds conversation `id`'s stream, if another one.
    /// A stream found nowhere may have been created elsewhere a moment ago (its entry is
    /// written within about 50 ms): unless `creating` it, Redis is asked once more after
    /// [`REGISTRATION_WAIT`].
    async fn owner_of(
        &self,
        locator: &Locator,
        id: ConversationId,
        creating: bool,
    ) -> Option<String> {
        if let Route::There(owner) = locator.route(&self.recorder, id.key()).await {
            return owner.http;
        }
        if creating || !matches!(self.recorder.get(&id).await, Ok(Found::Unknown)) {
            return None;
        }
        tokio::time::sleep(REGISTRATION_WAIT).await;
        match locator.route(&self.recorder, id.key()).await {
            Route::There(owner) => owner.http,
            Route::Here => None,
        }
    }

    /// Passes `request` to the HTTP face at `owner` and streams its answer back; `503` naming
    /// the owner when it cannot be reached.
    pub(super) async fn pass(&self, owner: &str, request: Request) -> Response {
        let (mut parts, body) = request.into_parts();
        let path = parts.uri.path_and_query().map_or("/", |path| path.as_str());
        parts.uri = match format!("http://{owner}{path}").parse() {
            Ok(uri) => uri,
            Err(_) => return unreachable(owner, "its address is not a URL authority"),
        };
        for name in NOT_PASSED {
            parts.headers.remove(name);
        }
        // The other instance's span is a child of this request's, not of the client's.
        crate::trace_context::inject_current(&mut parts.headers);
        if let Some(locator) = &self.locator
            && let Ok(from) = HeaderValue::from_str(locator.address())
        {
            parts
                .headers
                .insert(HeaderName::from_static(PASSED_FROM), from);
        }
        match self
            .passing
            .request(http::Request::from_parts(parts, body))
            .await
        {
            Ok(answer) => {
                let (mut parts, body) = answer.into_parts();
                for name in NOT_PASSED {
                    parts.headers.remove(name);
                }
                // This face's CORS layer sets its own on the way out (`vary` among them).
                let cors: Vec<HeaderName> = (parts.headers.keys())
                    .filter(|name| {
                        name.as_str().starts_with("access-control-") || name.as_str() == "vary"
                    })
                    .cloned()
                    .collect();
                for name in cors {
                    parts.headers.remove(name);
                }
                Response::from_parts(parts, Body::new(body))
            }
            Err(err) => unreachable(owner, &err.to_string()),
        }
    }
}

fn unreachable(owner: &str, why: &str) -> Response {
    Reply::refuse(
        StatusCode::SERVICE_UNAVAILABLE,
        format!(
            "this stream is held by the instance whose HTTP face is {owner}, which did not \
             answer ({why}); try again once it is back"
        ),
    )
    .into_response()
}
