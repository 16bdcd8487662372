//! Seal marks: what a seal copies, the ended recordings not sealed yet, a mark written only for
//! the recording it was made of, local chunks dropped only when asked (and never for a
//! resumable recording), and a mark that goes with its row.
use super::*;
use crate::Sealing;

/// Records `texts` as conversation `name` and ends it with `status`; returns its key,
/// generation and end time.
async fn ended(store: &TestStore, name: &str, texts: &[&str], status: Status) -> (u128, u64, u64) {
    let mut writer = store.start(&id(name)).await.unwrap();
    record(&mut writer, texts).await;
    let key = writer.recording().key();
    writer.finish(status, None).await.unwrap();
    let meta = store.meta(key).await.unwrap().unwrap();
    (key, meta.generation, meta.finished_ms.unwrap())
}

#[tokio::test]
async fn a_verified_copy_is_marked_and_its_local_chunks_go_only_when_asked() {
    let (dir, clock, store) = fresh();
    let (key, generation, finished) =
        ended(&store, "sealed", &["Hello", ", world"], Status::Completed).await;
    let (pending, _) = store.unsealed(None, 10).await.unwrap();
    assert_eq!(pending, [key]);

    let copy = store.recording_copy(key).await.unwrap().unwrap();
    assert_eq!(texts_of(&copy.chunks), ["Hello", ", world"]);
    assert_eq!(copy.meta.status, Status::Completed);
    assert!(copy.stream_row.is_none());

    let sealing = store
        .seal(key, (generation, finished), false)
        .await
        .unwrap();
    assert_eq!(sealing, Sealing::Marked);
    let mark = store.seal_mark(key).await.unwrap().unwrap();
    assert!(mark.local);
    assert_eq!((mark.generation, mark.finished_ms), (generation, finished));
    assert!(store.unsealed(None, 10).await.unwrap().0.is_empty());
    assert_eq!(stored_chunks(&store, key), 2, "kept: no drop was asked");
    assert_eq!(store.sealed_locally().await.unwrap().len(), 1);

    let sealing = store.seal(key, (generation, finished), true).await.unwrap();
    assert_eq!(sealing, Sealing::Marked);
    assert!(!store.seal_mark(key).await.unwrap().unwrap().local);
    assert_eq!(stored_chunks(&store, key), 0, "dropped from local disk");
    let meta = store.meta(key).await.unwrap().unwrap();
    assert_eq!(
        (meta.status, meta.byte_len),
        (Status::Completed, 12),
        "the row stays"
    );
    assert!(store.recording_copy(key).await.unwrap().is_none());
    assert!(store.sealed_locally().await.unwrap().is_empty());

    // The mark is durable: it is in the file after a restart.
    ended(&store, "unsealed", &["b"], Status::Completed).await;
    store.close().await;
    let store = open(&dir, &clock);
    assert!(!store.seal_mark(key).await.unwrap().unwrap().local);
    assert_eq!(store.unsealed(None, 10).await.unwrap().0.len(), 1);
    store.close().await;

    // The offline tools count it, and find the file consistent.
    let path = super::db_path(&dir);
    let stats = crate::offline::stats(&path, |_, _| {}).unwrap();
    assert_eq!(
        (stats.sealed, stats.sealed_remote_only, stats.seal_backlog),
        (1, 1, 1)
    );
    let problems = crate::offline::check(&path, |_, _| {}).unwrap();
    assert!(problems.is_empty(), "{problems:?}");
}

#[tokio::test]
async fn a_copy_of_another_end_or_of_a_deleted_recording_is_not_marked() {
    let (_dir, _clock, store) = fresh();
    let (key, generation, finished) = ended(&store, "stale", &["a"], Status::Completed).await;
    let other_end = (generation, finished + 1);
    assert_eq!(
        store.seal(key, other_end, true).await.unwrap(),
        Sealing::Stale
    );
    let other_generation = (generation + 1, finished);
    assert_eq!(
        store.seal(key, other_generation, true).await.unwrap(),
        Sealing::Stale
    );
    assert_eq!(
        stored_chunks(&store, key),
        1,
        "nothing dropped for a stale copy"
    );
    assert!(store.seal_mark(key).await.unwrap().is_none());

    assert_eq!(
        store
            .seal(key, (generation, finished), false)
            .await
            .unwrap(),
        Sealing::Marked
    );
    assert!(store.delete(key).await.unwrap());
    assert!(
        store.seal_mark(key).await.unwrap().is_none(),
        "the mark went with its row"
    );
    assert_eq!(
        store
            .seal(key, (generation, finished), false)
            .await
            .unwrap(),
        Sealing::Stale
    );
    assert!(store.unsealed(None, 10).await.unwrap().0.is_empty());
}

#[tokio::test]
async fn a_resumable_recording_keeps_its_chunks_and_a_live_one_is_never_sealed() {
    let (_dir, _clock, store) = fresh();
    let (key, generation, finished) =
        ended(&store, "resumable", &["x", "y"], Status::Interrupted).await;
    assert_eq!(
        store.seal(key, (generation, finished), true).await.unwrap(),
        Sealing::Marked
    );
    assert!(store.seal_mark(key).await.unwrap().unwrap().local);
    assert_eq!(stored_chunks(&store, key), 2);

    let mut live = store.start(&id("live")).await.unwrap();
    record(&mut live, &["z"]).await;
    let live_key = live.recording().key();
    assert!(store.recording_copy(live_key).await.unwrap().is_none());
    let (pending, _) = store.unsealed(None, 10).await.unwrap();
    assert!(!pending.contains(&live_key));
}

#[tokio::test]
async fn the_unsealed_walk_goes_on_from_its_cursor() {
    let (_dir, _clock, store) = fresh();
    let mut keys = Vec::new();
    for n in 0..5 {
        keys.push(
            ended(&store, &format!("walk-{n}"), &["t"], Status::Completed)
                .await
                .0,
        );
    }
    let (mut seen, mut after) = (Vec::new(), None);
    loop {
        let (page, next) = store.unsealed(after, 2).await.unwrap();
        assert!(page.len() <= 2);
        seen.extend(page);
        match next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    seen.sort_unstable();
    keys.sort_unstable();
    assert_eq!(seen, keys);
}

/// A mark, and the drop of local chunks, are logged like every change: with the file put back
/// to its last checkpoint, rolling it forward through the log brings them back.
#[tokio::test]
async fn a_mark_and_a_drop_are_rolled_forward_from_the_log() {
    let (dir, _clock, store) = fresh();
    let (key, generation, finished) = ended(&store, "logged", &["a", "b"], Status::Cancelled).await;
    store.checkpoint().await.unwrap();
    let db = super::db_path(&dir);
    let at_checkpoint = std::fs::read(&db).unwrap();
    let sealing = store.seal(key, (generation, finished), true).await.unwrap();
    assert_eq!(sealing, Sealing::Marked);

    assert!(store.inner.db.close());
    std::fs::write(&db, at_checkpoint).unwrap();
    // The next commit reopens the file, rolling the checkpoint forward through the log.
    ended(&store, "next", &["c"], Status::Completed).await;
    let mark = store.seal_mark(key).await.unwrap().unwrap();
    assert_eq!((mark.generation, mark.local), (generation, false));
    assert_eq!(stored_chunks(&store, key), 0);
}
