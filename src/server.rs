//! `run`: opens the store, starts the sweeper, and serves both gRPC APIs plus health and
//! reflection on an already-bound listener until `shutdown` resolves; then shuts down in order.
use std::future::Future;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::grpc::{RecorderService, ResumerService};
use crate::pb::response_recorder_service_server::ResponseRecorderServiceServer;
use crate::pb::response_resumer_service_server::ResponseResumerServiceServer;
use crate::recorder::{Limits, Recorder};
use crate::store::{Store, StoreOptions, sweeper};

/// Pings an idle connection this often, so a vanished peer is noticed.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(20);
/// A ping unanswered for this long closes the connection (and interrupts its producer).
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);
/// Headroom for the rest of a request message around its largest allowed chunk.
const MESSAGE_OVERHEAD_BYTES: usize = 64 * 1024;
/// tonic's own default message limit; kept as the floor so a slightly oversized chunk gets
/// tapedeck's clear `ChunkTooLarge` message rather than a decoder error.
const MIN_MESSAGE_BYTES: usize = 4 * 1024 * 1024;

/// Opens the store from `config` (blocking), creating the data directory if needed.
///
/// Fails with `DataDir` when the directory cannot be created, or as [`Store::open`] does.
pub fn open_store(config: &Config) -> Result<Store> {
    let data_dir_error = |source| Error::DataDir {
        path: config.data_dir.clone(),
        source,
    };
    if config.data_dir.exists() && !config.data_dir.is_dir() {
        return Err(data_dir_error(std::io::Error::new(
            std::io::ErrorKind::NotADirectory,
            "it exists and is not a directory",
        )));
    }
    std::fs::create_dir_all(&config.data_dir).map_err(data_dir_error)?;
    let options = StoreOptions {
        retention: config.retention,
        max_live: config.max_live_recordings,
        ..StoreOptions::default()
    };
    Store::open(&config.database_path(), options)
}

/// Serves tapedeck on `listener` with `store` until `shutdown` resolves. Then producers are
/// told the server is shutting down, their recordings end as `interrupted`, replays end, the
/// commit pipeline drains and the database is closed; all within `config.shutdown_timeout`.
///
/// Fails when serving fails (the listener breaks).
pub async fn run(
    listener: TcpListener,
    store: Store,
    config: &Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let limits = Limits {
        max_chunk_bytes: config.max_chunk_bytes,
        max_recording_bytes: config.max_recording_bytes,
    };
    let recorder = Recorder::new(store.clone(), limits);
    let stop = CancellationToken::new();
    let sweeper = tokio::spawn(sweeper::run(
        store.clone(),
        config.gc_interval,
        config.idle_timeout,
        stop.clone(),
    ));

    let max_message = (config.max_chunk_bytes + MESSAGE_OVERHEAD_BYTES).max(MIN_MESSAGE_BYTES);
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<ResponseRecorderServiceServer<RecorderService>>()
        .await;
    health
        .set_serving::<ResponseResumerServiceServer<ResumerService>>()
        .await;
    // Both reflection versions: grpcurl and other tools differ in which one they ask for.
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(crate::pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let reflection_error = |e| Error::Storage(format!("building reflection service: {e}"));
    let reflection_v1 = reflection().build_v1().map_err(reflection_error)?;
    let reflection_v1alpha = reflection().build_v1alpha().map_err(reflection_error)?;

    let recorder_service =
        ResponseRecorderServiceServer::new(RecorderService::new(recorder.clone()))
            .max_decoding_message_size(max_message);
    let resumer_service = ResponseResumerServiceServer::new(ResumerService::new(recorder.clone()))
        .max_decoding_message_size(max_message);

    // Shutdown order: the signal ends every live recording first (producers get their answer,
    // replays see the end), and only then does tonic stop and wait for the connections.
    let drained = CancellationToken::new();
    let drain_done = drained.clone();
    let draining = recorder.clone();
    let timeout = config.shutdown_timeout;
    let shutdown_signal = async move {
        shutdown.await;
        tracing::info!("shutting down");
        if tokio::time::timeout(timeout, draining.shutdown())
            .await
            .is_err()
        {
            tracing::warn!("live recordings did not all end before the shutdown timeout");
        }
        drain_done.cancel();
    };

    tracing::info!(addr = %listener.local_addr().map_err(|e| Error::Storage(e.to_string()))?, "tapedeck listening");
    // Tokens are small writes: without TCP_NODELAY, Nagle's algorithm holds them back ~40 ms.
    let incoming = TcpIncoming::from(listener)
        .with_nodelay(Some(true))
        .with_keepalive(Some(KEEPALIVE_INTERVAL));
    let serve = Server::builder()
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(recorder_service)
        .add_service(resumer_service)
        .serve_with_incoming_shutdown(incoming, shutdown_signal);
    tokio::pin!(serve);
    let served = tokio::select! {
        served = &mut serve => served,
        // Connections that will not close (a client holding a replay open) get a bounded wait.
        () = async { drained.cancelled().await; tokio::time::sleep(timeout).await } => {
            tracing::warn!("connections still open after the shutdown timeout; closing them");
            Ok(())
        }
    };

    stop.cancel();
    let _ = sweeper.await;
    drop(recorder);
    store.close().await;
    tracing::info!("database closed");
    served.map_err(|e| Error::Storage(format!("gRPC server failed: {e}")))
}
