//! Traces across calls. A face opens one span per call (target [`SPAN_TARGET`]), whose parent
//! is the context the client sent (W3C `traceparent`); a call this server makes on the
//! client's behalf (to the cluster's leader) carries that context on. The binary installs the
//! hooks that do this when it exports traces (OpenTelemetry over OTLP, its `otlp` feature, set
//! by the standard `OTEL_*` variables); without them both are no-ops, and no layer takes the
//! spans, so they cost a disabled callsite's check.
use std::sync::OnceLock;

use tonic::codegen::http::HeaderMap;

/// The target of every span meant for traces (and of nothing else): the log's layer leaves
/// them out, the trace exporter takes only them.
pub const SPAN_TARGET: &str = "tapedeck_trace";

/// What the binary installs to read and write trace contexts.
#[derive(Debug, Clone, Copy)]
pub struct Propagation {
    /// Makes the context carried by `headers` (if any) the parent of `span`.
    pub adopt: fn(&tracing::Span, &HeaderMap),
    /// Writes the current span's context into `headers`.
    pub inject: fn(&mut HeaderMap),
}

static HOOKS: OnceLock<Propagation> = OnceLock::new();

/// Installs the hooks (once; later calls change nothing).
pub fn install(hooks: Propagation) {
    let _ = HOOKS.set(hooks);
}

/// Makes the context a client sent in `headers` the parent of `span`, when traces are on.
pub fn adopt_parent(span: &tracing::Span, headers: &HeaderMap) {
    if let Some(hooks) = HOOKS.get() {
        (hooks.adopt)(span, headers);
    }
}

/// Writes the current span's context into `headers`, when traces are on.
pub fn inject_current(headers: &mut HeaderMap) {
    if let Some(hooks) = HOOKS.get() {
        (hooks.inject)(headers);
    }
}

/// The name of gRPC status `code` as the RPC conventions spell it (`NOT_FOUND`).
pub fn grpc_code_name(code: i32) -> &'static str {
    const NAMES: [&str; 17] = [
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    ];
    usize::try_from(code)
        .ok()
        .and_then(|code| NAMES.get(code))
        .copied()
        .unwrap_or("UNKNOWN")
}
