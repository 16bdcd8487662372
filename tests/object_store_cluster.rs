//! Several instances on one Redis and one object store: an ended recording whose owner is gone
//! is served by any instance from its sealed copy, on both gRPC APIs, instead of a redirect to
//! an address no one answers.
mod common;

use std::time::Duration;

use common::redis_server::RedisServer;
use common::{BinaryServer, Recording, WAIT, replay_text};
use redis::AsyncCommands;
use tapedeck::pb::ReplayResponseTokensRequest;
use tapedeck::pb::tapedeck::{GetRecordingRequest, Location};

/// Polls `server`'s Get of `id` until its recording is sealed (kept locally and in the object
/// store).
async fn wait_sealed(server: &BinaryServer, id: &[u8]) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let request = GetRecordingRequest {
            conversation_id: id.to_vec(),
        };
        let got = server.recordings().await.get(request).await.unwrap();
        if got.into_inner().location == Location::LocalAndObjectStore as i32 {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "never sealed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn an_ended_recording_whose_owner_is_gone_is_served_from_the_object_store() {
    let redis = RedisServer::start();
    let objects = tempfile::tempdir().unwrap();
    let url = format!("file://{}", objects.path().display());
    let args = ["--object-store", url.as_str()];
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, _a_log) = BinaryServer::spawn_in_cluster(a_dir.path(), &redis.url(), &args);
    let (b, _b_log) = BinaryServer::spawn_in_cluster(b_dir.path(), &redis.url(), &args);

    let id = b"owner-gone";
    let recording = Recording::open(&a.recorder().await, id).await;
    recording.send("sealed ").await;
    recording.send("before the owner went").await;
    recording.complete().await.unwrap();
    wait_sealed(&a, id).await;
    // Redis names A as the owner of the ended recording before A goes.
    let entry = format!(
        "tapedeck:rec:{:032x}",
        tapedeck::id::ConversationId::parse(id).unwrap().key()
    );
    let mut redis = redis.connection().await;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let status: Option<String> = redis.hget(&entry, "status").await.unwrap();
        if status.as_deref() == Some("completed") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "A never registered its end"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    a.kill();

    // Redis still names A, which no longer answers: B serves the copy itself.
    let replayed = replay_text(&b.recorder().await, id).await.unwrap();
    assert_eq!(replayed.text, "sealed before the owner went");
    assert_eq!(replayed.status.as_deref(), Some("completed"));
    let legacy = ReplayResponseTokensRequest {
        conversation_id: id.to_vec(),
        resume_position: 7,
    };
    let mut tokens = b
        .resumer()
        .await
        .replay_response_tokens(legacy)
        .await
        .expect("served here, not redirected")
        .into_inner();
    let mut text = String::new();
    while let Some(message) = tokens.message().await.unwrap() {
        text.push_str(&message.token);
    }
    assert_eq!(text, "before the owner went");
}
