//! Supersede, schema checks, limits and refusals, failed commits.
use super::*;

#[tokio::test]
async fn supersede_leaves_no_old_chunk_and_ends_the_old_tape() {
    let (_dir, _clock, store) = fresh();
    let conversation = id("twice");
    let key = conversation.key();
    let mut old = store.start(&conversation).await.unwrap();
    let old_tape = old.recording().clone();
    let old_texts: Vec<String> = (0..50).map(|i| format!("old{i} ")).collect();
    let old_refs: Vec<&str> = old_texts.iter().map(String::as_str).collect();
    record(&mut old, &old_refs).await;
    let old_progress = old_tape.subscribe();

    let mut new = store.start(&conversation).await.unwrap();
    // The start commit deleted every old chunk and told the old tape's readers.
    assert_eq!(stored_chunks(&store, key), 0);
    assert_eq!(old_tape.progress().status, Status::Superseded);
    assert!(old_progress.has_changed().unwrap());
    assert_eq!(new.recording().generation(), old_tape.generation() + 1);
    assert!(Arc::ptr_eq(&store.live(key).unwrap(), new.recording()));

    record(&mut new, &["new ", "text"]).await;
    assert_eq!(stored_chunks(&store, key), 2);
    assert_eq!(
        texts_of(&all_chunks(&store, key, new.recording().generation()).await),
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
    assert_eq!(new.recording().progress().status, Status::Recording);

    // Superseding a finished recording drops its place in the GC schedule too.
    new.finish(Status::Completed, None).await.unwrap();
    assert_eq!(expiry_entries(&store, key), 1);
    let third = store.start(&conversation).await.unwrap();
    assert_eq!(stored_chunks(&store, key), 0);
    assert_eq!(expiry_entries(&store, key), 0);
    assert_eq!(third.recording().generation(), 3);
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
    let store = TestStore::new(Store::open(&db_path(&dir), options(&clock)).unwrap(), 2);
    let old_a = store.start(&id("a")).await.unwrap();
    let _b = store.start(&id("b")).await.unwrap();
    assert!(matches!(
        store.start(&id("c")).await,
        Err(Error::TooManyLiveRecordings { max: 2 })
    ));
    assert!(store.meta(id("c").key()).await.unwrap().is_none());
    // Replacing a live recording does not add one.
    let a = store.start(&id("a")).await.unwrap();
    assert_eq!(old_a.recording().progress().status, Status::Superseded);
    drop(old_a);
    assert_eq!(store.live_recordings().len(), 2);
    // Ending one frees its place.
    a.finish(Status::Completed, None).await.unwrap();
    store.start(&id("c")).await.unwrap();
}

#[tokio::test]
async fn ended_tape_refuses_appends() {
    let (_dir, _clock, store) = fresh();
    let mut writer = store.start(&id("cancelled")).await.unwrap();
    let tape = writer.recording().clone();
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
    let tape = writer.recording().clone();
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
    corrupt_meta(&handle, broken.recording().key());

    // Queue everything before the writer runs, so that it shares one transaction: an append
    // applied before the failing end, the end, and an append after it.
    let writer = pipeline_over(&handle, &clock, Duration::ZERO);
    let (ops, queue) = mpsc::channel(8);
    let mut acks = Vec::new();
    let append = |tape: &Arc<Recording>| {
        let (op, ack) = one_byte_append(tape, 1, 0);
        ops.try_send(op.into()).unwrap();
        ack
    };
    acks.push(append(broken.recording()));
    let (done, ended) = oneshot::channel();
    ops.try_send(
        Op::Finish {
            live: broken.recording().clone(),
            status: Status::Completed,
            message: None,
            only: crate::EndIf::Always,
            done,
        }
        .into(),
    )
    .unwrap();
    acks.push(append(bystander.recording()));
    ops.try_send(Op::Close.into()).unwrap();
    std::thread::spawn(move || writer.run(queue))
        .join()
        .unwrap();

    for ack in acks {
        assert!(matches!(ack.await, Ok(Err(_))), "every producer hears");
    }
    assert!(matches!(ended.await, Ok(Err(_))));
    assert_eq!(broken.recording().progress().status, Status::Failed);
    assert_eq!(stored_chunks(&handle, broken.recording().key()), 0);
    assert_eq!(bystander.recording().progress().status, Status::Failed);
    assert!(handle.live(bystander.recording().key()).is_none());
    assert_eq!(stored_chunks(&handle, bystander.recording().key()), 0);
}

/// An end that loses to an earlier end in the same batch is answered only once the winner is
/// published: a producer completing as a cancel lands must then read `cancelled`, not a
/// recording that still looks live (which it would take for another producer's).
#[tokio::test]
async fn an_end_that_lost_is_answered_after_the_winner_is_published() {
    let (_dir, clock, store) = fresh();
    let handle = store.clone();
    let writer = store.start(&id("raced")).await.unwrap();
    let tape = writer.recording().clone();
    store.close().await;
    let pipeline = pipeline_over(&handle, &clock, Duration::ZERO);
    let (ops, queue) = mpsc::channel(8);
    let finish = |status, only| {
        let (done, answer) = oneshot::channel();
        ops.try_send(
            Op::Finish {
                live: tape.clone(),
                status,
                message: None,
                only,
                done,
            }
            .into(),
        )
        .unwrap();
        answer
    };
    let cancel = finish(Status::Cancelled, crate::EndIf::Always);
    let complete = finish(Status::Completed, crate::EndIf::Holds(1));
    ops.try_send(Op::Close.into()).unwrap();
    let thread = std::thread::spawn(move || pipeline.run(queue));
    assert!(!complete.await.unwrap().unwrap(), "the complete lost");
    assert_eq!(
        tape.progress().status,
        Status::Cancelled,
        "answered before publishing"
    );
    assert!(cancel.await.unwrap().unwrap());
    thread.join().unwrap();
    drop(writer);
}
