//! The legacy API, `memory.v1.ResponseResumerService`, and byte-offset resume through both
//! APIs, against a real server.
use crate::common;

use common::*;
use tapedeck::pb::{CancelResponseRequest, CheckConversationsRequest, ReplayResponseTokensRequest};
use tonic::Code;

const ID: &[u8] = b"legacy-conversation";

/// Reads a legacy replay to its end: the text and each message's offset.
async fn legacy_replay(
    client: &ResumerClient,
    id: &[u8],
    position: i64,
) -> Result<(String, Vec<i64>), tonic::Status> {
    let mut stream = client
        .clone()
        .replay_response_tokens(ReplayResponseTokensRequest {
            conversation_id: id.to_vec(),
            resume_position: position,
        })
        .await?
        .into_inner();
    let mut text = String::new();
    let mut offsets = Vec::new();
    tokio::time::timeout(WAIT, async {
        while let Some(message) = stream.message().await? {
            text.push_str(&message.token);
            offsets.push(message.offset);
        }
        Ok::<_, tonic::Status>(())
    })
    .await
    .expect("legacy replay did not end")?;
    Ok((text, offsets))
}

#[tokio::test]
async fn acks_carry_the_cumulative_utf8_byte_length() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_in(dir.path()).await;
    let client = server.resumer().await;
    let mut producer = LegacyProducer::start(&client, ID, "ab").await;
    producer.send(b"", "cdé", false).await;
    producer.send(b"", "f", true).await;
    let mut offsets = Vec::new();
    for _ in 0..3 {
        let ack = producer.ack().await;
        assert!(ack.success, "{ack:?}");
        offsets.push(ack.current_offset);
    }
    assert_eq!(offsets, vec![2, 6, 7]);
    producer.closed().await;
    let (text, ends) = legacy_replay(&client, ID, 0).await.unwrap();
    assert_eq!(text, "abcdéf");
    assert_eq!(ends.last().copied(), Some(7));
    server.stop().await;
}

#[tokio::test]
async fn a_legacy_recording_replays_through_the_current_api_and_back() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_in(dir.path()).await;
    let legacy = server.resumer().await;
    let current = server.recorder().await;

    let mut producer = LegacyProducer::start(&legacy, ID, "from ").await;
    producer.send(b"", "legacy", true).await;
    producer.ack().await;
    producer.ack().await;
    producer.closed().await;
    let replayed = replay_text(&current, ID).await.unwrap();
    assert_eq!(replayed.text, "from legacy");
    assert_eq!(replayed.status.as_deref(), Some("completed"));

    record_all(&current, b"current", &["from ", "current"]).await;
    let (text, _) = legacy_replay(&legacy, b"current", 0).await.unwrap();
    assert_eq!(text, "from current");
    server.stop().await;
}

#[tokio::test]
async fn resume_mid_recording_returns_exactly_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_in(dir.path()).await;
    let current = server.recorder().await;
    let legacy = server.resumer().await;
    let tokens = ["Zürich ", "is ", "schön", " 🚋"];
    record_all(&current, ID, &tokens).await;
    let full: String = tokens.concat();
    for offset in 0..=full.len() {
        if !full.is_char_boundary(offset) {
            continue;
        }
        let replayed = read_all(replay_from(&current, ID, offset as i64).await.unwrap())
            .await
            .unwrap();
        assert_eq!(replayed.text, full[offset..], "current API from {offset}");
        assert_eq!(replayed.end_offset, Some(full.len() as u64));
        let (text, ends) = legacy_replay(&legacy, ID, offset as i64).await.unwrap();
        assert_eq!(text, full[offset..], "legacy API from {offset}");
        if offset < full.len() {
            assert_eq!(ends.last().copied(), Some(full.len() as i64));
        }
    }
    server.stop().await;
}

#[tokio::test]
async fn resume_at_the_live_end_waits_for_new_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_in(dir.path()).await;
    let current = server.recorder().await;
    let legacy = server.resumer().await;
    let mut producer = LegacyProducer::start(&legacy, ID, "abc").await;
    assert_eq!(producer.ack().await.current_offset, 3);

    // At the end, and past it: both wait for the bytes to arrive.
    let at_end = replay_from(&current, ID, 3).await.unwrap();
    let past_end = replay_from(&current, ID, 5).await.unwrap();
    producer.send(b"", "def", false).await;
    assert_eq!(producer.ack().await.current_offset, 6);
    producer.send(b"", "g", true).await;
    assert_eq!(producer.ack().await.current_offset, 7);
    let replayed = read_all(at_end).await.unwrap();
    assert_eq!(replayed.text, "defg");
    assert_eq!(replayed.status.as_deref(), Some("completed"));
    assert_eq!(read_all(past_end).await.unwrap().text, "fg");
    server.stop().await;
}

#[tokio::test]
async fn bad_offsets_are_refused_with_the_named_codes() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_in(dir.path()).await;
    let current = server.recorder().await;
    let legacy = server.resumer().await;
    record_all(&current, ID, &["aé"]).await; // 'é' occupies bytes 1..3

    let inside = replay_from(&current, ID, 2).await.unwrap_err();
    assert_eq!(inside.code(), Code::InvalidArgument);
    assert!(inside.message().contains("UTF-8"), "{}", inside.message());
    let past = replay_from(&current, ID, 4).await.unwrap_err();
    assert_eq!(past.code(), Code::OutOfRange);
    let negative = replay_from(&current, ID, -1).await.unwrap_err();
    assert_eq!(negative.code(), Code::InvalidArgument);
    assert_eq!(
        legacy_replay(&legacy, ID, 2).await.unwrap_err().code(),
        Code::InvalidArgument
    );
    assert_eq!(
        legacy_replay(&legacy, ID, 4).await.unwrap_err().code(),
        Code::OutOfRange
    );
    // The end itself is a valid, empty resume.
    assert_eq!(
        read_all(replay_from(&current, ID, 3).await.unwrap())
            .await
            .unwrap()
            .text,
        ""
    );
    server.stop().await;
}

#[tokio::test]
async fn a_live_resume_past_the_final_end_fails_out_of_range() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_in(dir.path()).await;
    let current = server.recorder().await;
    let legacy = server.resumer().await;
    let mut producer = LegacyProducer::start(&legacy, ID, "abc").await;
    producer.ack().await;
    let waiting = replay_from(&current, ID, 10).await.unwrap();
    producer.send(b"", "d", true).await;
    producer.ack().await;
    let err = read_all(waiting).await.unwrap_err();
    assert_eq!(err.code(), Code::OutOfRange);
    server.stop().await;
}

#[tokio::test]
async fn cancel_reaches_a_legacy_producer_and_cancel_response_waits_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_in(dir.path()).await;
    let legacy = server.resumer().await;
    let mut producer = LegacyProducer::start(&legacy, ID, "working").await;
    assert!(producer.ack().await.success);

    let cancelled = tokio::spawn({
        let legacy = legacy.clone();
        async move {
            legacy
                .clone()
                .cancel_response(CancelResponseRequest {
                    conversation_id: ID.to_vec(),
                })
                .await
                .map(|r| r.into_inner().accepted)
        }
    });
    let ack = producer.ack().await;
    assert!(ack.cancel_requested, "{ack:?}");
    assert_eq!(ack.current_offset, 7);
    producer.closed().await;
    assert!(
        tokio::time::timeout(WAIT, cancelled)
            .await
            .unwrap()
            .unwrap()
            .unwrap()
    );
    let (text, _) = legacy_replay(&legacy, ID, 0).await.unwrap();
    assert_eq!(text, "working");
    server.stop().await;
}

#[tokio::test]
async fn refused_tokens_get_success_false_and_the_stream_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.recorder.max_chunk_bytes = 4;
    let server = TestServer::start(config).await;
    let legacy = server.resumer().await;
    let mut producer = LegacyProducer::start(&legacy, ID, "ok").await;
    producer.send(b"", "too long", false).await;
    producer
        .tx
        .send(token(b"other-conversation", "x", false))
        .await
        .unwrap();
    producer.send(b"", "end", true).await;
    assert!(producer.ack().await.success);
    let too_long = producer.ack().await;
    assert!(
        !too_long.success && too_long.error_message.contains("max-chunk-bytes"),
        "{too_long:?}"
    );
    assert_eq!(too_long.current_offset, 2);
    let changed = producer.ack().await;
    assert!(
        !changed.success && changed.error_message.contains("changed"),
        "{changed:?}"
    );
    let end = producer.ack().await;
    assert!(end.success);
    assert_eq!(end.current_offset, 5);
    producer.closed().await;
    assert_eq!(legacy_replay(&legacy, ID, 0).await.unwrap().0, "okend");
    server.stop().await;
}

#[tokio::test]
async fn check_conversations_and_is_enabled() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_in(dir.path()).await;
    let legacy = server.resumer().await;
    let mut producer = LegacyProducer::start(&legacy, ID, "live").await;
    producer.ack().await;
    let live = legacy
        .clone()
        .check_conversations(CheckConversationsRequest {
            conversation_ids: vec![b"nothing".to_vec(), ID.to_vec()],
        })
        .await
        .unwrap()
        .into_inner()
        .conversation_ids;
    assert_eq!(live, vec![ID.to_vec()]);
    assert!(
        legacy
            .clone()
            .is_enabled(())
            .await
            .unwrap()
            .into_inner()
            .enabled
    );
    producer.send(b"", "", true).await;
    producer.ack().await;
    producer.closed().await;
    server.stop().await;
}

#[tokio::test]
async fn a_legacy_stream_that_ends_without_complete_is_told_so_and_not_completed() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_in(dir.path()).await; // no grace: interrupted at once
    let client = server.resumer().await;
    let mut producer = LegacyProducer::start(&client, ID, "half ").await;
    producer.send(b"", "done?", false).await;
    assert!(producer.ack().await.success);
    assert!(producer.ack().await.success);
    let LegacyProducer { tx, mut acks } = producer;
    drop(tx);
    let last = tokio::time::timeout(WAIT, acks.message())
        .await
        .unwrap()
        .unwrap()
        .expect("a last response saying the recording was not completed");
    assert!(!last.success, "{last:?}");
    assert_eq!(last.current_offset, 10);
    assert!(last.error_message.contains("complete=true"), "{last:?}");
    assert!(
        last.error_message.contains("resume_from_offset=10"),
        "{last:?}"
    );
    let recorder = server.recorder().await;
    let replayed = replay_text(&recorder, ID).await.unwrap();
    assert_eq!(replayed.text, "half done?");
    assert_eq!(replayed.status.as_deref(), Some("interrupted"));
    server.stop().await;
}
