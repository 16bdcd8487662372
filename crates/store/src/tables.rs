//! The transaction layer of the commit pipeline: the open tables of one write transaction,
//! the `recordings` rows it has read and changed (written back once, at the end, see
//! `folds`), and the stored form of starting, appending to, ending, deleting and collecting a
//! recording (a sweep of many is in `sweep`; the `streams` rows and their fork counts in
//! `streams`).
mod folds;
mod seals;
mod streams;
mod sweep;

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use redb::ReadableTable;

use super::journal::{ChunksTable, DIRECT_CHUNK_BYTES, JournalDelta, JournalIndex};
use super::live::Chunk;
use super::live_index::LIVE;
use super::schema::{
    self, CHUNKS, ChunkLayout, EXPIRY, Gone, RECORDINGS, RecordingMeta, STARTED, TOMBSTONE_EXPIRY,
    TOMBSTONES, decode_meta, decode_tombstone, encode_tombstone,
};
use super::seal_marks::SEALED;
use super::segment::{self, Segment};
use super::stream_row::STREAMS;
use super::wal::{LazyLogged, Redo, TableId};
use crate::error::{Error, Result};
use crate::status::Status;

/// A `recordings` row read within one transaction, and whether it has changed since.
struct CachedMeta {
    row: Option<RecordingMeta>,
    dirty: bool,
    /// Whether `live` names the conversation, when known: as read, or as last written.
    listed_live: Option<bool>,
}

/// Rows of `recordings` read and changed within one transaction; written back once at the end.
#[derive(Default)]
struct MetaCache {
    rows: HashMap<u128, CachedMeta>,
}

/// The open tables of one write transaction, and what it has changed so far.
pub(super) struct Tables<'a, 'txn> {
    // Each opened on its first use (see `LazyLogged`).
    chunks: ChunksTable<'a, 'txn>,
    recordings: LazyLogged<'a, 'txn, u128, &'static [u8]>,
    expiry: LazyLogged<'a, 'txn, (u64, u128), ()>,
    started: LazyLogged<'a, 'txn, (u64, u128), ()>,
    tombstones: LazyLogged<'a, 'txn, u128, &'static [u8]>,
    tombstone_expiry: LazyLogged<'a, 'txn, (u64, u128), ()>,
    streams: LazyLogged<'a, 'txn, u128, &'static [u8]>,
    sealed: LazyLogged<'a, 'txn, u128, &'static [u8]>,
    live: LazyLogged<'a, 'txn, u128, ()>,
    index: &'a JournalIndex,
    pub(super) delta: &'a mut JournalDelta,
    redo: &'a Redo,
    metas: MetaCache,
    /// Chunk count and byte length of each recording appended to in this transaction.
    appended: HashMap<u128, (u64, u64)>,
    /// Reused for encoding chunk values.
    scratch: Vec<u8>,
    /// The transaction's time, in ms since the epoch.
    pub(super) now: u64,
}

impl<'a, 'txn> Tables<'a, 'txn> {
    pub(super) fn open(
        txn: &'txn redb::WriteTransaction,
        index: &'a JournalIndex,
        delta: &'a mut JournalDelta,
        redo: &'a Redo,
        now: u64,
    ) -> Result<Self> {
        Ok(Self {
            chunks: LazyLogged::new(txn, CHUNKS, TableId::Chunks, redo),
            recordings: LazyLogged::new(txn, RECORDINGS, TableId::Recordings, redo),
            expiry: LazyLogged::new(txn, EXPIRY, TableId::Expiry, redo),
            started: LazyLogged::new(txn, STARTED, TableId::Started, redo),
            tombstones: LazyLogged::new(txn, TOMBSTONES, TableId::Tombstones, redo),
            tombstone_expiry: LazyLogged::new(
                txn,
                TOMBSTONE_EXPIRY,
                TableId::TombstoneExpiry,
                redo,
            ),
            streams: LazyLogged::new(txn, STREAMS, TableId::Streams, redo),
            sealed: LazyLogged::new(txn, SEALED, TableId::Sealed, redo),
            live: LazyLogged::new(txn, LIVE, TableId::Live, redo),
            index,
            delta,
            redo,
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
                let row = match self.recordings.open()?.get(key).map_err(Error::storage)? {
                    Some(bytes) => Some(decode_meta(bytes.value())?),
                    None => None,
                };
                let listed_live = Some(row.as_ref().is_some_and(|row| row.status.is_live()));
                Ok(entry.insert(CachedMeta {
                    row,
                    dirty: false,
                    listed_live,
                }))
            }
        }
    }

    pub(super) fn meta(&mut self, key: u128) -> Result<Option<RecordingMeta>> {
        Ok(self.cached(key)?.row.clone())
    }

    fn set_meta(&mut self, key: u128, row: Option<RecordingMeta>) {
        let listed_live = self
            .metas
            .rows
            .get(&key)
            .and_then(|cached| cached.listed_live);
        self.metas.rows.insert(
            key,
            CachedMeta {
                row,
                dirty: true,
                listed_live,
            },
        );
    }

    /// Stores the row of a recording starting now, in place of whatever the conversation held
    /// (deleted first with [`delete_recording`](Self::delete_recording)); its tombstone goes.
    pub(super) fn start_recording(&mut self, key: u128, meta: RecordingMeta) -> Result<()> {
        self.started
            .open_mut()?
            .insert((meta.created_ms, key), ())
            .map_err(Error::storage)?;
        self.set_meta(key, Some(meta));
        self.forget_tombstone(key)
    }

    /// Makes an ended (resumable) recording live again: out of the GC schedule, `recording`.
    pub(super) fn reopen_recording(&mut self, key: u128) -> Result<()> {
        let now = self.now;
        let cached = self.cached(key)?;
        let meta = cached.row.as_mut().ok_or_else(|| missing_row(key))?;
        let expires = meta.expires_at_ms.take();
        meta.status = Status::Recording;
        meta.finished_ms = None;
        meta.error = None;
        meta.updated_ms = now;
        cached.dirty = true;
        if let Some(expires) = expires {
            self.expiry
                .open_mut()?
                .remove((expires, key))
                .map_err(Error::storage)?;
        }
        // Its copy in the object store holds less than it will: it is sealed again when it ends.
        self.forget_seal(key)
    }

    /// Stores one chunk of recording `generation` of `key`: in the journal (logged, and kept in
    /// memory until it is folded), or straight into `chunks` as a segment of its own when it
    /// is big and its recording has nothing unfolded (its folded chunks must stay a prefix).
    pub(super) fn append_chunk(
        &mut self,
        (key, generation): (u128, u64),
        layout: ChunkLayout,
        chunk: &Chunk,
    ) -> Result<()> {
        self.appended.insert(key, (chunk.index + 1, chunk.end()));
        let (offset, time, text) = (chunk.offset, chunk.committed_ms, &chunk.data[..]);
        schema::encode_chunk_into(&mut self.scratch, layout, offset, time, text);
        if chunk.data.len() >= DIRECT_CHUNK_BYTES && !self.delta.holds(self.index, key) {
            let mut value = Vec::with_capacity(self.scratch.len() + 8);
            segment::encode(&mut value, [self.scratch.as_slice()].into_iter());
            self.chunks
                .open_mut()?
                .insert((key, chunk.index), value.as_slice())
                .map_err(Error::storage)?;
        } else {
            let recording = (key, generation);
            self.delta
                .append(self.redo, recording, chunk.index, &self.scratch);
        }
        Ok(())
    }

    /// Ends a live recording's row: its status, its final `(chunk count, byte length)`, and
    /// its place in the GC schedule: after its own retention if its producer chose one, else
    /// `retention_ms`; at once when it is deleted.
    pub(super) fn finish_meta(
        &mut self,
        key: u128,
        (chunk_count, byte_len): (u64, u64),
        status: Status,
        error: Option<String>,
        retention_ms: u64,
    ) -> Result<()> {
        let now = self.now;
        let cached = self.cached(key)?;
        let meta = cached.row.as_mut().ok_or_else(|| missing_row(key))?;
        let expires = match status {
            Status::Deleted => now,
            _ => now.saturating_add(meta.retention_ms.unwrap_or(retention_ms)),
        };
        meta.status = status;
        meta.chunk_count = chunk_count;
        meta.byte_len = byte_len;
        meta.updated_ms = now;
        meta.finished_ms = Some(now);
        meta.expires_at_ms = Some(expires);
        meta.error = error;
        cached.dirty = true;
        self.expiry
            .open_mut()?
            .insert((expires, key), ())
            .map_err(Error::storage)?;
        Ok(())
    }

    /// Deletes every chunk (folded or not), the expiry and start entries and the meta row of a
    /// conversation's recording, in one go (a superseded recording); returns the meta it had.
    pub(super) fn delete_recording(&mut self, key: u128) -> Result<Option<RecordingMeta>> {
        let Some(old) = self.meta(key)? else {
            return Ok(None);
        };
        self.chunks
            .open_mut()?
            .remove_range((key, 0)..=(key, u64::MAX))?;
        self.delta.forget(self.redo, self.index, key);
        self.appended.remove(&key);
        self.forget_row(key, &old)?;
        Ok(Some(old))
    }

    /// Marks an ended recording as deleted, due for collection now; but a stream that forks
    /// read from is only soft-deleted (gone for clients, its data kept), decided here on the
    /// fork count this transaction reads. Returns `false` when the conversation has no
    /// recording.
    pub(super) fn mark_deleted(&mut self, key: u128) -> Result<bool> {
        if let Some(mut row) = self.stream_row(key)?
            && row.forks > 0
        {
            row.soft_deleted = true;
            self.write_stream_row(key, &row)?;
            return Ok(true);
        }
        let now = self.now;
        let cached = self.cached(key)?;
        let Some(meta) = cached.row.as_mut() else {
            return Ok(false);
        };
        if meta.status == Status::Deleted {
            return Ok(true);
        }
        let old_expiry = meta.expires_at_ms.replace(now);
        meta.status = Status::Deleted;
        meta.finished_ms.get_or_insert(now);
        meta.updated_ms = now;
        cached.dirty = true;
        if let Some(expires) = old_expiry {
            self.expiry
                .open_mut()?
                .remove((expires, key))
                .map_err(Error::storage)?;
        }
        self.expiry
            .open_mut()?
            .insert((now, key), ())
            .map_err(Error::storage)?;
        Ok(true)
    }

    /// Deletes up to `budget` of a recording's folded chunks, whole segments, oldest first (at
    /// least one segment, unless `budget` is 0); once none is left, its unfolded chunks and
    /// its row go too (so that a reader never meets a gap between the two) and a tombstone
    /// kept for `tombstone_ms` takes its place. Returns the chunks deleted and whether the
    /// recording is gone.
    pub(super) fn purge(
        &mut self,
        key: u128,
        budget: u64,
        tombstone_ms: u64,
    ) -> Result<(u64, bool)> {
        // The oldest segments within `budget`, found first and then removed as one logged
        // range.
        let mut deleted = 0;
        let mut last = None;
        for entry in self
            .chunks
            .open()?
            .range((key, 0)..=(key, u64::MAX))
            .map_err(Error::storage)?
        {
            let (first, value) = entry.map_err(Error::storage)?;
            let count = Segment::parse(value.value())?.len() as u64;
            if deleted + count > budget && (deleted > 0 || budget == 0) {
                break;
            }
            last = Some(first.value().1);
            deleted += count;
        }
        if let Some(last) = last {
            self.chunks
                .open_mut()?
                .remove_range((key, 0)..=(key, last))?;
        }
        if self.has_chunks(key)? {
            return Ok((deleted, false));
        }
        deleted += self.delta.forget(self.redo, self.index, key);
        if let Some(old) = self.meta(key)? {
            let gone = match old.status {
                Status::Deleted => Gone::Deleted,
                _ => Gone::Expired,
            };
            self.forget_row(key, &old)?;
            self.bury(key, &old.tombstone(gone, self.now, tombstone_ms))?;
        }
        Ok((deleted, true))
    }

    /// Removes a recording's row, its entries in the schedules, and its `streams` row (a
    /// fork's source then counts one fork less).
    fn forget_row(&mut self, key: u128, old: &RecordingMeta) -> Result<()> {
        if let Some(expires) = old.expires_at_ms {
            self.expiry
                .open_mut()?
                .remove((expires, key))
                .map_err(Error::storage)?;
        }
        self.started
            .open_mut()?
            .remove((old.created_ms, key))
            .map_err(Error::storage)?;
        self.set_meta(key, None);
        self.forget_seal(key)?;
        if let Some(row) = self.stream_row(key)? {
            self.streams
                .open_mut()?
                .remove(key)
                .map_err(Error::storage)?;
            if let Some(fork) = row.fork {
                self.release_fork(fork.source)?;
            }
        }
        Ok(())
    }

    fn bury(&mut self, key: u128, tombstone: &schema::Tombstone) -> Result<()> {
        self.forget_tombstone(key)?;
        let bytes = encode_tombstone(tombstone)?;
        self.tombstones
            .open_mut()?
            .insert(key, bytes.as_slice())
            .map_err(Error::storage)?;
        self.tombstone_expiry
            .open_mut()?
            .insert((tombstone.forgotten_at_ms, key), ())
            .map_err(Error::storage)?;
        Ok(())
    }

    fn forget_tombstone(&mut self, key: u128) -> Result<()> {
        let removed = self
            .tombstones
            .open_mut()?
            .remove(key)
            .map_err(Error::storage)?;
        if let Some(bytes) = removed {
            let old = decode_tombstone(bytes.value())?;
            drop(bytes);
            self.tombstone_expiry
                .open_mut()?
                .remove((old.forgotten_at_ms, key))
                .map_err(Error::storage)?;
        }
        Ok(())
    }

    /// Whether `key` has chunks in `chunks` (folded ones).
    fn has_chunks(&self, key: u128) -> Result<bool> {
        let mut range = self
            .chunks
            .open()?
            .range((key, 0)..=(key, u64::MAX))
            .map_err(Error::storage)?;
        Ok(range.next().is_some())
    }

    /// `(chunk count, byte length)` of `key` after what this transaction appended to it.
    pub(super) fn appended(&self, key: u128) -> Option<(u64, u64)> {
        self.appended.get(&key).copied()
    }
}

fn missing_row(key: u128) -> Error {
    Error::Corrupt {
        detail: format!("live recording {key:032x} has no recordings row"),
    }
}
