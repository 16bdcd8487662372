//! The journal: every append lands at the end of one append-ordered table, so a commit writes
//! the same few pages however many recordings it touches. The writer folds the oldest entries
//! into `chunks` in bulk, where each recording's pages are then written once per fold instead of
//! once per commit. An in-memory index tells readers where each recording's unfolded chunks are.
//!
//! Invariant: a recording's folded chunks are a prefix of it and its unfolded chunks the rest,
//! because its entries are appended in chunk order and folds take the oldest entries first.
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;

use redb::ReadableTable;

use super::schema::{self, CHUNKS, JOURNAL};
use crate::error::{Error, Result};

/// Entries a fold moves per recording with chunks in the journal, so that each recording's
/// pages in `chunks` are rewritten once per this many of its chunks, not once per commit.
const FOLD_ENTRIES_PER_RECORDING: u64 = 8;
/// Fewest and most entries one fold moves. Small folds keep the pause they cause in the
/// commit pipeline short; a fold of 2,048 entries takes about a millisecond here.
const MIN_FOLD_ENTRIES: u64 = 2 * 1024;
const MAX_FOLD_ENTRIES: u64 = 16 * 1024;
/// Most bytes of journal values one fold moves; bounds the room a fold needs in the file.
const MAX_FOLD_BYTES: u64 = 4 * 1024 * 1024;
/// The largest fold, as used on open and before sweeps.
pub(crate) const LARGEST_FOLD: Size = Size {
    entries: MAX_FOLD_ENTRIES,
    bytes: MAX_FOLD_BYTES,
};
/// Chunks at least this long go straight into `chunks` while their recording has nothing in
/// the journal: they fill pages of their own anyway, and folding them would write them twice.
pub(crate) const DIRECT_CHUNK_BYTES: usize = 2048;

/// How much the journal holds, or a fold moved.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Size {
    pub(crate) entries: u64,
    pub(crate) bytes: u64,
}

impl Size {
    /// Whether this is at least `limit` in entries or in bytes.
    pub(crate) fn reaches(self, limit: Size) -> bool {
        self.entries >= limit.entries || self.bytes >= limit.bytes
    }

    fn twice(self) -> Size {
        Size {
            entries: 2 * self.entries,
            bytes: 2 * self.bytes,
        }
    }

    fn add(&mut self, bytes: usize) {
        self.entries += 1;
        self.bytes += bytes as u64;
    }

    /// This size less `other`, never below zero.
    pub(crate) fn minus(self, other: Size) -> Size {
        Size {
            entries: self.entries.saturating_sub(other.entries),
            bytes: self.bytes.saturating_sub(other.bytes),
        }
    }

    /// This size plus `added`, less `removed`.
    fn changed(self, added: Size, removed: Size) -> Size {
        Size {
            entries: self.entries + added.entries,
            bytes: self.bytes + added.bytes,
        }
        .minus(removed)
    }
}

pub(crate) type JournalTable<'txn> = redb::Table<'txn, u64, &'static [u8]>;

/// The unfolded chunks of one recording: chunk `first_index + i` is journal entry `seqs[i]`.
#[derive(Debug, Clone, Default)]
struct Unfolded {
    first_index: u64,
    seqs: VecDeque<u64>,
}

/// Where the committed, unfolded chunks of every recording are in the journal. Changed by the
/// writer thread only, after the commit that made the change.
#[derive(Debug, Default)]
pub(crate) struct JournalIndex {
    recordings: Mutex<HashMap<u128, Unfolded>>,
}

/// The journal entries of one recording's chunks from some index on, as committed when the
/// view was taken. A read transaction begun after that sees each of these chunks either still
/// in the journal or already folded into `chunks`.
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
    /// The entries of chunks `from..` of `key`, at most `limit` of them. Take it before the read
    /// transaction that uses it begins.
    pub(crate) fn view(&self, key: u128, from: u64, limit: usize) -> JournalView {
        let recordings = self.lock();
        let Some(unfolded) = recordings.get(&key) else {
            return JournalView::default();
        };
        let first_index = from.max(unfolded.first_index);
        let skip = (first_index - unfolded.first_index) as usize;
        JournalView {
            first_index,
            seqs: unfolded
                .seqs
                .iter()
                .skip(skip)
                .take(limit)
                .copied()
                .collect(),
        }
    }

    /// The entries of `key`'s newest unfolded chunk only.
    pub(crate) fn last(&self, key: u128) -> JournalView {
        let recordings = self.lock();
        match recordings.get(&key) {
            Some(unfolded) if !unfolded.seqs.is_empty() => JournalView {
                first_index: unfolded.first_index + unfolded.seqs.len() as u64 - 1,
                seqs: unfolded.seqs.back().copied().into_iter().collect(),
            },
            _ => JournalView::default(),
        }
    }

    fn contains(&self, key: u128) -> bool {
        self.lock().contains_key(&key)
    }

    /// How much the next fold should move: enough for a few chunks of every recording in the
    /// journal. A fold is due once the journal holds twice that, so that the entries it moves
    /// are the older half.
    pub(crate) fn fold_step(&self) -> Size {
        let recordings = self.lock().len() as u64;
        Size {
            entries: (FOLD_ENTRIES_PER_RECORDING * recordings)
                .clamp(MIN_FOLD_ENTRIES, MAX_FOLD_ENTRIES),
            bytes: MAX_FOLD_BYTES,
        }
    }

    /// Whether a journal of `size` is due to be folded, and by how much.
    pub(crate) fn fold_due(&self, size: Size) -> Option<Size> {
        let step = self.fold_step();
        size.reaches(step.twice()).then_some(step)
    }

    /// Records what a committed transaction changed: forgotten recordings first, since any
    /// entries appended for the same key after forgetting belong to its new recording.
    fn apply(&self, delta: JournalDelta) {
        let mut recordings = self.lock();
        for key in delta.forgotten {
            recordings.remove(&key);
        }
        for (key, appended) in delta.appended {
            match recordings.entry(key) {
                Entry::Occupied(mut entry) => entry.get_mut().seqs.extend(appended.seqs),
                Entry::Vacant(entry) => {
                    entry.insert(appended);
                }
            }
        }
    }

    /// Records a committed fold: the first `count` unfolded chunks of each key are in `chunks`.
    fn folded(&self, counts: &HashMap<u128, u64>) {
        let mut recordings = self.lock();
        for (&key, &count) in counts {
            if let Some(unfolded) = recordings.get_mut(&key) {
                let count = (count as usize).min(unfolded.seqs.len());
                unfolded.seqs.drain(..count);
                unfolded.first_index += count as u64;
                if unfolded.seqs.is_empty() {
                    recordings.remove(&key);
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u128, Unfolded>> {
        self.recordings.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The journal changes of one write transaction, applied to the index once it commits and
/// dropped if it fails.
pub(crate) struct JournalDelta {
    /// Entries appended in this transaction, per key, since the key was last forgotten in it.
    appended: HashMap<u128, Unfolded>,
    /// Keys whose committed entries this transaction deleted.
    forgotten: HashSet<u128>,
    next_seq: u64,
    added: Size,
    removed: Size,
}

impl JournalDelta {
    /// A delta whose first append gets sequence number `next_seq`.
    pub(crate) fn new(next_seq: u64) -> Self {
        Self {
            appended: HashMap::new(),
            forgotten: HashSet::new(),
            next_seq,
            added: Size::default(),
            removed: Size::default(),
        }
    }

    /// The sequence number the next transaction starts from.
    pub(crate) fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Whether `key` has chunks in the journal, committed or added by this transaction.
    pub(crate) fn holds(&self, index: &JournalIndex, key: u128) -> bool {
        self.appended.contains_key(&key) || (!self.forgotten.contains(&key) && index.contains(key))
    }

    /// Appends chunk `index` of `key` at the journal's end; `value` is the encoded entry.
    pub(crate) fn append(
        &mut self,
        journal: &mut JournalTable<'_>,
        key: u128,
        index: u64,
        value: &[u8],
    ) -> Result<()> {
        let seq = self.next_seq;
        journal.insert(seq, value).map_err(Error::storage)?;
        self.next_seq += 1;
        self.added.add(value.len());
        self.appended
            .entry(key)
            .or_insert_with(|| Unfolded {
                first_index: index,
                seqs: VecDeque::new(),
            })
            .seqs
            .push_back(seq);
        Ok(())
    }

    /// Deletes every unfolded chunk of `key`, committed or appended in this transaction.
    /// Returns how many there were.
    pub(crate) fn forget(
        &mut self,
        journal: &mut JournalTable<'_>,
        index: &JournalIndex,
        key: u128,
    ) -> Result<u64> {
        let mut seqs: Vec<u64> = Vec::new();
        if self.forgotten.insert(key) {
            seqs.extend(index.view(key, 0, usize::MAX).seqs);
        }
        if let Some(appended) = self.appended.remove(&key) {
            seqs.extend(appended.seqs);
        }
        for &seq in &seqs {
            if let Some(value) = journal.remove(seq).map_err(Error::storage)? {
                self.removed.add(value.value().len());
            }
        }
        Ok(seqs.len() as u64)
    }

    /// Applies the committed delta to `index`; returns the journal's new size, given its
    /// size before.
    pub(crate) fn commit_to(self, index: &JournalIndex, before: Size) -> Size {
        let after = before.changed(self.added, self.removed);
        index.apply(self);
        after
    }
}

/// What one fold moved.
pub(crate) struct Fold {
    /// Chunks moved, per recording.
    counts: HashMap<u128, u64>,
    pub(crate) size: Size,
}

impl Fold {
    /// Tells `index` that the fold is committed.
    pub(crate) fn commit_to(&self, index: &JournalIndex) {
        index.folded(&self.counts);
    }
}

/// Moves the oldest journal entries into `chunks`, within `txn`: up to `limit` (in entries or
/// in bytes, whichever is reached first), and at least one if there is any.
pub(crate) fn fold(txn: &redb::WriteTransaction, limit: Size) -> Result<Fold> {
    let mut journal = txn.open_table(JOURNAL).map_err(Error::storage)?;
    let mut chunks = txn.open_table(CHUNKS).map_err(Error::storage)?;
    let mut moved: Vec<(u128, u64, Vec<u8>)> = Vec::new();
    let mut size = Size::default();
    let mut last_seq = None;
    for entry in journal.iter().map_err(Error::storage)? {
        let (seq, value) = entry.map_err(Error::storage)?;
        let (key, index, chunk) = schema::decode_journal(value.value())?;
        moved.push((key, index, chunk.to_vec()));
        size.add(value.value().len());
        last_seq = Some(seq.value());
        if size.reaches(limit) {
            break;
        }
    }
    let Some(last_seq) = last_seq else {
        return Ok(Fold {
            counts: HashMap::new(),
            size,
        });
    };
    // In key order, so that each recording's pages are filled in one go.
    moved.sort_unstable_by_key(|&(key, index, _)| (key, index));
    let mut counts: HashMap<u128, u64> = HashMap::new();
    for (key, index, chunk) in &moved {
        chunks
            .insert((*key, *index), chunk.as_slice())
            .map_err(Error::storage)?;
        *counts.entry(*key).or_default() += 1;
    }
    journal
        .retain_in(..=last_seq, |_, _| false)
        .map_err(Error::storage)?;
    Ok(Fold { counts, size })
}

/// Folds the whole journal into `chunks`, within `txn`; used on open, when no index exists.
pub(crate) fn fold_all(txn: &redb::WriteTransaction) -> Result<u64> {
    let mut total = 0;
    loop {
        let fold = fold(txn, LARGEST_FOLD)?;
        if fold.size.entries == 0 {
            return Ok(total);
        }
        total += fold.size.entries;
    }
}
