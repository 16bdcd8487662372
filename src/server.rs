//! `run`: wires the store, the recorder and the faces together on an already-bound listener,
//! serves until `shutdown` resolves, then shuts down in order with a bound.
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::TryStreamExt;
use tokio::net::TcpListener;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

use crate::access::Guard;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::grpc::{self, Lifecycle};
use crate::locator::Locator;
use crate::readiness::Readiness;
use crate::recorder::Recorder;
use crate::recorder::sealer::SealerSettings;
use crate::store::Store;
use crate::tier::Tier;

/// HTTP/2 flow-control window per stream: what one call may send before the server has read
/// it. hyper's default is 1 MiB; while the commit queue is full every stream fills its window
/// in memory, so it stays small. An LLM response's tokens are a few bytes each, and a chunk of
/// `--max-chunk-bytes` still flows, one window at a time.
const HTTP2_STREAM_WINDOW_BYTES: u32 = 64 * 1024;

/// HTTP/2 flow-control window per connection: what all calls on one connection together may
/// send before the server has read it. h2 also sizes its flood guard from it: each DATA frame
/// under 256 bytes not yet read costs `256 - its length` from a budget of half this window,
/// and a connection that overdraws it gets GOAWAY `ENHANCE_YOUR_CALM` (hyper does not let the
/// budget be set apart). grpcio sends every message in a frame of its own, so a thousand
/// producers on one channel whose tokens pile up while the server stalls for a moment hold
/// some 20,000 frames of ~15 bytes: ~5 MiB of budget. 16 MiB (a budget of 8 MiB, ~34,000
/// such frames) holds that; 256 KiB (~530 frames) cut every call on the channel. It is also
/// what one connection can make the server hold: at most this many bytes of data plus the
/// budget's worth of frame bookkeeping.
const HTTP2_CONNECTION_WINDOW_BYTES: u32 = 16 * 1024 * 1024;

/// Pings an idle connection this often, so a vanished peer is noticed.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(20);
/// A ping unanswered for this long closes the connection (and interrupts its producer).
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// Opens the store from `config` (blocking), creating the data directory if needed.
///
/// Fails with `DataDir` when the directory cannot be created, or as [`Store::open`] does.
pub fn open_store(config: &Config) -> Result<Store> {
    let data_dir_error = |source| Error::DataDir {
        path: config.server.data_dir.clone(),
        source,
    };
    if config.server.data_dir.exists() && !config.server.data_dir.is_dir() {
        return Err(data_dir_error(std::io::Error::new(
            std::io::ErrorKind::NotADirectory,
            "it exists and is not a directory",
        )));
    }
    std::fs::create_dir_all(&config.server.data_dir).map_err(data_dir_error)?;
    let options = config.store.options(config.cluster.is_some());
    Store::open(&config.database_path(), options)
}

/// Serves tapedeck on `listener` (gRPC) and `http_listener` (the HTTP face, if given) with
/// `store` until `shutdown` resolves. Then `/readyz` and gRPC health report the server not
/// ready, producers are told the server is shutting down (their recordings stay live,
/// detached, for them to resume after the restart), replays end, the commit pipeline drains
/// and the database is closed; all within about twice `config.server.shutdown_timeout`.
///
/// Fails when serving fails (the listener breaks).
pub async fn run(
    listener: TcpListener,
    http_listener: Option<TcpListener>,
    store: Store,
    config: &Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    // Bound already (port 0 included): the readiness line says where.
    let http_addr = match http_listener.as_ref().map(TcpListener::local_addr) {
        Some(Ok(addr)) => addr.to_string(),
        Some(Err(_)) | None => "off".to_string(),
    };
    let settings = &config.recorder;
    let mut recorder = Recorder::new(store.clone(), settings.limits(), settings.live_policy());
    let lifecycle = Lifecycle::default();
    let sealer = match &config.tier {
        Some(tier_settings) => {
            let tier = Tier::open(&tier_settings.url)?
                .with_tombstone_retention(config.store.tombstone_retention);
            tracing::info!(
                store = tier.describe(),
                "sealing ended recordings into the object store"
            );
            recorder = recorder.with_tier(tier.clone());
            let settings = SealerSettings {
                local_retention: tier_settings.local_retention,
            };
            Some(tokio::spawn(recorder.sealing(
                tier,
                settings,
                lifecycle.stop.clone(),
            )))
        }
        None => None,
    };
    let cluster = match &config.cluster {
        Some(cluster) => Some(start_cluster(cluster, &recorder, config, &lifecycle).await?),
        None => None,
    };
    let guard = Guard::new(&config.access)?;
    let locator = match &config.locator {
        Some(settings) => {
            let locator = Locator::new(settings, &config.server.data_dir)?;
            locator.start(&recorder, &lifecycle.stop);
            Some(locator)
        }
        None => None,
    };
    let readiness = Readiness::default();
    let face = http_listener.is_some().then(|| {
        let cluster = cluster.as_ref().map(|served| served.cluster.clone());
        let bounds = config.http.bounds;
        crate::http::HttpFace::new(
            recorder.clone(),
            guard.clone(),
            bounds,
            config.http.path_prefix.clone(),
            cluster,
            locator.clone(),
            crate::http::FaceHost {
                readiness: readiness.clone(),
                grpc_address: listener.local_addr().ok(),
            },
        )
    });
    if let Some(served) = &cluster {
        let streams = face.as_ref().map(|face| face.streams().clone());
        lifecycle.tasks.spawn(follow_leadership(
            served.cluster.clone(),
            recorder.clone(),
            streams,
            lifecycle.stop.clone(),
        ));
        let exporting = served
            .cluster
            .clone()
            .export_metrics(lifecycle.stop.clone());
        lifecycle.tasks.spawn(exporting);
    }
    let sampler = tokio::spawn(crate::recorder::gauges::sample(
        recorder.clone(),
        config.database_path(),
        lifecycle.stop.clone(),
    ));
    let sweeper = tokio::spawn(recorder.sweeping(
        config.recorder.gc_interval,
        config.recorder.idle_timeout,
        lifecycle.stop.clone(),
    ));
    let http = http_listener.zip(face).map(|(http_listener, face)| {
        let stop = lifecycle.stop.clone();
        tokio::spawn(crate::http::serve(
            http_listener,
            face,
            config.recorder.gc_interval,
            stop.cancelled_owned(),
        ))
    });
    let (routes, health) = grpc::routes(
        &recorder,
        config.recorder.max_chunk_bytes,
        &guard,
        &lifecycle,
        locator.as_ref(),
        cluster.as_ref().map(|served| &served.cluster),
    )
    .await?;
    // Ready (or not, on a node of a cluster) before the first call is taken; kept so by a
    // task until the shutdown begins.
    let followed = cluster.as_ref().map(|served| served.cluster.clone());
    readiness.update(followed.as_ref(), &health).await;
    let shutting_down = tokio_util::sync::CancellationToken::new();
    let following = tokio::spawn(readiness.follow(followed, health, shutting_down.clone()));
    let mut server = Server::builder()
        .initial_connection_window_size(HTTP2_CONNECTION_WINDOW_BYTES)
        .initial_stream_window_size(HTTP2_STREAM_WINDOW_BYTES);
    if let Some(files) = &config.server.tls {
        server = server
            .tls_config(crate::tls::server_config(files)?)
            .map_err(|err| crate::tls::error(&err))?;
    }

    // Shutdown order: not ready (`/readyz`, gRPC health), every producer is told to go (its recording
    // stays live in the file), then replays and calls still waiting for a first message end;
    // only then does tonic stop and wait for the connections.
    let timeout = config.server.shutdown_timeout;
    let draining = recorder.clone();
    let stopping = lifecycle.clone();
    // A node of a cluster whose Raft stopped (its log could not be written) stops too.
    let raft_failed = cluster.as_ref().map(|served| served.cluster.clone());
    let shutdown_signal = async move {
        match raft_failed {
            Some(cluster) => tokio::select! {
                () = shutdown => {}
                reason = cluster.stopped() => {
                    tracing::error!(%reason, "the cluster's Raft stopped; this node stops");
                }
            },
            None => shutdown.await,
        }
        tracing::info!("shutting down");
        // Not ready from now on: `/readyz` answers 503 and gRPC health NOT_SERVING.
        shutting_down.cancel();
        let _ = following.await;
        if tokio::time::timeout(timeout, draining.shutdown())
            .await
            .is_err()
        {
            tracing::warn!("producers did not all let go before the shutdown timeout");
        }
        stopping.stop.cancel();
    };

    let addr = listener.local_addr().map_err(|source| {
        Error::Setup(crate::error::Setup::Listener {
            addr: "the given listener".into(),
            source,
        })
    })?;
    // The readiness line: `addr` and `http_addr` are the bound addresses, so a server given
    // port 0 (`--listen 127.0.0.1:0`) tells its clients here where it is.
    tracing::info!(%addr, %http_addr, tls = config.server.tls.is_some(), auth = guard.is_enabled(), "tapedeck listening");
    // Tokens are small writes: without TCP_NODELAY, Nagle's algorithm holds them back ~40 ms.
    // What one commit answers leaves in one write per connection (not under TLS: see
    // `CoalescedWrites`).
    let tls = config.server.tls.is_some();
    let incoming = TcpIncoming::from(listener)
        .with_nodelay(Some(true))
        .with_keepalive(Some(KEEPALIVE_INTERVAL))
        .map_ok(move |stream| grpc::CoalescedWrites::new(stream, !tls));
    let serve = server
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
        .layer(grpc::TelemetryLayer)
        .layer(grpc::DeadlineLayer)
        .add_routes(routes)
        .serve_with_incoming_shutdown(incoming, shutdown_signal);
    tokio::pin!(serve);
    let served = tokio::select! {
        served = &mut serve => served,
        // Connections that will not close (a client holding a replay open) get a bounded wait.
        () = async { lifecycle.stop.cancelled().await; tokio::time::sleep(timeout).await } => {
            tracing::warn!("connections still open after the shutdown timeout; closing them");
            Ok(())
        }
    };

    lifecycle.stop.cancel();
    lifecycle.tasks.close();
    if tokio::time::timeout(timeout, lifecycle.tasks.wait())
        .await
        .is_err()
    {
        tracing::warn!("producer sessions still running after the shutdown timeout");
    }
    if let Some(http) = http {
        match tokio::time::timeout(timeout, http).await {
            Ok(Ok(Err(err))) => tracing::warn!(error = %err, "the HTTP face failed"),
            Err(_) => tracing::warn!("HTTP connections still open after the shutdown timeout"),
            _ => {}
        }
    }
    let _ = sweeper.await;
    let mut failed = None;
    if let Some(served) = cluster {
        failed = served.cluster.failure();
        served.cluster.shutdown().await;
        let _ = served.server.await;
    }
    if let Some(sealer) = sealer {
        let _ = sealer.await;
    }
    let _ = sampler.await;
    if let Some(locator) = locator
        && tokio::time::timeout(timeout, locator.stopped())
            .await
            .is_err()
    {
        tracing::warn!("the Redis locator's tasks did not stop before the shutdown timeout");
    }
    drop(recorder);
    store.close().await;
    if let Some(reason) = failed {
        return Err(Error::Setup(crate::error::Setup::Cluster { reason }));
    }
    served.map_err(|err| crate::error::Setup::Serve(err).into())
}

/// Each time this node of a cluster comes to lead, it adopts the recordings the node before
/// left live, and takes over the open streams among them; each time it stops, it lets go of
/// them (their writes are the next leader's). Runs until `stop` is cancelled.
async fn follow_leadership(
    cluster: crate::cluster::Cluster,
    recorder: Recorder,
    streams: Option<Arc<crate::recorder::streams::Streams>>,
    stop: tokio_util::sync::CancellationToken,
) {
    let deposing = (recorder.clone(), streams.clone());
    let depose = move || {
        let deposed = deposing.0.depose_all();
        tracing::info!(
            deposed,
            "dropped the live recordings this node held as leader"
        );
        if let Some(streams) = deposing.1.clone() {
            tokio::spawn(async move {
                streams
                    .release_all("this node no longer leads the cluster")
                    .await;
            });
        }
    };
    let adopt = move || {
        let recorder = recorder.clone();
        let streams = streams.clone();
        async move {
            match recorder.adopt_left_live().await {
                Ok(0) => {}
                Ok(adopted) => tracing::info!(
                    adopted,
                    "adopted the recordings left live by the node that led before"
                ),
                Err(err) => {
                    tracing::error!(error = %err, "could not adopt the recordings left live")
                }
            }
            if let Some(streams) = streams
                && let Err(err) = streams.adopt_open().await
            {
                tracing::error!(error = %err, "could not take over the open streams");
            }
        }
    };
    cluster.on_each_lead(stop, adopt, depose).await;
}

/// Binds this node's cluster port and starts it as a node of the cluster.
///
/// Fails when the port cannot be bound or the node cannot start.
async fn start_cluster(
    cluster: &crate::cluster::ClusterConfig,
    recorder: &Recorder,
    config: &Config,
    lifecycle: &Lifecycle,
) -> Result<crate::cluster::Served> {
    let listener = TcpListener::bind(cluster.listen).await.map_err(|source| {
        Error::Setup(crate::error::Setup::Listener {
            addr: format!(
                "--cluster-listen (TAPEDECK_CLUSTER_LISTEN) {}",
                cluster.listen
            ),
            source,
        })
    })?;
    crate::cluster::Cluster::start(
        cluster,
        listener,
        &config.server.data_dir,
        recorder,
        config.server.tls.as_ref(),
        lifecycle.stop.clone(),
    )
    .await
}
