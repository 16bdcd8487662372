//! Every gRPC call, seen from around the services (a tower layer): go-grpc-prometheus's server
//! metrics (started, handled by code, handling time, messages received and sent), one log
//! line at info per call with its method, conversation, outcome and duration, and one span
//! for traces (the RPC conventions: `rpc.system.name`, `rpc.method`, the status; never the
//! conversation), child of the context the client sent.
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::{Buf, Bytes};
use http_body::{Body as HttpBody, Frame};
use tonic::body::Body;

use tracing::Instrument;

use crate::metrics as metric;
use crate::trace_context;

/// The layer to put around the gRPC routes.
#[derive(Clone, Copy, Debug, Default)]
pub struct TelemetryLayer;

impl<S> tower_layer::Layer<S> for TelemetryLayer {
    type Service = Telemetry<S>;

    fn layer(&self, inner: S) -> Telemetry<S> {
        Telemetry { inner }
    }
}

/// The services, observed.
#[derive(Clone, Debug)]
pub struct Telemetry<S> {
    inner: S,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S> tower_service::Service<http::Request<Body>> for Telemetry<S>
where
    S: tower_service::Service<http::Request<Body>, Response = http::Response<Body>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let call = Arc::new(Call::new(request.uri().path()));
        trace_context::adopt_parent(&call.span, request.headers());
        metrics::counter!(metric::GRPC_STARTED, call.labels()).increment(1);
        let received = call.clone();
        let request = request.map(|body| Body::new(Counted::new(body, received, Side::Received)));
        let span = call.span.clone();
        let response = span.in_scope(|| self.inner.call(request));
        Box::pin(
            async move {
                let response = response.await?;
                // A call refused at once answers with its status in the headers ("trailers
                // only").
                if let Some(code) = response.headers().get("grpc-status") {
                    call.finish(code.to_str().unwrap_or(""));
                }
                Ok(response.map(|body| Body::new(Counted::new(body, call, Side::Sent))))
            }
            .instrument(span),
        )
    }
}

/// What is known of one call.
struct Call {
    path: String,
    service: String,
    method: String,
    kind: &'static str,
    started: Instant,
    /// The conversation named by the first request message, when the method names one.
    conversation: Mutex<Option<String>>,
    finished: AtomicBool,
    /// The call's span for traces; it ends when the call's response body does.
    span: tracing::Span,
}

impl Call {
    fn new(path: &str) -> Self {
        let (service, method) = path
            .trim_start_matches('/')
            .split_once('/')
            .unwrap_or(("unknown", "unknown"));
        // A method of a service this server has, or `_OTHER`: a span's attributes stay few.
        let rpc = match KNOWN_SERVICES
            .iter()
            .any(|known| service.starts_with(known))
        {
            true => path.trim_start_matches('/'),
            false => "_OTHER",
        };
        let span = tracing::info_span!(
            target: trace_context::SPAN_TARGET,
            "grpc call",
            otel.name = rpc,
            otel.kind = "server",
            otel.status_code = tracing::field::Empty,
            rpc.system.name = "grpc",
            rpc.method = rpc,
            rpc.response.status_code = tracing::field::Empty,
        );
        Self {
            path: path.to_string(),
            service: service.to_string(),
            method: method.to_string(),
            kind: kind(method),
            started: Instant::now(),
            conversation: Mutex::new(None),
            finished: AtomicBool::new(false),
            span,
        }
    }

    fn labels(&self) -> Vec<metrics::Label> {
        vec![
            metrics::Label::new("grpc_service", self.service.clone()),
            metrics::Label::new("grpc_method", self.method.clone()),
            metrics::Label::new("grpc_type", self.kind),
        ]
    }

    /// Records the call's end with status `code` (its number, as on the wire); only the
    /// first end counts.
    fn finish(&self, code: &str) {
        if self.finished.swap(true, Ordering::SeqCst) {
            return;
        }
        let number = code.parse::<i32>().unwrap_or(2);
        self.span.record(
            "rpc.response.status_code",
            trace_context::grpc_code_name(number),
        );
        // The server's own failures, as the RPC conventions class them.
        if matches!(number, 2 | 4 | 12 | 13 | 14 | 15) {
            self.span.record("otel.status_code", "ERROR");
        }
        let code = code_name(code);
        let elapsed = self.started.elapsed();
        let mut labels = self.labels();
        metrics::histogram!(metric::GRPC_HANDLING_SECONDS, labels.clone())
            .record(elapsed.as_secs_f64());
        labels.push(metrics::Label::new("grpc_code", code));
        metrics::counter!(metric::GRPC_HANDLED, labels).increment(1);
        let conversation = self.lock_conversation().clone();
        tracing::info!(
            method = %self.path,
            conversation = conversation.as_deref().map(tracing::field::display),
            outcome = %code,
            duration_ms = millis(elapsed),
            "call"
        );
    }

    /// Takes the conversation id from the first request message of methods that name one:
    /// their field 1, as every tapedeck and Memory Service request carries it.
    fn saw_first_message(&self, message: &[u8]) {
        if !names_one_conversation(&self.method) {
            return;
        }
        if let Some(id) = field_one_bytes(message) {
            let id = crate::id::ConversationId::parse(id)
                .map_or_else(|_| "(malformed)".to_string(), |id| id.to_string());
            *self.lock_conversation() = Some(id);
        }
    }

    fn lock_conversation(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.conversation.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// `elapsed` in milliseconds to the microsecond, as a person reads it (`0.16`, not
/// `0.15958699999999998`); still a number in JSON logs.
fn millis(elapsed: std::time::Duration) -> f64 {
    // Rounded to whole microseconds, then over 1000: the nearest f64 to a decimal of at most
    // three places, which prints as that decimal.
    let micros = elapsed.as_nanos().saturating_add(500) / 1000;
    micros as f64 / 1000.0
}

/// The services this server has (and those tools ask for), by name prefix.
const KNOWN_SERVICES: [&str; 5] = [
    "memory.v1.",
    "tapedeck.v1.",
    "grpc.health.v1.",
    "grpc.reflection.",
    "tapedeck.cluster.",
];

/// go-grpc-prometheus's `grpc_type` of a method.
fn kind(method: &str) -> &'static str {
    match method {
        "Record" => "client_stream",
        "Replay" | "ReplayResponseTokens" | "Watch" => "server_stream",
        "StreamResponseTokens" | "ServerReflectionInfo" => "bidi_stream",
        _ => "unary",
    }
}

/// Whether a method's request names one conversation in its field 1.
fn names_one_conversation(method: &str) -> bool {
    matches!(
        method,
        "Record"
            | "Replay"
            | "Cancel"
            | "StreamResponseTokens"
            | "ReplayResponseTokens"
            | "CancelResponse"
            | "Get"
            | "Delete"
    )
}

/// The bytes of field 1 of a protobuf message, if it comes first and is length-delimited.
fn field_one_bytes(message: &[u8]) -> Option<&[u8]> {
    let (&tag, rest) = message.split_first()?;
    if tag != 0x0a {
        return None;
    }
    let (mut len, mut shift, mut used) = (0usize, 0, 0);
    for &byte in rest.iter().take(5) {
        len |= ((byte & 0x7f) as usize) << shift;
        used += 1;
        shift += 7;
        if byte & 0x80 == 0 {
            return rest.get(used..used + len);
        }
    }
    None
}

/// A status code number as go-grpc-prometheus names it.
fn code_name(code: &str) -> &'static str {
    const NAMES: [&str; 17] = [
        "OK",
        "Canceled",
        "Unknown",
        "InvalidArgument",
        "DeadlineExceeded",
        "NotFound",
        "AlreadyExists",
        "PermissionDenied",
        "ResourceExhausted",
        "FailedPrecondition",
        "Aborted",
        "OutOfRange",
        "Unimplemented",
        "Internal",
        "Unavailable",
        "DataLoss",
        "Unauthenticated",
    ];
    code.parse::<usize>()
        .ok()
        .and_then(|n| NAMES.get(n).copied())
        .unwrap_or("Unknown")
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Received,
    Sent,
}

/// Counts the gRPC messages (5-byte header, then the message) flowing through a body.
struct Framing {
    /// Bytes of the current header read so far, and the header.
    header: ([u8; 5], usize),
    /// Bytes of the current message still to come.
    remaining: usize,
    /// The start of the first message, kept until it is whole (for the conversation).
    first: Option<Vec<u8>>,
}

impl Framing {
    /// Counts the messages `data` starts; hands the first message to `first_done` once whole.
    fn feed(&mut self, mut data: &[u8], mut on_first: impl FnMut(&[u8])) -> u64 {
        let mut started = 0;
        while !data.is_empty() {
            if self.remaining == 0 {
                let (header, filled) = &mut self.header;
                let take = (5 - *filled).min(data.len());
                header[*filled..*filled + take].copy_from_slice(&data[..take]);
                *filled += take;
                data = &data[take..];
                if *filled == 5 {
                    self.remaining =
                        u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
                    *filled = 0;
                    started += 1;
                    if self.remaining == 0 {
                        self.first_done(&mut on_first);
                    }
                }
                continue;
            }
            let take = self.remaining.min(data.len());
            if let Some(first) = &mut self.first {
                // Only the start of a message is needed to find its field 1.
                first.extend_from_slice(&data[..take.min(512usize.saturating_sub(first.len()))]);
            }
            self.remaining -= take;
            data = &data[take..];
            if self.remaining == 0 {
                self.first_done(&mut on_first);
            }
        }
        started
    }

    fn first_done(&mut self, on_first: &mut impl FnMut(&[u8])) {
        if let Some(first) = self.first.take() {
            on_first(&first);
        }
    }
}

pin_project_lite::pin_project! {
    /// A body that counts its messages and, for responses, sees the status in the trailers.
    struct Counted {
        #[pin]
        inner: Body,
        call: Arc<Call>,
        side: Side,
        framing: Framing,
        // Looked up once: a lookup hashes the call's labels, and a stream may carry a
        // message per token.
        messages: metrics::Counter,
    }

    impl PinnedDrop for Counted {
        fn drop(this: Pin<&mut Self>) {
            // A response body dropped before its trailers: the client went away.
            if this.side == Side::Sent {
                this.call.finish("1");
            }
        }
    }
}

impl Counted {
    fn new(inner: Body, call: Arc<Call>, side: Side) -> Self {
        let name = match side {
            Side::Received => metric::GRPC_MSG_RECEIVED,
            Side::Sent => metric::GRPC_MSG_SENT,
        };
        let messages = metrics::counter!(name, call.labels());
        Self {
            inner,
            call,
            side,
            messages,
            framing: Framing {
                header: ([0; 5], 0),
                remaining: 0,
                first: (side == Side::Received).then(Vec::new),
            },
        }
    }
}

impl HttpBody for Counted {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.project();
        let polled = this.inner.poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            if let Some(data) = frame.data_ref() {
                let call: &Call = this.call;
                let count = this
                    .framing
                    .feed(data.chunk(), |first| call.saw_first_message(first));
                if count > 0 {
                    this.messages.increment(count);
                }
            } else if let Some(trailers) = frame.trailers_ref()
                && let Some(code) = trailers.get("grpc-status")
            {
                this.call.finish(code.to_str().unwrap_or(""));
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_counted_across_frames_and_the_first_is_kept() {
        let mut framing = Framing {
            header: ([0; 5], 0),
            remaining: 0,
            first: Some(Vec::new()),
        };
        // Field 1 = "chat-1", then a second, empty message.
        let first = [0x0a, 6, b'c', b'h', b'a', b't', b'-', b'1'];
        let mut wire = vec![0, 0, 0, 0, first.len() as u8];
        wire.extend_from_slice(&first);
        wire.extend_from_slice(&[0, 0, 0, 0, 0]);
        let mut seen = Vec::new();
        let (a, b) = wire.split_at(3);
        let counted =
            framing.feed(a, |m| seen.push(m.to_vec())) + framing.feed(b, |m| seen.push(m.to_vec()));
        assert_eq!(counted, 2);
        assert_eq!(seen, vec![first.to_vec()]);
        assert_eq!(field_one_bytes(&seen[0]), Some(&b"chat-1"[..]));
    }

    #[test]
    fn durations_are_logged_in_milliseconds_to_the_microsecond() {
        let logged = |nanos| millis(std::time::Duration::from_nanos(nanos)).to_string();
        assert_eq!(logged(159_587), "0.16");
        assert_eq!(logged(1_234_567_891), "1234.568");
        assert_eq!(logged(7_000), "0.007");
        assert_eq!(logged(3_000_000), "3");
    }

    #[test]
    fn codes_are_named_as_go_grpc_prometheus_does() {
        assert_eq!(code_name("0"), "OK");
        assert_eq!(code_name("1"), "Canceled");
        assert_eq!(code_name("16"), "Unauthenticated");
        assert_eq!(code_name("x"), "Unknown");
    }
}
