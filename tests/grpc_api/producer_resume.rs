//! Producer continuity with the real binary: a producer whose connection is cut, or whose
//! server is SIGKILLed or SIGTERMed, resumes from its last acknowledged offset by resending
//! everything after it; what was already committed is skipped exactly, and a reader following
//! across the break receives every byte once. Also fencing of a second producer, the grace
//! period running out, resume refusals, and the reject conflict policy.
use crate::common;

use std::time::Duration;

use common::*;
use tapedeck::pb::tapedeck::{GetRecordingRequest, RecordingStatus};
use tapedeck::pb::{RecordStatus, ReplayResponse, StreamResponseTokenRequest};
use tonic::{Code, Streaming};

/// The tokens of the response the producers of these tests stream, in order.
fn tokens(count: usize) -> Vec<String> {
    (0..count).map(|i| format!("tök{i} ")).collect()
}

/// A legacy producer's first request resuming `id` from `from`, carrying `text`.
fn resume_token(id: &[u8], from: i64, text: &str) -> StreamResponseTokenRequest {
    StreamResponseTokenRequest {
        conversation_id: id.to_vec(),
        token: text.to_string(),
        resume_from_offset: Some(from),
        ..Default::default()
    }
}

/// Reads a replay until it has `len` bytes of text (or fails the test after [`WAIT`]).
async fn read_len(stream: &mut Streaming<ReplayResponse>, seen: &mut String, len: usize) {
    tokio::time::timeout(WAIT, async {
        while seen.len() < len {
            let message = stream.message().await.unwrap().expect("replay ended early");
            seen.push_str(&message.content);
        }
    })
    .await
    .expect("replay did not reach the length in time");
}

/// Sends `tokens` on a legacy stream opened by `first` (already sent), reading the acks of
/// the first `acked` tokens; returns the offset of the last ack read.
async fn send_legacy(producer: &mut LegacyProducer, tokens: &[String], acked: usize) -> i64 {
    let mut offset = 0;
    for (i, text) in tokens.iter().enumerate() {
        producer.send(b"", text, false).await;
        if i < acked {
            let ack = producer.ack().await;
            assert!(ack.success, "{ack:?}");
            offset = ack.current_offset;
        }
    }
    offset
}

/// Resumes `id` on the legacy API from `from`, resending `all` from there on (the resent
/// ones that are committed are skipped), then completes; checks every ack.
async fn resume_legacy_and_complete(client: &ResumerClient, id: &[u8], from: i64, all: &[String]) {
    let whole: String = all.concat();
    let rest = &whole[from as usize..];
    // Resent in the same pieces as before: the token the offset falls in is cut there only if
    // the offset is a token boundary, which acks always are.
    let mut pieces = Vec::new();
    let mut at = 0;
    for token in all {
        let end = at + token.len();
        if end > from as usize {
            pieces.push(token.clone());
        }
        at = end;
    }
    assert_eq!(pieces.concat(), rest);
    let mut producer = LegacyProducer::open(client, Some(resume_token(id, from, &pieces[0]))).await;
    for piece in &pieces[1..] {
        producer.send(b"", piece, false).await;
    }
    producer.send(b"", "", true).await;
    let mut expected = from;
    for piece in &pieces {
        expected += piece.len() as i64;
        let ack = producer.ack().await;
        assert!(ack.success, "{ack:?}");
        assert_eq!(ack.current_offset, expected, "acks count each byte once");
    }
    let last = producer.ack().await;
    assert!(
        last.success && last.current_offset == whole.len() as i64,
        "{last:?}"
    );
    producer.closed().await;
}

#[tokio::test]
async fn a_producer_resumes_after_its_connection_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    let server = BinaryServer::spawn(dir.path(), &[]);
    let proxy = CuttableProxy::start(server.addr).await;
    let id = b"cut-connection";
    let all = tokens(60);

    let mut producer =
        LegacyProducer::open(&proxy.resumer().await, Some(token(id, &all[0], false))).await;
    assert!(producer.ack().await.success);
    let acked = send_legacy(&mut producer, &all[1..40], 25).await;
    // A reader follows directly, across the break.
    let reader = server.recorder().await;
    let mut stream = replay_when_live(&reader, id, 0).await.unwrap();
    let mut seen = String::new();
    read_len(&mut stream, &mut seen, acked as usize).await;
    proxy.cut();
    drop(producer);

    // The recording waits, detached, for its producer.
    let mut recordings = server.recordings().await;
    let detached = tokio::time::timeout(WAIT, async {
        loop {
            let got = recordings
                .get(GetRecordingRequest {
                    conversation_id: id.to_vec(),
                })
                .await
                .unwrap()
                .into_inner();
            if !got.producer_attached {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the producer was never detached");
    assert_eq!(detached.status, RecordingStatus::Recording as i32);
    assert_eq!(detached.live_readers, 1);

    resume_legacy_and_complete(&server.resumer().await, id, acked, &all[..40]).await;
    let rest = read_all(stream).await.unwrap();
    seen.push_str(&rest.text);
    assert_eq!(
        seen,
        all[..40].concat(),
        "every byte once, across the break"
    );
    assert_eq!(rest.status.as_deref(), Some("completed"));
}

#[tokio::test]
async fn a_producer_resumes_after_the_server_is_sigkilled() {
    let dir = tempfile::tempdir().unwrap();
    let server = BinaryServer::spawn(dir.path(), &[]);
    let id = b"sigkilled";
    let all = tokens(80);
    let mut producer =
        LegacyProducer::open(&server.resumer().await, Some(token(id, &all[0], false))).await;
    assert!(producer.ack().await.success);
    // Some sent tokens are committed without their ack read: the resume resends them.
    let acked = send_legacy(&mut producer, &all[1..50], 30).await;
    server.kill();
    drop(producer);

    let server = BinaryServer::spawn(dir.path(), &[]);
    let reader = server.recorder().await;
    // After the restart the recording is live, detached: a reader sees what was committed
    // and follows it.
    let mut stream = replay_from(&reader, id, 0).await.unwrap();
    let mut seen = String::new();
    read_len(&mut stream, &mut seen, acked as usize).await;
    resume_legacy_and_complete(&server.resumer().await, id, acked, &all).await;
    let rest = read_all(stream).await.unwrap();
    seen.push_str(&rest.text);
    assert_eq!(seen, all.concat());
    assert_eq!(rest.status.as_deref(), Some("completed"));
}

#[tokio::test]
async fn a_producer_resumes_after_the_server_is_sigtermed() {
    let dir = tempfile::tempdir().unwrap();
    let server = BinaryServer::spawn(dir.path(), &[]);
    let id = b"sigtermed";
    let all = tokens(30);
    let client = server.recorder().await;
    let recording = Recording::open(&client, id).await;
    for token in &all[..20] {
        recording.send(token).await;
    }
    let mut stream = replay_when_live(&client, id, 0).await.unwrap();
    let mut seen = String::new();
    read_len(&mut stream, &mut seen, all[..20].concat().len()).await;
    let stopping = tokio::spawn(server.terminate());
    let answer = recording.answer().await.unwrap();
    assert_eq!(answer.status, RecordStatus::Error as i32);
    assert!(answer.error_message.contains("shutting down"), "{answer:?}");
    // The reader is told to come back, with the offset to come back from.
    let ended = read_all(stream).await.unwrap_err();
    assert_eq!(ended.code(), Code::Unavailable);
    assert!(stopping.await.unwrap().success());

    let server = BinaryServer::spawn(dir.path(), &[]);
    let client = server.recorder().await;
    let stream = replay_from(&client, id, seen.len() as i64).await.unwrap();
    // The producer knows nothing was acknowledged (the current API acks at the end): it
    // resends everything from 0, and what is committed is skipped.
    let again = Recording::resume(&client, id, 0).await;
    for token in &all {
        again.send(token).await;
    }
    let answer = again.complete().await.unwrap();
    assert_eq!(answer.status, RecordStatus::Success as i32, "{answer:?}");
    let rest = read_all(stream).await.unwrap();
    assert_eq!(format!("{seen}{}", rest.text), all.concat(), "no duplicate");
    assert_eq!(rest.status.as_deref(), Some("completed"));
    assert_eq!(replay_text(&client, id).await.unwrap().text, all.concat());
}

#[tokio::test]
async fn a_resume_fences_the_producer_still_attached() {
    let dir = tempfile::tempdir().unwrap();
    let server = BinaryServer::spawn(dir.path(), &[]);
    let id = b"fenced";
    let resumer = server.resumer().await;
    let mut first = LegacyProducer::open(&resumer, Some(token(id, "one ", false))).await;
    assert_eq!(first.ack().await.current_offset, 4);
    first.send(b"", "two ", false).await;
    assert_eq!(first.ack().await.current_offset, 8);

    let mut second = LegacyProducer::open(&resumer, Some(resume_token(id, 8, "three "))).await;
    assert_eq!(second.ack().await.current_offset, 14);
    // The first producer is told, and nothing it sends from now on is stored.
    let told = first.ack().await;
    assert!(!told.success);
    assert!(
        told.error_message.contains("another producer resumed"),
        "{told:?}"
    );
    let _ = first.tx.send(token(b"", "stale ", false)).await;
    second.send(b"", "four", true).await;
    assert_eq!(second.ack().await.current_offset, 18);
    second.closed().await;
    let replayed = replay_text(&server.recorder().await, id).await.unwrap();
    assert_eq!(replayed.text, "one two three four");
    assert_eq!(replayed.status.as_deref(), Some("completed"));
}

#[tokio::test]
async fn a_detached_recording_is_interrupted_after_the_grace_period_and_can_still_resume() {
    let dir = tempfile::tempdir().unwrap();
    let server = BinaryServer::spawn(dir.path(), &["--producer-grace", "500ms"]);
    let proxy = CuttableProxy::start(server.addr).await;
    let client = server.recorder().await;
    let id = b"grace";
    let recording = Recording::open(&proxy.recorder().await, id).await;
    recording.send("before ").await;
    let mut stream = replay_when_live(&client, id, 0).await.unwrap();
    let mut seen = String::new();
    read_len(&mut stream, &mut seen, 7).await;
    // The producer vanishes: its connection is cut mid-stream.
    proxy.cut();
    assert!(recording.answer().await.is_err());
    let rest = read_all(stream).await.unwrap();
    assert_eq!(format!("{seen}{}", rest.text), "before ");
    assert_eq!(rest.status.as_deref(), Some("interrupted"));
    let got = server
        .recordings()
        .await
        .get(GetRecordingRequest {
            conversation_id: id.to_vec(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.status, RecordingStatus::Interrupted as i32);
    assert!(
        got.end_message.contains("did not resume within 500ms"),
        "{got:?}"
    );

    // An interrupted recording is resumed where it stopped.
    let again = Recording::resume(&client, id, 7).await;
    again.send("after").await;
    let answer = again.complete().await.unwrap();
    assert_eq!(answer.status, RecordStatus::Success as i32, "{answer:?}");
    let replayed = replay_text(&client, id).await.unwrap();
    assert_eq!(replayed.text, "before after");
    assert_eq!(replayed.status.as_deref(), Some("completed"));
}

#[tokio::test]
async fn resumes_that_cannot_be_served_say_why() {
    let dir = tempfile::tempdir().unwrap();
    let server = BinaryServer::spawn(dir.path(), &[]);
    let client = server.recorder().await;
    let live = Recording::open(&client, b"live").await;
    live.send("twelve bytes").await;
    let _ = replay_when_live(&client, b"live", 0).await.unwrap();
    let mut seen = String::new();
    read_len(
        &mut replay_from(&client, b"live", 0).await.unwrap(),
        &mut seen,
        12,
    )
    .await;

    let past = Recording::resume(&client, b"live", 13)
        .await
        .answer()
        .await
        .unwrap_err();
    assert_eq!(past.code(), Code::FailedPrecondition);
    assert!(past.message().contains("committed length"), "{past:?}");
    assert!(past.message().contains("12 bytes"), "{past:?}");
    // The refused resume took nothing over: the producer goes on.
    live.send("!").await;
    assert_eq!(
        live.complete().await.unwrap().status,
        RecordStatus::Success as i32
    );

    let done = Recording::resume(&client, b"live", 13)
        .await
        .answer()
        .await
        .unwrap_err();
    assert_eq!(done.code(), Code::FailedPrecondition);
    assert!(
        done.message().contains("already ended as completed"),
        "{done:?}"
    );
    let nothing = Recording::resume(&client, b"never", 5)
        .await
        .answer()
        .await
        .unwrap_err();
    assert_eq!(nothing.code(), Code::FailedPrecondition);
    let negative = Recording::resume(&client, b"live", -1)
        .await
        .answer()
        .await
        .unwrap_err();
    assert_eq!(negative.code(), Code::InvalidArgument);
    // Resuming nothing from 0 is just a start.
    let fresh = Recording::resume(&client, b"fresh", 0).await;
    fresh.send("new").await;
    assert_eq!(
        fresh.complete().await.unwrap().status,
        RecordStatus::Success as i32
    );
    assert_eq!(replay_text(&client, b"fresh").await.unwrap().text, "new");
}

#[tokio::test]
async fn the_reject_policy_refuses_a_second_response_but_not_a_resume() {
    let dir = tempfile::tempdir().unwrap();
    let server = BinaryServer::spawn(dir.path(), &["--on-conflict", "reject"]);
    let client = server.recorder().await;
    let first = Recording::open(&client, b"busy").await;
    first.send("first ").await;
    let _ = replay_when_live(&client, b"busy", 0).await.unwrap();

    let refused = Recording::open(&client, b"busy")
        .await
        .answer()
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::AlreadyExists);
    assert_eq!(
        refused.message(),
        "a response is already being recorded for conversation busy"
    );
    let mut seen = String::new();
    read_len(
        &mut replay_from(&client, b"busy", 0).await.unwrap(),
        &mut seen,
        6,
    )
    .await;
    let resumed = Recording::resume(&client, b"busy", 6).await;
    resumed.send("second").await;
    assert_eq!(
        resumed.complete().await.unwrap().status,
        RecordStatus::Success as i32
    );
    // The first producer was fenced by the resume.
    let answer = first.answer().await.unwrap();
    assert_eq!(answer.status, RecordStatus::Error as i32);
    assert!(
        answer.error_message.contains("another producer resumed"),
        "{answer:?}"
    );
    assert_eq!(
        replay_text(&client, b"busy").await.unwrap().text,
        "first second"
    );
    // Once it has ended, a new response is welcome.
    record_all(&client, b"busy", &["third"]).await;
    assert_eq!(replay_text(&client, b"busy").await.unwrap().text, "third");
}

/// A producer whose connection is cut while its start is still being committed must not leave
/// a recording that looks attached for ever: once started, it detaches like any other.
#[tokio::test]
async fn a_producer_cut_off_during_its_start_leaves_no_recording_stuck_attached() {
    let dir = tempfile::tempdir().unwrap();
    let server = BinaryServer::spawn(dir.path(), &["--producer-grace", "100ms"]);
    let mut recordings = server.recordings().await;
    for attempt in 0..20 {
        let id = format!("cut-at-start-{attempt}").into_bytes();
        let proxy = CuttableProxy::start(server.addr).await;
        let recording = Recording::open(&proxy.recorder().await, &id).await;
        // Cut after a varying pause: before, during or after the start's commit.
        tokio::time::sleep(Duration::from_micros(200 * attempt)).await;
        proxy.cut();
        let _ = recording.answer().await;
        let settled = tokio::time::timeout(WAIT, async {
            loop {
                let got = recordings
                    .get(GetRecordingRequest {
                        conversation_id: id.clone(),
                    })
                    .await;
                match got {
                    Err(status) if status.code() == Code::NotFound => return,
                    Ok(got) if got.get_ref().status != RecordingStatus::Recording as i32 => {
                        return;
                    }
                    _ => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
        })
        .await;
        assert!(settled.is_ok(), "attempt {attempt}: still recording");
    }
}
