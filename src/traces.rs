//! Traces over OTLP/gRPC (the `otlp` feature, on by default), set by the standard variables
//! only: on when `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set
//! (and neither `OTEL_SDK_DISABLED=true` nor `OTEL_TRACES_EXPORTER=none`); the SDK reads the
//! rest (`OTEL_SERVICE_NAME`, `OTEL_TRACES_SAMPLER`, `OTEL_EXPORTER_OTLP_HEADERS`,
//! `OTEL_BSP_*`, …). Off, nothing is built and the spans meant for traces go nowhere.
use anyhow::Context;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tapedeck::trace_context::{self, Propagation, SPAN_TARGET};
use tonic::codegen::http::{HeaderMap, HeaderName, HeaderValue};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::registry::LookupSpan;

/// The exporter while traces are on: flushed and stopped when dropped.
pub(crate) struct Traces(SdkTracerProvider);

impl Drop for Traces {
    fn drop(&mut self) {
        if let Err(err) = self.0.shutdown() {
            tracing::warn!(error = %err, "the last traces could not be exported");
        }
    }
}

/// Whether the environment asks for traces.
fn wanted() -> bool {
    let set = |name: &str| std::env::var_os(name).is_some_and(|value| !value.is_empty());
    let is = |name: &str, value: &str| {
        std::env::var(name).is_ok_and(|set| set.eq_ignore_ascii_case(value))
    };
    (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
        && !is("OTEL_SDK_DISABLED", "true")
        && !is("OTEL_TRACES_EXPORTER", "none")
}

/// The layer that exports the spans meant for traces, when the environment asks for traces;
/// installs the hooks that carry their context across calls. Must run inside the runtime
/// (the gRPC exporter is tonic's).
///
/// Fails when the exporter cannot be built from the `OTEL_*` settings.
pub(crate) fn layer<S>() -> anyhow::Result<Option<(impl Layer<S>, Traces)>>
where
    S: tracing::Subscriber + for<'span> LookupSpan<'span>,
{
    if !wanted() {
        return Ok(None);
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .build()
        .context("cannot export traces (OTEL_EXPORTER_OTLP_ENDPOINT)")?;
    let mut resource = opentelemetry_sdk::Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name("tapedeck");
    }
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource.build())
        .build();
    let tracer = provider.tracer("tapedeck");
    trace_context::install(Propagation { adopt, inject });
    let only_traces = Targets::new().with_target(SPAN_TARGET, tracing::Level::INFO);
    // The conventions' attributes only: not the source location, the thread, the target or
    // the busy and idle times the layer adds by default.
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_level(false)
        .with_tracked_inactivity(false)
        .with_filter(only_traces);
    Ok(Some((layer, Traces(provider))))
}

/// Makes the W3C trace context in `headers` the parent of `span`.
fn adopt(span: &tracing::Span, headers: &HeaderMap) {
    let parent = TraceContextPropagator::new().extract(&Headers(headers));
    let _ = span.set_parent(parent);
}

/// Writes the current span's W3C trace context into `headers`.
fn inject(headers: &mut HeaderMap) {
    let context = tracing::Span::current().context();
    TraceContextPropagator::new().inject_context(&context, &mut HeadersMut(headers));
}

struct Headers<'a>(&'a HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(HeaderName::as_str).collect()
    }
}

struct HeadersMut<'a>(&'a mut HeaderMap);

impl Injector for HeadersMut<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(key.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}
