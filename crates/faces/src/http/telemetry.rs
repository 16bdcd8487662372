//! Every HTTP request, seen from around the routes (a middleware), as gRPC's are: one log line
//! at info per request (method, stream, status, duration), one more when an SSE or long-poll
//! reader ends; Prometheus metrics of requests by method and status, request duration, the
//! SSE and long-poll readers open now, and bytes sent; and one span for traces per request
//! (the HTTP conventions: method, route, status; never a stream's path), child of the context
//! the client sent (`traceparent`).
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use bytes::Bytes;
use http::Method;
use http_body::{Body as HttpBody, Frame};

use tracing::Instrument;

use super::StreamPrefix;
use crate::metrics as metric;
use crate::trace_context;

/// What the middleware knows of the face: where its streams are, and the template of their
/// route. Shared: the middleware's state is cloned for every request.
pub(super) struct Observed {
    prefix: StreamPrefix,
    stream_route: String,
}

impl Observed {
    pub(super) fn of(prefix: &StreamPrefix) -> std::sync::Arc<Observed> {
        std::sync::Arc::new(Observed {
            prefix: prefix.clone(),
            stream_route: format!("{prefix}/{{path}}"),
        })
    }

    /// The route `path` took, as a template (`/v1/stream/{path}`): what a span may say of it.
    fn route_of<'a>(&'a self, path: &'a str) -> &'a str {
        if self.prefix.stream_in(path).is_some() {
            &self.stream_route
        } else if path.starts_with("/v1/stop/") {
            "/v1/stop/{path}"
        } else if path == "/console" || path.starts_with("/console/") {
            "/console"
        } else if matches!(path, "/healthz" | "/readyz") {
            path
        } else {
            "_OTHER"
        }
    }
}

/// Logs and counts `request` and its response; a reader's response body is followed to its end.
pub(super) async fn observe(
    State(observed): State<std::sync::Arc<Observed>>,
    request: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    let method = method_label(request.method());
    // The target shares the request's bytes: no copy of the path for every request.
    let uri = request.uri().clone();
    let path = uri.path();
    let reader = Reader::of(&request);
    // A long-poll is open while its handler waits, before there is a response.
    let open = reader.map(OpenReader::new);
    let route = observed.route_of(path);
    let span = tracing::info_span!(
        target: trace_context::SPAN_TARGET,
        "http request",
        otel.name = %format_args!("{method} {route}"),
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        http.request.method = method,
        http.route = %route,
        http.response.status_code = tracing::field::Empty,
        url.scheme = "http",
    );
    trace_context::adopt_parent(&span, request.headers());
    let response = next.run(request).instrument(span.clone()).await;
    let status = response.status();
    span.record("http.response.status_code", i64::from(status.as_u16()));
    if status.is_server_error() {
        span.record("otel.status_code", "ERROR");
    }
    let elapsed = started.elapsed();
    let code = status.as_str().to_string();
    metrics::counter!(metric::HTTP_REQUESTS, "method" => method, "code" => code).increment(1);
    metrics::histogram!(metric::HTTP_REQUEST_SECONDS, "method" => method)
        .record(elapsed.as_secs_f64());
    let stream = observed
        .prefix
        .stream_in(path)
        .or_else(|| path.strip_prefix("/v1/stop/"));
    tracing::info!(
        method,
        stream,
        path = stream.is_none().then_some(path),
        status = status.as_u16(),
        duration_ms = millis(elapsed),
        "HTTP request"
    );
    let open = open.filter(|_| status.is_success());
    let reader = open.map(|open| (open, stream.unwrap_or_default().to_string()));
    response.map(|body| {
        Body::new(Counted {
            inner: body,
            reader,
            sent: 0,
        })
    })
}

/// A live read: its response goes on as long as the stream does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reader {
    Sse,
    LongPoll,
}

impl Reader {
    /// The kind of live read `request` is, if it is one.
    fn of(request: &Request) -> Option<Reader> {
        if request.method() != Method::GET {
            return None;
        }
        let query = request.uri().query()?;
        form_urlencoded::parse(query.as_bytes())
            .find(|(name, _)| name == "live")
            .and_then(|(_, value)| match &*value {
                "sse" => Some(Reader::Sse),
                "long-poll" => Some(Reader::LongPoll),
                _ => None,
            })
    }

    fn label(self) -> &'static str {
        match self {
            Reader::Sse => "sse",
            Reader::LongPoll => "long-poll",
        }
    }
}

/// A reader counted in the open readers' gauge until dropped.
struct OpenReader {
    kind: Reader,
    started: Instant,
}

impl OpenReader {
    fn new(kind: Reader) -> Self {
        metrics::gauge!(metric::HTTP_OPEN_READERS, "kind" => kind.label()).increment(1.0);
        Self {
            kind,
            started: Instant::now(),
        }
    }
}

impl Drop for OpenReader {
    fn drop(&mut self) {
        metrics::gauge!(metric::HTTP_OPEN_READERS, "kind" => self.kind.label()).decrement(1.0);
    }
}

pin_project_lite::pin_project! {
    /// A response body that counts the bytes it sends and, for a reader, logs its end.
    struct Counted {
        #[pin]
        inner: Body,
        reader: Option<(OpenReader, String)>,
        sent: u64,
    }

    impl PinnedDrop for Counted {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let Some((open, stream)) = this.reader.take() {
                tracing::info!(
                    kind = open.kind.label(),
                    stream = %stream,
                    bytes = *this.sent,
                    duration_ms = millis(open.started.elapsed()),
                    "HTTP reader ended"
                );
            }
        }
    }
}

impl HttpBody for Counted {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.project();
        let polled = this.inner.poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(data) = frame.data_ref()
        {
            *this.sent += data.len() as u64;
            sent_bytes().increment(data.len() as u64);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The sent-bytes counter, looked up once: every frame of every response adds to it, and a
/// lookup by name (a hash and a map) cost more than the add. The binary installs its metrics
/// recorder before any face serves, so the first frame finds it.
fn sent_bytes() -> &'static metrics::Counter {
    static SENT: std::sync::OnceLock<metrics::Counter> = std::sync::OnceLock::new();
    SENT.get_or_init(|| metrics::counter!(metric::HTTP_SENT_BYTES))
}

/// The method as a label: the protocol's and CORS's, anything else `other` (labels are bounded).
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::PUT => "PUT",
        Method::POST => "POST",
        Method::DELETE => "DELETE",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

fn millis(elapsed: std::time::Duration) -> f64 {
    (elapsed.as_secs_f64() * 1e4).round() / 10.0
}
