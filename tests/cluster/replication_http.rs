//! The HTTP face of a cluster of three real `tapedeck` binaries: a stream written through a
//! follower (its writes run by the leader's face) is read live and as catch-up on the other
//! nodes by the Durable Streams project's own client and the browser's EventSource, byte for
//! byte; a stream open when the leader is SIGKILLed takes appends again through a surviving
//! node once the next leader is elected, and nothing acknowledged is lost; a stop on any
//! node's face ends a producer connected to another; a follower's console hears of a
//! recording started on the leader.
use crate::common;

use std::time::Duration;

use common::WAIT;
use common::node_clients;
use common::trio::Trio;
use reqwest::StatusCode;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_durable_streams_client_writes_through_a_follower_and_reads_on_the_other_nodes() {
    let trio = Trio::start_with_http(&[]);
    let leader = trio.leader().await;
    let followers: Vec<u64> = trio
        .http
        .keys()
        .copied()
        .filter(|id| *id != leader)
        .collect();
    let bases: Vec<String> = [followers[0], followers[1], leader]
        .iter()
        .map(|id| format!("http://{}", trio.http[id]))
        .collect();
    tokio::task::spawn_blocking(move || {
        node_clients::durable_streams_read_back_what_they_wrote(&bases)
    })
    .await
    .unwrap();
}

/// Appends `text` to `url`, retrying while the answer is 503 (no leader yet), up to [`WAIT`];
/// the status it ends with, and its body.
async fn append(client: &reqwest::Client, url: &str, text: &str) -> (StatusCode, String) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let answer = client
            .post(url)
            .header("content-type", "text/plain")
            .body(text.to_string())
            .send()
            .await
            .unwrap();
        let status = answer.status();
        if status != StatusCode::SERVICE_UNAVAILABLE || tokio::time::Instant::now() >= deadline {
            return (status, answer.text().await.unwrap());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_stream_takes_appends_through_a_surviving_node_after_the_leader_is_killed() {
    let mut trio = Trio::start_with_http(&[]);
    let leader = trio.leader().await;
    let followers: Vec<u64> = trio
        .http
        .keys()
        .copied()
        .filter(|id| *id != leader)
        .collect();
    let (writer, reader) = (followers[0], followers[1]);
    let faces = trio.http.clone();
    let at = |id: u64| format!("http://{}/v1/stream/failover", faces[&id]);
    let client = reqwest::Client::new();

    let created = client
        .put(at(writer))
        .header("content-type", "text/plain")
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    assert_eq!(
        created.headers()["location"].to_str().unwrap(),
        at(writer),
        "the location names the node the client asked"
    );
    let mut written = String::new();
    for i in 0..20 {
        let token = format!("before-{i}|");
        let (status, body) = append(&client, &at(writer), &token).await;
        assert_eq!(status, StatusCode::NO_CONTENT, "append {i}: {body}");
        written.push_str(&token);
    }
    // The follower answered once it had applied the writes: it reads them at once.
    let read = client
        .get(format!("{}?offset=-1", at(writer)))
        .send()
        .await
        .unwrap();
    assert_eq!(read.text().await.unwrap(), written);

    trio.kill(leader);
    for i in 0..20 {
        let token = format!("after-{i}|");
        let (status, body) = append(&client, &at(writer), &token).await;
        assert_eq!(
            status,
            StatusCode::NO_CONTENT,
            "append {i} after the leader was killed: {body}"
        );
        written.push_str(&token);
    }
    let closed = client
        .post(at(writer))
        .header("stream-closed", "true")
        .send()
        .await
        .unwrap();
    assert_eq!(closed.status(), StatusCode::NO_CONTENT);
    let read = client
        .get(format!("{}?offset=-1", at(reader)))
        .send()
        .await
        .unwrap();
    assert_eq!(read.headers()["stream-closed"], "true");
    assert_eq!(
        read.text().await.unwrap(),
        written,
        "what node {reader} reads"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_on_any_nodes_face_ends_a_producer_connected_to_another() {
    let trio = Trio::start_with_http(&[]);
    let leader = trio.leader().await;
    let followers: Vec<u64> = trio
        .http
        .keys()
        .copied()
        .filter(|id| *id != leader)
        .collect();
    // A gRPC producer on one follower, an HTTP stream made through the other.
    let producer = trio.nodes[&followers[0]].recorder().await;
    let recording = common::Recording::open(&producer, b"stop-in-cluster").await;
    recording.send("going").await;
    let client = reqwest::Client::new();
    let stream = format!(
        "http://{}/v1/stream/http-stop-in-cluster",
        trio.http[&followers[1]]
    );
    let created = client
        .put(&stream)
        .header("content-type", "text/plain")
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);

    // Stopped through the second follower's face (once it has applied the start) and the
    // first's: the leader makes each cancel.
    for (id, via) in [
        ("stop-in-cluster", followers[1]),
        ("http-stop-in-cluster", followers[0]),
    ] {
        let url = format!("http://{}/v1/stop/{id}", trio.http[&via]);
        let deadline = tokio::time::Instant::now() + WAIT;
        let answer = loop {
            let answer = client.post(&url).send().await.unwrap();
            if answer.status() != StatusCode::NOT_FOUND || tokio::time::Instant::now() > deadline {
                break answer;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert_eq!(answer.status(), StatusCode::OK, "{id}");
        assert!(answer.text().await.unwrap().contains("\"stopped\""), "{id}");
    }
    let told = recording.answer().await.unwrap();
    assert_eq!(
        told.status,
        tapedeck::pb::RecordStatus::Cancelled as i32,
        "{told:?}"
    );
    let (status, body) = append(&client, &stream, "more").await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(body.contains("cancelled"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followers_console_hears_of_a_recording_started_on_the_leader() {
    use futures::StreamExt;
    let trio = Trio::start_with_http(&[]);
    let leader = trio.leader().await;
    let follower = *trio.http.keys().find(|id| **id != leader).unwrap();
    let changes = format!("http://{}/console/api/changes", trio.http[&follower]);
    let events = reqwest::get(&changes).await.unwrap();
    assert_eq!(events.status(), StatusCode::OK);
    let mut events = events.bytes_stream();
    let first = tokio::time::timeout(WAIT, events.next()).await.unwrap();
    assert!(String::from_utf8_lossy(&first.unwrap().unwrap()).contains("event: changed"));

    let producer = trio.nodes[&leader].recorder().await;
    let recording = common::Recording::open(&producer, b"seen-from-a-follower").await;
    recording.send("token").await;
    let next = tokio::time::timeout(WAIT, events.next()).await;
    let next = next
        .expect("the follower's console heard nothing")
        .unwrap()
        .unwrap();
    assert!(String::from_utf8_lossy(&next).contains("event: changed"));
    // And its list shows the recording, from the follower's own applied state.
    let list = format!("http://{}/console/api/recordings", trio.http[&follower]);
    let page = reqwest::get(&list).await.unwrap().text().await.unwrap();
    assert!(page.contains("seen-from-a-follower"), "{page}");
}
