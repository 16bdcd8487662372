//! The journal changes of one write transaction: chunks appended, recordings forgotten, and
//! runs folded into `chunks`; applied to the index once the transaction commits, and dropped
//! if it fails.
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};

use super::super::wal::Redo;
use super::*;
use crate::error::Result;

#[derive(Default)]
pub(crate) struct JournalDelta {
    /// Chunks appended in this transaction, per key, since the key was last forgotten in it.
    appended: HashMap<u128, Run>,
    /// Keys whose committed unfolded chunks this transaction dropped.
    forgotten: HashSet<u128>,
    /// Per key, how many unfolded chunks (committed first, then appended) this transaction
    /// folded, counted from the first.
    folded: HashMap<u128, usize>,
}

impl JournalDelta {
    /// Whether `key` has unfolded chunks, committed or appended in this transaction.
    pub(crate) fn holds(&self, index: &JournalIndex, key: u128) -> bool {
        self.appended.contains_key(&key)
            || (!self.forgotten.contains(&key) && index.has_unfolded(key))
    }

    /// Appends chunk `chunk_index` of recording `generation` of `key`, stored as `value`, and
    /// logs it: the log is where it is durable until it is folded.
    pub(crate) fn append(
        &mut self,
        redo: &Redo,
        (key, generation): (u128, u64),
        chunk_index: u64,
        value: &[u8],
    ) {
        redo.append(key, chunk_index, value);
        let run = self
            .appended
            .entry(key)
            .or_insert_with(|| Run::starting_at(generation, chunk_index));
        debug_assert_eq!(run.end_index(), chunk_index);
        run.push(value);
    }

    /// Drops every unfolded chunk of `key`, committed or appended in this transaction (its
    /// recording is deleted). Returns how many there were.
    pub(crate) fn forget(&mut self, redo: &Redo, index: &JournalIndex, key: u128) -> u64 {
        let mut unfolded = 0;
        if self.forgotten.insert(key) {
            unfolded += index.len_of(key);
        }
        if let Some(run) = self.appended.remove(&key) {
            unfolded += run.len();
        }
        unfolded = unfolded.saturating_sub(self.folded.remove(&key).unwrap_or(0));
        if unfolded > 0 {
            redo.forget(key);
        }
        unfolded as u64
    }

    /// Folds `key`'s unfolded chunks into `chunks`, packed into segments: all of them with
    /// `all`, else those that fill segments (see [`plan_fold`]). Returns how many it folded.
    pub(crate) fn fold(
        &mut self,
        chunks: &mut ChunksTable<'_, '_>,
        index: &JournalIndex,
        key: u128,
        all: bool,
    ) -> Result<usize> {
        let committed = if self.forgotten.contains(&key) {
            None
        } else {
            index.copy(key)
        };
        let appended = self.appended.get(&key);
        let Some(first) = committed.as_ref().or(appended).map(Run::first_index) else {
            return Ok(0);
        };
        let chunks = chunks.open_mut()?;
        let done = self.folded.get(&key).copied().unwrap_or(0);
        let values: Vec<&[u8]> = committed
            .iter()
            .chain(appended)
            .flat_map(Run::values)
            .skip(done)
            .collect();
        let (planned, folded) = plan_fold(&**chunks, key, first + done as u64, &values, all)?;
        for packed in planned {
            chunks.insert_packed(key, packed.first, packed.count, &packed.segment)?;
        }
        *self.folded.entry(key).or_default() += folded;
        Ok(folded)
    }

    /// Folds the full segments of the recordings appended to that have more than a segment's
    /// worth unfolded. Call it after the transaction's other work.
    pub(crate) fn fold_due(
        &mut self,
        chunks: &mut ChunksTable<'_, '_>,
        index: &JournalIndex,
    ) -> Result<()> {
        let due: Vec<u128> = self
            .appended
            .iter()
            .filter(|&(key, run)| {
                // Committed chunks this transaction folded some of already are not counted.
                let committed = if self.forgotten.contains(key) || self.folded.contains_key(key) {
                    0
                } else {
                    index.packed_bytes(*key)
                };
                committed + run.packed_bytes() > SEGMENT_BYTES
            })
            .map(|(&key, _)| key)
            .collect();
        for key in due {
            self.fold(chunks, index, key, false)?;
        }
        Ok(())
    }

    /// Folds every recording's unfolded chunks: before a checkpoint, which empties the log
    /// they are durable in.
    pub(crate) fn fold_everything(
        &mut self,
        chunks: &mut ChunksTable<'_, '_>,
        index: &JournalIndex,
    ) -> Result<()> {
        let mut keys: Vec<u128> = index
            .keys()
            .into_iter()
            .filter(|key| !self.forgotten.contains(key))
            .collect();
        keys.extend(self.appended.keys());
        keys.sort_unstable();
        keys.dedup();
        for key in keys {
            self.fold(chunks, index, key, true)?;
        }
        Ok(())
    }

    /// Applies the committed delta to `index`: recordings forgotten, chunks appended, runs
    /// folded, in the order they happened.
    pub(crate) fn commit_to(self, index: &JournalIndex) {
        let mut unfolded = index.lock();
        let super::Unfolded { recordings, chunks } = &mut *unfolded;
        for key in &self.forgotten {
            if let Some(run) = recordings.remove(key) {
                *chunks -= run.len();
            }
        }
        for (key, run) in self.appended {
            *chunks += run.len();
            match recordings.entry(key) {
                Entry::Occupied(mut entry) => entry.get_mut().extend(&run),
                Entry::Vacant(entry) => {
                    entry.insert(run);
                }
            }
        }
        for (key, count) in self.folded {
            if let Entry::Occupied(mut entry) = recordings.entry(key) {
                let before = entry.get().len();
                entry.get_mut().drop_front(count);
                *chunks -= before - entry.get().len();
                if entry.get().is_empty() {
                    entry.remove();
                }
            }
        }
    }
}
