//! Behaviours docs/http.md promises that no other test exercised: an HTTP stream counts against
//! `--max-live-recordings` (429 at the limit), a recording made over gRPC is read-only over
//! HTTP (405), an SSE reader resumes from `Last-Event-ID`, a quiet SSE connection gets
//! keepalives and ends after 60 s, and catch-up reads are cached `public`, or `private` with
//! access control on.
use crate::common;

use common::*;
use reqwest::StatusCode;
use tapedeck::access::{AccessConfig, Role, Secret};

const SECRET: &str = "documented-grant-secret-of-at-least-32-bytes";

fn http() -> reqwest::Client {
    reqwest::Client::new()
}

async fn put(url: &str) -> StatusCode {
    http()
        .put(url)
        .header("content-type", "text/plain")
        .send()
        .await
        .unwrap()
        .status()
}

#[tokio::test]
async fn an_open_http_stream_counts_against_the_live_limit() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.recorder.max_live_recordings = 1;
    let server = TestServer::start_with_http(config).await;
    assert_eq!(put(&server.stream_url("first")).await, StatusCode::CREATED);
    let refused = http()
        .put(server.stream_url("second"))
        .header("content-type", "text/plain")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(
        !refused.text().await.unwrap().is_empty(),
        "the refusal says why"
    );
    // Closing the first frees its place.
    let closed = http()
        .post(server.stream_url("first"))
        .header("content-type", "text/plain")
        .header("stream-closed", "true")
        .send()
        .await
        .unwrap();
    assert!(closed.status().is_success(), "{}", closed.status());
    assert_eq!(put(&server.stream_url("second")).await, StatusCode::CREATED);
    server.stop().await;
}

#[tokio::test]
async fn a_post_to_a_recording_made_over_grpc_is_405_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with_http(test_config(dir.path())).await;
    record_all(
        &server.recorder().await,
        b"made-over-grpc",
        &["from ", "gRPC"],
    )
    .await;
    let url = server.stream_url("made-over-grpc");
    let posted = http()
        .post(&url)
        .header("content-type", "text/plain")
        .body("from HTTP")
        .send()
        .await
        .unwrap();
    assert_eq!(posted.status(), StatusCode::METHOD_NOT_ALLOWED);
    let read = http().get(format!("{url}?offset=-1")).send().await.unwrap();
    assert_eq!(read.status(), StatusCode::OK);
    assert_eq!(read.text().await.unwrap(), "from gRPC");
    server.stop().await;
}

#[tokio::test]
async fn an_sse_reader_resumes_from_its_last_event_id() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with_http(test_config(dir.path())).await;
    let url = server.stream_url("resumed");
    assert_eq!(put(&url).await, StatusCode::CREATED);
    let append = |body: &'static str, close: bool| {
        let mut request = http()
            .post(&url)
            .header("content-type", "text/plain")
            .body(body);
        if close {
            request = request.header("stream-closed", "true");
        }
        request.send()
    };
    let first = append("before ", false).await.unwrap();
    let offset = first.headers()["stream-next-offset"]
        .to_str()
        .unwrap()
        .to_string();
    append("after", true).await.unwrap();
    // The query asks for the start; the event id the reader got to wins, as for an
    // EventSource reconnecting by itself.
    let resumed = http()
        .get(format!("{url}?offset=-1&live=sse"))
        .header("last-event-id", &offset)
        .send()
        .await
        .unwrap();
    assert_eq!(resumed.status(), StatusCode::OK);
    let events = tokio::time::timeout(WAIT, resumed.text())
        .await
        .expect("the SSE response of a closed stream ends")
        .unwrap();
    let data: String = events
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter(|data| !data.starts_with('{'))
        .collect();
    assert_eq!(data, "after", "{events}");
    server.stop().await;
}

#[tokio::test]
async fn catch_up_reads_are_cached_publicly_unless_access_control_is_on() {
    for access in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let mut config = test_config(dir.path());
        if access {
            config.access = AccessConfig {
                jwt_secret: Some(Secret::new(SECRET)),
                ..AccessConfig::default()
            };
        }
        let server = TestServer::start_with_http(config).await;
        let writer = grant(SECRET, &[("cached", Role::Writer)]);
        let url = server.stream_url("cached");
        let created = http()
            .put(&url)
            .bearer_auth(&writer)
            .header("content-type", "text/plain")
            .header("stream-closed", "true")
            .body("bytes")
            .send()
            .await
            .unwrap();
        assert_eq!(created.status(), StatusCode::CREATED);
        let read = http()
            .get(format!("{url}?offset=-1"))
            .bearer_auth(&writer)
            .send()
            .await
            .unwrap();
        assert_eq!(read.status(), StatusCode::OK);
        let cache = read.headers()["cache-control"]
            .to_str()
            .unwrap()
            .to_string();
        let expected = if access { "private" } else { "public" };
        assert!(
            cache.starts_with(expected),
            "access control {access}: cache-control {cache:?}"
        );
        server.stop().await;
    }
}

/// An SSE reader of a quiet open stream gets a keepalive comment every 15 s, and the response
/// ends after 60 s, for its client to reconnect from its last offset. (Real time: a minute.)
#[tokio::test]
async fn a_quiet_sse_connection_gets_keepalives_and_ends_after_a_minute() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with_http(test_config(dir.path())).await;
    let url = server.stream_url("quiet");
    assert_eq!(put(&url).await, StatusCode::CREATED);
    let started = std::time::Instant::now();
    let response = http()
        .get(format!("{url}?offset=-1&live=sse"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body = tokio::time::timeout(std::time::Duration::from_secs(90), response.text())
        .await
        .expect("the SSE response ended by itself")
        .unwrap();
    let lasted = started.elapsed();
    assert!(
        lasted >= std::time::Duration::from_secs(59),
        "ended after {lasted:?}, before its minute"
    );
    let keepalives = body.matches(": keepalive").count();
    assert!(
        (3..=4).contains(&keepalives),
        "{keepalives} keepalives in {lasted:?}: {body}"
    );
    server.stop().await;
}
