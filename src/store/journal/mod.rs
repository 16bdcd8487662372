//! The journal: every append lands at the end of one append-ordered table, so a commit writes
//! the same few pages however many recordings it touches. A recording's chunks are folded into
//! `chunks` a run at a time (once it has [`FOLD_RUN`] unfolded, and when it ends), packed into
//! segments, so each of its pages there is written once, and full. Folded entries stay in
//! the journal until every entry before them is folded too; then the whole prefix is deleted
//! at once. An in-memory index tells readers where each recording's unfolded chunks are.
//!
//! Invariants: a recording's folded chunks are a prefix of it, and its unfolded chunks the
//! rest. Every journal entry belongs to a stored recording and equals its copy in `chunks` if
//! it has one; folding the whole journal on open folds only the entries past a recording's
//! last segment.
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;

use redb::ReadableTable;

use super::schema::{self, CHUNKS, JOURNAL};
use super::segment::{self, SEGMENT_BYTES, Segment};
use super::wal::Logged;
use crate::error::{Error, Result};

mod delta;

use delta::Appended;
pub(crate) use delta::{JournalDelta, fold_all};

/// Journal entries read out of the table: `(seq, value)`.
pub(crate) type ReadEntries = Vec<(u64, Vec<u8>)>;

/// Decodes journal entries `(seq, value)` that hold consecutive chunks of one recording (of
/// `key`, when given): returns the recording, the index of the first chunk, and the chunk
/// values. Fails with `Corrupt` when they are anything else.
pub(crate) fn decode_run(
    key: Option<u128>,
    entries: &[(u64, Vec<u8>)],
) -> Result<(u128, u64, Vec<&[u8]>)> {
    let mut values = Vec::with_capacity(entries.len());
    let (mut run_key, mut first) = (key, None);
    for (seq, value) in entries {
        let (entry_key, index, chunk) = schema::decode_journal(value)?;
        let expected_key = *run_key.get_or_insert(entry_key);
        let expected_index = first.map_or(index, |first| first + values.len() as u64);
        if (entry_key, index) != (expected_key, expected_index) {
            return Err(Error::Corrupt {
                detail: format!(
                    "journal entry {seq} holds chunk {index} of {entry_key:032x}, \
                     expected chunk {expected_index} of {expected_key:032x}"
                ),
            });
        }
        first.get_or_insert(index);
        values.push(chunk);
    }
    Ok((
        run_key.unwrap_or_default(),
        first.unwrap_or_default(),
        values,
    ))
}

fn missing_entry(seq: u64) -> Error {
    Error::Corrupt {
        detail: format!("journal entry {seq} is missing"),
    }
}

/// Unfolded chunks that make a recording due for folding: about a page of `chunks`.
const FOLD_RUN: usize = 64;
/// Entries folded in one commit, at most: this many, or twice what it appended if more, so
/// that folding keeps up with appends but never holds a commit up for long when many
/// recordings fall due at once. Recordings left over are folded by the next commits.
const MIN_FOLD_BUDGET: usize = 512;
/// How far (in entries) the oldest unfolded entry may fall behind the journal's end before
/// its recording is folded however few chunks it has; bounds the journal of slow producers.
const MAX_SPAN: u64 = 64 * 1024;
/// Dead entries at the journal's start deleted together, at the least.
const MIN_PRUNE: u64 = 1024;
/// Chunks at least this long go straight into `chunks`, as segments of their own, while their
/// recording has nothing in the journal: no other chunk would fit beside them in a segment,
/// and folding them would write them twice.
pub(crate) const DIRECT_CHUNK_BYTES: usize = SEGMENT_BYTES / 2;

pub(crate) type JournalTable<'r, 'txn> = Logged<'r, 'txn, u64, &'static [u8]>;
pub(crate) type ChunksTable<'r, 'txn> = Logged<'r, 'txn, (u128, u64), &'static [u8]>;

/// The journal entries of one recording.
#[derive(Debug, Default)]
struct Entries {
    /// Chunk index of `unfolded[0]`.
    first_index: u64,
    /// Entries not yet folded into `chunks`, in chunk order.
    unfolded: VecDeque<u64>,
    /// Entries folded but still in the journal: deleted with the recording, or with the
    /// journal's dead prefix.
    folded: VecDeque<u64>,
}

/// Where the journal entries of every recording are. Changed by the writer thread only, after
/// the commit that made the change.
#[derive(Debug, Default)]
pub(crate) struct JournalIndex {
    recordings: Mutex<HashMap<u128, Entries>>,
}

/// The unfolded entries of one recording's chunks from some index on, as committed when the
/// view was taken. A read transaction begun after that sees each of these chunks either still
/// in the journal or already folded into `chunks` (and the folded prefix is read first).
#[derive(Debug, Default)]
pub(crate) struct JournalView {
    first_index: u64,
    seqs: Vec<u64>,
}

impl JournalView {
    /// The journal entry of chunk `index`, if it was unfolded when the view was taken.
    pub(crate) fn seq(&self, index: u64) -> Option<u64> {
        let at = index.checked_sub(self.first_index)?;
        self.seqs.get(usize::try_from(at).ok()?).copied()
    }

    /// The entry of the recording's newest unfolded chunk.
    pub(crate) fn last(&self) -> Option<u64> {
        self.seqs.last().copied()
    }
}

impl JournalIndex {
    /// The unfolded entries of chunks `from..` of `key`, at most `limit` of them. Take it
    /// before the read transaction that uses it begins.
    pub(crate) fn view(&self, key: u128, from: u64, limit: usize) -> JournalView {
        let recordings = self.lock();
        let Some(entries) = recordings.get(&key) else {
            return JournalView::default();
        };
        let first_index = from.max(entries.first_index);
        let skip = (first_index - entries.first_index) as usize;
        JournalView {
            first_index,
            seqs: entries
                .unfolded
                .iter()
                .skip(skip)
                .take(limit)
                .copied()
                .collect(),
        }
    }

    /// The entry of `key`'s newest unfolded chunk only.
    pub(crate) fn last(&self, key: u128) -> JournalView {
        let recordings = self.lock();
        let Some(entries) = recordings.get(&key) else {
            return JournalView::default();
        };
        match entries.unfolded.back() {
            Some(&seq) => JournalView {
                first_index: entries.first_index + entries.unfolded.len() as u64 - 1,
                seqs: vec![seq],
            },
            None => JournalView::default(),
        }
    }

    fn has_unfolded(&self, key: u128) -> bool {
        self.lock()
            .get(&key)
            .is_some_and(|e| !e.unfolded.is_empty())
    }

    /// Every entry of `key` still in the journal, folded or not.
    fn all_seqs(&self, key: u128) -> Vec<u64> {
        match self.lock().get(&key) {
            Some(entries) => entries
                .folded
                .iter()
                .chain(&entries.unfolded)
                .copied()
                .collect(),
            None => Vec::new(),
        }
    }

    /// The unfolded entries of `key`.
    fn unfolded(&self, key: u128) -> Vec<u64> {
        match self.lock().get(&key) {
            Some(entries) => entries.unfolded.iter().copied().collect(),
            None => Vec::new(),
        }
    }

    /// Recordings to fold now: those with a run of unfolded chunks (counting `pending`, the
    /// entries this transaction appended), and the ones holding the oldest unfolded entries
    /// while those lag more than [`MAX_SPAN`] behind `next_seq`.
    fn due(&self, pending: &HashMap<u128, Appended>, next_seq: u64) -> Vec<u128> {
        let recordings = self.lock();
        let mut due: Vec<u128> = Vec::new();
        for (&key, entries) in recordings.iter() {
            let added = pending.get(&key).map_or(0, |a| a.seqs.len());
            let lagging = entries
                .unfolded
                .front()
                .is_some_and(|&first| first + MAX_SPAN < next_seq);
            if entries.unfolded.len() + added >= FOLD_RUN || lagging {
                due.push(key);
            }
        }
        for (&key, appended) in pending {
            if appended.seqs.len() >= FOLD_RUN && !recordings.contains_key(&key) {
                due.push(key);
            }
        }
        due
    }

    /// Records what a committed transaction changed, in the order it happened: recordings
    /// forgotten, entries appended (to the recordings started after), runs folded, and the
    /// dead prefix deleted.
    fn apply(&self, delta: JournalDelta) {
        let mut recordings = self.lock();
        for key in &delta.forgotten {
            recordings.remove(key);
        }
        for (key, appended) in delta.appended {
            let entries = recordings.entry(key).or_insert_with(|| Entries {
                first_index: appended.first_index,
                ..Entries::default()
            });
            if entries.unfolded.is_empty() {
                entries.first_index = appended.first_index;
            }
            entries.unfolded.extend(appended.seqs);
        }
        for (key, count) in delta.folded {
            if let Some(entries) = recordings.get_mut(&key) {
                let count = count.min(entries.unfolded.len());
                let folded: Vec<u64> = entries.unfolded.drain(..count).collect();
                entries.first_index += count as u64;
                entries.folded.extend(folded);
            }
        }
        if let Some(cut) = delta.pruned_to {
            recordings.retain(|_, entries| {
                while entries.folded.front().is_some_and(|&seq| seq < cut) {
                    entries.folded.pop_front();
                }
                !entries.folded.is_empty() || !entries.unfolded.is_empty()
            });
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u128, Entries>> {
        self.recordings.lock().unwrap_or_else(|e| e.into_inner())
    }
}
