//! What the binary shows an operator: the log subscriber, the one line of configuration it
//! starts with, and the Prometheus exporter.
use std::io::IsTerminal;
use std::net::SocketAddr;

use tapedeck::Config;
use tapedeck::config::OnConflict;

use crate::args::serve::LogFormat;
use crate::values::{Bytes, HttpListen, Period};

/// The log filter without `RUST_LOG`: tapedeck's INFO, and none of openraft's lines, whose
/// routine ones (struct dumps at INFO, a WARN at every start, an ERROR per RPC to a node that
/// is down) would drown tapedeck's; the cluster logs what matters itself (a node that stops
/// answering, once). `RUST_LOG=info,openraft=info` brings them back.
pub(crate) const DEFAULT_FILTER: &str = "info,openraft=off";

/// Starts logging to stderr in `format`, filtered by `RUST_LOG` (default [`DEFAULT_FILTER`]),
/// and, with the `otlp` feature, exporting traces when the `OTEL_*` variables ask for them
/// (`traces`); the spans meant for traces never reach the log. Must run inside the runtime.
///
/// Fails when traces are asked for and cannot be exported.
pub(crate) fn init_tracing(format: LogFormat) -> anyhow::Result<Option<Exporting>> {
    use tracing_subscriber::util::SubscriberInitExt;
    let logging = logging(format);
    #[cfg(feature = "otlp")]
    {
        use tracing_subscriber::layer::SubscriberExt;
        // Without traces the layer is left out, not added as `None`: an absent `Option` layer
        // says every callsite is always of interest, and every request's span would then be
        // made, entered at each poll and dropped for nothing.
        match crate::traces::layer()? {
            Some((traces, exporting)) => {
                logging.with(traces).init();
                Ok(Some(exporting))
            }
            None => {
                logging.init();
                Ok(None)
            }
        }
    }
    #[cfg(not(feature = "otlp"))]
    {
        logging.init();
        Ok(None)
    }
}

/// The subscriber that logs to stderr in `format`, filtered by `RUST_LOG`; it takes no span
/// meant for traces.
fn logging(
    format: LogFormat,
) -> impl tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span> + Send + Sync
{
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(DEFAULT_FILTER))
        .add_directive(
            format!("{}=off", tapedeck::trace_context::SPAN_TARGET)
                .parse()
                .expect("a valid directive"),
        );
    let logs = tracing_subscriber::fmt::layer()
        // Colour escapes only for a person at a terminal, never in a file or a pipe.
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let logs = match format {
        LogFormat::Text => logs.boxed(),
        LogFormat::Json => logs.json().boxed(),
    };
    tracing_subscriber::registry().with(logs.with_filter(filter))
}

/// What exports traces while the server runs (nothing without the `otlp` feature).
#[cfg(feature = "otlp")]
pub(crate) type Exporting = crate::traces::Traces;
#[cfg(not(feature = "otlp"))]
pub(crate) type Exporting = std::convert::Infallible;

/// One line with every setting the server runs with, each written as its flag takes it; a
/// setting left unset is left out.
pub(crate) fn log_config(config: &Config) {
    let access = &config.access;
    let api_keys = access
        .api_keys
        .iter()
        .map(|k| k.name.as_str())
        .collect::<Vec<_>>()
        .join(",");
    let locator = config.locator.as_ref();
    tracing::info!(
        listen = %config.server.listen,
        http_listen = %HttpListen(config.server.http_listen),
        http_request_timeout = %Period(config.http.bounds.request_timeout),
        http_max_connections = config.http.bounds.max_connections,
        http_path_prefix = %config.http.path_prefix,
        data_dir = %config.server.data_dir.display(),
        retention = %Period(config.store.retention),
        max_retention = %Period(config.recorder.max_retention),
        tombstone_retention = %Period(config.store.tombstone_retention),
        producer_grace = %Period(config.recorder.producer_grace),
        on_conflict = %match config.recorder.on_conflict {
            OnConflict::Supersede => "supersede",
            OnConflict::Reject => "reject",
        },
        gc_interval = %Period(config.recorder.gc_interval),
        idle_timeout = %Period(config.recorder.idle_timeout),
        max_chunk_bytes = %Bytes(config.recorder.max_chunk_bytes as u64),
        max_recording_bytes = %Bytes(config.recorder.max_recording_bytes),
        max_live_recordings = config.recorder.max_live_recordings,
        checkpoint_size = %Bytes(config.store.checkpoint_bytes),
        cache_size = %Bytes(config.store.cache_bytes),
        commit_interval = %Period(config.store.commit_interval),
        shutdown_timeout = %Period(config.server.shutdown_timeout),
        api_keys = (!api_keys.is_empty()).then(|| display(&api_keys)),
        jwt_secret = access.jwt_secret.is_some(),
        jwt_public_key = access.jwt_public_key.as_ref().map(|p| display(p.display())),
        jwt_issuer = access.jwt_issuer.as_ref().map(display),
        jwt_audience = access.jwt_audience.as_ref().map(display),
        tls = config.server.tls.is_some(),
        mutual_tls = config.server.tls.as_ref().is_some_and(|t| t.client_ca.is_some()),
        redis = locator.map(|l| display(l.redacted_url())),
        advertised_address = locator.map(|l| display(&l.advertised_address)),
        "starting with this configuration"
    );
}

/// Installs the Prometheus exporter: the console's overview reads its numbers, and with
/// `listen` it serves `/metrics` there from a task of its own. Must run inside the runtime.
///
/// Fails when `listen` cannot be bound or the exporter cannot be installed.
pub(crate) fn install_metrics(listen: Option<SocketAddr>) -> anyhow::Result<()> {
    use anyhow::Context;
    use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
    let builder = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Suffix("_seconds".into()),
            tapedeck::metrics::SECONDS_BUCKETS,
        )?
        .set_buckets_for_metric(
            Matcher::Full(tapedeck::metrics::COMMIT_BATCH_OPS.into()),
            tapedeck::metrics::OPS_BUCKETS,
        )?;
    // Bound here, before anything else starts, so that a busy port is refused with the usual
    // message; port 0 takes a free one, which the log line below names.
    let listener = match listen {
        Some(addr) => Some(std::net::TcpListener::bind(addr).map_err(|source| {
            tapedeck::Error::Setup(tapedeck::error::Setup::Bind {
                addr,
                what: "metrics",
                flag: "--metrics-listen",
                env: "TAPEDECK_METRICS_LISTEN",
                source,
            })
        })?),
        None => None,
    };
    let recorder = builder.build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).context("cannot install the metrics recorder")?;
    // Histogram samples wait in buckets until drained: drained every few seconds, scraped or
    // not, so that memory stays bounded.
    let upkeep = handle.clone();
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(std::time::Duration::from_secs(5));
        loop {
            ticker.tick().await;
            upkeep.run_upkeep();
        }
    });
    if let Some(listener) = listener {
        serve_metrics(listener, handle.clone())?;
    }
    tapedeck::metrics::keep_handle(handle);
    tapedeck::metrics::describe();
    Ok(())
}

/// Serves `GET /metrics` (the Prometheus text format) on `listener`, from a task of its own.
///
/// Fails when the listener cannot be handed to the runtime.
fn serve_metrics(
    listener: std::net::TcpListener,
    handle: metrics_exporter_prometheus::PrometheusHandle,
) -> anyhow::Result<()> {
    use anyhow::Context;
    listener
        .set_nonblocking(true)
        .context("cannot serve metrics (--metrics-listen or TAPEDECK_METRICS_LISTEN)")?;
    let listener = tokio::net::TcpListener::from_std(listener)
        .context("cannot serve metrics (--metrics-listen or TAPEDECK_METRICS_LISTEN)")?;
    let addr = listener
        .local_addr()
        .context("cannot serve metrics (--metrics-listen or TAPEDECK_METRICS_LISTEN)")?;
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let handle = handle.clone();
            async move { handle.render() }
        }),
    );
    tokio::spawn(async move {
        if let Err(err) = axum::serve(listener, app).await {
            tracing::error!(error = %err, "serving metrics failed");
        }
    });
    // `addr` is the bound address: with port 0, the one the kernel picked.
    tracing::info!(%addr, "serving Prometheus metrics at /metrics");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request's span, as the faces open it: made only when something takes it.
    fn request_span() -> tracing::Span {
        tracing::info_span!(target: tapedeck::trace_context::SPAN_TARGET, "http request")
    }

    #[test]
    fn without_traces_a_request_span_is_not_made() {
        tracing::subscriber::with_default(logging(LogFormat::Text), || {
            assert!(request_span().is_disabled());
            // The log's own spans are still made (a failed request's line names its request).
            assert!(!tracing::error_span!("request").is_disabled());
        });
    }
}
