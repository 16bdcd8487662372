//! The seam under the store: every byte of the database file, the log and the disk reserve is
//! written through `StoreOptions::files`, and every sync goes through it too; and a disk that
//! keeps only what was synced when the power went gives back every acknowledged chunk.
use std::sync::Arc;

use super::watched_files::{Call, Kind, Watched};
use super::{all_chunks, db_path, id, open_path, options, record, texts_of};
use crate::clock::ManualClock;
use crate::live::LiveRecording;
use crate::{StoreOptions, wal};

fn watched_options(clock: &ManualClock, watched: &Watched) -> StoreOptions {
    StoreOptions {
        files: Arc::new(watched.clone()),
        ..options(clock)
    }
}

/// Opened, written, checkpointed, closed and opened again over a watched file system: the log's
/// frames, redb's pages and the reserve were all written and synced through it, and every byte
/// of every file in the data directory is one a write through it put there.
#[tokio::test]
async fn every_write_and_sync_goes_through_the_files_of_the_options() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(super::T0);
    let watched = Watched::default();
    let path = db_path(&dir);
    let store = open_path(&path, watched_options(&clock, &watched));
    let mut producer = store.start(&id("seam")).await.unwrap();
    let (key, generation) = (
        producer.recording().key(),
        producer.recording().generation(),
    );
    record(&mut producer, &["one ", "two "]).await;
    store.checkpoint().await.unwrap();
    record(&mut producer, &["three"]).await;
    store.close().await;
    let store = open_path(&path, watched_options(&clock, &watched));
    assert_eq!(
        texts_of(&all_chunks(&store, key, generation).await),
        ["one ", "two ", "three"]
    );
    store.close().await;

    let calls = |kind, call| watched.calls(kind, call);
    assert!(
        calls(Kind::Log, Call::Write) >= 2,
        "{:?}",
        watched.seen().calls
    );
    assert!(
        calls(Kind::Log, Call::SyncData) >= calls(Kind::Log, Call::Write),
        "every frame is synced: {:?}",
        watched.seen().calls
    );
    assert!(
        calls(Kind::Log, Call::WriteZeros) >= 1,
        "the log is zeroed ahead of its frames: {:?}",
        watched.seen().calls
    );
    assert!(calls(Kind::Log, Call::Read) >= 1, "the log is read at open");
    for call in [Call::Open, Call::Read, Call::Write, Call::SyncData] {
        assert!(calls(Kind::Database, call) >= 1, "{call:?}");
    }
    for call in [Call::Write, Call::SyncAll, Call::Rename] {
        assert!(calls(Kind::Reserve, call) >= 1, "{call:?}");
    }
    assert!(calls(Kind::Dir, Call::SyncDir) >= 1);
    assert!(calls(Kind::Dir, Call::Available) >= 1);

    let seen = watched.seen();
    let mut files = 0;
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        let written = seen
            .written
            .get(&path)
            .unwrap_or_else(|| panic!("{} was not opened through the seam", path.display()));
        assert!(
            std::fs::read(&path).unwrap() == *written,
            "{} holds bytes not written through the seam",
            path.display()
        );
        files += 1;
    }
    assert_eq!(files, 3, "the database, its log and the reserve");
}

/// The power goes after some commits, one of them a checkpoint: the disk keeps each file as it
/// was at its last sync (redb's commits since the checkpoint, made without a sync, are lost;
/// so is whatever came after the cut). The store opened on what is left holds every chunk
/// acknowledged before the cut, rolled forward from the log, and nothing after it.
#[tokio::test]
async fn after_a_power_cut_every_acknowledged_chunk_is_there() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(super::T0);
    let watched = Watched::default();
    let store = open_path(&db_path(&dir), watched_options(&clock, &watched));
    let mut producer = store.start(&id("power")).await.unwrap();
    let (key, generation) = (
        producer.recording().key(),
        producer.recording().generation(),
    );
    record(&mut producer, &["before ", "the "]).await;
    store.checkpoint().await.unwrap();
    record(&mut producer, &["checkpoint, ", "then "]).await;
    let left = watched.power_cut();
    record(&mut producer, &["after ", "the cut"]).await;
    store.close().await;

    let after = tempfile::tempdir().unwrap();
    let path = db_path(&after);
    for kept in [db_path(&dir), wal::path_of(&db_path(&dir))] {
        let bytes = &left[&kept];
        std::fs::write(after.path().join(kept.file_name().unwrap()), bytes).unwrap();
    }
    let watched = Watched::default();
    let store = open_path(&path, watched_options(&clock, &watched));
    assert!(
        watched.calls(Kind::Log, Call::Read) >= 1,
        "rolled forward through the log"
    );
    let live = store.live(key).expect("left live by the cut");
    assert_eq!(live.progress().chunks, 4);
    assert_eq!(
        texts_of(&all_chunks(&store, key, generation).await),
        ["before ", "the ", "checkpoint, ", "then "]
    );
    store.close().await;
}
