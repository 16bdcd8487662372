//! `tapedeck.v1.Recordings` and what goes with it, with the real binary: Get, List (paginated
//! over 10,000 recordings) and Delete; tombstones telling "expired" from "unknown"; a
//! recording's own retention; chunked replay; and a database of the previous schema (a
//! fixture written by the code before it) upgraded on open.
use crate::common;

use std::collections::HashSet;
use std::time::Duration;

use common::*;
use tapedeck::id::ConversationId;
use tapedeck::pb::tapedeck::{
    DeleteRecordingRequest, GetRecordingRequest, ListRecordingsRequest, RecordingStatus,
};
use tapedeck::pb::{RecordRequest, RecordStatus, ReplayRequest};
use tapedeck::recorder::{Deck, LivePolicy, Status};
use tapedeck::store::{Store, StoreOptions};
use tonic::Code;

fn get(id: &[u8]) -> GetRecordingRequest {
    GetRecordingRequest {
        conversation_id: id.to_vec(),
    }
}

/// The `tapedeck-reason` of a NOT_FOUND.
fn reason(status: &tonic::Status) -> Option<String> {
    status
        .metadata()
        .get("tapedeck-reason")
        .and_then(|v| v.to_str().ok())
        .map(String::from)
}

/// Polls `check` every 50 ms until it holds, for at most [`WAIT`].
async fn eventually<F: std::future::Future<Output = bool>>(
    what: &str,
    mut check: impl FnMut() -> F,
) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_collected_recording_answers_expired_then_unknown_once_its_tombstone_goes() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--retention",
        "300ms",
        "--tombstone-retention",
        "1500ms",
        "--gc-interval",
        "100ms",
    ];
    let server = BinaryServer::spawn(dir.path(), &args);
    let client = server.recorder().await;
    record_all(&client, b"short-lived", &["gone ", "soon"]).await;

    let never = replay_text(&client, b"never-recorded").await.unwrap_err();
    assert_eq!(never.code(), Code::NotFound);
    assert_eq!(reason(&never).as_deref(), Some("unknown"));
    assert!(never.message().starts_with("unknown: "), "{never:?}");

    eventually("collected", || async {
        replay_text(&client, b"short-lived").await.is_err()
    })
    .await;
    let expired = replay_text(&client, b"short-lived").await.unwrap_err();
    assert_eq!(expired.code(), Code::NotFound);
    assert_eq!(reason(&expired).as_deref(), Some("expired"));
    assert!(expired.message().starts_with("expired: "), "{expired:?}");
    let mut recordings = server.recordings().await;
    let tombstone = recordings
        .get(get(b"short-lived"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(tombstone.status, RecordingStatus::Expired as i32);
    assert_eq!((tombstone.chunk_count, tombstone.byte_length), (2, 9));
    let buried = tombstone.tombstone.expect("a tombstone");
    assert_eq!(buried.final_status, RecordingStatus::Completed as i32);
    assert!(buried.forgotten_at_ms > buried.collected_at_ms);

    eventually("tombstone forgotten", || async {
        let err = replay_text(&client, b"short-lived").await.unwrap_err();
        reason(&err).as_deref() == Some("unknown")
    })
    .await;
    let forgotten = recordings.get(get(b"short-lived")).await.unwrap_err();
    assert_eq!(forgotten.code(), Code::NotFound);
    assert_eq!(reason(&forgotten).as_deref(), Some("unknown"));
}

#[tokio::test]
async fn get_tells_a_live_recording_its_readers_and_its_producer() {
    let dir = tempfile::tempdir().unwrap();
    let server = BinaryServer::spawn(dir.path(), &[]);
    let client = server.recorder().await;
    let live = Recording::open(&client, b"watched").await;
    live.send("ab").await;
    live.send("cd").await;
    let mut stream = replay_when_live(&client, b"watched", 0).await.unwrap();
    let mut seen = String::new();
    while seen.len() < 4 {
        seen.push_str(&stream.message().await.unwrap().unwrap().content);
    }
    let got = server
        .recordings()
        .await
        .get(get(b"watched"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.conversation_id, b"watched");
    assert_eq!(got.status, RecordingStatus::Recording as i32);
    assert_eq!((got.chunk_count, got.byte_length), (2, 4));
    assert_eq!(got.live_readers, 1);
    assert!(got.producer_attached);
    assert_eq!((got.finished_at_ms, got.expires_at_ms), (0, 0));
    assert!(got.created_at_ms > 0);
    live.complete().await.unwrap();
    drop(stream);
    let got = server
        .recordings()
        .await
        .get(get(b"watched"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.status, RecordingStatus::Completed as i32);
    assert!(got.finished_at_ms >= got.created_at_ms);
    assert_eq!(got.expires_at_ms - got.finished_at_ms, 30 * 60 * 1000);
    assert_eq!((got.live_readers, got.producer_attached), (0, false));
}

#[tokio::test]
async fn delete_cancels_the_producer_ends_readers_and_is_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let server = BinaryServer::spawn(dir.path(), &[]);
    let client = server.recorder().await;
    let mut recordings = server.recordings().await;
    let live = Recording::open(&client, b"doomed").await;
    live.send("to be ").await;
    let mut stream = replay_when_live(&client, b"doomed", 0).await.unwrap();
    assert_eq!(stream.message().await.unwrap().unwrap().content, "to be ");

    let deleted = recordings
        .delete(DeleteRecordingRequest {
            conversation_id: b"doomed".to_vec(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(deleted.existed);
    let answer = live.answer().await.unwrap();
    assert_eq!(answer.status, RecordStatus::Cancelled as i32, "{answer:?}");
    let rest = read_all(stream).await.unwrap();
    assert_eq!(rest.status.as_deref(), Some("deleted"));

    let gone = replay_text(&client, b"doomed").await.unwrap_err();
    assert_eq!(gone.code(), Code::NotFound);
    assert_eq!(reason(&gone).as_deref(), Some("deleted"));
    let tombstone = recordings.get(get(b"doomed")).await.unwrap().into_inner();
    assert_eq!(tombstone.status, RecordingStatus::Deleted as i32);
    assert!(tombstone.tombstone.is_some());
    let again = recordings
        .delete(DeleteRecordingRequest {
            conversation_id: b"doomed".to_vec(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!again.existed, "deleting again changes nothing");

    // A finished recording with many chunks goes in bounded commits, all of it.
    let tokens: Vec<String> = (0..25_000).map(|i| format!("{i} ")).collect();
    let refs: Vec<&str> = tokens.iter().map(String::as_str).collect();
    record_all(&client, b"big", &refs).await;
    assert!(
        recordings
            .delete(DeleteRecordingRequest {
                conversation_id: b"big".to_vec(),
            })
            .await
            .unwrap()
            .into_inner()
            .existed
    );
    let gone = replay_text(&client, b"big").await.unwrap_err();
    assert_eq!(reason(&gone).as_deref(), Some("deleted"));
    // The conversation takes a new recording afterwards.
    record_all(&client, b"big", &["again"]).await;
    assert_eq!(replay_text(&client, b"big").await.unwrap().text, "again");
}

/// Writes `count` finished recordings into a new database at `dir` through the library.
async fn fill(dir: &std::path::Path, count: usize) {
    let path = dir.join("tapedeck.redb");
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let policy = LivePolicy {
        max_live: usize::MAX,
        ..LivePolicy::default()
    };
    let recordings = Deck::new(store.clone(), policy);
    for batch in (0..count).collect::<Vec<_>>().chunks(500) {
        futures::future::join_all(batch.iter().map(|&i| {
            let recordings = recordings.clone();
            async move {
                let id = ConversationId::parse(format!("page-{i:05}").as_bytes()).unwrap();
                let mut writer = recordings.start(&id, None).await.unwrap();
                drop(writer.append("x").await.unwrap());
                let status = if i % 10 == 0 {
                    Status::Cancelled
                } else {
                    Status::Completed
                };
                writer.finish(status, None).await.unwrap();
            }
        }))
        .await;
    }
    drop(recordings);
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_pages_through_ten_thousand_recordings_in_start_order() {
    const COUNT: usize = 10_000;
    let dir = tempfile::tempdir().unwrap();
    fill(dir.path(), COUNT).await;
    let server = BinaryServer::spawn(dir.path(), &[]);
    let mut recordings = server.recordings().await;

    let mut seen = HashSet::new();
    let mut last_created = 0;
    let mut token = String::new();
    let mut pages = 0;
    loop {
        let page = recordings
            .list(ListRecordingsRequest {
                page_size: 1000,
                page_token: token.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        pages += 1;
        assert!(page.recordings.len() <= 1000);
        for recording in &page.recordings {
            assert!(recording.created_at_ms >= last_created, "start order");
            last_created = recording.created_at_ms;
            assert!(
                seen.insert(recording.conversation_id.clone()),
                "listed twice"
            );
        }
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(seen.len(), COUNT, "every recording, once");
    assert!(pages <= 11, "{pages} pages");

    // A status filter, and the default page size.
    let cancelled = recordings
        .list(ListRecordingsRequest {
            status: RecordingStatus::Cancelled as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(cancelled.recordings.len(), 100);
    assert!(
        cancelled
            .recordings
            .iter()
            .all(|r| r.status == RecordingStatus::Cancelled as i32)
    );
    assert!(!cancelled.next_page_token.is_empty());

    let bad = recordings
        .list(ListRecordingsRequest {
            page_token: "not a token".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);
    let bad = recordings
        .list(ListRecordingsRequest {
            status: 99,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);
}

#[tokio::test]
async fn a_recording_keeps_its_own_retention() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["--gc-interval", "100ms", "--max-retention", "1h"];
    let server = BinaryServer::spawn(dir.path(), &args);
    let client = server.recorder().await;
    let short = Recording::open_with(
        &client,
        RecordRequest {
            conversation_id: b"one-second".to_vec(),
            retention_seconds: 1,
            ..Default::default()
        },
    )
    .await;
    short.send("brief").await;
    short.complete().await.unwrap();
    record_all(&client, b"default", &["kept"]).await;
    let got = server
        .recordings()
        .await
        .get(get(b"one-second"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.expires_at_ms - got.finished_at_ms, 1000);

    eventually("collected after a second", || async {
        replay_text(&client, b"one-second").await.is_err()
    })
    .await;
    assert_eq!(replay_text(&client, b"default").await.unwrap().text, "kept");

    let too_long = Recording::open_with(
        &client,
        RecordRequest {
            conversation_id: b"forever".to_vec(),
            retention_seconds: 7200,
            ..Default::default()
        },
    )
    .await
    .answer()
    .await
    .unwrap_err();
    assert_eq!(too_long.code(), Code::InvalidArgument);
    assert!(
        too_long.message().contains("--max-retention"),
        "{too_long:?}"
    );
}

#[tokio::test]
async fn a_chunked_replay_sends_each_recorded_chunk_with_its_index_and_commit_time() {
    let dir = tempfile::tempdir().unwrap();
    let server = BinaryServer::spawn(dir.path(), &[]);
    let client = server.recorder().await;
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    record_all(&client, b"chunked", &["Grüße", ", ", "🦀", "!"]).await;
    let mut stream = client
        .clone()
        .replay(ReplayRequest {
            conversation_id: b"chunked".to_vec(),
            resume_offset: 4,
            chunked: true,
        })
        .await
        .unwrap()
        .into_inner();
    let mut messages = Vec::new();
    while let Some(message) = stream.message().await.unwrap() {
        messages.push(message);
    }
    let texts: Vec<&str> = messages.iter().map(|m| m.content.as_str()).collect();
    // From offset 4 (inside the first chunk, after "Grü"): its rest, then each chunk.
    assert_eq!(texts, ["ße", ", ", "🦀", "!"]);
    let indexes: Vec<u64> = messages.iter().map(|m| m.chunk_index).collect();
    assert_eq!(indexes, [0, 1, 2, 3]);
    for message in &messages {
        assert!(message.committed_at_ms >= before, "{message:?}");
    }
    assert_eq!(messages.last().unwrap().offset, 14);
}

#[tokio::test]
async fn a_schema_2_database_is_upgraded_on_open() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/schema2.redb"),
        dir.path().join("tapedeck.redb"),
    )
    .unwrap();
    let (server, log) = BinaryServer::spawn_logged(dir.path(), &[]);
    assert!(
        log.lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("upgraded the database")),
        "no upgrade logged"
    );
    let client = server.recorder().await;
    let completed = replay_text(&client, b"fixture-completed").await.unwrap();
    let expected: String = (0..100).map(|i| format!("tok{i} ü ")).collect();
    assert_eq!(completed.text, expected);
    assert_eq!(completed.status.as_deref(), Some("completed"));
    let cancelled = replay_text(&client, b"fixture-cancelled").await.unwrap();
    assert_eq!(
        (cancelled.text.as_str(), cancelled.status.as_deref()),
        ("cancel me", Some("cancelled"))
    );
    let interrupted = replay_text(&client, b"fixture-interrupted").await.unwrap();
    assert_eq!(interrupted.status.as_deref(), Some("interrupted"));

    // Chunks stored before schema 3 carry no commit time.
    let mut stream = client
        .clone()
        .replay(ReplayRequest {
            conversation_id: b"fixture-cancelled".to_vec(),
            chunked: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let message = stream.message().await.unwrap().unwrap();
    assert_eq!((message.chunk_index, message.committed_at_ms), (0, 0));

    // The recording left live in the old file is detached, and its producer resumes it.
    let resumed = Recording::resume(&client, b"fixture-live", 11).await;
    resumed.send(", and done").await;
    let answer = resumed.complete().await.unwrap();
    assert_eq!(answer.status, RecordStatus::Success as i32, "{answer:?}");
    let live = replay_text(&client, b"fixture-live").await.unwrap();
    assert_eq!(live.text, "still going, and done");

    // Every old row is listed, in start order.
    let listed = server
        .recordings()
        .await
        .list(ListRecordingsRequest::default())
        .await
        .unwrap()
        .into_inner();
    let ids: Vec<&[u8]> = listed
        .recordings
        .iter()
        .map(|r| r.conversation_id.as_slice())
        .collect();
    assert_eq!(
        ids,
        [
            &b"fixture-completed"[..],
            b"fixture-cancelled",
            b"fixture-interrupted",
            b"fixture-live"
        ]
    );
    assert!(server.terminate().await.success());
}
