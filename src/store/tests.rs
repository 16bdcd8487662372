//! Store tests against real redb files in temporary directories: round trips, reopening after a
//! clean close and after a SIGKILL, the sweeper, supersede, limits and refusals.
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use redb::ReadableTable;
use tempfile::TempDir;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::schema::{self, SCHEMA_VERSION};
use super::{
    Chunk, Committed, Op, Progress, Status, Store, StoreOptions, SweepReport, TapeWriter, Writer,
    WriterSettings, sweeper,
};
use crate::clock::{Clock, ManualClock};
use crate::error::Error;
use crate::id::ConversationId;

/// Where every test clock starts, in ms since the epoch.
pub(super) const T0: u64 = 1_700_000_000_000;
const RETENTION: Duration = Duration::from_secs(10 * 60);
const IDLE: Duration = Duration::from_secs(60 * 60);
/// Longest any single event may take before a test gives up.
const WAIT: Duration = Duration::from_secs(20);
/// Text of the multibyte round trip: 1-, 2-, 3- and 4-byte UTF-8 characters.
const MULTIBYTE: [&str; 8] = ["Grüße, ", "世界", "! ", "🦀", "naïve café", " ", "ж", "x"];

/// Set (to a database path) only in the child process of `reopen_after_sigkill_...`.
const CHILD_DB_ENV: &str = "TAPEDECK_STORE_TEST_CHILD_DB";
const CHILD_READY: &str = "tapedeck-store-child-ready";
const CHILD_FINISHED: &str = "finished-before-kill";
const CHILD_LIVE: &str = "live-at-kill";
/// The child's live recording holds at least this many acknowledged chunks when it is killed.
const CHILD_ACKED_BEFORE_KILL: u64 = 20;

pub(super) fn db_path(dir: &TempDir) -> PathBuf {
    dir.path().join("tapedeck.redb")
}

pub(super) fn options(clock: &ManualClock) -> StoreOptions {
    StoreOptions {
        retention: RETENTION,
        max_live: 100,
        clock: Arc::new(clock.clone()),
    }
}

pub(super) fn open(dir: &TempDir, clock: &ManualClock) -> Store {
    Store::open(&db_path(dir), options(clock)).unwrap()
}

pub(super) fn fresh() -> (TempDir, ManualClock, Store) {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = open(&dir, &clock);
    (dir, clock, store)
}

pub(super) fn id(name: &str) -> ConversationId {
    ConversationId::parse(name.as_bytes()).unwrap()
}

pub(super) fn ms(duration: Duration) -> u64 {
    duration.as_millis() as u64
}

/// The committed length an ack reports; panics if it does not come in time.
pub(super) async fn acked(committed: Committed) -> crate::Result<u64> {
    tokio::time::timeout(WAIT, committed)
        .await
        .expect("the ack came in time")
        .expect("the writer answered")
}

/// Appends every text and waits for all of them to be committed; returns the committed length.
pub(super) async fn record(writer: &mut TapeWriter, texts: &[&str]) -> u64 {
    let mut last = None;
    for text in texts {
        last = Some(writer.append(text).await.unwrap());
    }
    match last {
        // Commits are in order: the last ack covers every earlier chunk.
        Some(committed) => acked(committed).await.unwrap(),
        None => writer.tape().progress().bytes,
    }
}

pub(super) async fn all_chunks(store: &Store, key: u128, generation: u64) -> Vec<Chunk> {
    store
        .read_chunks(key, generation, 0, usize::MAX)
        .await
        .unwrap()
}

pub(super) fn texts_of(chunks: &[Chunk]) -> Vec<String> {
    chunks.iter().map(|c| c.text.to_string()).collect()
}

/// Chunks of `key` in the file, whatever recording they belong to: in `chunks`, in the
/// journal, or (folded, until the journal's prefix is deleted) in both.
pub(super) fn stored_chunks(store: &Store, key: u128) -> usize {
    let txn = store.inner.db.begin_read().unwrap();
    let chunks = txn.open_table(schema::CHUNKS).unwrap();
    let journal = txn.open_table(schema::JOURNAL).unwrap();
    let mut indexes: std::collections::BTreeSet<u64> = chunks
        .range((key, 0)..=(key, u64::MAX))
        .unwrap()
        .map(|entry| entry.unwrap().0.value().1)
        .collect();
    for entry in journal.iter().unwrap() {
        let (_, value) = entry.unwrap();
        let (entry_key, index, _) = schema::decode_journal(value.value()).unwrap();
        if entry_key == key {
            indexes.insert(index);
        }
    }
    indexes.len()
}

/// `expiry` entries of `key` in the file.
fn expiry_entries(store: &Store, key: u128) -> usize {
    let txn = store.inner.db.begin_read().unwrap();
    let expiry = txn.open_table(schema::EXPIRY).unwrap();
    expiry
        .iter()
        .unwrap()
        .filter(|entry| entry.as_ref().unwrap().0.value().1 == key)
        .count()
}

/// Overwrites the `recordings` row of `key` with bytes that do not decode.
fn corrupt_meta(store: &Store, key: u128) {
    let txn = store.inner.db.begin_write().unwrap();
    {
        let mut recordings = txn.open_table(schema::RECORDINGS).unwrap();
        recordings.insert(key, &[][..]).unwrap();
    }
    txn.commit().unwrap();
}

#[tokio::test]
async fn append_and_read_round_trip_multibyte_utf8() {
    let (_dir, _clock, store) = fresh();
    let mut writer = store.start(&id("round-trip")).await.unwrap();
    let tape = writer.tape().clone();
    let (key, generation) = (tape.key(), tape.generation());

    let mut acks = Vec::new();
    for text in MULTIBYTE {
        acks.push(writer.append(text).await.unwrap());
    }
    let mut end = 0;
    for (ack, text) in acks.into_iter().zip(MULTIBYTE) {
        end += text.len() as u64;
        assert_eq!(acked(ack).await.unwrap(), end, "ack of {text:?}");
    }
    let full = MULTIBYTE.concat();
    assert_eq!(
        tape.progress(),
        Progress {
            chunks: MULTIBYTE.len() as u64,
            bytes: full.len() as u64,
            status: Status::Recording
        }
    );

    let chunks = all_chunks(&store, key, generation).await;
    assert_eq!(texts_of(&chunks), MULTIBYTE);
    let mut offset = 0;
    for (index, chunk) in chunks.iter().enumerate() {
        assert_eq!(chunk.index, index as u64);
        assert_eq!(chunk.offset, offset);
        offset = chunk.end();
    }
    assert_eq!(tape.tail_from(0).unwrap(), chunks);

    // A bounded read returns whole chunks within the budget, and at least one.
    let crab = store.read_chunks(key, generation, 3, 1).await.unwrap();
    assert_eq!(texts_of(&crab), ["🦀"]);
    let budget = MULTIBYTE[0].len() + MULTIBYTE[1].len();
    let two = store.read_chunks(key, generation, 0, budget).await.unwrap();
    assert_eq!(texts_of(&two), &MULTIBYTE[..2]);

    // Every character boundary is found in the chunk that holds it.
    for (offset, _) in full.char_indices() {
        let offset = offset as u64;
        let index = store
            .locate(key, generation, chunks.len() as u64, offset)
            .await
            .unwrap();
        let chunk = &chunks[index as usize];
        assert!(
            chunk.offset <= offset && offset < chunk.end(),
            "offset {offset} located in chunk {index} ({}..{})",
            chunk.offset,
            chunk.end()
        );
    }

    let progress = writer.finish(Status::Completed, None).await.unwrap();
    assert_eq!(progress.status, Status::Completed);
    let meta = store.meta(key).await.unwrap().unwrap();
    assert_eq!(meta.status, Status::Completed);
    assert_eq!(meta.chunk_count, MULTIBYTE.len() as u64);
    assert_eq!(meta.byte_len, full.len() as u64);
    assert_eq!(meta.original_id, b"round-trip");
    assert_eq!(meta.finished_ms, Some(T0));
    assert_eq!(meta.expires_at_ms, Some(T0 + ms(RETENTION)));
    assert_eq!(all_chunks(&store, key, generation).await, chunks);
    assert!(store.live(key).is_none());
}

#[tokio::test]
async fn reopen_after_clean_close_keeps_every_recording() {
    let (dir, clock, store) = fresh();
    let mut finished = store.start(&id("finished")).await.unwrap();
    let finished_key = finished.tape().key();
    record(&mut finished, &MULTIBYTE).await;
    finished.finish(Status::Completed, None).await.unwrap();
    let mut live = store.start(&id("live")).await.unwrap();
    let live_key = live.tape().key();
    record(&mut live, &["still ", "going"]).await;
    let finished_meta = store.meta(finished_key).await.unwrap().unwrap();

    store.close().await;
    // The pipeline is gone: the producer is refused, and nothing it does reaches the file.
    assert!(matches!(
        live.append("late").await,
        Err(Error::ShuttingDown)
    ));
    drop(live);

    let store = open(&dir, &clock);
    assert_eq!(
        store.meta(finished_key).await.unwrap().unwrap(),
        finished_meta
    );
    assert_eq!(
        texts_of(&all_chunks(&store, finished_key, 1).await),
        MULTIBYTE
    );
    // A recording left live by a clean close is interrupted on open, its chunks kept.
    let meta = store.meta(live_key).await.unwrap().unwrap();
    assert_eq!(meta.status, Status::Interrupted);
    assert_eq!((meta.chunk_count, meta.byte_len), (2, 11));
    assert_eq!(
        texts_of(&all_chunks(&store, live_key, 1).await),
        ["still ", "going"]
    );
    assert!(store.live(live_key).is_none());

    // The reopened store takes new work, numbering the conversation's recordings on.
    let again = store.start(&id("finished")).await.unwrap();
    assert_eq!(again.tape().generation(), 2);
    assert_eq!(stored_chunks(&store, finished_key), 0);
}

/// Kills its child on drop, so a failing test leaves no process behind.
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn reopen_after_sigkill_keeps_acked_chunks_and_interrupts_live_recordings() {
    use std::os::unix::process::ExitStatusExt;

    let dir = tempfile::tempdir().unwrap();
    let path = db_path(&dir);
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "store::tests::sigkill_child_records_until_killed",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(CHILD_DB_ENV, &path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut child = ChildGuard(child);
    let stdout = child.0.stdout.take().unwrap();
    let (lines_tx, lines) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });

    // Kill it mid-stream, once it has been told of enough durable chunks.
    let mut ready = false;
    let mut max_acked = None;
    while !ready || max_acked < Some(CHILD_ACKED_BEFORE_KILL) {
        let line = lines
            .recv_timeout(WAIT)
            .expect("the child reports progress in time");
        ready |= line.contains(CHILD_READY);
        if let Some(n) = acked_index(&line) {
            max_acked = max_acked.max(Some(n));
        }
    }
    // SAFETY: kill(2) with a pid we spawned and still own (not yet waited for).
    assert_eq!(unsafe { libc::kill(child.0.id() as i32, libc::SIGKILL) }, 0);
    let status = child.0.wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    reader.join().unwrap();
    // Acks the child printed after the parent stopped looking count too.
    for line in lines.try_iter() {
        if let Some(n) = acked_index(&line) {
            max_acked = max_acked.max(Some(n));
        }
    }
    let max_acked = max_acked.unwrap();

    let clock = ManualClock::new(crate::clock::SystemClock.now_ms());
    let store = Store::open(&path, options(&clock)).unwrap();
    let finished = store.meta(id(CHILD_FINISHED).key()).await.unwrap().unwrap();
    assert_eq!(finished.status, Status::Completed);
    assert_eq!(
        texts_of(&all_chunks(&store, id(CHILD_FINISHED).key(), 1).await),
        MULTIBYTE
    );

    let key = id(CHILD_LIVE).key();
    let live = store.meta(key).await.unwrap().unwrap();
    assert_eq!(live.status, Status::Interrupted);
    assert!(live.error.is_some());
    assert!(
        live.chunk_count > max_acked,
        "{} chunks stored, chunk {max_acked} was acked",
        live.chunk_count
    );
    // Every stored chunk is whole and in place: no gap, nothing torn.
    let chunks = all_chunks(&store, key, 1).await;
    assert_eq!(chunks.len() as u64, live.chunk_count);
    let mut offset = 0;
    for (i, chunk) in chunks.iter().enumerate() {
        assert_eq!(&*chunk.text, child_token(i as u64));
        assert_eq!(chunk.offset, offset);
        offset = chunk.end();
    }
    assert_eq!(offset, live.byte_len);

    // Recovery scheduled the interrupted recording for collection like any finished one.
    clock.advance(ms(RETENTION) + 1);
    let report = sweeper::sweep_once(&store, IDLE).await.unwrap();
    assert_eq!(report.recordings_deleted, 2);
    assert!(store.meta(key).await.unwrap().is_none());
    assert_eq!(stored_chunks(&store, key), 0);
}

fn child_token(i: u64) -> String {
    format!("tok{i}·")
}

fn acked_index(line: &str) -> Option<u64> {
    line.split_whitespace()
        .skip_while(|w| *w != "acked")
        .nth(1)?
        .parse()
        .ok()
}

/// The child of the SIGKILL test; passes at once unless that test started it.
#[tokio::test]
async fn sigkill_child_records_until_killed() {
    let Some(path) = std::env::var_os(CHILD_DB_ENV) else {
        return;
    };
    // The parent holds our stdin; if it dies without killing us, leave without closing.
    std::thread::spawn(|| {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        std::process::exit(3);
    });
    let options = StoreOptions {
        retention: RETENTION,
        ..StoreOptions::default()
    };
    let store = Store::open(Path::new(&path), options).unwrap();
    let mut finished = store.start(&id(CHILD_FINISHED)).await.unwrap();
    record(&mut finished, &MULTIBYTE).await;
    finished.finish(Status::Completed, None).await.unwrap();
    let mut live = store.start(&id(CHILD_LIVE)).await.unwrap();
    println!("{CHILD_READY}");
    for i in 0.. {
        let committed = live.append(&child_token(i)).await.unwrap();
        acked(committed).await.unwrap();
        println!("acked {i}");
    }
}

#[tokio::test]
async fn sweeper_deletes_exactly_the_expired_recordings() {
    let (_dir, clock, store) = fresh();
    let mut expired = Vec::new();
    for name in ["old-completed", "old-cancelled"] {
        let mut writer = store.start(&id(name)).await.unwrap();
        record(&mut writer, &["a", "b", "c"]).await;
        let status = if name == "old-completed" {
            Status::Completed
        } else {
            Status::Cancelled
        };
        writer.finish(status, None).await.unwrap();
        expired.push(id(name).key());
    }
    let mut live = store.start(&id("live")).await.unwrap();
    record(&mut live, &["still", "here"]).await;
    clock.advance(ms(RETENTION) / 2);
    let mut recent = store.start(&id("recent")).await.unwrap();
    record(&mut recent, &["new"]).await;
    recent.finish(Status::Completed, None).await.unwrap();

    clock.advance(ms(RETENTION) / 2 + 1);
    let report = sweeper::sweep_once(&store, IDLE).await.unwrap();
    assert_eq!(
        report,
        SweepReport {
            recordings_deleted: 2,
            chunks_deleted: 6,
            more: false
        }
    );
    for key in expired {
        assert!(store.meta(key).await.unwrap().is_none());
        assert_eq!(stored_chunks(&store, key), 0);
        assert_eq!(expiry_entries(&store, key), 0);
        assert!(matches!(
            store.read_chunks(key, 1, 0, usize::MAX).await,
            Err(Error::RecordingNotFound { .. })
        ));
    }
    let recent_key = id("recent").key();
    assert_eq!(texts_of(&all_chunks(&store, recent_key, 1).await), ["new"]);
    assert_eq!(expiry_entries(&store, recent_key), 1);
    assert_eq!(live.tape().progress().status, Status::Recording);
    assert_eq!(
        texts_of(&all_chunks(&store, live.tape().key(), 1).await),
        ["still", "here"]
    );
    // A live recording keeps taking chunks after the sweep.
    assert_eq!(record(&mut live, &["!"]).await, 10);

    // Nothing more is due: the next sweep is a no-op.
    let again = sweeper::sweep_once(&store, IDLE).await.unwrap();
    assert_eq!(again, SweepReport::default());
}

#[tokio::test]
async fn big_expired_recording_is_deleted_over_bounded_commits() {
    const CHUNKS: usize = 25_000;
    const BUDGET: u64 = 10_000;
    let (_dir, clock, store) = fresh();
    let mut writer = store.start(&id("big")).await.unwrap();
    let key = writer.tape().key();
    let mut last = None;
    for i in 0..CHUNKS {
        last = Some(writer.append(&format!("{i:07} ")).await.unwrap());
    }
    acked(last.unwrap()).await.unwrap();
    writer.finish(Status::Completed, None).await.unwrap();
    assert_eq!(stored_chunks(&store, key), CHUNKS);

    clock.advance(ms(RETENTION) + 1);
    let mut reports = Vec::new();
    loop {
        let report = store.sweep_expired(BUDGET).await.unwrap();
        reports.push(report);
        if !report.more {
            break;
        }
        // Between commits the recording is still known, with what is left of its chunks, but
        // a reader is not handed a recording with its beginning gone.
        assert!(store.meta(key).await.unwrap().is_some());
        let left = CHUNKS - BUDGET as usize * reports.len();
        assert_eq!(stored_chunks(&store, key), left);
        assert!(matches!(
            store.read_chunks(key, 1, 0, usize::MAX).await,
            Err(Error::RecordingNotFound { .. })
        ));
        assert!(matches!(
            store.locate(key, 1, CHUNKS as u64, 0).await,
            Err(Error::RecordingNotFound { .. })
        ));
    }
    let report = |recordings_deleted, chunks_deleted, more| SweepReport {
        recordings_deleted,
        chunks_deleted,
        more,
    };
    assert_eq!(
        reports,
        [
            report(0, BUDGET, true),
            report(0, BUDGET, true),
            report(1, 5_000, false)
        ]
    );
    assert!(store.meta(key).await.unwrap().is_none());
    assert_eq!(stored_chunks(&store, key), 0);
    assert_eq!(expiry_entries(&store, key), 0);
}

#[tokio::test]
async fn idle_recordings_are_interrupted() {
    let (_dir, clock, store) = fresh();
    let mut idle = store.start(&id("idle")).await.unwrap();
    record(&mut idle, &["said ", "little"]).await;
    let mut busy = store.start(&id("busy")).await.unwrap();
    clock.advance(ms(IDLE) / 2);
    record(&mut busy, &["talking"]).await;
    clock.advance(ms(IDLE) / 2);

    sweeper::sweep_once(&store, IDLE).await.unwrap();
    let progress = idle.tape().progress();
    assert_eq!(progress.status, Status::Interrupted);
    assert_eq!(progress.chunks, 2);
    assert!(idle.tape().end_message().unwrap().contains("idle"));
    let meta = store.meta(idle.tape().key()).await.unwrap().unwrap();
    assert_eq!(meta.status, Status::Interrupted);
    assert_eq!(meta.expires_at_ms, Some(T0 + ms(IDLE) + ms(RETENTION)));
    assert!(store.live(idle.tape().key()).is_none());
    // Its producer is refused from now on.
    let late = idle.append("more").await.unwrap();
    assert!(matches!(acked(late).await, Err(Error::RecordingEnded)));

    assert_eq!(busy.tape().progress().status, Status::Recording);
    assert!(store.live(busy.tape().key()).is_some());
}

#[tokio::test]
async fn periodic_sweeper_runs_without_being_called() {
    let (_dir, clock, store) = fresh();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(sweeper::run(
        store.clone(),
        Duration::from_millis(10),
        IDLE,
        shutdown.clone(),
    ));
    // Each round needs a later tick than the last: the task keeps running on its own.
    let mut keys = Vec::new();
    for round in 0..3 {
        let writer = store.start(&id(&format!("idle-{round}"))).await.unwrap();
        keys.push(writer.tape().key());
        let mut progress = writer.tape().subscribe();
        // Round 1 also lets round 0's retention pass.
        let extra = if round == 1 { ms(RETENTION) } else { 0 };
        clock.advance(ms(IDLE) + extra + 1);
        let ended = tokio::time::timeout(WAIT, progress.wait_for(|p| !p.status.is_live()))
            .await
            .expect("the sweeper ended the idle recording in time")
            .unwrap()
            .status;
        assert_eq!(ended, Status::Interrupted, "round {round}");
    }
    // The tick that ended round 1 then collected round 0; round 2 came from a later tick.
    assert!(store.meta(keys[0]).await.unwrap().is_none());
    assert_eq!(stored_chunks(&store, keys[0]), 0);

    shutdown.cancel();
    tokio::time::timeout(WAIT, task)
        .await
        .expect("the sweeper stops on shutdown")
        .unwrap();
}

#[tokio::test]
async fn file_size_levels_off_when_recordings_are_created_and_collected() {
    const ROUNDS: usize = 40;
    const RECORDINGS: usize = 20;
    const CHUNKS: usize = 20;
    let (dir, clock, store) = fresh();
    let text = "0123456789abcdef".repeat(16);
    let mut sizes = Vec::new();
    for round in 0..ROUNDS {
        // Concurrent starts and finishes share commits, as they do under load.
        let names: Vec<ConversationId> = (0..RECORDINGS)
            .map(|r| id(&format!("{round}-{r}")))
            .collect();
        let mut writers = futures::future::try_join_all(names.iter().map(|n| store.start(n)))
            .await
            .unwrap();
        let mut acks = Vec::new();
        for _ in 0..CHUNKS {
            for writer in &mut writers {
                acks.push(writer.append(&text).await.unwrap());
            }
        }
        for ack in acks {
            acked(ack).await.unwrap();
        }
        futures::future::try_join_all(
            writers
                .into_iter()
                .map(|w| w.finish(Status::Completed, None)),
        )
        .await
        .unwrap();
        clock.advance(ms(RETENTION) + 1);
        let report = sweeper::sweep_once(&store, IDLE).await.unwrap();
        assert_eq!(report.recordings_deleted, RECORDINGS as u64);
        assert_eq!(report.chunks_deleted, (RECORDINGS * CHUNKS) as u64);
        sizes.push(std::fs::metadata(db_path(&dir)).unwrap().len());
    }
    // Observed (debug build, four runs): 446,464-663,552 bytes after the first round, then
    // between 253,952 and 663,552 bytes, never above the first rounds' size, while
    // 40 x 102,400 = 4,096,000 bytes of text went through the file. One run, in bytes after
    // each round: 663552, 364544 x 2, 512000 x 9, then 319488 for the last 28 rounds.
    // Freed pages are reused, so the size stays under a cap that a file keeping every round
    // would pass long before the end.
    const CAP: u64 = 1024 * 1024;
    let written = (ROUNDS * RECORDINGS * CHUNKS * text.len()) as u64;
    assert!(written > 2 * CAP);
    let peak = *sizes[ROUNDS / 2..].iter().max().unwrap();
    assert!(
        peak <= CAP,
        "file kept growing: {sizes:?} (bytes after each round)"
    );
}

#[tokio::test]
async fn supersede_leaves_no_old_chunk_and_ends_the_old_tape() {
    let (_dir, _clock, store) = fresh();
    let conversation = id("twice");
    let key = conversation.key();
    let mut old = store.start(&conversation).await.unwrap();
    let old_tape = old.tape().clone();
    let old_texts: Vec<String> = (0..50).map(|i| format!("old{i} ")).collect();
    let old_refs: Vec<&str> = old_texts.iter().map(String::as_str).collect();
    record(&mut old, &old_refs).await;
    let old_progress = old_tape.subscribe();

    let mut new = store.start(&conversation).await.unwrap();
    // The start commit deleted every old chunk and told the old tape's readers.
    assert_eq!(stored_chunks(&store, key), 0);
    assert_eq!(old_tape.progress().status, Status::Superseded);
    assert!(old_progress.has_changed().unwrap());
    assert_eq!(new.tape().generation(), old_tape.generation() + 1);
    assert!(Arc::ptr_eq(&store.live(key).unwrap(), new.tape()));

    record(&mut new, &["new ", "text"]).await;
    assert_eq!(stored_chunks(&store, key), 2);
    assert_eq!(
        texts_of(&all_chunks(&store, key, new.tape().generation()).await),
        ["new ", "text"]
    );
    assert!(matches!(
        store
            .read_chunks(key, old_tape.generation(), 0, usize::MAX)
            .await,
        Err(Error::Superseded)
    ));
    let late = old.append("late").await.unwrap();
    assert!(matches!(acked(late).await, Err(Error::Superseded)));
    assert_eq!(stored_chunks(&store, key), 2);
    let meta = store.meta(key).await.unwrap().unwrap();
    assert_eq!(
        (meta.generation, meta.chunk_count, meta.byte_len),
        (2, 2, 8)
    );
    // The old producer's own finish cannot end the new recording.
    let progress = old.finish(Status::Completed, None).await.unwrap();
    assert_eq!(progress.status, Status::Superseded);
    assert_eq!(new.tape().progress().status, Status::Recording);

    // Superseding a finished recording drops its place in the GC schedule too.
    new.finish(Status::Completed, None).await.unwrap();
    assert_eq!(expiry_entries(&store, key), 1);
    let third = store.start(&conversation).await.unwrap();
    assert_eq!(stored_chunks(&store, key), 0);
    assert_eq!(expiry_entries(&store, key), 0);
    assert_eq!(third.tape().generation(), 3);
}

#[tokio::test]
async fn unknown_schema_version_is_refused() {
    let (dir, clock, store) = fresh();
    store.close().await;
    {
        let db = redb::Database::open(db_path(&dir)).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut meta = txn.open_table(schema::META).unwrap();
            meta.insert(schema::SCHEMA_VERSION_KEY, SCHEMA_VERSION + 1)
                .unwrap();
        }
        txn.commit().unwrap();
    }
    match Store::open(&db_path(&dir), options(&clock)) {
        Err(Error::SchemaVersion {
            found, expected, ..
        }) => assert_eq!((found, expected), (SCHEMA_VERSION + 1, SCHEMA_VERSION)),
        other => panic!("expected a schema version error, got {other:?}"),
    }
}

#[test]
fn file_of_random_bytes_is_refused_with_an_open_error() {
    let dir = tempfile::tempdir().unwrap();
    // xorshift64: arbitrary bytes, the same on every run.
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let bytes: Vec<u8> = (0..64 * 1024)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    std::fs::write(db_path(&dir), bytes).unwrap();
    let result = Store::open(&db_path(&dir), options(&ManualClock::new(T0)));
    assert!(
        matches!(result, Err(Error::OpenDatabase { .. })),
        "{result:?}"
    );
}

#[tokio::test]
async fn live_limit_refuses_new_recordings() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = Store::open(
        &db_path(&dir),
        StoreOptions {
            max_live: 2,
            ..options(&clock)
        },
    )
    .unwrap();
    let old_a = store.start(&id("a")).await.unwrap();
    let _b = store.start(&id("b")).await.unwrap();
    assert!(matches!(
        store.start(&id("c")).await,
        Err(Error::TooManyLiveRecordings { max: 2 })
    ));
    assert!(store.meta(id("c").key()).await.unwrap().is_none());
    // Replacing a live recording does not add one.
    let a = store.start(&id("a")).await.unwrap();
    assert_eq!(old_a.tape().progress().status, Status::Superseded);
    drop(old_a);
    assert_eq!(store.live_tapes().len(), 2);
    // Ending one frees its place.
    a.finish(Status::Completed, None).await.unwrap();
    store.start(&id("c")).await.unwrap();
}

#[tokio::test]
async fn ended_tape_refuses_appends() {
    let (_dir, _clock, store) = fresh();
    let mut writer = store.start(&id("cancelled")).await.unwrap();
    let tape = writer.tape().clone();
    record(&mut writer, &["before"]).await;
    assert!(store.end(&tape, Status::Cancelled, None).await.unwrap());
    // The first end wins.
    assert!(!store.end(&tape, Status::Completed, None).await.unwrap());
    let late = writer.append("after").await.unwrap();
    assert!(matches!(acked(late).await, Err(Error::RecordingEnded)));
    let meta = store.meta(tape.key()).await.unwrap().unwrap();
    assert_eq!((meta.status, meta.chunk_count), (Status::Cancelled, 1));
    assert_eq!(stored_chunks(&store, tape.key()), 1);
}

#[tokio::test]
async fn failed_tape_refuses_appends() {
    let (_dir, _clock, store) = fresh();
    let mut writer = store.start(&id("doomed")).await.unwrap();
    let tape = writer.tape().clone();
    record(&mut writer, &["fine"]).await;
    // A row that no longer decodes makes the next commit touching it (its end) fail.
    corrupt_meta(&store, tape.key());
    assert!(store.end(&tape, Status::Completed, None).await.is_err());
    assert_eq!(tape.progress().status, Status::Failed);
    assert!(tape.end_message().unwrap().contains("storage failure"));
    assert!(store.live(tape.key()).is_none());
    let late = writer.append("later").await.unwrap();
    assert!(matches!(acked(late).await, Err(Error::RecordingEnded)));
    assert_eq!(stored_chunks(&store, tape.key()), 1);
}

/// Ops queued behind the one that broke a transaction were never applied; their producers must
/// hear so and their recordings must end, or a later commit would leave a gap in them.
#[tokio::test]
async fn failed_commit_fails_every_op_queued_after_the_failure() {
    let (_dir, clock, store) = fresh();
    let handle = store.clone();
    let broken = store.start(&id("broken")).await.unwrap();
    let bystander = store.start(&id("bystander")).await.unwrap();
    store.close().await;
    corrupt_meta(&handle, broken.tape().key());

    // Queue everything before the writer runs, so that it shares one transaction: an append
    // applied before the failing end, the end, and an append after it.
    let writer = Writer::new(
        handle.inner.db.clone(),
        handle.inner.live.clone(),
        handle.inner.journal.clone(),
        WriterSettings {
            retention_ms: ms(RETENTION),
            max_live: 100,
            clock: Arc::new(clock.clone()),
        },
    );
    let (ops, queue) = mpsc::channel(8);
    let mut acks = Vec::new();
    let append = |tape: &Arc<super::Tape>| {
        let (done, ack) = oneshot::channel();
        let chunk = Chunk {
            index: 0,
            offset: 0,
            text: Arc::from("x"),
        };
        ops.try_send(Op::Append {
            tape: tape.clone(),
            chunk,
            done,
        })
        .unwrap();
        ack
    };
    acks.push(append(broken.tape()));
    let (done, ended) = oneshot::channel();
    ops.try_send(Op::Finish {
        tape: broken.tape().clone(),
        status: Status::Completed,
        message: None,
        done,
    })
    .unwrap();
    acks.push(append(bystander.tape()));
    ops.try_send(Op::Close).unwrap();
    std::thread::spawn(move || writer.run(queue))
        .join()
        .unwrap();

    for ack in acks {
        assert!(matches!(ack.await, Ok(Err(_))), "every producer hears");
    }
    assert!(matches!(ended.await, Ok(Err(_))));
    assert_eq!(broken.tape().progress().status, Status::Failed);
    assert_eq!(stored_chunks(&handle, broken.tape().key()), 0);
    assert_eq!(bystander.tape().progress().status, Status::Failed);
    assert!(handle.live(bystander.tape().key()).is_none());
    assert_eq!(stored_chunks(&handle, bystander.tape().key()), 0);
}
