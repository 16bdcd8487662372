//! The real binary, killed with SIGKILL mid-recording and restarted on the same data dir:
//! everything committed (and every acknowledged byte) is replayable, and the recordings that
//! were live come back detached; restarted with no grace period (`--producer-grace 0s`), they
//! end as `interrupted` at once. Producers resuming after a crash: `producer_resume.rs`.
use crate::common;

use common::*;
use tapedeck::pb::{CheckRecordingsRequest, StreamResponseTokenRequest};

#[tokio::test]
async fn a_recording_survives_sigkill_of_the_binary() {
    let dir = tempfile::tempdir().unwrap();
    let server = BinaryServer::spawn(dir.path(), &[]);
    let client = server.recorder().await;
    record_all(&client, b"finished", &["complete ", "before ", "the crash"]).await;
    let live = Recording::open(&client, b"live").await;
    live.send("half of ").await;
    live.send("an answer").await;
    // A live replay that has seen the tokens proves they are committed.
    let mut stream = replay_when_live(&client, b"live", 0).await.unwrap();
    let mut seen = String::new();
    while seen.len() < "half of an answer".len() {
        let message = tokio::time::timeout(WAIT, stream.message())
            .await
            .expect("the live replay goes on");
        seen.push_str(&message.unwrap().unwrap().content);
    }
    server.kill();

    let server = BinaryServer::spawn(dir.path(), &["--producer-grace", "0s"]);
    let client = server.recorder().await;
    let finished = replay_text(&client, b"finished").await.unwrap();
    assert_eq!(finished.text, "complete before the crash");
    assert_eq!(finished.status.as_deref(), Some("completed"));
    let live_one = replay_text(&client, b"live").await.unwrap();
    assert_eq!(live_one.text, "half of an answer");
    assert_eq!(live_one.status.as_deref(), Some("interrupted"));
    let still_live = client
        .clone()
        .check_recordings(CheckRecordingsRequest {
            conversation_ids: vec![b"live".to_vec()],
        })
        .await
        .unwrap()
        .into_inner()
        .conversation_ids;
    assert!(still_live.is_empty());
    assert!(server.terminate().await.success(), "clean exit on SIGTERM");
}

#[tokio::test]
async fn every_acknowledged_legacy_byte_survives_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let server = BinaryServer::spawn(dir.path(), &[]);
    let client = server.resumer().await;
    let LegacyProducer { tx, mut acks } = LegacyProducer::open(&client, None).await;
    let mut sent = String::new();
    let mut acked = 0i64;
    for i in 0..200 {
        let token = format!("tök{i} ");
        sent.push_str(&token);
        let id = if i == 0 {
            b"legacy-crash".to_vec()
        } else {
            Vec::new()
        };
        tx.send(StreamResponseTokenRequest {
            conversation_id: id,
            token,
            complete: false,
            ..Default::default()
        })
        .await
        .unwrap();
        // Read acks as they come; kill after the 120th without waiting for the rest.
        if i >= 10 {
            let ack = acks.message().await.unwrap().unwrap();
            assert!(ack.success);
            acked = ack.current_offset;
        }
        if i == 120 {
            break;
        }
    }
    server.kill();
    assert!(acked > 0);

    let server = BinaryServer::spawn(dir.path(), &["--producer-grace", "0s"]);
    let replayed = replay_text(&server.recorder().await, b"legacy-crash")
        .await
        .unwrap();
    assert!(
        replayed.text.len() as i64 >= acked,
        "acked {acked}, replayed {}",
        replayed.text.len()
    );
    assert!(
        sent.starts_with(&replayed.text),
        "replay is a prefix of what was sent"
    );
    assert_eq!(replayed.status.as_deref(), Some("interrupted"));
}
