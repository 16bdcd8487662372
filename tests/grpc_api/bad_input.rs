//! Bad input on every call that tests/grpc_api/recorder_api.rs and tests/grpc_api/resumer_api.rs leave out: the
//! legacy API's malformed and missing ids, oversized checks and messages, offsets that turn bad
//! later, producers that never send, and a client that opens 10,000 replays and never reads
//! them. Each gets the status docs/behaviour.md names; nobody else notices.
use crate::common;

use std::time::{Duration, Instant};

use common::*;
use tapedeck::pb::{
    CancelResponseRequest, CheckConversationsRequest, CheckRecordingsRequest, RecordRequest,
    RecordStatus, ReplayRequest, ReplayResponseTokensRequest,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;

/// Unread replays opened by the memory test; `TAPEDECK_UNREAD_REPLAYS` overrides it.
const UNREAD_REPLAYS: usize = 10_000;
/// Connections those replays are spread over (HTTP/2 multiplexes the rest).
const REPLAY_CONNECTIONS: usize = 20;
/// Size of the finished recording every unread replay asks for: far more than any buffer.
const RECORDING_BYTES: usize = 4 * 1024 * 1024;
/// Most the server's resident memory may grow by per unread replay: less than one full 64 KiB
/// message, so no replay reads ahead of its client.
const MAX_RSS_GROWTH_PER_REPLAY_KIB: u64 = 64;

fn unread_replays() -> usize {
    std::env::var("TAPEDECK_UNREAD_REPLAYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(UNREAD_REPLAYS)
}

/// Samples the RSS of `pid` until it has stopped growing (no new high for a second) or
/// `limit` has passed; returns the highest sample. A measurement, not a synchronisation: the
/// server gives no signal when it has buffered all it is going to.
async fn settled_rss_kib(pid: i32, limit: Duration) -> u64 {
    let start = Instant::now();
    let mut ticks = tokio::time::interval(Duration::from_millis(100));
    let (mut high, mut since_high) = (0, 0);
    while start.elapsed() < limit && since_high < 10 {
        ticks.tick().await;
        let rss = rss_kib(pid);
        if rss > high + 1024 {
            (high, since_high) = (rss, 0);
        } else {
            since_high += 1;
        }
    }
    high.max(rss_kib(pid))
}

#[tokio::test]
async fn ten_thousand_unread_replays_keep_server_memory_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let server = BinaryServer::spawn(dir.path(), &[]);
    let client = server.recorder().await;
    // Tokens of 4 KiB: more than an LLM token, small next to a message.
    let chunk = "x".repeat(4 * 1024);
    let tokens: Vec<&str> = (0..RECORDING_BYTES / chunk.len())
        .map(|_| chunk.as_str())
        .collect();
    record_all(&client, b"big", &tokens).await;
    let before = settled_rss_kib(server.pid(), Duration::from_secs(5)).await;

    let count = unread_replays();
    let mut channels = Vec::new();
    for _ in 0..REPLAY_CONNECTIONS {
        channels.push(server.recorder().await);
    }
    let opened = Instant::now();
    let mut opening = tokio::task::JoinSet::new();
    for i in 0..count {
        let mut channel = channels[i % REPLAY_CONNECTIONS].clone();
        opening.spawn(async move {
            channel
                .replay(ReplayRequest {
                    conversation_id: b"big".to_vec(),
                    resume_offset: 0,
                    ..Default::default()
                })
                .await
                .map(|r| r.into_inner())
        });
    }
    let mut unread = Vec::with_capacity(count);
    while let Some(stream) = tokio::time::timeout(Duration::from_secs(60), opening.join_next())
        .await
        .expect("replays did not open in time")
    {
        unread.push(stream.unwrap().expect("replay refused"));
    }
    let open_time = opened.elapsed();
    let during = settled_rss_kib(server.pid(), Duration::from_secs(20)).await;
    let growth = during.saturating_sub(before);
    println!(
        "{count} unread replays of a {} MiB recording opened in {open_time:?}: server RSS \
         {before} KiB before, {during} KiB with them open (+{growth} KiB, {:.1} KiB each)",
        RECORDING_BYTES >> 20,
        growth as f64 / count as f64
    );

    // Everyone else is served as usual meanwhile.
    let bystander = server.recorder().await;
    let started = Instant::now();
    record_all(&bystander, b"bystander", &["still ", "served"]).await;
    assert_eq!(
        replay_text(&bystander, b"bystander").await.unwrap().text,
        "still served"
    );
    let one = read_all(replay_from(&bystander, b"big", 0).await.unwrap())
        .await
        .unwrap();
    assert_eq!(one.text.len(), RECORDING_BYTES);
    println!(
        "a bystander recorded and replayed in {:?}",
        started.elapsed()
    );
    assert!(
        growth < MAX_RSS_GROWTH_PER_REPLAY_KIB * count as u64,
        "server RSS grew by {growth} KiB for {count} unread replays"
    );
    drop(unread);
}

const NON_UTF8: &[u8] = &[0xff, 0xfe, 0xfd];

async fn legacy_replay_status(client: &ResumerClient, id: &[u8], position: i64) -> Code {
    let opened = client
        .clone()
        .replay_response_tokens(ReplayResponseTokensRequest {
            conversation_id: id.to_vec(),
            resume_position: position,
        })
        .await;
    match opened {
        Err(status) => status.code(),
        Ok(stream) => {
            let mut stream = stream.into_inner();
            loop {
                match tokio::time::timeout(WAIT, stream.message()).await {
                    Ok(Ok(Some(_))) => {}
                    Ok(Ok(None)) => return Code::Ok,
                    Ok(Err(status)) => return status.code(),
                    Err(_) => panic!("legacy replay did not end"),
                }
            }
        }
    }
}

async fn check_current(client: &RecorderClient, ids: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, Code> {
    client
        .clone()
        .check_recordings(CheckRecordingsRequest {
            conversation_ids: ids,
        })
        .await
        .map(|r| r.into_inner().conversation_ids)
        .map_err(|s| s.code())
}

async fn check_legacy(client: &ResumerClient, ids: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, Code> {
    client
        .clone()
        .check_conversations(CheckConversationsRequest {
            conversation_ids: ids,
        })
        .await
        .map(|r| r.into_inner().conversation_ids)
        .map_err(|s| s.code())
}

#[tokio::test]
async fn legacy_calls_with_malformed_ids_are_invalid_argument() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_in(dir.path()).await;
    let legacy = server.resumer().await;
    // A producer minding its own business throughout.
    let mut bystander = LegacyProducer::open(&legacy, Some(token(b"bystander", "a", false))).await;
    assert!(bystander.next().await.unwrap().unwrap().success);

    let long = vec![b'x'; 300];
    for bad in [NON_UTF8, long.as_slice(), b"".as_slice()] {
        let mut producer = LegacyProducer::open(&legacy, Some(token(bad, "x", false))).await;
        let err = producer.next().await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "stream {bad:?}");
        assert!(err.message().contains("conversation_id"), "{err}");
        assert_eq!(
            legacy_replay_status(&legacy, bad, 0).await,
            Code::InvalidArgument,
            "replay {bad:?}"
        );
        let cancel = legacy
            .clone()
            .cancel_response(CancelResponseRequest {
                conversation_id: bad.to_vec(),
            })
            .await
            .unwrap_err();
        assert_eq!(cancel.code(), Code::InvalidArgument, "cancel {bad:?}");
        // A malformed id in a check is left out, as Memory Service does: the live statuses of
        // the rest of the batch still come back.
        assert_eq!(
            check_legacy(&legacy, vec![b"bystander".to_vec(), bad.to_vec()]).await,
            Ok(vec![b"bystander".to_vec()]),
            "check {bad:?}"
        );
    }
    // The empty id is left out of the current API's check too (its other calls are covered
    // by tests/grpc_api/recorder_api.rs).
    assert_eq!(
        check_current(
            &server.recorder().await,
            vec![b"bystander".to_vec(), Vec::new()]
        )
        .await,
        Ok(vec![b"bystander".to_vec()])
    );

    bystander.send(b"", "b", true).await;
    let ack = bystander.next().await.unwrap().unwrap();
    assert!(ack.success && ack.current_offset == 2, "{ack:?}");
    assert_eq!(
        replay_text(&server.recorder().await, b"bystander")
            .await
            .unwrap()
            .text,
        "ab"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_legacy_stream_without_a_first_id_is_invalid_argument() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_in(dir.path()).await;
    let legacy = server.resumer().await;
    let mut no_id = LegacyProducer::open(&legacy, Some(token(b"", "orphan", false))).await;
    let err = no_id.next().await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("conversation_id"), "{err}");

    let LegacyProducer { tx, mut acks } = LegacyProducer::open(&legacy, None).await;
    drop(tx);
    let err = tokio::time::timeout(WAIT, acks.message())
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    server.stop().await;
}

#[tokio::test]
async fn ten_thousand_ids_in_a_check_are_invalid_argument_on_both_apis() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_in(dir.path()).await;
    let current = server.recorder().await;
    let legacy = server.resumer().await;
    let live = Recording::open(&current, b"live-one").await;
    drop(replay_when_live(&current, b"live-one", 0).await.unwrap());

    let ids = |n: usize| -> Vec<Vec<u8>> {
        let mut ids: Vec<Vec<u8>> = (0..n - 1)
            .map(|i| format!("conversation-{i}").into_bytes())
            .collect();
        ids.push(b"live-one".to_vec());
        ids
    };
    assert_eq!(
        check_current(&current, ids(10_000)).await,
        Err(Code::InvalidArgument)
    );
    assert_eq!(
        check_legacy(&legacy, ids(10_000)).await,
        Err(Code::InvalidArgument)
    );
    assert_eq!(
        check_legacy(&legacy, ids(1001)).await,
        Err(Code::InvalidArgument)
    );
    // The limit itself is fine, and the answer is the live one in the caller's form.
    assert_eq!(
        check_current(&current, ids(1000)).await,
        Ok(vec![b"live-one".to_vec()])
    );
    assert_eq!(
        check_legacy(&legacy, ids(1000)).await,
        Ok(vec![b"live-one".to_vec()])
    );
    let answer = live.complete().await.unwrap();
    assert_eq!(answer.status, RecordStatus::Success as i32);
    server.stop().await;
}

#[tokio::test]
async fn the_same_conversation_in_another_form_mid_stream_is_not_a_change() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_in(dir.path()).await;
    let current = server.recorder().await;
    let uuid = uuid::Uuid::from_u128(0x6f1c2b0e_3d4a_4b5c_8d9e_0a1b2c3d4e5f);
    let recording = Recording::open(&current, uuid.as_bytes()).await;
    for (form, content) in [
        (uuid.hyphenated().to_string(), "one "),
        (uuid.simple().to_string().to_uppercase(), "two "),
        (String::from_utf8_lossy(b"").into_owned(), "three"),
    ] {
        recording
            .tx
            .send(RecordRequest {
                conversation_id: form.into_bytes(),
                content: content.into(),
                complete: false,
                ..Default::default()
            })
            .await
            .unwrap();
    }
    let answer = recording.complete().await.unwrap();
    assert_eq!(answer.status, RecordStatus::Success as i32, "{answer:?}");
    assert_eq!(
        replay_text(&current, uuid.as_bytes()).await.unwrap().text,
        "one two three"
    );

    let legacy = server.resumer().await;
    let mut producer =
        LegacyProducer::open(&legacy, Some(token(uuid.as_bytes(), "four ", false))).await;
    producer
        .send(uuid.hyphenated().to_string().as_bytes(), "five", true)
        .await;
    assert!(producer.next().await.unwrap().unwrap().success);
    let ack = producer.next().await.unwrap().unwrap();
    assert!(ack.success && ack.current_offset == 9, "{ack:?}");
    server.stop().await;
}

#[tokio::test]
async fn a_message_over_the_transport_limit_is_resource_exhausted_on_both_apis() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_in(dir.path()).await;
    let current = server.recorder().await;
    // Over the 4 MiB message limit of the transport, not only over --max-chunk-bytes.
    let huge = "x".repeat(5 * 1024 * 1024);

    let recording = Recording::open(&current, b"huge-current").await;
    recording.send("fine").await;
    recording.send(&huge).await;
    let err = recording.answer().await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err}");
    let replayed = replay_text(&current, b"huge-current").await.unwrap();
    assert_eq!(replayed.text, "fine");
    assert_eq!(replayed.status.as_deref(), Some("interrupted"));

    let legacy = server.resumer().await;
    let mut producer =
        LegacyProducer::open(&legacy, Some(token(b"huge-legacy", "fine", false))).await;
    assert!(producer.next().await.unwrap().unwrap().success);
    producer.send(b"", &huge, false).await;
    let err = producer.next().await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err}");
    let replayed = replay_text(&current, b"huge-legacy").await.unwrap();
    assert_eq!(replayed.text, "fine");
    assert_eq!(replayed.status.as_deref(), Some("interrupted"));

    // The server is fine for everyone else.
    record_all(&current, b"after", &["still ", "fine"]).await;
    server.stop().await;
}

#[tokio::test]
async fn a_legacy_recording_over_its_limit_refuses_tokens_and_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.recorder.max_recording_bytes = 10;
    let server = TestServer::start(config).await;
    let legacy = server.resumer().await;
    let mut producer = LegacyProducer::open(&legacy, Some(token(b"capped", "12345", false))).await;
    producer.send(b"", "67890", false).await;
    producer.send(b"", "1", false).await;
    producer.send(b"", "", true).await;
    assert_eq!(producer.next().await.unwrap().unwrap().current_offset, 5);
    assert_eq!(producer.next().await.unwrap().unwrap().current_offset, 10);
    let refused = producer.next().await.unwrap().unwrap();
    assert!(!refused.success, "{refused:?}");
    assert!(
        refused.error_message.contains("max-recording-bytes"),
        "{refused:?}"
    );
    assert_eq!(refused.current_offset, 10);
    let last = producer.next().await.unwrap().unwrap();
    assert!(last.success && last.current_offset == 10, "{last:?}");
    assert!(producer.next().await.unwrap().is_none());
    let replayed = replay_text(&server.recorder().await, b"capped")
        .await
        .unwrap();
    assert_eq!(replayed.text, "1234567890");
    assert_eq!(replayed.status.as_deref(), Some("completed"));
    server.stop().await;
}

#[tokio::test]
async fn resume_offsets_bad_in_other_ways_get_the_named_codes() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_in(dir.path()).await;
    let current = server.recorder().await;
    let legacy = server.resumer().await;
    record_all(&current, b"done", &["abc"]).await;

    // Unknown conversation: an empty OK stream whatever the offset (Memory Service's answer),
    // which reads as NOT_FOUND once its trailer is seen.
    let unknown = read_all(replay_from(&current, b"unknown", 5).await.unwrap()).await;
    assert_eq!(unknown.unwrap_err().code(), Code::NotFound);
    assert_eq!(legacy_replay_status(&legacy, b"unknown", 5).await, Code::Ok);
    // The largest offset the wire can carry, on a finished recording.
    assert_eq!(
        replay_from(&current, b"done", i64::MAX)
            .await
            .unwrap_err()
            .code(),
        Code::OutOfRange
    );
    assert_eq!(
        legacy_replay_status(&legacy, b"done", i64::MAX).await,
        Code::OutOfRange
    );
    // Negative positions through the legacy API (the current API's are in resumer_api.rs).
    assert_eq!(
        legacy_replay_status(&legacy, b"done", -1).await,
        Code::InvalidArgument
    );
    assert_eq!(
        legacy_replay_status(&legacy, b"done", i64::MIN).await,
        Code::InvalidArgument
    );

    // A live resume offset that turns out to fall inside a character once it is recorded.
    let recording = Recording::open(&current, b"growing").await;
    recording.send("a").await;
    let mut first = replay_when_live(&current, b"growing", 0).await.unwrap();
    assert_eq!(first.message().await.unwrap().unwrap().content, "a");
    let waiting = replay_from(&current, b"growing", 2).await.unwrap();
    recording.send("é").await; // bytes 1..3
    let err = read_all(waiting).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    // ... while a resume at the character's end gets the rest.
    let at_end = replay_from(&current, b"growing", 3).await.unwrap();
    recording.send("z").await;
    let answer = recording.complete().await.unwrap();
    assert_eq!(answer.status, RecordStatus::Success as i32);
    assert_eq!(read_all(at_end).await.unwrap().text, "z");
    server.stop().await;
}

#[tokio::test]
async fn producers_that_never_send_anything_block_no_one() {
    let dir = tempfile::tempdir().unwrap();
    let server = BinaryServer::spawn(dir.path(), &["--shutdown-timeout", "1s"]);
    let current = server.recorder().await;
    let legacy = server.resumer().await;

    // Streams that are opened and then say nothing at all.
    let (silent_tx, silent_rx) = mpsc::channel::<RecordRequest>(1);
    let silent_current = tokio::spawn({
        let mut client = current.clone();
        async move { client.record(ReceiverStream::new(silent_rx)).await }
    });
    let silent_legacy = LegacyProducer::open(&legacy, None).await;
    let (quiet_tx, quiet_rx) = mpsc::channel::<RecordRequest>(1);
    let quiet_current = tokio::spawn({
        let mut client = current.clone();
        async move { client.record(ReceiverStream::new(quiet_rx)).await }
    });
    let LegacyProducer {
        tx: quiet_legacy_tx,
        acks: mut quiet_legacy,
    } = LegacyProducer::open(&legacy, None).await;

    // Everyone else records, replays and checks as usual; nothing is live on their account.
    record_all(&current, b"bystander", &["un", "affected"]).await;
    assert_eq!(
        replay_text(&current, b"bystander").await.unwrap().text,
        "unaffected"
    );
    assert_eq!(
        check_current(&current, vec![b"bystander".to_vec()]).await,
        Ok(vec![])
    );

    // A silent producer that finally hangs up is told what was missing.
    drop(quiet_tx);
    let err = tokio::time::timeout(WAIT, quiet_current)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    drop(quiet_legacy_tx);
    let err = tokio::time::timeout(WAIT, quiet_legacy.message())
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);

    // The ones still silent do not hold up a graceful shutdown beyond its timeout.
    let stopping = Instant::now();
    assert!(server.terminate().await.success());
    assert!(
        stopping.elapsed() < Duration::from_secs(5),
        "shutdown took {:?}",
        stopping.elapsed()
    );
    drop((silent_tx, silent_legacy));
    let _ = silent_current.await;
}
