//! A producer's messages appended together (`Producer::accept_all`), over a real store: what
//! is refused and what is skipped as a resend is decided message by message, as if each had
//! come alone; each chunk appended is answered with the length committed after it.
use std::time::Duration;

use crate::error::Error;
use crate::id::ConversationId;
use crate::recorder::test_recorder::fresh_recorder;
use crate::recorder::{Limits, Producer, Recorder, StartOptions};

const LIMITS: Limits = Limits {
    max_chunk_bytes: 8,
    max_recording_bytes: 40,
    max_retention: Duration::from_secs(3600),
};

fn id() -> ConversationId {
    ConversationId::parse(b"batched").unwrap()
}

/// Messages of the recording's own conversation (an empty id), with `contents`.
fn messages<'a>(contents: &'a [&str]) -> impl Iterator<Item = (Vec<u8>, String)> + 'a {
    contents.iter().map(|c| (Vec::new(), c.to_string()))
}

async fn start(recorder: &Recorder, resume_from: Option<u64>) -> Producer {
    let options = StartOptions {
        resume_from,
        retention: None,
    };
    recorder.start(id(), options).await.unwrap()
}

/// Completes the recording and reads it back whole.
async fn complete_and_read(recorder: &Recorder, mut producer: Producer) -> String {
    producer.complete().await.unwrap();
    let mut replay = recorder.replay(&id(), 0).await.unwrap();
    let mut text = String::new();
    while let Some(piece) = replay.next().await.unwrap() {
        text.push_str(std::str::from_utf8(&piece.data).unwrap());
    }
    text
}

#[tokio::test]
async fn a_refused_message_keeps_the_ones_before_it_and_drops_the_ones_after() {
    let (_dir, recorder) = fresh_recorder(LIMITS);
    let mut producer = start(&recorder, None).await;
    let refused = producer
        .accept_all(messages(&["one ", "two ", "too long!", "three"]))
        .await;
    assert!(
        matches!(refused, Err(Error::ChunkTooLarge { .. })),
        "{refused:?}"
    );
    let changed = vec![
        (Vec::new(), "six ".to_string()),
        (b"another conversation".to_vec(), "seven".to_string()),
        (Vec::new(), "eight".to_string()),
    ];
    let refused = producer.accept_all(changed).await;
    assert!(
        matches!(refused, Err(Error::ConversationIdChanged)),
        "{refused:?}"
    );
    // The recording's limit counts the messages admitted before, not yet appended.
    let refused = producer
        .accept_all(messages(&["1234567", "1234567", "1234567", "1234567", "1"]))
        .await;
    assert!(
        matches!(refused, Err(Error::RecordingTooLarge { .. })),
        "{refused:?}"
    );
    assert_eq!(
        complete_and_read(&recorder, producer).await,
        "one two six 1234567123456712345671234567"
    );
}

#[tokio::test]
async fn a_resend_is_skipped_across_the_messages_it_spans() {
    let (_dir, recorder) = fresh_recorder(LIMITS);
    let mut producer = start(&recorder, None).await;
    producer
        .accept_all(messages(&["hello ", "wor"]))
        .await
        .unwrap();
    drop(producer); // detached: the recording waits for a resume
    // Resent from byte 2: "llo " is all resent, "world" is resent up to its "ld".
    let mut resumed = start(&recorder, Some(2)).await;
    resumed
        .accept_all(messages(&["llo ", "world", "!"]))
        .await
        .unwrap();
    assert_eq!(complete_and_read(&recorder, resumed).await, "hello world!");
}

#[tokio::test]
async fn a_resend_that_ends_inside_a_character_is_refused_and_skips_nothing() {
    let (_dir, recorder) = fresh_recorder(LIMITS);
    let mut producer = start(&recorder, None).await;
    producer.accept_all(messages(&["né"])).await.unwrap();
    drop(producer);
    // Resent from 0: after "nx" one resent byte is left, and it would end inside the "é".
    let mut resumed = start(&recorder, Some(0)).await;
    let refused = resumed.accept_all(messages(&["nx", "é!"])).await;
    assert!(
        matches!(refused, Err(Error::ResumeInsideCharacter { offset: 3 })),
        "{refused:?}"
    );
    // What is left of the skip is still whole: one more resent byte, then the new ones.
    resumed.accept_all(messages(&["x", "!"])).await.unwrap();
    assert_eq!(complete_and_read(&recorder, resumed).await, "né!");
}

/// Each appended chunk is answered with the recording's length once committed; a resend
/// skipped whole appends nothing and is not answered. A forwarded session on the leader
/// answers its node with the last of them.
#[tokio::test]
async fn each_appended_chunk_is_answered_with_the_length_committed_after_it() {
    let (_dir, recorder) = fresh_recorder(LIMITS);
    let mut producer = start(&recorder, None).await;
    let answers = producer
        .accept_all_answered(messages(&["one ", "two ", "three"]))
        .await
        .unwrap();
    let mut lengths = Vec::new();
    for answer in answers {
        lengths.push(answer.await.unwrap().unwrap());
    }
    assert_eq!(lengths, [4, 8, 13]);
    drop(producer);
    // Resumed from byte 4: "two " and "three" are resent, so only "!" is appended.
    let mut resumed = start(&recorder, Some(4)).await;
    let answers = resumed
        .accept_all_answered(messages(&["two ", "three", "!"]))
        .await
        .unwrap();
    assert_eq!(answers.len(), 1, "the resend appended nothing of its own");
    assert_eq!(
        answers.into_iter().next().unwrap().await.unwrap().unwrap(),
        14
    );
    let lone = resumed.accept_all_answered(messages(&["?"])).await.unwrap();
    assert_eq!(lone.len(), 1);
    assert_eq!(
        complete_and_read(&recorder, resumed).await,
        "one two three!?"
    );
}
