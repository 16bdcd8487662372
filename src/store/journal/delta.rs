//! The journal changes of one write transaction: appends, folds of whole recordings' runs,
//! and the deletion of the journal's dead prefix; applied to the index once they commit.
use super::*;

/// Entries one transaction appended for one recording.
#[derive(Debug)]
pub(super) struct Appended {
    pub(super) first_index: u64,
    pub(super) seqs: Vec<u64>,
}

/// The journal changes of one write transaction, applied to the index once it commits and
/// dropped if it fails.
pub(crate) struct JournalDelta {
    /// Entries appended in this transaction, per key, since the key was last forgotten in it.
    pub(super) appended: HashMap<u128, Appended>,
    /// Keys whose committed entries this transaction deleted.
    pub(super) forgotten: HashSet<u128>,
    /// Per key, how many unfolded entries (committed first, then appended) this transaction
    /// folded, counted from the first.
    pub(super) folded: HashMap<u128, usize>,
    /// The dead prefix this transaction deleted ends here.
    pub(super) pruned_to: Option<u64>,
    pub(super) next_seq: u64,
}

impl JournalDelta {
    /// A delta whose first append gets sequence number `next_seq`.
    pub(crate) fn new(next_seq: u64) -> Self {
        Self {
            appended: HashMap::new(),
            forgotten: HashSet::new(),
            folded: HashMap::new(),
            pruned_to: None,
            next_seq,
        }
    }

    /// The sequence number the next transaction starts from.
    pub(crate) fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Whether `key` has unfolded chunks, committed or added by this transaction.
    pub(crate) fn holds(&self, index: &JournalIndex, key: u128) -> bool {
        self.appended.contains_key(&key)
            || (!self.forgotten.contains(&key) && index.has_unfolded(key))
    }

    /// Appends chunk `index` of `key` at the journal's end; `value` is the encoded entry.
    pub(crate) fn append(
        &mut self,
        journal: &mut JournalTable<'_, '_>,
        key: u128,
        index: u64,
        value: &[u8],
    ) -> Result<()> {
        let seq = self.next_seq;
        journal.insert(seq, value).map_err(Error::storage)?;
        self.next_seq += 1;
        self.appended
            .entry(key)
            .or_insert_with(|| Appended {
                first_index: index,
                seqs: Vec::new(),
            })
            .seqs
            .push(seq);
        Ok(())
    }

    /// Deletes every journal entry of `key`, committed or appended in this transaction, folded
    /// or not. Returns how many were unfolded (their chunks exist nowhere else).
    pub(crate) fn forget(
        &mut self,
        journal: &mut JournalTable<'_, '_>,
        index: &JournalIndex,
        key: u128,
    ) -> Result<u64> {
        let mut seqs: Vec<u64> = Vec::new();
        let mut unfolded = 0;
        if self.forgotten.insert(key) {
            unfolded += index.unfolded(key).len();
            seqs.extend(index.all_seqs(key));
        }
        if let Some(appended) = self.appended.remove(&key) {
            unfolded += appended.seqs.len();
            seqs.extend(appended.seqs);
        }
        unfolded = unfolded.saturating_sub(self.folded.remove(&key).unwrap_or(0));
        for &seq in &seqs {
            journal.remove(seq).map_err(Error::storage)?;
        }
        Ok(unfolded as u64)
    }

    /// Folds `key`'s unfolded chunks into `chunks`, packed into segments; returns how many.
    pub(crate) fn fold(
        &mut self,
        tables: (&mut JournalTable<'_, '_>, &mut ChunksTable<'_, '_>),
        index: &JournalIndex,
        key: u128,
    ) -> Result<usize> {
        let (journal, chunks) = tables;
        let mut seqs = if self.forgotten.contains(&key) {
            Vec::new()
        } else {
            index.unfolded(key)
        };
        if let Some(appended) = self.appended.get(&key) {
            seqs.extend(&appended.seqs);
        }
        let done = self.folded.get(&key).copied().unwrap_or(0);
        let pending = seqs.get(done..).unwrap_or_default();
        let mut entries = Vec::with_capacity(pending.len());
        for &seq in pending {
            let entry = journal
                .get(seq)
                .map_err(Error::storage)?
                .ok_or_else(|| missing_entry(seq))?;
            entries.push((seq, entry.value().to_vec()));
        }
        let (_, first, values) = decode_run(Some(key), &entries)?;
        segment::write_packed(&values, |run, segment| {
            let row = (key, first + run.start as u64);
            chunks.insert_folded(&pending[run], row, segment)
        })?;
        self.folded.insert(key, seqs.len());
        Ok(pending.len())
    }

    /// Folds the recordings that are due, within the commit's budget (see [`MIN_FOLD_BUDGET`]),
    /// then deletes the journal's dead prefix if it has grown by [`MIN_PRUNE`] since
    /// `pruned_to`. Call it after the transaction's other work.
    pub(crate) fn fold_due(
        &mut self,
        tables: (&mut JournalTable<'_, '_>, &mut ChunksTable<'_, '_>),
        index: &JournalIndex,
        pruned_to: u64,
    ) -> Result<()> {
        let (journal, chunks) = tables;
        let appended: usize = self.appended.values().map(|a| a.seqs.len()).sum();
        let mut budget = MIN_FOLD_BUDGET.max(2 * appended);
        for key in index.due(&self.appended, self.next_seq) {
            if budget == 0 {
                break;
            }
            if !self.forgotten.contains(&key) || self.appended.contains_key(&key) {
                budget = budget.saturating_sub(self.fold((journal, chunks), index, key)?);
            }
        }
        self.prune(journal, index, pruned_to, MIN_PRUNE)
    }

    /// Folds every recording and deletes the whole journal.
    pub(crate) fn fold_everything(
        &mut self,
        tables: (&mut JournalTable<'_, '_>, &mut ChunksTable<'_, '_>),
        index: &JournalIndex,
        pruned_to: u64,
    ) -> Result<()> {
        let (journal, chunks) = tables;
        let mut keys: Vec<u128> = index.lock().keys().copied().collect();
        keys.extend(self.appended.keys());
        for key in keys {
            self.fold((journal, chunks), index, key)?;
        }
        self.prune(journal, index, pruned_to, 1)
    }

    /// Deletes the entries before the first unfolded one, if there are at least `min` more of
    /// them than at the last prune.
    fn prune(
        &mut self,
        journal: &mut JournalTable<'_, '_>,
        index: &JournalIndex,
        pruned_to: u64,
        min: u64,
    ) -> Result<()> {
        // The cut is at most `next_seq`: most commits need not look any further.
        let min_cut = pruned_to.saturating_add(min);
        if self.next_seq < min_cut {
            return Ok(());
        }
        // Committed entries still unfolded after this transaction's folds hold the cut back;
        // entries appended here are past any committed one.
        let recordings = index.lock();
        let mut cut = self.next_seq;
        for (key, entries) in recordings.iter() {
            if self.forgotten.contains(key) {
                continue;
            }
            let done = self.folded.get(key).copied().unwrap_or(0);
            if let Some(&first) = entries.unfolded.get(done) {
                cut = cut.min(first);
            }
        }
        for (key, appended) in &self.appended {
            let committed = if self.forgotten.contains(key) {
                0
            } else {
                recordings.get(key).map_or(0, |e| e.unfolded.len())
            };
            let done = self.folded.get(key).copied().unwrap_or(0);
            if let Some(&first) = appended.seqs.get(done.saturating_sub(committed)) {
                cut = cut.min(first);
            }
        }
        drop(recordings);
        if cut >= min_cut {
            journal.remove_range(..cut)?;
            self.pruned_to = Some(cut);
        }
        Ok(())
    }

    /// Applies the committed delta to `index`; returns where the journal's dead prefix ends
    /// now, given where it ended before.
    pub(crate) fn commit_to(self, index: &JournalIndex, pruned_to: u64) -> u64 {
        let pruned = self.pruned_to.unwrap_or(pruned_to);
        index.apply(self);
        pruned
    }
}

/// Folds every journal entry past its recording's last segment into `chunks` and empties the
/// journal, within `txn`; used on open, when no index exists. Returns how many were folded.
pub(crate) fn fold_all(txn: &redb::WriteTransaction) -> Result<u64> {
    let mut journal = txn.open_table(JOURNAL).map_err(Error::storage)?;
    let mut chunks = txn.open_table(CHUNKS).map_err(Error::storage)?;
    // Per recording: where its folded chunks end, and its entries from there on.
    let mut runs: HashMap<u128, (u64, ReadEntries)> = HashMap::new();
    for entry in journal.iter().map_err(Error::storage)? {
        let (seq, value) = entry.map_err(Error::storage)?;
        let (key, index, _) = schema::decode_journal(value.value())?;
        let (folded_to, entries) = match runs.entry(key) {
            std::collections::hash_map::Entry::Occupied(run) => run.into_mut(),
            std::collections::hash_map::Entry::Vacant(run) => {
                run.insert((folded_end(&chunks, key)?, Vec::new()))
            }
        };
        if index >= *folded_to {
            entries.push((seq.value(), value.value().to_vec()));
        }
    }
    let mut total = 0;
    for (key, (folded_to, entries)) in runs {
        if entries.is_empty() {
            continue;
        }
        let (_, first, values) = decode_run(Some(key), &entries)?;
        if first != folded_to {
            return Err(Error::Corrupt {
                detail: format!(
                    "the journal holds chunks of {key:032x} from {first} on, but its folded chunks end at {folded_to}"
                ),
            });
        }
        segment::write_packed(&values, |run, segment| {
            let row = (key, first + run.start as u64);
            chunks
                .insert(row, segment)
                .map(drop)
                .map_err(Error::storage)
        })?;
        total += values.len() as u64;
    }
    journal.retain(|_, _| false).map_err(Error::storage)?;
    Ok(total)
}

/// The index just past `key`'s last folded chunk (0 when it has none).
fn folded_end(chunks: &redb::Table<'_, (u128, u64), &'static [u8]>, key: u128) -> Result<u64> {
    let mut range = chunks
        .range((key, 0)..=(key, u64::MAX))
        .map_err(Error::storage)?;
    match range.next_back() {
        Some(entry) => {
            let (first, value) = entry.map_err(Error::storage)?;
            Ok(first.value().1 + Segment::parse(value.value())?.len() as u64)
        }
        None => Ok(0),
    }
}
