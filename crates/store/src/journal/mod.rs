//! The journal: each live recording's newest chunks, committed but not yet packed into
//! `chunks`, held in memory. Their bytes are durable in the write-ahead log, which logged each
//! chunk as it was appended; so an append costs the commit no redb write at all. Once a
//! recording has more than a segment's worth unfolded, its full segments are folded into
//! `chunks` (logged by count, not by bytes), and the rest waits for more.
//!
//! Invariants: a recording's folded chunks are a prefix of it, and its unfolded chunks the
//! rest. Every chunk unfolded in memory was appended since the last checkpoint, so the log
//! holds it: a checkpoint folds every recording's unfolded chunks first (its last segment may
//! then be short; the next fold packs more chunks into it). After a crash, rolling the file
//! forward through the log rebuilds the unfolded chunks and folds them into `chunks`.
use std::collections::HashMap;
use std::sync::Mutex;

use super::segment::SEGMENT_BYTES;
use super::wal::LazyLogged;

mod delta;
mod legacy_table;
mod packing;

pub(crate) use delta::JournalDelta;
pub(crate) use legacy_table::{decode_run, fold_all};
pub(crate) use packing::plan_fold;

/// Chunks at least this long go straight into `chunks`, as segments of their own, while their
/// recording has nothing unfolded: no other chunk would fit beside them in a segment.
pub(crate) const DIRECT_CHUNK_BYTES: usize = SEGMENT_BYTES / 2;

/// Where a run's buffer stops doubling, once: a live recording's run is folded soon after it
/// passes a segment's worth, so doubling past that would leave most runs holding about twice
/// the memory they use.
const RUN_BYTES: usize = SEGMENT_BYTES + SEGMENT_BYTES / 4;

/// The `chunks` table as the commit pipeline changes it: logged, and opened on its first use.
pub(crate) type ChunksTable<'r, 'txn> = LazyLogged<'r, 'txn, (u128, u64), &'static [u8]>;

/// A run of one recording's consecutive chunk values (each as its layout encodes it), back to
/// back in one buffer.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Run {
    /// Which of the conversation's recordings the chunks belong to.
    generation: u64,
    /// Chunk index of the first value.
    first_index: u64,
    bytes: Vec<u8>,
    /// Where each value ends in `bytes`.
    ends: Vec<usize>,
}

impl Run {
    /// An empty run of recording `generation` that starts at chunk `first_index`.
    pub(crate) fn starting_at(generation: u64, first_index: u64) -> Self {
        Self {
            generation,
            first_index,
            ..Self::default()
        }
    }

    pub(crate) fn first_index(&self) -> u64 {
        self.first_index
    }

    /// The index just past its last chunk.
    pub(crate) fn end_index(&self) -> u64 {
        self.first_index + self.ends.len() as u64
    }

    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// What its values would take in a segment, about.
    fn packed_bytes(&self) -> usize {
        self.bytes.len() + 4 * self.ends.len()
    }

    /// Adds the next chunk's value.
    pub(crate) fn push(&mut self, value: &[u8]) {
        let needed = self.bytes.len() + value.len();
        let capacity = self.bytes.capacity();
        if needed > capacity {
            // Doubling, except that the growth that passes RUN_BYTES stops there.
            let doubled = (2 * capacity).max(needed).max(64);
            let grown = if capacity < RUN_BYTES && doubled > RUN_BYTES {
                RUN_BYTES.max(needed)
            } else {
                doubled
            };
            self.bytes.reserve_exact(grown - self.bytes.len());
        }
        self.bytes.extend_from_slice(value);
        self.ends.push(self.bytes.len());
    }

    /// The value at `position` in the run.
    fn at(&self, position: usize) -> &[u8] {
        let start = position.checked_sub(1).map_or(0, |p| self.ends[p]);
        &self.bytes[start..self.ends[position]]
    }

    /// The value of chunk `index`, if the run holds it.
    pub(crate) fn value(&self, index: u64) -> Option<&[u8]> {
        let position = usize::try_from(index.checked_sub(self.first_index)?).ok()?;
        (position < self.len()).then(|| self.at(position))
    }

    /// Its values, in order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &[u8]> {
        (0..self.len()).map(|position| self.at(position))
    }

    /// Drops its first `count` values (all of them, if it has fewer).
    pub(crate) fn drop_front(&mut self, count: usize) {
        let count = count.min(self.len());
        if count == 0 {
            return;
        }
        let cut = self.ends[count - 1];
        self.bytes.drain(..cut);
        self.ends.drain(..count);
        for end in &mut self.ends {
            *end -= cut;
        }
        self.first_index += count as u64;
    }

    /// Adds the values of `next`, which must follow on from this run.
    fn extend(&mut self, next: &Run) {
        debug_assert_eq!(next.first_index, self.end_index());
        for value in next.values() {
            self.push(value);
        }
    }

    /// A copy of chunks `from..`, at most `limit` of them.
    fn copy_from(&self, from: u64, limit: usize) -> Run {
        let mut copy = Run::starting_at(self.generation, from.max(self.first_index));
        let skip = (copy.first_index - self.first_index) as usize;
        for position in (skip..self.len()).take(limit) {
            copy.push(self.at(position));
        }
        copy
    }
}

/// The unfolded chunks of every live recording, as committed. Changed by the writer thread
/// only, after the commit that made the change.
#[derive(Debug, Default)]
pub(crate) struct JournalIndex {
    unfolded: Mutex<Unfolded>,
}

#[derive(Debug, Default)]
struct Unfolded {
    recordings: HashMap<u128, Run>,
    /// Their chunks, all recordings together.
    chunks: usize,
}

/// A copy of some of a recording's unfolded chunks, as committed when it was taken. A read
/// transaction begun after that sees each of these chunks either still unfolded (here) or
/// already folded into `chunks` (and the folded prefix is read first).
#[derive(Debug, Default)]
pub(crate) struct JournalView {
    run: Option<Run>,
}

impl JournalView {
    /// The value of chunk `index`, if it was unfolded when the view was taken.
    pub(crate) fn value(&self, index: u64) -> Option<&[u8]> {
        self.run.as_ref()?.value(index)
    }

    /// The index and value of the recording's newest unfolded chunk.
    pub(crate) fn last(&self) -> Option<(u64, &[u8])> {
        let run = self.run.as_ref()?;
        let index = run.end_index().checked_sub(1)?;
        Some((index, run.value(index)?))
    }

    /// The indexes of the chunks it holds.
    #[cfg(test)]
    pub(crate) fn indexes(&self) -> std::ops::Range<u64> {
        self.run
            .as_ref()
            .map_or(0..0, |run| run.first_index..run.end_index())
    }

    /// The view, if it was taken of recording `generation` (a view of the conversation's
    /// previous recording is of no use to a reader of this one).
    pub(crate) fn of_generation(self, generation: u64) -> JournalView {
        match &self.run {
            Some(run) if run.generation == generation => self,
            _ => JournalView::default(),
        }
    }
}

impl JournalIndex {
    /// The unfolded chunks `from..` of `key`, at most `limit` of them. Take it before the read
    /// transaction that uses it begins.
    pub(crate) fn view(&self, key: u128, from: u64, limit: usize) -> JournalView {
        JournalView {
            run: self
                .lock()
                .recordings
                .get(&key)
                .map(|run| run.copy_from(from, limit)),
        }
    }

    /// The newest unfolded chunk of `key` only.
    pub(crate) fn last(&self, key: u128) -> JournalView {
        JournalView {
            run: self
                .lock()
                .recordings
                .get(&key)
                .map(|run| run.copy_from(run.end_index().saturating_sub(1), 1)),
        }
    }

    /// The newest unfolded chunk of every recording that has any.
    pub(crate) fn newest(&self) -> HashMap<u128, JournalView> {
        self.keys()
            .into_iter()
            .map(|key| (key, self.last(key)))
            .collect()
    }

    /// Unfolded chunks, all recordings together.
    pub(crate) fn chunks(&self) -> usize {
        self.lock().chunks
    }

    /// Forgets every unfolded chunk: the file was rolled forward through the log they were in
    /// (after it was reopened), which folded them into `chunks`.
    pub(crate) fn clear(&self) {
        *self.lock() = Unfolded::default();
    }

    /// Runs `apply` over every recording's unfolded chunks, holding the index throughout (a
    /// cluster's entry is applied so, see `replicated`), and counts their chunks again.
    pub(crate) fn apply_with<T>(
        &self,
        apply: impl FnOnce(&mut HashMap<u128, Run>) -> crate::error::Result<T>,
    ) -> crate::error::Result<T> {
        let mut unfolded = self.lock();
        let applied = apply(&mut unfolded.recordings);
        unfolded.recordings.retain(|_, run| !run.is_empty());
        unfolded.chunks = unfolded.recordings.values().map(Run::len).sum();
        applied
    }

    /// A copy of `key`'s unfolded chunks.
    fn copy(&self, key: u128) -> Option<Run> {
        self.lock().recordings.get(&key).cloned()
    }

    /// How many chunks `key` has unfolded.
    fn len_of(&self, key: u128) -> usize {
        self.lock().recordings.get(&key).map_or(0, Run::len)
    }

    fn has_unfolded(&self, key: u128) -> bool {
        self.lock()
            .recordings
            .get(&key)
            .is_some_and(|run| !run.is_empty())
    }

    /// Bytes `key` has unfolded, packed.
    fn packed_bytes(&self, key: u128) -> usize {
        self.lock()
            .recordings
            .get(&key)
            .map_or(0, Run::packed_bytes)
    }

    fn keys(&self) -> Vec<u128> {
        self.lock().recordings.keys().copied().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Unfolded> {
        self.unfolded.lock().unwrap_or_else(|e| e.into_inner())
    }
}
