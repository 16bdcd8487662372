//! Store tests against real redb files in temporary directories, with a stand-in for the
//! recorder's live recordings (`stand_in`): round trips, reopening after a clean close and
//! after a SIGKILL, collecting expired recordings, supersede, limits and refusals, the
//! journal, and the file system seam under it all (`files`, over the real file system watched
//! by `watched_files`).

mod files;
mod full_disk;
mod group_commit;
mod journal;
mod lifecycle;
mod power_cuts;
mod read_cache;
mod refusals;
mod sealing;
mod stand_in;
mod sweeping;
mod upgrades;
mod watched_files;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use redb::ReadableTable;
use tempfile::TempDir;
use tokio::sync::{mpsc, oneshot};

use super::ops::Op;
use super::pipeline::{Writer, WriterSettings};
use super::schema::{self, SCHEMA_VERSION};
use super::{Chunk, Committed, Store, StoreOptions, SweepReport};
use crate::clock::{Clock, ManualClock};
use crate::error::Error;
use crate::id::ConversationId;
use crate::status::Status;
use stand_in::{Producer, Progress, Recording, Recordings};

use super::live::LiveRecording;

/// Where every test clock starts, in ms since the epoch.
pub(super) const T0: u64 = 1_700_000_000_000;
const RETENTION: Duration = Duration::from_secs(10 * 60);
const TOMBSTONE_RETENTION: Duration = Duration::from_secs(60 * 60);
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

/// A commit pipeline over `store`'s file, for tests that queue ops before it runs (the
/// store's own pipeline closed first).
pub(super) fn pipeline_over(
    store: &Store,
    clock: &ManualClock,
    commit_interval: Duration,
) -> Writer {
    let settings = WriterSettings {
        retention_ms: ms(RETENTION),
        tombstone_ms: ms(RETENTION),
        clock: Arc::new(clock.clone()),
        commit_interval,
    };
    Writer::new(
        store.inner.db.clone(),
        store.inner.journal.clone(),
        settings,
    )
}

/// An append of the one-byte chunk `x` to `tape` at `index` (and offset `index`) from producer
/// `session`, with the receiver of its answer.
pub(super) fn one_byte_append(
    tape: &Arc<Recording>,
    session: u64,
    index: u64,
) -> (Op, oneshot::Receiver<crate::Result<u64>>) {
    let (done, answer) = oneshot::channel();
    let chunk = Chunk {
        index,
        offset: index,
        data: bytes::Bytes::from_static(b"x"),
        committed_ms: 0,
    };
    let op = Op::Append {
        live: tape.clone(),
        session,
        chunk,
        done,
    };
    (op, answer)
}

pub(super) fn db_path(dir: &TempDir) -> PathBuf {
    dir.path().join("tapedeck.redb")
}

/// Live recordings at once in the tests, unless a test says otherwise.
const MAX_LIVE: usize = 100;

pub(super) fn options(clock: &ManualClock) -> StoreOptions {
    StoreOptions {
        retention: RETENTION,
        tombstone_retention: TOMBSTONE_RETENTION,
        clock: Arc::new(clock.clone()),
        ..StoreOptions::default()
    }
}

/// The store under test, with the stand-in's live recordings over it: starts, ends and live
/// lookups go through them, everything else is the store's own.
#[derive(Clone, Debug)]
pub(super) struct TestStore {
    recordings: Recordings,
}

impl std::ops::Deref for TestStore {
    type Target = Store;

    fn deref(&self) -> &Store {
        self.recordings.store()
    }
}

impl TestStore {
    pub(super) fn new(store: Store, max_live: usize) -> Self {
        Self {
            recordings: Recordings::new(store, max_live),
        }
    }

    pub(super) async fn start(&self, id: &ConversationId) -> crate::Result<Producer> {
        self.recordings.start(id).await
    }

    pub(super) async fn end(
        &self,
        tape: &Arc<Recording>,
        status: Status,
        message: Option<String>,
    ) -> crate::Result<bool> {
        self.recordings.end(tape, status, message).await
    }

    pub(super) fn live(&self, key: u128) -> Option<Arc<Recording>> {
        self.recordings.live(key)
    }

    pub(super) fn live_recordings(&self) -> Vec<Arc<Recording>> {
        self.recordings.live_recordings()
    }

    pub(super) async fn close(self) {
        self.recordings.store().clone().close().await
    }
}

pub(super) fn open(dir: &TempDir, clock: &ManualClock) -> TestStore {
    open_path(&db_path(dir), options(clock))
}

pub(super) fn open_path(path: &Path, options: StoreOptions) -> TestStore {
    TestStore::new(Store::open(path, options).unwrap(), MAX_LIVE)
}

pub(super) fn fresh() -> (TempDir, ManualClock, TestStore) {
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
pub(super) async fn record(writer: &mut Producer, texts: &[&str]) -> u64 {
    let mut last = None;
    for text in texts {
        last = Some(writer.append(text).await.unwrap());
    }
    match last {
        // Commits are in order: the last ack covers every earlier chunk.
        Some(committed) => acked(committed).await.unwrap(),
        None => writer.recording().progress().bytes,
    }
}

pub(super) async fn all_chunks(store: &Store, key: u128, generation: u64) -> Vec<Chunk> {
    store
        .read_chunks(key, generation, 0, usize::MAX)
        .await
        .unwrap()
}

pub(super) fn texts_of(chunks: &[Chunk]) -> Vec<String> {
    chunks
        .iter()
        .map(|c| String::from_utf8(c.data.to_vec()).unwrap())
        .collect()
}

/// Committed chunks of `key`, whatever recording they belong to: in `chunks`, or unfolded in
/// the journal.
pub(super) fn stored_chunks(store: &Store, key: u128) -> usize {
    let mut indexes = folded_indexes(store, key);
    indexes.extend(store.inner.journal.view(key, 0, usize::MAX).indexes());
    indexes.len()
}

/// Indexes of `key`'s chunks in `chunks`, in its segments.
pub(super) fn folded_indexes(store: &Store, key: u128) -> std::collections::BTreeSet<u64> {
    let txn = store.inner.db.begin_read().unwrap();
    let chunks = txn.open_table(schema::CHUNKS).unwrap();
    let mut indexes = std::collections::BTreeSet::new();
    for entry in chunks.range((key, 0)..=(key, u64::MAX)).unwrap() {
        let (first, value) = entry.unwrap();
        let count = super::segment::Segment::parse(value.value()).unwrap().len();
        indexes.extend((0..count as u64).map(|i| first.value().1 + i));
    }
    indexes
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
