//! The store's life cycle: round trips, reopening after a clean close and after a SIGKILL.
use super::*;

#[tokio::test]
async fn append_and_read_round_trip_multibyte_utf8() {
    let (_dir, _clock, store) = fresh();
    let mut writer = store.start(&id("round-trip")).await.unwrap();
    let tape = writer.recording().clone();
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
    assert_eq!(tape.published(), chunks);

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
    let finished_key = finished.recording().key();
    record(&mut finished, &MULTIBYTE).await;
    finished.finish(Status::Completed, None).await.unwrap();
    let mut live = store.start(&id("live")).await.unwrap();
    let live_key = live.recording().key();
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
    // A recording left live by a clean close is live again after the open, detached (its
    // producer may resume it), its chunks kept.
    let meta = store.meta(live_key).await.unwrap().unwrap();
    assert_eq!(meta.status, Status::Recording);
    assert_eq!((meta.chunk_count, meta.byte_len), (2, 11));
    assert_eq!(
        texts_of(&all_chunks(&store, live_key, 1).await),
        ["still ", "going"]
    );
    let adopted = store.live(live_key).expect("adopted as live");
    assert!(!adopted.holder().attached);
    assert_eq!(adopted.progress().bytes, 11);
    store
        .end(&adopted, Status::Interrupted, None)
        .await
        .unwrap();

    // The reopened store takes new work, numbering the conversation's recordings on.
    let again = store.start(&id("finished")).await.unwrap();
    assert_eq!(again.recording().generation(), 2);
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
async fn reopen_after_sigkill_keeps_acked_chunks_and_detaches_live_recordings() {
    use std::os::unix::process::ExitStatusExt;

    let dir = tempfile::tempdir().unwrap();
    let path = db_path(&dir);
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "tests::lifecycle::sigkill_child_records_until_killed",
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
    let store = open_path(&path, options(&clock));
    let finished = store.meta(id(CHILD_FINISHED).key()).await.unwrap().unwrap();
    assert_eq!(finished.status, Status::Completed);
    assert_eq!(
        texts_of(&all_chunks(&store, id(CHILD_FINISHED).key(), 1).await),
        MULTIBYTE
    );

    let key = id(CHILD_LIVE).key();
    let live = store.meta(key).await.unwrap().unwrap();
    assert_eq!(live.status, Status::Recording, "left live, detached");
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
        assert_eq!(&chunk.data[..], child_token(i as u64).as_bytes());
        assert_eq!(chunk.offset, offset);
        offset = chunk.end();
    }
    assert_eq!(offset, live.byte_len);

    // Nobody resumes it: it ends, and is collected like any finished one.
    let adopted = store.live(key).expect("adopted as live");
    assert!(!adopted.holder().attached);
    assert_eq!(adopted.progress().bytes, live.byte_len);
    assert!(
        store
            .end(&adopted, Status::Interrupted, None)
            .await
            .unwrap()
    );
    clock.advance(ms(RETENTION) + 1);
    let report = store.collect_expired().await.unwrap();
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
    let store = open_path(Path::new(&path), options);
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
