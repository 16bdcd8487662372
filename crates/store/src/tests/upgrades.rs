//! Files of older schemas: a schema-1 file upgraded in place, a schema-3 file and the log a
//! server of that schema left at a crash rolled forward, then packed into segments.
use super::super::schema;
use redb::ReadableTableMetadata;

use super::journal::{folded_chunks, journal_table_entries};
use super::*;

/// A file of schema 1 (no journal; a live recording's row counted its chunks) opens as
/// the current schema with everything in it, its live recording detached.
#[tokio::test]
async fn a_schema_1_file_is_upgraded_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let clock = crate::clock::ManualClock::new(super::T0);
    let key = id("old").key();
    {
        let db = redb::Database::create(super::db_path(&dir)).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut meta = txn.open_table(schema::META).unwrap();
            meta.insert(schema::SCHEMA_VERSION_KEY, 1).unwrap();
            let mut chunks = txn.open_table(schema::CHUNKS).unwrap();
            let mut value = Vec::new();
            for (index, (offset, text)) in [(0, "left "), (5, "live")].into_iter().enumerate() {
                let layout = schema::ChunkLayout::Untimed;
                schema::encode_chunk_into(&mut value, layout, offset, 0, text.as_bytes());
                chunks
                    .insert((key, index as u64), value.as_slice())
                    .unwrap();
            }
            let row = super::super::upgrade::RowV2 {
                original_id: b"old".to_vec(),
                status: Status::Recording,
                created_ms: super::T0,
                updated_ms: super::T0,
                finished_ms: None,
                expires_at_ms: None,
                chunk_count: 2,
                byte_len: 9,
                error: None,
                generation: 1,
            };
            let mut recordings = txn.open_table(schema::RECORDINGS).unwrap();
            let row = schema::encode(&row, "a schema-1 row").unwrap();
            recordings.insert(key, row.as_slice()).unwrap();
            txn.open_table(schema::EXPIRY).unwrap();
        }
        txn.commit().unwrap();
    }
    let store = open(&dir, &clock);
    let meta = store.meta(key).await.unwrap().unwrap();
    assert_eq!(meta.status, Status::Recording);
    assert!(
        !meta.timed_chunks,
        "its chunks keep the layout they were written in"
    );
    assert_eq!((meta.chunk_count, meta.byte_len), (2, 9));
    assert_eq!(
        texts_of(&all_chunks(&store, key, 1).await),
        ["left ", "live"]
    );
    store.close().await;
    let db = redb::Database::open(super::db_path(&dir)).unwrap();
    let txn = redb::ReadableDatabase::begin_read(&db).unwrap();
    let meta = txn.open_table(schema::META).unwrap();
    let version = meta
        .get(schema::SCHEMA_VERSION_KEY)
        .unwrap()
        .unwrap()
        .value();
    assert_eq!(version, schema::SCHEMA_VERSION);
}

/// A file of schema 3 (one chunk per row) with a log a server of that schema left at a crash,
/// folds included: the file is rolled forward through the log as it was written, then packed
/// into segments and its journal folded, and the recording reads whole.
#[tokio::test]
async fn a_schema_3_file_is_rolled_forward_through_its_log_then_packed() {
    let dir = tempfile::tempdir().unwrap();
    let clock = crate::clock::ManualClock::new(super::T0);
    let key = id("crashed").key();
    let layout = schema::ChunkLayout::Timed;
    let texts = ["zero ", "one ", "two ", "three"];
    let mut offsets = Vec::new();
    let mut offset = 0;
    for text in texts {
        offsets.push(offset);
        offset += text.len() as u64;
    }
    {
        let db = redb::Database::create(super::db_path(&dir)).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut meta = txn.open_table(schema::META).unwrap();
            meta.insert(schema::SCHEMA_VERSION_KEY, 3).unwrap();
            let mut meta_row = schema::RecordingMeta::started(&id("crashed"), 1, super::T0);
            meta_row.timed_chunks = true;
            let mut recordings = txn.open_table(schema::RECORDINGS).unwrap();
            let row = schema::encode_meta(&meta_row).unwrap();
            recordings.insert(key, row.as_slice()).unwrap();
            let mut started = txn.open_table(schema::STARTED).unwrap();
            started.insert((super::T0, key), ()).unwrap();
            // Chunk 0 folded as a row of its own; chunks 1 to 3 in the journal.
            let mut value = Vec::new();
            let mut chunks = txn.open_table(schema::CHUNKS).unwrap();
            schema::encode_chunk_into(&mut value, layout, 0, super::T0, texts[0].as_bytes());
            chunks.insert((key, 0), value.as_slice()).unwrap();
            let mut journal = txn.open_table(schema::JOURNAL).unwrap();
            for index in 1..4 {
                let chunk = (offsets[index], super::T0, texts[index].as_bytes());
                schema::encode_journal_into(&mut value, key, index as u64, layout, chunk);
                journal.insert(index as u64, value.as_slice()).unwrap();
            }
        }
        txn.commit().unwrap();
    }
    // The crashed server's last commit: journal entry 1 folded into a row of its own, then
    // the journal's dead prefix deleted, so that chunk 1 is only where the fold put it.
    use super::super::wal::{self, Redo, TableId};
    let mut commit = vec![4u8];
    commit.extend_from_slice(&1u64.to_le_bytes());
    let redo = Redo::default();
    let end = 2u64.to_le_bytes();
    let (start, end) = (
        std::ops::Bound::Unbounded,
        std::ops::Bound::Excluded(&end[..]),
    );
    redo.remove_range(TableId::Journal, start, end);
    commit.extend_from_slice(&redo.take());
    let wal_path = wal::path_of(&super::db_path(&dir));
    let mut log = wal::Wal::open_empty(&crate::files::RealFiles, &wal_path, 0).unwrap();
    log.append(&commit).unwrap();
    drop(log);

    let store = open(&dir, &clock);
    assert_eq!(
        texts_of(&all_chunks(&store, key, 1).await),
        texts,
        "every chunk, once"
    );
    assert_eq!(journal_table_entries(&store), 0);
    // Chunks 0 and 1 (rows) and 2 and 3 (the journal), packed into a segment each.
    let txn = store.inner.db.begin_read().unwrap();
    let segments = txn.open_table(schema::CHUNKS).unwrap();
    assert_eq!(segments.len().unwrap(), 2);
    assert_eq!(folded_chunks(&store, key), 4);
}

/// A file of schema 4 had no live index: the upgrade fills it from the rows, naming the live
/// recording and not the completed one, and `db check` finds the two in agreement.
#[tokio::test]
async fn a_schema_4_file_gains_the_live_index() {
    let dir = tempfile::tempdir().unwrap();
    let clock = crate::clock::ManualClock::new(super::T0);
    {
        let store = open(&dir, &clock);
        let mut live = store.start(&id("left-live")).await.unwrap();
        record(&mut live, &["still ", "going"]).await;
        let mut done = store.start(&id("completed")).await.unwrap();
        record(&mut done, &["done"]).await;
        done.finish(Status::Completed, None).await.unwrap();
        drop(live);
        store.close().await;
    }
    {
        // Back to schema 4: no live index.
        let db = redb::Database::open(super::db_path(&dir)).unwrap();
        let txn = db.begin_write().unwrap();
        assert!(txn.delete_table(crate::live_index::LIVE).unwrap());
        txn.open_table(schema::META)
            .unwrap()
            .insert(schema::SCHEMA_VERSION_KEY, 4)
            .unwrap();
        txn.commit().unwrap();
    }
    let store = open(&dir, &clock);
    let adopted: Vec<_> = store
        .live_recordings()
        .iter()
        .map(|tape| tape.key())
        .collect();
    assert_eq!(adopted, [id("left-live").key()]);
    store.close().await;
    let problems = crate::offline::check(&super::db_path(&dir), |_, _| {}).unwrap();
    assert!(problems.is_empty(), "{problems:?}");
}
