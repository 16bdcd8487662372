//! A byte replay over a real store joins small chunks into one message and sends a large
//! chunk as a message of its own, wherever the replay starts and however little room a
//! message has.
use std::time::Duration;

use super::read::JOIN_BELOW_BYTES;
use crate::id::ConversationId;
use crate::recorder::test_recorder::fresh_recorder;
use crate::recorder::{Limits, Recorder, StartOptions};

const LIMITS: Limits = Limits {
    max_chunk_bytes: 64 * 1024,
    max_recording_bytes: 1024 * 1024,
    max_retention: Duration::from_secs(3600),
};

fn id() -> ConversationId {
    ConversationId::parse(b"large-chunks").unwrap()
}

/// Records `chunks`, one message each, and completes the recording.
async fn record(recorder: &Recorder, chunks: &[String]) {
    let options = StartOptions {
        resume_from: None,
        retention: None,
    };
    let mut producer = recorder.start(id(), options).await.unwrap();
    let messages = chunks.iter().map(|c| (Vec::new(), c.clone()));
    producer.accept_all(messages).await.unwrap();
    producer.complete().await.unwrap();
}

/// The messages of a byte replay from `offset`, each of at most `max_bytes`.
async fn messages(recorder: &Recorder, offset: u64, max_bytes: usize) -> Vec<String> {
    let mut replay = recorder.replay_bytes(&id(), offset).await.unwrap();
    let mut out = Vec::new();
    while let Some(piece) = replay.next_ready(max_bytes).await.unwrap() {
        out.push(String::from_utf8(piece.data.to_vec()).unwrap());
    }
    out
}

#[tokio::test]
async fn small_chunks_are_joined_and_a_large_one_goes_alone() {
    let (_dir, recorder) = fresh_recorder(LIMITS);
    let large = |c: &str| c.repeat(JOIN_BELOW_BYTES + 100);
    let chunks = [
        large("a"),
        "b1".to_string(),
        "b2".to_string(),
        large("c"),
        large("d"),
        "e".to_string(),
    ];
    record(&recorder, &chunks).await;
    let whole = 8 * 1024 * 1024;
    let expected = [&chunks[0], "b1b2", &chunks[3], &chunks[4], "e"];
    assert_eq!(messages(&recorder, 0, whole).await, expected);
    // From inside the first chunk: the rest of it goes alone, then as before.
    let from_inside = messages(&recorder, 100, whole).await;
    assert_eq!(from_inside[0], chunks[0][100..]);
    assert_eq!(from_inside[1..], expected[1..]);
    // Less room than a large chunk: it is cut, and nothing is lost or repeated.
    let small_room = messages(&recorder, 0, 1000).await;
    assert!(small_room.iter().all(|m| m.len() <= 1000));
    assert_eq!(small_room.concat(), chunks.concat());
}
