//! Tests of the durable Raft log against real files in a temporary directory.
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;

use openraft::storage::RaftLogStorage;
use openraft::{CommittedLeaderId, EntryPayload, RaftLogReader, Vote};

use super::*;
use crate::cluster::Proposal;

fn log_id(term: u64, index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

fn entry(term: u64, index: u64) -> Entry {
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Normal(Proposal {
            changes: format!("commit {index} of term {term}").into(),
            checkpoint: index.is_multiple_of(3),
            base: None,
        }),
    }
}

/// Appends `indexes` in `term` and waits until the writer thread says they are synced.
async fn append(store: &LogStore, term: u64, indexes: std::ops::Range<u64>) {
    let (done, synced) = oneshot::channel();
    store
        .append_then(
            indexes.map(|i| entry(term, i)),
            Box::new(move |result| {
                let _ = done.send(result);
            }),
        )
        .expect("queue the append");
    synced
        .await
        .expect("writer answers")
        .expect("append synced");
}

async fn read_all(store: &mut LogStore) -> Vec<Entry> {
    store.try_get_log_entries(..).await.expect("read the log")
}

fn indexes(entries: &[Entry]) -> Vec<(u64, u64)> {
    entries
        .iter()
        .map(|e| (e.log_id.leader_id.term, e.log_id.index))
        .collect()
}

#[tokio::test]
async fn appended_entries_read_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = LogStore::open(dir.path()).expect("open");
    append(&store, 1, 1..6).await;
    let all = read_all(&mut store).await;
    assert_eq!(all, (1..6).map(|i| entry(1, i)).collect::<Vec<_>>());
    let some = store.try_get_log_entries(2..4).await.expect("read");
    assert_eq!(indexes(&some), vec![(1, 2), (1, 3)]);
    let mut reader = store.get_log_reader().await;
    assert_eq!(
        reader.try_get_log_entries(4..=9).await.expect("read").len(),
        2
    );
    let state = store.get_log_state().await.expect("state");
    assert_eq!(state.last_log_id, Some(log_id(1, 5)));
    assert_eq!(state.last_purged_log_id, None);
}

#[tokio::test]
async fn entries_survive_reopen_and_are_read_from_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = LogStore::open(dir.path()).expect("open");
    append(&store, 1, 1..4).await;
    append(&store, 2, 4..8).await;
    drop(store);
    let mut store = LogStore::open(dir.path()).expect("reopen");
    // Nothing is cached after a reopen: every entry comes back through the file.
    assert!(lock(&store.state).cache.is_empty());
    let expected: Vec<Entry> = (1..4)
        .map(|i| entry(1, i))
        .chain((4..8).map(|i| entry(2, i)))
        .collect();
    assert_eq!(read_all(&mut store).await, expected);
    append(&store, 2, 8..9).await;
    assert_eq!(read_all(&mut store).await.len(), 8);
}

#[tokio::test]
async fn a_torn_tail_is_cut_off() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = LogStore::open(dir.path()).expect("open");
    append(&store, 1, 1..4).await;
    drop(store);
    let path = dir.path().join(ENTRIES);
    let size = std::fs::metadata(&path).expect("stat").len();
    // Half of a fourth frame: a crash in the middle of its write.
    let mut frame = Vec::new();
    files::encode(&entry(1, 4), &mut frame).expect("encode");
    let file = OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open file");
    file.write_all_at(&frame[..frame.len() / 2], size)
        .expect("write");
    drop(file);

    let mut store = LogStore::open(dir.path()).expect("reopen cuts the tail");
    assert_eq!(std::fs::metadata(&path).expect("stat").len(), size);
    assert_eq!(
        indexes(&read_all(&mut store).await),
        vec![(1, 1), (1, 2), (1, 3)]
    );
    append(&store, 1, 4..5).await;
    drop(store);
    let mut store = LogStore::open(dir.path()).expect("reopen");
    assert_eq!(read_all(&mut store).await.len(), 4);
}

#[tokio::test]
async fn a_tail_frame_failing_its_crc_is_cut_off() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = LogStore::open(dir.path()).expect("open");
    append(&store, 1, 1..4).await;
    drop(store);
    let path = dir.path().join(ENTRIES);
    let size = std::fs::metadata(&path).expect("stat").len();
    let file = OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open file");
    file.write_all_at(&[0xff], size - 1)
        .expect("damage the last byte");
    drop(file);
    let mut store = LogStore::open(dir.path()).expect("reopen cuts the tail");
    assert_eq!(indexes(&read_all(&mut store).await), vec![(1, 1), (1, 2)]);
}

#[tokio::test]
async fn damage_before_the_tail_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = LogStore::open(dir.path()).expect("open");
    append(&store, 1, 1..4).await;
    drop(store);
    let path = dir.path().join(ENTRIES);
    let file = OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open file");
    file.write_all_at(&[0xff], HEADER_PLUS_ONE)
        .expect("damage the first frame");
    drop(file);
    let error = LogStore::open(dir.path())
        .err()
        .expect("a damaged log does not open");
    assert!(error.to_string().contains("entries.log"), "{error}");
}

const HEADER_PLUS_ONE: u64 = files::HEADER + 1;

#[tokio::test]
async fn truncate_then_append_replaces_the_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = LogStore::open(dir.path()).expect("open");
    append(&store, 1, 1..6).await;
    store.truncate(log_id(1, 3)).await.expect("truncate");
    assert_eq!(
        store.get_log_state().await.expect("state").last_log_id,
        Some(log_id(1, 2))
    );
    append(&store, 2, 3..5).await;
    let expected = vec![(1, 1), (1, 2), (2, 3), (2, 4)];
    assert_eq!(indexes(&read_all(&mut store).await), expected);
    drop(store);
    let mut store = LogStore::open(dir.path()).expect("reopen");
    assert_eq!(indexes(&read_all(&mut store).await), expected);
}

#[tokio::test]
async fn purge_survives_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = LogStore::open(dir.path()).expect("open");
    append(&store, 1, 1..6).await;
    store.purge(log_id(1, 2)).await.expect("purge");
    assert_eq!(
        indexes(&read_all(&mut store).await),
        vec![(1, 3), (1, 4), (1, 5)]
    );
    drop(store);
    let mut store = LogStore::open(dir.path()).expect("reopen");
    let state = store.get_log_state().await.expect("state");
    assert_eq!(state.last_purged_log_id, Some(log_id(1, 2)));
    assert_eq!(state.last_log_id, Some(log_id(1, 5)));
    assert_eq!(
        indexes(&read_all(&mut store).await),
        vec![(1, 3), (1, 4), (1, 5)]
    );
}

#[tokio::test]
async fn purging_everything_reclaims_the_file_and_appends_continue() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = LogStore::open(dir.path()).expect("open");
    append(&store, 1, 1..6).await;
    // A snapshot past the log's end (a follower catching up) purges it all.
    store.purge(log_id(2, 9)).await.expect("purge");
    let path = dir.path().join(ENTRIES);
    assert_eq!(std::fs::metadata(&path).expect("stat").len(), 0);
    let state = store.get_log_state().await.expect("state");
    assert_eq!(state.last_log_id, Some(log_id(2, 9)));
    assert!(read_all(&mut store).await.is_empty());
    append(&store, 2, 10..12).await;
    drop(store);
    let mut store = LogStore::open(dir.path()).expect("reopen");
    assert_eq!(indexes(&read_all(&mut store).await), vec![(2, 10), (2, 11)]);
    assert_eq!(
        store
            .get_log_state()
            .await
            .expect("state")
            .last_purged_log_id,
        Some(log_id(2, 9))
    );
}

/// The vote survives a reopen, read back uncommitted: a node that led leads again only after
/// an election, in a later term (see `read_vote`).
#[tokio::test]
async fn the_vote_survives_reopen_uncommitted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = LogStore::open(dir.path()).expect("open");
    assert_eq!(store.read_vote().await.expect("read"), None);
    let mut vote = Vote::new(3, 2);
    vote.commit();
    store.save_vote(&vote).await.expect("save");
    drop(store);
    let mut store = LogStore::open(dir.path()).expect("reopen");
    assert_eq!(
        store.read_vote().await.expect("read"),
        Some(Vote::new(3, 2))
    );
}

#[tokio::test]
async fn a_mostly_purged_file_is_rewritten_and_still_reads_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = LogStore::open(dir.path()).expect("open");
    append(&store, 1, 1..201).await;
    let path = dir.path().join(ENTRIES);
    let before = std::fs::metadata(&path).expect("stat").len();
    store.purge(log_id(1, 150)).await.expect("purge");
    let after = std::fs::metadata(&path).expect("stat").len();
    assert!(
        after * 3 < before,
        "the file shrank from {before} to {after} bytes"
    );
    assert!(lock(&store.state).base > 0);
    // Older entries were evicted from the cache: these come from the rewritten file.
    let expected: Vec<Entry> = (151..201).map(|i| entry(1, i)).collect();
    assert_eq!(read_all(&mut store).await, expected);
    append(&store, 2, 201..221).await;
    store.truncate(log_id(2, 210)).await.expect("truncate");
    append(&store, 3, 210..215).await;
    let expected: Vec<Entry> = (151..201)
        .map(|i| entry(1, i))
        .chain((201..210).map(|i| entry(2, i)))
        .chain((210..215).map(|i| entry(3, i)))
        .collect();
    assert_eq!(read_all(&mut store).await, expected);
    drop(store);
    let mut store = LogStore::open(dir.path()).expect("reopen");
    assert_eq!(read_all(&mut store).await, expected);
}

/// An entry of `bytes` bytes of changes.
fn big_entry(index: u64, bytes: usize) -> Entry {
    Entry {
        log_id: log_id(1, index),
        payload: EntryPayload::Normal(Proposal {
            changes: vec![b'x'; bytes].into(),
            checkpoint: false,
            base: None,
        }),
    }
}

#[tokio::test]
async fn a_payload_for_a_follower_holds_at_most_a_mebibyte_and_at_least_one_entry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = LogStore::open(dir.path()).expect("open");
    let (done, synced) = oneshot::channel();
    let sizes = [300_000, 300_000, 300_000, 300_000, 3_000_000, 10];
    store
        .append_then(
            sizes
                .iter()
                .enumerate()
                .map(|(i, bytes)| big_entry(i as u64 + 1, *bytes)),
            Box::new(move |result| {
                let _ = done.send(result);
            }),
        )
        .expect("queue the append");
    synced.await.expect("writer answers").expect("synced");
    let mut reader = store.get_log_reader().await;
    let first = reader.limited_get_log_entries(1, 7).await.expect("read");
    assert_eq!(
        indexes(&first),
        vec![(1, 1), (1, 2), (1, 3)],
        "three fit in 1 MiB"
    );
    let big = reader.limited_get_log_entries(5, 7).await.expect("read");
    assert_eq!(
        indexes(&big),
        vec![(1, 5)],
        "an entry over the limit goes alone"
    );
    let last = reader.limited_get_log_entries(6, 7).await.expect("read");
    assert_eq!(indexes(&last), vec![(1, 6)]);
}
