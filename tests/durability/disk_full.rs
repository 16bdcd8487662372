//! A full disk: the server's data dir is on a small tmpfs mounted by the test (root needed, as
//! in CI), and producers on both APIs write until it is full. They get a clear error naming
//! the cause; the server keeps running and replays everything committed, undamaged; new
//! recordings are refused with RESOURCE_EXHAUSTED while the disk is full, and succeed again once
//! space is freed: by deleting other files, or by the sweeper collecting expired recordings.
use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use tapedeck::clock::{Clock, ManualClock, SystemClock};
use tapedeck::pb::{
    CheckRecordingsRequest, RecordRequest, RecordStatus, StreamResponseTokenRequest,
};
use tapedeck::store::{Store, StoreOptions};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;

/// Size of the filesystem the data dir is on.
const DISK_BYTES: u64 = 64 * 1024 * 1024;
/// Free space left for the flood of recordings once the filler file is written.
const FLOOD_ROOM_BYTES: u64 = 4 * 1024 * 1024;
/// Completed recordings made before the flood, and the tokens of each: 12 MiB in all, that
/// the sweeper frees once they expire.
const KEPT: usize = 4;
const KEPT_TOKENS: usize = 48;
const RETENTION: Duration = Duration::from_secs(600);
const CHUNK: usize = 64 * 1024;
/// The space the server sets aside next to its database.
const RESERVE_BYTES: u64 = 4 * 1024 * 1024;
const FLOOD_CURRENT: usize = 3;
const FLOOD_LEGACY: usize = 2;
/// Most one flood producer sends: together they send far more than the disk holds, each
/// stays under the 64 MiB recording limit (appends queue up faster than they commit).
const FLOOD_CAP_BYTES: usize = 20 * 1024 * 1024;

/// A server whose data dir is on its own small tmpfs, with a clock the test moves.
struct FullDisk {
    disk: Tmpfs,
    clock: ManualClock,
    server: TestServer,
    /// What each completed recording holds.
    kept: Vec<(Vec<u8>, String)>,
    /// What each flood producer sent, what it was acknowledged, and how it ended.
    flood: Vec<Flooded>,
}

#[derive(Debug)]
struct Flooded {
    id: Vec<u8>,
    sent: String,
    acked: u64,
    /// The error the producer got, as text.
    error: String,
}

fn filler_path(disk: &Tmpfs) -> std::path::PathBuf {
    disk.path.join("filler")
}

fn last_filler_path(disk: &Tmpfs) -> std::path::PathBuf {
    disk.path.join("filler-last")
}

/// The size of the space the server sets aside for a full disk (0 with none).
fn reserve_bytes(disk: &Tmpfs) -> u64 {
    std::fs::metadata(disk.path.join("data/tapedeck.reserve")).map_or(0, |m| m.len())
}

/// Takes whatever room is left, so that the disk stays full until the test frees space (the
/// server may have handed some back when it reopened its file).
fn take_the_rest(disk: &Tmpfs) {
    use std::io::Write;
    let mut file = std::fs::File::create(last_filler_path(disk)).unwrap();
    let block = vec![0x5au8; 4096];
    loop {
        match file.write_all(&block) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::StorageFull => return,
            Err(err) => panic!("{err}"),
        }
    }
}

/// Mounts the disk, starts the server, records a few recordings, fills the disk with a filler
/// file but [`FLOOD_ROOM_BYTES`], then floods it with producers until every one has failed.
async fn fill_up() -> FullDisk {
    // The server's log, shown if the test fails.
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter("tapedeck=info")
        .try_init();
    let disk = Tmpfs::mount(DISK_BYTES, false);
    let data_dir = disk.path.join("data");
    std::fs::create_dir(&data_dir).unwrap();
    let mut config = test_config(&data_dir);
    config.store.retention = RETENTION;
    config.recorder.gc_interval = Duration::from_millis(100);
    // Real time to start with: a server restarted on the file later keeps what it holds.
    let clock = ManualClock::new(SystemClock.now_ms());
    let store = Store::open(
        &config.database_path(),
        StoreOptions {
            retention: RETENTION,
            clock: Arc::new(clock.clone()),
            ..StoreOptions::default()
        },
    )
    .unwrap();
    let server = TestServer::start_with_store(config, store.clone()).await;
    let current = server.recorder().await;

    let mut kept = Vec::new();
    for i in 0..KEPT {
        let id = format!("kept-{i}").into_bytes();
        let tokens: Vec<String> = (0..KEPT_TOKENS)
            .map(|t| format!("«{i}:{t}» {}", "k".repeat(CHUNK - 16)))
            .collect();
        let refs: Vec<&str> = tokens.iter().map(String::as_str).collect();
        record_all(&current, &id, &refs).await;
        kept.push((id, tokens.concat()));
    }

    // What was committed since the last checkpoint would take its room in the file later.
    store.checkpoint().await.unwrap();
    let free = free_bytes(&disk.path);
    assert!(free > FLOOD_ROOM_BYTES, "only {free} bytes free");
    let filler = vec![0x5au8; (free - FLOOD_ROOM_BYTES) as usize];
    std::fs::write(filler_path(&disk), filler).unwrap();

    // Legacy producers first, each until its first acknowledgement, so that they have
    // acknowledged bytes to check when the disk fills up.
    let mut producers = tokio::task::JoinSet::new();
    let legacy = server.resumer().await;
    let (go, flood_now) = tokio::sync::watch::channel(false);
    for i in 0..FLOOD_LEGACY {
        let (started, first_ack) = tokio::sync::oneshot::channel();
        let name = format!("flood-legacy-{i}");
        producers.spawn(flood_legacy(
            legacy.clone(),
            name,
            started,
            flood_now.clone(),
        ));
        tokio::time::timeout(WAIT, first_ack)
            .await
            .expect("no first legacy ack")
            .expect("a legacy producer failed before its first ack");
    }
    go.send_replace(true);
    for i in 0..FLOOD_CURRENT {
        producers.spawn(flood_current(current.clone(), format!("flood-current-{i}")));
    }
    let mut flood = Vec::new();
    while let Some(flooded) = tokio::time::timeout(Duration::from_secs(60), producers.join_next())
        .await
        .expect("producers still writing a minute later: the disk never filled up?")
    {
        flood.push(flooded.unwrap());
    }
    take_the_rest(&disk);
    // The server gave back half its reserve when the disk filled, and keeps the rest for
    // collecting: this test took every other byte.
    assert_eq!(reserve_bytes(&disk), RESERVE_BYTES / 2);
    FullDisk {
        disk,
        clock,
        server,
        kept,
        flood,
    }
}

/// A producer on the current API writing 64 KiB chunks until the server ends its call.
async fn flood_current(client: RecorderClient, id: String) -> Flooded {
    let (tx, rx) = mpsc::channel(4);
    let mut call = client.clone();
    let answer = tokio::spawn(async move { call.record(ReceiverStream::new(rx)).await });
    let mut sent = String::new();
    let mut message = RecordRequest {
        conversation_id: id.clone().into_bytes(),
        ..Default::default()
    };
    for n in 0..(FLOOD_CAP_BYTES / CHUNK) as u64 {
        let text = format!("{n:08}{}", "c".repeat(CHUNK - 8));
        message.content = text.clone();
        if tx.send(message.clone()).await.is_err() {
            break;
        }
        sent.push_str(&text);
        message.conversation_id.clear();
    }
    let error = match answer.await.unwrap() {
        Ok(response) => {
            let response = response.into_inner();
            assert_eq!(response.status, RecordStatus::Error as i32, "{response:?}");
            response.error_message
        }
        Err(status) => {
            assert_eq!(status.code(), Code::ResourceExhausted, "{status}");
            status.message().to_string()
        }
    };
    Flooded {
        id: id.into_bytes(),
        sent,
        acked: 0,
        error,
    }
}

/// A producer on the legacy API pipelining 64 KiB tokens until one is refused.
/// The first token goes alone; the rest once `go` turns true.
async fn flood_legacy(
    client: ResumerClient,
    id: String,
    started: tokio::sync::oneshot::Sender<()>,
    mut go: tokio::sync::watch::Receiver<bool>,
) -> Flooded {
    let mut started = Some(started);
    let LegacyProducer { tx, mut acks } = LegacyProducer::try_open(&client, None, 4).await.unwrap();
    let sent = Arc::new(std::sync::Mutex::new(String::new()));
    let sender = {
        let (sent, id) = (sent.clone(), id.clone().into_bytes());
        tokio::spawn(async move {
            for n in 0..(FLOOD_CAP_BYTES / CHUNK) as u64 {
                let token = format!("{n:08}{}", "l".repeat(CHUNK - 8));
                sent.lock().unwrap().push_str(&token);
                let request = StreamResponseTokenRequest {
                    conversation_id: if n == 0 { id.clone() } else { Vec::new() },
                    token,
                    complete: false,
                    ..Default::default()
                };
                if tx.send(request).await.is_err() {
                    return;
                }
                if n == 0 && go.wait_for(|go| *go).await.is_err() {
                    return;
                }
            }
        })
    };
    let mut acked = 0;
    let error = loop {
        match acks.message().await {
            Ok(Some(ack)) if ack.success => {
                acked = ack.current_offset as u64;
                if let Some(started) = started.take() {
                    let _ = started.send(());
                }
            }
            Ok(Some(ack)) => break ack.error_message,
            Ok(None) => panic!("legacy stream closed without an error"),
            Err(status) => {
                assert_eq!(status.code(), Code::ResourceExhausted, "{status}");
                break status.message().to_string();
            }
        }
    };
    sender.abort();
    let _ = sender.await;
    let sent = sent.lock().unwrap().clone();
    Flooded {
        id: id.into_bytes(),
        sent,
        acked,
        error,
    }
}

impl FullDisk {
    /// Everything committed is replayed exactly; the flooded recordings hold at least what
    /// was acknowledged, nothing that was not sent, and ended `failed`; none is live.
    async fn check_committed(&self) {
        let client = self.server.recorder().await;
        for (id, text) in &self.kept {
            let replayed = replay_text(&client, id).await.unwrap();
            assert_eq!(&replayed.text, text, "{}", String::from_utf8_lossy(id));
            assert_eq!(replayed.status.as_deref(), Some("completed"));
        }
        let mut replayed_bytes = 0;
        for flooded in &self.flood {
            let name = String::from_utf8_lossy(&flooded.id);
            let replayed = match replay_text(&client, &flooded.id).await {
                Ok(replayed) => replayed,
                // Its start was refused: the disk was full before it began.
                Err(status) if status.code() == Code::NotFound && flooded.acked == 0 => continue,
                Err(status) => panic!("{name}: {status}"),
            };
            replayed_bytes += replayed.text.len();
            assert!(
                replayed.text.len() as u64 >= flooded.acked,
                "{name}: acked {}, replayed {}",
                flooded.acked,
                replayed.text.len()
            );
            assert!(
                flooded.sent.starts_with(&replayed.text),
                "{name}: not a prefix"
            );
            assert_eq!(replayed.status.as_deref(), Some("failed"), "{name}");
        }
        assert!(replayed_bytes > 0, "no flooded recording kept anything");
        let live = client
            .clone()
            .check_recordings(CheckRecordingsRequest {
                conversation_ids: self.flood.iter().map(|f| f.id.clone()).collect(),
            })
            .await
            .unwrap()
            .into_inner()
            .conversation_ids;
        assert!(live.is_empty(), "{live:?}");
    }

    /// A new recording on either API is refused with RESOURCE_EXHAUSTED naming the disk.
    async fn check_refused(&self) {
        let current = self.server.recorder().await;
        let err = Recording::open(&current, b"while-full")
            .await
            .complete()
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::ResourceExhausted, "{err}");
        assert!(err.message().contains("disk is full"), "{err}");
        let legacy = self.server.resumer().await;
        let first = token(b"while-full", "x", true);
        let LegacyProducer { tx: _tx, mut acks } =
            LegacyProducer::try_open(&legacy, Some(first), 1)
                .await
                .unwrap();
        let err = acks.message().await.unwrap_err();
        assert_eq!(err.code(), Code::ResourceExhausted, "{err}");
    }

    /// Retries a new recording until it succeeds (the server looks for room at most once a
    /// second), then checks it replays.
    async fn record_once_there_is_room(&self, id: &[u8]) {
        let client = self.server.recorder().await;
        let mut ticks = tokio::time::interval(Duration::from_millis(100));
        tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                ticks.tick().await;
                let messages = ["room ", "again"].map(|content| RecordRequest {
                    conversation_id: id.to_vec(),
                    content: content.into(),
                    complete: content == "again",
                    ..Default::default()
                });
                let answer = client.clone().record(tokio_stream::iter(messages)).await;
                match answer.map(|a| a.into_inner()) {
                    Ok(answer) if answer.status == RecordStatus::Success as i32 => return,
                    Ok(answer) => {
                        assert!(answer.error_message.contains("disk is full"), "{answer:?}")
                    }
                    Err(status) => assert_eq!(status.code(), Code::ResourceExhausted, "{status}"),
                }
            }
        })
        .await
        .expect("new recordings still refused 20 s after space was freed");
        let replayed = replay_text(&client, id).await.unwrap();
        assert_eq!(replayed.text, "room again");
        assert_eq!(replayed.status.as_deref(), Some("completed"));
    }
}

fn assert_clear_errors(flood: &[Flooded]) {
    assert_eq!(flood.len(), FLOOD_CURRENT + FLOOD_LEGACY);
    for flooded in flood {
        assert!(
            flooded.error.contains("disk is full"),
            "{}: unclear error {:?}",
            String::from_utf8_lossy(&flooded.id),
            flooded.error
        );
    }
    let acked: u64 = flood.iter().map(|f| f.acked).sum();
    assert!(
        acked > 0,
        "no legacy token was acknowledged before the disk filled up"
    );
    println!(
        "disk full: {} producers failed, {acked} legacy bytes acknowledged before; errors: {:?}",
        flood.len(),
        flood
            .iter()
            .map(|f| f.error.as_str())
            .collect::<std::collections::BTreeSet<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_fails_producers_clearly_and_recovers_when_files_are_deleted() {
    if !root_tests_enabled(
        "a_full_disk_fails_producers_clearly_and_recovers_when_files_are_deleted",
    ) {
        return;
    }
    let full = fill_up().await;
    assert_clear_errors(&full.flood);
    full.check_committed().await;
    full.check_refused().await;

    std::fs::remove_file(filler_path(&full.disk)).unwrap();
    std::fs::remove_file(last_filler_path(&full.disk)).unwrap();
    full.record_once_there_is_room(b"after-delete").await;
    full.check_committed().await;
    let FullDisk {
        server, disk, kept, ..
    } = full;
    server.stop().await;

    // The file is sound: it opens cleanly and holds everything.
    let data_dir = disk.path.join("data");
    let server = TestServer::start_in(&data_dir).await;
    let replayed = replay_text(&server.recorder().await, b"after-delete")
        .await
        .unwrap();
    assert_eq!(replayed.text, "room again");
    for (id, text) in &kept {
        let replayed = replay_text(&server.recorder().await, id).await.unwrap();
        assert_eq!(&replayed.text, text);
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_recovers_when_the_sweeper_collects_expired_recordings() {
    if !root_tests_enabled("a_full_disk_recovers_when_the_sweeper_collects_expired_recordings") {
        return;
    }
    let full = fill_up().await;
    assert_clear_errors(&full.flood);
    full.check_committed().await;
    full.check_refused().await;

    // Retention passes: the sweeper deletes everything recorded so far.
    full.clock.advance(RETENTION.as_millis() as u64 + 1);
    let client = full.server.recorder().await;
    let mut ticks = tokio::time::interval(Duration::from_millis(50));
    tokio::time::timeout(WAIT, async {
        loop {
            ticks.tick().await;
            let replay = replay_from(&client, &full.kept[0].0, 0).await.unwrap();
            if read_all(replay)
                .await
                .is_err_and(|s| s.code() == Code::NotFound)
            {
                return;
            }
        }
    })
    .await
    .expect("expired recordings were not collected");
    full.record_once_there_is_room(b"after-sweep").await;
    // The reserve went to the commits that collected, and is whole again.
    assert_eq!(reserve_bytes(&full.disk), RESERVE_BYTES);
    full.server.stop().await;
}
