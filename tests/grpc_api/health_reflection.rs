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

/// What `GET {base}{path}` answers: its status, body and `Cache-Control`.
async fn probe(base: &str, path: &str) -> (u16, String, String) {
    let answer = reqwest::get(format!("{base}{path}")).await.unwrap();
    let status = answer.status().as_u16();
    let cache = answer
        .headers()
        .get("cache-control")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (status, answer.text().await.unwrap(), cache)
}

#[tokio::test]
async fn the_http_probes_answer_with_no_credential_and_say_what_health_says() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    // Access control on: a probe carries no credential, and is answered all the same.
    config.access = tapedeck::access::AccessConfig {
        api_keys: vec![tapedeck::access::ApiKey::parse("agent=a-long-enough-secret").unwrap()],
        ..Default::default()
    };
    let server = TestServer::start_with_http(config).await;
    let base = format!("http://{}", server.http_addr.unwrap());
    let healthz = probe(&base, "/healthz").await;
    assert_eq!(healthz, (200, "ok\n".into(), "no-store".into()));
    let readyz = probe(&base, "/readyz").await;
    assert_eq!(readyz, (200, "ready\n".into(), "no-store".into()));
    let mut health = HealthClient::new(channel(&server).await);
    let request = HealthCheckRequest {
        service: String::new(),
    };
    let status = health.check(request).await.unwrap().into_inner().status;
    assert_eq!(status, 1, "SERVING, as /readyz says");
    // The streams still want a credential.
    let stream = reqwest::get(format!("{base}/v1/stream/probe"))
        .await
        .unwrap();
    assert_eq!(stream.status().as_u16(), 401);
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
