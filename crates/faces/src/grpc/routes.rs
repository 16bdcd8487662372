//! Assembly of the gRPC face: both Memory Service services, health and reflection, over one
//! recorder, sharing the server's task owner and shutdown signal.
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::server::NamedService;
use tonic::service::Routes;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use super::{ClusterService, RecorderService, RecordingsService, ResumerService};
use crate::access::Guard;
use crate::error::{Result, Setup};
use crate::locator::Locator;
use crate::pb::response_recorder_service_server::ResponseRecorderServiceServer;
use crate::pb::response_resumer_service_server::ResponseResumerServiceServer;
use crate::pb::tapedeck::cluster_server::ClusterServer;
use crate::pb::tapedeck::recordings_server::RecordingsServer;
use crate::recorder::Recorder;

/// Headroom for the rest of a request message around its largest allowed chunk.
const MESSAGE_OVERHEAD_BYTES: usize = 64 * 1024;
/// tonic's own default message limit; kept as the floor so a slightly oversized chunk gets
/// tapedeck's clear `ChunkTooLarge` message rather than a decoder error.
const MIN_MESSAGE_BYTES: usize = 4 * 1024 * 1024;

/// What the gRPC services share with the server around them.
#[derive(Clone, Debug, Default)]
pub struct Lifecycle {
    /// Owns the tasks the services spawn; the server waits for them at shutdown.
    pub tasks: TaskTracker,
    /// Cancelled once shutdown has ended every live recording: calls still waiting for a first
    /// message give up.
    pub stop: CancellationToken,
}

/// The gRPC health service's switch.
#[derive(Clone)]
pub struct Health {
    reporter: HealthReporter,
}

impl Health {
    /// Reports the server and every service as SERVING, or NOT_SERVING (load balancers stop
    /// sending new calls); as [`Readiness`](crate::readiness::Readiness) decides.
    pub async fn set_serving(&self, serving: bool) {
        let reporter = &self.reporter;
        let status = if serving {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        reporter.set_service_status("", status).await;
        reporter
            .set_service_status(
                <ResponseRecorderServiceServer<RecorderService> as NamedService>::NAME,
                status,
            )
            .await;
        reporter
            .set_service_status(
                <ResponseResumerServiceServer<ResumerService> as NamedService>::NAME,
                status,
            )
            .await;
        reporter
            .set_service_status(
                <RecordingsServer<RecordingsService> as NamedService>::NAME,
                status,
            )
            .await;
    }
}

/// The gRPC services over `recorder`: the current and the legacy Memory Service APIs,
/// tapedeck's management API (`tapedeck.v1.Recordings`), a cluster node's status
/// (`tapedeck.v1.Cluster`), health
/// (NOT_SERVING until [`Health::set_serving`]) and reflection (v1 and v1alpha), both open to anyone; the two APIs
/// check each call's credentials with `guard` and, with a `locator`, send calls about
/// recordings other instances hold there. Requests may carry a chunk of up to
/// `max_chunk_bytes`.
///
/// Fails with `Reflection` when the reflection service cannot be built.
pub async fn routes(
    recorder: &Recorder,
    max_chunk_bytes: usize,
    guard: &Guard,
    lifecycle: &Lifecycle,
    locator: Option<&Locator>,
    cluster: Option<&crate::cluster::Cluster>,
) -> Result<(Routes, Health)> {
    let max_message = max_chunk_bytes
        .saturating_add(MESSAGE_OVERHEAD_BYTES)
        .max(MIN_MESSAGE_BYTES);
    let (reporter, health_service) = tonic_health::server::health_reporter();
    // NOT_SERVING until the readiness says otherwise (the server sets it before it listens).
    let health = Health { reporter };
    health.set_serving(false).await;
    // Both reflection versions: grpcurl and other tools differ in which one they ask for.
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(crate::pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let reflection_v1 = reflection().build_v1().map_err(Setup::Reflection)?;
    let reflection_v1alpha = reflection().build_v1alpha().map_err(Setup::Reflection)?;
    let locator = locator.cloned();
    let current = RecorderService::new(
        recorder.clone(),
        guard.clone(),
        lifecycle.clone(),
        locator.clone(),
    )
    .with_cluster(cluster.cloned());
    let management = RecordingsService::new(recorder.clone(), guard.clone(), locator.clone());
    let legacy = ResumerService::new(recorder.clone(), guard.clone(), lifecycle.clone(), locator)
        .with_cluster(cluster.cloned());
    let routes = Routes::new(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(
            ResponseRecorderServiceServer::new(current).max_decoding_message_size(max_message),
        )
        .add_service(
            ResponseResumerServiceServer::new(legacy).max_decoding_message_size(max_message),
        )
        .add_service(RecordingsServer::new(management))
        .add_service(ClusterServer::new(ClusterService::new(
            cluster.cloned(),
            guard.clone(),
        )));
    Ok((routes, health))
}
