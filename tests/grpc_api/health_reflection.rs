//! The standard gRPC health service and server reflection, so that load balancers and tools
//! like grpcurl work with no proto file.
use crate::common;

use common::*;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;
use tonic_reflection::pb::v1::ServerReflectionRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

#[tokio::test]
async fn health_reports_every_service_serving() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_in(dir.path()).await;
    let mut health = HealthClient::new(channel(&server).await);
    for service in [
        "memory.v1.ResponseRecorderService",
        "memory.v1.ResponseResumerService",
        "tapedeck.v1.Recordings",
        "",
    ] {
        let status = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner()
            .status;
        assert_eq!(status, 1, "{service} is SERVING");
    }
    server.stop().await;
}

#[tokio::test]
async fn health_turns_not_serving_as_shutdown_begins() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_in(dir.path()).await;
    let mut health = HealthClient::new(channel(&server).await);
    let mut watch = health
        .watch(HealthCheckRequest {
            service: "memory.v1.ResponseRecorderService".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let first = watch.message().await.unwrap().unwrap();
    assert_eq!(first.status, 1, "SERVING while running");
    let stopping = tokio::spawn(server.stop());
    let next = tokio::time::timeout(WAIT, watch.message())
        .await
        .expect("a health update as shutdown begins")
        .unwrap()
        .unwrap();
    assert_eq!(next.status, 2, "NOT_SERVING once shutdown begins");
    drop(watch);
    stopping.await.unwrap();
}

#[tokio::test]
async fn reflection_lists_the_services_and_describes_the_extension_fields() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_in(dir.path()).await;
    let mut reflection = ServerReflectionClient::new(channel(&server).await);
    let requests = vec![
        ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        },
        ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::FileContainingSymbol(
                "memory.v1.ReplayRequest".into(),
            )),
        },
    ];
    let mut responses = reflection
        .server_reflection_info(tokio_stream::iter(requests))
        .await
        .unwrap()
        .into_inner();
    let Some(MessageResponse::ListServicesResponse(list)) =
        responses.message().await.unwrap().unwrap().message_response
    else {
        panic!("expected a service list");
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    assert!(
        names.contains(&"memory.v1.ResponseRecorderService".to_string()),
        "{names:?}"
    );
    assert!(
        names.contains(&"memory.v1.ResponseResumerService".to_string()),
        "{names:?}"
    );
    assert!(
        names.contains(&"tapedeck.v1.Recordings".to_string()),
        "{names:?}"
    );
    assert!(
        !names
            .iter()
            .any(|name| name.starts_with("tapedeck.cluster.")),
        "the service between a cluster's nodes is not the clients' to see: {names:?}"
    );
    let Some(MessageResponse::FileDescriptorResponse(files)) =
        responses.message().await.unwrap().unwrap().message_response
    else {
        panic!("expected a file descriptor");
    };
    let described = files.file_descriptor_proto.concat();
    assert!(
        described
            .windows(b"resume_offset".len())
            .any(|w| w == b"resume_offset"),
        "the descriptor names ReplayRequest.resume_offset"
    );
    server.stop().await;
}

async fn channel(server: &TestServer) -> tonic::transport::Channel {
    tonic::transport::Channel::from_shared(server.url())
        .unwrap()
        .connect()
        .await
        .unwrap()
}
