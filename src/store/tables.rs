//! The transaction layer of the commit pipeline: the open tables of one write transaction,
//! the `recordings` rows it has read and changed (written back once, at the end), and the
//! stored form of starting, appending to, ending, deleting and collecting a recording.
use std::collections::HashMap;
use std::collections::hash_map::Entry;

use redb::ReadableTable;

use super::journal::{DIRECT_CHUNK_BYTES, JournalDelta, JournalIndex, JournalTable};
use super::live::Chunk;
use super::pipeline::SweepReport;
use super::schema::{
    self, CHUNKS, EXPIRY, JOURNAL, RECORDINGS, RecordingMeta, decode_meta, encode_meta,
};
use crate::error::{Error, Result};
use crate::recorder::Status;

/// Expired recordings looked at by one sweep commit, at most.
const MAX_DUE_PER_SWEEP: usize = 1024;

/// A `recordings` row read within one transaction, and whether it has changed since.
struct CachedMeta {
    row: Option<RecordingMeta>,
    dirty: bool,
}

/// Rows of `recordings` read and changed within one transaction; written back once at the end.
#[derive(Default)]
struct MetaCache {
    rows: HashMap<u128, CachedMeta>,
}

/// The open tables of one write transaction, and what it has changed so far.
pub(super) struct Tables<'a, 'txn> {
    chunks: redb::Table<'txn, (u128, u64), &'static [u8]>,
    journal: JournalTable<'txn>,
    recordings: redb::Table<'txn, u128, &'static [u8]>,
    expiry: redb::Table<'txn, (u64, u128), ()>,
    index: &'a JournalIndex,
    pub(super) delta: &'a mut JournalDelta,
    metas: MetaCache,
    /// Chunk count and byte length of each recording appended to in this transaction.
    appended: HashMap<u128, (u64, u64)>,
    /// Reused for encoding journal entries.
    scratch: Vec<u8>,
    /// The transaction's time, in ms since the epoch.
    pub(super) now: u64,
}

impl<'a, 'txn> Tables<'a, 'txn> {
    pub(super) fn open(
        txn: &'txn redb::WriteTransaction,
        index: &'a JournalIndex,
        delta: &'a mut JournalDelta,
        now: u64,
    ) -> Result<Self> {
        Ok(Self {
            chunks: txn.open_table(CHUNKS).map_err(Error::storage)?,
            journal: txn.open_table(JOURNAL).map_err(Error::storage)?,
            recordings: txn.open_table(RECORDINGS).map_err(Error::storage)?,
            expiry: txn.open_table(EXPIRY).map_err(Error::storage)?,
            index,
            delta,
            metas: MetaCache::default(),
            appended: HashMap::new(),
            scratch: Vec::new(),
            now,
        })
    }

    /// The row of `key`, read from the table on its first use in this transaction.
    fn cached(&mut self, key: u128) -> Result<&mut CachedMeta> {
        match self.metas.rows.entry(key) {
            Entry::Occupied(entry) => Ok(entry.into_mut()),
            Entry::Vacant(entry) => {
                let row = match self.recordings.get(key).map_err(Error::storage)? {
                    Some(bytes) => Some(decode_meta(bytes.value())?),
                    None => None,
                };
                Ok(entry.insert(CachedMeta { row, dirty: false }))
            }
        }
    }

    pub(super) fn meta(&mut self, key: u128) -> Result<Option<RecordingMeta>> {
        Ok(self.cached(key)?.row.clone())
    }

    pub(super) fn set_meta(&mut self, key: u128, row: Option<RecordingMeta>) {
        self.metas.rows.insert(key, CachedMeta { row, dirty: true });
    }

    /// Stores one chunk: at the end of the journal, or straight into `chunks` when it is big
    /// and its recording has nothing unfolded (its folded chunks must stay a prefix).
    pub(super) fn append_chunk(&mut self, key: u128, chunk: &Chunk) -> Result<()> {
        self.appended.insert(key, (chunk.index + 1, chunk.end()));
        if chunk.text.len() >= DIRECT_CHUNK_BYTES && !self.delta.holds(self.index, key) {
            schema::encode_chunk_into(&mut self.scratch, chunk.offset, &chunk.text);
            self.chunks
                .insert((key, chunk.index), self.scratch.as_slice())
                .map_err(Error::storage)?;
            Ok(())
        } else {
            let value = (chunk.offset, &*chunk.text);
            schema::encode_journal_into(&mut self.scratch, key, chunk.index, value);
            self.delta
                .append(&mut self.journal, key, chunk.index, &self.scratch)
        }
    }

    /// Ends a live recording's row: its status, its final `(chunk count, byte length)`, and
    /// its place in the GC schedule.
    pub(super) fn finish_meta(
        &mut self,
        key: u128,
        (chunk_count, byte_len): (u64, u64),
        status: Status,
        error: Option<String>,
        retention_ms: u64,
    ) -> Result<()> {
        let now = self.now;
        let expires = now.saturating_add(retention_ms);
        let cached = self.cached(key)?;
        let meta = cached.row.as_mut().ok_or_else(|| Error::Corrupt {
            detail: format!("live recording {key:032x} has no recordings row"),
        })?;
        meta.status = status;
        meta.chunk_count = chunk_count;
        meta.byte_len = byte_len;
        meta.updated_ms = now;
        meta.finished_ms = Some(now);
        meta.expires_at_ms = Some(expires);
        meta.error = error;
        cached.dirty = true;
        self.expiry
            .insert((expires, key), ())
            .map_err(Error::storage)?;
        Ok(())
    }

    /// Deletes every chunk (folded or not), the expiry entry and the meta row of a
    /// conversation's recording; returns the meta it had.
    pub(super) fn delete_recording(&mut self, key: u128) -> Result<Option<RecordingMeta>> {
        let Some(old) = self.meta(key)? else {
            return Ok(None);
        };
        self.chunks
            .retain_in((key, 0)..=(key, u64::MAX), |_, _| false)
            .map_err(Error::storage)?;
        self.delta.forget(&mut self.journal, self.index, key)?;
        self.appended.remove(&key);
        if let Some(expires) = old.expires_at_ms {
            self.expiry.remove((expires, key)).map_err(Error::storage)?;
        }
        self.set_meta(key, None);
        Ok(Some(old))
    }

    /// Deletes recordings whose expiry time has passed, oldest first, up to `max_chunks` folded
    /// chunks. A recording's unfolded chunks go with its row, in its last commit, so that a
    /// reader never meets a gap between the two.
    pub(super) fn sweep_expired(&mut self, max_chunks: u64) -> Result<SweepReport> {
        let mut report = SweepReport::default();
        let due: Vec<(u64, u128)> = self
            .expiry
            .range(..=(self.now, u128::MAX))
            .map_err(Error::storage)?
            .take(MAX_DUE_PER_SWEEP)
            .map(|entry| entry.map(|(k, _)| k.value()))
            .collect::<std::result::Result<_, _>>()
            .map_err(Error::storage)?;
        for (expires, key) in due {
            let budget = max_chunks - report.chunks_deleted;
            let deleted = self
                .chunks
                .extract_from_if((key, 0)..=(key, u64::MAX), |_, _| true)
                .map_err(Error::storage)?
                .take(budget as usize)
                .try_fold(0u64, |n, entry| entry.map(|_| n + 1))
                .map_err(Error::storage)?;
            report.chunks_deleted += deleted;
            if deleted == budget && self.has_chunks(key)? {
                report.more = true;
                break;
            }
            report.chunks_deleted += self.delta.forget(&mut self.journal, self.index, key)?;
            self.expiry.remove((expires, key)).map_err(Error::storage)?;
            self.set_meta(key, None);
            report.recordings_deleted += 1;
        }
        Ok(report)
    }

    fn has_chunks(&self, key: u128) -> Result<bool> {
        let mut range = self
            .chunks
            .range((key, 0)..=(key, u64::MAX))
            .map_err(Error::storage)?;
        Ok(range.next().is_some())
    }

    pub(super) fn flush_metas(&mut self) -> Result<()> {
        for (&key, cached) in &mut self.metas.rows {
            if !std::mem::take(&mut cached.dirty) {
                continue;
            }
            match &cached.row {
                Some(meta) => {
                    let bytes = encode_meta(meta)?;
                    self.recordings
                        .insert(key, bytes.as_slice())
                        .map_err(Error::storage)?;
                }
                None => {
                    self.recordings.remove(key).map_err(Error::storage)?;
                }
            }
        }
        Ok(())
    }

    /// `(chunk count, byte length)` of `key` after what this transaction appended to it.
    pub(super) fn appended(&self, key: u128) -> Option<(u64, u64)> {
        self.appended.get(&key).copied()
    }

    /// Folds every recording's unfolded chunks into `chunks`.
    pub(super) fn fold_everything(&mut self, pruned_to: u64) -> Result<()> {
        let tables = (&mut self.journal, &mut self.chunks);
        self.delta.fold_everything(tables, self.index, pruned_to)
    }

    /// Folds the recordings that are due.
    pub(super) fn fold_due(&mut self, pruned_to: u64) -> Result<()> {
        let tables = (&mut self.journal, &mut self.chunks);
        self.delta.fold_due(tables, self.index, pruned_to)
    }

    /// Folds `key`'s unfolded chunks (its last run, when it ends).
    pub(super) fn fold_recording(&mut self, key: u128) -> Result<()> {
        let tables = (&mut self.journal, &mut self.chunks);
        self.delta.fold(tables, self.index, key).map(drop)
    }
}
