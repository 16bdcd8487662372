//! The tables a write-ahead log's commits change, open in one transaction, and how a commit's
//! changes are applied to them: each logged edit made again, and the journal's unfolded
//! chunks rebuilt from their appends, packed and folded as the commits that logged them did.
use std::collections::HashMap;

use redb::{Key, ReadableTable, Table, Value, WriteTransaction};

use super::redo::{Change, Changes, Edit, TableId};
use crate::error::{Error, Result};
use crate::journal::{self, Run};
use crate::live_index::LIVE;
use crate::schema::{
    self, CHUNKS, EXPIRY, JOURNAL, RECORDINGS, STARTED, TOMBSTONE_EXPIRY, TOMBSTONES,
};
use crate::seal_marks::SEALED;
use crate::segment::{self, Segment};
use crate::stream_row::STREAMS;

/// The tables a log changes, open in one transaction that applies its commits again (the
/// pipeline's [`Logged`] tables, without the logging).
///
/// [`Logged`]: super::Logged
pub(super) struct ChangeTables<'txn, 'u> {
    chunks: Table<'txn, (u128, u64), &'static [u8]>,
    journal: Table<'txn, u64, &'static [u8]>,
    recordings: Table<'txn, u128, &'static [u8]>,
    expiry: Table<'txn, (u64, u128), ()>,
    started: Table<'txn, (u64, u128), ()>,
    tombstones: Table<'txn, u128, &'static [u8]>,
    tombstone_expiry: Table<'txn, (u64, u128), ()>,
    streams: Table<'txn, u128, &'static [u8]>,
    sealed: Table<'txn, u128, &'static [u8]>,
    live: Table<'txn, u128, ()>,
    /// Whether the log may hold legacy folds (written before schema 4).
    legacy_folds: bool,
    /// Whether runs carry their recording's generation, for readers (rolling forward at open
    /// has no readers, and folds every run at its end).
    pub(super) generations: bool,
    /// Each recording's unfolded chunks so far.
    unfolded: &'u mut HashMap<u128, Run>,
}

impl<'txn, 'u> ChangeTables<'txn, 'u> {
    /// Opens the tables in `txn`.
    pub(super) fn open(
        txn: &'txn WriteTransaction,
        legacy_folds: bool,
        unfolded: &'u mut HashMap<u128, Run>,
    ) -> Result<Self> {
        Ok(Self {
            legacy_folds,
            generations: false,
            unfolded,
            chunks: txn.open_table(CHUNKS).map_err(Error::storage)?,
            journal: txn.open_table(JOURNAL).map_err(Error::storage)?,
            recordings: txn.open_table(RECORDINGS).map_err(Error::storage)?,
            expiry: txn.open_table(EXPIRY).map_err(Error::storage)?,
            started: txn.open_table(STARTED).map_err(Error::storage)?,
            tombstones: txn.open_table(TOMBSTONES).map_err(Error::storage)?,
            tombstone_expiry: txn.open_table(TOMBSTONE_EXPIRY).map_err(Error::storage)?,
            streams: txn.open_table(STREAMS).map_err(Error::storage)?,
            sealed: txn.open_table(SEALED).map_err(Error::storage)?,
            live: txn.open_table(LIVE).map_err(Error::storage)?,
        })
    }

    /// Applies one logged commit's changes.
    pub(super) fn apply(&mut self, payload: &[u8]) -> Result<()> {
        for change in Changes::new(payload) {
            let (table, edit) = match change? {
                Change::Append { key, index, value } => {
                    self.append(key, index, value)?;
                    continue;
                }
                Change::Pack { key, first, count } => {
                    self.pack(key, first, count as usize)?;
                    continue;
                }
                Change::Forget { key } => {
                    self.unfolded.remove(&key);
                    continue;
                }
                Change::Fold { seqs } => {
                    self.fold(&seqs)?;
                    continue;
                }
                Change::LegacyFold { seq } => {
                    self.legacy_fold(seq)?;
                    continue;
                }
                Change::Edit { table, edit } => (table, edit),
            };
            match table {
                TableId::Chunks => apply_edit(&mut self.chunks, &edit),
                TableId::Journal => apply_edit(&mut self.journal, &edit),
                TableId::Recordings => apply_edit(&mut self.recordings, &edit),
                TableId::Expiry => apply_edit(&mut self.expiry, &edit),
                TableId::Started => apply_edit(&mut self.started, &edit),
                TableId::Tombstones => apply_edit(&mut self.tombstones, &edit),
                TableId::TombstoneExpiry => apply_edit(&mut self.tombstone_expiry, &edit),
                TableId::Streams => apply_edit(&mut self.streams, &edit),
                TableId::Sealed => apply_edit(&mut self.sealed, &edit),
                TableId::Live => apply_edit(&mut self.live, &edit),
            }
            .map_err(Error::storage)?;
        }
        Ok(())
    }

    /// Adds chunk `index` to `key`'s unfolded chunks, which it must follow.
    fn append(&mut self, key: u128, index: u64, value: &[u8]) -> Result<()> {
        if self.unfolded.get(&key).is_none_or(Run::is_empty) {
            let generation = self.generation_of(key)?;
            self.unfolded
                .insert(key, Run::starting_at(generation, index));
        }
        let Some(run) = self.unfolded.get_mut(&key) else {
            unreachable!("the run was inserted above");
        };
        if run.end_index() != index {
            return Err(damaged_log(format!(
                "chunk {index} of {key:032x} is appended after chunk {}",
                run.end_index().wrapping_sub(1)
            )));
        }
        run.push(value);
        Ok(())
    }

    /// The generation of `key`'s recording, when runs carry it; else 0.
    fn generation_of(&self, key: u128) -> Result<u64> {
        if !self.generations {
            return Ok(0);
        }
        match self.recordings.get(key).map_err(Error::storage)? {
            Some(row) => Ok(schema::decode_meta(row.value())?.generation),
            None => Err(damaged_log(format!(
                "a chunk of {key:032x} is appended, which has no recording"
            ))),
        }
    }

    /// Writes segment `(key, first)` as the fold that logged it did: the chunks the row holds,
    /// if it is there, then as many of `key`'s unfolded chunks as make `count`.
    fn pack(&mut self, key: u128, first: u64, count: usize) -> Result<()> {
        let reused: Vec<Vec<u8>> = match self.chunks.get((key, first)).map_err(Error::storage)? {
            Some(row) => Segment::parse(row.value())?
                .values()
                .map(<[u8]>::to_vec)
                .collect(),
            None => Vec::new(),
        };
        let wanted = count.saturating_sub(reused.len());
        let run = self
            .unfolded
            .get_mut(&key)
            .filter(|run| run.first_index() == first + reused.len() as u64 && run.len() >= wanted)
            .ok_or_else(|| {
                damaged_log(format!(
                    "segment {first} of {key:032x} is packed from chunks that were not appended"
                ))
            })?;
        let values: Vec<&[u8]> = reused
            .iter()
            .map(Vec::as_slice)
            .chain(run.values().take(wanted))
            .collect();
        let mut segment = Vec::new();
        segment::encode(&mut segment, values.into_iter());
        run.drop_front(wanted);
        self.chunks
            .insert((key, first), segment.as_slice())
            .map_err(Error::storage)?;
        Ok(())
    }

    /// Folds every chunk still unfolded at the log's end into `chunks`, as a checkpoint does.
    pub(super) fn fold_unfolded(&mut self) -> Result<()> {
        for (key, run) in self.unfolded.drain() {
            let values: Vec<&[u8]> = run.values().collect();
            let (planned, _) =
                journal::plan_fold(&self.chunks, key, run.first_index(), &values, true)?;
            for packed in planned {
                self.chunks
                    .insert((key, packed.first), packed.segment.as_slice())
                    .map_err(Error::storage)?;
            }
        }
        Ok(())
    }

    /// Packs journal entries `seqs` into one segment in `chunks`, as the fold that logged it did.
    fn fold(&mut self, seqs: &[u64]) -> Result<()> {
        let mut entries = Vec::with_capacity(seqs.len());
        for &seq in seqs {
            entries.push((seq, self.journal_entry(seq)?));
        }
        let (key, first, values) = journal::decode_run(None, &entries)?;
        let mut segment = Vec::new();
        segment::encode(&mut segment, values.into_iter());
        self.chunks
            .insert((key, first), segment.as_slice())
            .map_err(Error::storage)?;
        Ok(())
    }

    /// Copies journal entry `seq`'s chunk into `chunks` as a row of its own, as a fold before
    /// schema 4 did (the file is upgraded after rolling forward).
    fn legacy_fold(&mut self, seq: u64) -> Result<()> {
        if !self.legacy_folds {
            return Err(Error::Corrupt {
                detail: "write-ahead log: a fold of an older schema in a log of the current one"
                    .into(),
            });
        }
        let entry = self.journal_entry(seq)?;
        let (key, index, chunk) = schema::decode_journal(&entry)?;
        self.chunks
            .insert((key, index), chunk)
            .map_err(Error::storage)?;
        Ok(())
    }

    fn journal_entry(&self, seq: u64) -> Result<Vec<u8>> {
        let entry = self
            .journal
            .get(seq)
            .map_err(Error::storage)?
            .ok_or_else(|| Error::Corrupt {
                detail: format!("write-ahead log: folded journal entry {seq} is missing"),
            })?;
        Ok(entry.value().to_vec())
    }
}

/// Makes one insert or removal again on `table`, whose key and value types it was logged with.
fn apply_edit<K: Key + 'static, V: Value + 'static>(
    table: &mut Table<'_, K, V>,
    edit: &Edit<'_>,
) -> redb::Result<()> {
    match *edit {
        Edit::Insert { key, value } => {
            table.insert(K::from_bytes(key), V::from_bytes(value))?;
        }
        Edit::Remove { key } => {
            table.remove(K::from_bytes(key))?;
        }
        Edit::RemoveRange { start, end } => {
            let range = (start.map(K::from_bytes), end.map(K::from_bytes));
            table.retain_in::<K::SelfType<'_>, _>(range, |_, _| false)?;
        }
    }
    Ok(())
}

/// A log whose frames check out but whose changes do not follow on from one another.
fn damaged_log(detail: String) -> Error {
    Error::Corrupt {
        detail: format!("write-ahead log: {detail}"),
    }
}
