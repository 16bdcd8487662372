//! The store's reads: a conversation's row or tombstone, pages of rows, and a recording's
//! chunks (a range, or the one holding a byte offset), each in one read transaction on a
//! blocking thread.
use super::Store;
use super::listing::{self, Lookup, Page, PageToken};
use super::live::Chunk;
use super::schema::{self, RecordingMeta};
use super::stored_chunks::{self, StoredChunks};
use crate::error::{Error, Result};
use crate::status::Status;

impl Store {
    /// The stored meta of conversation `key`'s latest recording. For a live one, the chunk
    /// count and byte length are what is committed now (the row itself holds them only once
    /// the recording has ended).
    ///
    /// Fails with a storage error.
    pub async fn meta(&self, key: u128) -> Result<Option<RecordingMeta>> {
        Ok(stored(self.lookup(key).await?))
    }

    /// Conversation `key`'s latest recording as [`meta`](Self::meta) reads it, or its
    /// tombstone, in one read.
    ///
    /// Fails with a storage error.
    pub async fn lookup(&self, key: u128) -> Result<Lookup> {
        let journal = self.inner.journal.last(key);
        self.read(move |txn| listing::lookup(txn, key, journal))
            .await
    }

    /// As [`meta`](Self::meta) for each of `keys`, in order, in one read.
    ///
    /// Fails with a storage error.
    pub async fn metas(&self, keys: Vec<u128>) -> Result<Vec<Option<RecordingMeta>>> {
        let journal: Vec<_> = keys
            .iter()
            .map(|key| self.inner.journal.last(*key))
            .collect();
        self.read(move |txn| {
            keys.into_iter()
                .zip(journal)
                .map(|(key, journal)| Ok(stored(listing::lookup(txn, key, journal)?)))
                .collect()
        })
        .await
    }

    /// Up to `limit` stored recordings in start order, after `after` (from the first when
    /// `None`), only those with status `only` if given. Looks at no more than `scan` rows, so
    /// a page may come back short (even empty) with a token to go on from.
    ///
    /// Fails with a storage error.
    pub async fn list(
        &self,
        after: Option<PageToken>,
        limit: usize,
        only: Option<Status>,
        scan: usize,
    ) -> Result<Page> {
        self.read(move |txn| listing::page(txn, after, limit, only, scan))
            .await
    }

    /// Committed chunks of recording `generation` of `key`, from chunk `from` on, stopping
    /// after `max_bytes` (at least one chunk is returned when any is there).
    ///
    /// Fails with `Superseded` if the conversation now holds another recording, or
    /// `RecordingNotFound` if it was deleted or the sweeper is deleting it.
    pub async fn read_chunks(
        &self,
        key: u128,
        generation: u64,
        from: u64,
        max_bytes: usize,
    ) -> Result<Vec<Chunk>> {
        // Every stored chunk holds at least a byte, but take a few more in case one is empty.
        let journal = self
            .inner
            .journal
            .view(key, from, max_bytes.saturating_add(64));
        let inner = self.inner.clone();
        self.read(move |txn| {
            let meta = check_generation(txn, key, generation)?;
            let chunks = StoredChunks::open(txn, key, &meta, journal)?;
            chunks.read_from(from, max_bytes, Some(&inner.read_cache))
        })
        .await
    }

    /// The recordings live in the store now, with what is committed of each (on a node of a
    /// cluster that comes to lead, those produced through the node that led before).
    ///
    /// Fails with a storage error.
    pub async fn live_recordings(&self) -> Result<Vec<super::RecoveredLive>> {
        let mut views = self.inner.journal.newest();
        self.read(move |txn| super::recovery::live_recordings(txn, &mut views))
            .await
    }

    /// Where recording `generation` of `key` stands: its status, and its committed chunk count
    /// and length (read off its chunks while it is live, off its row once it has ended).
    ///
    /// Fails as [`read_chunks`](Self::read_chunks) does.
    pub async fn progress(&self, key: u128, generation: u64) -> Result<(Status, u64, u64)> {
        let journal = self.inner.journal.last(key);
        self.read(move |txn| {
            let meta = check_generation(txn, key, generation)?;
            if !meta.status.is_live() {
                return Ok((meta.status, meta.chunk_count, meta.byte_len));
            }
            let journal = journal.of_generation(generation);
            let (chunks, bytes) = StoredChunks::open(txn, key, &meta, journal)?.progress()?;
            Ok((meta.status, chunks, bytes))
        })
        .await
    }

    /// The index of the chunk holding byte `offset` among the first `chunk_count` chunks of
    /// recording `generation` of `key`, by binary search over chunk start offsets (never a scan
    /// from the start). `offset` must be below the committed length.
    ///
    /// Fails as [`read_chunks`](Self::read_chunks) does.
    pub async fn locate(
        &self,
        key: u128,
        generation: u64,
        chunk_count: u64,
        offset: u64,
    ) -> Result<u64> {
        let journal = self.inner.journal.view(key, 0, usize::MAX);
        self.read(move |txn| {
            let meta = check_generation(txn, key, generation)?;
            let chunks = StoredChunks::open(txn, key, &meta, journal)?;
            // Invariant: chunk `low` starts at or before `offset`; chunk `high` starts after it.
            let (mut low, mut high) = (0, chunk_count);
            while high - low > 1 {
                let mid = low + (high - low) / 2;
                let start = chunks
                    .offset_of(mid)?
                    .ok_or_else(|| stored_chunks::being_collected(key))?;
                if start <= offset {
                    low = mid;
                } else {
                    high = mid;
                }
            }
            Ok(low)
        })
        .await
    }

    pub(super) async fn read<T: Send + 'static>(
        &self,
        read: impl FnOnce(&redb::ReadTransaction) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let db = self.inner.db.clone();
        tokio::task::spawn_blocking(move || db.read(read))
            .await
            .map_err(Error::Task)?
    }
}

/// The row of recording `generation` of `key`.
///
/// Fails with `Superseded` when the conversation holds another recording now, and
/// `RecordingNotFound` when it is deleted or gone.
fn check_generation(
    txn: &redb::ReadTransaction,
    key: u128,
    generation: u64,
) -> Result<RecordingMeta> {
    let recordings = txn.open_table(schema::RECORDINGS).map_err(Error::storage)?;
    let meta = match recordings.get(key).map_err(Error::storage)? {
        Some(bytes) => schema::decode_meta(bytes.value())?,
        None => return Err(stored_chunks::being_collected(key)),
    };
    if meta.generation != generation {
        return Err(Error::Superseded);
    }
    if meta.status == Status::Deleted {
        return Err(Error::RecordingNotFound {
            id: uuid::Uuid::from_u128(key).to_string(),
            why: crate::error::Absence::Deleted {
                at_ms: meta.updated_ms,
            },
        });
    }
    Ok(meta)
}

/// The row a lookup found, if the recording is stored.
fn stored(lookup: Lookup) -> Option<RecordingMeta> {
    match lookup {
        Lookup::Stored(meta) => Some(meta),
        Lookup::Gone(_) | Lookup::Unknown => None,
    }
}
