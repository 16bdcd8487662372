//! Several instances on one Redis and one object store: an ended recording whose owner is gone
//! is served by any instance from its sealed copy, on both gRPC APIs, instead of a redirect to
//! an address no one answers; and a listing from any instance shows it once, from its owner
//! while that runs, from the object store after.
use crate::common;

use std::time::Duration;

use common::redis_server::RedisServer;
use common::{BinaryServer, Recording, WAIT, replay_text};
use redis::AsyncCommands;
use tapedeck::pb::ReplayResponseTokensRequest;
use tapedeck::pb::tapedeck::{GetRecordingRequest, ListRecordingsRequest, Location};

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

/// Every row `server` lists, paging through its own, the other instances' and the object
/// store's pages: (id, owner address) in order.
async fn list_all(server: &BinaryServer) -> Vec<(String, String)> {
    let mut rows = Vec::new();
    let mut page_token = String::new();
    loop {
        let request = ListRecordingsRequest {
            status: 0,
            page_size: 1,
            page_token,
        };
        let page = server.recordings().await.list(request).await.unwrap();
        let page = page.into_inner();
        rows.extend(page.recordings.into_iter().map(|row| {
            let id = String::from_utf8(row.conversation_id).unwrap();
            (id, row.owner_address)
        }));
        if page.next_page_token.is_empty() {
            return rows;
        }
        page_token = page.next_page_token;
    }
}

#[tokio::test]
async fn an_ended_recording_whose_owner_is_gone_is_served_from_the_object_store() {
    let redis = RedisServer::start();
    let objects = tempfile::tempdir().unwrap();
    let url = format!("file://{}", objects.path().display());
    let args = ["--object-store", url.as_str()];
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, _a_log) = BinaryServer::spawn_located(a_dir.path(), &redis.url(), &args);
    let (b, _b_log) = BinaryServer::spawn_located(b_dir.path(), &redis.url(), &args);

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
    // Listed once from B: from A, which keeps its row, not again from the object store. B
    // leaves the object store's copy out only when Redis answers it within the locator's call
    // timeout, and lists both otherwise (documented: one row may then be listed twice, none is
    // missing); on a loaded machine one call can miss it, so B is asked until it settles.
    let a_address = a.addr.to_string();
    let from_a = vec![("owner-gone".to_string(), a_address.clone())];
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let listed = list_all(&b).await;
        if listed == from_a {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "B lists {listed:?}, not once from A"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    a.kill();
    // A's announcement lapses 10 s after it stopped renewing it; dropped here, as it would be
    // then. B then lists the recording from the object store, which names no owner.
    let announcements: Vec<String> = redis.keys("tapedeck:instance:*").await.unwrap();
    for key in announcements {
        let address: String = redis.get(&key).await.unwrap();
        if address == a_address {
            let _: () = redis.del(&key).await.unwrap();
        }
    }
    let from_objects = vec![("owner-gone".to_string(), String::new())];
    assert_eq!(list_all(&b).await, from_objects);

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
