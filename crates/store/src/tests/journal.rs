//! Tests of the journal: a recording reads the same whether its chunks are still in the
//! journal, already folded into `chunks`, or split between the two; a reader following a
//! recording through folds misses nothing; big chunks skip the journal; a checkpoint folds
//! everything and later folds fill the short segment it left. Files of older schemas are in
//! `upgrades`.
use std::sync::Arc;

use redb::ReadableTableMetadata;

use super::super::journal::DIRECT_CHUNK_BYTES;
use super::super::schema;
use super::super::stored_chunks::StoredChunks;
use super::{
    Producer, TestStore, acked, all_chunks, fresh, id, open, record, stored_chunks, texts_of,
};
use crate::LiveRecording;
use crate::status::Status;

/// Chunks unfolded in the journal, all recordings together.
pub(super) fn unfolded(store: &TestStore) -> usize {
    store.inner.journal.chunks()
}

/// Entries in the journal table of earlier builds' files.
pub(super) fn journal_table_entries(store: &TestStore) -> u64 {
    let txn = store.inner.db.begin_read().unwrap();
    txn.open_table(schema::JOURNAL).unwrap().len().unwrap()
}

/// Chunks of `key` in `chunks` (folded, or written there directly).
pub(super) fn folded_chunks(store: &TestStore, key: u128) -> usize {
    super::folded_indexes(store, key).len()
}

/// Chunks enough for several folds of a journal with one or two recordings in it.
const MANY: u64 = 20_000;

/// Token `i` of the long recordings below: 7 bytes.
fn token(i: u64) -> String {
    format!("{i:06} ")
}

#[tokio::test]
async fn a_recording_reads_the_same_across_the_fold_and_after_reopening() {
    const LONG: u64 = MANY;
    let (dir, clock, store) = fresh();
    let mut long = store.start(&id("long")).await.unwrap();
    let mut short = store.start(&id("short")).await.unwrap();
    let (key, generation) = (long.recording().key(), long.recording().generation());
    record(&mut short, &["before ", "the "]).await;
    append_tokens(&mut long, 0..LONG - 5).await;
    // Too few for a run of their own: these stay in the journal.
    let tail: Vec<String> = (LONG - 5..LONG).map(token).collect();
    record(
        &mut long,
        &tail.iter().map(String::as_str).collect::<Vec<_>>(),
    )
    .await;
    record(&mut short, &["fold"]).await;

    // Folds happened: the oldest chunks are in `chunks`, the newest still in the journal.
    let folded = folded_chunks(&store, key) as u64;
    assert!(
        folded > 0 && folded < LONG,
        "{folded} of {LONG} chunks folded"
    );
    assert!(unfolded(&store) > 0);
    assert_eq!(stored_chunks(&store, key) as u64, LONG);

    let expected: Vec<String> = (0..LONG).map(token).collect();
    assert_eq!(
        texts_of(&all_chunks(&store, key, generation).await),
        expected
    );
    let around_the_fold = folded.saturating_sub(5)..folded + 5;
    for from in (0..LONG).step_by(997).chain(around_the_fold) {
        let chunks = store.read_chunks(key, generation, from, 70).await.unwrap();
        let end = (from + 10).min(LONG);
        assert_eq!(texts_of(&chunks), expected[from as usize..end as usize]);
        assert_eq!(chunks[0].index, from);
        assert_eq!(chunks[0].offset, from * 7);
    }
    for index in [0, folded - 1, folded, folded + 1, LONG - 1] {
        let found = store.locate(key, generation, LONG, index * 7 + 3).await;
        assert_eq!(found.unwrap(), index);
    }
    // While live, the stored row has no counts of its own; meta reads them off the chunks.
    let meta = store.meta(key).await.unwrap().unwrap();
    assert_eq!((meta.chunk_count, meta.byte_len), (LONG, LONG * 7));
    assert_eq!(
        texts_of(&all_chunks(&store, short.recording().key(), 1).await),
        ["before ", "the ", "fold"]
    );

    // Closed with chunks unfolded: the checkpoint at the close folds them; the recordings
    // stay live, detached, for their producers to resume.
    store.close().await;
    drop((long, short));
    let store = open(&dir, &clock);
    assert_eq!(unfolded(&store), 0);
    assert_eq!(folded_chunks(&store, key) as u64, LONG);
    let meta = store.meta(key).await.unwrap().unwrap();
    assert_eq!(meta.status, Status::Recording);
    assert!(!store.live(key).unwrap().holder().attached);
    assert_eq!((meta.chunk_count, meta.byte_len), (LONG, LONG * 7));
    assert_eq!(
        texts_of(&all_chunks(&store, key, generation).await),
        expected
    );
}

/// A reader that reads from the store (not the in-memory tail) while folds move the chunks it
/// is about to read must still get every chunk once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_following_through_folds_misses_nothing() {
    const TOTAL: u64 = 2 * MANY;
    let (_dir, _clock, store) = fresh();
    let mut writer = store.start(&id("followed")).await.unwrap();
    let tape = writer.recording().clone();
    let (key, generation) = (tape.key(), tape.generation());

    let reader = {
        let store = store.clone();
        let tape = tape.clone();
        tokio::spawn(async move {
            let mut progress = tape.subscribe();
            let mut next = 0;
            while next < TOTAL {
                let committed = progress.borrow_and_update().chunks;
                if next == committed {
                    progress.changed().await.unwrap();
                    continue;
                }
                let chunks = store.read_chunks(key, generation, next, 256).await.unwrap();
                for chunk in chunks {
                    assert_eq!(
                        (chunk.index, &chunk.data[..]),
                        (next, token(next).as_bytes())
                    );
                    next += 1;
                }
            }
            next
        })
    };
    let mut last = None;
    for i in 0..TOTAL {
        last = Some(writer.append(&token(i)).await.unwrap());
        if i % 1_000 == 0 {
            // Let the reader interleave with the commits and folds.
            tokio::task::yield_now().await;
        }
    }
    acked(last.unwrap()).await.unwrap();
    assert_eq!(reader.await.unwrap(), TOTAL);
    assert!(folded_chunks(&store, key) as u64 >= TOTAL / 2);
}

#[tokio::test]
async fn big_chunks_skip_the_journal_until_a_small_one_is_in_it() {
    let (dir, clock, store) = fresh();
    let big = |c: char| c.to_string().repeat(DIRECT_CHUNK_BYTES);
    let texts = [big('a'), big('b'), "small".to_string(), big('c')];
    let mut writer = store.start(&id("big")).await.unwrap();
    let key = writer.recording().key();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    record(&mut writer, &refs).await;

    // The first two went straight to `chunks`; once "small" was journaled, the big one after
    // it had to follow it there, or the recording's folded chunks would not be a prefix.
    assert_eq!(folded_chunks(&store, key), 2);
    assert_eq!(unfolded(&store), 2);
    assert_eq!(texts_of(&all_chunks(&store, key, 1).await), texts);
    writer.finish(Status::Completed, None).await.unwrap();
    // Its end folded the rest.
    assert_eq!(folded_chunks(&store, key), 4);
    let meta = store.meta(key).await.unwrap().unwrap();
    let len: usize = texts.iter().map(String::len).sum();
    assert_eq!((meta.chunk_count, meta.byte_len), (4, len as u64));

    store.close().await;
    let store = open(&dir, &clock);
    assert_eq!((folded_chunks(&store, key), unfolded(&store)), (4, 0));
    assert_eq!(texts_of(&all_chunks(&store, key, 1).await), texts);
    assert_eq!(store.meta(key).await.unwrap().unwrap(), meta);
}

#[tokio::test]
async fn superseding_and_sweeping_delete_unfolded_chunks() {
    let (_dir, clock, store) = fresh();
    let mut old = store.start(&id("replaced")).await.unwrap();
    record(&mut old, &["old ", "text"]).await;
    let mut expiring = store.start(&id("expiring")).await.unwrap();
    record(&mut expiring, &["gone ", "soon"]).await;
    expiring.finish(Status::Completed, None).await.unwrap();
    assert_eq!(unfolded(&store), 2, "an ended recording is folded");

    let mut new = store.start(&id("replaced")).await.unwrap();
    assert_eq!(unfolded(&store), 0, "the old recording's chunks are gone");
    record(&mut new, &["new"]).await;
    clock.advance(24 * 3600 * 1000);
    let report = store.sweep_expired(10_000).await.unwrap();
    assert_eq!(report.recordings_deleted, 1);
    assert_eq!(
        unfolded(&store),
        1,
        "the live recording's chunk stays unfolded: a sweep folds nothing first"
    );
    assert_eq!(stored_chunks(&store, new.recording().key()), 1);
    let key = new.recording().key();
    assert_eq!(
        texts_of(&all_chunks(&store, key, new.recording().generation()).await),
        ["new"]
    );
    assert!(Arc::ptr_eq(&store.live(key).unwrap(), new.recording()));
}

/// The ordering readers rely on: a view of the index taken before a read transaction begins
/// finds every chunk in it, even when a fold commits in between (the chunks are then in
/// `chunks`); a view taken after a transaction that predates the fold finds none.
#[tokio::test]
async fn a_view_taken_before_the_transaction_survives_a_fold() {
    let (_dir, _clock, store) = fresh();
    let mut writer = store.start(&id("viewed")).await.unwrap();
    let key = writer.recording().key();
    record(&mut writer, &["one ", "two ", "three"]).await;
    let meta = store.meta(key).await.unwrap().unwrap();
    let early_txn = store.inner.db.begin_read().unwrap();
    let view = store.inner.journal.view(key, 0, usize::MAX);

    // A checkpoint folds the whole journal first.
    store.checkpoint().await.unwrap();
    assert_eq!(unfolded(&store), 0);

    let txn = store.inner.db.begin_read().unwrap();
    let chunks = StoredChunks::open(&txn, key, &meta, view).unwrap();
    assert_eq!(
        texts_of(&chunks.read_from(0, usize::MAX, None).unwrap()),
        ["one ", "two ", "three"]
    );
    let late_view = store.inner.journal.view(key, 0, usize::MAX);
    let stale = StoredChunks::open(&early_txn, key, &meta, late_view).unwrap();
    assert!(stale.read_from(0, usize::MAX, None).unwrap().is_empty());
}

/// A checkpoint empties the log, so it folds every unfolded chunk first, however few: the
/// recording's last segment is then short. The next fold packs chunks into it until it is
/// full, rather than leave it short.
#[tokio::test]
async fn a_checkpoint_folds_everything_and_later_folds_fill_its_short_segment() {
    let (_dir, _clock, store) = fresh();
    let mut slow = store.start(&id("slow")).await.unwrap();
    let (key, generation) = (slow.recording().key(), slow.recording().generation());
    record(&mut slow, &["a ", "few "]).await;
    assert_eq!(unfolded(&store), 2);
    store.checkpoint().await.unwrap();
    assert_eq!(unfolded(&store), 0);
    assert_eq!(segment_sizes(&store, key), [2]);

    // Chunks of 23 bytes stored (offset, time, text): 5 segments' worth.
    append_tokens(&mut slow, 0..3_000).await;
    let sizes = segment_sizes(&store, key);
    assert!(sizes.len() >= 4, "{sizes:?}");
    assert!(
        sizes[0] > 2,
        "the short segment was packed again: {sizes:?}"
    );
    // Every segment but the newest is full: within a chunk of the largest.
    let full = sizes[0];
    assert!(sizes.iter().all(|&n| n <= full), "{sizes:?}");
    assert!(
        sizes[..sizes.len() - 1].iter().all(|&n| n + 1 >= full),
        "{sizes:?}"
    );
    let mut expected = vec!["a ".to_string(), "few ".to_string()];
    expected.extend((0..3_000).map(token));
    assert_eq!(
        texts_of(&all_chunks(&store, key, generation).await),
        expected
    );
}

/// The store's files as a crash would leave them: copied while it is idle, every commit
/// acknowledged (in the log) and redb behind at its last checkpoint. Opening the copy rolls it
/// forward through the log: appends, folds into a short segment, a recording replaced; and
/// what was unfolded at the "crash" is folded.
#[tokio::test]
async fn the_log_rebuilds_unfolded_chunks_and_folds_after_a_crash() {
    let (dir, _clock, store) = fresh();
    let mut long = store.start(&id("long")).await.unwrap();
    let (key, generation) = (long.recording().key(), long.recording().generation());
    record(&mut long, &["a ", "few "]).await;
    store.checkpoint().await.unwrap();
    append_tokens(&mut long, 0..3_000).await;
    let mut old = store.start(&id("replaced")).await.unwrap();
    record(&mut old, &["old ", "text"]).await;
    let mut new = store.start(&id("replaced")).await.unwrap();
    record(&mut new, &["new"]).await;
    let replaced = new.recording().key();
    let folded_before = segment_sizes(&store, key);
    assert!(unfolded(&store) > 0);

    let crashed = tempfile::tempdir().unwrap();
    let db = super::db_path(&dir);
    let wal = super::super::wal::path_of(&db);
    std::fs::copy(&db, super::db_path(&crashed)).unwrap();
    std::fs::copy(&wal, super::super::wal::path_of(&super::db_path(&crashed))).unwrap();
    {
        // redb alone holds the checkpoint: "a few" and nothing after it.
        let raw = redb::Database::open(super::db_path(&crashed)).unwrap();
        let txn = redb::ReadableDatabase::begin_read(&raw).unwrap();
        let chunks = txn.open_table(schema::CHUNKS).unwrap();
        assert_eq!(chunks.range((key, 0)..=(key, u64::MAX)).unwrap().count(), 1);
    }

    let clock = crate::clock::ManualClock::new(super::T0);
    let recovered = open(&crashed, &clock);
    assert_eq!(unfolded(&recovered), 0);
    let mut expected = vec!["a ".to_string(), "few ".to_string()];
    expected.extend((0..3_000).map(token));
    let texts = texts_of(&all_chunks(&recovered, key, generation).await);
    assert_eq!(texts.len(), expected.len());
    assert!(
        texts == expected,
        "the chunks read back as they were written"
    );
    let sizes = segment_sizes(&recovered, key);
    assert_eq!(
        sizes[..folded_before.len()],
        folded_before,
        "the folds were made again as they were made"
    );
    assert_eq!(sizes.len(), folded_before.len() + 1, "{sizes:?}");
    assert_eq!(
        texts_of(&all_chunks(&recovered, replaced, 2).await),
        ["new"]
    );
    drop((long, old, new));
    store.close().await;
}

/// When the file has to be reopened (after an I/O error redb refuses to go on, and goes back
/// to its last checkpoint), rolling forward through the log folds the chunks that were unfolded
/// in memory: the pipeline must let go of them, or its next fold would pack them a second
/// time. Here the file is closed under the running store and put back as it was at the
/// checkpoint.
#[tokio::test]
async fn after_the_file_is_reopened_the_rolled_forward_chunks_are_not_folded_again() {
    let (dir, _clock, store) = fresh();
    let mut long = store.start(&id("long")).await.unwrap();
    let (key, generation) = (long.recording().key(), long.recording().generation());
    record(&mut long, &["a ", "few "]).await;
    store.checkpoint().await.unwrap();
    let db = super::db_path(&dir);
    let at_checkpoint = std::fs::read(&db).unwrap();
    append_tokens(&mut long, 0..3_000).await;
    assert!(unfolded(&store) > 0);

    assert!(store.inner.db.close());
    std::fs::write(&db, at_checkpoint).unwrap();
    // The next commit reopens the file, rolling the checkpoint forward through the log.
    append_tokens(&mut long, 3_000..6_000).await;
    long.finish(Status::Completed, None).await.unwrap();
    let mut expected = vec!["a ".to_string(), "few ".to_string()];
    expected.extend((0..6_000).map(token));
    let texts = texts_of(&all_chunks(&store, key, generation).await);
    assert_eq!(texts.len(), expected.len());
    assert!(texts == expected, "every chunk once, in order");
    assert_eq!(unfolded(&store), 0);
}

/// Appends [`token`]s `range` and waits until they are all committed.
async fn append_tokens(writer: &mut Producer, range: std::ops::Range<u64>) {
    let mut last = None;
    for i in range {
        last = Some(writer.append(&token(i)).await.unwrap());
    }
    acked(last.unwrap()).await.unwrap();
}

/// How many chunks each of `key`'s segments holds, in order.
fn segment_sizes(store: &TestStore, key: u128) -> Vec<usize> {
    let txn = store.inner.db.begin_read().unwrap();
    let chunks = txn.open_table(schema::CHUNKS).unwrap();
    chunks
        .range((key, 0)..=(key, u64::MAX))
        .unwrap()
        .map(|entry| {
            let (_, value) = entry.unwrap();
            super::super::segment::Segment::parse(value.value())
                .unwrap()
                .len()
        })
        .collect()
}
