//! Stop over HTTP (`POST /v1/stop/{path}`) against a real server on real sockets: a gRPC
//! producer is told CANCELLED, an HTTP producer's next append is refused as cancelled, a live
//! SSE reader sees the stream end as cancelled; a second stop and a stop of an ended response
//! say what happened; only a writer grant may stop. A legacy producer is told
//! `cancel_requested`.
use crate::common;

use common::*;
use futures::StreamExt;
use reqwest::StatusCode;
use tapedeck::access::{AccessConfig, ApiKey, Role, Secret};
use tapedeck::pb::RecordStatus;

const SECRET: &str = "stop-grant-secret-of-at-least-32-bytes!";
const API_KEY: &str = "agent-key-of-the-stop-test";

fn grant(conversation: &str, role: Role) -> String {
    common::grant(SECRET, &[(conversation, role)])
}

/// The stop URL of `path` on `server`'s HTTP face.
fn stop_url(server: &TestServer, path: &str) -> String {
    server.stream_url(path).replace("/v1/stream/", "/v1/stop/")
}

/// A stop's status and JSON answer (`Value::Null` when the body is not JSON).
async fn stop(url: &str, grant: Option<&str>) -> (StatusCode, serde_json::Value) {
    let mut request = reqwest::Client::new().post(url);
    if let Some(grant) = grant {
        request = request.bearer_auth(grant);
    }
    let answer = request.send().await.unwrap();
    let status = answer.status();
    let body = answer.text().await.unwrap();
    (status, serde_json::from_str(&body).unwrap_or_default())
}

fn outcome(outcome: &str, status: &str) -> serde_json::Value {
    serde_json::json!({ "outcome": outcome, "status": status })
}

/// Reads an SSE response until its control event says the stream closed; that event's JSON.
async fn until_closed(sse: reqwest::Response) -> serde_json::Value {
    let mut body = sse.bytes_stream();
    let mut text = String::new();
    loop {
        let chunk = tokio::time::timeout(WAIT, body.next())
            .await
            .expect("the SSE stream went quiet before it closed")
            .expect("the SSE stream ended before it closed")
            .unwrap();
        text.push_str(std::str::from_utf8(&chunk).unwrap());
        let closed = text
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .filter_map(|data| serde_json::from_str::<serde_json::Value>(data).ok())
            .find(|control| control["streamClosed"] == true);
        if let Some(control) = closed {
            return control;
        }
    }
}

#[tokio::test]
async fn a_stop_tells_a_grpc_producer_cancelled_and_its_live_readers_see_it_end_so() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with_http(test_config(dir.path())).await;
    let recording = Recording::open(&server.recorder().await, b"chat-stop").await;
    recording.send("partial ").await;
    recording.send("answer").await;
    let url = server.stream_url("chat-stop");
    let http = reqwest::Client::new();
    // Both tokens committed before the stop.
    wait_for_bytes(&server, "chat-stop", "partial answer".len()).await;
    let sse = http
        .get(format!("{url}?offset=-1&live=sse"))
        .send()
        .await
        .unwrap();
    assert_eq!(sse.status(), StatusCode::OK);
    let following = tokio::spawn(until_closed(sse));

    let stop_here = stop_url(&server, "chat-stop");
    let (status, answer) = stop(&stop_here, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(answer, outcome("stopped", "cancelled"));
    let told = recording.answer().await.unwrap();
    assert_eq!(told.status, RecordStatus::Cancelled as i32, "{told:?}");
    let control = following.await.unwrap();
    assert_eq!(control["tapedeckEndedAs"], "cancelled", "{control}");

    // Again: truthful, and still 200 (it is stopped).
    let (status, answer) = stop(&stop_here, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(answer, outcome("already_stopped", "cancelled"));
    // What was committed before the stop is kept, and a catch-up read says how it ended.
    let read = http.get(format!("{url}?offset=-1")).send().await.unwrap();
    assert_eq!(read.headers()["tapedeck-ended-as"], "cancelled");
    assert_eq!(read.text().await.unwrap(), "partial answer");
    server.stop().await;
}

/// Waits until stream `path` holds `bytes` committed bytes.
async fn wait_for_bytes(server: &TestServer, path: &str, bytes: usize) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let head = reqwest::Client::new()
            .head(server.stream_url(path))
            .send()
            .await
            .unwrap();
        if head
            .headers()
            .get("stream-next-offset")
            .is_some_and(|offset| {
                let offset = offset.to_str().unwrap();
                offset
                    .rsplit('_')
                    .next()
                    .and_then(|n| n.parse::<usize>().ok())
                    == Some(bytes)
            })
        {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "never committed");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn only_a_writer_grant_stops_and_the_http_producers_next_append_is_refused_as_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.access = AccessConfig {
        api_keys: vec![ApiKey::parse(&format!("agent={API_KEY}")).unwrap()],
        jwt_secret: Some(Secret::new(SECRET)),
        ..AccessConfig::default()
    };
    let server = TestServer::start_with_http(config).await;
    let writer = grant("http-stop", Role::Writer);
    let reader = grant("http-stop", Role::Reader);
    let http = reqwest::Client::new();
    let url = server.stream_url("http-stop");
    let created = http
        .put(&url)
        .bearer_auth(&writer)
        .header("content-type", "text/plain")
        .body("tokens ")
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);

    // No credential, a reader grant, another conversation's grant, an API key: refused.
    let stop_here = stop_url(&server, "http-stop");
    assert_eq!(stop(&stop_here, None).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(
        stop(&stop_here, Some(&reader)).await.0,
        StatusCode::FORBIDDEN
    );
    let other = grant("chat-other", Role::Writer);
    assert_eq!(
        stop(&stop_here, Some(&other)).await.0,
        StatusCode::FORBIDDEN
    );
    let by_key = http
        .post(&stop_here)
        .header("x-api-key", API_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(by_key.status(), StatusCode::FORBIDDEN);
    let refusal = by_key.text().await.unwrap();
    assert!(!refusal.contains(API_KEY), "{refusal}");

    let (status, answer) = stop(&stop_here, Some(&writer)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(answer, outcome("stopped", "cancelled"));
    let refused = http
        .post(&url)
        .bearer_auth(&writer)
        .header("content-type", "text/plain")
        .body("more")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::CONFLICT);
    assert_eq!(refused.headers()["stream-closed"], "true");
    assert!(refused.text().await.unwrap().contains("cancelled"));
    let read = http
        .get(format!("{url}?offset=-1"))
        .bearer_auth(&reader)
        .send()
        .await
        .unwrap();
    assert_eq!(read.headers()["stream-closed"], "true");
    assert_eq!(read.headers()["tapedeck-ended-as"], "cancelled");
    assert_eq!(read.text().await.unwrap(), "tokens ");
    server.stop().await;
}

#[tokio::test]
async fn a_stop_of_an_ended_or_unknown_response_says_what_happened() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with_http(test_config(dir.path())).await;
    record_all(&server.recorder().await, b"chat-done", &["all ", "said"]).await;
    let (status, answer) = stop(&stop_url(&server, "chat-done"), None).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(answer, outcome("already_ended", "completed"));

    let (status, _) = stop(&stop_url(&server, "never-recorded"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let wrong_method = reqwest::Client::new()
        .get(stop_url(&server, "chat-done"))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong_method.status(), StatusCode::METHOD_NOT_ALLOWED);
    // A closed HTTP stream reads as completed.
    let url = server.stream_url("closed-stream");
    let created = reqwest::Client::new()
        .put(&url)
        .header("content-type", "text/plain")
        .header("stream-closed", "true")
        .body("done")
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    let (status, answer) = stop(&stop_url(&server, "closed-stream"), None).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(answer, outcome("already_ended", "completed"));
    server.stop().await;
}

#[tokio::test]
async fn a_stop_tells_a_legacy_producer_cancel_requested() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with_http(test_config(dir.path())).await;
    let mut legacy = LegacyProducer::start(&server.resumer().await, b"legacy-stop", "tok").await;
    assert!(legacy.ack().await.success);
    let (status, answer) = stop(&stop_url(&server, "legacy-stop"), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(answer, outcome("stopped", "cancelled"));
    assert!(legacy.ack().await.cancel_requested);
    server.stop().await;
}
